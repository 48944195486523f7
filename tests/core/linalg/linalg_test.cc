// The bordered-append and rank-one primitives (docs/algorithms.md §0.5 P2/P3, §6.3 item 1) against
// factorising from scratch.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/linalg/cholesky_factor.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomInterleavedBlockSpd;
using testing::RandomMatrix;
using testing::RandomSpd;
using testing::RelativeError;

Eigen::MatrixXd Dense(const CholeskyFactor& f) {
  const Eigen::MatrixXd l = f.matrix();
  return l * l.transpose();
}

TEST(CholeskyFactorTest, AppendMatchesFactorisingTheBorderedMatrix) {
  Rng rng(7);
  const int n = 120;
  const Eigen::MatrixXd a = RandomSpd(n, rng, 1e4);
  CholeskyFactor grown;
  for (int k = 0; k < n; ++k) {
    ASSERT_TRUE(grown.Append(a.col(k).head(k), a(k, k)).ok()) << "row " << k;
  }
  Eigen::LLT<Eigen::MatrixXd> reference(a);
  EXPECT_LT(RelativeError(grown.matrix(), reference.matrixL().toDenseMatrix()), 1e-10);
  EXPECT_LT(RelativeError(Dense(grown), a), 1e-12);
  // Strict upper triangle of the exposed factor is exactly zero.
  EXPECT_EQ(grown.matrix().triangularView<Eigen::StrictlyUpper>().toDenseMatrix().norm(), 0.0);
}

TEST(CholeskyFactorTest, AppendRefusesADependentRowAndLeavesTheFactorUnchanged) {
  Rng rng(3);
  const Eigen::MatrixXd basis = RandomMatrix(5, 4, rng);
  const Eigen::MatrixXd gram = basis.transpose() * basis;  // rank 4, positive definite
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(gram).ok());
  const Eigen::MatrixXd before = f.matrix();
  // A new column equal to the first one: Schur complement 0.
  EXPECT_FALSE(f.Append(gram.col(0), gram(0, 0), 1e-12).ok());
  EXPECT_EQ(f.size(), 4);
  EXPECT_EQ(f.matrix(), before);
}

TEST(CholeskyFactorTest, RankOneUpdatesMatchRefactorisationOverManySteps) {
  Rng rng(11);
  const int n = 60;
  Eigen::MatrixXd a = RandomSpd(n, rng, 1e3);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a).ok());
  for (int step = 0; step < 2000; ++step) {
    const Eigen::VectorXd v = RandomMatrix(n, 1, rng);
    a += v * v.transpose();
    f.RankOneUpdate(v);
  }
  Eigen::LLT<Eigen::MatrixXd> reference(a);
  EXPECT_LT(RelativeError(f.matrix(), reference.matrixL().toDenseMatrix()), 1e-10);
}

// The blocked rank-k update against factorising L L^T + V V^T from scratch, for sizes below,
// at and across the panel width and for k from 2 to more than the size.
TEST(CholeskyFactorTest, RankUpdateMatchesRefactorisation) {
  Rng rng(13);
  for (int n : {1, 5, CholeskyFactor::kRankPanel, CholeskyFactor::kRankPanel + 1, 100}) {
    for (int k : {2, 3, 17, 40, 130}) {
      Eigen::MatrixXd a = RandomSpd(n, rng, 1e4);
      CholeskyFactor f;
      ASSERT_TRUE(f.Reset(a).ok());
      const Eigen::MatrixXd v = RandomMatrix(n, k, rng);
      f.RankUpdate(v);
      a += v * v.transpose();
      Eigen::LLT<Eigen::MatrixXd> reference(a);
      EXPECT_LT(RelativeError(f.matrix(), reference.matrixL().toDenseMatrix()), 1e-10)
          << "n " << n << " k " << k;
      EXPECT_TRUE((f.matrix().diagonal().array() > 0.0).all());
      EXPECT_EQ(f.matrix().triangularView<Eigen::StrictlyUpper>().toDenseMatrix().norm(), 0.0);
    }
  }
}

