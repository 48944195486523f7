// The scoring form B = K_ZZ^-1 - lambda M^-1 (core/linalg/variance_form.h) against fresh dense
// inverses after long sequences of rank-one updates and downdates, its copy-on-write sharing
// with published scorers, its serialisation, and the Nystrom learner scored through it against
// the projected regression computed directly from the observations.
#include "core/linalg/variance_form.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/nystrom_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomInterleavedBlockSpd;
using testing::RandomMatrix;
using testing::RandomSpd;
using testing::RelativeError;

// B from a snapshot, materialised: B0 + U S U^T over the snapshot's columns.
Eigen::MatrixXd Materialise(const VarianceForm::Snapshot& s) {
  Eigen::MatrixXd b = s.base->selfadjointView<Eigen::Upper>();
  if (s.rank > 0) {
    const auto u = s.corrections->u.leftCols(s.rank);
    b += u * s.corrections->sign.head(s.rank).asDiagonal() * u.transpose();
  }
  return b;
}

Eigen::MatrixXd Lower(const Eigen::MatrixXd& spd) { return spd.llt().matrixL(); }

TEST(VarianceFormTest, UpdatesAndDowndatesMatchAFreshInverse) {
  Rng rng(21);
  const int m = 12;
  const double ridge = 0.3;
  const Eigen::MatrixXd kzz = RandomSpd(m, rng, 50.0);
  Eigen::MatrixXd mm = ridge * kzz + RandomSpd(m, rng, 10.0);
  VarianceForm form;
  form.Rebuild(Lower(kzz), Lower(mm), ridge);
  std::vector<Eigen::VectorXd> added;
  int folds_seen = 0;
  for (int step = 0; step < 300; ++step) {
    // Every fourth step removes an earlier update (M stays positive definite).
    const bool downdate = step % 4 == 3 && !added.empty();
    Eigen::VectorXd v;
    if (downdate) {
      v = added.back();
      added.pop_back();
    } else {
      v = RandomMatrix(m, 1, rng).col(0) * 0.5;
      added.push_back(v);
    }
    const double sign = downdate ? -1.0 : 1.0;
    const Eigen::VectorXd x = mm.llt().solve(v);
    const int rank_before = form.rank();
    ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, sign));
    if (form.rank() <= rank_before) ++folds_seen;
    mm += sign * v * v.transpose();
    const Eigen::MatrixXd exact = kzz.inverse() - ridge * mm.inverse();
    ASSERT_LT(RelativeError(Materialise(form.snapshot()), exact), 1e-9) << "step " << step;
  }
  EXPECT_GT(folds_seen, 10);  // the buffer filled and was folded into B0 many times
  // A rebuild from the factors gives the same matrix.
  VarianceForm fresh;
  fresh.Rebuild(Lower(kzz), Lower(mm), ridge);
  EXPECT_LT(RelativeError(Materialise(fresh.snapshot()), Materialise(form.snapshot())), 1e-9);
}

// K_ZZ and M block diagonal over four interleaved components (dictionary points of users in
// separate graph components), and every update within one component: the folds then touch only
// that component's rows of B0 (and a batch wider than the buffer goes straight into B0 the same
// way). Updates, downdates and both kinds of fold match a fresh inverse throughout.
TEST(VarianceFormTest, FoldsOfUpdatesWithinOneComponentMatchAFreshInverse) {
  Rng rng(41);
  const int m = 48;
  const double ridge = 0.3;
  std::vector<int> members[4];
  for (int i = 0; i < m; ++i) members[i % 4].push_back(i);
  const Eigen::MatrixXd kzz = RandomInterleavedBlockSpd(m, 4, rng, 50.0);
  Eigen::MatrixXd mm = ridge * kzz + RandomInterleavedBlockSpd(m, 4, rng, 10.0);
  VarianceForm form;
  form.Rebuild(Lower(kzz), Lower(mm), ridge);
  ASSERT_EQ(form.fold_rank(), 4);
  std::vector<Eigen::VectorXd> added;
  for (int step = 0; step < 120; ++step) {
    const std::vector<int>& component = members[step % 4];
    if (step % 5 == 4 && !added.empty()) {  // a downdate: a fold with both signs follows
      const Eigen::VectorXd v = added.back();
      added.pop_back();
      const Eigen::VectorXd x = mm.llt().solve(v);
      ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, -1.0));
      mm -= v * v.transpose();
    } else {
      const int k = step % 7 == 6 ? 6 : 3;  // 6 > fold_rank(): straight into B0
      Eigen::MatrixXd v = Eigen::MatrixXd::Zero(m, k);
      for (int i : component) v.row(i) = RandomMatrix(1, k, rng) * 0.5;
      const Eigen::MatrixXd x = mm.llt().solve(v);
      ASSERT_TRUE(form.RankUpdate(x, v.transpose() * x, ridge));
      mm += v * v.transpose();
      added.push_back(v.col(0));  // a later downdate removes it again
    }
    const Eigen::MatrixXd exact = kzz.inverse() - ridge * mm.inverse();
    ASSERT_LT(RelativeError(Materialise(form.snapshot()), exact), 1e-9) << "step " << step;
  }
}

