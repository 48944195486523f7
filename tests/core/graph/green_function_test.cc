// The sparse Green's function against the dense inverse (L + rho I)^-1.
#include "core/graph/green_function.h"

#include <gtest/gtest.h>

#include "core/base/random.h"

namespace graphbandit {
namespace {

TEST(GreenFunctionTest, EveryEntryMatchesTheDenseInverse) {
  Rng rng(17);
  UserGraph graph;
  const int n = 60;
  graph.EnsureUsers(n);
  for (int a = 0; a < 50; ++a) {  // users 50..59 stay isolated
    for (int b = a + 1; b < 50; ++b) {
      if (rng.Uniform() < 0.08) graph.SetEdge(a, b, 0.5 + rng.Uniform());
    }
  }
  const double rho = 0.1;
  auto green = GreenFunction::Build(graph, rho);
  ASSERT_TRUE(green.ok()) << green.status();
  const Eigen::MatrixXd dense =
      (DenseLaplacian(graph) + rho * Eigen::MatrixXd::Identity(n, n)).inverse();
  double worst = 0.0;
  for (int u = 0; u < n; ++u) {
    const UserKernel::Column column = (*green)->ColumnOf(u);
    EXPECT_NEAR(column.Diagonal(), dense(u, u), 1e-10 * dense(u, u));
    for (int v = 0; v < n; ++v) {
      worst = std::max(worst, std::abs(column.At(v) - dense(u, v)) / dense.cwiseAbs().maxCoeff());
    }
  }
  EXPECT_LT(worst, 1e-10);
}

TEST(GreenFunctionTest, UnknownAndLaterUsersAreIsolated) {
  UserGraph graph;
  graph.SetEdge(0, 1, 1.0);
  auto green = GreenFunction::Build(graph, 0.5);
  ASSERT_TRUE(green.ok());
  const UserKernel::Column unknown = (*green)->ColumnOf(kUnknownUser);
  EXPECT_DOUBLE_EQ(unknown.Diagonal(), 2.0);
  EXPECT_EQ(unknown.At(0), 0.0);
  EXPECT_EQ(unknown.At(kUnknownUser), 0.0);  // two unknown users are not the same user
  // A user registered after the factorisation (index 7) is isolated: G = e_u / rho.
  const UserKernel::Column late = (*green)->ColumnOf(7);
  EXPECT_DOUBLE_EQ(late.Diagonal(), 2.0);
  EXPECT_DOUBLE_EQ(late.At(7), 2.0);
  EXPECT_EQ(late.At(0), 0.0);
  EXPECT_EQ((*green)->ColumnOf(0).At(7), 0.0);
  // The connected pair: G = [[1+rho, 1],[1, 1+rho]] / ((1+rho)^2 - 1).
  const double det = 1.5 * 1.5 - 1.0;
  EXPECT_NEAR((*green)->Entry(0, 0), 1.5 / det, 1e-14);
  EXPECT_NEAR((*green)->Entry(0, 1), 1.0 / det, 1e-14);
}

TEST(GreenFunctionTest, ColumnCacheEvictsButStaysCorrect) {
  UserGraph graph;
  const int n = 200;
  for (int u = 0; u + 1 < n; ++u) graph.SetEdge(u, u + 1, 1.0);  // a path
  // Room for 16 columns only.
  auto green = GreenFunction::Build(graph, 0.2, /*cache_bytes=*/1);
  ASSERT_TRUE(green.ok());
  const double first = (*green)->Entry(3, 10);
  for (int u = 0; u < n; ++u) (*green)->ColumnOf(u);  // churn the cache
  EXPECT_EQ((*green)->Entry(3, 10), first);
  EXPECT_NEAR((*green)->Entry(3, 10), (*green)->Entry(10, 3), 1e-12);  // symmetry
}

TEST(GreenFunctionTest, RejectsNonPositiveRho) {
  UserGraph graph;
  EXPECT_FALSE(GreenFunction::Build(graph, 0.0).ok());
  EXPECT_FALSE(GreenFunction::Build(graph, -1.0).ok());
}

TEST(UserGraphTest, EdgesAndComponents) {
  UserGraph graph;
  graph.EnsureUsers(6);
  EXPECT_TRUE(graph.SetEdge(0, 1, 1.0));
  EXPECT_FALSE(graph.SetEdge(1, 0, 3.0));  // same undirected edge: re-weighted
  EXPECT_EQ(graph.Weight(0, 1), 3.0);
  EXPECT_TRUE(graph.SetEdge(2, 3, 1.0));
  EXPECT_EQ(graph.num_edges(), 2);
  EXPECT_EQ(graph.CountComponents(), 4);  // {0,1} {2,3} {4} {5}
  EXPECT_TRUE(graph.RemoveEdge(3, 2));
  EXPECT_FALSE(graph.RemoveEdge(3, 2));
  EXPECT_EQ(graph.CountComponents(), 5);
  EXPECT_EQ(graph.Degree(1), 3.0);
}

// Components of the users with edges, numbered by their smallest user, members ascending;
// users without edges belong to none.
TEST(UserGraphTest, ConnectedComponentsLabelAndListTheirMembers) {
  UserGraph graph;
  graph.EnsureUsers(9);
  graph.SetEdge(7, 2, 1.0);
  graph.SetEdge(2, 5, 1.0);
  graph.SetEdge(4, 1, 0.5);
  graph.SetEdge(8, 6, 2.0);
  const UserGraph::Components c = graph.ConnectedComponents();
  EXPECT_EQ(c.of_user, (std::vector<int32_t>{-1, 0, 1, -1, 0, 1, 2, 1, 2}));
  ASSERT_EQ(c.members.size(), 3u);
  EXPECT_EQ(c.members[0], (std::vector<int32_t>{1, 4}));
  EXPECT_EQ(c.members[1], (std::vector<int32_t>{2, 5, 7}));
  EXPECT_EQ(c.members[2], (std::vector<int32_t>{6, 8}));
  EXPECT_EQ(static_cast<int64_t>(c.members.size()) + 2, graph.CountComponents());
}

}  // namespace
}  // namespace graphbandit
