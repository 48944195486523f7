// The Nystrom posterior's batched learning (ObserveBatch: rank-k updates of M's factor and of
// the scoring form) against learning one observation at a time and against the exact GP, its
// snapshots in the middle of batches, and single-precision scoring against double precision
// (core/linalg/variance_form.h): within its tolerance where its check allows it, identical to
// double precision where the check refuses it.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "core/storage/coding.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

constexpr int kDim = 3;
constexpr int kUsers = 6;

std::shared_ptr<const UserKernel> Ring() {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  for (int u = 0; u < kUsers; ++u) graph.SetEdge(u, (u + 1) % kUsers, 1.0);
  return *GreenFunction::Build(graph, 0.3);
}

struct Data {
  Eigen::MatrixXd x;
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

Data MakeData(int n, uint64_t seed) {
  Rng rng(seed);
  Data d;
  d.x = RandomMatrix(kDim, n, rng);
  for (int i = 0; i < n; ++i) d.users.push_back(static_cast<int32_t>(rng.UniformInt(kUsers)));
  d.y.resize(n);
  for (int i = 0; i < n; ++i) d.y(i) = std::sin(d.x.col(i).sum()) + 0.1 * rng.Normal();
  return d;
}

// Learns observations [from, to) one ObserveBatch call per `batch` of them.
void LearnInBatches(NystromPosterior* learner, const Data& d, int from, int to, int batch) {
  for (int start = from; start < to; start += batch) {
    const int n = std::min(batch, to - start);
    const std::vector<int32_t> users(d.users.begin() + start, d.users.begin() + start + n);
    ASSERT_TRUE(learner->ObserveBatch(users, d.x.middleCols(start, n), d.y.segment(start, n)).ok());
  }
}

std::unique_ptr<NystromPosterior> CopyOf(const NystromPosterior& learner,
                                         const NystromOptions& options,
                                         std::shared_ptr<const UserKernel> users = Ring()) {
  auto copy = std::make_unique<NystromPosterior>(kDim, ArmKernel(KernelType::kRbf, 1.0),
                                                 std::move(users), options);
  storage::Encoder out;
  learner.SaveState(&out);
  const std::string bytes = out.Release();
  storage::Decoder in(bytes);
  EXPECT_TRUE(copy->LoadState(&in).ok());
  return copy;
}

void ExpectSameScores(const Scorer& a, const Scorer& b, double tolerance, uint64_t seed) {
  Rng rng(seed);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng);
  for (int user : {0, 2, 5, static_cast<int>(kUnknownUser)}) {
    Eigen::VectorXd mean_a, sd_a, mean_b, sd_b;
    a.Score(user, q, &mean_a, &sd_a);
    b.Score(user, q, &mean_b, &sd_b);
    EXPECT_LT(RelativeError(mean_a, mean_b, 1e-12), tolerance) << "user " << user;
    EXPECT_LT(RelativeError(sd_a, sd_b), tolerance) << "user " << user;
  }
}

// At a full dictionary nothing joins (continuous points never duplicate one), so a batch is,
// in exact arithmetic, the same sequence of rank-one updates: batches of every size, including
// larger than the form's correction buffer and than the factor's panel, match learning one
// observation at a time to round-off, and so does a mixture of both.
TEST(NystromBatchTest, BatchesAtAFullDictionaryEqualOneObservationAtATime) {
  NystromOptions options;
  options.max_dictionary_size = 30;
  options.ridge = 0.1;
  options.kors_mu = 0.1;
  const Data d = MakeData(700, 3);
  NystromPosterior single(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), options);
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(single.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  ASSERT_EQ(single.dictionary_size(), 30);
  for (int batch : {2, 7, 64, 130}) {
    SCOPED_TRACE(batch);
    auto batched = CopyOf(single, options);
    auto reference = CopyOf(single, options);
    LearnInBatches(batched.get(), d, 200, 700, batch);
    for (int i = 200; i < 700; ++i) {
      ASSERT_TRUE(reference->Observe(d.users[i], d.x.col(i), d.y(i)).ok());
    }
    EXPECT_EQ(batched->dictionary_size(), 30);
    EXPECT_EQ(batched->observations(), 700);
    EXPECT_GT(batched->stats().batches, 0);
    ExpectSameScores(*batched, *reference, 1e-9, 11);
    ExpectSameScores(*batched->Freeze(), *reference->Freeze(), 1e-9, 12);
    EXPECT_NEAR(batched->InformationGain(), reference->InformationGain(),
                1e-9 * reference->InformationGain());
  }
}

