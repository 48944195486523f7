// The linear baselines (per-user / pooled LinUCB, GraphUCB, GoB.Lin; docs/algorithms.md §1.9)
// against slow, direct formulas: fresh solves of A_u = lambda I + X_u^T X_u, of the pooled A, and
// of the explicit nd x nd Kronecker system lambda (L + rho I) (x) I_d + Phi^T Phi; the exact GP
// with the linear arm kernel and the Green's-function user kernel; LinUCB on explicitly whitened
// features (GoB.Lin); rebuilds after a graph change; frozen copies; drift over a long run;
// validation.
#include "core/learner/linear_posterior.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/exact_gp_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using Prior = LinearOptions::Prior;
using testing::RandomMatrix;
using testing::RelativeError;

constexpr double kTolerance = 1e-8;

// Observations by users 0..data_users-1 in random order.
struct Data {
  Eigen::MatrixXd x;  // dim x t
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

Data MakeData(int dim, int t, int data_users, uint64_t seed) {
  Rng rng(seed);
  Data data;
  data.x = RandomMatrix(dim, t, rng);
  for (int i = 0; i < t; ++i)
    data.users.push_back(static_cast<int32_t>(rng.UniformInt(data_users)));
  data.y = RandomMatrix(t, 1, rng);
  return data;
}

// Eight users: a connected core 0..5 (a path plus a chord), users 6 and 7 isolated.
UserGraph MakeGraph() {
  UserGraph graph;
  graph.EnsureUsers(8);
  for (int u = 0; u + 1 < 6; ++u) graph.SetEdge(u, u + 1, 1.0 + 0.5 * u);
  graph.SetEdge(0, 4, 0.7);
  return graph;
}

// A random graph on n users: each edge present with probability p, weights in [0.5, 2).
UserGraph RandomGraph(int n, double p, uint64_t seed) {
  Rng rng(seed);
  UserGraph graph;
  graph.EnsureUsers(n);
  for (int u = 0; u < n; ++u) {
    for (int v = u + 1; v < n; ++v) {
      if (rng.Uniform() < p) graph.SetEdge(u, v, 0.5 + 1.5 * rng.Uniform());
    }
  }
  return graph;
}

void Feed(LinearUcbPosterior& learner, const Data& data, int from = 0, int to = -1) {
  if (to < 0) to = static_cast<int>(data.users.size());
  for (int i = from; i < to; ++i) {
    ASSERT_TRUE(learner.Observe(data.users[i], data.x.col(i), data.y(i)).ok()) << i;
  }
}

// The combinatorial Laplacian of `graph`, padded with zero rows to `n` users.
Eigen::MatrixXd PaddedLaplacian(const UserGraph& graph, int n) {
  Eigen::MatrixXd l = Eigen::MatrixXd::Zero(n, n);
  for (int u = 0; u < graph.num_users(); ++u) {
    for (const auto& [v, w] : graph.Neighbours(u)) {
      l(u, v) -= w;
      l(u, u) += w;
    }
  }
  return l;
}

// Ridge regression in R^{nd} with prior precision P (x) I_d (P over n users), through one dense
// solve: mean = f^T A^-1 b and width = sqrt(f^T A^-1 f) with f = e_u (x) q.
struct DirectRidge {
  int dim;
  Eigen::MatrixXd a;
  Eigen::VectorXd b;

  DirectRidge(const Eigen::MatrixXd& user_precision, const Data& data, int t) {
    dim = static_cast<int>(data.x.rows());
    const int n = static_cast<int>(user_precision.rows());
    // Kronecker blocks of the prior, written out one d x d block at a time.
    a = Eigen::MatrixXd::Zero(n * dim, n * dim);
    for (int u = 0; u < n; ++u) {
      for (int v = 0; v < n; ++v) {
        a.block(u * dim, v * dim, dim, dim) =
            user_precision(u, v) * Eigen::MatrixXd::Identity(dim, dim);
      }
    }
    Eigen::MatrixXd phi = Eigen::MatrixXd::Zero(t, n * dim);
    for (int i = 0; i < t; ++i)
      phi.block(i, data.users[i] * dim, 1, dim) = data.x.col(i).transpose();
    a += phi.transpose() * phi;
    b = phi.transpose() * data.y.head(t);
  }

