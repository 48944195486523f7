// Community coordinates of users: the users of the graph's largest connected component placed
// at their entries in the k eigenvectors of that component's Laplacian with the smallest
// non-zero eigenvalues (a spectral embedding; von Luxburg, "A tutorial on spectral clustering",
// 2007), and the similarity
//
//   S(u, v) = exp(-|z_u - z_v|^2 / (2 sigma^2)),   sigma = the median distance between users,
//
// the spectral RBF agent kernel of COOP-KernelUCB (see core/graph/user_kernel.h), computed
// without dense matrices, so that it serves graphs of any size. Users outside the largest
// component (isolated users, small components, users registered later, unknown users) have no
// coordinates: S(u, u) = 1 and S(u, v) = 0 for v != u.
//
// Why it exists: on sparse graphs with communities, (L + rho I)^-1 is local. Its columns decay
// within a few hops, so users of one community a few hops apart share little of their prior
// (on an SBM of 1,000 users in 10 blocks with about 3 neighbours each, about 5% of the prior
// variance is shared per block at any rho), while S shares more than half of it. The Green's
// function adds community_variance * S when that variance is set (green_function.h).
//
// The eigenvectors come from Spectra (Debian's libspectra-dev): shift-invert Lanczos around a
// small negative shift, with a sparse LDL^T of L + shift I, for components larger than a few
// hundred users; a dense symmetric eigensolver below that. Both are deterministic (Spectra starts
// from a fixed pseudo-random vector), so a replay rebuilds the same coordinates.
#ifndef GRAPHBANDIT_CORE_GRAPH_SPECTRAL_EMBEDDING_H_
#define GRAPHBANDIT_CORE_GRAPH_SPECTRAL_EMBEDDING_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/graph/user_graph.h"

namespace graphbandit {

class SpectralEmbedding {
 public:
  // Embeds the largest connected component of `graph` (the one holding the lowest user index
  // among equally large ones) in `dims` dimensions (1..kMaxDims). A component with fewer than
  // dims + 2 users embeds nobody (then S is the identity), and so does an eigensolver that
  // does not converge (failure() says why): a graph is never refused for its embedding, and
  // the outcome is deterministic, so a replay reaches the same one. Fails only for dims out
  // of range. The last embedding built is kept, by a fingerprint of the graph's users, edges and
  // weights, and returned again for an equal graph (a refit that changes only rho or the
  // community variance, a fit's copy of the served graph).
  static absl::StatusOr<std::shared_ptr<const SpectralEmbedding>> Build(const UserGraph& graph,
                                                                        int dims);
  static constexpr int kMaxDims = 64;

  int dims() const { return dims_; }
  double bandwidth() const { return bandwidth_; }
  // Users with coordinates (the embedded component), and the row of a user (-1: none).
  int32_t embedded_users() const { return static_cast<int32_t>(coordinates_.rows()); }
  int32_t RowOf(int32_t user) const {
    return user >= 0 && user < static_cast<int32_t>(row_of_user_.size()) ? row_of_user_[user] : -1;
  }
  const Eigen::MatrixXd& coordinates() const { return coordinates_; }  // embedded_users x dims
  // The eigenvalues of the chosen eigenvectors, ascending (diagnostics and tests).
  const Eigen::VectorXd& eigenvalues() const { return eigenvalues_; }
  // Why nobody is embedded although the largest component is large enough; empty otherwise.
  const std::string& failure() const { return failure_; }

  // S(u, v) for any users, including kUnknownUser (unknown users are not the same user).
  double Similarity(int32_t u, int32_t v) const;
  // out(r) = S(user of row r, u) over the embedded rows (all zero when u has no
  // coordinates). `out` is resized.
  void SimilarityColumn(int32_t u, Eigen::VectorXd* out) const;

 private:
  SpectralEmbedding() = default;
  // Build without the cache.
  static std::shared_ptr<const SpectralEmbedding> Compute(const UserGraph& graph, int dims);
  static std::shared_ptr<const SpectralEmbedding> Unembedded(
      std::shared_ptr<SpectralEmbedding> embedding, absl::string_view why);

  int dims_ = 0;
  double bandwidth_ = 1.0;
  double inverse_two_bandwidth_squared_ = 0.5;
  std::vector<int32_t> row_of_user_;
  Eigen::MatrixXd coordinates_;
  Eigen::VectorXd eigenvalues_;
  std::string failure_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_GRAPH_SPECTRAL_EMBEDDING_H_