// While the dictionary grows, every point a batch accepts joins after the batch is learned on
// the dictionary before it, and its rows of M come from the history: with every point accepted
// the result is the exact GP over all observations (Nystrom with Z = S), as point by point.
TEST(NystromBatchTest, BatchesWhileTheDictionaryGrowsMatchTheExactGp) {
  NystromOptions options;
  options.ridge = 0.2;
  options.kors_mu = 0.2;
  options.kors_gamma = 1e12;  // every point is accepted
  options.max_dictionary_size = 1 << 20;
  const Data d = MakeData(60, 5);
  NystromPosterior batched(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), options);
  ASSERT_TRUE(batched.Observe(d.users[0], d.x.col(0), d.y(0)).ok());  // seeds the dictionary
  LearnInBatches(&batched, d, 1, 60, 9);
  ASSERT_EQ(batched.dictionary_size(), 60);
  EXPECT_GT(batched.stats().batches, 0);
  ExactGpPosterior exact(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), 0.2);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(exact.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  ExpectSameScores(batched, exact, 1e-7, 13);
}

// Users in separate components (two pairs, two users without edges): the Green's function is
// block diagonal, so a user's scores involve only the dictionary points of its component, which
// the scorer gathers when they are at most half of the dictionary. With every point accepted the
// result must still be the exact GP's, for every user, in double and in single precision.
TEST(NystromBatchTest, ScoresOnABlockDiagonalUserKernelMatchTheExactGp) {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  graph.SetEdge(0, 1, 1.0);
  graph.SetEdge(2, 3, 0.5);
  std::shared_ptr<const UserKernel> components = *GreenFunction::Build(graph, 0.3);
  NystromOptions options;
  options.ridge = 0.2;
  options.kors_mu = 0.2;
  options.kors_gamma = 1e12;  // every point is accepted
  options.max_dictionary_size = 1 << 20;
  const Data d = MakeData(80, 17);
  NystromPosterior learner(kDim, ArmKernel(KernelType::kRbf, 1.0), components, options);
  ExactGpPosterior exact(kDim, ArmKernel(KernelType::kRbf, 1.0), components, 0.2);
  for (int i = 0; i < 80; ++i) {
    ASSERT_TRUE(learner.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
    ASSERT_TRUE(exact.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  }
  ASSERT_EQ(learner.dictionary_size(), 80);
  Rng rng(19);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng);
  for (int user : {0, 1, 2, 3, 4, 5, static_cast<int>(kUnknownUser)}) {
    SCOPED_TRACE(user);
    Eigen::VectorXd mean, sd, exact_mean, exact_sd;
    learner.Freeze()->Score(user, q, &mean, &sd);
    exact.Score(user, q, &exact_mean, &exact_sd);
    EXPECT_LT(RelativeError(mean, exact_mean, 1e-12), 1e-7);
    EXPECT_LT(RelativeError(sd, exact_sd), 1e-7);
    Eigen::VectorXd mean_only;
    learner.Freeze()->Mean(user, q, &mean_only);
    EXPECT_EQ(mean_only, mean);  // the mean alone takes the same path, bit for bit
  }
  options.single_precision = true;
  auto single = CopyOf(learner, options, components);
  for (int user : {0, 4}) {
    Eigen::VectorXd mean, sd, exact_mean, exact_sd;
    single->Freeze()->Score(user, q, &mean, &sd);
    exact.Score(user, q, &exact_mean, &exact_sd);
    EXPECT_LT(RelativeError(mean, exact_mean, 1e-12), 1e-7);
    EXPECT_LT((sd - exact_sd).cwiseAbs().maxCoeff(), 1e-2);
  }
}

// Users 0 and 1 linked, the others without edges (each its own component): a batch of a few
// users' rewards touches only their components' blocks of the factors, and is learned there,
// block by block (batches of 8 hold several rewards of one block).
// Against the same batches learned on the whole factors (learn_on_support off) and against
// one observation at a time, at a full dictionary and while it grows (the KORS leverage then in
// double precision on the block; at the cap in single precision, as always), every user's
// scores agree to round-off.
TEST(NystromBatchTest, BatchesOnTheirUsersBlockMatchTheWholeFactors) {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  graph.SetEdge(0, 1, 1.0);
  std::shared_ptr<const UserKernel> alone = *GreenFunction::Build(graph, 0.3);
  for (const bool grows : {false, true}) {
    SCOPED_TRACE(grows ? "growing dictionary" : "full dictionary");
    NystromOptions options;
    options.ridge = 0.1;
    options.kors_mu = 0.1;
    options.max_dictionary_size = grows ? 1 << 20 : 30;
    if (grows) options.kors_gamma = 1e12;  // every point is accepted
    const Data d = MakeData(grows ? 90 : 600, 29);
    const int first = grows ? 30 : 200;
    NystromPosterior start(kDim, ArmKernel(KernelType::kRbf, 1.0), alone, options);
    for (int i = 0; i < first; ++i) ASSERT_TRUE(start.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
    NystromOptions whole_options = options;
    whole_options.learn_on_support = false;
    for (int batch : {2, 3, 8}) {
      SCOPED_TRACE(batch);
      auto on_block = CopyOf(start, options, alone);
      auto whole = CopyOf(start, whole_options, alone);
      auto reference = CopyOf(start, options, alone);
      LearnInBatches(on_block.get(), d, first, d.y.size(), batch);
      LearnInBatches(whole.get(), d, first, d.y.size(), batch);
      for (int i = first; i < d.y.size(); ++i) {
        ASSERT_TRUE(reference->Observe(d.users[i], d.x.col(i), d.y(i)).ok());
      }
      EXPECT_GT(on_block->stats().support_batches, 0);
      // At the cap every batch is learned block by block.
      if (!grows) {
        EXPECT_EQ(on_block->stats().support_batches, on_block->stats().batches);
      }
      EXPECT_EQ(whole->stats().support_batches, 0);
      EXPECT_EQ(on_block->dictionary_size(), whole->dictionary_size());
      EXPECT_EQ(on_block->observations(), d.y.size());
      for (int user = 0; user < kUsers; ++user) {
        SCOPED_TRACE(user);
        Rng rng(31 + user);
        const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng);
        Eigen::VectorXd mean_a, sd_a, mean_b, sd_b, mean_c, sd_c;
        on_block->Score(user, q, &mean_a, &sd_a);
        whole->Score(user, q, &mean_b, &sd_b);
        EXPECT_LT(RelativeError(mean_a, mean_b, 1e-12), 1e-9);
        EXPECT_LT(RelativeError(sd_a, sd_b), 1e-9);
        if (!grows) {  // a growing dictionary's draws differ from one at a time (see above)
          reference->Score(user, q, &mean_c, &sd_c);
          EXPECT_LT(RelativeError(mean_a, mean_c, 1e-12), 1e-9);
          EXPECT_LT(RelativeError(sd_a, sd_c), 1e-9);
        }
      }
      EXPECT_NEAR(on_block->InformationGain(), whole->InformationGain(),
                  1e-9 * whole->InformationGain());
    }
  }
}

// A learner saved between batches and restored learns the next batches bit-identically.
// A user kernel with zeros inside a component: user 0 shares entries with users 1 and 2, which
// share none with each other (a star, positive definite); users 3-5 share nothing. With no
// dictionary point of user 0, the points of users 1 and 2 are separate components of the
// factors, and user 0 reaches both while user 1 reaches only its own: overlapping, different
// supports, each a union of components.
class StarUsers : public UserKernel {
 public:
  StarUsers() : slot_(kUsers) {
    for (int u = 0; u < kUsers; ++u) {
      slot_[static_cast<size_t>(u)] = u;
      auto column = std::make_shared<Eigen::VectorXd>(Eigen::VectorXd::Zero(kUsers));
      (*column)(u) = 1.0;
      if (u == 0) (*column)(1) = (*column)(2) = 0.4;
      if (u == 1 || u == 2) (*column)(0) = 0.4;
      columns_.push_back(std::move(column));
    }
  }
  Column ColumnOf(int32_t u) const override {
    if (u < 0 || u >= kUsers) return MakeColumn(u, 1.0, 1.0, 0.0, nullptr, nullptr);
    return MakeColumn(u, 1.0, 1.0, 0.0, &slot_, columns_[static_cast<size_t>(u)]);
  }

 private:
  std::vector<int32_t> slot_;
  std::vector<std::shared_ptr<const Eigen::VectorXd>> columns_;
};

// Overlapping points are learned as one block: the same posterior as the whole factors.
TEST(NystromBatchTest, UsersReachingOverlappingPointsShareOneBlock) {
  const auto users = std::make_shared<StarUsers>();
  NystromOptions options;
  options.ridge = 0.1;
  options.kors_mu = 0.1;
  options.max_dictionary_size = 30;
  const Data d = MakeData(500, 41);
  NystromPosterior start(kDim, ArmKernel(KernelType::kRbf, 1.0), users, options);
  for (int i = 0; i < 150; ++i) {  // the dictionary fills up without user 0
    if (d.users[i] == 0) continue;
    ASSERT_TRUE(start.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  }
  ASSERT_EQ(start.dictionary_size(), 30);
  NystromOptions whole_options = options;
  whole_options.learn_on_support = false;
  auto on_block = CopyOf(start, options, users);
  auto whole = CopyOf(start, whole_options, users);
  LearnInBatches(on_block.get(), d, 150, 500, 8);
  LearnInBatches(whole.get(), d, 150, 500, 8);
  // Most batches hold user 0 with 1 or 2; as separate blocks they would not separate in M's
  // factor once user 0's rewards have linked them, and would take the whole factors.
  EXPECT_GT(2 * on_block->stats().support_batches, on_block->stats().batches);
  for (int user = 0; user < kUsers; ++user) {
    SCOPED_TRACE(user);
    Rng rng(51 + user);
    const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng);
    Eigen::VectorXd mean_a, sd_a, mean_b, sd_b;
    on_block->Score(user, q, &mean_a, &sd_a);
    whole->Score(user, q, &mean_b, &sd_b);
    EXPECT_LT(RelativeError(mean_a, mean_b, 1e-12), 1e-9);
    EXPECT_LT(RelativeError(sd_a, sd_b), 1e-9);
  }
}

// On a connected graph (the whole factors) and on users in separate components (block by
// block, the factors' components found afresh by the restored copy and kept by the live one).
TEST(NystromBatchTest, ARestoredLearnerLearnsTheNextBatchesBitIdentically) {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  graph.SetEdge(0, 1, 1.0);
  const std::shared_ptr<const UserKernel> components = *GreenFunction::Build(graph, 0.3);
  for (const bool separate : {false, true}) {
    SCOPED_TRACE(separate ? "separate components" : "ring");
    const std::shared_ptr<const UserKernel> users = separate ? components : Ring();
    NystromOptions options;
    options.max_dictionary_size = 25;
    options.single_precision = true;
    const Data d = MakeData(600, 9);
    NystromPosterior live(kDim, ArmKernel(KernelType::kRbf, 1.0), users, options);
    LearnInBatches(&live, d, 0, 300, 37);
    auto restored = CopyOf(live, options, users);
    LearnInBatches(&live, d, 300, 600, 37);
    LearnInBatches(restored.get(), d, 300, 600, 37);
    EXPECT_EQ(live.stats().support_batches > 0, separate);
    Rng rng(4);
    const Eigen::MatrixXd q = RandomMatrix(kDim, 15, rng);
    Eigen::VectorXd a_mean, a_sd, b_mean, b_sd;
    live.Freeze()->Score(1, q, &a_mean, &a_sd);
    restored->Freeze()->Score(1, q, &b_mean, &b_sd);
    EXPECT_EQ(a_mean, b_mean);
    EXPECT_EQ(a_sd, b_sd);
    storage::Encoder x, y;
    live.SaveState(&x);
    restored->SaveState(&y);
    EXPECT_EQ(x.Release(), y.Release());
  }
}

TEST(NystromBatchTest, AnInvalidObservationLearnsNothing) {
  NystromOptions options;
  NystromPosterior learner(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), options);
  const Data d = MakeData(5, 2);
  Eigen::VectorXd y = d.y;
  y(3) = std::nan("");
  EXPECT_EQ(learner.ObserveBatch(d.users, d.x, y).code(), absl::StatusCode::kInvalidArgument);
  std::vector<int32_t> users = d.users;
  users[1] = -1;
  EXPECT_EQ(learner.ObserveBatch(users, d.x, d.y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(learner.ObserveBatch({0}, d.x, d.y).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(learner.observations(), 0);
}

// Single precision where the state's check allows it: the standard deviations stay within a
// small multiple of the tolerance the check enforces at its probes (dictionary points; other
// queries see up to a few times its error, relative to the prior's), the means are the
// double-precision ones bit for bit, and the ranking of the candidates by mean + 0.5 stddev agrees.
TEST(NystromBatchTest, SinglePrecisionScoresAgreeWithDoublePrecision) {
  NystromOptions options;
  options.max_dictionary_size = 150;
  options.ridge = 0.2;
  options.kors_mu = 0.2;
  const Data d = MakeData(3000, 21);
  NystromPosterior trained(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), options);
  LearnInBatches(&trained, d, 0, 3000, 50);
  options.single_precision = true;
  auto single = CopyOf(trained, options);
  ASSERT_LE(single->stats().single_error, VarianceForm::kSingleTolerance);
  const std::shared_ptr<const Scorer> fast = single->Freeze();
  const std::shared_ptr<const Scorer> exact = trained.Freeze();
  Rng rng(6);
  int agree = 0;
  for (int request = 0; request < 100; ++request) {
    const Eigen::MatrixXd q = RandomMatrix(kDim, 30, rng);
    const int user = static_cast<int>(rng.UniformInt(kUsers));
    Eigen::VectorXd m1, s1, m2, s2, prior;
    fast->Score(user, q, &m1, &s1);
    exact->Score(user, q, &m2, &s2);
    EXPECT_EQ(m1, m2);
    prior = trained.kernel().Diagonal(user, q).cwiseSqrt();
    EXPECT_LE(((s1 - s2).cwiseAbs().array() / prior.array()).maxCoeff(),
              10 * VarianceForm::kSingleTolerance);
    EXPECT_GT((s1 - s2).cwiseAbs().maxCoeff(), 0.0);  // it did score in single precision
    Eigen::Index a = 0, b = 0;
    (m1 + 0.5 * s1).maxCoeff(&a);
    (m2 + 0.5 * s2).maxCoeff(&b);
    agree += a == b ? 1 : 0;
  }
  EXPECT_GE(agree, 98);
}

// Nearly coincident dictionary points (a tiny admission guard, a long length-scale) make B's
// entries huge and the variance a difference of nearly equal numbers: the check refuses single
// precision and the scores are double precision's, bit for bit.
TEST(NystromBatchTest, AnIllConditionedStateScoresInDoublePrecision) {
  NystromOptions options;
  options.max_dictionary_size = 60;
  options.ridge = 1e-4;
  options.kors_mu = 1e-4;
  options.kors_gamma = 1e12;
  options.min_relative_residual = 1e-14;
  Data d = MakeData(60, 8);
  d.x *= 0.02;  // every point within a small fraction of the length-scale of the others
  NystromPosterior trained(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(), options);
  for (int i = 0; i < 60; ++i) ASSERT_TRUE(trained.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  options.single_precision = true;
  auto single = CopyOf(trained, options);
  EXPECT_GT(single->stats().single_error, VarianceForm::kSingleTolerance);
  Rng rng(3);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 10, rng) * 0.02;
  Eigen::VectorXd m1, s1, m2, s2;
  single->Freeze()->Score(2, q, &m1, &s1);
  trained.Freeze()->Score(2, q, &m2, &s2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace graphbandit
