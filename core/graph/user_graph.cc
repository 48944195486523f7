#include "core/graph/user_graph.h"

#include <algorithm>
#include <numeric>

namespace graphbandit {

int32_t UserRegistry::Find(absl::string_view id) const {
  ReaderMutexLock lock(&mu_);
  auto it = index_.find(id);
  return it == index_.end() ? kUnknownUser : it->second;
}

int32_t UserRegistry::FindOrAdd(absl::string_view id, bool* added) {
  MutexLock lock(&mu_);
  auto [it, inserted] = index_.try_emplace(id, static_cast<int32_t>(ids_.size()));
  if (inserted) ids_.emplace_back(id);
  if (added != nullptr) *added = inserted;
  return it->second;
}

std::string UserRegistry::Id(int32_t index) const {
  ReaderMutexLock lock(&mu_);
  return index >= 0 && index < static_cast<int32_t>(ids_.size()) ? ids_[index] : std::string();
}

int32_t UserRegistry::size() const {
  ReaderMutexLock lock(&mu_);
  return static_cast<int32_t>(ids_.size());
}

void UserGraph::EnsureUsers(int32_t num_users) {
  if (num_users > static_cast<int32_t>(adjacency_.size())) adjacency_.resize(num_users);
}

bool UserGraph::SetEdge(int32_t a, int32_t b, double weight) {
  EnsureUsers(std::max(a, b) + 1);
  auto [it, inserted] = adjacency_[a].insert_or_assign(b, weight);
  adjacency_[b].insert_or_assign(a, weight);
  if (inserted) ++num_edges_;
  return inserted;
}

bool UserGraph::RemoveEdge(int32_t a, int32_t b) {
  if (a < 0 || b < 0 || a >= num_users() || b >= num_users()) return false;
  if (adjacency_[a].erase(b) == 0) return false;
  adjacency_[b].erase(a);
  --num_edges_;
  return true;
}

double UserGraph::Weight(int32_t a, int32_t b) const {
  if (a < 0 || a >= num_users()) return 0.0;
  auto it = adjacency_[a].find(b);
  return it == adjacency_[a].end() ? 0.0 : it->second;
}

double UserGraph::Degree(int32_t u) const {
  double sum = 0.0;
  for (const auto& [v, w] : SortedNeighbours(u)) sum += w;
  return sum;
}

std::vector<std::pair<int32_t, double>> UserGraph::SortedNeighbours(int32_t u) const {
  const auto& neighbours = Neighbours(u);
  std::vector<std::pair<int32_t, double>> sorted(neighbours.begin(), neighbours.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

const absl::flat_hash_map<int32_t, double>& UserGraph::Neighbours(int32_t u) const {
  static const absl::flat_hash_map<int32_t, double> kNone;
  return (u >= 0 && u < num_users()) ? adjacency_[u] : kNone;
}

int64_t UserGraph::CountComponents() const {
  std::vector<int32_t> parent(adjacency_.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&parent](int32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  int64_t components = static_cast<int64_t>(adjacency_.size());
  for (int32_t u = 0; u < num_users(); ++u) {
    for (const auto& [v, w] : adjacency_[u]) {
      const int32_t ru = find(u), rv = find(v);
      if (ru != rv) {
        parent[ru] = rv;
        --components;
      }
    }
  }
  return components;
}

UserGraph::Components UserGraph::ConnectedComponents() const {
  const int32_t n = num_users();
  Components out;
  out.of_user.assign(n, -1);
  std::vector<int32_t> stack;
  for (int32_t root = 0; root < n; ++root) {
    if (out.of_user[root] >= 0 || adjacency_[root].empty()) continue;
    const int32_t index = static_cast<int32_t>(out.members.size());
    std::vector<int32_t>& members = out.members.emplace_back();
    stack.assign(1, root);
    out.of_user[root] = index;
    while (!stack.empty()) {
      const int32_t u = stack.back();
      stack.pop_back();
      members.push_back(u);
      for (const auto& [v, w] : adjacency_[u]) {
        if (out.of_user[v] < 0) {
          out.of_user[v] = index;
          stack.push_back(v);
        }
      }
    }
    std::sort(members.begin(), members.end());
  }
  return out;
}

}  // namespace graphbandit