// B0 rebuilt from factors over interleaved components, block by block, is the dense inverse.
// The blocks are the components of both factors joined: K_ZZ's are finer than M's here, and in
// the second case M's are finer than K_ZZ's (either must be covered).
TEST(VarianceFormTest, RebuildOverComponentsMatchesTheDenseInverse) {
  Rng rng(67);
  const int m = 48;
  const double ridge = 0.3;
  for (const auto& [zz_parts, m_parts] : {std::pair{8, 4}, std::pair{4, 8}, std::pair{6, 6}}) {
    const Eigen::MatrixXd kzz = RandomInterleavedBlockSpd(m, zz_parts, rng, 50.0);
    const Eigen::MatrixXd mm = RandomInterleavedBlockSpd(m, m_parts, rng, 10.0);
    VarianceForm form;
    form.Rebuild(Lower(kzz), Lower(mm), ridge);
    const Eigen::MatrixXd exact = kzz.inverse() - ridge * mm.inverse();
    EXPECT_LT(RelativeError(Materialise(form.snapshot()), exact), 1e-10)
        << zz_parts << " and " << m_parts << " parts";
    // Only B0's upper triangle is kept, and nothing across the joined components.
    const Eigen::MatrixXd& base = *form.snapshot().base;
    const int parts = std::min(zz_parts, m_parts);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < i; ++j) ASSERT_EQ(base(i, j), 0.0);
      for (int j = i; j < m; ++j) {
        if (i % parts != j % parts) {
          ASSERT_EQ(base(i, j), 0.0) << i << "," << j;
        }
      }
    }
  }
}

