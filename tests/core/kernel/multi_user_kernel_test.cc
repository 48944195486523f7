// MultiUserKernel::Cross against its definition, entry by entry: (G[u, v] + eta [u = v]) k(a, b),
// both when the user factors are mostly non-zero (one product for the whole block) and when most
// are zero (users in other components: the arm kernel only where a factor is not).
#include "core/kernel/multi_user_kernel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "core/graph/user_graph.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

// Users 0-3 one component, 4-6 another, 7 and 8 isolated; 12 is registered after the kernel
// (its own component) and kUnknownUser has no edges.
std::shared_ptr<const UserKernel> GreenKernel() {
  UserGraph graph;
  graph.EnsureUsers(9);
  const int edges[][2] = {{0, 1}, {1, 2}, {2, 3}, {3, 0}, {4, 5}, {5, 6}};
  for (const auto& e : edges) graph.SetEdge(e[0], e[1], 0.8);
  UserKernelOptions options;
  options.rho = 0.3;
  return BuildUserKernel(graph, options).value();
}

// Dictionary-like users: six rounds of the large component's four users (24 points), then one
// point of each other kind of user.
std::vector<int32_t> DictionaryUsers() {
  std::vector<int32_t> users;
  for (int r = 0; r < 6; ++r) {
    for (int32_t u : {0, 1, 2, 3}) users.push_back(u);
  }
  for (int32_t u : {4, 5, 6, 7, 8, 12, kUnknownUser}) users.push_back(u);
  return users;
}

void ExpectMatchesDefinition(const MultiUserKernel& kernel, const Eigen::MatrixXd& a,
                             const std::vector<int32_t>& users_a, const Eigen::MatrixXd& b,
                             const std::vector<int32_t>& users_b) {
  Eigen::MatrixXd out;
  kernel.Cross(a, users_a, b, users_b.data(), &out);
  ASSERT_EQ(out.rows(), a.cols());
  ASSERT_EQ(out.cols(), b.cols());
  int zeros = 0;
  for (Eigen::Index i = 0; i < a.cols(); ++i) {
    for (Eigen::Index j = 0; j < b.cols(); ++j) {
      const int32_t u = users_a[static_cast<size_t>(i)], v = users_b[static_cast<size_t>(j)];
      const double user_factor = kernel.users()->Entry(u, v) +
                                 (u == v && u != kUnknownUser ? kernel.user_variance() : 0.0);
      const double expected = user_factor * kernel.arm()(a.col(i), b.col(j));
      if (user_factor == 0.0) {
        EXPECT_EQ(out(i, j), 0.0) << i << "," << j;  // exactly: nothing is shared
        ++zeros;
      } else {
        EXPECT_NEAR(out(i, j), expected, 1e-12 * (1.0 + std::abs(expected))) << i << "," << j;
      }
    }
  }
  EXPECT_GT(zeros, 0);
}

TEST(MultiUserKernelTest, CrossFollowsTheDefinitionWhetherFactorsAreDenseOrSparse) {
  Rng rng(5);
  const std::shared_ptr<const UserKernel> users = GreenKernel();
  // Dictionary-like points over every kind of user, most of them (24 of 31) from the large
  // component.
  const std::vector<int32_t> users_a = DictionaryUsers();
  const Eigen::MatrixXd a = testing::RandomMatrix(5, static_cast<int>(users_a.size()), rng);
  // Dense factors: queries from the large component (non-zero on 24 of the 31 rows).
  const std::vector<int32_t> dense_users = {0, 1, 2, 3, 0, 2, 1, 3};
  // Sparse factors: queries from small components, isolated and unknown users, several per
  // user and out of order.
  const std::vector<int32_t> sparse_users = {7, 12, 4, 7, kUnknownUser, 8, 6, 12, 4};
  for (double eta : {0.0, 0.6}) {
    for (const ArmKernel& arm :
         {ArmKernel(KernelType::kRbf, 1.3), ArmKernel(KernelType::kMatern52, 0.9, 0.2, 0.1),
          ArmKernel(KernelType::kLinear, 0.7, 0.3)}) {
      const MultiUserKernel kernel(arm, users, eta);
      for (const std::vector<int32_t>* users_b : {&dense_users, &sparse_users}) {
        SCOPED_TRACE(::testing::Message()
                     << "eta " << eta << ", arm " << KernelTypeName(arm.type()) << ", "
                     << (users_b == &dense_users ? "dense" : "sparse"));
        const Eigen::MatrixXd b = testing::RandomMatrix(5, static_cast<int>(users_b->size()), rng);
        ExpectMatchesDefinition(kernel, a, users_a, b, *users_b);
      }
    }
  }
}

