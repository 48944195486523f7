// When and how a kernel model refits its hyper-parameters (core/fit/hyperparameter_fit.h) and how
// fitted values reach its learner, shared by the server's models (core/model/model.h, which fit on
// a helper thread and log the result) and the simulator (which fits inline at the same points).
//
// Schedule: the first fit once `first_fit` rewards are learned, then each time the number of
// learned rewards has grown by the factor `growth` (but at least every `max_interval`). A fit
// uses `max_points` retained observations spread evenly from the oldest to the most recent.
// Fitted values are applied (and the learner rebuilt) only when they explain those
// observations better than the values in use (FitImproves) and one of them moved by more than
// `min_change`: after a few fits a stationary task stops paying for rebuilds.
//
// Applying values: the arm kernel gets the fitted variance and offset, the user kernel is
// rebuilt for the fitted rho, the ridge becomes the fitted noise variance and KORS's mu
// kors_mu_factor times it (EK paper, docs/algorithms.md §4.8: mu = lambda) unless the configuration
// fixes mu, the learner's stored points are rescaled to the new length-scales and the learner
// rebuilds itself (Learner::Refit). Values the configuration fixes are never fitted.
#ifndef GRAPHBANDIT_CORE_FIT_REFIT_H_
#define GRAPHBANDIT_CORE_FIT_REFIT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/posterior.h"

