// The navigation environment (sim/navigation.h): the physics model by hand, the graph Matern
// kernel's defining properties, the network's consistency, and the routing policies' learning.
#include "sim/navigation.h"

#include <gtest/gtest.h>

#include <cmath>

namespace graphbandit::sim {
namespace {

TEST(NavigationTest, DeterministicEnergyIsThePhysicsModel) {
  const VehicleModel v;
  // Flat, 100 m at 10 m/s: rolling 1830 * 9.82 * 0.01 * 100 = 17970.6 J, drag
  // 0.5 * 0.35 * 2.6 * 1.2 * 100 * 100 = 5460 J; traction divides by 0.98.
  EXPECT_NEAR(DeterministicEnergy(v, 100.0, 10.0, 0.0), (17970.6 + 5460.0) / 0.98 / 3600.0, 1e-9);
  // Steep downhill: negative mechanical energy, of which 96% is recovered.
  const double alpha = -0.1;
  const double mechanical = 1830.0 * 9.82 * 100.0 * std::sin(alpha) +
                            1830.0 * 9.82 * 0.01 * 100.0 * std::cos(alpha) + 5460.0;
  ASSERT_LT(mechanical, 0.0);
  EXPECT_NEAR(DeterministicEnergy(v, 100.0, 10.0, alpha), mechanical * 0.96 / 3600.0, 1e-9);
}

TEST(NavigationTest, LineGraphMaternKernelIsAValidKernel) {
  // A one-way ring of 6 segments with one shortcut.
  std::vector<std::vector<int>> successors = {{1}, {2, 4}, {3}, {4}, {5}, {0}};
  Eigen::VectorXd lengths(6);
  lengths << 100, 120, 80, 100, 150, 90;
  const Eigen::MatrixXd k = LineGraphMaternKernel(successors, lengths, 2.0, 1.0);
  EXPECT_NEAR(k.diagonal().mean(), 1.0, 1e-12);
  EXPECT_LT((k - k.transpose()).norm(), 1e-12);
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(k);
  EXPECT_GT(eigen.eigenvalues().minCoeff(), 0.0);
  // Neighbours on the line graph are more alike than segments three turns apart.
  EXPECT_GT(k(2, 3), k(2, 5));
  // Against the definition: U (2 nu / kappa^2 + Lambda)^-nu U^T of B B^T, normalised.
  Eigen::MatrixXd b = Eigen::MatrixXd::Zero(6, 7);
  int c = 0;
  const double mean = lengths.mean();
  for (int a = 0; a < 6; ++a) {
    for (int next : successors[a]) {
      b(a, c) = -mean / lengths(a);
      b(next, c) = mean / lengths(a);
      ++c;
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> laplacian(b * b.transpose());
  Eigen::MatrixXd expected =
      laplacian.eigenvectors() *
      (laplacian.eigenvalues().array() + 4.0).pow(-2.0).matrix().asDiagonal() *
      laplacian.eigenvectors().transpose();
  expected /= expected.diagonal().mean();
  EXPECT_LT((k - expected).norm(), 1e-10);
}

TEST(NavigationTest, NetworkIsConsistentAndTheTruthIsSeeded) {
  NavigationOptions options;
  options.rows = 5;
  options.cols = 6;
  auto a = NavigationEnvironment::Create(options, 1);
  auto b = NavigationEnvironment::Create(options, 1);
  auto c = NavigationEnvironment::Create(options, 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const NavigationEnvironment& env = **a;
  const int n = env.segments();
  EXPECT_GT(n, 2 * 40);  // 49 streets on a 5 x 6 grid, each dropped with probability 0.1
  EXPECT_EQ(env.prior_covariance().rows(), n);
  EXPECT_EQ((*b)->true_energy(), env.true_energy());  // same seed, same truth
  EXPECT_NE((*c)->true_energy(), env.true_energy());  // another seed, another draw
  EXPECT_EQ((*c)->prior_mean(), env.prior_mean());    // on the same network
  // The best route is Bellman-Ford's on the true energies.
  auto best = CheapestRouteAnyCosts(env.successors(), env.source(), env.goal(), env.true_energy());
  ASSERT_TRUE(best.ok());
  double energy = 0.0;
  for (int e : *best) energy += env.true_energy()(e);
  EXPECT_DOUBLE_EQ(energy, env.best_route_energy());
  // Observations are the truth plus noise of the configured variance, and repeatable.
  EXPECT_EQ(env.Observe(7, 3), env.Observe(7, 3));
  double sum = 0.0, sum2 = 0.0;
  const int draws = 4000;
  for (int t = 0; t < draws; ++t) {
    const double noise = env.Observe(static_cast<uint64_t>(t), 0) - env.true_energy()(0);
    sum += noise;
    sum2 += noise * noise;
  }
  EXPECT_NEAR(sum / draws, 0.0, 5.0 * std::sqrt(env.noise_variance() / draws));
  EXPECT_NEAR(sum2 / draws / env.noise_variance(), 1.0, 0.1);
  EXPECT_FALSE(NavigationEnvironment::Create(NavigationOptions{1, 5}, 1).ok());
}

TEST(NavigationTest, RoutingPoliciesLearn) {
  NavigationOptions options;
  options.rows = 5;
  options.cols = 5;
  auto env = NavigationEnvironment::Create(options, 3);
  ASSERT_TRUE(env.ok());
  for (bool independent : {false, true}) {
    for (IndexRule rule : {IndexRule::kUcb, IndexRule::kBayesUcb, IndexRule::kThompson}) {
      RoutePolicy policy;
      policy.independent = independent;
      policy.rule = rule;
      const RouteRun run = RunRoutes(**env, policy, 300, 300, 1, nullptr);
      ASSERT_TRUE(run.error.empty()) << run.error;
      ASSERT_EQ(run.cumulative_regret.size(), 300u);
      // Regret never decreases (every route costs at least the cheapest), and the last 100
      // trips cost less regret than the first 100.
      for (size_t t = 1; t < 300; ++t) {
        EXPECT_GE(run.cumulative_regret[t], run.cumulative_regret[t - 1] - 1e-9);
      }
      const double first = run.cumulative_regret[99];
      const double last = run.cumulative_regret[299] - run.cumulative_regret[199];
      EXPECT_LT(last, first) << "independent " << independent << " rule " << static_cast<int>(rule);
    }
  }
}

}  // namespace
}  // namespace graphbandit::sim
