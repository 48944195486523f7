// LK-GP's grid recursion and lambda schedule against the exact GP computed directly.
#include <gtest/gtest.h>

#include "core/graph/green_function.h"
#include "core/graph/user_kernel.h"
#include "core/learner/lk_gp_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

struct PoolProblem {
  int dim = 3, users = 6, items = 8;
  UserGraph graph;
  std::shared_ptr<const UserKernel> kernel;
  ArmKernel arm{KernelType::kRbf, 1.0};
  Eigen::MatrixXd pool;
};

PoolProblem MakePoolProblem(uint64_t seed,
                            UserKernelKind kind = UserKernelKind::kLaplacianInverse) {
  PoolProblem p;
  Rng rng(seed);
  p.graph.EnsureUsers(p.users);
  p.graph.SetEdge(0, 1, 1.0);
  p.graph.SetEdge(1, 2, 0.5);
  p.graph.SetEdge(3, 4, 2.0);  // user 5 isolated
  UserKernelOptions options;
  options.kind = kind;
  options.rho = 0.2;
  p.kernel = *BuildUserKernel(p.graph, options);
  p.pool = RandomMatrix(p.dim, p.items, rng);
  return p;
}

// Every (item, user) of the pool scored by both learners.
void ExpectSamePosterior(const Scorer& a, const Scorer& b, const PoolProblem& p, double tolerance) {
  for (int u = 0; u < p.users; ++u) {
    Eigen::VectorXd ma, sa, mb, sb;
    a.Score(u, p.pool, &ma, &sa);
    b.Score(u, p.pool, &mb, &sb);
    EXPECT_LT(RelativeError(ma, mb, 1e-12), tolerance) << "user " << u;
    EXPECT_LT(RelativeError(sa, sb), tolerance) << "user " << u;
  }
}

TEST(LkGpPosteriorTest, GridPhaseEqualsTheExactPosterior) {
  for (UserKernelKind kind : {UserKernelKind::kLaplacianInverse, UserKernelKind::kHeat}) {
    const PoolProblem p = MakePoolProblem(1, kind);
    LkGpOptions options;
    options.ridge = 0.05;
    options.grid = true;
    LkGpPosterior lk(p.dim, p.arm, p.kernel, options);
    ASSERT_TRUE(lk.SetPool(p.pool, p.users).ok());
    EXPECT_EQ(lk.switch_point(), 8);  // min(1500, floor(6^(1/3)) * 8)
    ExactGpPosterior exact(p.dim, p.arm, p.kernel, options.ridge);
    Rng rng(2);
    for (int t = 0; t < 120; ++t) {
      const int j = static_cast<int>(rng.UniformInt(p.items));
      const int u = static_cast<int>(rng.UniformInt(p.users));
      const double y = rng.Normal();
      ASSERT_TRUE(lk.Observe(u, p.pool.col(j), y).ok());
      ASSERT_TRUE(exact.Observe(u, p.pool.col(j), y).ok());
      if (t == 5 || t == 7 || t == 30 || t == 119) {
        EXPECT_EQ(lk.in_grid_phase(), t + 1 >= 8);
        ExpectSamePosterior(lk, exact, p, 1e-8);
      }
    }
    ExpectSamePosterior(*lk.Freeze(), exact, p, 1e-8);
  }
}

TEST(LkGpPosteriorTest, ScheduleRebuildsWithTheNewRidge) {
  const PoolProblem p = MakePoolProblem(3);
  LkGpOptions options;
  options.schedule = true;
  options.lambda_base = 0.5;
  options.spectral_ratio = SpectralRatio(p.graph);
  options.horizon = 100;
  options.first_epoch = 10;
  options.grid = true;
  LkGpPosterior lk(p.dim, p.arm, p.kernel, options);
  ASSERT_TRUE(lk.SetPool(p.pool, p.users).ok());
  const double initial = std::clamp(0.5 * options.spectral_ratio, 1e-6, 0.1);
  EXPECT_DOUBLE_EQ(lk.ridge(), initial);
  Rng rng(4);
  std::vector<std::tuple<int, int, double>> data;
  for (int t = 0; t < 90; ++t) {
    const int j = static_cast<int>(rng.UniformInt(p.items));
    const int u = static_cast<int>(rng.UniformInt(p.users));
    const double y = rng.Normal();
    data.emplace_back(u, j, y);
    ASSERT_TRUE(lk.Observe(u, p.pool.col(j), y).ok());
  }
  // Epochs at 10, 20, 40, 80: each lambda is clip(0.5 S 100/(100+t)); a change above 20% rebuilds.
  EXPECT_GT(lk.rebuilds(), 0);
  EXPECT_LT(lk.ridge(), initial);
  ExactGpPosterior exact(p.dim, p.arm, p.kernel, lk.ridge());
  for (const auto& [u, j, y] : data) ASSERT_TRUE(exact.Observe(u, p.pool.col(j), y).ok());
  ExpectSamePosterior(lk, exact, p, 1e-8);
}

TEST(LkGpPosteriorTest, SpectralRatioOfAPathAndOfDisconnectedGraphs) {
  const int n = 7;
  UserGraph path;
  for (int u = 0; u + 1 < n; ++u) path.SetEdge(u, u + 1, 1.0);
  // Path Laplacian eigenvalues: 2 - 2 cos(pi k / n), k = 0..n-1.
  const double expected = (1.0 - std::cos(M_PI / n)) / (1.0 - std::cos(M_PI * (n - 1) / n));
  EXPECT_NEAR(SpectralRatio(path), expected, 1e-12);
  UserGraph two = path;
  two.SetEdge(10, 11, 1.0);            // a second component (and isolated users 7..9)
  EXPECT_GT(SpectralRatio(two), 0.0);  // lambda_2 = 0 is skipped, not used
  UserGraph empty;
  empty.EnsureUsers(4);
  EXPECT_EQ(SpectralRatio(empty), 0.0);
}

TEST(LkGpPosteriorTest, GridPhaseRejectsPointsOutsideThePool) {
  const PoolProblem p = MakePoolProblem(5);
  LkGpOptions options;
  options.grid = true;
  LkGpPosterior lk(p.dim, p.arm, p.kernel, options);
  ASSERT_TRUE(lk.SetPool(p.pool, p.users).ok());
  for (int t = 0; t < 10; ++t)
    ASSERT_TRUE(lk.Observe(t % p.users, p.pool.col(t % p.items), 1.0).ok());
  ASSERT_TRUE(lk.in_grid_phase());
  const Eigen::VectorXd stranger = Eigen::VectorXd::Constant(p.dim, 9.0);
  EXPECT_FALSE(lk.Observe(0, stranger, 1.0).ok());
  EXPECT_FALSE(lk.Observe(p.users, p.pool.col(0), 1.0).ok());
  EXPECT_EQ(lk.history_size(), 10);
  Eigen::VectorXd mean, sd;
  lk.Score(0, stranger, &mean, &sd);
  EXPECT_TRUE(std::isnan(mean(0)));            // outside the pool the grid has no answer
  lk.Score(kUnknownUser, p.pool, &mean, &sd);  // a stranger gets the prior
  EXPECT_EQ(mean, Eigen::VectorXd::Zero(p.items));
  EXPECT_NEAR(sd(0), std::sqrt(1.0 / 0.2), 1e-12);  // isolated: G = 1/rho (rho = 0.2), k_x = 1
}

}  // namespace
}  // namespace graphbandit
