// AddRankUpdateOnRows against its definition, entry by entry: one triangle of m + sign u u^T,
// the other triangle untouched, on each of its three ways (groups of columns by their non-zero
// rows, the block of the non-zero rows, the whole triangle).
#include "core/linalg/rank_update.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace graphbandit {
namespace {

Eigen::MatrixXd RandomSymmetric(int n, std::mt19937_64* rng) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd a(n, n);
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) a(i, j) = normal(*rng);
  }
  return a;  // the triangles need not agree: the untouched one is checked as it was
}

// Columns of u: column c is non-zero exactly on `patterns[c % patterns.size()]`.
Eigen::MatrixXd WithPatterns(int n, int cols, const std::vector<std::vector<int>>& patterns,
                             std::mt19937_64* rng) {
  std::normal_distribution<double> normal;
  Eigen::MatrixXd u = Eigen::MatrixXd::Zero(n, cols);
  for (int c = 0; c < cols; ++c) {
    for (int i : patterns[static_cast<size_t>(c) % patterns.size()]) {
      double x = normal(*rng);
      u(i, c) = x == 0.0 ? 1.0 : x;
    }
  }
  return u;
}

template <unsigned int UpLo>
void ExpectDefinition(const Eigen::MatrixXd& u, double sign, RankUpdateWay way) {
  std::mt19937_64 rng(5);
  const Eigen::MatrixXd before = RandomSymmetric(static_cast<int>(u.rows()), &rng);
  Eigen::MatrixXd m = before;
  EXPECT_EQ(AddRankUpdateOnRows<UpLo>(u, sign, &m), way);
  const Eigen::MatrixXd want = before + sign * u * u.transpose();
  for (Eigen::Index j = 0; j < m.cols(); ++j) {
    for (Eigen::Index i = 0; i < m.rows(); ++i) {
      const bool in_triangle = UpLo == Eigen::Lower ? i >= j : i <= j;
      if (in_triangle) {
        EXPECT_NEAR(m(i, j), want(i, j), 1e-12 * (1.0 + std::abs(want(i, j))))
            << "entry (" << i << ", " << j << ")";
      } else {
        EXPECT_EQ(m(i, j), before(i, j)) << "entry (" << i << ", " << j << ") off the triangle";
      }
    }
  }
}

template <unsigned int UpLo>
void ExpectAllWays(double sign) {
  std::mt19937_64 rng(11);
  const int n = 40;
  // Every row: the whole triangle.
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  ExpectDefinition<UpLo>(WithPatterns(n, 7, {all}, &rng), sign, RankUpdateWay::kWhole);
  // Mostly dense columns (a few exact zeros, different ones) are taken on every row.
  std::vector<int> most_a, most_b;
  for (int i = 0; i < n; ++i) {
    if (i % 9 != 2) most_a.push_back(i);
    if (i % 7 != 5) most_b.push_back(i);
  }
  ExpectDefinition<UpLo>(WithPatterns(n, 11, {most_a, most_b}, &rng), sign, RankUpdateWay::kWhole);
  // One pattern on a third of the rows (not contiguous): the block of those rows.
  std::vector<int> third;
  for (int i = 1; i < n; i += 3) third.push_back(i);
  ExpectDefinition<UpLo>(WithPatterns(n, 9, {third}, &rng), sign, RankUpdateWay::kRows);
  // Eight disjoint groups of five rows, interleaved, columns in no order: by groups.
  std::vector<std::vector<int>> disjoint(8);
  for (int i = 0; i < n; ++i) disjoint[static_cast<size_t>((i * 3) % 8)].push_back(i);
  ExpectDefinition<UpLo>(WithPatterns(n, 37, disjoint, &rng), sign, RankUpdateWay::kGroups);
  // Overlapping groups (users whose components share dictionary points would not, but the
  // sum must not care), one column with a single row, and all-zero columns.
  std::vector<std::vector<int>> overlapping = {{0, 1, 2, 3}, {2, 3, 4, 5}, {7}, {}, {30, 31, 39}};
  ExpectDefinition<UpLo>(WithPatterns(n, 200, overlapping, &rng), sign, RankUpdateWay::kGroups);
  // Too few columns per group to pay for the groups' set-up: the block of their rows.
  ExpectDefinition<UpLo>(WithPatterns(n, 23, overlapping, &rng), sign, RankUpdateWay::kRows);
  // Groups that together cost more than the block of their rows: that block instead.
  std::vector<std::vector<int>> halves = {{0, 1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 5, 6, 7, 8}};
  ExpectDefinition<UpLo>(WithPatterns(n, 12, halves, &rng), sign, RankUpdateWay::kRows);
  // Disjoint groups covering every row: by groups, not the whole triangle.
  std::vector<std::vector<int>> cover(4);
  for (int i = 0; i < n; ++i) cover[static_cast<size_t>(i % 4)].push_back(i);
  ExpectDefinition<UpLo>(WithPatterns(n, 16, cover, &rng), sign, RankUpdateWay::kGroups);
  // A few dense columns among many on a few rows: the dense columns as one group.
  std::vector<std::vector<int>> mixed = {all, {3, 4}, {10, 11, 12}, {20}};
  ExpectDefinition<UpLo>(WithPatterns(n, 40, mixed, &rng), sign, RankUpdateWay::kGroups);
  // Nothing to add.
  ExpectDefinition<UpLo>(Eigen::MatrixXd::Zero(n, 3), sign, RankUpdateWay::kNone);
  ExpectDefinition<UpLo>(Eigen::MatrixXd::Zero(n, 0), sign, RankUpdateWay::kNone);
}

TEST(RankUpdateTest, LowerMatchesDefinitionOnEveryWay) {
  ExpectAllWays<Eigen::Lower>(1.0);
  ExpectAllWays<Eigen::Lower>(-1.0);
}

TEST(RankUpdateTest, UpperMatchesDefinitionOnEveryWay) {
  ExpectAllWays<Eigen::Upper>(1.0);
  ExpectAllWays<Eigen::Upper>(-0.5);
}

// The grouped way on a block as the history pass sees it: many users, each column non-zero on
// its user's few dictionary points, far more columns than rows.
TEST(RankUpdateTest, ManySmallGroupsMatchDefinition) {
  std::mt19937_64 rng(23);
  const int n = 300;
  std::vector<std::vector<int>> users(60);
  for (int i = 0; i < n; ++i) users[static_cast<size_t>((i * 7) % 60)].push_back(i);
  ExpectDefinition<Eigen::Lower>(WithPatterns(n, 700, users, &rng), 1.0, RankUpdateWay::kGroups);
}

}  // namespace
}  // namespace graphbandit