namespace graphbandit {

// When a Nystrom dictionary reaches its cap (nystrom.max_dictionary_size), KORS's mu is doubled
// relative to the noise variance and the dictionary re-admitted with it (Learner::Refit): a
// coarser but still uniform approximation of the span of the whole history, which frees room
// for points in regions it does not cover yet. At most up to this factor; beyond it, points that
// find the dictionary full are not added (their observations are still learned through their
// projection on the dictionary, and their residual prior variance stays in their stddev).
inline constexpr double kMaxKorsMuFactor = 64.0;

// The factor to rebuild a full dictionary with, or 0 when `current` is the coarsest already.
inline double CoarserKorsMuFactor(double current) {
  return current * 2.0 <= kMaxKorsMuFactor ? current * 2.0 : 0.0;
}

// The factor a dictionary of `dictionary_size` points is rebuilt with when its cap is
// `max_dictionary_size`: coarser than `current` once it is full, 0 while it has room (or a cap
// of 0: none) and when `current` is the coarsest already. The model and the simulator both
// coarsen at this point (FitScheduler, sim's InlineRefitter).
inline double CoarseningFactorFor(int64_t dictionary_size, int64_t max_dictionary_size,
                                  double current) {
  if (max_dictionary_size <= 0 || dictionary_size < max_dictionary_size) return 0.0;
  return CoarserKorsMuFactor(current);
}

// Above this many joint input dimensions, length-scales are fitted per group (context, arm
// features) rather than per dimension.
inline constexpr int kMaxPerDimensionLengthscales = 32;

// Bounds of the schedule and of one fit's cost (RefitOptions::Validate): a fit of n points holds
// about 14 n^2 doubles (440 MB at 2,000) and costs O(n^3) per likelihood evaluation.
inline constexpr double kMaxRefitGrowth = 100.0;
inline constexpr int kMaxRefitPoints = 2000;
inline constexpr int kMaxRefitEvaluations = 10000;
inline constexpr double kMaxSecondsBetweenFits = 86400.0;
// The configuration's default of min_seconds_between_fits (proto/model_config.cc).
inline constexpr double kServedMinSecondsBetweenFits = 30.0;
// The configuration's default of fit_cpu_share (proto/model_config.cc).
inline constexpr double kServedFitCpuShare = 0.25;

// RefitOptions::min_points_per_parameter's default.
inline constexpr int kMinPointsPerParameter = 10;

struct RefitOptions {
  bool enabled = false;
  // Free parameters (false: the configured value is kept).
  bool fit_signal_variance = true;
  bool fit_offset_variance = true;
  bool fit_linear_variance = true;
  bool fit_user_variance = true;
  bool fit_context_lengthscale = true;
  bool fit_arm_lengthscale = true;
  bool fit_noise_variance = true;
  bool fit_rho = true;  // only with the Green's function user kernel
  // The community part's variance w (Hyperparameters::community_variance): only with the
  // Green's function user kernel and user_kernel.community_dims > 0; else w stays 0.
  bool fit_community_variance = true;
  bool fit_prior_mean = true;
  // One length-scale per input dimension (up to kMaxPerDimensionLengthscales dimensions).
  bool per_dimension = true;
  int64_t first_fit = 32;
  double growth = 1.5;
  int64_t max_interval = 4000;
  int max_points = 800;
  int max_evaluations = 80;
  // A fit waits until it has this many observations per free parameter, or max_points (FitSpec):
  // with fewer, maximising the likelihood over a dozen parameters fits the noise of a few dozen
  // rewards (seen: per-dimension length-scales that made unrelated arms look alike, after which
  // the policy kept one arm for good). Until there are enough for a length-scale per dimension,
  // a per-dimension fit uses one per input kind (FitSpec::coarse_lengthscale_group), which needs
  // fewer: waiting for the full count kept the start values in service for hundreds of rewards
  // and cost regret on most simulated tasks (docs/results.md). Not in the configuration.
  int min_points_per_parameter = kMinPointsPerParameter;
  double min_change = 0.05;
  // Fitted values replace the current ones only when, on the fit's own observations, they
  // raise the log likelihood by at least this many nats per free parameter (FitImproves).
  double min_gain_per_parameter = 1.0;
  // KORS mu = this factor times the noise variance in use (unless nystrom.kors_mu fixes mu): the
  // starting factor, which a coarsening doubles. Not in the configuration (the simulator's
  // robustness-sensitivity preset varies it).
  double kors_mu_factor = 1.0;
  // A served model starts a fit at most once per this many seconds of wall-clock time, however
  // fast rewards arrive (FitScheduler): a fit costs seconds of CPU, and at thousands of rewards
  // per second the reward-count schedule alone would keep one running all the time. Not
  // applied while the model is young (no fit applied, fewer than max_interval rewards). 0: no
  // bound (the simulator, which has no clock, always schedules by rewards alone).
  double min_seconds_between = 0.0;
  // About this share of one core's wall-clock time goes to a running fit: after each
  // likelihood evaluation the optimiser asks for, the fit pauses for (1 / cpu_share - 1) times
  // that evaluation's duration, at most kMaxFitPause (FitWorker). The set-up and the
  // evaluations at the start and end of a fit are not followed by a pause. The fit thread already
  // yields the CPU to every other thread (SetThreadBackground), but not what it shares with them
  // while it runs: caches, memory bandwidth, a hyper-threaded or oversubscribed host core (measured
  // on a 2-vCPU VM: scoring 16% slower while any other process ran on the second vCPU). 1: no pause
  // (the simulator).
  double cpu_share = 1.0;

