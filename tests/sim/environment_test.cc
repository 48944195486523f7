// The simulated environments: determinism, the EK reward definitions, and the covariance of the
// LK GP draws.
#include "sim/environment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>

namespace graphbandit::sim {
namespace {

using ::testing::ElementsAre;

TEST(EnvironmentTest, RoundsArePureFunctionsOfSeedAndIndex) {
  EnvironmentOptions options;
  options.seed = 4;
  const Environment a = *Environment::Create(options), b = *Environment::Create(options);
  EXPECT_EQ(a.means(), b.means());
  for (uint64_t t : {0ull, 1ull, 999ull}) {
    const Round ra = a.MakeRound(t), rb = b.MakeRound(t);
    EXPECT_EQ(ra.user, rb.user);
    EXPECT_EQ(ra.items, rb.items);
    EXPECT_EQ(ra.noise, rb.noise);
    EXPECT_EQ(ra.arms, rb.arms);
  }
  const Round round = a.MakeRound(7);
  std::vector<int> items = round.items;
  std::sort(items.begin(), items.end());
  EXPECT_EQ(std::unique(items.begin(), items.end()), items.end());  // distinct candidates
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(round.means(k), a.means()(round.items[k], round.user));
    EXPECT_NEAR(round.arms.col(k).norm(), 1.0, 1e-12);  // unit-norm items
  }
  options.seed = 5;
  EXPECT_NE(Environment::Create(options)->means(), a.means());
}

TEST(EnvironmentTest, GpDrawHasTheMultiUserCovariance) {
  // Pool the draws of many seeds that share items and graph... they do not: items and graph
  // change with the seed. So check the defining identity per draw instead, in distribution:
  // whitening the draw with the covariance G_env (x) K_x must give iid standard normals.
  EnvironmentOptions options;
  options.users = 6;
  options.pool = 5;
  options.dim = 3;
  options.candidates = 2;
  options.exponent = 0.5;
  double sum = 0.0, sum_sq = 0.0;
  int count = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    options.seed = seed;
    const Environment env = *Environment::Create(options);
    const Eigen::MatrixXd l =
        DenseLaplacian(options.users, env.edges()) + options.rho * Eigen::MatrixXd::Identity(6, 6);
    Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(l);
    const Eigen::MatrixXd green = eig.eigenvectors() *
                                  eig.eigenvalues().array().pow(-0.5).matrix().asDiagonal() *
                                  eig.eigenvectors().transpose();
    Eigen::MatrixXd kx(5, 5);
    for (int a = 0; a < 5; ++a) {
      for (int b = 0; b < 5; ++b)
        kx(a, b) = std::exp(-(env.items().col(a) - env.items().col(b)).squaredNorm() / 2);
    }
    // vec(F) (item index fastest) has covariance G (x) K_x.
    Eigen::MatrixXd cov(30, 30);
    for (int u = 0; u < 6; ++u) {
      for (int v = 0; v < 6; ++v) cov.block(5 * u, 5 * v, 5, 5) = green(u, v) * kx;
    }
    const Eigen::VectorXd f = Eigen::Map<const Eigen::VectorXd>(env.means().data(), 30);
    const Eigen::VectorXd z = cov.llt().matrixL().solve(f);
    sum += z.sum();
    sum_sq += z.squaredNorm();
    count += 30;
  }
  EXPECT_NEAR(sum / count, 0.0, 0.03);     // 12,000 values: sd of the mean ~0.009
  EXPECT_NEAR(sum_sq / count, 1.0, 0.05);  // sd of the variance estimate ~0.013
}