// The single-precision copy of B0 stays the rounding of B0's upper triangle through batches on
// separate components, whether the writer reuses an older copy (only the entries the changes
// since touched are rounded again) or a snapshot still holds it (a fresh copy); through folds
// with downdates, an exact rebuild at the same size, and copies handed back more than the kept
// number of versions late. What held snapshots see never changes.
TEST(VarianceFormTest, SingleCopyFollowsUpdatesOnComponents) {
  Rng rng(71);
  const int m = 64;
  const double ridge = 0.3;
  const int parts = 8;
  const Eigen::MatrixXd kzz = RandomInterleavedBlockSpd(m, parts, rng, 50.0);
  Eigen::MatrixXd mm = ridge * kzz;
  mm.diagonal().array() += 1.0;
  VarianceForm form;
  form.Rebuild(Lower(kzz), Lower(mm), ridge);
  const auto upper = [](const Eigen::MatrixXf& a) -> Eigen::MatrixXf {
    return a.triangularView<Eigen::Upper>();
  };
  std::deque<std::pair<VarianceForm::Snapshot, Eigen::MatrixXf>> held;
  std::vector<Eigen::VectorXd> added;  // single columns, for downdates
  for (int step = 0; step < 80; ++step) {
    if (step == 40) {
      form.Rebuild(Lower(kzz), Lower(mm), ridge);  // structural, same size
    } else if (step % 11 == 5 && !added.empty()) {
      // A downdate into the buffer: the next fold has a column of each sign.
      const Eigen::VectorXd v = added.back();
      added.pop_back();
      const Eigen::VectorXd x = mm.llt().solve(v);
      ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, -1.0));
      mm -= v * v.transpose();
    } else {
      // Batches wider than the buffer go straight into B0 (k > fold_rank()); narrower ones fold
      // later. Each touches one or two components.
      const int k = step % 3 == 0 ? 2 : form.fold_rank() + 3;
      Eigen::MatrixXd v = Eigen::MatrixXd::Zero(m, k);
      for (int i = 0; i < m; ++i) {
        if (i % parts == step % parts || (step % 4 == 0 && i % parts == (step + 3) % parts)) {
          v.row(i) = RandomMatrix(1, k, rng) * 0.3;
        }
      }
      const Eigen::MatrixXd x = mm.llt().solve(v);
      ASSERT_TRUE(form.RankUpdate(x, v.transpose() * x, ridge));
      mm += v * v.transpose();
      if (k == 2) added.push_back(v.col(0));
    }
    // Steps 0-19 hold some snapshots over a few batches. Steps 20-39 hold every snapshot for
    // two, as a server's published view does: the writer then brings up to date a copy two or
    // three versions old. From step 40 every snapshot is held for seven, so that the copies
    // come back older than the versions kept.
    const bool hold = step < 20 ? step % 5 == 1 : true;
    if (hold) {
      const VarianceForm::Snapshot s = form.snapshot();
      held.emplace_back(s, upper(*s.base_single));
    }
    for (const auto& [snapshot, copy] : held) {
      ASSERT_TRUE(upper(*snapshot.base_single) == copy) << "step " << step;
    }
    if (step < 20) {
      if (step % 7 == 2) held.clear();
    } else {
      while (held.size() > (step < 40 ? 2u : 7u)) held.pop_front();
    }
    const VarianceForm::Snapshot s = form.snapshot();
    ASSERT_NE(s.base, nullptr);
    ASSERT_NE(s.base_single, nullptr);
    const Eigen::MatrixXf expected = s.base->cast<float>();
    for (int c = 0; c < m; ++c) {
      for (int r = 0; r <= c; ++r) {
        ASSERT_EQ((*s.base_single)(r, c), expected(r, c))
            << "step " << step << " at " << r << "," << c;
      }
    }
    const Eigen::MatrixXd exact = kzz.inverse() - ridge * mm.inverse();
    ASSERT_LT(RelativeError(Materialise(s), exact), 1e-9) << "step " << step;
  }
}

