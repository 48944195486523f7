#include "sim/policy_spec.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/random.h"
#include "core/learner/learner_factory.h"

namespace graphbandit::sim {
namespace {

// Knows nothing and learns nothing: every candidate has mean 0 and width 0, so the selection
// rule's uniform tie-break makes the choice uniformly random.
class RandomChoice final : public Learner {
 public:
  void Score(int32_t, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    *mean = Eigen::VectorXd::Zero(points.cols());
    *stddev = Eigen::VectorXd::Zero(points.cols());
  }
  absl::Status Observe(int32_t, const Eigen::Ref<const Eigen::VectorXd>&, double) override {
    ++observations_;
    return absl::OkStatus();
  }
  absl::Status SetGraph(const UserGraph&, std::shared_ptr<const UserKernel>) override {
    return absl::OkStatus();
  }
  std::shared_ptr<const Scorer> Freeze() const override {
    return std::make_shared<RandomChoice>(*this);
  }
  int64_t history_size() const override { return observations_; }
  int64_t dictionary_size() const override { return 0; }

 private:
  int64_t observations_ = 0;
};

}  // namespace

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
  if (max_dictionary_size_ > 0 && learner->dictionary_size() >= max_dictionary_size_) {
    if (const double coarser = CoarserKorsMuFactor(kors_mu_factor_); coarser > 0.0) {
      if (absl::Status s = ApplyHyperparameters(values_, shape_, coarser, *graph_, scaling,
                                                &user_kernel_, learner);
          !s.ok()) {
        return s;
      }
      kors_mu_factor_ = coarser;
    }
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
  if (!FitImproves(*fit, options_) ||
      !MateriallyDifferent(values_, fit->values, options_.min_change)) {
    return absl::OkStatus();
  }
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

// Family::kServed: what a model with these options builds when its dimensions are fixed.
absl::StatusOr<RunPolicy> MakeServedPolicy(const ModelOptions& configured,
                                           const SimEnvironment& env, uint64_t seed) {
  ModelOptions options = configured;
  options.seed = LearnerSeed(seed);
  options.context_dim = env.context_dim();
  options.arm_dim = env.arm_dim();
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  RunPolicy run;
  run.rule = SelectionRuleFor(options);
  run.exploration = options.exploration;
  run.width = options.exploration_width;
  run.baseline = BaselineTracker(options.baseline_half_life);
  run.model_seed = options.seed;
  run.scaling = FeatureScaling{options.context_dim, options.arm_dim, options.context_lengthscale,
                               options.arm_lengthscale, Eigen::VectorXd()};
  Hyperparameters values = ConfiguredHyperparameters(options);
  values.lengthscales = run.scaling.lengthscales();
  auto graph = RunGraph(env, /*pooled=*/false);
  auto kernel = BuildUserKernel(*graph, options.user_kernel_options());
  if (!kernel.ok()) return kernel.status();
  auto learner = MakeLearner(options, run.scaling.joint_dim(), *graph, *kernel, &values,
                             options.refit.kors_mu_factor);
  if (!learner.ok()) return learner.status();
  run.learner = *std::move(learner);
  if (options.refits_hyperparameters()) {
    KernelShape shape;
    shape.kernel = options.kernel;
    shape.user_kernel = options.user_kernel_options();
    shape.context_dim = options.context_dim;
    shape.arm_dim = options.arm_dim;
    shape.fixed_kors_mu = options.kors_mu;
    const bool coarsen =
        options.coarsen_full_dictionary && options.kors_mu == 0.0 &&
        (options.policy == PolicyKind::kEkUcb || options.policy == PolicyKind::kEkTs);
    run.refitter = std::make_unique<InlineRefitter>(options.refit, shape, values, graph, *kernel,
                                                    coarsen ? options.max_dictionary_size : 0);
  }
  return run;
}

}  // namespace

absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed) {
  if (spec.family == Family::kServed) return MakeServedPolicy(spec.served, env, seed);
  RunPolicy run;
  run.rule = spec.rule;
  run.exploration = spec.exploration;
  run.width = spec.width;
  run.baseline = BaselineTracker(spec.baseline_half_life);
  run.pooled = spec.pooled;
  run.intercept = spec.intercept && spec.family == Family::kLinear;
  const Eigen::MatrixXd* pool = env.pool();
  run.scaling.context_dim = env.context_dim();
  run.scaling.arm_dim = env.arm_dim();
  run.scaling.context_lengthscale = spec.context_lengthscale;
  run.scaling.arm_lengthscale = spec.arm_lengthscale > 0.0
                                    ? spec.arm_lengthscale
                                    : (pool != nullptr ? MedianDistance(*pool) : 1.0);
  const int dim = run.scaling.joint_dim();

  auto graph_ptr = RunGraph(env, spec.pooled);
  UserGraph& graph = *graph_ptr;
  auto kernel = BuildUserKernel(graph, spec.user_kernel);
  if (!kernel.ok()) return kernel.status();
  const ArmKernel arm(spec.arm_kernel, spec.kernel_variance);
  const uint64_t learner_seed = LearnerSeed(seed);

  // S_spec comes from the environment's graph even for policies that ignore it: LK's schedule
  // is the same for every GP-style method.
  auto spectral_ratio = [&env] {
    UserGraph env_graph;
    env_graph.EnsureUsers(env.users());
    for (const Edge& edge : env.edges()) env_graph.SetEdge(edge.a, edge.b, edge.weight);
    return SpectralRatio(env_graph);
  };
  double scheduled_ridge = 0.0;
  if (spec.ridge_from_lambda_base > 0.0) {
    scheduled_ridge = std::clamp(spec.ridge_from_lambda_base * spectral_ratio(), spec.lk.lambda_min,
                                 spec.lk.lambda_max);
  }
  switch (spec.family) {
    case Family::kLkGp: {
      LkGpOptions options = spec.lk;
      if (options.schedule) {
        options.spectral_ratio = spectral_ratio();
        options.horizon = rounds;
      }
      auto learner = std::make_unique<LkGpPosterior>(dim, arm, *kernel, options);
      if (options.grid && pool != nullptr) {
        Eigen::MatrixXd points(dim, pool->cols());
        const Eigen::VectorXd no_context = Eigen::VectorXd::Zero(env.context_dim());
        for (Eigen::Index j = 0; j < pool->cols(); ++j) {
          run.scaling.Apply(no_context.data(), pool->col(j).data(), points.col(j).data());
        }
        absl::Status status = learner->SetPool(points, spec.pooled ? 1 : env.users());
        if (!status.ok()) return status;
      }
      run.learner = std::move(learner);
      break;
    }
    case Family::kEk: {
      NystromOptions options = spec.nystrom;
      options.seed = learner_seed;
      if (scheduled_ridge > 0.0) options.ridge = options.kors_mu = scheduled_ridge;
      run.learner = std::make_unique<NystromPosterior>(dim, arm, *kernel, options);
      if (spec.refit.enabled) {
        KernelShape shape;
        shape.kernel = spec.arm_kernel;
        shape.user_kernel = spec.user_kernel;
        shape.context_dim = run.scaling.context_dim;
        shape.arm_dim = run.scaling.arm_dim;
        shape.fixed_kors_mu = spec.fixed_kors_mu ? options.kors_mu : 0.0;
        if (absl::Status s = spec.refit.Validate(); !s.ok()) return s;
        run.refitter = std::make_unique<InlineRefitter>(
            spec.refit, shape,
            InitialHyperparameters(shape, spec.kernel_variance, run.scaling, options.ridge),
            graph_ptr, *kernel, spec.coarsen_when_full ? options.max_dictionary_size : 0);
      }
      break;
    }
    case Family::kBatched: {
      BatchedNystromOptions options = spec.batched;
      options.seed = learner_seed;
      if (scheduled_ridge > 0.0) options.ridge = scheduled_ridge;
      run.learner = std::make_unique<BatchedNystromPosterior>(dim, arm, *kernel, options);
      break;
    }
    case Family::kLinear: {
      auto learner =
          std::make_unique<LinearUcbPosterior>(dim + (run.intercept ? 1 : 0), spec.linear);
      absl::Status status = learner->SetGraph(graph, *kernel);
      if (!status.ok()) return status;
      run.learner = std::move(learner);
      break;
    }
    case Family::kRandom:
      run.learner = std::make_unique<RandomChoice>();
      break;
    case Family::kServed:
      break;  // handled above
  }
  return run;
}

}  // namespace graphbandit::sim
