#include "core/learner/learner_factory.h"

#include "core/fit/refit.h"
#include "core/learner/batched_nystrom_posterior.h"
#include "core/learner/confidence_bound_posterior.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/linear_posterior.h"
#include "core/learner/lk_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "core/learner/random_choice.h"
#include "core/learner/semi_parametric_ts.h"

namespace graphbandit {

Hyperparameters ConfiguredHyperparameters(const ModelOptions& options) {
  Hyperparameters h;
  h.signal_variance = options.kernel_variance;
  h.offset_variance = 0.0;
  h.noise_variance = options.ridge;
  h.rho = options.rho;
  h.prior_mean = options.prior_mean;
  return h;
}

absl::StatusOr<std::unique_ptr<Learner>> MakeLearner(const ModelOptions& options, int dim,
                                                     const UserGraph& graph,
                                                     std::shared_ptr<const UserKernel> kernel,
                                                     const Hyperparameters* values,
                                                     double kors_mu_factor) {
  const ArmKernel arm = values != nullptr
                            ? ArmKernel(options.kernel, values->signal_variance,
                                        values->offset_variance, values->linear_variance)
                            : ArmKernel(options.kernel, options.kernel_variance);
  const double ridge = values != nullptr ? values->noise_variance : options.ridge;
  const double prior_mean = values != nullptr ? values->prior_mean : options.prior_mean;
  const double eta = values != nullptr ? values->user_variance : 0.0;
  std::unique_ptr<Learner> learner;
  switch (options.policy) {
    case PolicyKind::kEkUcb:
    case PolicyKind::kEkTs: {
      NystromOptions nystrom;
      nystrom.ridge = ridge;
      nystrom.kors_mu = KorsMu(options.kors_mu, kors_mu_factor, ridge);
      nystrom.prior_mean = prior_mean;
      // Served: the dictionary's rows of M are computed in batches (one history pass per batch).
      nystrom.growth_batch_divisor = options.research.growth_batch_divisor;
      nystrom.spread_growth_scan = options.research.spread_growth_scan;
      nystrom.spread_refit_work = options.research.spread_refit_work;
      nystrom.single_precision = options.single_precision_scoring;
      nystrom.kors_epsilon = options.kors_epsilon;
      nystrom.kors_gamma = options.kors_gamma;
      nystrom.max_dictionary_size = options.max_dictionary_size;
      nystrom.max_history = options.max_history;
      nystrom.forget_evicted = options.forget_evicted;
      nystrom.seed = options.seed;
      learner = std::make_unique<NystromPosterior>(dim, arm, kernel, nystrom, eta);
      break;
    }
    case PolicyKind::kGpUcb:
    case PolicyKind::kGpTs:
      if (options.confidence.bound != ConfidenceBound::kTuned) {
        if (absl::Status s = options.confidence.Validate(); !s.ok()) return s;
        learner = std::make_unique<ConfidenceBoundPosterior>(dim, arm, kernel, options.confidence);
        break;
      }
      learner = std::make_unique<ExactGpPosterior>(dim, arm, kernel, ridge, prior_mean, eta);
      break;
    case PolicyKind::kBatchedNystromUcb: {
      BatchedNystromOptions batched;
      batched.ridge = options.ridge;
      batched.threshold = options.batched_threshold;
      batched.oversampling = options.batched_oversampling;
      batched.seed = options.seed;
      // Served, the re-draws are bounded so that the writer keeps up (see the options).
      batched.min_growth = options.research.batched_min_growth;
      batched.max_dictionary_size =
          options.research.batched_bounded ? options.max_dictionary_size : 0;
      learner = std::make_unique<BatchedNystromPosterior>(dim, arm, kernel, batched);
      break;
    }
    case PolicyKind::kLinUcbPerUser:
    case PolicyKind::kLinUcbPooled:
    case PolicyKind::kGraphUcb:
    case PolicyKind::kGobLin: {
      LinearOptions linear;
      linear.lambda = options.linear_lambda;
      linear.rho = options.rho;
      linear.prior = options.policy == PolicyKind::kLinUcbPerUser  ? LinearOptions::Prior::kPerUser
                     : options.policy == PolicyKind::kLinUcbPooled ? LinearOptions::Prior::kPooled
                                                                   : LinearOptions::Prior::kGraph;
      if (options.policy == PolicyKind::kGobLin) linear.lambda = linear.rho = 1.0;
      if (absl::Status s = linear.Validate(); !s.ok()) return s;
      learner = std::make_unique<LinearUcbPosterior>(dim, linear);
      break;
    }
    case PolicyKind::kSemiGraphTs:
    case PolicyKind::kSemiTs:
    case PolicyKind::kLinTs:
    case PolicyKind::kGraphUcbLocal: {
      const bool local_ucb = options.policy == PolicyKind::kGraphUcbLocal;
      SemiParametricOptions semi;
      semi.centred = options.policy != PolicyKind::kLinTs && !local_ucb;
      semi.graph = options.policy == PolicyKind::kSemiGraphTs || local_ucb;
      semi.lambda = options.linear_lambda;
      // GraphUCB-Local's width matrix has the extra lambda I (semi_parametric_ts.h).
      semi.code_gamma = options.research.semi_code_gamma || local_ucb;
      if (absl::Status s = semi.Validate(); !s.ok()) return s;
      learner = std::make_unique<SemiParametricTs>(dim, semi);
      break;
    }
    case PolicyKind::kLkGpUcb:
    case PolicyKind::kLkGpTs:
      learner = std::make_unique<LkGpPosterior>(dim, arm, kernel, options.research.lk);
      break;
    case PolicyKind::kRandom:
      learner = std::make_unique<RandomChoice>();
      break;
  }
  // Attach the graph (a no-op rebuild for an empty learner; the linear graph prior needs it).
  if (absl::Status s = learner->SetGraph(graph, std::move(kernel)); !s.ok()) return s;
  return learner;
}

}  // namespace graphbandit