  void Score(int user, const Eigen::MatrixXd& q, Eigen::VectorXd* mean,
             Eigen::VectorXd* width) const {
    Eigen::MatrixXd f = Eigen::MatrixXd::Zero(a.rows(), q.cols());
    f.middleRows(user * dim, dim) = q;
    const Eigen::FullPivLU<Eigen::MatrixXd> lu(a);
    *mean = f.transpose() * lu.solve(b);
    const Eigen::MatrixXd solved = lu.solve(f);
    *width = f.cwiseProduct(solved).colwise().sum().transpose().cwiseMax(0.0).cwiseSqrt();
  }
};

// Per-user LinUCB written directly: A_u = lambda I + X_u^T X_u, b_u = X_u^T y_u.
void DirectPerUser(const Data& data, int t, double lambda, int user, bool pooled,
                   const Eigen::MatrixXd& q, Eigen::VectorXd* mean, Eigen::VectorXd* width) {
  const int d = static_cast<int>(data.x.rows());
  std::vector<int> rows;
  for (int i = 0; i < t; ++i)
    if (pooled || data.users[i] == user) rows.push_back(i);
  Eigen::MatrixXd xu(d, rows.size());
  Eigen::VectorXd yu(rows.size());
  for (size_t j = 0; j < rows.size(); ++j) {
    xu.col(j) = data.x.col(rows[j]);
    yu(j) = data.y(rows[j]);
  }
  const Eigen::MatrixXd a = lambda * Eigen::MatrixXd::Identity(d, d) + xu * xu.transpose();
  const Eigen::FullPivLU<Eigen::MatrixXd> lu(a);
  *mean = q.transpose() * lu.solve(xu * yu);
  *width = q.cwiseProduct(lu.solve(q)).colwise().sum().transpose().cwiseMax(0.0).cwiseSqrt();
}

void ExpectClose(const Eigen::VectorXd& mean, const Eigen::VectorXd& width,
                 const Eigen::VectorXd& direct_mean, const Eigen::VectorXd& direct_width,
                 double tolerance, int user) {
  EXPECT_LT(RelativeError(mean, direct_mean, 1e-12), tolerance) << "user " << user;
  EXPECT_LT(RelativeError(width, direct_width), tolerance) << "user " << user;
}

// Compares kGraph scores for users 0..users-1 and kUnknownUser with the direct Kronecker solve;
// the direct system has one extra user (index `users`, no data, no edges) standing for
// kUnknownUser. Returns the largest relative error seen.
double CheckGraphAgainstDirect(const Scorer& scorer, const UserGraph& graph, const Data& data,
                               int t, int users, double lambda, double rho, uint64_t seed,
                               double tolerance) {
  const int n = users + 1;
  const Eigen::MatrixXd precision =
      lambda * (PaddedLaplacian(graph, n) + rho * Eigen::MatrixXd::Identity(n, n));
  const DirectRidge direct(precision, data, t);
  Rng rng(seed);
  const Eigen::MatrixXd q = RandomMatrix(static_cast<int>(data.x.rows()), 7, rng);
  double worst = 0.0;
  for (int user = -1; user < users; ++user) {
    Eigen::VectorXd mean, width, direct_mean, direct_width;
    scorer.Score(user, q, &mean, &width);
    direct.Score(user < 0 ? users : user, q, &direct_mean, &direct_width);
    ExpectClose(mean, width, direct_mean, direct_width, tolerance, user);
    worst = std::max(
        {worst, RelativeError(mean, direct_mean, 1e-12), RelativeError(width, direct_width)});
  }
  return worst;
}

LinearOptions Options(Prior prior, double lambda = 0.7, double rho = 0.3) {
  LinearOptions options;
  options.prior = prior;
  options.lambda = lambda;
  options.rho = rho;
  return options;
}

TEST(LinearUcbPosteriorTest, PerUserMatchesDirectSolves) {
  const int dim = 4;
  const Data data = MakeData(dim, 80, 6, 1);
  LinearUcbPosterior learner(dim, Options(Prior::kPerUser));
  ASSERT_TRUE(learner.SetGraph(MakeGraph(), nullptr).ok());  // ignored
  Feed(learner, data);
  Rng rng(2);
  const Eigen::MatrixXd q = RandomMatrix(dim, 9, rng);
  // Users 6 and 7 (and kUnknownUser) have no data: mean 0, width sqrt(|x|^2 / lambda).
  for (int user = -1; user < 8; ++user) {
    Eigen::VectorXd mean, width, direct_mean, direct_width;
    learner.Score(user, q, &mean, &width);
    DirectPerUser(data, 80, 0.7, user, /*pooled=*/false, q, &direct_mean, &direct_width);
    ExpectClose(mean, width, direct_mean, direct_width, kTolerance, user);
    if (user == -1 || user >= 6) {
      EXPECT_TRUE(mean.isZero());
      EXPECT_LT(RelativeError(width, (q.colwise().squaredNorm().transpose() / 0.7).cwiseSqrt()),
                1e-14);
    }
  }
  EXPECT_EQ(learner.num_components(), 6);
  EXPECT_EQ(learner.history_size(), 80);
  EXPECT_EQ(learner.dictionary_size(), 0);
}

TEST(LinearUcbPosteriorTest, PooledMatchesDirectSolve) {
  const int dim = 5;
  const Data data = MakeData(dim, 60, 7, 3);
  LinearUcbPosterior learner(dim, Options(Prior::kPooled, 1.3));
  Rng rng(4);
  const Eigen::MatrixXd q = RandomMatrix(dim, 9, rng);
  {
    Eigen::VectorXd mean, width;  // the prior, before any data
    learner.Score(3, q, &mean, &width);
    EXPECT_TRUE(mean.isZero());
    EXPECT_LT(RelativeError(width, (q.colwise().squaredNorm().transpose() / 1.3).cwiseSqrt()),
              1e-14);
  }
  Feed(learner, data);
  Eigen::VectorXd direct_mean, direct_width;
  DirectPerUser(data, 60, 1.3, 0, /*pooled=*/true, q, &direct_mean, &direct_width);
  for (int user : {-1, 0, 3, 6, 20}) {  // every user, known or not, shares the one model
    Eigen::VectorXd mean, width;
    learner.Score(user, q, &mean, &width);
    ExpectClose(mean, width, direct_mean, direct_width, kTolerance, user);
  }
  EXPECT_EQ(learner.num_components(), 1);
}

TEST(LinearUcbPosteriorTest, GraphMatchesDirectKroneckerSolve) {
  // Graph users 0..7 (6 and 7 isolated); data from users 0..9 (8 and 9 beyond the graph); user
  // 10 has neither data nor edges; kUnknownUser is the prior.
  const int dim = 4;
  const Data data = MakeData(dim, 90, 10, 5);
  const UserGraph graph = MakeGraph();
  LinearUcbPosterior learner(dim, Options(Prior::kGraph));
  ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
  for (int t : {0, 30, 60, 90}) {
    if (t > 0) Feed(learner, data, t - 30, t);
    CheckGraphAgainstDirect(learner, graph, data, t, 11, 0.7, 0.3, 6 + t, kTolerance);
  }
  // One dense block for the connected core, singletons for 6..9.
  EXPECT_EQ(learner.num_components(), 5);
}

TEST(LinearUcbPosteriorTest, GraphEqualsExactGpWithLinearKernelAndGreenFunction) {
  // theta ~ N(0, (L + rho I)^-1 (x) I_d) with noise variance lambda is the GP with
  // k((x,u),(x',u')) = G(u,u') <x,x'>: same posterior mean, GP variance = lambda * width^2.
  const int dim = 4;
  const double lambda = 0.4, rho = 0.25;
  const Data data = MakeData(dim, 70, 10, 7);
  const UserGraph graph = MakeGraph();
  std::shared_ptr<const UserKernel> green = *GreenFunction::Build(graph, rho);
  ExactGpPosterior gp(dim, ArmKernel(KernelType::kLinear, 1.0), green, lambda);
  LinearUcbPosterior learner(dim, Options(Prior::kGraph, lambda, rho));
  ASSERT_TRUE(learner.SetGraph(graph, green).ok());
  for (int i = 0; i < data.x.cols(); ++i) {
    ASSERT_TRUE(gp.Observe(data.users[i], data.x.col(i), data.y(i)).ok());
  }
  Feed(learner, data);
  Rng rng(8);
  const Eigen::MatrixXd q = RandomMatrix(dim, 8, rng);
  for (int user = -1; user < 11; ++user) {
    Eigen::VectorXd mean, width, gp_mean, gp_sd;
    learner.Score(user, q, &mean, &width);
    gp.Score(user, q, &gp_mean, &gp_sd);
    ExpectClose(mean, std::sqrt(lambda) * width, gp_mean, gp_sd, kTolerance, user);
  }
}

TEST(LinearUcbPosteriorTest, GraphChangeRebuildEqualsLearningUnderTheNewGraph) {
  const int dim = 3;
  const Data data = MakeData(dim, 120, 10, 9);
  UserGraph before = MakeGraph();
  UserGraph after = MakeGraph();
  after.SetEdge(6, 7, 2.0);  // connect the two isolated users...
  after.RemoveEdge(0, 4);
  after.SetEdge(5, 6, 0.3);  // ...to the core
  after.SetEdge(8, 9, 1.1);  // and bring two users that were beyond the graph into it
  after.SetEdge(1, 9, 0.6);
  LinearUcbPosterior rebuilt(dim, Options(Prior::kGraph));
  ASSERT_TRUE(rebuilt.SetGraph(before, nullptr).ok());
  Feed(rebuilt, data, 0, 100);
  ASSERT_TRUE(rebuilt.SetGraph(after, nullptr).ok());
  LinearUcbPosterior fresh(dim, Options(Prior::kGraph));
  ASSERT_TRUE(fresh.SetGraph(after, nullptr).ok());
  Feed(fresh, data, 0, 100);
  // Learning continues identically after the rebuild.
  Feed(rebuilt, data, 100, 120);
  Feed(fresh, data, 100, 120);
  Rng rng(10);
  const Eigen::MatrixXd q = RandomMatrix(dim, 6, rng);
  for (int user = -1; user < 12; ++user) {
    Eigen::VectorXd mean, width, fresh_mean, fresh_width;
    rebuilt.Score(user, q, &mean, &width);
    fresh.Score(user, q, &fresh_mean, &fresh_width);
    EXPECT_LT(RelativeError(mean, fresh_mean, 1e-12), 1e-10) << "user " << user;
    EXPECT_LT(RelativeError(width, fresh_width), 1e-10) << "user " << user;
  }
  CheckGraphAgainstDirect(rebuilt, after, data, 120, 12, 0.7, 0.3, 11, kTolerance);
  EXPECT_EQ(rebuilt.history_size(), 120);
}

TEST(LinearUcbPosteriorTest, FrozenScorerIsIndependentOfLaterLearning) {
  const int dim = 4;
  const Data data = MakeData(dim, 60, 10, 12);
  for (Prior prior : {Prior::kPerUser, Prior::kPooled, Prior::kGraph}) {
    LinearUcbPosterior learner(dim, Options(prior));
    ASSERT_TRUE(learner.SetGraph(MakeGraph(), nullptr).ok());
    Feed(learner, data, 0, 30);
    const std::shared_ptr<const Scorer> frozen = learner.Freeze();
    Rng rng(13);
    const Eigen::MatrixXd q = RandomMatrix(dim, 5, rng);
    std::vector<Eigen::VectorXd> means, widths;
    for (int user = -1; user < 11; ++user) {
      Eigen::VectorXd live_mean, live_width, mean, width;
      learner.Score(user, q, &live_mean, &live_width);
      frozen->Score(user, q, &mean, &width);
      EXPECT_EQ(mean, live_mean) << LinearPriorName(prior) << " user " << user;  // bit-identical
      EXPECT_EQ(width, live_width) << LinearPriorName(prior) << " user " << user;
      means.push_back(mean);
      widths.push_back(width);
    }
    Feed(learner, data, 30, 60);
    UserGraph changed = MakeGraph();
    changed.SetEdge(6, 7, 1.0);
    ASSERT_TRUE(learner.SetGraph(changed, nullptr).ok());
    ASSERT_TRUE(learner.Observe(10, q.col(0), 2.0).ok());
    for (int user = -1; user < 11; ++user) {
      Eigen::VectorXd mean, width, live_mean, live_width;
      frozen->Score(user, q, &mean, &width);
      EXPECT_EQ(mean, means[user + 1]) << LinearPriorName(prior) << " user " << user;
      EXPECT_EQ(width, widths[user + 1]) << LinearPriorName(prior) << " user " << user;
    }
    Eigen::VectorXd live_mean, live_width;
    learner.Score(1, q, &live_mean, &live_width);
    EXPECT_NE(live_mean, means[2]) << LinearPriorName(prior);
    // A second freeze of an unchanged learner scores identically to the live one.
    const std::shared_ptr<const Scorer> again = learner.Freeze();
    for (int user = -1; user < 12; ++user) {
      Eigen::VectorXd mean, width;
      learner.Score(user, q, &live_mean, &live_width);
      again->Score(user, q, &mean, &width);
      EXPECT_EQ(mean, live_mean) << LinearPriorName(prior) << " user " << user;
      EXPECT_EQ(width, live_width) << LinearPriorName(prior) << " user " << user;
    }
  }
}

TEST(LinearUcbPosteriorTest, LongRunStaysCloseToTheDirectFormula) {
  // 5,000 Sherman-Morrison updates on one 60-row component (12 users, d = 5): without any
  // refresh (the raw drift), with the automatic period (32 * 60 updates) and with a refresh
  // every 7 updates.
  const int dim = 5, users = 12, t = 5000;
  const UserGraph graph = RandomGraph(users, 0.4, 14);
  ASSERT_EQ(graph.CountComponents(), 1);
  const Data data = MakeData(dim, t, users, 15);
  for (int64_t interval : {int64_t{-1}, int64_t{0}, int64_t{7}}) {
    LinearOptions options = Options(Prior::kGraph, 1.0, 0.1);
    options.refresh_interval = interval;
    LinearUcbPosterior learner(dim, options);
    ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
    Feed(learner, data);
    EXPECT_EQ(learner.refreshes(), interval < 0 ? 0 : t / (interval == 0 ? 32 * 60 : interval));
    const double worst =
        CheckGraphAgainstDirect(learner, graph, data, t, users, 1.0, 0.1, 16, kTolerance);
    std::printf("refresh_interval %lld: worst relative error %.3g after %d updates\n",
                static_cast<long long>(interval), worst, t);
  }
  for (Prior prior : {Prior::kPerUser, Prior::kPooled}) {
    LinearOptions options = Options(prior);
    options.refresh_interval = -1;
    LinearUcbPosterior learner(dim, options);
    Feed(learner, data);
    Rng rng(17);
    const Eigen::MatrixXd q = RandomMatrix(dim, 6, rng);
    for (int user = 0; user < users; ++user) {
      Eigen::VectorXd mean, width, direct_mean, direct_width;
      learner.Score(user, q, &mean, &width);
      DirectPerUser(data, t, 0.7, user, prior == Prior::kPooled, q, &direct_mean, &direct_width);
      ExpectClose(mean, width, direct_mean, direct_width, kTolerance, user);
    }
  }
}

TEST(LinearUcbPosteriorTest, GobLinIsLinUcbOnWhitenedFeatures) {
  // GoB.Lin: LinUCB with ridge 1 on psi = A_(x)^{-1/2} (e_u (x) x), A_(x) = (I + L) (x) I_d,
  // which must equal kGraph with rho = 1, lambda = 1.
  const int dim = 3, n = 8, t = 70;
  const UserGraph graph = MakeGraph();
  const Data data = MakeData(dim, t, n, 18);
  const Eigen::MatrixXd user_a = Eigen::MatrixXd::Identity(n, n) + PaddedLaplacian(graph, n);
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(user_a);
  const Eigen::MatrixXd user_whitening = eig.eigenvectors() *
                                         eig.eigenvalues().cwiseInverse().cwiseSqrt().asDiagonal() *
                                         eig.eigenvectors().transpose();
  Eigen::MatrixXd whitening = Eigen::MatrixXd::Zero(n * dim, n * dim);  // (.)^{-1/2} (x) I_d
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) {
      whitening.block(u * dim, v * dim, dim, dim) =
          user_whitening(u, v) * Eigen::MatrixXd::Identity(dim, dim);
    }
  }
  auto feature = [&](int user, const Eigen::VectorXd& x) {
    Eigen::VectorXd phi = Eigen::VectorXd::Zero(n * dim);
    phi.segment(user * dim, dim) = x;
    return Eigen::VectorXd(whitening * phi);
  };
  Eigen::MatrixXd m = Eigen::MatrixXd::Identity(n * dim, n * dim);
  Eigen::VectorXd b = Eigen::VectorXd::Zero(n * dim);
  for (int i = 0; i < t; ++i) {
    const Eigen::VectorXd psi = feature(data.users[i], data.x.col(i));
    m += psi * psi.transpose();
    b += data.y(i) * psi;
  }
  const Eigen::FullPivLU<Eigen::MatrixXd> lu(m);
  const Eigen::VectorXd theta = lu.solve(b);

  LinearUcbPosterior learner(dim, Options(Prior::kGraph, 1.0, 1.0));
  ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
  Feed(learner, data);
  Rng rng(19);
  const Eigen::MatrixXd q = RandomMatrix(dim, 6, rng);
  for (int user = 0; user < n; ++user) {
    Eigen::VectorXd direct_mean(q.cols()), direct_width(q.cols()), mean, width;
    for (int j = 0; j < q.cols(); ++j) {
      const Eigen::VectorXd psi = feature(user, q.col(j));
      direct_mean(j) = psi.dot(theta);
      direct_width(j) = std::sqrt(psi.dot(lu.solve(psi)));
    }
    learner.Score(user, q, &mean, &width);
    ExpectClose(mean, width, direct_mean, direct_width, kTolerance, user);
  }
}

