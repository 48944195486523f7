// SemiGraphTS and its baselines (core/learner/semi_parametric_ts.h) against the SG paper's
// formulas computed densely, and the property they exist for: a baseline that moves
// arbitrarily from round to round does not bias what the centred learners learn.
#include "core/learner/semi_parametric_ts.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/random.h"
#include "core/graph/user_graph.h"

namespace graphbandit {
namespace {

Eigen::MatrixXd RandomPoints(Rng& rng, int dim, int n) {
  Eigen::MatrixXd p(dim, n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < dim; ++i) p(i, j) = rng.Normal() / std::sqrt(dim);
  }
  return p;
}

Eigen::VectorXd RandomProbabilities(Rng& rng, int n) {
  Eigen::VectorXd p(n);
  for (int i = 0; i < n; ++i) p(i) = 0.05 + rng.Uniform();
  return p / p.sum();
}

SemiParametricOptions Options(bool centred, bool graph, double lambda) {
  SemiParametricOptions o;
  o.centred = centred;
  o.graph = graph;
  o.lambda = lambda;
  return o;
}

// A path 0 - 1 - 2 plus 1 - 3 with weights, and user 4 isolated.
UserGraph SmallGraph() {
  UserGraph g;
  g.EnsureUsers(5);
  g.SetEdge(0, 1, 1.0);
  g.SetEdge(1, 2, 2.0);
  g.SetEdge(1, 3, 0.5);
  return g;
}

TEST(SemiParametricTsTest, CentredStatisticsAreTheSgEstimatorComputedDensely) {
  const int dim = 4, n = 6;
  const double lambda = 0.7;
  SemiParametricTs learner(dim, Options(true, false, lambda));
  Rng rng(3);
  Eigen::MatrixXd b = lambda * Eigen::MatrixXd::Identity(dim, dim);
  Eigen::VectorXd y = Eigen::VectorXd::Zero(dim);
  for (int t = 0; t < 30; ++t) {
    const Eigen::MatrixXd points = RandomPoints(rng, dim, n);
    const Eigen::VectorXd pi = RandomProbabilities(rng, n);
    const int chosen = static_cast<int>(rng.UniformInt(n));
    const double r = rng.Normal();
    ASSERT_TRUE(learner.ObserveDecision(0, points, pi, chosen, r).ok());
    // SG eq. 6, term by term.
    Eigen::VectorXd mean_point = Eigen::VectorXd::Zero(dim);
    for (int i = 0; i < n; ++i) mean_point += pi(i) * points.col(i);
    const Eigen::VectorXd x = points.col(chosen) - mean_point;
    b += x * x.transpose();
    for (int i = 0; i < n; ++i) {
      const Eigen::VectorXd c = points.col(i) - mean_point;
      b += pi(i) * c * c.transpose();
    }
    y += 2.0 * x * r;
  }
  const Eigen::VectorXd mu_bar = b.inverse() * y;
  const Eigen::MatrixXd probe = RandomPoints(rng, dim, 5);
  Eigen::VectorXd mean, stddev;
  learner.Score(0, probe, &mean, &stddev);
  const Eigen::MatrixXd b_inverse = b.inverse();
  for (int i = 0; i < probe.cols(); ++i) {
    EXPECT_NEAR(mean(i), probe.col(i).dot(mu_bar), 1e-10);
    EXPECT_NEAR(stddev(i), std::sqrt(probe.col(i).dot(b_inverse * probe.col(i))), 1e-10);
  }
  EXPECT_EQ(learner.history_size(), 30);
}

TEST(SemiParametricTsTest, GraphAdjustmentIsEquationsSevenAndEight) {
  const int dim = 3, n = 4;
  const double lambda = 0.5;
  const UserGraph graph = SmallGraph();
  SemiParametricTs learner(dim, Options(true, true, lambda));
  ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
  Rng rng(11);
  for (int t = 0; t < 40; ++t) {
    ASSERT_TRUE(learner
                    .ObserveDecision(static_cast<int32_t>(t % 4), RandomPoints(rng, dim, n),
                                     RandomProbabilities(rng, n), static_cast<int>(t % n),
                                     rng.Normal())
                    .ok());
  }
  // The per-user statistics, read back through a graph-free learner fed the same decisions.
  SemiParametricTs alone(dim, Options(true, false, lambda));
  Rng replay(11);
  for (int t = 0; t < 40; ++t) {
    ASSERT_TRUE(alone
                    .ObserveDecision(static_cast<int32_t>(t % 4), RandomPoints(replay, dim, n),
                                     RandomProbabilities(replay, n), static_cast<int>(t % n),
                                     replay.Normal())
                    .ok());
  }
  // mu_bar_k and B_k^-1 of each user from the graph-free learner: with the identity basis,
  // Score's mean is mu_bar_k and stddev^2 the diagonal; the off-diagonal comes from e_a + e_b.
  auto stats = [&](int32_t k, Eigen::VectorXd* mu_bar, Eigen::MatrixXd* b_inverse) {
    Eigen::VectorXd mean, stddev;
    alone.Score(k, Eigen::MatrixXd::Identity(dim, dim), &mean, &stddev);
    *mu_bar = mean;
    b_inverse->resize(dim, dim);
    for (int a = 0; a < dim; ++a) {
      for (int c = 0; c < dim; ++c) {
        Eigen::VectorXd e = Eigen::VectorXd::Zero(dim);
        e(a) += 1.0;
        e(c) += 1.0;
        Eigen::VectorXd m, s;
        alone.Score(k, e, &m, &s);
        (*b_inverse)(a, c) =
            a == c ? stddev(a) * stddev(a)
                   : (s(0) * s(0) - stddev(a) * stddev(a) - stddev(c) * stddev(c)) / 2.0;
      }
    }
  };
  const Eigen::MatrixXd probe = RandomPoints(rng, dim, 6);
  for (int32_t j : {0, 1, 3, 4}) {
    SCOPED_TRACE(j);
    Eigen::VectorXd mu_bar_j;
    Eigen::MatrixXd b_inverse_j;
    stats(j, &mu_bar_j, &b_inverse_j);
    const Eigen::MatrixXd b_j = b_inverse_j.inverse();
    Eigen::VectorXd mu_hat = mu_bar_j;
    Eigen::MatrixXd gamma = b_j;
    const double degree = graph.Degree(j);
    for (const auto& [k, w] : graph.SortedNeighbours(j)) {
      const double l_jk = -w / degree;  // random-walk Laplacian
      Eigen::VectorXd mu_bar_k;
      Eigen::MatrixXd b_inverse_k;
      stats(k, &mu_bar_k, &b_inverse_k);
      mu_hat -= lambda * b_inverse_j * (l_jk * mu_bar_k);
      gamma += lambda * lambda * l_jk * l_jk * b_inverse_k;
    }
    Eigen::VectorXd mean, stddev;
    learner.Score(j, probe, &mean, &stddev);
    const Eigen::MatrixXd gamma_inverse = gamma.inverse();
    for (int i = 0; i < probe.cols(); ++i) {
      EXPECT_NEAR(mean(i), probe.col(i).dot(mu_hat), 1e-8);
      EXPECT_NEAR(stddev(i), std::sqrt(probe.col(i).dot(gamma_inverse * probe.col(i))), 1e-8);
    }
  }
}

// GraphUCB-Local (uncentred with the graph terms and the extra lambda I in Gamma) from the raw
// observations: its mean is one Jacobi step of the Laplacian-regularised normal equations,
// B_j^-1 (y_j + lambda sum_k (w_jk / deg_j) mu_bar_k), and its width is Yang et al.'s local
// confidence matrix G_j + 2 lambda I + lambda^2 sum_k (w_jk / deg_j)^2 B_k^-1.
TEST(SemiParametricTsTest, GraphUcbLocalIsOneJacobiStepWithYangsWidth) {
  const int dim = 3, users = 5;
  const double lambda = 0.6;
  const UserGraph graph = SmallGraph();
  SemiParametricOptions options = Options(false, true, lambda);
  options.code_gamma = true;
  SemiParametricTs learner(dim, options);
  ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
  std::vector<Eigen::MatrixXd> gram(users, Eigen::MatrixXd::Zero(dim, dim));
  std::vector<Eigen::VectorXd> y(users, Eigen::VectorXd::Zero(dim));
  Rng rng(17);
  for (int t = 0; t < 60; ++t) {
    const int32_t user = static_cast<int32_t>(t % 3);  // users 3 and 4 never report
    const Eigen::VectorXd x = RandomPoints(rng, dim, 1).col(0);
    const double r = rng.Normal();
    ASSERT_TRUE(learner.Observe(user, x, r).ok());
    gram[user] += x * x.transpose();
    y[user] += r * x;
  }
  const Eigen::MatrixXd identity = Eigen::MatrixXd::Identity(dim, dim);
  auto b = [&](int k) -> Eigen::MatrixXd { return lambda * identity + gram[k]; };
  auto mu_bar = [&](int k) -> Eigen::VectorXd { return b(k).inverse() * y[k]; };
  const Eigen::MatrixXd probe = RandomPoints(rng, dim, 6);
  for (int32_t j = 0; j < users; ++j) {
    SCOPED_TRACE(j);
    Eigen::VectorXd pull = y[j];
    Eigen::MatrixXd gamma = gram[j] + 2.0 * lambda * identity;
    const double degree = graph.Degree(j);
    for (const auto& [k, w] : graph.SortedNeighbours(j)) {
      pull += lambda * (w / degree) * mu_bar(k);
      gamma += lambda * lambda * (w / degree) * (w / degree) * b(k).inverse();
    }
    const Eigen::VectorXd mu_hat = b(j).inverse() * pull;
    Eigen::VectorXd mean, stddev;
    learner.Score(j, probe, &mean, &stddev);
    const Eigen::MatrixXd gamma_inverse = gamma.inverse();
    for (int i = 0; i < probe.cols(); ++i) {
      EXPECT_NEAR(mean(i), probe.col(i).dot(mu_hat), 1e-10);
      EXPECT_NEAR(stddev(i), std::sqrt(probe.col(i).dot(gamma_inverse * probe.col(i))), 1e-10);
    }
  }
  // A user with no rewards of their own starts from their friends' weighted average: user 3's
  // one friend is user 1, whose estimate is its own ridge solution (read from a learner without
  // the graph). A user without edges or data has the prior: mean 0, Gamma = 2 lambda I.
  SemiParametricTs alone(dim, Options(false, false, lambda));
  Rng replay(17);
  for (int t = 0; t < 60; ++t) {
    const Eigen::VectorXd x = RandomPoints(replay, dim, 1).col(0);
    ASSERT_TRUE(alone.Observe(static_cast<int32_t>(t % 3), x, replay.Normal()).ok());
  }
  Eigen::VectorXd newcomer, friend_estimate, stddev;
  learner.Score(3, identity, &newcomer, &stddev);
  alone.Score(1, identity, &friend_estimate, &stddev);
  EXPECT_GT(friend_estimate.norm(), 0.1);
  for (int a = 0; a < dim; ++a) EXPECT_NEAR(newcomer(a), friend_estimate(a), 1e-12);
  Eigen::VectorXd isolated;
  learner.Score(4, identity, &isolated, &stddev);
  EXPECT_EQ(isolated, Eigen::VectorXd::Zero(dim));
  for (int a = 0; a < dim; ++a) EXPECT_NEAR(stddev(a), std::sqrt(1.0 / (2.0 * lambda)), 1e-12);
}

TEST(SemiParametricTsTest, WithoutEdgesSemiGraphTsIsSemiTs) {
  const int dim = 3, n = 5;
  SemiParametricTs graph_ts(dim, Options(true, true, 1.0));
  SemiParametricTs semi_ts(dim, Options(true, false, 1.0));
  UserGraph empty;
  empty.EnsureUsers(3);
  ASSERT_TRUE(graph_ts.SetGraph(empty, nullptr).ok());
  Rng rng(5);
  for (int t = 0; t < 25; ++t) {
    const Eigen::MatrixXd points = RandomPoints(rng, dim, n);
    const Eigen::VectorXd pi = RandomProbabilities(rng, n);
    const double r = rng.Normal();
    ASSERT_TRUE(graph_ts.ObserveDecision(t % 3, points, pi, t % n, r).ok());
    ASSERT_TRUE(semi_ts.ObserveDecision(t % 3, points, pi, t % n, r).ok());
  }
  const Eigen::MatrixXd probe = RandomPoints(rng, dim, 4);
  Rng a(9), b(9);
  Eigen::MatrixXd va, vb;
  graph_ts.SampleValues(1, probe, 0.3, 50, a, &va);
  semi_ts.SampleValues(1, probe, 0.3, 50, b, &vb);
  EXPECT_EQ(va, vb);
}

TEST(SemiParametricTsTest, SampledValuesHaveTheSamplingDistributionsMoments) {
  const int dim = 3, n = 4;
  SemiParametricTs learner(dim, Options(true, false, 1.0));
  Rng rng(21);
  for (int t = 0; t < 20; ++t) {
    ASSERT_TRUE(learner
                    .ObserveDecision(0, RandomPoints(rng, dim, n), RandomProbabilities(rng, n),
                                     t % n, 1.0 + rng.Normal())
                    .ok());
  }
  const Eigen::MatrixXd probe = RandomPoints(rng, dim, n);
  Eigen::VectorXd mean, stddev;
  learner.Score(0, probe, &mean, &stddev);
  const double v = 0.8;
  const int draws = 40000;
  Eigen::MatrixXd values;
  learner.SampleValues(0, probe, v, draws, rng, &values);
  ASSERT_EQ(values.rows(), draws);
  ASSERT_EQ(values.cols(), n);
  for (int i = 0; i < n; ++i) {
    const double m = values.col(i).mean();
    const double sd = std::sqrt((values.col(i).array() - m).square().mean());
    // Monte Carlo: 40,000 draws give about 0.5% of the spread.
    EXPECT_NEAR(m, mean(i), 0.03 * v * stddev(i));
    EXPECT_NEAR(sd, v * stddev(i), 0.03 * v * stddev(i));
  }
}

// Rewards nu_t + b^T mu + noise where the round's baseline nu_t depends on the round's whole
// candidate set (here 2 * the sum of their first features, plus a jump of +-3 every round), as a
// page's baseline depends on what the page shows; arms chosen uniformly (pi known). Such a
// baseline is correlated with the chosen arm's features, so LinTS, which regresses rewards on
// them, is biased; the centred estimator is not (E[X nu] = 0 for any nu fixed by the round).
TEST(SemiParametricTsTest, ABaselineSetByTheCandidatesDoesNotBiasTheCentredEstimator) {
  const int dim = 3, n = 5;
  Eigen::VectorXd mu(dim);
  mu << 0.6, -0.3, 0.5;
  SemiParametricTs centred(dim, Options(true, false, 1.0));
  SemiParametricTs lin(dim, Options(false, false, 1.0));
  Rng rng(8);
  const Eigen::VectorXd uniform = Eigen::VectorXd::Constant(n, 1.0 / n);
  for (int t = 0; t < 20000; ++t) {
    const Eigen::MatrixXd points = RandomPoints(rng, dim, n) * 2.0;
    const double nu = 2.0 * points.row(0).sum() + (t % 2 == 0 ? 3.0 : -3.0);
    const int chosen = static_cast<int>(rng.UniformInt(n));
    const double r = nu + points.col(chosen).dot(mu) + 0.1 * rng.Normal();
    ASSERT_TRUE(centred.ObserveDecision(0, points, uniform, chosen, r).ok());
    ASSERT_TRUE(lin.ObserveDecision(0, points, uniform, chosen, r).ok());
  }
  Eigen::VectorXd estimate, lin_estimate, ignored;
  centred.Score(0, Eigen::MatrixXd::Identity(dim, dim), &estimate, &ignored);
  lin.Score(0, Eigen::MatrixXd::Identity(dim, dim), &lin_estimate, &ignored);
  // Monte Carlo error of the centred estimate: about 0.03 per coordinate here.
  EXPECT_LT((estimate - mu).norm(), 0.15) << estimate.transpose();
  // LinTS's first coordinate absorbs the baseline's slope (about +2).
  EXPECT_GT((lin_estimate - mu).norm(), 1.0) << lin_estimate.transpose();
}

TEST(SemiParametricTsTest, RefusesWhatItCannotLearnFrom) {
  SemiParametricTs learner(2, Options(true, true, 1.0));
  Eigen::MatrixXd points(2, 3);
  points << 0.1, 0.2, 0.3, 0.4, 0.5, 0.6;
  EXPECT_EQ(learner.Observe(0, points.col(0), 1.0).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(learner.ObserveDecision(0, points, Eigen::Vector3d(0.5, 0.5, 0.5), 0, 1.0).code(),
            absl::StatusCode::kInvalidArgument);  // does not sum to 1
  EXPECT_EQ(learner.ObserveDecision(0, points, Eigen::Vector3d(1.2, -0.2, 0.0), 0, 1.0).code(),
            absl::StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ(learner.ObserveDecision(0, points, Eigen::Vector2d(0.5, 0.5), 0, 1.0).code(),
            absl::StatusCode::kInvalidArgument);  // one per candidate
  EXPECT_EQ(learner.ObserveDecision(0, points, Eigen::Vector3d(0.2, 0.3, 0.5), 3, 1.0).code(),
            absl::StatusCode::kInvalidArgument);  // not a candidate
  EXPECT_EQ(learner.ObserveDecision(-1, points, Eigen::Vector3d(0.2, 0.3, 0.5), 0, 1.0).code(),
            absl::StatusCode::kInvalidArgument);  // no user
  EXPECT_EQ(learner.history_size(), 0);
  EXPECT_FALSE(Options(true, true, 0.0).Validate().ok());
}

TEST(SemiParametricTsTest, SnapshotRestoresABitIdenticalLearner) {
  const int dim = 3, n = 4;
  const UserGraph graph = SmallGraph();
  SemiParametricTs learner(dim, Options(true, true, 0.5));
  ASSERT_TRUE(learner.SetGraph(graph, nullptr).ok());
  Rng rng(2);
  for (int t = 0; t < 30; ++t) {
    ASSERT_TRUE(learner
                    .ObserveDecision(t % 5, RandomPoints(rng, dim, n), RandomProbabilities(rng, n),
                                     t % n, rng.Normal())
                    .ok());
  }
  storage::Encoder out;
  learner.SaveState(&out);
  SemiParametricTs restored(dim, Options(true, true, 0.5));
  ASSERT_TRUE(restored.SetGraph(graph, nullptr).ok());
  storage::Decoder in(out.data());
  ASSERT_TRUE(restored.LoadState(&in).ok());
  EXPECT_TRUE(in.done());
  // Learning goes on identically, and so do the draws.
  const Eigen::MatrixXd points = RandomPoints(rng, dim, n);
  const Eigen::VectorXd pi = RandomProbabilities(rng, n);
  ASSERT_TRUE(learner.ObserveDecision(1, points, pi, 2, 0.7).ok());
  ASSERT_TRUE(restored.ObserveDecision(1, points, pi, 2, 0.7).ok());
  for (int32_t user = 0; user < 6; ++user) {
    Rng a(4), b(4);
    Eigen::MatrixXd va, vb;
    learner.Freeze()->SampleValues(user, points, 0.5, 20, a, &va);
    restored.Freeze()->SampleValues(user, points, 0.5, 20, b, &vb);
    EXPECT_EQ(va, vb) << user;
  }
  // A damaged frame is refused.
  std::string bytes = out.data();
  bytes[bytes.size() / 2] ^= 0x20;
  SemiParametricTs damaged(dim, Options(true, true, 0.5));
  storage::Decoder bad(bytes);
  EXPECT_EQ(damaged.LoadState(&bad).code(), absl::StatusCode::kDataLoss);
}

TEST(SemiParametricTsTest, FrozenScorersKeepTheirState) {
  SemiParametricTs learner(2, Options(false, false, 1.0));
  const auto before = learner.Freeze();
  ASSERT_TRUE(learner.Observe(0, Eigen::Vector2d(1.0, 0.0), 1.0).ok());
  Eigen::VectorXd mean, stddev;
  before->Score(0, Eigen::Vector2d(1.0, 0.0), &mean, &stddev);
  EXPECT_EQ(mean(0), 0.0);
  learner.Freeze()->Score(0, Eigen::Vector2d(1.0, 0.0), &mean, &stddev);
  EXPECT_NEAR(mean(0), 0.5, 1e-12);  // (1 + 1)^-1 * 1
}

}  // namespace
}  // namespace graphbandit
