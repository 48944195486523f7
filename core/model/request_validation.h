// Checks of what callers send a model, before anything is logged: decision requests against the
// model's limits and (once fixed) its dimensions, reward reports, and graph edits. Pure functions
// of the request and the configuration; every error is INVALID_ARGUMENT with a message naming the
// field.
#ifndef GRAPHBANDIT_CORE_MODEL_REQUEST_VALIDATION_H_
#define GRAPHBANDIT_CORE_MODEL_REQUEST_VALIDATION_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/ledger/decision.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"

namespace graphbandit {

// A model's feature dimensions as requests see them (fixed by the configuration, or by the
// first decision request).
// The dimensions count every input: the dense values the request carries, then the hashed
// inputs of its named features (the slots; 0 when the model takes none).
struct Dimensions {
  bool fixed = false;
  int context_dim = 0;
  int arm_dim = 0;
  int context_slots = 0;
  int arm_slots = 0;

  int dense_context_dim() const { return context_dim - context_slots; }
  int dense_arm_dim() const { return arm_dim - arm_slots; }
  bool named_features() const { return context_slots + arm_slots > 0; }
};

// A non-empty id of at most kMaxIdBytes bytes; `field` names it in the message.
absl::Status CheckId(absl::string_view id, absl::string_view field);
// Every value finite and within kMaxFeatureMagnitude.
absl::Status CheckFinite(absl::Span<const double> values, absl::string_view field);

// An event id: 1..kMaxEventIdBytes printable ASCII characters.
absl::Status CheckEventId(absl::string_view id);

// A reward report, before it is joined with its decision. This is where a reported reward's
// values are checked, once: the event id; exactly one of reward and arm_rewards; per-arm ids that
// are valid and distinct; every reward finite and, when `options` is given, within its
// limits.reward_bound. Model::Reward runs it on every report before anything is logged, and a
// replica runs it again on a logged report with its own options (ResolveReport), so that a log
// written with another bound means the same on every replica. `options` is null only where no
// model is known to own the event (Engine: several models, none holding it): the bound is then
// not checked. What the join decides (an arm the decision did not return, a single reward for a
// slate) is JudgeReport's; the learners' CheckObservation guards their own inputs' shape and is
// not a check of what callers send.
absl::Status ValidateRewardRequest(const RewardRequest& request, const ModelOptions* options);

// A decision request: ids, the candidate count and slate size within the model's limits,
// distinct arm ids, and features of the fixed dimensions (or, before they are fixed, of one
// dimension shared by every candidate, within limits.max_feature_dim).
absl::Status ValidateDecisionRequest(const DecisionRequest& request, const Dimensions& dims,
                                     const ModelOptions& options);

// Graph administration: a non-empty list within limits.max_graph_edits_per_call of valid ids;
// edges join two different users with a weight in [kMinEdgeWeight, kMaxEdgeWeight], and no
// pair of users is named twice. ValidateEdges returns the ids the edges name (user_a, user_b
// of each edge in order).
absl::Status ValidateUsers(absl::Span<const std::string> users, const ModelOptions& options);
absl::StatusOr<std::vector<std::string>> ValidateEdges(const std::vector<EdgeEdit>& edges,
                                                       const ModelOptions& options);
absl::Status ValidateEdgePairs(const std::vector<std::pair<std::string, std::string>>& pairs,
                               const ModelOptions& options);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_REQUEST_VALIDATION_H_
