#include "core/model/fit_scheduler.h"

#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/fit/refit.h"
#include "core/learner/learner_factory.h"

namespace graphbandit {

FitScheduler::FitScheduler(const ModelOptions& options, Host* host, std::function<void()> fit_ready)
    : options_(options), host_(host) {
  if (options.refits_hyperparameters()) fitter_ = std::make_unique<FitWorker>(std::move(fit_ready));
}

bool FitScheduler::Stop(absl::Time deadline) {
  return fitter_ == nullptr || fitter_->Stop(deadline);
}

void FitScheduler::RequestStop() {
  if (fitter_ != nullptr) fitter_->RequestStop();
}

void FitScheduler::SetEvaluationHookForTesting(std::function<void()> hook) {
  MutexLock lock(&stats_mu_);
  evaluation_hook_ = std::move(hook);
}

FitScheduler::Stats FitScheduler::stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

void FitScheduler::AfterBatch(LearnedState* state) {
  if (!state->refits()) return;
  // Decisions about the values in use wait until a logged change of them is applied (a fit
  // finished now would be gated against, and a fit started now would start from, values about
  // to be replaced; a fit logged after a coarsening would undo it).
  if (hyperparameters_queued_) return;
  // That change held a place among the fits in flight (Queue) until the decisions below are
  // taken: a fit due now starts before WaitForFits can see none in flight.
  const bool release = hyperparameters_queued_hold_;
  hyperparameters_queued_hold_ = false;
  // Nor while the learner spreads the last change's rebuild: the values in use are about to be
  // replaced by the pending ones (a fit due meanwhile starts once the pass ends).
  if (!state->learner()->RefitPending()) DecideFits(state);
  if (release) host_->AddFitsInFlight(-1);
}

bool FitScheduler::Queue(HyperparametersOp op) {
  absl::Status status = host_->LogHyperparameters(std::move(op));
  if (!status.ok()) {
    if (status.code() != absl::StatusCode::kCancelled) {  // not shutting down
      MutexLock stats(&stats_mu_);
      ++stats_.failed;
      LogWarning(absl::StrFormat("model \"%s\": hyper-parameters not logged: %s", options_.name,
                                 status.message()));
    }
    return false;
  }
  hyperparameters_queued_ = true;
  hyperparameters_queued_hold_ = true;
  return true;
}

void FitScheduler::DecideFits(LearnedState* state) {
  // A full Nystrom dictionary is rebuilt with a coarser KORS mu (core/fit/refit.h), logged like a
  // fit so that replay rebuilds at the same place (CoarseningCap says when; the simulator's
  // InlineRefitter rebuilds at the same point).
  if (const double coarser = CoarseningFactorFor(state->learner()->dictionary_size(),
                                                 CoarseningCap(options_), state->kors_mu_factor());
      coarser > 0.0) {
    HyperparametersOp op;
    op.reason = HyperparametersOp::Reason::kDictionaryFull;
    op.values = state->hyperparameters();
    op.kors_mu_factor = coarser;
    op.fitted_at = state->last_fit_rewards();
    if (Queue(std::move(op))) return;
  }
  if (fitter_ == nullptr) return;
  std::optional<FitWorker::Outcome> outcome = fitter_->Take();
  // However it ends, a finished fit stays in flight until this returns: past the decision below
  // whether the next fit starts (WaitForFits must never see none in flight between the two), and
  // past the queueing of an applied fit's record (which WaitForFits then waits to see applied).
  struct Landed {
    Host* host;
    bool landed;
    ~Landed() {
      if (landed) host->AddFitsInFlight(-1);
    }
  } landed{host_, outcome.has_value()};
  if (outcome.has_value()) {
    FinishFit(*state, *std::move(outcome));
    if (hyperparameters_queued_) return;
  }
  if (state->rewards_learned() < state->next_fit_at() || fitter_->busy()) return;
  // Due by rewards; also by the clock, when the configuration bounds how often fits start
  // (the fit runs later, on the values then in use; replay applies the logged outcome). Not
  // while the model still runs on its start values and is young (no fit applied yet, fewer
  // rewards than max_interval): a first fit on a few dozen rewards is often judged not worth
  // applying, and on a fast stream the clock would then keep the start values (no community
  // part, unit length-scales) in service for thousands of rewards. At most kMaxYoungFits fits
  // start that way, whatever the schedule's settings.
  const absl::Time now = absl::Now();
  const bool young = state->fits_applied() == 0 &&
                     state->rewards_learned() < options_.refit.max_interval &&
                     young_fits_ < kMaxYoungFits;
  if (!young && now - last_fit_started_ < absl::Seconds(options_.refit.min_seconds_between)) {
    return;
  }
  if (young) ++young_fits_;
  last_fit_started_ = now;
  StartFit(state);
}

void FitScheduler::StartFit(LearnedState* state) {
  FitWorker::Job job;
  job.data = SpreadRawObservations(*state->learner(), state->scaling(), options_.refit.max_points);
  state->set_next_fit_at(NextFitAfter(state->rewards_learned(), options_.refit));
  if (job.data.y.size() < 2) return;
  const KernelShape shape = state->CurrentShape();
  job.spec = MakeFitSpec(options_.refit, shape);
  {
    MutexLock lock(&stats_mu_);
    if (evaluation_hook_) {
      job.spec.after_evaluation = [hook = evaluation_hook_](double) { hook(); };
    }
  }
  if (job.spec.fit_rho || job.spec.fit_community_variance) {
    // The writer goes on editing its own graph.
    job.graph = std::make_shared<const UserGraph>(state->graph());
  } else {
    job.fixed_users = state->user_kernel();
  }
  job.start = state->hyperparameters();
  job.fitted_at = state->rewards_learned();
  if (fitter_->Start(std::move(job))) host_->AddFitsInFlight(+1);
}

void FitScheduler::FinishFit(const LearnedState& state, FitWorker::Outcome outcome) {
  if (!outcome.result.ok()) {
    MutexLock lock(&stats_mu_);
    if (outcome.result.status().code() == absl::StatusCode::kFailedPrecondition) {
      ++stats_.skipped;  // nothing to fit yet, e.g. every reward equal
      stats_.last = FitOutcome::kSkipped;
    } else if (outcome.result.status().code() != absl::StatusCode::kCancelled) {
      ++stats_.failed;
      stats_.last = FitOutcome::kFailed;
      stats_.last_error = std::string(outcome.result.status().message());
      LogWarning(absl::StrFormat("model \"%s\": hyper-parameter fit failed: %s", options_.name,
                                 outcome.result.status().message()));
    }
    return;
  }
  const FitResult& fit = *outcome.result;
  {
    MutexLock lock(&stats_mu_);
    stats_.seconds += fit.seconds;
    if (!FitWorthApplying(fit, state.hyperparameters(), options_.refit)) {
      ++stats_.unchanged;
      stats_.last = FitOutcome::kUnchanged;
      return;
    }
    stats_.last = FitOutcome::kApplied;
  }
  HyperparametersOp op;
  op.values = fit.values;
  op.kors_mu_factor = state.kors_mu_factor();
  op.fitted_at = outcome.fitted_at;
  op.points = fit.points;
  op.log_likelihood = fit.log_likelihood;
  // Logged like every other change, then applied by the writer in log order with the next batch.
  Queue(std::move(op));
}

}  // namespace graphbandit