  absl::Status Validate() const;
};

// The rewards learned at which the fit after one at `at` is due.
int64_t NextFitAfter(int64_t at, const RefitOptions& options);

// What a model's kernel is built from besides the hyper-parameters.
struct KernelShape {
  KernelType kernel = KernelType::kRbf;
  UserKernelOptions user_kernel;
  int context_dim = 0;
  int arm_dim = 0;
  // KORS's mu when the configuration sets it (nystrom.kors_mu); 0: mu follows the noise
  // variance in use (KorsMu).
  double fixed_kors_mu = 0.0;
};

// KORS's mu for a Nystrom learner: the configured value if any, else kors_mu_factor times the
// noise variance in use (EK paper, docs/algorithms.md §4.8: mu = lambda). The one rule for building
// and for refitting.
inline double KorsMu(double fixed_kors_mu, double kors_mu_factor, double noise_variance) {
  return fixed_kors_mu > 0.0 ? fixed_kors_mu : kors_mu_factor * noise_variance;
}

// The fit's parameterisation for this shape and these options.
FitSpec MakeFitSpec(const RefitOptions& options, const KernelShape& shape);

// The names of the parameters a model does not fit (HyperparameterConfig): every one when
// `fits` is false, else those the configuration or the kernel's shape hold fixed. Derived from
// MakeFitSpec, so that what is reported is what fits do.
std::vector<std::string> FixedHyperparameterNames(const RefitOptions& options, bool fits,
                                                  const KernelShape& shape);

// The values a model starts with: its configuration.
Hyperparameters InitialHyperparameters(const KernelShape& shape, double signal_variance,
                                       const FeatureScaling& scaling, double noise_variance);

// Up to max_points of the learner's retained observations, spread evenly over its history
// (SpreadIndices in core/learner/posterior.h), with raw inputs (stored points times the current
// length-scales).
FitData SpreadRawObservations(const Learner& learner, const FeatureScaling& scaling,
                              int max_points);

// Whether a fit's values should replace the current ones: they explain the fit's observations
// better than the current values by at least min_gain_per_parameter nats per free parameter.
// Maximising over k parameters gains k/2 nats on average by chance alone (twice the gain is
// chi-square with k degrees of freedom when the current values are right), so 1 nat per
// parameter (Akaike's penalty; between the 95% and 99% points of that test for 8 to 15
// parameters) keeps a model from hopping between near-equal optima of the likelihood from one
// fit to the next, while values that the data clearly reject are still replaced.
bool FitImproves(const FitResult& fit, const RefitOptions& options);

// True when some value changed by more than `min_change` relative to the old one (on the log
// scale for positive values; the prior mean relative to the noise's standard deviation).
bool MateriallyDifferent(const Hyperparameters& old_values, const Hyperparameters& new_values,
                         double min_change);

// Whether a finished fit replaces `in_use`: it improves on them (FitImproves) and moves them
// materially (MateriallyDifferent with options.min_change). The one judgement of a fit, for the
// model (FitScheduler) and the simulator (InlineRefitter).
inline bool FitWorthApplying(const FitResult& fit, const Hyperparameters& in_use,
                             const RefitOptions& options) {
  return FitImproves(fit, options) && MateriallyDifferent(in_use, fit.values, options.min_change);
}

// The FitUsers for a fit of a model with this graph and user kernel.
FitUsers MakeFitUsers(const KernelShape& shape, const RefitOptions& options, const UserGraph& graph,
                      std::shared_ptr<const UserKernel> current);

// What switching to `values` takes: the learner's refit (rescale from `scaling`'s length-scales
// to the new ones), and the scaling and user kernel (built for values.rho when it is the
// Green's function) the model uses with it.
struct PreparedRefit {
  LearnerRefit refit;
  FeatureScaling scaling;
  std::shared_ptr<const UserKernel> user_kernel;
};
absl::StatusOr<PreparedRefit> PrepareHyperparameters(
    const Hyperparameters& values, const KernelShape& shape, double kors_mu_factor,
    const UserGraph& graph, const FeatureScaling& scaling,
    const std::shared_ptr<const UserKernel>& user_kernel);

// Switches `learner` (and the model's `scaling` and `user_kernel`) to `values`: builds the user
// kernel for values.rho when it is the Green's function, rescales, and calls Learner::Refit.
// On failure nothing the caller holds is changed except the learner, which must then be
// discarded (a refit can only fail on invalid values or a numerical breakdown).
absl::Status ApplyHyperparameters(const Hyperparameters& values, const KernelShape& shape,
                                  double kors_mu_factor, const UserGraph& graph,
                                  FeatureScaling* scaling,
                                  std::shared_ptr<const UserKernel>* user_kernel, Learner* learner);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FIT_REFIT_H_
