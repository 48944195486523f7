// A decision as returned to callers and remembered by the ledger.
#ifndef GRAPHBANDIT_CORE_LEDGER_DECISION_H_
#define GRAPHBANDIT_CORE_LEDGER_DECISION_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/features/named_features.h"
#include "core/policy/evaluation.h"

namespace graphbandit {

// DecisionRequest.explain: where a chosen arm's mean and score come from
// (core/learner/mean_explanation.h). shared + own + neighbours = mean, up to rounding.
struct ArmExplanation {
  double shared = 0.0;             // the prior mean plus the drifting baseline: every user's part
  double own = 0.0;                // terms of the user's own past decisions the model keeps
  double neighbours = 0.0;         // terms of other users' kept decisions, through the user kernel
  double exploration_bonus = 0.0;  // score - mean
  struct User {
    std::string user_id;       // empty for another user unless explain_names_users
    double user_factor = 0.0;  // the user kernel's entry linking them
    int64_t points = 0;        // their kept decisions that reach this user
    double contribution = 0.0;
  };
  struct Point {
    std::string user_id;
    double user_factor = 0.0;
    double similarity = 0.0;  // the arm kernel between that decision's features and this one's
    double contribution = 0.0;
  };
  std::vector<User> top_users;    // largest |contribution| first
  std::vector<Point> top_points;  // the same, for single past decisions
};

struct ChosenArm {
  int candidate_index = 0;
  std::string arm_id;
  double mean = 0.0;
  double stddev = 0.0;
  double score = 0.0;
  std::optional<double> probability;
  // Only when the request asked (DecisionRequest::explain); answered, never stored or logged.
  std::shared_ptr<const ArmExplanation> explanation;
};

// Every candidate of a decision whose policy learns from all of them (SEMI_GRAPH_TS, SEMI_TS):
// the raw features and the probability with which the policy chooses each (summing to 1).
// Logged with the decision, kept by the ledger and logged again with each reward learned from
// it, so that learning, recovery and replay use the probabilities of the decision itself.
struct DecisionCandidates {
  std::vector<std::vector<double>> features;
  std::vector<double> probabilities;
};

// Every candidate of a single-arm decision made with the evaluation share on (ModelConfig
// .evaluation): its id, its features as the model saw them (dense, named features encoded) and
// its probability of being chosen by the logging policy (the rule mixed with the uniform share;
// the chosen candidate's is the probability its reward is weighted by), and the model's
// posterior mean there at the time (the reward model of the doubly robust estimates, baseline
// included), so that the log alone reproduces the off-policy estimates. Logged with the decision
// only, so that the log alone can be replayed offline and exported (graphbandit-replay); the
// ledger does not keep it. A decision whose candidates take more than kMaxLoggedCandidateBytes
// logs its evaluation record alone.
struct LoggedCandidates {
  std::vector<std::string> ids;
  std::vector<std::vector<double>> features;
  std::vector<double> probabilities;
  std::vector<double> means;
};

inline constexpr size_t kMaxLoggedCandidateBytes = 256 << 10;

struct Decision {
  std::string event_id;
  std::string model;
  std::string policy;
  uint64_t model_version = 0;
  std::vector<ChosenArm> arms;
  bool replayed = false;  // true when returned for a retried event id
  // False when the model's log could not record the decision (a full disk, an I/O error): it
  // was served from the last published state, and a reward for it will be UNKNOWN_EVENT.
  bool logged = true;
  // Set for policies that learn from the whole decision; null otherwise.
  std::shared_ptr<const DecisionCandidates> candidates;
  // Drawn by the uniform share of ModelConfig.evaluation, not by the policy.
  bool explored = false;
  // The evaluation record (core/policy/evaluation.h) of a single-arm decision made with the
  // evaluation share on: logged with the decision and with each reward learned from it. Null
  // for slates and without the share.
  std::shared_ptr<const EvaluationRecord> evaluation;
  // Set with `evaluation` by Model::Decide, moved into the decision's log record (never kept).
  std::shared_ptr<const LoggedCandidates> logged_candidates;
  // Every candidate's probability under the logging policy, set with `evaluation` (whatever
  // the candidates' size): answered by Model::Select for the engine's challengers
  // (core/model/shadow_feed.h), never logged or kept.
  std::shared_ptr<const std::vector<double>> logging_probabilities;
  // DecisionRequest.rank_all: the candidates not chosen (their indices), by descending posterior
  // mean (ties by index). Answered, not logged: empty for a replayed decision after a restart.
  std::vector<int> others;
};

// A candidate as seen by the core: views into the caller's request, valid during the call.
struct CandidateRef {
  absl::string_view id;
  absl::Span<const double> features;
  absl::Span<const FeatureNamespace> named_features = {};  // core/features/named_features.h
};

struct DecisionRequest {
  absl::string_view model;  // empty: the default model
  absl::string_view user_id;
  absl::Span<const double> context;
  absl::Span<const FeatureNamespace> context_features = {};
  std::vector<CandidateRef> candidates;
  int slate_size = 1;
  absl::string_view event_id;  // empty: generated
  // > 0: decide only from a published state of at least this version (read-your-writes after
  // a ReportReward that returned it); waits for it within the call's deadline.
  uint64_t min_model_version = 0;
  // Also rank the candidates not chosen (Decision::others), e.g. for a full ranking.
  bool rank_all = false;
  // Explain each chosen arm (ChosenArm::explanation). Not part of the request's identity: a
  // retry returns the stored decision, which has no explanation.
  bool explain = false;
  // The request speaks named features only (the Personalizer API), even when it carries none:
  // a model's first such request gives it named inputs.
  bool named_form = false;
  // Personalizer's deferActivation: the decision's rewards are held, not learned, until the event
  // is activated (Model::Activate); a decision never activated teaches nothing, not even the
  // default reward.
  bool defer_activation = false;
  // The candidate the application would show without the model (Personalizer's baseline: the
  // first action not excluded), logged with the decision; -1 for none.
  int baseline = -1;
};

// What activating a deferred event (Model::Activate) amounted to.
enum class ActivationOutcome {
  kActivated,      // its held rewards are learned now, and later ones as they come
  kAlreadyActive,  // activated before, or not deferred: nothing to do
  kClosed,         // its decision has left the ledger (window ended, or completed)
  kUnknownEvent,
};
struct ActivationResult {
  ActivationOutcome outcome = ActivationOutcome::kUnknownEvent;
  std::string model;
  // The first model version that has learned the held rewards (0 when there were none).
  uint64_t model_version = 0;
};

enum class RewardOutcome { kAccepted, kDuplicate, kLate, kUnknownEvent };
absl::string_view RewardOutcomeName(RewardOutcome outcome);

struct RewardRequest {
  std::string event_id;
  std::optional<double> reward;                             // single-arm decisions
  std::vector<std::pair<std::string, double>> arm_rewards;  // (arm id, reward)
  std::string model;                                        // optional
};

struct RewardResult {
  RewardOutcome outcome = RewardOutcome::kUnknownEvent;
  std::vector<std::pair<std::string, RewardOutcome>> arm_outcomes;
  std::string model;
  // The first model version whose state has learned what this report taught (ACCEPTED) or had
  // already learned (DUPLICATE), for SelectArm's min_model_version; 0 when the learning waits
  // for the decision's window (SUM/MAX/LAST aggregation) or nothing was learned.
  uint64_t model_version = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEDGER_DECISION_H_
