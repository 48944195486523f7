// The sparse spectral embedding against a dense eigendecomposition of the same Laplacian, and
// the Green's function with a community part against G + w S formed densely.
#include "core/graph/spectral_embedding.h"

#include <gtest/gtest.h>

#include "core/base/random.h"
#include "core/graph/green_function.h"
#include "core/graph/user_kernel.h"

namespace graphbandit {
namespace {

// An SBM: `blocks` blocks of users u with u % blocks equal, edges within a block with
// probability p_in and across with p_out, plus `isolated` users without edges at the end.
UserGraph Sbm(int users, int blocks, double p_in, double p_out, int isolated, uint64_t seed) {
  Rng rng(seed);
  UserGraph graph;
  graph.EnsureUsers(users + isolated);
  for (int a = 0; a < users; ++a) {
    for (int b = a + 1; b < users; ++b) {
      if (rng.Uniform() < (a % blocks == b % blocks ? p_in : p_out)) graph.SetEdge(a, b, 1.0);
    }
  }
  return graph;
}

// Dense reference: the largest component's Laplacian, its eigenvalues 2..dims+1 and the
// distance matrix of the embedded users, which is invariant to the eigenvectors' signs (and to
// rotations within the chosen eigenspace when its eigenvalues are distinct from the next).
struct DenseReference {
  std::vector<int32_t> users;
  Eigen::VectorXd values;
  Eigen::MatrixXd distances;
};

DenseReference Reference(const UserGraph& graph, int dims) {
  // Largest component by repeated traversal (test-sized graphs).
  const int n = graph.num_users();
  std::vector<int> label(n, -1);
  std::vector<std::vector<int32_t>> components;
  for (int s = 0; s < n; ++s) {
    if (label[s] >= 0 || !graph.HasEdges(s)) continue;
    std::vector<int32_t> members, stack{s};
    label[s] = static_cast<int>(components.size());
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      members.push_back(u);
      for (const auto& [v, w] : graph.SortedNeighbours(u)) {
        if (label[v] < 0) {
          label[v] = label[s];
          stack.push_back(v);
        }
      }
    }
    std::sort(members.begin(), members.end());
    components.push_back(members);
  }
  DenseReference ref;
  for (const auto& c : components) {
    if (c.size() > ref.users.size()) ref.users = c;
  }
  const Eigen::MatrixXd full = DenseLaplacian(graph);
  const int m = static_cast<int>(ref.users.size());
  Eigen::MatrixXd l(m, m);
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) l(a, b) = full(ref.users[a], ref.users[b]);
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(l);
  ref.values = eig.eigenvalues().segment(1, dims);
  const Eigen::MatrixXd z = eig.eigenvectors().middleCols(1, dims);
  ref.distances.resize(m, m);
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) ref.distances(a, b) = (z.row(a) - z.row(b)).norm();
  }
  return ref;
}

void ExpectMatchesDense(const UserGraph& graph, int dims) {
  auto embedding = SpectralEmbedding::Build(graph, dims);
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  EXPECT_EQ((*embedding)->failure(), "");
  const DenseReference ref = Reference(graph, dims);
  ASSERT_EQ((*embedding)->embedded_users(), static_cast<int32_t>(ref.users.size()));
  for (int32_t u = 0; u < graph.num_users(); ++u) {
    const bool inside = std::binary_search(ref.users.begin(), ref.users.end(), u);
    EXPECT_EQ((*embedding)->RowOf(u) >= 0, inside) << "user " << u;
  }
  for (int j = 0; j < dims; ++j) {
    EXPECT_NEAR((*embedding)->eigenvalues()(j), ref.values(j), 1e-8 * (1.0 + ref.values(j)));
  }
  const Eigen::MatrixXd& z = (*embedding)->coordinates();
  double worst = 0.0;
  for (size_t a = 0; a < ref.users.size(); ++a) {
    ASSERT_EQ((*embedding)->RowOf(ref.users[a]), static_cast<int32_t>(a));
    for (size_t b = 0; b < ref.users.size(); ++b) {
      worst = std::max(worst, std::abs((z.row(a) - z.row(b)).norm() - ref.distances(a, b)));
    }
  }
  EXPECT_LT(worst, 1e-6);
}

TEST(SpectralEmbeddingTest, DenseAndSparsePathsMatchADenseEigendecomposition) {
  // 120 users: the dense path; 900 users: Spectra's shift-invert Lanczos. Both with isolated
  // users and small components beside the largest one.
  ExpectMatchesDense(Sbm(120, 3, 0.15, 0.01, 5, 3), 4);
  UserGraph large = Sbm(900, 6, 0.03, 0.001, 10, 5);
  large.SetEdge(905, 906, 1.0);  // a separate pair of the isolated users
  ExpectMatchesDense(large, 5);
  // A ring: tiny eigenvalues in equal pairs (4 dimensions take two whole pairs, so distances
  // do not depend on the basis chosen within each pair).
  UserGraph ring;
  for (int u = 0; u < 1500; ++u) ring.SetEdge(u, (u + 1) % 1500, 1.0);
  ExpectMatchesDense(ring, 4);
}

