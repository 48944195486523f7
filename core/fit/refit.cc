#include "core/fit/refit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace graphbandit {

// Messages name the configuration's fields (HyperparameterConfig); ValidateModelOptions adds
// the model and the "hyperparameters." prefix.
absl::Status RefitOptions::Validate() const {
  auto bad = [](absl::string_view what) { return absl::InvalidArgumentError(what); };
  if (first_fit < 2) return bad(absl::StrFormat("first_fit must be at least 2, got %d", first_fit));
  if (!(growth > 1.0 && growth <= kMaxRefitGrowth)) {
    return bad(absl::StrFormat("growth must lie in (1, %g], got %g", kMaxRefitGrowth, growth));
  }
  if (max_interval < 1) {
    return bad(absl::StrFormat("max_interval must be at least 1, got %d", max_interval));
  }
  if (max_points < 2 || max_points > kMaxRefitPoints) {
    return bad(absl::StrFormat(
        "max_points must lie in 2..%d (a fit holds about 14 x max_points^2 doubles), got %d",
        kMaxRefitPoints, max_points));
  }
  if (max_evaluations < 1 || max_evaluations > kMaxRefitEvaluations) {
    return bad(absl::StrFormat("max_evaluations must lie in 1..%d, got %d", kMaxRefitEvaluations,
                               max_evaluations));
  }
  if (!(min_change >= 0.0) || !std::isfinite(min_change)) {
    return bad(absl::StrFormat("min_change must be a finite number >= 0, got %g", min_change));
  }
  if (!(min_gain_per_parameter >= 0.0) || !std::isfinite(min_gain_per_parameter)) {
    return bad(absl::StrFormat("min_gain_per_parameter must be a finite number >= 0, got %g",
                               min_gain_per_parameter));
  }
  if (!(kors_mu_factor > 0.0) || !std::isfinite(kors_mu_factor)) {
    return bad(
        absl::StrFormat("kors_mu_factor must be a finite number > 0, got %g", kors_mu_factor));
  }
  if (!(min_seconds_between >= 0.0) || !(min_seconds_between <= kMaxSecondsBetweenFits)) {
    return bad(absl::StrFormat("min_seconds_between_fits must lie in [0, %g], got %g",
                               kMaxSecondsBetweenFits, min_seconds_between));
  }
  if (!(cpu_share > 0.0) || !(cpu_share <= 1.0)) {
    return bad(absl::StrFormat("fit_cpu_share must lie in (0, 1], got %g", cpu_share));
  }
  return absl::OkStatus();
}

int64_t NextFitAfter(int64_t at, const RefitOptions& options) {
  if (at < options.first_fit) return options.first_fit;
  const int64_t capped = at + options.max_interval;
  const double grown = std::ceil(static_cast<double>(at) * options.growth);
  // Compared as doubles first: the grown count may not fit in an integer.
  return grown >= static_cast<double>(capped) ? capped : static_cast<int64_t>(grown);
}

