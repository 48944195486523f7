// A refit spread over the observations that follow (NystromPosterior with
// LearnerRefit::may_spread): the old state serves unchanged until the pass ends, the pass ends
// after the predicted number of observations, the state it switches to is the synchronous
// rebuild's (up to round-off), a snapshot in the middle of the pass continues bit-identically,
// and a graph edit completes it first.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/nystrom_posterior.h"
#include "core/storage/coding.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

constexpr int kDim = 3;
constexpr int kUsers = 6;

std::shared_ptr<const UserKernel> Ring(double rho) {
  UserGraph graph;
  graph.EnsureUsers(kUsers);
  for (int u = 0; u < kUsers; ++u) graph.SetEdge(u, (u + 1) % kUsers, 1.0);
  return *GreenFunction::Build(graph, rho);
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

NystromOptions Options() {
  NystromOptions o;
  o.max_dictionary_size = 15;
  o.kors_gamma = 1e6;  // every point KORS sees is kept: the cap alone bounds the dictionary
  o.spread_growth_scan = true;
  o.growth_batch_divisor = 4;
  o.spread_refit_work = 0.0;  // spread whatever the size
  o.seed = 11;
  return o;
}

std::unique_ptr<NystromPosterior> NewLearner() {
  return std::make_unique<NystromPosterior>(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(0.3),
                                            Options());
}

// New values for every part of the kernel, and stored points rescaled.
LearnerRefit NewValues(bool may_spread) {
  LearnerRefit refit;
  refit.arm = ArmKernel(KernelType::kRbf, 2.0);
  refit.users = Ring(0.7);
  refit.ridge = 0.05;
  refit.kors_mu = 0.05;
  refit.prior_mean = 0.2;
  refit.rescale = Eigen::Vector3d(0.5, 2.0, 1.0);
  refit.may_spread = may_spread;
  return refit;
}

void Learn(NystromPosterior* learner, const Data& d, int from, int to, int batch) {
  for (int start = from; start < to; start += batch) {
    const int n = std::min(batch, to - start);
    const std::vector<int32_t> users(d.users.begin() + start, d.users.begin() + start + n);
    ASSERT_TRUE(learner->ObserveBatch(users, d.x.middleCols(start, n), d.y.segment(start, n)).ok());
  }
}

std::string Bytes(const NystromPosterior& learner) {
  storage::Encoder out;
  learner.SaveState(&out);
  return out.Release();
}

std::unique_ptr<NystromPosterior> Restore(const std::string& bytes) {
  auto copy = NewLearner();
  storage::Decoder in(bytes);
  EXPECT_TRUE(copy->LoadState(&in).ok());
  return copy;
}

// Largest relative difference of the means and standard deviations the two score for a few
// users on random points (the points in the scaling `scale` applies to stored ones).
double ScoreDifference(const Scorer& a, const Scorer& b, const Eigen::Vector3d& scale) {
  Rng rng(99);
  const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng).array().colwise() * scale.array();
  double worst = 0.0;
  for (int user : {0, 3, 5, static_cast<int>(kUnknownUser)}) {
    Eigen::VectorXd mean_a, sd_a, mean_b, sd_b;
    a.Score(user, q, &mean_a, &sd_a);
    b.Score(user, q, &mean_b, &sd_b);
    worst = std::max({worst, RelativeError(mean_a, mean_b, 1e-12), RelativeError(sd_a, sd_b)});
  }
  return worst;
}