TEST(SpectralEmbeddingTest, SimilarityIsAnRbfOfTheCoordinates) {
  const UserGraph graph = Sbm(60, 2, 0.3, 0.02, 3, 9);
  auto built = SpectralEmbedding::Build(graph, 3);
  ASSERT_TRUE(built.ok()) << built.status();
  const SpectralEmbedding& e = **built;
  ASSERT_GT(e.embedded_users(), 50);
  const double s2 = e.bandwidth() * e.bandwidth();
  Eigen::VectorXd column;
  for (int32_t u : {0, 7, 31}) {
    ASSERT_GE(e.RowOf(u), 0);
    e.SimilarityColumn(u, &column);
    for (int32_t v = 0; v < graph.num_users(); ++v) {
      const int32_t r = e.RowOf(v);
      if (r < 0) {
        EXPECT_EQ(e.Similarity(u, v), 0.0);
        continue;
      }
      const double expected = std::exp(
          -(e.coordinates().row(e.RowOf(u)) - e.coordinates().row(r)).squaredNorm() / (2.0 * s2));
      EXPECT_NEAR(e.Similarity(u, v), expected, 1e-14);
      EXPECT_NEAR(column(r), expected, 1e-14);
    }
  }
  // Isolated, later and unknown users: 1 with themselves, 0 with anyone else.
  EXPECT_EQ(e.Similarity(61, 61), 1.0);
  EXPECT_EQ(e.Similarity(61, 0), 0.0);
  EXPECT_EQ(e.Similarity(500, 500), 1.0);
  EXPECT_EQ(e.Similarity(kUnknownUser, kUnknownUser), 0.0);
  e.SimilarityColumn(61, &column);
  EXPECT_EQ(column.size(), e.embedded_users());
  EXPECT_EQ(column.cwiseAbs().maxCoeff(), 0.0);
}

// The share of a user kernel's prior variance that is constant within each block but not
// across all users: (tr(P K P) - tr(P0 K P0)) / tr(K), P averaging within blocks, P0 over all.
double BlockShare(const Eigen::MatrixXd& k, int blocks) {
  const int n = static_cast<int>(k.rows());
  std::vector<double> block_sum(blocks, 0.0);
  std::vector<int> block_size(blocks, 0);
  for (int u = 0; u < n; ++u) {
    ++block_size[u % blocks];
    for (int v = u % blocks; v < n; v += blocks) block_sum[u % blocks] += k(u, v);
  }
  double within = 0.0;
  for (int b = 0; b < blocks; ++b) within += block_sum[b] / block_size[b];
  return (within - k.sum() / n) / k.trace();
}

TEST(SpectralEmbeddingTest, SharesFarMoreWithinTheBlocksOfASparseSbmThanGreensFunction) {
  // What the community part is for: on an SBM of 1,000 users in 10 blocks with about 3
  // neighbours each, (L + rho I)^-1 puts a few percent of its prior variance on the blocks,
  // the community similarity several times that.
  const int n = 1000, blocks = 10;
  const UserGraph graph = Sbm(n, blocks, 0.03, 0.0005, 0, 11);
  auto built = SpectralEmbedding::Build(graph, 8);
  ASSERT_TRUE(built.ok()) << built.status();
  ASSERT_GT((*built)->embedded_users(), 900);
  Eigen::MatrixXd s(n, n);
  for (int u = 0; u < n; ++u) {
    for (int v = 0; v < n; ++v) s(u, v) = (*built)->Similarity(u, v);
  }
  const Eigen::MatrixXd l = DenseLaplacian(graph);
  const double spectral = BlockShare(s, blocks);
  for (double rho : {1.0, 0.1, 0.01}) {
    const Eigen::MatrixXd g = (l + rho * Eigen::MatrixXd::Identity(n, n)).inverse();
    const double green = BlockShare(g, blocks);
    EXPECT_LT(green, 0.06) << "rho " << rho;
    EXPECT_GT(spectral, 4.0 * green) << "rho " << rho;
  }
  EXPECT_GT(spectral, 0.15);
}