TEST(LinearUcbPosteriorTest, RejectsBadObservationsAndKeepsItsState) {
  const int dim = 4;
  const Data data = MakeData(dim, 40, 10, 20);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (Prior prior : {Prior::kPerUser, Prior::kPooled, Prior::kGraph}) {
    LinearUcbPosterior learner(dim, Options(prior));
    ASSERT_TRUE(learner.SetGraph(MakeGraph(), nullptr).ok());
    Feed(learner, data);
    const int components = learner.num_components();
    Rng rng(21);
    const Eigen::MatrixXd q = RandomMatrix(dim, 5, rng);
    std::vector<Eigen::VectorXd> means, widths;
    for (int user = -1; user < 12; ++user) {
      Eigen::VectorXd mean, width;
      learner.Score(user, q, &mean, &width);
      means.push_back(mean);
      widths.push_back(width);
    }
    Eigen::VectorXd with_nan = q.col(0);
    with_nan(2) = nan;
    EXPECT_EQ(learner.Observe(kUnknownUser, q.col(0), 1.0).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(-7, q.col(0), 1.0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(11, Eigen::VectorXd::Zero(dim + 1), 1.0).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(11, Eigen::VectorXd::Zero(dim - 1), 1.0).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(11, with_nan, 1.0).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(2, q.col(0), nan).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.Observe(2, q.col(0), inf).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(learner.history_size(), 40);
    EXPECT_EQ(learner.num_components(), components);  // no singleton for the rejected user 11
    for (int user = -1; user < 12; ++user) {
      Eigen::VectorXd mean, width;
      learner.Score(user, q, &mean, &width);
      EXPECT_EQ(mean, means[user + 1]) << LinearPriorName(prior) << " user " << user;
      EXPECT_EQ(width, widths[user + 1]) << LinearPriorName(prior) << " user " << user;
    }
  }
}

TEST(LinearUcbPosteriorTest, OptionsAndNames) {
  EXPECT_TRUE(LinearOptions().Validate().ok());
  LinearOptions bad;
  bad.lambda = 0.0;
  EXPECT_FALSE(bad.Validate().ok());
  bad = LinearOptions();
  bad.rho = -1.0;
  EXPECT_FALSE(bad.Validate().ok());
  bad.prior = Prior::kPerUser;  // rho is not used there
  EXPECT_TRUE(bad.Validate().ok());
  bad.lambda = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(bad.Validate().ok());
  for (Prior prior : {Prior::kPerUser, Prior::kPooled, Prior::kGraph}) {
    EXPECT_EQ(*ParseLinearPrior(LinearPriorName(prior)), prior);
  }
  EXPECT_FALSE(ParseLinearPrior("gob").ok());
}

}  // namespace
}  // namespace graphbandit
