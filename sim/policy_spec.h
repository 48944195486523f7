// A policy as the simulator runs it: the options of a model (core/model/model_options.h) and
// the few things the simulator does around a model. MakeRunPolicy builds every policy's
// learner with the model's own factory (core/learner/learner_factory.h) and the same
// scaling, selection rule, exploration, baseline tracker and hyper-parameter fits a model
// derives from its options; runner.cc then takes the model's decision and learning steps
// (core/policy/decision_step.h). The papers' baselines are ModelOptions too: PolicyKind's
// research kinds (LK-GP, random) and ModelOptions::research, which a served model leaves at
// their defaults.
#ifndef GRAPHBANDIT_SIM_POLICY_SPEC_H_
#define GRAPHBANDIT_SIM_POLICY_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/fit/refit.h"
#include "core/learner/baseline_tracker.h"
#include "core/learner/posterior.h"
#include "core/model/model_options.h"
#include "core/policy/decision_step.h"
#include "core/policy/selection.h"
#include "sim/environment.h"
#include "sim/navigation.h"

namespace graphbandit::sim {

struct PolicySpec {
  std::string name;
  // The model. Its seed and dimensions are set per run (the run's seed becomes the model's
  // seed); everything else is used as is.
  ModelOptions model;

  // What the simulator adds for the papers' baselines (all off for a policy exactly as a
  // model serves it; see served()):
  // Every user is served as one user (the graph is ignored, user 0 throughout).
  bool pooled = false;
  // Append a constant feature 1 to every point (an intercept; linear policies).
  bool intercept = false;
  // model.arm_lengthscale is replaced by the median pairwise distance over the environment's
  // pool (1 when it has none).
  bool median_arm_lengthscale = false;
  // > 0: ridge (and KORS mu) = clip(this * S_spec, lk.lambda_min, lk.lambda_max) of the
  // environment's graph, the LK schedule's starting value, so that a Nystrom policy runs with
  // LK-GP's ridge.
  double ridge_from_lambda_base = 0.0;
  // Tie-breaks and Thompson draws from the run's stream, shared by every policy of the run
  // (common random numbers), instead of the model's stream per decision.
  bool run_stream = false;
  // Kernel UCB with a confidence bound (ModelOptions::confidence): the environment's true
  // kernel and length-scale, and the tighter-bounds paper's parameters for the horizon T and
  // the kernel's dimension d and smoothness nu: c = 1 for the RBF kernel and T^(-d / (2d + 2 nu))
  // for Matern kernels; IGP-UCB's eta = 2 / T (docs/algorithms.md §3.9).
  bool mm_paper_parameters = false;
  // A routing policy of the combinatorial GP paper (sim/navigation.h): runs on the navigation
  // environment only, instead of a model.
  std::optional<RoutePolicy> route;

  // Exactly what a model with these options serves: a kind a model can be configured with,
  // research settings at their defaults, nothing added.
  bool served() const;
};

// Refits inline (the server fits on a helper thread and applies the result at a logged point
// of its log; the simulator applies it at the observation that made it due).
class InlineRefitter {
 public:
  // max_dictionary_size > 0 (CoarseningCap): a Nystrom learner's full dictionary is rebuilt with
  // a coarser KORS mu at the point the server rebuilds it (CoarseningFactorFor). A fit is applied
  // when FitWorthApplying says so, as the server's are.
  InlineRefitter(const RefitOptions& options, const KernelShape& shape,
                 const Hyperparameters& initial, std::shared_ptr<const UserGraph> graph,
                 std::shared_ptr<const UserKernel> user_kernel, int max_dictionary_size = 0);
  // After each learned reward: fits and applies when due.
  absl::Status AfterObservation(Learner* learner, FeatureScaling* scaling);

 private:
  RefitOptions options_;
  KernelShape shape_;
  FitSpec spec_;
  Hyperparameters values_;
  std::shared_ptr<const UserGraph> graph_;
  std::shared_ptr<const UserKernel> user_kernel_;
  int max_dictionary_size_ = 0;
  double kors_mu_factor_ = 1.0;
  int64_t learned_ = 0;
  int64_t next_fit_ = 0;
};

struct RunPolicy {
  std::unique_ptr<Learner> learner;
  FeatureScaling scaling;
  DecisionSetup decision;  // the model's (DecisionSetupOf)
  bool pooled = false;
  bool intercept = false;                    // points get a trailing constant 1
  std::unique_ptr<InlineRefitter> refitter;  // null: no refits
  BaselineTracker baseline;
  // Each decision draws from a stream seeded with this and the event id (DecisionStream), as a
  // model does; unset: the run's shared stream (PolicySpec::run_stream).
  std::optional<uint64_t> model_seed;
  // Whether learner->dictionary_size() means something (Nystrom learners).
  bool has_dictionary = false;
};

// The rule a policy decides by after `rewards_learned` rewards, as a model's (RuleOf at
// ExplorationWidthOf, with the policy's drifting baseline).
DecisionRule DecisionRuleOf(const RunPolicy& policy, int64_t rewards_learned);

// The event id the simulator gives round `t` (what a test sends to a model to replay a run).
std::string SimEventId(int64_t t);

// Builds the learner for one run on `env` of `rounds` rounds; `seed` seeds its randomness.
absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed);

// Median pairwise Euclidean distance between the columns (1 for fewer than two columns).
double MedianDistance(const Eigen::MatrixXd& points);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_POLICY_SPEC_H_
