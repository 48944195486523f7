// Bounded-memory Nystrom (a retained-history cap, with or without forgetting) and the batched
// Nystrom baseline, each against its direct formula.
#include <gtest/gtest.h>

#include "core/graph/green_function.h"
#include "core/learner/batched_nystrom_posterior.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

struct Data {
  int dim = 3, users = 5;
  UserGraph graph;
  std::shared_ptr<const UserKernel> kernel;
  ArmKernel arm{KernelType::kRbf, 1.0};
  Eigen::MatrixXd x;
  std::vector<int32_t> u;
  Eigen::VectorXd y;
  double K(int i, const Eigen::VectorXd& b, int ub) const {
    return kernel->Entry(u[i], ub) * arm(x.col(i), b);
  }
};

Data MakeData(int t, uint64_t seed) {
  Data d;
  Rng rng(seed);
  d.graph.EnsureUsers(d.users);
  d.graph.SetEdge(0, 1, 1.0);
  d.graph.SetEdge(1, 2, 1.0);
  d.graph.SetEdge(3, 4, 0.5);
  d.kernel = *GreenFunction::Build(d.graph, 0.3);
  d.x = RandomMatrix(d.dim, t, rng);
  for (int i = 0; i < t; ++i) d.u.push_back(static_cast<int32_t>(rng.UniformInt(d.users)));
  d.y = RandomMatrix(t, 1, rng);
  return d;
}

// The projected regression with dictionary `z` (indices into the data) where observation i
// contributes to dictionary coordinate a only if counts(i, a).
template <typename Counts>
void DirectProjected(const Data& d, const std::vector<int>& z, int t, double ridge, Counts counts,
                     int user, const Eigen::MatrixXd& q, Eigen::VectorXd* mean,
                     Eigen::VectorXd* sd) {
  const int m = static_cast<int>(z.size());
  Eigen::MatrixXd kzz(m, m), big_m = Eigen::MatrixXd::Zero(m, m);
  Eigen::VectorXd gamma = Eigen::VectorXd::Zero(m);
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) kzz(a, b) = d.K(z[a], d.x.col(z[b]), d.u[z[b]]);
  }
  for (int i = 0; i < t; ++i) {
    Eigen::VectorXd row = Eigen::VectorXd::Zero(m);
    for (int a = 0; a < m; ++a) {
      if (counts(i, a)) row(a) = d.K(z[a], d.x.col(i), d.u[i]);
    }
    big_m += row * row.transpose();
    gamma += d.y(i) * row;
  }
  big_m += ridge * kzz;
  const Eigen::VectorXd w = big_m.fullPivLu().solve(gamma);
  mean->resize(q.cols());
  sd->resize(q.cols());
  for (int c = 0; c < q.cols(); ++c) {
    Eigen::VectorXd kz(m);
    for (int a = 0; a < m; ++a) kz(a) = d.K(z[a], q.col(c), user);
    const double kss = d.kernel->Entry(user, user) * d.arm(q.col(c), q.col(c));
    (*mean)(c) = kz.dot(w);
    (*sd)(c) = std::sqrt(std::max(0.0, ridge * kz.dot(big_m.fullPivLu().solve(kz)) + kss -
                                           kz.dot(kzz.fullPivLu().solve(kz))));
  }
}

NystromOptions ForcedOptions(int64_t max_history, bool forget) {
  NystromOptions o;
  o.ridge = 0.2;
  o.kors_mu = 0.2;
  o.kors_gamma = 0.0;  // nothing joins unless forced (the first point always does)
  o.max_history = max_history;
  o.forget_evicted = forget;
  return o;
}

