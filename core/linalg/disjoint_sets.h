// Disjoint sets over 0..n-1 (union-find with path halving and union by size), and the
// components of a symmetric matrix's non-zero pattern found with them.
//
// The multi-user kernel is exactly zero between users in different graph components
// (core/kernel/multi_user_kernel.h), so the dictionary's matrices (K_ZZ, M and their factors)
// are block-diagonal up to an ordering of the points. The linear algebra uses these sets to find
// the blocks and work on each alone (core/linalg/cholesky_factor.h, variance_form.h, and the
// learner's re-admission and batch blocks).
#ifndef GRAPHBANDIT_CORE_LINALG_DISJOINT_SETS_H_
#define GRAPHBANDIT_CORE_LINALG_DISJOINT_SETS_H_

#include <Eigen/Dense>
#include <numeric>
#include <utility>
#include <vector>

namespace graphbandit {

class DisjointSets {
 public:
  explicit DisjointSets(int n = 0) { Reset(n); }

  // n singletons.
  void Reset(int n) {
    parent_.resize(static_cast<size_t>(n));
    std::iota(parent_.begin(), parent_.end(), 0);
    size_.assign(static_cast<size_t>(n), 1);
  }
  int size() const { return static_cast<int>(parent_.size()); }
  // Adds the singleton {size()}.
  void Add() {
    parent_.push_back(size());
    size_.push_back(1);
  }
  int Find(int i) {
    while (parent_[i] != i) i = parent_[i] = parent_[parent_[i]];
    return i;
  }
  void Join(int a, int b) {
    a = Find(a);
    b = Find(b);
    if (a == b) return;
    if (size_[a] < size_[b]) std::swap(a, b);
    parent_[b] = a;
    size_[a] += size_[b];
  }
  // The number of elements in i's set.
  int SetSize(int i) { return size_[Find(i)]; }
  // Whether every element is in one set (true when there are none).
  bool AllOne() { return parent_.empty() || SetSize(0) == size(); }

  // The sets, each sorted, in the order of their smallest elements.
  std::vector<std::vector<int>> Groups() {
    std::vector<int> group_of(parent_.size(), -1);
    std::vector<std::vector<int>> groups;
    for (int i = 0; i < size(); ++i) {
      const int root = Find(i);
      if (group_of[root] < 0) {
        group_of[root] = static_cast<int>(groups.size());
        groups.emplace_back();
      }
      groups[group_of[root]].push_back(i);
    }
    return groups;
  }

  // Joins i and j for every non-zero entry (i, j), i > j, of the leading size() x size() block
  // of `lower` (the strictly lower triangle; for a symmetric matrix or a lower factor, its whole
  // pattern). Stops early once everything is one set.
  template <typename Derived>
  void JoinLowerPattern(const Eigen::MatrixBase<Derived>& lower) {
    const int n = size();
    for (int j = 0; j + 1 < n; ++j) {
      const auto below = lower.col(j).segment(j + 1, n - j - 1);
      if (!(below.array() != 0).any()) continue;  // a vectorised test first: most are zero
      for (int i = 0; i < below.size(); ++i) {
        if (below(i) != 0) Join(j + 1 + i, j);
      }
      if (AllOne()) return;
    }
  }

 private:
  std::vector<int> parent_;
  std::vector<int> size_;  // at a root: its set's size
};

// The groups of rows and columns of a square matrix that no non-zero of its strictly lower
// triangle links (each sorted, in the order of their smallest rows); every such pattern
// passed in is joined. One group when the matrices are connected.
template <typename... Lower>
std::vector<std::vector<int>> LowerPatternGroups(int n, const Lower&... lower) {
  DisjointSets sets(n);
  (sets.JoinLowerPattern(lower), ...);
  return sets.Groups();
}

// Whether working on `groups` block by block pays against one dense pass over n rows: more
// than one group, none more than half of the rows.
inline bool BlocksPay(const std::vector<std::vector<int>>& groups, int n) {
  if (groups.size() < 2) return false;
  for (const std::vector<int>& g : groups) {
    if (2 * static_cast<int>(g.size()) > n) return false;
  }
  return true;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_DISJOINT_SETS_H_
