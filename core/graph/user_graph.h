// Users of one model and the weighted undirected graph between them.
//
// Users get dense indices in order of registration; an index is never reused or removed, so
// every stored observation can refer to its user by index. The registry is read concurrently
// by decisions while the model's single writer appends to it; the graph's edges are touched
// only by that writer.
#ifndef GRAPHBANDIT_CORE_GRAPH_USER_GRAPH_H_
#define GRAPHBANDIT_CORE_GRAPH_USER_GRAPH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "core/base/sync.h"

namespace graphbandit {

// Index of a user who is not registered (served from the prior).
inline constexpr int32_t kUnknownUser = -1;

class UserRegistry {
 public:
  // Index of `id`, or kUnknownUser.
  int32_t Find(absl::string_view id) const ABSL_LOCKS_EXCLUDED(mu_);
  // Index of `id`, registering it if needed. *added tells whether it was new.
  int32_t FindOrAdd(absl::string_view id, bool* added = nullptr) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Id(int32_t index) const ABSL_LOCKS_EXCLUDED(mu_);
  int32_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, int32_t> index_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> ids_ ABSL_GUARDED_BY(mu_);
};

// Weighted undirected simple graph over registry indices. Not thread-safe: owned by the
// model's writer.
class UserGraph {
 public:
  // Sets the weight of edge {a, b} (a != b, weight > 0). Returns true if the edge is new.
  bool SetEdge(int32_t a, int32_t b, double weight);
  // Removes edge {a, b}. Returns false if there was none.
  bool RemoveEdge(int32_t a, int32_t b);

  double Weight(int32_t a, int32_t b) const;
  double Degree(int32_t u) const;  // sum of incident weights
  bool HasEdges(int32_t u) const {
    return u >= 0 && u < static_cast<int32_t>(adjacency_.size()) && !adjacency_[u].empty();
  }
  const absl::flat_hash_map<int32_t, double>& Neighbours(int32_t u) const;
  // The neighbours of u by ascending index. Sums over neighbours use this order, so that they
  // do not depend on the hash map's iteration order (randomised per process by Abseil): the
  // same graph gives bit-identical Laplacians in every process, which replay relies on.
  std::vector<std::pair<int32_t, double>> SortedNeighbours(int32_t u) const;

  // Users 0..num_users-1 are considered part of the graph (isolated ones included).
  void EnsureUsers(int32_t num_users);
  int32_t num_users() const { return static_cast<int32_t>(adjacency_.size()); }
  int64_t num_edges() const { return num_edges_; }
  // Connected components over the first num_users() users; each isolated user counts as one.
  int64_t CountComponents() const;

  // The connected components of the users that have edges: `of_user[u]` is u's component
  // (-1 for a user without edges), and `members[c]` its users in ascending order. Components
  // are numbered by their smallest user, so the result depends only on the graph.
  struct Components {
    std::vector<int32_t> of_user;
    std::vector<std::vector<int32_t>> members;
  };
  Components ConnectedComponents() const;

 private:
  std::vector<absl::flat_hash_map<int32_t, double>> adjacency_;
  int64_t num_edges_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_GRAPH_USER_GRAPH_H_