TEST(BoundedMemoryTest, SlidingWindowIsTheRegressionOverTheLastObservations) {
  const int t = 60, window = 12;
  const Data d = MakeData(t, 1);
  NystromPosterior nystrom(d.dim, d.arm, d.kernel, ForcedOptions(window, /*forget=*/true));
  const std::vector<int> grow_at = {0, 4, 9, 20, 33, 47, 58};
  for (int i = 0; i < t; ++i) {
    if (std::find(grow_at.begin(), grow_at.end(), i) != grow_at.end())
      nystrom.set_force_accept(true);
    ASSERT_TRUE(nystrom.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
  }
  ASSERT_EQ(nystrom.dictionary_size(), static_cast<int64_t>(grow_at.size()));
  EXPECT_EQ(nystrom.history_size(), window);
  EXPECT_EQ(nystrom.observations(), t);
  EXPECT_EQ(nystrom.stats().evicted, t - window);
  Rng rng(2);
  const Eigen::MatrixXd q = RandomMatrix(d.dim, 6, rng);
  for (int user : {0, 3, 4}) {
    Eigen::VectorXd mean, sd, direct_mean, direct_sd;
    nystrom.Score(user, q, &mean, &sd);
    DirectProjected(
        d, grow_at, t, 0.2, [&](int i, int) { return i >= t - window; }, user, q, &direct_mean,
        &direct_sd);
    EXPECT_LT(RelativeError(mean, direct_mean), 1e-8) << "user " << user;
    EXPECT_LT(RelativeError(sd, direct_sd), 1e-8) << "user " << user;
  }
}

TEST(BoundedMemoryTest, CappedHistoryKeepsOldDataOnTheDictionaryItSaw) {
  const int t = 60, window = 12;
  const Data d = MakeData(t, 3);
  NystromPosterior nystrom(d.dim, d.arm, d.kernel, ForcedOptions(window, /*forget=*/false));
  const std::vector<int> grow_at = {0, 4, 9, 20, 33, 47, 58};
  for (int i = 0; i < t; ++i) {
    if (std::find(grow_at.begin(), grow_at.end(), i) != grow_at.end())
      nystrom.set_force_accept(true);
    ASSERT_TRUE(nystrom.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
  }
  // Observation i counts in coordinate a iff it was retained when point a joined, or came later:
  // i > grow_at[a] - window.
  Rng rng(4);
  const Eigen::MatrixXd q = RandomMatrix(d.dim, 6, rng);
  for (int user : {1, 2}) {
    Eigen::VectorXd mean, sd, direct_mean, direct_sd;
    nystrom.Score(user, q, &mean, &sd);
    DirectProjected(
        d, grow_at, t, 0.2, [&](int i, int a) { return i > grow_at[a] - window; }, user, q,
        &direct_mean, &direct_sd);
    EXPECT_LT(RelativeError(mean, direct_mean), 1e-8) << "user " << user;
    EXPECT_LT(RelativeError(sd, direct_sd), 1e-8) << "user " << user;
  }
}

TEST(BoundedMemoryTest, RetainedHistoryStaysBoundedOverALongRun) {
  const Data d = MakeData(50, 5);
  NystromOptions o;
  o.ridge = 0.1;
  o.kors_mu = 0.1;
  o.max_history = 100;
  o.max_dictionary_size = 30;
  o.forget_evicted = true;
  NystromPosterior nystrom(d.dim, d.arm, d.kernel, o);
  Rng rng(6);
  for (int i = 0; i < 20000; ++i) {
    const int j = static_cast<int>(rng.UniformInt(50));
    ASSERT_TRUE(nystrom.Observe(d.u[j], d.x.col(j), d.y(j) + 0.1 * rng.Normal()).ok());
  }
  EXPECT_EQ(nystrom.history_size(), 100);
  EXPECT_LE(nystrom.dictionary_size(), 30);
  // After 20,000 downdates the factor still agrees with a refactorisation from the window.
  Eigen::VectorXd before_mean, before_sd, after_mean, after_sd;
  const Eigen::MatrixXd q = d.x.leftCols(10);
  nystrom.Score(0, q, &before_mean, &before_sd);
  ASSERT_TRUE(nystrom.SetGraph(d.graph, d.kernel).ok());  // rebuilds from the retained window
  nystrom.Score(0, q, &after_mean, &after_sd);
  EXPECT_LT(RelativeError(before_mean, after_mean), 1e-6);
  EXPECT_LT(RelativeError(before_sd, after_sd), 1e-6);
}

TEST(BatchedNystromTest, KeepingEveryPointEqualsTheExactGp) {
  const int t = 40;
  const Data d = MakeData(t, 7);
  BatchedNystromOptions o;
  o.ridge = 0.2;
  o.oversampling = 1e12;  // every point is kept at a re-draw
  o.threshold = 1e12;     // re-draw only when asked
  BatchedNystromPosterior batched(d.dim, d.arm, d.kernel, o);
  ExactGpPosterior exact(d.dim, d.arm, d.kernel, 0.2);
  for (int i = 0; i < t; ++i) {
    ASSERT_TRUE(batched.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
    ASSERT_TRUE(exact.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
  }
  ASSERT_TRUE(batched.Resparsify().ok());
  EXPECT_EQ(batched.dictionary_size(), t);
  Rng rng(8);
  const Eigen::MatrixXd q = RandomMatrix(d.dim, 5, rng);
  for (int user : {0, 2, 4}) {
    Eigen::VectorXd ma, sa, mb, sb;
    batched.Score(user, q, &ma, &sa);
    exact.Score(user, q, &mb, &sb);
    EXPECT_LT(RelativeError(ma, mb), 1e-8);
    EXPECT_LT(RelativeError(sa, sb), 1e-8);
  }
}

TEST(BatchedNystromTest, PosteriorIsFrozenBetweenRedraws) {
  const Data d = MakeData(200, 9);
  BatchedNystromOptions o;
  o.ridge = 0.5;
  o.threshold = 3.0;
  o.oversampling = 5.0;
  BatchedNystromPosterior batched(d.dim, d.arm, d.kernel, o);
  Eigen::VectorXd frozen_mean, frozen_sd, mean, sd;
  const Eigen::MatrixXd q = d.x.leftCols(4);
  batched.Score(1, q, &frozen_mean, &frozen_sd);
  int64_t redraws = 0;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(batched.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
    batched.Score(1, q, &mean, &sd);
    if (batched.redraws() == redraws) {
      EXPECT_EQ(mean, frozen_mean) << "changed without a re-draw at step " << i;
    } else {
      redraws = batched.redraws();
      frozen_mean = mean;
    }
  }
  EXPECT_GT(redraws, 2);
  EXPECT_GT(batched.dictionary_size(), 0);
}

// Served, the re-draws are bounded: with a threshold far below the posterior variance the paper's
// rule re-draws after every observation; with min_growth it waits for the history to grow by
// that fraction, and the dictionary never exceeds its cap.
TEST(BatchedNystromTest, ServedRedrawsAreBoundedInFrequencyAndSize) {
  const int t = 300;
  const Data d = MakeData(t, 13);
  BatchedNystromOptions paper;
  paper.ridge = 0.01;  // variance 1 over ridge 0.01: every point looks new
  paper.threshold = 10.0;
  BatchedNystromOptions served = paper;
  served.min_growth = 0.1;
  served.max_dictionary_size = 50;
  BatchedNystromPosterior unbounded(d.dim, d.arm, d.kernel, paper);
  BatchedNystromPosterior bounded(d.dim, d.arm, d.kernel, served);
  int64_t max_m = 0;
  for (int i = 0; i < t; ++i) {
    ASSERT_TRUE(unbounded.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
    ASSERT_TRUE(bounded.Observe(d.u[i], d.x.col(i), d.y(i)).ok());
    max_m = std::max(max_m, bounded.dictionary_size());
  }
  EXPECT_GT(unbounded.redraws(), t / 4);
  // Growth by 10% at least between re-draws: about log(300) / log(1.1) = 60 re-draws at most.
  EXPECT_LE(bounded.redraws(), 62);
  EXPECT_GT(bounded.redraws(), 10);
  EXPECT_LE(max_m, 50);
  EXPECT_EQ(bounded.dictionary_size(), 50);
  // Still a posterior of the data: the bounded learner predicts the observed rewards better
  // than the prior mean 0 does.
  Eigen::VectorXd mean, sd;
  double err_model = 0.0, err_prior = 0.0;
  for (int i = 0; i < t; ++i) {
    bounded.Score(d.u[i], d.x.col(i), &mean, &sd);
    err_model += (mean(0) - d.y(i)) * (mean(0) - d.y(i));
    err_prior += d.y(i) * d.y(i);
  }
  EXPECT_LT(err_model, err_prior);
}

}  // namespace
}  // namespace graphbandit