// CrossBlocks against Cross: on sparse factors its blocks, scattered, are Cross's matrix entry
// for entry (bit for bit), cover each column once and every non-zero entry, and list rows and
// columns in ascending order; on dense factors it declines (false, no blocks).
TEST(MultiUserKernelTest, CrossBlocksAreTheNonZeroBlocksOfCross) {
  Rng rng(9);
  const std::shared_ptr<const UserKernel> users = GreenKernel();
  std::vector<int32_t> users_a = DictionaryUsers();
  users_a.insert(users_a.end(), {5, 7});  // two users with a second point
  const Eigen::MatrixXd a = testing::RandomMatrix(4, static_cast<int>(users_a.size()), rng);
  const std::vector<int32_t> sparse_users = {7, 12, 4, 7, kUnknownUser, 8, 6, 12, 4, 5};
  const std::vector<int32_t> dense_users = {0, 1, 2, 3, 0, 2};
  for (double eta : {0.0, 0.6}) {
    SCOPED_TRACE(::testing::Message() << "eta " << eta);
    const MultiUserKernel kernel(ArmKernel(KernelType::kMatern52, 0.9, 0.2, 0.1), users, eta);
    const Eigen::MatrixXd b = testing::RandomMatrix(4, static_cast<int>(sparse_users.size()), rng);
    Eigen::MatrixXd full;
    kernel.Cross(a, users_a, b, sparse_users.data(), &full);
    std::vector<MultiUserKernel::CrossBlock> blocks;
    ASSERT_TRUE(kernel.CrossBlocks(a, users_a, b, sparse_users.data(), &blocks));
    Eigen::MatrixXd scattered = Eigen::MatrixXd::Zero(full.rows(), full.cols());
    std::vector<int> column_seen(sparse_users.size(), 0);
    for (const MultiUserKernel::CrossBlock& block : blocks) {
      ASSERT_EQ(block.block.rows(), static_cast<Eigen::Index>(block.rows.size()));
      ASSERT_EQ(block.block.cols(), static_cast<Eigen::Index>(block.cols.size()));
      EXPECT_TRUE(std::is_sorted(block.rows.begin(), block.rows.end()));
      EXPECT_TRUE(std::is_sorted(block.cols.begin(), block.cols.end()));
      for (size_t c = 0; c < block.cols.size(); ++c) {
        ++column_seen[static_cast<size_t>(block.cols[c])];
        // One block per user of b: all its columns are that user's.
        EXPECT_EQ(sparse_users[static_cast<size_t>(block.cols[c])],
                  sparse_users[static_cast<size_t>(block.cols[0])]);
        for (size_t r = 0; r < block.rows.size(); ++r) {
          scattered(block.rows[r], block.cols[c]) =
              block.block(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c));
        }
      }
    }
    for (size_t j = 0; j < column_seen.size(); ++j) {
      // A column whose user shares nothing with the dictionary (the unknown user's) has no
      // block; every other column has exactly one.
      EXPECT_LE(column_seen[j], 1) << j;
      if (full.col(static_cast<Eigen::Index>(j)).any()) {
        EXPECT_EQ(column_seen[j], 1) << j;
      }
    }
    EXPECT_TRUE((scattered.array() == full.array()).all());
    EXPECT_GT((full.array() == 0.0).count(), full.size() / 2);
    ExpectMatchesDefinition(kernel, a, users_a, b, sparse_users);

    const Eigen::MatrixXd d = testing::RandomMatrix(4, static_cast<int>(dense_users.size()), rng);
    blocks.resize(3);
    EXPECT_FALSE(kernel.CrossBlocks(a, users_a, d, dense_users.data(), &blocks));
    EXPECT_TRUE(blocks.empty());
    // Declining, it computes Cross's matrix when asked to.
    Eigen::MatrixXd dense, expected;
    EXPECT_FALSE(kernel.CrossBlocks(a, users_a, d, dense_users.data(), &blocks, &dense));
    kernel.Cross(a, users_a, d, dense_users.data(), &expected);
    ASSERT_EQ(dense.rows(), expected.rows());
    ASSERT_EQ(dense.cols(), expected.cols());
    EXPECT_TRUE((dense.array() == expected.array()).all());
    ExpectMatchesDefinition(kernel, a, users_a, d, dense_users);
  }
}

TEST(MultiUserKernelTest, CrossOfEmptyBlocks) {
  const MultiUserKernel kernel(ArmKernel(KernelType::kRbf, 1.0), GreenKernel(), 0.5);
  Eigen::MatrixXd out = Eigen::MatrixXd::Ones(3, 3);
  const std::vector<int32_t> none;
  const std::vector<int32_t> two = {0, 7};
  kernel.Cross(Eigen::MatrixXd(4, 0), none, Eigen::MatrixXd::Ones(4, 2), two.data(), &out);
  EXPECT_EQ(out.rows(), 0);
  EXPECT_EQ(out.cols(), 2);
  kernel.Cross(Eigen::MatrixXd::Ones(4, 2), two, Eigen::MatrixXd(4, 0), none.data(), &out);
  EXPECT_EQ(out.rows(), 2);
  EXPECT_EQ(out.cols(), 0);
}

}  // namespace
}  // namespace graphbandit