// The single-precision copy is L rounded, and every change to the factor is seen by the next
// call (a stale copy would give KORS leverage scores of an old dictionary).
TEST(CholeskyFactorTest, SingleLowerFollowsEveryChange) {
  Rng rng(29);
  const int n = 40;
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(RandomSpd(n, rng, 1e3)).ok());
  const auto matches = [&f](const char* after) {
    const Eigen::MatrixXf& single = f.SingleLower();
    ASSERT_EQ(single.rows(), f.size()) << after;
    ASSERT_EQ(single.cols(), f.size()) << after;
    if (f.size() == 0) return;
    const Eigen::MatrixXf expected =
        f.matrix().triangularView<Eigen::Lower>().toDenseMatrix().cast<float>();
    EXPECT_EQ((single - expected).cwiseAbs().maxCoeff(), 0.0f) << after;
  };
  matches("Reset");
  f.RankUpdate(RandomMatrix(n, 5, rng));
  matches("RankUpdate");
  f.RankOneUpdate(RandomMatrix(n, 1, rng).col(0));
  matches("RankOneUpdate");
  ASSERT_TRUE(f.RankOneDowndate(0.01 * RandomMatrix(n, 1, rng).col(0)).ok());
  matches("RankOneDowndate");
  const Eigen::MatrixXd a = f.matrix() * f.matrix().transpose();
  Eigen::VectorXd b = RandomMatrix(n, 1, rng).col(0);
  ASSERT_TRUE(f.Append(0.1 * b, 100.0 + a.trace()).ok());
  matches("Append");
  f.Truncate(n - 3);
  matches("Truncate");
  ASSERT_TRUE(f.Reset(RandomSpd(n + 2, rng, 1e3)).ok());
  matches("Reset again");
  // A copy shares the rounded matrix until one of the two changes; the other keeps its own.
  f.SingleLower();
  CholeskyFactor copy = f;
  copy.RankUpdate(RandomMatrix(f.size(), 2, rng));
  EXPECT_NE((copy.SingleLower() - f.SingleLower()).cwiseAbs().maxCoeff(), 0.0f);
  matches("a copy changed");
  Eigen::MatrixXd storage = Eigen::MatrixXd::Zero(f.capacity(), f.capacity());
  storage.topLeftCorner(f.size(), f.size()) = copy.matrix();
  ASSERT_TRUE(f.Restore(storage, f.size()).ok());
  matches("Restore");
  EXPECT_EQ((copy.SingleLower() - f.SingleLower()).cwiseAbs().maxCoeff(), 0.0f);
  f.Clear();
  matches("Clear");
}

// Many batches in a row stay as accurate as the rank-one sweeps (the learner's use), and a zero
// column or a V with zero rows (a sparse kernel column) changes nothing it should not.
TEST(CholeskyFactorTest, RankUpdatesOverManyBatchesAndZeroRows) {
  Rng rng(17);
  const int n = 70;
  Eigen::MatrixXd a = RandomSpd(n, rng, 1e3);
  CholeskyFactor batched, single;
  ASSERT_TRUE(batched.Reset(a).ok());
  ASSERT_TRUE(single.Reset(a).ok());
  for (int step = 0; step < 200; ++step) {
    Eigen::MatrixXd v = RandomMatrix(n, 8, rng);
    v.middleRows(10, 20).setZero();
    v.col(3).setZero();
    a += v * v.transpose();
    batched.RankUpdate(v);
    for (int c = 0; c < v.cols(); ++c) single.RankOneUpdate(v.col(c));
  }
  Eigen::LLT<Eigen::MatrixXd> reference(a);
  EXPECT_LT(RelativeError(batched.matrix(), reference.matrixL().toDenseMatrix()), 1e-10);
  EXPECT_LT(RelativeError(batched.matrix(), single.matrix()), 1e-10);
}

// A row of V far below round-off beside the factor's diagonal, as a Gaussian kernel's column
// gives for dictionary points far from the observation (down to subnormal numbers): the update
// stays finite and matches factorising A + V V^T, with and without the reflections' rows of Q.
// (Folding such a row divided by its squared norm, which overflowed to inf.)
TEST(CholeskyFactorTest, RankUpdateWithRowsBelowRoundOffStaysFinite) {
  Rng rng(31);
  const int n = 40, k = 6;
  const Eigen::MatrixXd a = RandomSpd(n, rng, 1e3);
  for (const double tiny : {1e-160, 1e-162, 4e-320, 1e-20}) {
    SCOPED_TRACE(absl::StrCat("tiny = ", tiny));
    Eigen::MatrixXd v = RandomMatrix(n, k, rng);
    v.row(0).setConstant(tiny);  // the first reflection of the first panel
    v.row(CholeskyFactor::kRankPanel + 1).setConstant(tiny);  // one in a later panel
    v.row(7).setZero();
    v(7, 2) = tiny;  // a row with one such entry
    const Eigen::MatrixXd want = a + v * v.transpose();
    for (const bool with_rows : {false, true}) {
      CholeskyFactor f;
      ASSERT_TRUE(f.Reset(a).ok());
      CholeskyFactor::Reflected reflected;
      f.RankUpdate(v, with_rows ? &reflected : nullptr);
      ASSERT_TRUE(f.matrix().allFinite()) << "with the rows of Q: " << with_rows;
      EXPECT_LT(RelativeError(Dense(f), want), 1e-12);
      if (with_rows) {
        EXPECT_TRUE(reflected.q21.allFinite());
        EXPECT_TRUE(reflected.q22.allFinite());
        const Eigen::MatrixXd gram =
            reflected.q21 * reflected.q21.transpose() + reflected.q22 * reflected.q22.transpose();
        EXPECT_LT((gram - Eigen::MatrixXd::Identity(k, k)).norm(), 1e-12);
      }
    }
  }
}