// Dictionary growth borders K_ZZ and M with new rows; Grow must give the matrix a rebuild from
// the grown factors gives, with corrections pending and for one or several points at once, and
// leave earlier snapshots as they were.
TEST(VarianceFormTest, GrowingByBorderedFactorsMatchesARebuild) {
  Rng rng(34);
  const double ridge = 0.25;
  const int final_size = 40;
  // The grown matrices, of which each step takes a larger leading block.
  const Eigen::MatrixXd kzz = RandomSpd(final_size, rng, 30.0);
  Eigen::MatrixXd mm = ridge * kzz + RandomSpd(final_size, rng, 10.0);
  int size = 5;
  VarianceForm form;
  form.Rebuild(Lower(kzz.topLeftCorner(size, size)), Lower(mm.topLeftCorner(size, size)), ridge);
  const std::vector<int> steps = {1, 3, 1, 7, 2, 1, 1, 4, 8, 1, 2, 4};
  int grown_with_corrections = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    // A few rank-one updates first, so that the form carries corrections into the growth.
    for (int u = 0; u < static_cast<int>(i % 3) + 1; ++u) {
      const Eigen::VectorXd v = RandomMatrix(final_size, 1, rng).col(0) * 0.5;
      const Eigen::VectorXd x = mm.topLeftCorner(size, size).llt().solve(v.head(size));
      ASSERT_TRUE(form.RankOne(x, v.head(size).dot(x), ridge, 1.0));
      mm += v * v.transpose();  // the later rows of M see the observation too, as in learning
    }
    if (form.rank() > 0) ++grown_with_corrections;
    const VarianceForm::Snapshot before = form.snapshot();
    const Eigen::MatrixXd before_matrix = Materialise(before);
    const int next = size + steps[i];
    form.Grow(Lower(kzz.topLeftCorner(next, next)), Lower(mm.topLeftCorner(next, next)), ridge);
    size = next;
    ASSERT_EQ(form.size(), size);
    const Eigen::MatrixXd exact =
        kzz.topLeftCorner(size, size).inverse() - ridge * mm.topLeftCorner(size, size).inverse();
    ASSERT_LT(RelativeError(Materialise(form.snapshot()), exact), 1e-9) << "step " << i;
    EXPECT_EQ(Materialise(before), before_matrix) << "a published snapshot changed at step " << i;
    // Updates after a growth append to the grown buffer and fold into the grown base.
    Eigen::VectorXd v = RandomMatrix(size, 1, rng).col(0);
    const Eigen::VectorXd x = mm.topLeftCorner(size, size).llt().solve(v);
    ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, 1.0));
    mm.topLeftCorner(size, size) += v * v.transpose();
  }
  EXPECT_GT(grown_with_corrections, 5);
  VarianceForm fresh;
  fresh.Rebuild(Lower(kzz.topLeftCorner(size, size)), Lower(mm.topLeftCorner(size, size)), ridge);
  EXPECT_LT(RelativeError(Materialise(fresh.snapshot()), Materialise(form.snapshot())), 1e-9);
  // The grown form (base and padded corrections) saves and loads exactly.
  storage::Encoder out;
  form.Save(&out);
  const std::string bytes = out.Release();
  VarianceForm loaded;
  storage::Decoder in(bytes);
  ASSERT_TRUE(loaded.Load(&in, size));
  EXPECT_EQ(Materialise(loaded.snapshot()), Materialise(form.snapshot()));
  // An empty form rebuilds instead.
  VarianceForm empty;
  empty.Grow(Lower(kzz.topLeftCorner(size, size)), Lower(mm.topLeftCorner(size, size)), ridge);
  EXPECT_LT(RelativeError(Materialise(empty.snapshot()), Materialise(fresh.snapshot())), 1e-12);
}

// Growth across a change of the correction buffer's capacity (16 columns below 80 points would
// stay 4; at 100 it is 6) with a full buffer, growth of a form that has no corrections yet,
// and the joined points counting towards the exact rebuild.
TEST(VarianceFormTest, GrowingChangesTheBufferCapacityAndCountsTowardsTheRebuild) {
  Rng rng(35);
  const double ridge = 0.4;
  const int from = 70, to = 100;
  const Eigen::MatrixXd kzz = RandomSpd(to, rng, 30.0);
  Eigen::MatrixXd mm = ridge * kzz + RandomSpd(to, rng, 10.0);
  VarianceForm form;
  form.Rebuild(Lower(kzz.topLeftCorner(from, from)), Lower(mm.topLeftCorner(from, from)), ridge);
  ASSERT_EQ(form.fold_rank(), 4);
  for (int u = 0; u < form.fold_rank(); ++u) {  // fills the buffer: rank == capacity
    const Eigen::VectorXd v = RandomMatrix(to, 1, rng).col(0) * 0.3;
    const Eigen::VectorXd x = mm.topLeftCorner(from, from).llt().solve(v.head(from));
    ASSERT_TRUE(form.RankOne(x, v.head(from).dot(x), ridge, 1.0));
    mm += v * v.transpose();
  }
  ASSERT_EQ(form.rank(), 4);
  form.Grow(Lower(kzz), Lower(mm), ridge);
  ASSERT_EQ(form.size(), to);
  EXPECT_EQ(form.fold_rank(), 6);
  EXPECT_EQ(form.rank(), 4);  // the corrections were kept, not folded
  const Eigen::MatrixXd exact = kzz.inverse() - ridge * mm.inverse();
  EXPECT_LT(RelativeError(Materialise(form.snapshot()), exact), 1e-9);
  // The grown buffer takes two more columns before it folds, and the state saves and loads.
  for (int u = 0; u < 2; ++u) {
    const Eigen::VectorXd v = RandomMatrix(to, 1, rng).col(0) * 0.3;
    const Eigen::VectorXd x = mm.llt().solve(v);
    ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, 1.0));
    mm += v * v.transpose();
  }
  EXPECT_EQ(form.rank(), 6);
  storage::Encoder out;
  form.Save(&out);
  const std::string bytes = out.Release();
  VarianceForm loaded;
  storage::Decoder in(bytes);
  ASSERT_TRUE(loaded.Load(&in, to));
  EXPECT_EQ(Materialise(loaded.snapshot()), Materialise(form.snapshot()));
  EXPECT_LT(RelativeError(Materialise(loaded.snapshot()), kzz.inverse() - ridge * mm.inverse()),
            1e-9);

  // A form without corrections grows too; the 30 joined points count as 30 updates: the exact
  // rebuild (due after max(1,024, 32 m) updates) comes 30 updates earlier.
  const Eigen::MatrixXd mm2 = ridge * kzz + RandomSpd(to, rng, 10.0);
  VarianceForm plain;
  plain.Rebuild(Lower(kzz.topLeftCorner(from, from)), Lower(mm2.topLeftCorner(from, from)), ridge);
  plain.Grow(Lower(kzz), Lower(mm2), ridge);
  EXPECT_EQ(plain.rank(), 0);
  EXPECT_LT(RelativeError(Materialise(plain.snapshot()), kzz.inverse() - ridge * mm2.inverse()),
            1e-9);
  const Eigen::VectorXd v = RandomMatrix(to, 1, rng).col(0) * 1e-3;
  const Eigen::VectorXd x = mm2.llt().solve(v);
  int updates = 0;
  while (!plain.ExactDue()) {
    ASSERT_TRUE(plain.RankOne(x, v.dot(x), ridge, 1.0));  // the same tiny update, repeated
    ++updates;
  }
  const int64_t due =
      std::max<int64_t>(VarianceForm::kExactEvery, VarianceForm::kExactEveryPerPoint * to);
  EXPECT_EQ(updates, due - (to - from));
}

