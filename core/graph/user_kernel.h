// User kernels K_z(u, u'): the user factor of a multi-user kernel K_z(u,u') * k_x(s,s').
//
// The Laplacian Kernelized Bandit paper uses the Green's function (L + rho I)^-1 (see
// green_function.h, which never forms it densely); COOP-KernelUCB (docs/algorithms.md §1.9)
// compares other agent kernels built from the same graph: heat exp(-tau L), spectral RBF on the
// first non-trivial Laplacian eigenvectors, and all-ones (full pooling, i.e. a GP that ignores
// users). Those are formed densely here, so they suit graphs of at most a few thousand users.
//
// Users registered after a kernel was built (and users never registered, kUnknownUser) have no
// edges in it: for the Laplacian-based kernels they are their own component (a diagonal entry
// only), for all-ones they are pooled with everyone like every other user.
#ifndef GRAPHBANDIT_CORE_GRAPH_USER_KERNEL_H_
#define GRAPHBANDIT_CORE_GRAPH_USER_KERNEL_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/graph/user_graph.h"

namespace graphbandit {

class UserKernel {
 public:
  // One column K_z[:, u]; cheap to copy, valid while the kernel lives.
  class Column {
   public:
    double At(int32_t v) const {
      if (values_ != nullptr && v >= 0 && v < static_cast<int32_t>(slot_->size())) {
        const int32_t slot = (*slot_)[v];
        if (slot >= 0) return (*values_)(slot);
      }
      return (v == user_ && v != kUnknownUser) ? self_ : fill_;
    }
    double Diagonal() const { return diagonal_; }

   private:
    friend class UserKernel;
    int32_t user_ = kUnknownUser;
    double diagonal_ = 0.0;  // K_z(u, u)
    double self_ = 0.0;      // K_z(u, u) for a user outside the indexed set
    double fill_ = 0.0;      // K_z(u, v) when u or v is outside the indexed set (u != v)
    const std::vector<int32_t>* slot_ = nullptr;     // user -> index into values_, or -1
    std::shared_ptr<const Eigen::VectorXd> values_;  // null: u is outside the indexed set
  };

  virtual ~UserKernel() = default;
  // K_z[:, u] for any u, including kUnknownUser.
  virtual Column ColumnOf(int32_t u) const = 0;
  double Entry(int32_t u, int32_t v) const { return ColumnOf(u).At(v); }

 protected:
  // For implementations: a column over the users that have a slot.
  static Column MakeColumn(int32_t user, double diagonal, double self, double fill,
                           const std::vector<int32_t>* slot,
                           std::shared_ptr<const Eigen::VectorXd> values) {
    Column c;
    c.user_ = user;
    c.diagonal_ = diagonal;
    c.self_ = self;
    c.fill_ = fill;
    c.slot_ = slot;
    c.values_ = std::move(values);
    return c;
  }
};

enum class UserKernelKind {
  kLaplacianInverse,  // (L + rho I)^-1, the Green's function (sparse; the default)
  kHeat,              // exp(-tau L)
  kSpectralRbf,       // exp(-|Z_u - Z_v|^2 / (2 sigma^2)), Z = k smallest non-trivial eigenvectors
  kAllOnes,           // 1 for every pair: users are ignored
  kIdentity,          // 1 on the diagonal: users are independent
};

absl::string_view UserKernelKindName(UserKernelKind kind);
absl::StatusOr<UserKernelKind> ParseUserKernelKind(absl::string_view name);

struct UserKernelOptions {
  UserKernelKind kind = UserKernelKind::kLaplacianInverse;
  double rho = 0.1;  // kLaplacianInverse
  // kLaplacianInverse: G + community_variance * S, S the similarity of a spectral embedding of
  // the graph's largest component in community_dims dimensions (spectral_embedding.h); off
  // when either is 0.
  int community_dims = 0;
  double community_variance = 0.0;
  double heat_tau = 1.0;            // kHeat
  int spectral_dims = 8;            // kSpectralRbf: k
  double spectral_bandwidth = 0.0;  // kSpectralRbf: sigma; 0 = median of pairwise distances
  int max_dense_users = 5000;       // dense kernels refuse larger graphs
};

// A kernel given as an explicit symmetric matrix over users 0..n-1. Users beyond n (or unknown)
// are described by `outside`: K_z(outside, v) for v < n, K_z(u, u) for an outside user, and
// K_z(u, u') between two different outside users.
class DenseUserKernel final : public UserKernel {
 public:
  struct Outside {
    Eigen::VectorXd column;  // size n
    double self = 1.0;
    double cross = 0.0;
  };
  DenseUserKernel(const Eigen::MatrixXd& matrix, Outside outside);
  Column ColumnOf(int32_t u) const override;

 private:
  std::vector<int32_t> slot_;  // identity over 0..n-1
  std::vector<std::shared_ptr<const Eigen::VectorXd>> columns_;
  std::shared_ptr<const Eigen::VectorXd> outside_column_;
  Outside outside_;
};

// K_z = c for every pair (all-ones, c = 1) or K_z = c on the diagonal only (identity); any
// number of users.
class ConstantUserKernel final : public UserKernel {
 public:
  ConstantUserKernel(double diagonal, double off_diagonal)
      : diagonal_(diagonal), off_diagonal_(off_diagonal) {}
  Column ColumnOf(int32_t u) const override {
    return MakeColumn(u, diagonal_, diagonal_, off_diagonal_, nullptr, nullptr);
  }

 private:
  double diagonal_;
  double off_diagonal_;
};

// Builds the kernel of `options.kind` for the users of `graph`.
absl::StatusOr<std::shared_ptr<const UserKernel>> BuildUserKernel(const UserGraph& graph,
                                                                  const UserKernelOptions& options);

// The dense combinatorial Laplacian of the graph's users.
Eigen::MatrixXd DenseLaplacian(const UserGraph& graph);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_GRAPH_USER_KERNEL_H_
