#include "core/fit/hyperparameter_fit.h"

#include <nlopt.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/fit/marginal_likelihood.h"

namespace graphbandit {
namespace {

using fit_internal::CheckStart;
using fit_internal::CommunityIndex;
using fit_internal::EtaIndex;
using fit_internal::FromFull;
using fit_internal::FullSize;
using fit_internal::kFirstLengthscale;
using fit_internal::kLinear;
using fit_internal::kOffset;
using fit_internal::kSignal;
using fit_internal::Layout;
using fit_internal::Likelihood;
using fit_internal::NoiseIndex;
using fit_internal::RhoIndex;
using fit_internal::ToFull;

struct Problem {
  Likelihood* likelihood;
  const FitSpec* spec;
  Layout layout;
  Eigen::VectorXd base;    // full log-space vector: fixed parameters come from here
  Eigen::VectorXd centre;  // prior centres (full layout)
  double prior_precision;  // 1 / sd^2 of the log-normal prior
  int evaluations = 0;
  // The best point evaluated so far (objective and free values), whatever the optimiser
  // reports in the end: L-BFGS can stop with a generic failure after a line search meets a
  // region where the kernel matrix is numerically singular.
  double best_objective = INFINITY;
  std::vector<double> best_x = {};
  nlopt_opt opt = nullptr;  // the running optimiser, for cancellation
  bool cancelled = false;
};

double Objective(unsigned n, const double* x, double* grad, void* data) {
  Problem& p = *static_cast<Problem*>(data);
  ++p.evaluations;
  if (p.spec->cancel != nullptr && p.spec->cancel->load(std::memory_order_relaxed)) {
    p.cancelled = true;
    if (p.opt != nullptr) nlopt_force_stop(p.opt);
    if (grad != nullptr) std::fill(grad, grad + n, 0.0);
    return 0.0;
  }
  Eigen::VectorXd full = p.base;
  for (unsigned k = 0; k < n; ++k) full(p.layout.free[k]) = x[k];
  Hyperparameters h;
  FromFull(full, *p.spec, &h);
  Eigen::VectorXd gradient;
  const auto started = std::chrono::steady_clock::now();
  absl::StatusOr<double> value =
      p.likelihood->Evaluate(h, grad != nullptr ? &gradient : nullptr, nullptr);
  if (p.spec->after_evaluation) {
    p.spec->after_evaluation(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  const double scale = 1.0 / p.likelihood->n();
  if (!value.ok() || !std::isfinite(*value)) {
    if (grad != nullptr) std::fill(grad, grad + n, 0.0);
    return std::numeric_limits<double>::max() / 4;
  }
  double objective = -*value;
  for (unsigned k = 0; k < n; ++k) {
    const int i = p.layout.free[k];
    const double offset = x[k] - p.centre(i);
    objective += 0.5 * p.prior_precision * offset * offset;
    if (grad != nullptr) grad[k] = scale * (-gradient(i) + p.prior_precision * offset);
  }
  objective *= scale;
  if (objective < p.best_objective) {
    p.best_objective = objective;
    p.best_x.assign(x, x + n);
  }
  return objective;
}

}  // namespace

bool Hyperparameters::InRange(int dim) const {
  auto positive = [](double v) { return v > 0.0 && std::isfinite(v); };
  auto non_negative = [](double v) { return v >= 0.0 && std::isfinite(v); };
  return (dim < 0 || lengthscales.size() == dim) && (lengthscales.array() > 0.0).all() &&
         lengthscales.allFinite() && positive(signal_variance) && non_negative(offset_variance) &&
         non_negative(linear_variance) && non_negative(user_variance) &&
         non_negative(community_variance) && positive(noise_variance) && positive(rho) &&
         std::isfinite(prior_mean);
}

std::string Hyperparameters::DebugString() const {
  std::vector<std::string> l;
  for (Eigen::Index i = 0; i < lengthscales.size(); ++i) {
    l.push_back(absl::StrFormat("%.4g", lengthscales(i)));
  }
  return absl::StrFormat(
      "variance=%.4g offset=%.4g linear=%.4g user=%.4g community=%.4g lengthscales=[%s] "
      "noise=%.4g rho=%.4g mean=%.4g",
      signal_variance, offset_variance, linear_variance, user_variance, community_variance,
      absl::StrJoin(l, ","), noise_variance, rho, prior_mean);
}

namespace {

// The free parameters of a fit with `spec` and `layout` (a profiled prior mean counts as one).
int FreeParameters(const Layout& layout, const FitSpec& spec) {
  return static_cast<int>(layout.free.size()) + (spec.fit_prior_mean ? 1 : 0);
}
int FreeParameters(const FitSpec& spec, const FitUsers& users) {
  const bool laplacian = users.graph != nullptr;
  return FreeParameters(Layout::Of(spec, laplacian, laplacian && spec.community_dims > 0), spec);
}

// The observations a fit of this many free parameters waits for
// (FitSpec::min_points_per_parameter, at most max_points).
int64_t PointsNeeded(int free_parameters, const FitSpec& spec) {
  int64_t needed = static_cast<int64_t>(spec.min_points_per_parameter) * free_parameters;
  if (spec.max_points > 0) needed = std::min<int64_t>(needed, spec.max_points);
  return needed;
}

// Whether the dimensions of each group have one and the same length-scale.
bool SharedWithinGroups(const Eigen::VectorXd& lengthscales, const std::vector<int>& group) {
  if (lengthscales.size() != static_cast<Eigen::Index>(group.size())) return false;
  std::vector<int> first(group.size(), -1);  // a group's first dimension
  for (size_t d = 0; d < group.size(); ++d) {
    const int g = group[d];
    if (g < 0 || g >= static_cast<int>(group.size())) return false;
    if (first[g] < 0) {
      first[g] = static_cast<int>(d);
    } else if (lengthscales(first[g]) != lengthscales(static_cast<Eigen::Index>(d))) {
      return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<FitResult> FitHyperparameters(const FitData& data, const FitUsers& users,
                                             const Hyperparameters& start, const FitSpec& spec) {
  const auto started = std::chrono::steady_clock::now();
  const int dim = static_cast<int>(data.x.rows());
  if (absl::Status s = CheckStart(start, dim); !s.ok()) return s;
  const int n = static_cast<int>(data.y.size());
  if (n < 2) return absl::FailedPreconditionError("a fit needs at least 2 observations");
  if (!spec.coarse_lengthscale_group.empty() &&
      n < PointsNeeded(FreeParameters(spec, users), spec) &&
      SharedWithinGroups(start.lengthscales, spec.coarse_lengthscale_group)) {
    // Too few for a length-scale per dimension: one per group of the coarser grouping, decided
    // before any work on the data. Only when the values in use have one length-scale per group
    // (the start values, or those of an earlier such fit), so that the fit starts from, and
    // judges its gain against, exactly the values in use.
    FitSpec coarse = spec;
    coarse.lengthscale_group = std::move(coarse.coarse_lengthscale_group);
    coarse.fit_lengthscale = std::move(coarse.coarse_fit_lengthscale);
    coarse.coarse_lengthscale_group.clear();
    coarse.coarse_fit_lengthscale.clear();
    return FitHyperparameters(data, users, start, coarse);
  }
  Likelihood likelihood;
  if (absl::Status s = likelihood.Init(data, users, spec); !s.ok()) return s;
  const double y_mean = data.y.mean();
  const double y_variance = (data.y.array() - y_mean).square().mean();
  if (!(y_variance > 1e-300)) {
    return absl::FailedPreconditionError("the rewards have no variance: nothing to fit");
  }
  // Observations at a single input (a policy that has only ever shown one arm) say nothing
  // about how the reward varies with the input: the likelihood would shrink the signal
  // variance towards 0 and the model would stop exploring. Inputs that differ by round-off
  // only (the history is stored divided by the length-scales in use) count as one.
  bool distinct_inputs = false;
  const double same = 1e-9 * (1.0 + data.x.col(0).norm());
  for (int i = 1; i < n && !distinct_inputs; ++i) {
    distinct_inputs = (data.x.col(i) - data.x.col(0)).norm() > same;
  }
  if (!distinct_inputs) {
    return absl::FailedPreconditionError("every observation is at the same input: nothing to fit");
  }

  // Data-derived centres and bounds (log space, full layout).
  const int groups = spec.groups();
  Eigen::MatrixXd g_start;
  if (absl::Status s = likelihood.users().Evaluate(start.rho, &g_start, nullptr); !s.ok()) return s;
  double g_diagonal = 0.0;
  for (int slot : likelihood.users().slot_of()) g_diagonal += g_start(slot, slot);
  g_diagonal = std::max(g_diagonal / n, 1e-300);
  // A group's typical scale: the root-mean-square distance between two inputs (norm of one
  // input for the linear kernel). Not a median: a bandit repeats the arm it prefers, so most
  // pairs can differ by nothing in an arm dimension, and the median distance is then 0 (or
  // round-off), which would put every bound of that length-scale near 0.
  std::vector<double> typical(groups, 1.0);
  for (int g = 0; g < groups; ++g) {
    const double mean_square = likelihood.TypicalSquare(g);
    if (mean_square > 0.0 && std::isfinite(mean_square)) typical[g] = std::sqrt(mean_square);
  }
  const Layout layout =
      Layout::Of(spec, likelihood.users().laplacian(), likelihood.users().community());
  Eigen::VectorXd centre(layout.full_size()), lower(layout.full_size()), upper(layout.full_size());
  const double signal_scale = y_variance / g_diagonal;
  centre(kSignal) = std::log(0.5 * signal_scale);
  lower(kSignal) = std::log(1e-4 * signal_scale);
  upper(kSignal) = std::log(1e4 * signal_scale);
  centre(kOffset) = std::log(0.1 * signal_scale);
  lower(kOffset) = std::log(1e-8 * signal_scale);
  upper(kOffset) = std::log(1e3 * signal_scale);
  // The linear part's scale relative to <x/l, x'/l>, whose typical size is the number of inputs
  // over the typical scaled distance.
  centre(kLinear) = std::log(0.1 * signal_scale / std::max(1, dim));
  lower(kLinear) = std::log(1e-8 * signal_scale / std::max(1, dim));
  upper(kLinear) = std::log(1e3 * signal_scale);
  for (int g = 0; g < groups; ++g) {
    centre(kFirstLengthscale + g) = std::log(typical[g]);
    lower(kFirstLengthscale + g) = std::log(1e-2 * typical[g]);
    upper(kFirstLengthscale + g) = std::log(1e2 * typical[g]);
  }
  centre(NoiseIndex(groups)) = std::log(0.5 * y_variance);
  lower(NoiseIndex(groups)) = std::log(1e-6 * y_variance);
  upper(NoiseIndex(groups)) = std::log(1e2 * y_variance);
  centre(RhoIndex(groups)) = std::log(0.1);
  lower(RhoIndex(groups)) = std::log(1e-4);
  upper(RhoIndex(groups)) = std::log(1e4);
  // eta relative to the graph part's typical diagonal.
  centre(EtaIndex(groups)) = std::log(0.1 * g_diagonal);
  lower(EtaIndex(groups)) = std::log(1e-8 * g_diagonal);
  upper(EtaIndex(groups)) = std::log(1e3 * g_diagonal);
  // w too (S has a unit diagonal).
  centre(CommunityIndex(groups)) = std::log(g_diagonal);
  lower(CommunityIndex(groups)) = std::log(1e-8 * g_diagonal);
  upper(CommunityIndex(groups)) = std::log(1e3 * g_diagonal);

  Problem problem{&likelihood,         &spec,  layout,
                  ToFull(start, spec), centre, 1.0 / (spec.prior_log_sd * spec.prior_log_sd)};
  FitResult result;
  result.points = n;
  result.free_parameters = FreeParameters(layout, spec);
  const int64_t needed = PointsNeeded(result.free_parameters, spec);
  if (n < needed) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%d observations are too few to fit %d parameters (%d needed)", n,
                        result.free_parameters, needed));
  }
  {
    // The values in use as they are, prior mean included: a fit that mainly corrects a stale
    // prior mean explains the data better than they do.
    absl::StatusOr<double> at_start =
        likelihood.Evaluate(start, nullptr, nullptr, /*at_own_mean=*/true);
    result.log_likelihood_start = at_start.ok() ? *at_start / n : -INFINITY;
  }

  const unsigned free = static_cast<unsigned>(layout.free.size());
  Hyperparameters best = start;
  if (free > 0) {
    std::vector<double> lb(free), ub(free);
    for (unsigned k = 0; k < free; ++k) {
      lb[k] = lower(layout.free[k]);
      ub[k] = upper(layout.free[k]);
    }
    // Two starts: where the model is now, and the data-derived centres.
    std::vector<std::vector<double>> starts(2, std::vector<double>(free));
    for (unsigned k = 0; k < free; ++k) {
      starts[0][k] = std::clamp(problem.base(layout.free[k]), lb[k], ub[k]);
      starts[1][k] = centre(layout.free[k]);
    }
    for (std::vector<double>& x : starts) {
      nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, free);
      nlopt_set_lower_bounds(opt, lb.data());
      nlopt_set_upper_bounds(opt, ub.data());
      nlopt_set_min_objective(opt, &Objective, &problem);
      nlopt_set_ftol_rel(opt, 1e-5);
      nlopt_set_xtol_rel(opt, 1e-3);
      nlopt_set_maxeval(opt, std::max(1, spec.max_evaluations / 2));
      double value = INFINITY;  // nlopt's final value; the best point seen is kept by Objective
      problem.opt = opt;
      nlopt_optimize(opt, x.data(), &value);
      problem.opt = nullptr;
      nlopt_destroy(opt);
      if (problem.cancelled) return absl::CancelledError("the fit was cancelled");
    }
    // Objective records only evaluations that succeeded.
    if (!std::isfinite(problem.best_objective)) {
      return absl::InternalError("the likelihood could not be evaluated at any point tried");
    }
    Eigen::VectorXd full = problem.base;
    for (unsigned k = 0; k < free; ++k) full(layout.free[k]) = problem.best_x[k];
    FromFull(full, spec, &best);
  }
  // Fixed parameters keep their exact start values (the log/exp round trip is not exact).
  if (!spec.fit_signal_variance) best.signal_variance = start.signal_variance;
  if (!spec.fit_offset_variance) best.offset_variance = start.offset_variance;
  if (!spec.fit_linear_variance || spec.kernel == KernelType::kLinear) {
    best.linear_variance = start.linear_variance;
  }
  if (!spec.fit_user_variance) best.user_variance = start.user_variance;
  if (!(spec.fit_community_variance && likelihood.users().community())) {
    best.community_variance = start.community_variance;
  }
  for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
    if (!spec.fit_lengthscale[spec.lengthscale_group[d]])
      best.lengthscales(d) = start.lengthscales(d);
  }
  if (!spec.fit_noise_variance) best.noise_variance = start.noise_variance;
  if (!(spec.fit_rho && likelihood.users().laplacian())) best.rho = start.rho;
  double mean = start.prior_mean;
  absl::StatusOr<double> fitted = likelihood.Evaluate(best, nullptr, &mean);
  if (!fitted.ok()) return fitted.status();
  best.prior_mean = spec.fit_prior_mean ? mean : start.prior_mean;
  result.values = best;
  result.log_likelihood = *fitted / n;
  result.evaluations = problem.evaluations;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace graphbandit