TEST(NystromRefitTest, ASpreadRefitServesTheOldStateThenSwitchesToTheRebuild) {
  const Data d = MakeData(300, 3);
  auto spread = NewLearner();
  Learn(spread.get(), d, 0, 200, 8);
  ASSERT_EQ(spread->dictionary_size(), 15);  // at the cap: no point joins while the pass runs
  ASSERT_EQ(spread->regression_size(), 15);
  auto synchronous = Restore(Bytes(*spread));
  auto untouched = Restore(Bytes(*spread));

  ASSERT_TRUE(synchronous->Refit(NewValues(/*may_spread=*/false)).ok());
  EXPECT_FALSE(synchronous->RefitPending());
  ASSERT_TRUE(spread->Refit(NewValues(/*may_spread=*/true)).ok());
  ASSERT_TRUE(spread->RefitPending());
  EXPECT_EQ(spread->stats().refits_spread, 1);
  EXPECT_EQ(spread->stats().refits, 0);
  EXPECT_EQ(spread->refit_remaining(), 200);

  // 200 history entries, kMinRefitScanStep (4) per observation: the pass ends with the 50th.
  // Until then the learner scores exactly as one that never refitted.
  for (int i = 200; i < 249; ++i) {
    ASSERT_TRUE(spread->Observe(d.users[i], d.x.col(i), d.y(i)).ok());
    ASSERT_TRUE(untouched->Observe(d.users[i], d.x.col(i), d.y(i)).ok());
  }
  ASSERT_TRUE(spread->RefitPending());
  EXPECT_EQ(spread->refit_remaining(), 4);
  EXPECT_EQ(ScoreDifference(*spread->Freeze(), *untouched->Freeze(), Eigen::Vector3d::Ones()), 0.0);
  ASSERT_TRUE(spread->Observe(d.users[249], d.x.col(249), d.y(249)).ok());
  EXPECT_FALSE(spread->RefitPending());
  EXPECT_TRUE(spread->LastRefitApplied());
  EXPECT_EQ(spread->stats().refits, 1);

  // The synchronous rebuild learned the same 50 observations under the new values (stored
  // points are scaled as the new values scale requests: the rescale divides them by 0.5, 2, 1).
  Data rescaled = d;
  rescaled.x.array().colwise() *= NewValues(false).rescale.array();
  for (int i = 200; i < 250; ++i) {
    ASSERT_TRUE(synchronous->Observe(rescaled.users[i], rescaled.x.col(i), rescaled.y(i)).ok());
  }
  // The stored points too (rescaled in the history when the spread refit switched).
  Learn(spread.get(), rescaled, 250, 300, 8);
  Learn(synchronous.get(), rescaled, 250, 300, 8);
  EXPECT_EQ(spread->dictionary_size(), synchronous->dictionary_size());
  EXPECT_EQ(spread->kors_mu(), 0.05);
  EXPECT_LT(ScoreDifference(*spread->Freeze(), *synchronous->Freeze(), NewValues(false).rescale),
            1e-10);
  EXPECT_GT(ScoreDifference(*spread->Freeze(), *untouched->Freeze(), Eigen::Vector3d::Ones()),
            1e-3);  // and it did change
}

// Users without edges share nothing: a pass over the history adds each entry's terms only to
// the rows of its user's dictionary points (the block the entries touch, not all of M). The
// spread refit still ends where the synchronous rebuild does.
TEST(NystromRefitTest, ASpreadRefitOverUsersWithoutEdgesMatchesTheSynchronousRebuild) {
  constexpr int kLoneUsers = 10;
  // Users without edges, then small components ({0, 1}, {2, 3, 4}, {5, 6}; 7-9 alone) with the
  // user's own variance (eta) in the new values: blocks of several users share their rows.
  for (const bool components : {false, true}) {
    SCOPED_TRACE(components ? "small components, eta 0.4" : "users without edges");
    const auto alone = [components](double rho) {
      UserGraph graph;
      graph.EnsureUsers(kLoneUsers);
      if (components) {
        for (const auto& [a, b] : {std::pair{0, 1}, {2, 3}, {3, 4}, {5, 6}}) {
          graph.SetEdge(a, b, 1.0);
        }
      }
      return *GreenFunction::Build(graph, rho);
    };
    Rng rng(5);
    Data d;
    d.x = RandomMatrix(kDim, 300, rng);
    for (int i = 0; i < 300; ++i) {
      d.users.push_back(static_cast<int32_t>(rng.UniformInt(kLoneUsers)));
    }
    d.y.resize(300);
    for (int i = 0; i < 300; ++i) d.y(i) = std::sin(d.x.col(i).sum()) + 0.1 * rng.Normal();
    NystromOptions options = Options();
    options.max_dictionary_size = 40;
    NystromPosterior spread(kDim, ArmKernel(KernelType::kRbf, 1.0), alone(0.3), options);
    Learn(&spread, d, 0, 200, 8);
    ASSERT_EQ(spread.dictionary_size(), 40);
    NystromPosterior synchronous(kDim, ArmKernel(KernelType::kRbf, 1.0), alone(0.3), options);
    const std::string saved = Bytes(spread);
    storage::Decoder in(saved);
    ASSERT_TRUE(synchronous.LoadState(&in).ok());
    LearnerRefit refit = NewValues(/*may_spread=*/false);
    refit.users = alone(0.7);
    if (components) refit.user_variance = 0.4;
    ASSERT_TRUE(synchronous.Refit(refit).ok());
    refit.may_spread = true;
    ASSERT_TRUE(spread.Refit(refit).ok());
    ASSERT_TRUE(spread.RefitPending());
    Data rescaled = d;
    rescaled.x.array().colwise() *= refit.rescale.array();
    for (int i = 200; i < 300 && spread.RefitPending(); ++i) {
      ASSERT_TRUE(spread.Observe(d.users[i], d.x.col(i), d.y(i)).ok());
      ASSERT_TRUE(synchronous.Observe(rescaled.users[i], rescaled.x.col(i), rescaled.y(i)).ok());
    }
    ASSERT_FALSE(spread.RefitPending());
    EXPECT_EQ(spread.dictionary_size(), synchronous.dictionary_size());
    const Eigen::MatrixXd q = RandomMatrix(kDim, 20, rng).array().colwise() * refit.rescale.array();
    for (int user : {0, 7, 9, static_cast<int>(kUnknownUser)}) {
      Eigen::VectorXd mean_a, sd_a, mean_b, sd_b;
      spread.Freeze()->Score(user, q, &mean_a, &sd_a);
      synchronous.Freeze()->Score(user, q, &mean_b, &sd_b);
      EXPECT_LT(RelativeError(mean_a, mean_b, 1e-12), 1e-10) << "user " << user;
      EXPECT_LT(RelativeError(sd_a, sd_b), 1e-10) << "user " << user;
    }
  }
}