// The rows of Q that RankUpdate returns, against their definitions: q21^T = L'^-1 V (a solve on
// the new factor) and q22 q22^T = (I + V^T (L L^T)^-1 V)^-1 (with the old one), over sizes that
// end inside a panel or on its edge, k = 1, zero rows and a zero column; and the factor itself
// is the one RankUpdate without them makes (bit for bit for k > 1).
TEST(CholeskyFactorTest, RankUpdateReturnsTheReflectionsRowsOfQ) {
  Rng rng(29);
  for (const auto& [n, k] : {std::pair{5, 3}, std::pair{CholeskyFactor::kRankPanel, 4},
                             std::pair{77, 1}, std::pair{77, 12}, std::pair{130, 40}}) {
    SCOPED_TRACE(absl::StrCat("n = ", n, ", k = ", k));
    const Eigen::MatrixXd a = RandomSpd(n, rng, 1e3);
    Eigen::MatrixXd v = RandomMatrix(n, k, rng);
    v.topRows(std::min(n, 3)).setZero();
    if (k > 2) v.col(1).setZero();
    CholeskyFactor with, without;
    ASSERT_TRUE(with.Reset(a).ok());
    ASSERT_TRUE(without.Reset(a).ok());
    const Eigen::MatrixXd old_lower = with.matrix();
    CholeskyFactor::Reflected reflected;
    with.RankUpdate(v, &reflected);
    without.RankUpdate(v);
    if (k > 1) {
      EXPECT_TRUE(with.matrix() == without.matrix());
    } else {  // without them, one column takes the rotations' sweep
      EXPECT_LT(RelativeError(with.matrix(), without.matrix()), 1e-13);
    }
    ASSERT_EQ(reflected.q21.rows(), k);
    ASSERT_EQ(reflected.q21.cols(), n);
    Eigen::MatrixXd w_new = v;
    with.matrix().triangularView<Eigen::Lower>().solveInPlace(w_new);
    EXPECT_LT(RelativeError(reflected.q21.transpose(), w_new), 1e-12);
    Eigen::MatrixXd w_old = v;
    old_lower.triangularView<Eigen::Lower>().solveInPlace(w_old);
    const Eigen::MatrixXd s = Eigen::MatrixXd::Identity(k, k) + w_old.transpose() * w_old;
    EXPECT_LT(RelativeError(reflected.q22 * reflected.q22.transpose(), s.inverse()), 1e-12);
    // The rows are orthonormal: q21 q21^T + q22 q22^T = I.
    const Eigen::MatrixXd gram =
        reflected.q21 * reflected.q21.transpose() + reflected.q22 * reflected.q22.transpose();
    EXPECT_LT((gram - Eigen::MatrixXd::Identity(k, k)).norm(), 1e-12);
  }
}