TEST(EnvironmentTest, EkRewardsFollowTheAuthorsDefinitions) {
  const EkEnvironment chess(EkKind::kChessboard, 0), step(EkKind::kStepDiagonal, 0);
  Eigen::VectorXd x(1);
  x << 0.3;
  EXPECT_EQ(chess.Mean(x, 0.1), 1.0);  // [0.25,0.5) x [0,0.25)
  EXPECT_EQ(chess.Mean(x, 0.6), 1.0);  // [0.25,0.5) x [0.5,0.75)
  EXPECT_EQ(chess.Mean(x, 0.3), 0.0);
  x << 0.1;
  EXPECT_EQ(chess.Mean(x, 0.3), 0.5);  // [0,0.25) x [0.25,0.5)
  x << 0.6;
  EXPECT_EQ(chess.Mean(x, 0.8), 0.5);  // [0.5,0.75) x [0.75,1]
  x << 0.5;
  EXPECT_EQ(step.Mean(x, 0.35), 1.0);  // |x - (a + 0.15)| < 0.1
  EXPECT_EQ(step.Mean(x, 0.62), 0.5);  // |x - (a - 0.15)| < 0.1
  EXPECT_EQ(step.Mean(x, 0.9), 0.0);
  const EkEnvironment bump(EkKind::kBump, 1), other(EkKind::kBump, 2);
  const Round r1 = bump.MakeRound(3), r2 = other.MakeRound(3);
  EXPECT_EQ(r1.arms, r2.arms);        // the same 10 anchors for every run
  EXPECT_NE(r1.context, r2.context);  // contexts follow the run's seed
  EXPECT_EQ(r1.arms.cols(), 10);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(r1.means(k), bump.Mean(r1.context, r1.arms(0, k)));
  EXPECT_GE(bump.Regret(r1, 0), 0.0);
}

// The fixed instance is the EK authors' Bump: the values their code draws with NumPy's
// RandomState(123) (checked against NumPy 1.24: anchors from choice(arange(0, 1, 0.01), 10,
// replace=False), a* from choice(10), then uniform x* and w*), an initial pull of anchor 0.82,
// and contexts and noise from the run's seed.
TEST(EnvironmentTest, EkFixedInstanceIsTheAuthorsBump) {
  const EkBumpInstance& authors = EkAuthorsBumpInstance();
  EXPECT_THAT(authors.anchors,
              ElementsAre(0.08, 0.70, 0.82, 0.28, 0.63, 0.00, 0.05, 0.50, 0.81, 0.04));
  EXPECT_EQ(authors.best_anchor, 0.81);
  EXPECT_NEAR(authors.x_star(2), 0.90977, 1e-5);
  EXPECT_NEAR(authors.w_star(3), -0.53740, 1e-5);
  const EkEnvironment a(EkKind::kBump, 1, /*fixed_instance=*/true);
  const EkEnvironment b(EkKind::kBump, 2, /*fixed_instance=*/true);
  const Round ra = a.MakeRound(5), rb = b.MakeRound(5);
  EXPECT_EQ(ra.arms, rb.arms);
  EXPECT_NE(ra.context, rb.context);  // contexts follow the run's seed
  for (int k = 0; k < 10; ++k) {
    EXPECT_EQ(ra.arms(0, k), authors.anchors[k]);
    // The Bump reward: max(0, 1 - |a - a*| - <x - x*, w*>).
    const double expected = std::max(0.0, 1.0 - std::abs(authors.anchors[k] - 0.81) -
                                              (ra.context - authors.x_star).dot(authors.w_star));
    EXPECT_DOUBLE_EQ(ra.means(k), expected);
  }
  EXPECT_LT(ra.noise.cwiseAbs().maxCoeff(), 0.6);  // N(0, 0.1^2): every draw within 6 sd
  // The prior round: one candidate, anchor 0.82, in a context of the run's own.
  const std::optional<Round> pa = a.PriorRound(), pb = b.PriorRound();
  ASSERT_TRUE(pa.has_value() && pb.has_value());
  EXPECT_EQ(pa->arms.cols(), 1);
  EXPECT_EQ(pa->arms(0, 0), 0.82);
  EXPECT_NE(pa->context, pb->context);
  EXPECT_DOUBLE_EQ(pa->means(0), a.Mean(pa->context, 0.82));
  // Without the fixed instance: our own draws, and no prior round.
  const EkEnvironment ours(EkKind::kBump, 1);
  EXPECT_FALSE(ours.PriorRound().has_value());
  EXPECT_NE(ours.MakeRound(5).arms, ra.arms);
  // Only Bump has the authors' instance.
  EXPECT_FALSE(EkEnvironment(EkKind::kChessboard, 1, true).PriorRound().has_value());
}

TEST(EnvironmentTest, SwitchingEnvironmentChangesItsRewards) {
  EnvironmentOptions options;
  options.switch_round = 100;
  const Environment env = *Environment::Create(options);
  bool changed = false;
  for (uint64_t t = 100; t < 120 && !changed; ++t) {
    const Round r = env.MakeRound(t);
    changed = r.means(0) != env.means()(r.items[0], r.user);
  }
  EXPECT_TRUE(changed);
  const Round early = env.MakeRound(99);
  EXPECT_EQ(early.means(0), env.means()(early.items[0], early.user));
}

}  // namespace
}  // namespace graphbandit::sim
