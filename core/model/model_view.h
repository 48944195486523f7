// What the model publishes for decisions to read (an immutable ModelView per applied batch),
// and what applying a graph edit reports.
#ifndef GRAPHBANDIT_CORE_MODEL_MODEL_VIEW_H_
#define GRAPHBANDIT_CORE_MODEL_MODEL_VIEW_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "core/fit/hyperparameter_fit.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/posterior.h"
#include "core/policy/apprentice.h"
#include "core/policy/evaluation.h"

namespace graphbandit {

// The kernel hyper-parameters a published state uses (kernel policies with fixed dimensions).
struct HyperparameterView {
  Hyperparameters values;
  double kors_mu = 0.0;  // EK policies
  int64_t fits_applied = 0;
  int64_t coarsenings = 0;  // full-dictionary rebuilds with a coarser KORS mu (core/fit/refit.h)
  int64_t last_fit_rewards = 0;
  int32_t last_fit_points = 0;
  double last_fit_log_likelihood = 0.0;
  double signal_to_noise = 0.0;  // of these values (core/model/learning_health.h)
};

// What decisions read: immutable once published.
struct ModelView {
  uint64_t version = 0;
  std::shared_ptr<const Scorer> scorer;  // null until the dimensions are fixed
  FeatureScaling scaling;                // valid when dimensions_fixed
  int context_dim = 0;                   // every input, the named features' slots included
  int arm_dim = 0;
  int context_slots = 0;
  int arm_slots = 0;
  // The frozen scales of named numeric features (core/model/model_ops.h, FeatureScalingOp);
  // never null.
  std::shared_ptr<const NumericScaling> context_scaling;
  std::shared_ptr<const NumericScaling> arm_scaling;
  bool dimensions_fixed = false;
  int64_t rewards_learned = 0;
  // Accepted rewards waiting in a learning batch (model_options.h, max_learn_batch).
  int64_t rewards_staged = 0;
  int64_t history_size = 0;
  int64_t dictionary_size = 0;
  int64_t dictionary_points_refused = 0;  // at the cap (core/learner/posterior.h)
  int64_t edges = 0;
  int64_t graph_components = 0;
  int64_t graph_users = 0;
  // Multiplies `exploration` in the selection rule (1: the posterior standard deviation).
  double exploration_width = 1.0;
  // The drifting baseline added to every mean (core/learner/baseline_tracker.h; 0 when off).
  double baseline = 0.0;
  // The rewards learned lately: their exponentially weighted mean and the weight it rests on
  // (core/model/learning_health.h, RecentRewards).
  double recent_reward = 0.0;
  double recent_weight = 0.0;
  std::optional<HyperparameterView> hyperparameters;  // kernel policies, dimensions fixed
  // Off-policy estimates over the decisions learned so far (core/policy/evaluation.h), one per
  // EvaluatedPolicy in order, and how many of those decisions the uniform share drew.
  std::vector<PolicyValue> policy_values;
  // The model's own policy, from the decisions logged with it (PolicyEvaluator::OwnValue): a
  // challenger's value as it would serve (core/model/shadow_feed.h).
  std::optional<PolicyValue> own_value;
  int64_t decisions_explored = 0;
  // Apprentice mode (core/policy/apprentice.h): serving the baseline arm, the lift estimate and
  // the last switch.
  bool apprentice = false;
  ApprenticeRule apprentice_rule;  // the rule the apprenticeship is judged by
  LiftEstimate lift;
  std::optional<SwitchRecord> last_switch;
};

struct EdgeEditResult {
  int changed = 0;    // edges added (AddEdges) or removed (RemoveEdges)
  int unchanged = 0;  // AddEdges: existing edges re-weighted; RemoveEdges: pairs with no edge
  int users_added = 0;
  int64_t edges = 0;  // total after the edit
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_MODEL_VIEW_H_