// A matrix that is block diagonal up to the order of its rows (three interleaved components,
// as dictionary points of users in different graph components): a union of components
// separates, a part of one does not, and an update with V zero off the support, done on the
// gathered block and written back, matches the update of the whole factor and factorising
// A + V V^T from scratch, leaves the other component's entries bit for bit as they were, and
// the block's solves are the whole factor's.
TEST(CholeskyFactorTest, AnUpdateOnASeparatedBlockMatchesTheWholeFactor) {
  Rng rng(23);
  const int n = 90;
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(n, n);
  std::vector<int> members[3];
  for (int i = 0; i < n; ++i) members[i % 3].push_back(i);
  for (const std::vector<int>& component : members) {
    const int s = static_cast<int>(component.size());
    const Eigen::MatrixXd block = RandomSpd(s, rng, 1e3);
    for (int r = 0; r < s; ++r) {
      for (int c = 0; c < s; ++c) a(component[r], component[c]) = block(r, c);
    }
  }
  std::vector<int> support;  // components 0 and 2
  for (int i = 0; i < n; ++i) {
    if (i % 3 != 1) support.push_back(i);
  }
  CholeskyFactor whole, on_block;
  ASSERT_TRUE(whole.Reset(a).ok());
  ASSERT_TRUE(on_block.Reset(a).ok());
  EXPECT_TRUE(whole.Separates(support));
  EXPECT_TRUE(whole.Separates(members[1]));
  EXPECT_TRUE(whole.Separates({}));
  std::vector<int> part_of_one(members[0].begin(), members[0].begin() + 10);
  EXPECT_FALSE(whole.Separates(part_of_one));
  std::vector<int> mixed = members[1];
  mixed.push_back(members[0].back());
  std::sort(mixed.begin(), mixed.end());
  EXPECT_FALSE(whole.Separates(mixed));

  EXPECT_TRUE(on_block.Separates(members[0]));  // its components are now kept up to date
  const Eigen::MatrixXd before = whole.matrix();
  for (int step = 0; step < 20; ++step) {
    Eigen::MatrixXd v = Eigen::MatrixXd::Zero(n, 7);
    for (int i : support) v.row(i) = RandomMatrix(1, 7, rng);
    a += v * v.transpose();
    whole.RankUpdate(v);
    Eigen::MatrixXd block = on_block.GatherLower(support);
    Eigen::MatrixXd v_block(static_cast<Eigen::Index>(support.size()), 7);
    for (size_t r = 0; r < support.size(); ++r) v_block.row(r) = v.row(support[r]);
    CholeskyFactor::RankUpdateLower(block, v_block);
    on_block.ScatterLower(support, block);
  }
  Eigen::LLT<Eigen::MatrixXd> reference(a);
  EXPECT_LT(RelativeError(on_block.matrix(), whole.matrix()), 1e-12);
  EXPECT_LT(RelativeError(on_block.matrix(), reference.matrixL().toDenseMatrix()), 1e-10);
  EXPECT_TRUE(on_block.Separates(support));
  // The updates linked components 0 and 2: neither separates alone any more, 1 still does;
  // the whole factor, whose components are found afresh, agrees.
  EXPECT_FALSE(on_block.Separates(members[0]));
  EXPECT_FALSE(on_block.Separates(members[2]));
  EXPECT_TRUE(on_block.Separates(members[1]));
  EXPECT_FALSE(whole.Separates(members[0]));
  EXPECT_TRUE(whole.Separates(members[1]));
  for (int r : members[1]) {
    for (int c = 0; c < n; ++c) EXPECT_EQ(on_block.matrix()(r, c), before(r, c));
  }
  // The block's forward solve is the whole factor's, which is zero off the support.
  Eigen::VectorXd b = Eigen::VectorXd::Zero(n);
  for (int i : support) b(i) = rng.Normal();
  Eigen::VectorXd x = b;
  on_block.ForwardSolveInPlace(x);
  Eigen::VectorXd x_block(static_cast<Eigen::Index>(support.size()));
  for (size_t r = 0; r < support.size(); ++r) x_block(r) = b(support[r]);
  on_block.GatherLower(support).triangularView<Eigen::Lower>().solveInPlace(x_block);
  for (size_t r = 0; r < support.size(); ++r) EXPECT_NEAR(x(support[r]), x_block(r), 1e-12);
  for (int i : members[1]) EXPECT_EQ(x(i), 0.0);
  // GatherLowerBlock reads single precision too, with zeros above the diagonal.
  const Eigen::MatrixXf single = GatherLowerBlock(on_block.SingleLower(), members[1]);
  EXPECT_EQ(single(0, 1), 0.0f);
  EXPECT_EQ(single(1, 0), static_cast<float>(on_block.matrix()(members[1][1], members[1][0])));
}

