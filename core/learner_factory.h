// The learner behind each policy a model can be configured with (the simulator builds the same
// learners from its own policy specs, client/sim/policy_spec.h).
#ifndef GRAPHBANDIT_CORE_LEARNER_FACTORY_H_
#define GRAPHBANDIT_CORE_LEARNER_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/model_options.h"
#include "core/posterior.h"
#include "core/selection.h"
#include "core/user_graph.h"
#include "core/user_kernel.h"

namespace graphbandit {

// A learner over points of dimension `dim` for the model, already attached to `graph` and its
// user `kernel`.
absl::StatusOr<std::unique_ptr<Learner>> MakeLearner(const ModelOptions& options, int dim,
                                                     const UserGraph& graph,
                                                     std::shared_ptr<const UserKernel> kernel);

inline SelectionRule SelectionRuleFor(const ModelOptions& options) {
  return options.thompson() ? SelectionRule::kThompson : SelectionRule::kUcb;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_FACTORY_H_
