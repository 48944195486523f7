// The log marginal likelihood of the multi-user GP of core/fit/hyperparameter_fit.h and its
// gradient with respect to the logarithms of the hyper-parameters (internal to core/fit/): the
// users' side of the kernel (G = (L + rho I)^-1 restricted to the data's users, and G^2 for the
// gradient in rho), the likelihood of one data set with its workspaces, and the log-space
// parameter layout the optimiser (core/fit/hyperparameter_fit.cc) works in.
//
// Cost per evaluation: O(n^3) for n points (a Cholesky factorisation and the inverse for the
// gradient), O(n^2 g) for g length-scale groups, and when rho is free a sparse factorisation of
// the Laplacian of the components that hold the data's users plus r sparse solves for r distinct
// users.
//
// Thread-compatible: a Likelihood holds its workspaces and the data it was initialised with
// (which must outlive it); one thread evaluates it at a time.
#ifndef GRAPHBANDIT_CORE_FIT_MARGINAL_LIKELIHOOD_H_
#define GRAPHBANDIT_CORE_FIT_MARGINAL_LIKELIHOOD_H_

#include <Eigen/Dense>
#include <Eigen/SparseCholesky>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/fit/hyperparameter_fit.h"

namespace graphbandit::fit_internal {

// Parameter layout of the full (log-space) vector: s2, b2, c2, l_0..l_{G-1}, lambda, rho, eta,
// w.
constexpr int kSignal = 0, kOffset = 1, kLinear = 2, kFirstLengthscale = 3;
inline int NoiseIndex(int groups) { return kFirstLengthscale + groups; }
inline int RhoIndex(int groups) { return kFirstLengthscale + groups + 1; }
inline int EtaIndex(int groups) { return kFirstLengthscale + groups + 2; }
inline int CommunityIndex(int groups) { return kFirstLengthscale + groups + 3; }
inline int FullSize(int groups) { return kFirstLengthscale + groups + 4; }

// G[U,U] (and G^2[U,U] = -dG/drho) for the distinct users U of the data, and the community
// similarity S[U,U] when the spec has a community part.
class UserFactors {
 public:
  absl::Status Init(const FitData& data, const FitUsers& users, int community_dims = 0);

  bool laplacian() const { return laplacian_; }
  // S[U,U] is available (a Laplacian fit with community_dims > 0).
  bool community() const { return community_.size() > 0; }
  const Eigen::MatrixXd& community_matrix() const { return community_; }
  const std::vector<int>& slot_of() const { return slot_of_; }
  int distinct() const { return static_cast<int>(distinct_.size()); }

  // G[U,U] at `rho` and, with `square`, G^2[U,U].
  absl::Status Evaluate(double rho, Eigen::MatrixXd* g, Eigen::MatrixXd* square);

 private:
  std::vector<int32_t> distinct_;
  std::vector<int> slot_of_;
  bool laplacian_ = false;
  Eigen::MatrixXd fixed_;
  Eigen::MatrixXd community_;  // S[U,U], or empty
  std::vector<int32_t> compact_of_slot_;
  Eigen::SparseMatrix<double> laplacian_matrix_, identity_;
  Eigen::SimplicialLDLT<Eigen::SparseMatrix<double>, Eigen::Lower, Eigen::AMDOrdering<int>> solver_;
  bool analysed_ = false;
};

// Log marginal likelihood and its gradient for one data set.
class Likelihood {
 public:
  absl::Status Init(const FitData& data, const FitUsers& users, const FitSpec& spec);

  int n() const { return static_cast<int>(data_->y.size()); }
  UserFactors& users() { return users_; }

  // The mean over pairs of inputs of the squared distance in group g's dimensions (stationary
  // kernels), or the mean squared norm of one input in them (linear kernel).
  double TypicalSquare(int g) const;

  // Log marginal likelihood at h; gradient over the full log-space layout when asked. With
  // `at_own_mean`, at h.prior_mean even when the spec profiles the mean.
  absl::StatusOr<double> Evaluate(const Hyperparameters& h, Eigen::VectorXd* gradient,
                                  double* mean_out, bool at_own_mean = false);

 private:
  const FitData* data_ = nullptr;
  const FitSpec* spec_ = nullptr;
  UserFactors users_;
  bool stationary_ = false;   // else the linear kernel
  bool linear_part_ = false;  // a stationary kernel's linear part is fitted
  bool grouped_ = false;      // dimensions share length-scales: per-group statistics below
  Eigen::MatrixXd centred_;   // inputs minus their mean, per dimension
  // Grouped: per group, squared distances (stationary) or products (linear kernel), and the
  // products for a stationary kernel's linear part.
  std::vector<Eigen::MatrixXd> group_stats_, group_products_;
  Eigen::MatrixXd same_user_;        // [u_i = u_j]: fixed by the data
  Eigen::MatrixXd community_pairs_;  // S[u_i, u_j] when the users have a community part
  // Workspaces of Evaluate (see there). Memory: about 14 n x n matrices, plus two per group when
  // grouped, plus O(n dim).
  Eigen::MatrixXd z_, raw_scaled_, projected_;
  Eigen::MatrixXd gu_, gu2_, gp_, scaled_, root_, profile_, inner_, arm_, a_, linv_, w_, wg_,
      slope_;
  Eigen::LLT<Eigen::MatrixXd> llt_;
};

// The free parameters, in the full layout's order, as one log-space vector.
struct Layout {
  std::vector<int> free;  // indices into the full layout
  int groups = 0;

  static Layout Of(const FitSpec& spec, bool laplacian, bool community) {
    Layout layout;
    layout.groups = spec.groups();
    if (spec.fit_signal_variance) layout.free.push_back(kSignal);
    if (spec.fit_offset_variance) layout.free.push_back(kOffset);
    if (spec.fit_linear_variance && spec.kernel != KernelType::kLinear) {
      layout.free.push_back(kLinear);
    }
    for (int g = 0; g < spec.groups(); ++g) {
      if (spec.fit_lengthscale[g]) layout.free.push_back(kFirstLengthscale + g);
    }
    if (spec.fit_noise_variance) layout.free.push_back(NoiseIndex(spec.groups()));
    if (spec.fit_rho && laplacian) layout.free.push_back(RhoIndex(spec.groups()));
    if (spec.fit_user_variance) layout.free.push_back(EtaIndex(spec.groups()));
    if (spec.fit_community_variance && laplacian && community) {
      layout.free.push_back(CommunityIndex(spec.groups()));
    }
    return layout;
  }
  int full_size() const { return FullSize(groups); }
};

// Full log-space vector <-> Hyperparameters (length-scales by group).
Eigen::VectorXd ToFull(const Hyperparameters& h, const FitSpec& spec);
void FromFull(const Eigen::VectorXd& full, const FitSpec& spec, Hyperparameters* h);

// OK, or InvalidArgument when `h` has not `dim` length-scales or is out of range.
absl::Status CheckStart(const Hyperparameters& h, int dim);

}  // namespace graphbandit::fit_internal

#endif  // GRAPHBANDIT_CORE_FIT_MARGINAL_LIKELIHOOD_H_
