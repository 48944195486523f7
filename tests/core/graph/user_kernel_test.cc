// User kernels against direct formulas: heat against the matrix exponential, spectral RBF against
// its definition, and the semantics of users outside the graph.
#include "core/graph/user_kernel.h"

#include <gtest/gtest.h>

#include <unsupported/Eigen/MatrixFunctions>

#include "core/graph/green_function.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

UserGraph TestGraph() {
  UserGraph graph;
  graph.EnsureUsers(9);
  const int edges[][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {4, 5}, {5, 6}, {0, 2}};
  double w = 0.5;
  for (const auto& e : edges) graph.SetEdge(e[0], e[1], w += 0.25);
  return graph;  // users 7 and 8 isolated; two components with edges
}

TEST(UserKernelTest, HeatKernelIsTheMatrixExponential) {
  const UserGraph graph = TestGraph();
  UserKernelOptions options;
  options.kind = UserKernelKind::kHeat;
  options.heat_tau = 0.7;
  auto kernel = BuildUserKernel(graph, options);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  const Eigen::MatrixXd expected = (-0.7 * DenseLaplacian(graph)).exp();
  for (int u = 0; u < 9; ++u) {
    for (int v = 0; v < 9; ++v) EXPECT_NEAR((*kernel)->Entry(u, v), expected(u, v), 1e-12);
  }
  // A user registered after the kernel was built has no edges: exp(0) = 1 on its diagonal.
  EXPECT_DOUBLE_EQ((*kernel)->ColumnOf(12).Diagonal(), 1.0);
  EXPECT_EQ((*kernel)->Entry(12, 0), 0.0);
  EXPECT_EQ((*kernel)->Entry(0, 12), 0.0);
  EXPECT_EQ((*kernel)->Entry(12, 13), 0.0);
}

TEST(UserKernelTest, SpectralRbfFollowsItsDefinition) {
  const UserGraph graph = TestGraph();
  UserKernelOptions options;
  options.kind = UserKernelKind::kSpectralRbf;
  options.spectral_dims = 3;
  options.spectral_bandwidth = 0.8;
  auto kernel = BuildUserKernel(graph, options);
  ASSERT_TRUE(kernel.ok());
  // Coordinates: eigenvectors of the 3 smallest non-zero eigenvalues (the 4 zero eigenvalues
  // belong to the 4 components: {0..3}, {4..6}, {7}, {8}).
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(DenseLaplacian(graph));
  Eigen::MatrixXd z(9, 3);
  int taken = 0;
  for (int i = 0; i < 9 && taken < 3; ++i) {
    if (eig.eigenvalues()(i) > 1e-9) z.col(taken++) = eig.eigenvectors().col(i);
  }
  ASSERT_EQ(taken, 3);
  // Distances do not depend on the eigenvectors' signs (nor, here, on a basis choice: the
  // three eigenvalues are distinct).
  for (int u = 0; u < 9; ++u) {
    for (int v = 0; v < 9; ++v) {
      const double expected = std::exp(-(z.row(u) - z.row(v)).squaredNorm() / (2 * 0.8 * 0.8));
      EXPECT_NEAR((*kernel)->Entry(u, v), expected, 1e-10) << u << "," << v;
    }
  }
  // An outside user has zero coordinates.
  EXPECT_NEAR((*kernel)->Entry(20, 1), std::exp(-z.row(1).squaredNorm() / (2 * 0.8 * 0.8)), 1e-10);
  EXPECT_NEAR((*kernel)->Entry(1, 20), (*kernel)->Entry(20, 1), 1e-15);
  EXPECT_EQ((*kernel)->Entry(20, 21), 1.0);
}

TEST(UserKernelTest, ConstantKernelsAndTheGreenFunctionThroughTheFactory) {
  const UserGraph graph = TestGraph();
  UserKernelOptions options;
  options.kind = UserKernelKind::kAllOnes;
  auto ones = BuildUserKernel(graph, options);
  options.kind = UserKernelKind::kIdentity;
  auto identity = BuildUserKernel(graph, options);
  options.kind = UserKernelKind::kLaplacianInverse;
  options.rho = 0.4;
  auto green = BuildUserKernel(graph, options);
  ASSERT_TRUE(ones.ok() && identity.ok() && green.ok());
  const Eigen::MatrixXd inverse =
      (DenseLaplacian(graph) + 0.4 * Eigen::MatrixXd::Identity(9, 9)).inverse();
  for (int u : {0, 3, 7, 100, static_cast<int>(kUnknownUser)}) {
    for (int v : {0, 5, 8, 100}) {
      EXPECT_EQ((*ones)->Entry(u, v), 1.0);
      EXPECT_EQ((*identity)->Entry(u, v), u == v && u >= 0 ? 1.0 : 0.0);
      const double expected = (u >= 0 && u < 9 && v < 9) ? inverse(u, v)
                              : (u == v && u >= 0)       ? 1.0 / 0.4
                                                         : 0.0;
      EXPECT_NEAR((*green)->Entry(u, v), expected, 1e-12) << u << "," << v;
    }
  }
  EXPECT_EQ(ParseUserKernelKind("heat").value(), UserKernelKind::kHeat);
  EXPECT_FALSE(ParseUserKernelKind("mmd").ok());
}

TEST(UserKernelTest, DenseKernelsOfAnEmptyGraph) {
  UserGraph empty;
  for (UserKernelKind kind : {UserKernelKind::kHeat, UserKernelKind::kSpectralRbf}) {
    UserKernelOptions options;
    options.kind = kind;
    auto kernel = BuildUserKernel(empty, options);
    ASSERT_TRUE(kernel.ok());
    EXPECT_EQ((*kernel)->ColumnOf(0).Diagonal(), 1.0);
    EXPECT_EQ((*kernel)->Entry(kUnknownUser, kUnknownUser),
              kind == UserKernelKind::kHeat ? 0.0 : 1.0);
  }
}

TEST(UserKernelTest, DenseKernelsRefuseHugeGraphs) {
  UserGraph graph;
  graph.SetEdge(0, 6000, 1.0);
  UserKernelOptions options;
  options.kind = UserKernelKind::kHeat;
  EXPECT_EQ(BuildUserKernel(graph, options).status().code(), absl::StatusCode::kFailedPrecondition);
  options.kind = UserKernelKind::kLaplacianInverse;  // the sparse one is fine
  EXPECT_TRUE(BuildUserKernel(graph, options).ok());
}

}  // namespace
}  // namespace graphbandit