TEST(CholeskyFactorTest, DowndateUndoesUpdateAndRefusesIndefiniteResults) {
  Rng rng(5);
  const int n = 30;
  const Eigen::MatrixXd a = RandomSpd(n, rng, 10.0);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a).ok());
  const Eigen::VectorXd v = RandomMatrix(n, 1, rng);
  f.RankOneUpdate(v);
  ASSERT_TRUE(f.RankOneDowndate(v).ok());
  EXPECT_LT(RelativeError(Dense(f), a), 1e-12);

  // Removing more than is there must fail and leave the factor as it was.
  const Eigen::MatrixXd before = f.matrix();
  Eigen::VectorXd too_big = Eigen::VectorXd::Zero(n);
  too_big(3) = 2.0 * std::sqrt(a(3, 3));
  EXPECT_FALSE(f.RankOneDowndate(too_big).ok());
  EXPECT_EQ(f.matrix(), before);
}

TEST(CholeskyFactorTest, SolveAndLogDeterminant) {
  Rng rng(9);
  const int n = 40;
  const Eigen::MatrixXd a = RandomSpd(n, rng, 1e3);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a).ok());
  const Eigen::VectorXd b = RandomMatrix(n, 1, rng);
  EXPECT_LT(RelativeError(f.Solve(b), a.fullPivLu().solve(b)), 1e-10);
  EXPECT_NEAR(f.LogDeterminant(), std::log(a.determinant()), 1e-9);
}

TEST(CholeskyFactorTest, TruncateUndoesAppend) {
  Rng rng(2);
  const Eigen::MatrixXd a = RandomSpd(6, rng);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a.topLeftCorner(5, 5)).ok());
  const Eigen::MatrixXd before = f.matrix();
  ASSERT_TRUE(f.Append(a.col(5).head(5), a(5, 5)).ok());
  f.Truncate(5);
  EXPECT_EQ(f.matrix(), before);
}

// Separates' components through Append (a new row joins what its non-zeros reach) and through
// an update of the whole factor (components found again).
TEST(CholeskyFactorTest, SeparatesFollowsAppendsAndWholeUpdates) {
  Rng rng(29);
  Eigen::MatrixXd a = Eigen::MatrixXd::Zero(6, 6);
  a.topLeftCorner(3, 3) = RandomSpd(3, rng, 10.0);
  a.bottomRightCorner(3, 3) = RandomSpd(3, rng, 10.0);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a).ok());
  EXPECT_TRUE(f.Separates({0, 1, 2}));
  EXPECT_TRUE(f.Separates({3, 4, 5}));
  // Row 6 on its own; row 7 links row 1 (component {0, 1, 2}) with row 6.
  ASSERT_TRUE(f.Append(Eigen::VectorXd::Zero(6), 2.0).ok());
  EXPECT_TRUE(f.Separates({6}));
  EXPECT_TRUE(f.Separates({0, 1, 2}));
  Eigen::VectorXd b = Eigen::VectorXd::Zero(7);
  b(1) = 0.3;
  b(6) = 0.2;
  ASSERT_TRUE(f.Append(b, 5.0).ok());
  EXPECT_FALSE(f.Separates({0, 1, 2}));
  EXPECT_FALSE(f.Separates({6}));
  EXPECT_TRUE(f.Separates({0, 1, 2, 6, 7}));
  EXPECT_TRUE(f.Separates({3, 4, 5}));
  // Updates on one component keep the others apart; one that reaches two joins them.
  Eigen::MatrixXd v = Eigen::MatrixXd::Zero(8, 2);
  v(3, 0) = 0.4;
  v(5, 1) = -0.2;
  f.RankUpdate(v);
  EXPECT_TRUE(f.Separates({3, 4, 5}));
  Eigen::VectorXd w = Eigen::VectorXd::Zero(8);
  w(4) = 0.1;
  ASSERT_TRUE(f.RankOneDowndate(w).ok());
  EXPECT_TRUE(f.Separates({3, 4, 5}));
  EXPECT_TRUE(f.Separates({0, 1, 2, 6, 7}));
  w(7) = 0.1;
  f.RankOneUpdate(w);
  EXPECT_FALSE(f.Separates({3, 4, 5}));
  EXPECT_TRUE(f.Separates({0, 1, 2, 3, 4, 5, 6, 7}));
  // Supports that cannot be proved separate this way.
  EXPECT_FALSE(f.Separates({0, 0, 1, 2, 3, 4, 5, 6, 7}));  // a repeated row
  EXPECT_FALSE(f.Separates({0, 1, 2, 3, 4, 5, 6, 8}));     // past the factor
  // Truncating back to the first two blocks: found again from L; the link went through rows
  // 6 and 7, which are gone.
  f.Truncate(6);
  EXPECT_TRUE(f.Separates({3, 4, 5}));
  EXPECT_TRUE(f.Separates({0, 1, 2}));
  // A restored factor's components are its own, not the ones before.
  Eigen::MatrixXd dense = Eigen::MatrixXd::Identity(6, 6);
  dense(4, 1) = 0.5;
  ASSERT_TRUE(f.Restore(dense, 6).ok());
  EXPECT_FALSE(f.Separates({3, 4, 5}));
  EXPECT_TRUE(f.Separates({0, 2, 3, 5}));
}

