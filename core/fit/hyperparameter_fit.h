// Fitting a kernel model's hyper-parameters to its observed rewards by maximising the log
// marginal likelihood (type-II maximum likelihood; Rasmussen & Williams, "Gaussian Processes for
// Machine Learning", ch. 5) of the multi-user GP
//
//   y_i = m0 + f(x_i, u_i) + noise,   f ~ GP(0, K),   noise ~ N(0, lambda),
//   K((x,u),(x',u')) = (G[u,u'] + w S[u,u'] + eta [u = u'])
//                      * (s2 profile(|x - x'|_l) + c2 <x,x'>_l + b2),
//   G = (L + rho I)^-1
//
// (the Laplacian multi-user kernel of LK eq. 2 with a fitted arm kernel, plus each user's own
// deviation; core/kernel/multi_user_kernel.h), on a bounded subset of the history. Free parameters,
// all optimised in log space with analytic gradients by L-BFGS (NLopt) within wide data-relative
// bounds:
//   s2      the arm kernel's variance;
//   b2      a constant added to the arm kernel (per-user intercepts shared along the graph);
//   c2      a linear part <x/l, x'/l> added to a stationary arm kernel (linear trends);
//   l_g     length-scales: one per group of input dimensions (context, arm features), or one per
//           dimension (automatic relevance determination);
//   lambda  the noise variance (the ridge);
//   rho     the Laplacian regulariser, when the user kernel is the Green's function;
//   eta     variance of each user's own deviation beside what the graph shares (G + eta I);
//   w       variance of what a community shares: S is the spectral similarity of the users of
//           the graph's largest component (core/graph/spectral_embedding.h), which the Green's
//           function, local on sparse graphs, lacks; fitted when the model has a community part;
// and m0, the constant prior mean, profiled out in closed form (its generalised-least-squares
// estimate at every step). A weak log-normal prior around data-derived centres (factor e^3 at one
// standard deviation) keeps tiny subsets from driving a parameter to a bound; its weight fades as
// the subset grows. Parameters the configuration fixes are held at their values.
//
// Cost per likelihood evaluation: O(n^3) for n points (a Cholesky factorisation and the inverse
// for the gradient), O(n^2 g) for g length-scale groups, and when rho is free a sparse
// factorisation of the Laplacian of the components that hold the subset's users plus r sparse
// solves for r distinct users. Nothing here touches a model's serving state: a fit runs beside
// it (see core/model/model.h), and what it returns is logged and applied by the writer.
#ifndef GRAPHBANDIT_CORE_FIT_HYPERPARAMETER_FIT_H_
#define GRAPHBANDIT_CORE_FIT_HYPERPARAMETER_FIT_H_

#include <Eigen/Dense>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"

namespace graphbandit {

// Everything a refit may change. Length-scales are in the units of the raw features.
struct Hyperparameters {
  double signal_variance = 1.0;     // s2
  double offset_variance = 0.0;     // b2
  double linear_variance = 0.0;     // c2 (stationary kernels only)
  double user_variance = 0.0;       // eta
  double community_variance = 0.0;  // w (0: no community part)
  Eigen::VectorXd lengthscales;     // one per joint input dimension (context first)
  double noise_variance = 0.1;      // lambda
  double rho = 0.1;
  double prior_mean = 0.0;  // m0

