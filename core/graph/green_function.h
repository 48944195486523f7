// The user kernel of the Laplacian multi-user kernel: G = (L + rho I)^-1 (docs/algorithms.md §1.2).
//
// G is never formed densely. Users with at least one edge are factorised once with a sparse
// LDL^T of L + rho I (AMD ordering); a column G[:, u] costs one sparse solve and is cached.
// Users without edges (and users that are not registered at all) form their own component,
// where G[u, u] = 1 / rho and every other entry is 0, so adding an isolated user never
// requires a new factorisation. An edge change builds a new GreenFunction; the old one keeps
// serving until the model publishes the state built on the new one.
//
// With a spectral embedding and a community variance w > 0 the kernel is G + w S, S the
// community similarity of spectral_embedding.h: what the graph shares locally plus what a
// community shares. Every user then has w added to the diagonal; users of the embedded
// component also share w S(u, v) with each other.
#ifndef GRAPHBANDIT_CORE_GRAPH_GREEN_FUNCTION_H_
#define GRAPHBANDIT_CORE_GRAPH_GREEN_FUNCTION_H_

#include <Eigen/Dense>
#include <Eigen/SparseCholesky>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "core/base/sync.h"
#include "core/graph/spectral_embedding.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"

namespace graphbandit {

class GreenFunction final : public UserKernel {
 public:
  // Factorises L + rho I for the users of `graph` that have edges. cache_bytes bounds the
  // memory of cached columns (at least 16 columns are kept).
  // `community` (when not null and community_variance > 0) must embed this graph.
  static absl::StatusOr<std::shared_ptr<const GreenFunction>> Build(
      const UserGraph& graph, double rho, size_t cache_bytes = size_t{256} << 20,
      std::shared_ptr<const SpectralEmbedding> community = nullptr,
      double community_variance = 0.0);

  double rho() const { return rho_; }
  double community_variance() const { return community_variance_; }
  // Users that belong to the factorised (non-isolated) part.
  int32_t factorised_users() const { return static_cast<int32_t>(users_of_compact_.size()); }

  // G[:, u] for any u, including kUnknownUser (then it is the column of a user with no edges).
  Column ColumnOf(int32_t u) const override;

 private:
  GreenFunction() = default;
  std::shared_ptr<const Eigen::VectorXd> SolveColumn(int32_t compact_index) const;

  double rho_ = 1.0;
  double community_variance_ = 0.0;  // 0: no community part
  std::shared_ptr<const SpectralEmbedding> community_;
  std::vector<int32_t> compact_of_row_;    // embedding row -> compact index
  std::vector<int32_t> compact_of_user_;   // user index -> compact index, or -1
  std::vector<int32_t> users_of_compact_;  // compact index -> user index
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower, Eigen::AMDOrdering<int>> solver_;
  size_t cache_capacity_ = 16;

  mutable Mutex cache_mu_;
  struct CacheEntry {
    std::shared_ptr<const Eigen::VectorXd> values;
    std::list<int32_t>::iterator recency;
  };
  mutable absl::flat_hash_map<int32_t, CacheEntry> cache_ ABSL_GUARDED_BY(cache_mu_);
  mutable std::list<int32_t> recency_ ABSL_GUARDED_BY(cache_mu_);  // front = most recent
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_GRAPH_GREEN_FUNCTION_H_
