// When a model fits its kernel hyper-parameters, and what it does with a finished fit. After
// each batch the writer asks the scheduler (AfterBatch): a full Nystrom dictionary is coarsened,
// a finished fit that improves the likelihood enough is logged (and applied later, in log
// order, like every change), and a fit that is due is started on the fit worker's thread.
//
// Threads: everything but stats() and Stop() runs on the model's writer thread, which owns the
// scheduling flags and the learned state the scheduler reads. The fit worker runs the fits and
// tells the model when an outcome is ready. stats_mu_ is a leaf lock.
#ifndef GRAPHBANDIT_CORE_MODEL_FIT_SCHEDULER_H_
#define GRAPHBANDIT_CORE_MODEL_FIT_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/fit/fit_worker.h"
#include "core/model/learned_state.h"
#include "core/model/learning_health.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"

namespace graphbandit {

class FitScheduler {
 public:
  // What the scheduler needs from the model.
  class Host {
   public:
    virtual ~Host() = default;
    // Logs `op` (the log tail moves under the ledger lock) and, in the same step, counts it
    // among the fits in flight. CANCELLED when the model is shutting down.
    virtual absl::Status LogHyperparameters(HyperparametersOp op) = 0;
    // The fits in flight (started and not yet logged or dropped) changed by `delta`.
    virtual void AddFitsInFlight(int delta) = 0;
  };

  // The most fits that start without the clock's bound while the model is young (in this
  // process: a restart begins again). With the default schedule (first fit at 32 rewards,
  // growth 1.5, max_interval 4,000) about a dozen fall in the young window.
  static constexpr int kMaxYoungFits = 16;

  struct Stats {
    int64_t unchanged = 0;
    int64_t skipped = 0;
    int64_t failed = 0;
    double seconds = 0.0;                 // summed over finished fits
    FitOutcome last = FitOutcome::kNone;  // of the last fit that finished (not cancelled)
    std::string last_error;               // the last failure's message
  };

  // `fit_ready` is called on the fit worker's thread when an outcome is waiting (the model
  // wakes its writer). No worker is made unless the model fits hyper-parameters.
  FitScheduler(const ModelOptions& options, Host* host, std::function<void()> fit_ready);

  // Writer, after each applied batch: picks up a finished fit (logging it when its values
  // changed) and starts the next one when it is due.
  void AfterBatch(LearnedState* state);
  // Writer: a hyper-parameter record was applied (whatever its outcome).
  void HyperparametersApplied() { hyperparameters_queued_ = false; }
  // Cancels a running fit; its result will not be applied any more. False when the fit is
  // still in a likelihood evaluation at `deadline` (FitWorker::Stop).
  bool Stop(absl::Time deadline = absl::InfiniteFuture());
  // Cancels a running fit without waiting for it (FitWorker::RequestStop); no fit starts after.
  void RequestStop();

  Stats stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // Tests only: fits started from now on run `hook` after each likelihood evaluation, on the
  // fit thread (FitSpec::after_evaluation), e.g. to hold a fit inside one. Null removes it.
  void SetEvaluationHookForTesting(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(stats_mu_);

 private:
  void DecideFits(LearnedState* state);
  // Logs a hyper-parameter record; false if it could not be logged.
  bool Queue(HyperparametersOp op);
  void StartFit(LearnedState* state);
  void FinishFit(const LearnedState& state, FitWorker::Outcome outcome);

  const ModelOptions& options_;
  Host* const host_;
  std::unique_ptr<FitWorker> fitter_;  // null unless the model fits hyper-parameters

  // Writer-owned. A hyper-parameter record this writer logged is not applied yet: no fit is
  // finished or started, and no coarsening decided, against values that are about to change.
  bool hyperparameters_queued_ = false;
  // ... and that record holds one of the fits in flight until the writer has decided, with the
  // values it sets, whether a fit is due (AfterBatch).
  bool hyperparameters_queued_hold_ = false;
  // When the last fit started (RefitOptions::min_seconds_between), and how many fits started
  // without waiting for it while the model was young (at most kMaxYoungFits; AfterBatch).
  absl::Time last_fit_started_ = absl::InfinitePast();
  int young_fits_ = 0;

  mutable Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
  std::function<void()> evaluation_hook_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_FIT_SCHEDULER_H_