FitSpec MakeFitSpec(const RefitOptions& options, const KernelShape& shape) {
  FitSpec spec;
  spec.min_points_per_parameter = options.min_points_per_parameter;
  spec.max_points = options.max_points;
  spec.kernel = shape.kernel;
  const int dim = shape.context_dim + shape.arm_dim;
  const bool per_dimension = options.per_dimension && dim <= kMaxPerDimensionLengthscales;
  // The linear kernel's overall length-scale only rescales its variance: fit it only per
  // dimension (relative relevance), never as one shared value.
  const bool linear = shape.kernel == KernelType::kLinear;
  // One length-scale for the context and one for the arm features.
  auto grouped = [&shape, &options, dim, linear](std::vector<int>* group, std::vector<bool>* fit) {
    group->assign(dim, -1);
    fit->clear();
    int groups = 0;
    const int context_group = shape.context_dim > 0 ? groups++ : -1;
    const int arm_group = shape.arm_dim > 0 ? groups++ : -1;
    for (int d = 0; d < dim; ++d) (*group)[d] = d < shape.context_dim ? context_group : arm_group;
    if (context_group >= 0) fit->push_back(options.fit_context_lengthscale && !linear);
    if (arm_group >= 0) fit->push_back(options.fit_arm_lengthscale && !linear);
  };
  if (per_dimension) {
    spec.lengthscale_group.resize(dim);
    for (int d = 0; d < dim; ++d) {
      spec.lengthscale_group[d] = d;
      spec.fit_lengthscale.push_back(d < shape.context_dim ? options.fit_context_lengthscale
                                                           : options.fit_arm_lengthscale);
    }
    // Too few observations for a length-scale per dimension: the fit falls back to these (when
    // they are fewer).
    grouped(&spec.coarse_lengthscale_group, &spec.coarse_fit_lengthscale);
    if (spec.coarse_fit_lengthscale.size() == spec.fit_lengthscale.size()) {
      spec.coarse_lengthscale_group.clear();
      spec.coarse_fit_lengthscale.clear();
    }
  } else {
    grouped(&spec.lengthscale_group, &spec.fit_lengthscale);
  }
  spec.fit_signal_variance = options.fit_signal_variance;
  spec.fit_offset_variance = options.fit_offset_variance;
  spec.fit_linear_variance = options.fit_linear_variance && !linear;
  spec.fit_user_variance = options.fit_user_variance;
  spec.fit_noise_variance = options.fit_noise_variance;
  const bool green = shape.user_kernel.kind == UserKernelKind::kLaplacianInverse;
  spec.fit_rho = options.fit_rho && green;
  spec.fit_community_variance =
      options.fit_community_variance && green && shape.user_kernel.community_dims > 0;
  spec.community_dims = spec.fit_community_variance ? shape.user_kernel.community_dims : 0;
  spec.fit_prior_mean = options.fit_prior_mean;
  spec.max_evaluations = options.max_evaluations;
  spec.cpu_share = options.cpu_share;
  return spec;
}

std::vector<std::string> FixedHyperparameterNames(const RefitOptions& options, bool fits,
                                                  const KernelShape& shape) {
  const FitSpec spec = MakeFitSpec(options, shape);
  // A length-scale kind is fitted when any of its dimensions is. Before the model's first
  // request fixes the dimensions, as it would be once they are: the linear kernel fits a
  // length-scale only per dimension (shared, it only rescales the variance).
  const bool linear = shape.kernel == KernelType::kLinear;
  auto lengthscales_fitted = [&spec, &options, linear](int begin, int end, bool option) {
    if (begin >= end) return option && (options.per_dimension || !linear);
    for (int d = begin; d < end; ++d) {
      if (spec.fit_lengthscale[spec.lengthscale_group[d]]) return true;
    }
    return false;
  };
  const int dim = shape.context_dim + shape.arm_dim;
  std::vector<std::string> fixed;
  for (auto [name, free] :
       {std::pair<const char*, bool>{"signal_variance", spec.fit_signal_variance},
        {"offset_variance", spec.fit_offset_variance},
        {"linear_variance", spec.fit_linear_variance},
        {"user_variance", spec.fit_user_variance},
        {"context_lengthscale",
         lengthscales_fitted(0, shape.context_dim, options.fit_context_lengthscale)},
        {"arm_lengthscale",
         lengthscales_fitted(shape.context_dim, dim, options.fit_arm_lengthscale)},
        {"noise_variance", spec.fit_noise_variance},
        {"rho", spec.fit_rho},
        {"community_variance", spec.fit_community_variance},
        {"prior_mean", spec.fit_prior_mean}}) {
    if (!fits || !free) fixed.push_back(name);
  }
  return fixed;
}

Hyperparameters InitialHyperparameters(const KernelShape& shape, double signal_variance,
                                       const FeatureScaling& scaling, double noise_variance) {
  Hyperparameters h;
  h.signal_variance = signal_variance;
  h.offset_variance = 0.0;
  h.lengthscales = scaling.lengthscales();
  h.noise_variance = noise_variance;
  h.rho = shape.user_kernel.rho;
  h.prior_mean = 0.0;
  return h;
}

FitData SpreadRawObservations(const Learner& learner, const FeatureScaling& scaling,
                              int max_points) {
  FitData data = learner.SpreadObservations(max_points);
  if (data.x.rows() == scaling.joint_dim() && data.x.cols() > 0) {
    data.x.array().colwise() *= scaling.lengthscales().array();
  }
  return data;
}

bool FitImproves(const FitResult& fit, const RefitOptions& options) {
  const double gain = (fit.log_likelihood - fit.log_likelihood_start) * fit.points;
  if (!std::isfinite(fit.log_likelihood_start)) return std::isfinite(fit.log_likelihood);
  return gain >= options.min_gain_per_parameter * fit.free_parameters;
}