  bool operator==(const Hyperparameters& o) const {
    return signal_variance == o.signal_variance && offset_variance == o.offset_variance &&
           linear_variance == o.linear_variance && user_variance == o.user_variance &&
           community_variance == o.community_variance &&
           lengthscales.size() == o.lengthscales.size() && lengthscales == o.lengthscales &&
           noise_variance == o.noise_variance && rho == o.rho && prior_mean == o.prior_mean;
  }
  std::string DebugString() const;
  // Every value finite; variances, length-scales, noise and rho > 0 (offset, linear, user and
  // community variances may be 0); `dim` length-scales (any number when dim < 0).
  bool InRange(int dim = -1) const;
};

// The observations a fit uses. Inputs are raw (not divided by length-scales).
struct FitData {
  Eigen::MatrixXd x;  // joint inputs, one column per observation
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

struct FitSpec {
  KernelType kernel = KernelType::kRbf;
  // Length-scale group of each joint dimension (values 0..groups-1). Dimensions of one group
  // share one length-scale.
  std::vector<int> lengthscale_group;
  // Which parameters are free; the others keep the start value.
  bool fit_signal_variance = true;
  bool fit_offset_variance = true;
  bool fit_linear_variance = true;  // ignored (kept 0) for the linear kernel
  bool fit_user_variance = true;
  std::vector<bool> fit_lengthscale;  // per group
  // When not empty, a coarser grouping (same form as lengthscale_group and fit_lengthscale) that
  // a fit uses instead when it has too few observations for the one above
  // (min_points_per_parameter) and the start values have one length-scale per coarse group: a
  // per-dimension fit falls back to one length-scale per input kind rather than waiting for ten
  // observations per dimension.
  std::vector<int> coarse_lengthscale_group;
  std::vector<bool> coarse_fit_lengthscale;
  bool fit_noise_variance = true;
  bool fit_rho = true;  // only with `graph` (the Green's function user kernel)
  // The community part w S: S from a spectral embedding of `graph` in this many dimensions
  // (0: none, w is held at its start value, which must then be 0); w fitted when set.
  int community_dims = 0;
  bool fit_community_variance = false;
  bool fit_prior_mean = true;
  int max_evaluations = 80;
  // A fit needs at least this many observations per free parameter (the profiled prior mean
  // counts as one), or max_points of them when that is fewer, else it fails with
  // FailedPrecondition (nothing to fit yet). 0: no minimum.
  int min_points_per_parameter = 0;
  int max_points = 0;  // the most observations a fit is given (0: no limit)
  double prior_log_sd = 3.0;
  // When set and it becomes true, the fit stops early and fails with Cancelled.
  const std::atomic<bool>* cancel = nullptr;
  // RefitOptions::cpu_share, for whoever runs the fit (FitWorker paces it; a direct call of
  // FitHyperparameters does not).
  double cpu_share = 1.0;
  // When set, called after every likelihood evaluation with its wall-clock duration in
  // seconds (FitWorker pauses there).
  std::function<void(double)> after_evaluation;

  int groups() const { return static_cast<int>(fit_lengthscale.size()); }
};

struct FitResult {
  Hyperparameters values;
  double log_likelihood_start = 0.0;  // per point, at the start values (their own prior mean)
  double log_likelihood = 0.0;        // per point, at the fitted values
  int evaluations = 0;
  int points = 0;
  int free_parameters = 0;  // parameters the fit optimised (a profiled prior mean counts as one)
  double seconds = 0.0;
};

// The users' side of the kernel for a fit: either the Green's function of `graph` (rho may then
// be fitted, and the community part w S added), or a fixed user kernel.
struct FitUsers {
  const UserGraph* graph = nullptr;         // Green's function (L + rho I)^-1 of this graph
  std::shared_ptr<const UserKernel> fixed;  // used when graph is null
};

// Maximises the log marginal likelihood from `start` (and from data-derived values; the better
// optimum wins). Fails with InvalidArgument on inconsistent inputs and FailedPrecondition with
// fewer than 2 observations (or fewer than spec.min_points_per_parameter per free parameter, after
// falling back to spec.coarse_lengthscale_group where that applies), rewards without variance or
// every observation at one input.
absl::StatusOr<FitResult> FitHyperparameters(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& start, const FitSpec& spec);

// The log marginal likelihood (not divided by n) at `values` with the prior mean profiled out
// (values.prior_mean is ignored when spec.fit_prior_mean), and its gradient with respect to the
// logarithms of the free parameters in the order s2, b2, c2, l_g (free groups), lambda, rho,
// eta, w. Without the weak prior. For tests and diagnostics.
absl::StatusOr<double> LogMarginalLikelihood(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& values, const FitSpec& spec,
                                             Eigen::VectorXd* gradient = nullptr,
                                             double* profiled_mean = nullptr);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FIT_HYPERPARAMETER_FIT_H_