TEST(NystromRefitTest, ASnapshotInTheMiddleOfThePassContinuesBitIdentically) {
  const Data d = MakeData(320, 5);
  auto live = NewLearner();
  Learn(live.get(), d, 0, 200, 8);
  ASSERT_TRUE(live->Refit(NewValues(true)).ok());
  Learn(live.get(), d, 200, 224, 8);
  ASSERT_TRUE(live->RefitPending());
  const std::string mid = Bytes(*live);

  auto restored = Restore(mid);
  ASSERT_TRUE(restored->RefitPending());
  // The kernel is the owner's to give back: until then the learner refuses to learn, unchanged.
  EXPECT_EQ(restored->Observe(d.users[224], d.x.col(224), d.y(224)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Bytes(*restored), mid);
  LearnerRefit other = NewValues(true);
  other.ridge = 0.06;
  EXPECT_EQ(restored->ResumeRefit(other).code(), absl::StatusCode::kDataLoss);
  ASSERT_TRUE(restored->ResumeRefit(NewValues(true)).ok());
  EXPECT_EQ(Bytes(*restored), mid);

  Learn(live.get(), d, 224, 320, 8);
  Learn(restored.get(), d, 224, 320, 8);
  EXPECT_FALSE(live->RefitPending());
  EXPECT_EQ(Bytes(*restored), Bytes(*live));
  EXPECT_EQ(ScoreDifference(*restored->Freeze(), *live->Freeze(), Eigen::Vector3d::Ones()), 0.0);
}

TEST(NystromRefitTest, AGraphEditOrAnotherRefitCompletesThePendingOneFirst) {
  const Data d = MakeData(220, 7);
  auto learner = NewLearner();
  Learn(learner.get(), d, 0, 200, 8);
  ASSERT_TRUE(learner->Refit(NewValues(true)).ok());
  Learn(learner.get(), d, 200, 208, 8);
  ASSERT_TRUE(learner->RefitPending());
  UserGraph graph;
  ASSERT_TRUE(learner->SetGraph(graph, Ring(0.9)).ok());
  EXPECT_FALSE(learner->RefitPending());
  EXPECT_EQ(learner->stats().refits, 1);
  EXPECT_EQ(learner->kors_mu(), 0.05);

  ASSERT_TRUE(learner->Refit(NewValues(true)).ok());
  ASSERT_TRUE(learner->RefitPending());
  LearnerRefit again = NewValues(true);
  again.rescale = Eigen::Vector3d::Ones();
  again.kors_mu = 0.07;
  ASSERT_TRUE(learner->Refit(again).ok());  // the first switches, the second starts
  EXPECT_EQ(learner->stats().refits, 2);
  EXPECT_EQ(learner->stats().refits_spread, 3);
  ASSERT_TRUE(learner->CompleteRefit().ok());
  EXPECT_FALSE(learner->RefitPending());
  EXPECT_EQ(learner->stats().refits, 3);
  EXPECT_EQ(learner->kors_mu(), 0.07);
}

TEST(NystromRefitTest, SmallRebuildsAndSlidingWindowsAreNotSpread) {
  const Data d = MakeData(60, 9);
  NystromOptions options = Options();
  options.spread_refit_work = 1e12;
  NystromPosterior small(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(0.3), options);
  Learn(&small, d, 0, 60, 8);
  ASSERT_TRUE(small.Refit(NewValues(true)).ok());
  EXPECT_FALSE(small.RefitPending());
  EXPECT_EQ(small.stats().refits, 1);

  options = Options();
  options.max_history = 30;
  options.forget_evicted = true;
  NystromPosterior window(kDim, ArmKernel(KernelType::kRbf, 1.0), Ring(0.3), options);
  Learn(&window, d, 0, 60, 8);
  ASSERT_TRUE(window.Refit(NewValues(true)).ok());
  EXPECT_FALSE(window.RefitPending());
}

}  // namespace
}  // namespace graphbandit