// The components of a pattern, their order and sizes, and the early stop once all are one.
TEST(DisjointSetsTest, GroupsFollowTheLowerPattern) {
  Eigen::MatrixXd a = Eigen::MatrixXd::Identity(7, 7);
  a(4, 1) = 0.5;   // {1, 4}
  a(6, 4) = -1.0;  // {1, 4, 6}
  a(5, 0) = 2.0;   // {0, 5}
  a(0, 5) = 3.0;   // the upper triangle is not read
  a(2, 3) = 1.0;
  DisjointSets sets(7);
  sets.JoinLowerPattern(a);
  EXPECT_EQ(sets.Groups(), (std::vector<std::vector<int>>{{0, 5}, {1, 4, 6}, {2}, {3}}));
  EXPECT_EQ(sets.SetSize(6), 3);
  EXPECT_FALSE(sets.AllOne());
  // Two patterns joined: a second matrix links 2 with 0.
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(7, 7);
  b(2, 0) = 1e-300;
  EXPECT_EQ(LowerPatternGroups(7, a, b),
            (std::vector<std::vector<int>>{{0, 2, 5}, {1, 4, 6}, {3}}));
  EXPECT_TRUE(BlocksPay(LowerPatternGroups(7, a, b), 7));
  // More than half the rows in one group: not worth blocks.
  b(3, 1) = 1.0;
  EXPECT_FALSE(BlocksPay(LowerPatternGroups(7, a, b), 7));
  EXPECT_FALSE(BlocksPay({{0, 1, 2}}, 6));
  sets.Add();
  EXPECT_EQ(sets.size(), 8);
  EXPECT_EQ(sets.SetSize(7), 1);
  // A dense column joins everything, and the scan stops there.
  DisjointSets all(5);
  all.JoinLowerPattern(Eigen::MatrixXd::Ones(5, 5));
  EXPECT_TRUE(all.AllOne());
  EXPECT_EQ(all.Groups().size(), 1u);
}

// A matrix over interleaved components (users in separate graph components) is factored block
// by block: the factor is the dense one, zero across components, and a block that is not
// positive definite fails the whole reset, leaving the factor as it was.
TEST(CholeskyFactorTest, ResetFactorsInterleavedComponentsBlockByBlock) {
  Rng rng(61);
  const int n = 45;
  const int parts = 5;
  Eigen::MatrixXd a = RandomInterleavedBlockSpd(n, parts, rng, 100.0);
  CholeskyFactor f;
  ASSERT_TRUE(f.Reset(a).ok());
  EXPECT_LT(RelativeError(Dense(f), a), 1e-13);
  const Eigen::MatrixXd dense = a.llt().matrixL();
  EXPECT_LT(RelativeError(Eigen::MatrixXd(f.matrix()), dense), 1e-12);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      if (i % parts != j % parts || j > i) {
        ASSERT_EQ(f.matrix()(i, j), 0.0) << i << "," << j;
      }
    }
  }
  std::vector<int> first;
  for (int i = 0; i < n; i += parts) first.push_back(i);
  EXPECT_TRUE(f.Separates(first));
  // One component made indefinite: the reset fails and the factor stays.
  const Eigen::MatrixXd before = f.matrix();
  Eigen::MatrixXd bad = a;
  bad(7, 7) = -1.0;
  EXPECT_EQ(f.Reset(bad).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.matrix(), before);
  // A connected matrix takes the dense path and still factors exactly.
  Eigen::MatrixXd joined = a;
  for (int i = 1; i < n; ++i) joined(i, i - 1) = joined(i - 1, i) = 0.1;
  joined.diagonal().array() += 1.0;
  ASSERT_TRUE(f.Reset(joined).ok());
  EXPECT_LT(RelativeError(Dense(f), joined), 1e-13);
  EXPECT_FALSE(f.Separates(first));
}

}  // namespace
}  // namespace graphbandit