bool MateriallyDifferent(const Hyperparameters& a, const Hyperparameters& b, double min_change) {
  auto moved = [min_change](double x, double y) {
    if (x == y) return false;
    if (!(x > 0.0) || !(y > 0.0)) return true;
    return std::abs(std::log(y / x)) > min_change;
  };
  if (moved(a.signal_variance, b.signal_variance) || moved(a.noise_variance, b.noise_variance) ||
      moved(a.rho, b.rho)) {
    return true;
  }
  // The offset matters only relative to the signal variance.
  const double scale = std::max(a.signal_variance, b.signal_variance);
  if (std::abs(a.offset_variance - b.offset_variance) > min_change * scale ||
      std::abs(a.linear_variance - b.linear_variance) > min_change * scale) {
    return true;
  }
  // The per-user and community parts matter relative to the graph part (of order 1 / rho at
  // most).
  const double graph_scale = 1.0 / std::max(a.rho, b.rho);
  if (std::abs(a.user_variance - b.user_variance) >
          min_change * std::max({a.user_variance, b.user_variance, graph_scale}) ||
      std::abs(a.community_variance - b.community_variance) >
          min_change * std::max({a.community_variance, b.community_variance, graph_scale})) {
    return true;
  }
  if (a.lengthscales.size() != b.lengthscales.size()) return true;
  for (Eigen::Index i = 0; i < a.lengthscales.size(); ++i) {
    if (moved(a.lengthscales(i), b.lengthscales(i))) return true;
  }
  const double noise_sd = std::sqrt(std::max(a.noise_variance, b.noise_variance));
  return std::abs(a.prior_mean - b.prior_mean) > min_change * noise_sd;
}

FitUsers MakeFitUsers(const KernelShape& shape, const RefitOptions& options, const UserGraph& graph,
                      std::shared_ptr<const UserKernel> current) {
  FitUsers users;
  const FitSpec spec = MakeFitSpec(options, shape);
  if (spec.fit_rho || spec.fit_community_variance) {
    users.graph = &graph;
  } else {
    users.fixed = std::move(current);
  }
  return users;
}

absl::StatusOr<PreparedRefit> PrepareHyperparameters(
    const Hyperparameters& values, const KernelShape& shape, double kors_mu_factor,
    const UserGraph& graph, const FeatureScaling& scaling,
    const std::shared_ptr<const UserKernel>& user_kernel) {
  if (!values.InRange(scaling.joint_dim())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hyper-parameters out of range: %s", values.DebugString()));
  }
  PreparedRefit out;
  out.user_kernel = user_kernel;
  if (shape.user_kernel.kind == UserKernelKind::kLaplacianInverse) {
    UserKernelOptions options = shape.user_kernel;
    options.rho = values.rho;
    options.community_variance = values.community_variance;
    auto built = BuildUserKernel(graph, options);
    if (!built.ok()) return built.status();
    out.user_kernel = *std::move(built);
  }
  LearnerRefit& refit = out.refit;
  refit.arm = ArmKernel(shape.kernel, values.signal_variance, values.offset_variance,
                        values.linear_variance);
  refit.users = out.user_kernel;
  refit.user_variance = values.user_variance;
  refit.ridge = values.noise_variance;
  refit.kors_mu = KorsMu(shape.fixed_kors_mu, kors_mu_factor, values.noise_variance);
  refit.prior_mean = values.prior_mean;
  refit.rescale = scaling.lengthscales().cwiseQuotient(values.lengthscales);
  out.scaling = scaling;
  out.scaling.per_dimension = values.lengthscales;
  return out;
}

absl::Status ApplyHyperparameters(const Hyperparameters& values, const KernelShape& shape,
                                  double kors_mu_factor, const UserGraph& graph,
                                  FeatureScaling* scaling,
                                  std::shared_ptr<const UserKernel>* user_kernel,
                                  Learner* learner) {
  auto prepared =
      PrepareHyperparameters(values, shape, kors_mu_factor, graph, *scaling, *user_kernel);
  if (!prepared.ok()) return prepared.status();
  if (absl::Status s = learner->Refit(prepared->refit); !s.ok()) return s;
  *scaling = std::move(prepared->scaling);
  *user_kernel = std::move(prepared->user_kernel);
  return absl::OkStatus();
}

}  // namespace graphbandit