TEST(VarianceFormTest, PublishedSnapshotsNeverChange) {
  Rng rng(5);
  const int m = 20;
  const double ridge = 0.1;
  const Eigen::MatrixXd kzz = RandomSpd(m, rng, 20.0);
  Eigen::MatrixXd mm = ridge * kzz + RandomSpd(m, rng, 10.0);
  VarianceForm form;
  form.Rebuild(Lower(kzz), Lower(mm), ridge);
  std::vector<VarianceForm::Snapshot> published;
  std::vector<Eigen::MatrixXd> seen;
  for (int step = 0; step < 40; ++step) {
    const Eigen::VectorXd v = RandomMatrix(m, 1, rng).col(0);
    const Eigen::VectorXd x = mm.llt().solve(v);
    ASSERT_TRUE(form.RankOne(x, v.dot(x), ridge, 1.0));
    mm += v * v.transpose();
    published.push_back(form.snapshot());
    seen.push_back(Materialise(published.back()));
  }
  // Later updates appended to shared buffers and folded them: earlier snapshots read the same.
  for (size_t i = 0; i < published.size(); ++i) {
    EXPECT_EQ(Materialise(published[i]), seen[i]) << "snapshot " << i;
  }
}

TEST(VarianceFormTest, SaveAndLoadRoundTripAndRejectDamage) {
  Rng rng(8);
  const int m = 9;
  const Eigen::MatrixXd kzz = RandomSpd(m, rng, 20.0);
  Eigen::MatrixXd mm = 0.2 * kzz + RandomSpd(m, rng, 10.0);
  VarianceForm form;
  form.Rebuild(Lower(kzz), Lower(mm), 0.2);
  for (int step = 0; step < 6; ++step) {
    const Eigen::VectorXd v = RandomMatrix(m, 1, rng).col(0);
    const Eigen::VectorXd x = mm.llt().solve(v);
    ASSERT_TRUE(form.RankOne(x, v.dot(x), 0.2, 1.0));
    mm += v * v.transpose();
  }
  storage::Encoder out;
  form.Save(&out);
  const std::string bytes = out.Release();
  VarianceForm loaded;
  storage::Decoder in(bytes);
  ASSERT_TRUE(loaded.Load(&in, m));
  EXPECT_TRUE(in.done());
  EXPECT_EQ(loaded.rank(), form.rank());
  EXPECT_EQ(Materialise(loaded.snapshot()), Materialise(form.snapshot()));
  // The wrong size, and a truncated record, are refused.
  storage::Decoder wrong(bytes);
  EXPECT_FALSE(VarianceForm().Load(&wrong, m + 1));
  storage::Decoder cut(absl::string_view(bytes).substr(0, bytes.size() - 9));
  EXPECT_FALSE(VarianceForm().Load(&cut, m));
}

