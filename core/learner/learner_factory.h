// The one factory of learners: the learner behind each policy a model can be configured with,
// and behind the papers' baselines the simulator runs (PolicyKind's research kinds and
// ModelOptions::research). The simulator builds every policy with it (sim/policy_spec.cc).
#ifndef GRAPHBANDIT_CORE_LEARNER_LEARNER_FACTORY_H_
#define GRAPHBANDIT_CORE_LEARNER_LEARNER_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/learner/posterior.h"
#include "core/model/model_options.h"
#include "core/policy/decision_step.h"
#include "core/policy/selection.h"

namespace graphbandit {

// A learner over points of dimension `dim` for the model, already attached to `graph` and its
// user `kernel`. With `values` (the model's current, possibly fitted, hyper-parameters), kernel
// learners take their arm-kernel variance and offset, ridge, prior mean and KORS mu
// (kors_mu_factor times the ridge, unless the configuration fixes kors_mu) from them instead
// of the configuration (and values->user_variance as each user's own trend); the user kernel
// must already be built for values->rho.
absl::StatusOr<std::unique_ptr<Learner>> MakeLearner(const ModelOptions& options, int dim,
                                                     const UserGraph& graph,
                                                     std::shared_ptr<const UserKernel> kernel,
                                                     const Hyperparameters* values = nullptr,
                                                     double kors_mu_factor = 1.0);

// The hyper-parameters a model starts with, before any fit: the configured values (the
// length-scales are set when the dimensions are fixed).
Hyperparameters ConfiguredHyperparameters(const ModelOptions& options);

inline SelectionRule SelectionRuleFor(const ModelOptions& options) {
  if (options.samples_parameters()) return SelectionRule::kSampledParameter;
  return options.thompson() ? SelectionRule::kThompson : SelectionRule::kUcb;
}

// The dictionary size at which a model with these options rebuilds its full Nystrom dictionary
// with a coarser KORS mu (CoarseningFactorFor, core/fit/refit.h): max_dictionary_size for the EK
// policies when coarsen_full_dictionary is on and mu follows the noise variance; 0 (never)
// otherwise.
inline int64_t CoarseningCap(const ModelOptions& options) {
  const bool nystrom = options.policy == PolicyKind::kEkUcb || options.policy == PolicyKind::kEkTs;
  return nystrom && options.coarsen_full_dictionary && options.kors_mu == 0.0
             ? options.max_dictionary_size
             : 0;
}

// What a model with these options fixes about its decisions (core/policy/decision_step.h): the
// one place the configuration becomes a decision rule, for the model and for the simulator.
inline DecisionSetup DecisionSetupOf(const ModelOptions& options) {
  DecisionSetup setup;
  setup.rule = SelectionRuleFor(options);
  setup.exploration = options.exploration;
  setup.width = options.exploration_width;
  setup.index_schedule = options.index_schedule;
  setup.propensity = options.propensity_rule;
  setup.propensity_draws = options.propensity_draws;
  return setup;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_LEARNER_FACTORY_H_
