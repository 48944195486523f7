// SelectArmRequest.explain: each chosen arm's mean split into the prior's, the user's own and
// the graph neighbours' parts, its exploration bonus, and the users and past decisions that
// weigh most (core/learner/mean_explanation.h for the decomposition).
#ifndef GRAPHBANDIT_CORE_MODEL_EXPLANATIONS_H_
#define GRAPHBANDIT_CORE_MODEL_EXPLANATIONS_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/graph/user_graph.h"
#include "core/learner/posterior.h"
#include "core/ledger/decision.h"

namespace graphbandit {

// How many users and past decisions an explanation names.
inline constexpr int kExplainedTop = 5;

// Sets the explanation of every arm in `arms` (chosen among the columns of `points` for
// `user`, whose means include `baseline`, the drifting baseline). Other users are named only
// with `name_users` (ModelConfig.evaluation.explain_names_users); else their user_id is empty.
// FAILED_PRECONDITION, with no arm changed, when the scorer cannot split its mean (a policy
// whose mean is not a sum over past decisions: see ModelOptions::explains()).
absl::Status ExplainArms(const Scorer& scorer, const UserRegistry& registry, int32_t user,
                         const Eigen::MatrixXd& points, double baseline, bool name_users,
                         absl::string_view model, absl::string_view policy,
                         std::vector<ChosenArm>* arms);

// What a model whose policy cannot explain answers an explain request with.
absl::Status CannotExplain(absl::string_view model, absl::string_view policy);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_EXPLANATIONS_H_
