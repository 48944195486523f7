#include "sim/policy_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/random.h"
#include "core/learner/learner_factory.h"
#include "core/learner/lk_gp_posterior.h"

namespace graphbandit::sim {

InlineRefitter::InlineRefitter(const RefitOptions& options, const KernelShape& shape,
                               const Hyperparameters& initial,
                               std::shared_ptr<const UserGraph> graph,
                               std::shared_ptr<const UserKernel> user_kernel,
                               int max_dictionary_size)
    : options_(options),
      shape_(shape),
      spec_(MakeFitSpec(options, shape)),
      values_(initial),
      graph_(std::move(graph)),
      user_kernel_(std::move(user_kernel)),
      max_dictionary_size_(max_dictionary_size),
      kors_mu_factor_(options.kors_mu_factor),
      next_fit_(NextFitAfter(0, options)) {}

absl::Status InlineRefitter::AfterObservation(Learner* learner, FeatureScaling* scaling) {
  ++learned_;
  if (const double coarser =
          CoarseningFactorFor(learner->dictionary_size(), max_dictionary_size_, kors_mu_factor_);
      coarser > 0.0) {
    if (absl::Status s = ApplyHyperparameters(values_, shape_, coarser, *graph_, scaling,
                                              &user_kernel_, learner);
        !s.ok()) {
      return s;
    }
    kors_mu_factor_ = coarser;
  }
  if (learned_ < next_fit_) return absl::OkStatus();
  next_fit_ = NextFitAfter(learned_, options_);
  const FitData data = SpreadRawObservations(*learner, *scaling, options_.max_points);
  auto fit = FitHyperparameters(data, MakeFitUsers(shape_, options_, *graph_, user_kernel_),
                                values_, spec_);
  if (!fit.ok()) {
    // Nothing to fit yet (e.g. every reward equal) or no point of the likelihood could be
    // evaluated: keep the values and say so, as the server does (core/model/fit_scheduler.cc,
    // FinishFit).
    if (fit.status().code() != absl::StatusCode::kFailedPrecondition) {
      absl::FPrintF(stderr,
                    "graphbandit-sim: hyper-parameter fit at reward %d failed (%s); "
                    "the values in use are kept\n",
                    learned_, fit.status().message());
    }
    return absl::OkStatus();
  }
  if (!FitWorthApplying(*fit, values_, options_)) return absl::OkStatus();
  if (absl::Status s = ApplyHyperparameters(fit->values, shape_, kors_mu_factor_, *graph_, scaling,
                                            &user_kernel_, learner);
      !s.ok()) {
    return s;
  }
  values_ = fit->values;
  return absl::OkStatus();
}

double MedianDistance(const Eigen::MatrixXd& points) {
  std::vector<double> distances;
  for (Eigen::Index a = 0; a < points.cols(); ++a) {
    for (Eigen::Index b = a + 1; b < points.cols(); ++b) {
      distances.push_back((points.col(a) - points.col(b)).norm());
    }
  }
  if (distances.empty()) return 1.0;
  std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
  const double median = distances[distances.size() / 2];
  return median > 0.0 ? median : 1.0;
}

std::string SimEventId(int64_t t) { return absl::StrCat("round-", t); }

DecisionRule DecisionRuleOf(const RunPolicy& policy, int64_t rewards_learned) {
  return RuleOf(policy.decision,
                ExplorationWidthOf(policy.decision, *policy.learner, rewards_learned),
                policy.baseline.value());
}

namespace {

// The user graph of a run: the environment's users and edges (one user when pooled).
std::shared_ptr<UserGraph> RunGraph(const SimEnvironment& env, bool pooled) {
  auto graph = std::make_shared<UserGraph>();
  graph->EnsureUsers(pooled ? 1 : env.users());
  if (!pooled) {
    for (const Edge& edge : env.edges()) graph->SetEdge(edge.a, edge.b, edge.weight);
  }
  return graph;
}

// The learner's own randomness (KORS coins, re-draws): per seed, independent of the
// environment's, the same for every policy.
uint64_t LearnerSeed(uint64_t seed) {
  uint64_t mix = seed ^ 0xC0FFEE123456789ULL;
  return SplitMix64(mix);
}

}  // namespace

bool PolicySpec::served() const {
  const ResearchOptions defaults;
  return model.servable() && model.research.growth_batch_divisor == defaults.growth_batch_divisor &&
         model.research.spread_growth_scan == defaults.spread_growth_scan &&
         model.research.batched_min_growth == defaults.batched_min_growth &&
         model.research.batched_bounded == defaults.batched_bounded &&
         model.research.semi_code_gamma == defaults.semi_code_gamma && !pooled && !intercept &&
         !mm_paper_parameters && !median_arm_lengthscale && ridge_from_lambda_base == 0.0 &&
         !run_stream;
}

absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed) {
  // The model's options for this run: what a model with them builds once its dimensions are
  // fixed, plus the environment-dependent settings of the papers' baselines.
  ModelOptions options = spec.model;
  options.seed = LearnerSeed(seed);
  options.context_dim = env.context_dim();
  options.arm_dim = env.arm_dim();
  if (spec.median_arm_lengthscale) {
    options.arm_lengthscale = env.pool() != nullptr ? MedianDistance(*env.pool()) : 1.0;
  }
  const bool lk_gp =
      options.policy == PolicyKind::kLkGpUcb || options.policy == PolicyKind::kLkGpTs;
  // S_spec always comes from the environment's graph, also for policies that ignore it (a
  // pooled one): LK's schedule is the same for every GP-style method.
  if (spec.ridge_from_lambda_base > 0.0 || (lk_gp && options.research.lk.schedule)) {
    UserGraph env_graph;
    env_graph.EnsureUsers(env.users());
    for (const Edge& edge : env.edges()) env_graph.SetEdge(edge.a, edge.b, edge.weight);
    const double spectral_ratio = SpectralRatio(env_graph);
    if (spec.ridge_from_lambda_base > 0.0) {
      options.ridge = options.kors_mu =
          std::clamp(spec.ridge_from_lambda_base * spectral_ratio, options.research.lk.lambda_min,
                     options.research.lk.lambda_max);
    }
    if (lk_gp && options.research.lk.schedule) {
      options.research.lk.spectral_ratio = spectral_ratio;
      options.research.lk.horizon = rounds;
    }
  }
  if (spec.mm_paper_parameters) {
    const std::optional<TrueKernel> truth = env.true_kernel();
    if (!truth.has_value()) {
      return absl::InvalidArgumentError("the environment does not say which kernel it draws from");
    }
    options.kernel = truth->type;
    options.arm_lengthscale = truth->lengthscale;
    const double nu = truth->type == KernelType::kMatern32   ? 1.5
                      : truth->type == KernelType::kMatern52 ? 2.5
                                                             : 0.0;
    const double d = env.arm_dim() + env.context_dim();
    options.confidence.mixture =
        nu > 0.0 ? std::pow(static_cast<double>(rounds), -d / (2.0 * d + 2.0 * nu)) : 1.0;
    options.confidence.igp_eta = 2.0 / static_cast<double>(rounds);
  }
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;

  RunPolicy run;
  run.decision = DecisionSetupOf(options);
  run.baseline = BaselineTracker(options.effective_baseline_half_life());
  run.pooled = spec.pooled;
  // One constant feature, whether the spec adds it (the papers' baselines) or the model does.
  run.intercept = spec.intercept || options.intercept();
  if (!spec.run_stream) run.model_seed = options.seed;
  run.has_dictionary = options.policy == PolicyKind::kEkUcb ||
                       options.policy == PolicyKind::kEkTs ||
                       options.policy == PolicyKind::kBatchedNystromUcb;
  run.scaling = FeatureScaling{options.context_dim, options.arm_dim, options.context_lengthscale,
                               options.arm_lengthscale, Eigen::VectorXd()};
  Hyperparameters values = ConfiguredHyperparameters(options);
  values.lengthscales = run.scaling.lengthscales();
  auto graph = RunGraph(env, spec.pooled);
  auto kernel = BuildUserKernel(*graph, options.user_kernel_options());
  if (!kernel.ok()) return kernel.status();
  auto learner = MakeLearner(options, run.scaling.joint_dim() + (run.intercept ? 1 : 0), *graph,
                             *kernel, &values, options.refit.kors_mu_factor);
  if (!learner.ok()) return learner.status();
  run.learner = *std::move(learner);
  // LK-GP's grid phase needs the environment's pool, as scaled points.
  if (lk_gp && options.research.lk.grid && env.pool() != nullptr) {
    const Eigen::MatrixXd& pool = *env.pool();
    Eigen::MatrixXd points(run.scaling.joint_dim(), pool.cols());
    const Eigen::VectorXd no_context = Eigen::VectorXd::Zero(env.context_dim());
    for (Eigen::Index j = 0; j < pool.cols(); ++j) {
      run.scaling.Apply(no_context.data(), pool.col(j).data(), points.col(j).data());
    }
    auto* lk = dynamic_cast<LkGpPosterior*>(run.learner.get());
    if (absl::Status s = lk->SetPool(points, spec.pooled ? 1 : env.users()); !s.ok()) return s;
  }
  if (options.refits_hyperparameters()) {
    KernelShape shape;
    shape.kernel = options.kernel;
    shape.user_kernel = options.user_kernel_options();
    shape.context_dim = options.context_dim;
    shape.arm_dim = options.arm_dim;
    shape.fixed_kors_mu = options.kors_mu;
    run.refitter = std::make_unique<InlineRefitter>(options.refit, shape, values, graph, *kernel,
                                                    CoarseningCap(options));
  }
  return run;
}

}  // namespace graphbandit::sim