// An equal graph (another object, edges set in another order) gets the embedding already
// built; any change to a weight, an edge, the users or the dimensions gets a new one.
TEST(SpectralEmbeddingTest, ReusesTheLastEmbeddingOnlyForAnEqualGraph) {
  const UserGraph graph = Sbm(80, 2, 0.3, 0.02, 2, 21);
  UserGraph reordered;
  reordered.EnsureUsers(graph.num_users());
  for (int32_t u = graph.num_users() - 1; u >= 0; --u) {
    for (const auto& [v, w] : graph.SortedNeighbours(u)) reordered.SetEdge(u, v, w);
  }
  auto first = SpectralEmbedding::Build(graph, 3);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = SpectralEmbedding::Build(reordered, 3);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(first->get(), again->get());

  // Each change is compared with the original built just before it, so that the cache holds
  // exactly the graph it differs from.
  const auto differs = [&graph](const UserGraph& changed, int dims, const char* what) {
    auto original = SpectralEmbedding::Build(graph, 3);
    ASSERT_TRUE(original.ok());
    ASSERT_EQ(SpectralEmbedding::Build(graph, 3)->get(), original->get()) << what;
    auto built = SpectralEmbedding::Build(changed, dims);
    ASSERT_TRUE(built.ok()) << built.status();
    EXPECT_NE(built->get(), original->get()) << what;
    EXPECT_EQ((*built)->dims(), dims) << what;
  };
  UserGraph weight = graph;
  const auto [v, w] = graph.SortedNeighbours(0).front();
  weight.SetEdge(0, v, w * 1.5);
  differs(weight, 3, "a weight");
  UserGraph edge = graph;
  edge.RemoveEdge(0, v);
  differs(edge, 3, "an edge");
  UserGraph users = graph;
  users.EnsureUsers(graph.num_users() + 1);
  differs(users, 3, "a user");
  differs(graph, 4, "the dimensions");
  differs(weight, 3, "a weight");  // the cache held the original: still not reused
  // Building the original again after the others computes it afresh (the cache holds one
  // embedding), equal in every coordinate to the first: the result depends on the graph alone.
  auto other = SpectralEmbedding::Build(edge, 3);
  ASSERT_TRUE(other.ok());
  auto rebuilt = SpectralEmbedding::Build(graph, 3);
  ASSERT_TRUE(rebuilt.ok());
  EXPECT_NE(rebuilt->get(), first->get());
  EXPECT_EQ((*rebuilt)->coordinates(), (*first)->coordinates());
  EXPECT_EQ((*rebuilt)->bandwidth(), (*first)->bandwidth());
}

TEST(SpectralEmbeddingTest, SmallOrEmptyGraphsEmbedNobody) {
  UserGraph empty;
  auto none = SpectralEmbedding::Build(empty, 4);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ((*none)->embedded_users(), 0);
  UserGraph pair;
  pair.SetEdge(0, 1, 1.0);
  auto small = SpectralEmbedding::Build(pair, 4);  // 2 users < 4 + 2
  ASSERT_TRUE(small.ok());
  EXPECT_EQ((*small)->embedded_users(), 0);
  EXPECT_EQ((*small)->Similarity(0, 1), 0.0);
  EXPECT_FALSE(SpectralEmbedding::Build(pair, 0).ok());
  EXPECT_FALSE(SpectralEmbedding::Build(pair, 65).ok());
}

TEST(GreenFunctionCommunityTest, EveryEntryIsGreensFunctionPlusScaledSimilarity) {
  UserGraph graph = Sbm(500, 5, 0.05, 0.002, 6, 13);  // > 400 users: the sparse eigensolver
  graph.SetEdge(503, 504, 2.0);                       // a small component outside the embedding
  const int n = graph.num_users();
  auto embedding = SpectralEmbedding::Build(graph, 6);
  ASSERT_TRUE(embedding.ok()) << embedding.status();
  const double rho = 0.2, w = 3.0;
  auto green = GreenFunction::Build(graph, rho, size_t{1} << 20, *embedding, w);
  ASSERT_TRUE(green.ok()) << green.status();
  const Eigen::MatrixXd g =
      (DenseLaplacian(graph) + rho * Eigen::MatrixXd::Identity(n, n)).inverse();
  double worst = 0.0;
  for (int u = 0; u < n; ++u) {
    const UserKernel::Column column = (*green)->ColumnOf(u);
    for (int v = 0; v < n; ++v) {
      const double expected = g(u, v) + w * (*embedding)->Similarity(u, v);
      worst = std::max(worst, std::abs(column.At(v) - expected));
    }
    EXPECT_NEAR(column.Diagonal(), g(u, u) + w, 1e-10);
  }
  EXPECT_LT(worst, 1e-10);
  // Users outside the graph: 1 / rho + w on the diagonal, nothing shared.
  const UserKernel::Column late = (*green)->ColumnOf(n + 3);
  EXPECT_DOUBLE_EQ(late.Diagonal(), 1.0 / rho + w);
  EXPECT_EQ(late.At(0), 0.0);
  // A variance of 0 is exactly the Green's function.
  auto plain = GreenFunction::Build(graph, rho, size_t{1} << 20, *embedding, 0.0);
  auto reference = GreenFunction::Build(graph, rho);
  ASSERT_TRUE(plain.ok() && reference.ok());
  for (int u : {0, 17, 502}) {
    for (int v = 0; v < n; ++v) EXPECT_EQ((*plain)->Entry(u, v), (*reference)->Entry(u, v));
  }
  // An embedding of another graph is refused.
  UserGraph other = graph;
  other.SetEdge(0, 505, 1.0);  // 505 is isolated in `graph`
  auto foreign = SpectralEmbedding::Build(other, 6);
  ASSERT_TRUE(foreign.ok());
  EXPECT_FALSE(GreenFunction::Build(graph, rho, size_t{1} << 20, *foreign, w).ok());
  EXPECT_FALSE(GreenFunction::Build(graph, rho, size_t{1} << 20, *embedding, -1.0).ok());
}

}  // namespace
}  // namespace graphbandit