// The projected regression of nystrom_math.h, computed directly from the observations in the
// window: the dictionary's points the regression covers, M and Gamma summed afresh.
void DirectNystrom(const NystromPosterior& learner, const MultiUserKernel& kernel,
                   const Eigen::MatrixXd& window_x, const std::vector<int32_t>& window_users,
                   const Eigen::VectorXd& window_y, int32_t user, const Eigen::MatrixXd& q,
                   Eigen::VectorXd* mean, Eigen::VectorXd* sd) {
  const int mr = learner.regression_size();
  const Eigen::MatrixXd z = learner.dictionary_points().leftCols(mr);
  const std::vector<int32_t> zu(learner.dictionary_users().begin(),
                                learner.dictionary_users().begin() + mr);
  Eigen::MatrixXd kzz, kzs, kzq;
  kernel.Cross(z, zu, z, zu.data(), &kzz);
  kernel.Cross(z, zu, window_x, window_users.data(), &kzs);
  kernel.CrossForUser(z, zu, user, q, &kzq);
  const double ridge = learner.options().ridge;
  const Eigen::MatrixXd mm = kzs * kzs.transpose() + ridge * kzz;
  const Eigen::VectorXd gamma = kzs * window_y;
  *mean = kzq.transpose() * mm.ldlt().solve(gamma);
  const Eigen::VectorXd prior = kernel.Diagonal(user, q);
  const Eigen::MatrixXd a = mm.ldlt().solve(kzq), b = kzz.ldlt().solve(kzq);
  sd->resize(q.cols());
  for (int j = 0; j < q.cols(); ++j) {
    const double var = ridge * kzq.col(j).dot(a.col(j)) + prior(j) - kzq.col(j).dot(b.col(j));
    (*sd)(j) = std::sqrt(std::max(0.0, var));
  }
}

class NystromWindowTest : public ::testing::TestWithParam<bool> {};

// Short enough that the dictionary is still growing when observations start to leave it.
constexpr int kWindow = 30;

// With and without spreading each growth batch's pass over the history (where observations
// leave the window while the pass is under way).
TEST_P(NystromWindowTest, ScoresMatchTheDirectRegressionOverALongRun) {
  UserGraph graph;
  graph.EnsureUsers(6);
  for (int u = 0; u + 1 < 6; ++u) graph.SetEdge(u, u + 1, 1.0);
  const std::shared_ptr<const UserKernel> green = *GreenFunction::Build(graph, 0.5);
  NystromOptions options;
  options.ridge = 0.2;
  options.kors_mu = 0.5;
  options.max_dictionary_size = 150;
  options.max_history = kWindow;  // a sliding window: every reward beyond it is a downdate
  options.forget_evicted = true;
  options.growth_batch_divisor = 4;
  options.spread_growth_scan = GetParam();
  options.growth_scan_step = 3;  // a pass outlasts many evictions from the window
  options.seed = 9;
  const int dim = 3;
  const ArmKernel arm(KernelType::kRbf, 1.1);
  NystromPosterior learner(dim, arm, green, options);
  const MultiUserKernel kernel(arm, green);
  Rng rng(4);
  std::vector<Eigen::VectorXd> xs;
  std::vector<int32_t> us;
  std::vector<double> ys;
  const Eigen::MatrixXd base_probes = RandomMatrix(dim, 7, rng);
  int scanning = 0;  // observations after which a spread pass was under way, window full
  for (int t = 1; t <= 2600; ++t) {  // past VarianceForm::kExactEvery: folds and exact rebuilds
    Eigen::VectorXd x = RandomMatrix(dim, 1, rng).col(0);
    x(0) += 0.01 * t;  // drifting: the dictionary keeps growing into new regions
    const int32_t u = static_cast<int32_t>(rng.UniformInt(6));
    const double y = std::sin(x.sum()) + 0.1 * u + 0.05 * rng.Normal();
    ASSERT_TRUE(learner.Observe(u, x, y).ok());
    xs.push_back(x);
    us.push_back(u);
    ys.push_back(y);
    if (t > kWindow && learner.scanning() > 0) ++scanning;
    // Often while the dictionary grows, then past the exact rebuilds.
    if (!(t <= 600 && t % 25 == 0) && t != 700 && t != 1500 && t != 2600) continue;
    const int w = std::min<int>(t, kWindow);
    Eigen::MatrixXd wx(dim, w);
    Eigen::VectorXd wy(w);
    std::vector<int32_t> wu(w);
    for (int i = 0; i < w; ++i) {
      wx.col(i) = xs[t - w + i];
      wu[i] = us[t - w + i];
      wy(i) = ys[t - w + i];
    }
    Eigen::MatrixXd probes = base_probes;  // where the recent observations are
    probes.row(0).array() += 0.01 * t;
    for (int32_t user : {0, 3, 5}) {
      Eigen::VectorXd mean, sd, direct_mean, direct_sd;
      learner.Freeze()->Score(user, probes, &mean, &sd);
      DirectNystrom(learner, kernel, wx, wu, wy, user, probes, &direct_mean, &direct_sd);
      EXPECT_LT(RelativeError(mean, direct_mean, 1e-3), 1e-6) << "t " << t << " user " << user;
      EXPECT_LT(RelativeError(sd, direct_sd, 1e-3), 1e-6) << "t " << t << " user " << user;
      Eigen::VectorXd live_mean, live_sd;
      learner.Score(user, probes, &live_mean, &live_sd);
      EXPECT_EQ(live_mean, mean);
      EXPECT_EQ(live_sd, sd);
    }
  }
  EXPECT_GT(learner.dictionary_size(), 10);
  // Rows of M computed over the wrong observations show as a pending point M cannot take,
  // which rebuilds everything from the window (whole pass) or drops the point (spread), either
  // of which would hide the error from the checks above.
  EXPECT_EQ(learner.stats().growth_rebuilds, 0);
  EXPECT_EQ(learner.stats().dropped_pending, 0);
  EXPECT_EQ(learner.stats().downdate_failures, 0);
  if (GetParam()) {
    EXPECT_GT(scanning, 20);
  } else {
    EXPECT_EQ(scanning, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(GrowthScan, NystromWindowTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Spread" : "WholePass"; });

// A served learner (spread growth passes) on a smooth stream over a long history: round-off
// keeps some pending points out of M. They are dropped, not rebuilt from the history, and what
// remains is the projected regression over every observation, with consistent factors.
TEST(NystromGrowthTest, PendingPointsThatMCannotTakeAreDroppedAndTheStateStaysConsistent) {
  constexpr int kDim = 16;
  UserGraph graph;
  graph.EnsureUsers(3);
  for (int u = 0; u < 3; ++u) graph.SetEdge(u, (u + 1) % 3, 1.0);
  const std::shared_ptr<const UserKernel> green = *GreenFunction::Build(graph, 0.1);
  NystromOptions options;
  options.ridge = options.kors_mu = 0.1;
  options.growth_batch_divisor = 64;
  options.spread_growth_scan = true;
  const ArmKernel arm(KernelType::kRbf, 1.0);
  NystromPosterior learner(kDim, arm, green, options);
  const MultiUserKernel kernel(arm, green);
  Rng rng(11);
  // Features on a 3-dimensional subspace, smooth at the kernel's scale: nearly dependent
  // points abound (graphbandit-bench --mode=growth's stream).
  const Eigen::MatrixXd basis = RandomMatrix(kDim, 3, rng) / 10.0;
  Eigen::MatrixXd xs(kDim, 0);
  std::vector<int32_t> us;
  std::vector<double> ys;
  int t = 0;
  for (; t < 12000 && learner.stats().dropped_pending == 0; ++t) {
    const Eigen::VectorXd x = basis * RandomMatrix(3, 1, rng).col(0);
    const int32_t u = static_cast<int32_t>(rng.UniformInt(3));
    const double y = std::sin(x.sum()) + 0.2 * u + 0.1 * rng.Normal();
    ASSERT_TRUE(learner.Observe(u, x, y).ok());
    xs.conservativeResize(kDim, t + 1);
    xs.col(t) = x;
    us.push_back(u);
    ys.push_back(y);
  }
  ASSERT_GT(learner.stats().dropped_pending, 0) << "after " << t << " observations";
  EXPECT_LE(learner.dictionary_size() - learner.regression_size(), 2 * kMaxGrowthBatch);
  // Admission now refuses points that close to the span instead of admitting and dropping them.
  EXPECT_GT(learner.admission_guard(), 4.0 * options.min_relative_residual);
  const Eigen::MatrixXd probes = basis * RandomMatrix(3, 5, rng);
  // The mean against the direct regression. (Not the deviation: at this conditioning the direct
  // formula's k_ss - kz^T K_ZZ^-1 kz cancels to a few digits, for the whole pass as well.)
  for (int32_t user : {0, 2}) {
    Eigen::VectorXd mean, sd, direct_mean, direct_sd;
    learner.Score(user, probes, &mean, &sd);
    DirectNystrom(learner, kernel, xs, us, Eigen::Map<const Eigen::VectorXd>(ys.data(), t), user,
                  probes, &direct_mean, &direct_sd);
    EXPECT_LT(RelativeError(mean, direct_mean, 1e-3), 1e-4) << "user " << user;
  }
  // The dictionary and its factors still agree: the state round-trips (which checks their
  // sizes) and the copy scores and learns as the original does.
  NystromPosterior copy(kDim, arm, green, options);
  storage::Encoder saved;
  learner.SaveState(&saved);
  const std::string bytes = saved.Release();
  storage::Decoder in(bytes);
  ASSERT_TRUE(copy.LoadState(&in).ok());
  for (int i = 0; i < 300; ++i) {
    const Eigen::VectorXd x = basis * RandomMatrix(3, 1, rng).col(0);
    ASSERT_TRUE(learner.Observe(i % 3, x, std::cos(x.sum())).ok());
    ASSERT_TRUE(copy.Observe(i % 3, x, std::cos(x.sum())).ok());
  }
  Eigen::VectorXd m1, s1, m2, s2;
  learner.Score(1, probes, &m1, &s1);
  copy.Score(1, probes, &m2, &s2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(s1, s2);
  ASSERT_TRUE(learner.FlushPendingDictionary().ok());
  EXPECT_EQ(learner.regression_size(), learner.dictionary_size());
}

TEST(VarianceFormTest, FrozenScorersKeepTheirAnswersAndDecisionsShareThem) {
  UserGraph graph;
  graph.EnsureUsers(3);
  graph.SetEdge(0, 1, 1.0);
  const std::shared_ptr<const UserKernel> green = *GreenFunction::Build(graph, 0.5);
  NystromOptions options;
  options.max_dictionary_size = 40;
  NystromPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), green, options);
  Rng rng(2);
  const Eigen::MatrixXd probes = RandomMatrix(2, 5, rng);
  for (int t = 0; t < 60; ++t) {
    ASSERT_TRUE(learner.Observe(t % 3, RandomMatrix(2, 1, rng).col(0), rng.Normal()).ok());
  }
  const std::shared_ptr<const Scorer> frozen = learner.Freeze();
  EXPECT_EQ(learner.Freeze(), frozen);  // nothing learned: the same published scorer
  Eigen::VectorXd mean, sd;
  frozen->Score(1, probes, &mean, &sd);
  for (int t = 0; t < 200; ++t) {
    ASSERT_TRUE(learner.Observe(t % 3, RandomMatrix(2, 1, rng).col(0), rng.Normal()).ok());
  }
  EXPECT_NE(learner.Freeze(), frozen);
  Eigen::VectorXd again_mean, again_sd;
  frozen->Score(1, probes, &again_mean, &again_sd);
  EXPECT_EQ(again_mean, mean);
  EXPECT_EQ(again_sd, sd);
}

}  // namespace
}  // namespace graphbandit
