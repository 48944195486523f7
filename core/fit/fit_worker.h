// The helper thread on which a model fits its hyper-parameters (core/fit/hyperparameter_fit.h):
// one fit at a time, off the writer and off the decision path. The writer hands it a job (a
// copy of the recent observations and of what the fit needs), goes on applying the log, and
// picks the outcome up when `ready` tells it one is waiting; it then logs the fitted values and
// applies them in log order (core/model/model.h). Stop() cancels a running fit (the optimiser
// checks between likelihood evaluations) and joins the thread. The thread is background
// work (SetThreadBackground, Linux's SCHED_IDLE): under load the fits wait for idle cycles (and
// land later in the log) instead of taking a core from the decisions; and a job whose
// spec.cpu_share is below 1 pauses after each likelihood evaluation of the optimiser
// (FitPause), so that even on an idle machine it uses about that share of a core.
#ifndef GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_
#define GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"

namespace graphbandit {

// The longest pause after one likelihood evaluation (a fit of a large model at a small share
// still makes progress every few seconds).
inline constexpr absl::Duration kMaxFitPause = absl::Seconds(5);

// The pause after an evaluation that took `evaluation_seconds`, so that the fit uses about
// `cpu_share` of the wall-clock time (RefitOptions::cpu_share): (1 / share - 1) times the
// evaluation, at most kMaxFitPause; none at a share of 1.
absl::Duration FitPause(double evaluation_seconds, double cpu_share);

class FitWorker {
 public:
  struct Job {
    FitData data;
    std::shared_ptr<const UserGraph> graph;         // a copy, when rho is fitted
    std::shared_ptr<const UserKernel> fixed_users;  // otherwise
    Hyperparameters start;
    FitSpec spec;
    int64_t fitted_at = 0;  // rewards learned when the job was made
  };
  struct Outcome {
    absl::StatusOr<FitResult> result;
    int64_t fitted_at = 0;
  };

  // `ready` runs on the helper thread each time an outcome becomes available.
  explicit FitWorker(std::function<void()> ready);
  ~FitWorker();
  FitWorker(const FitWorker&) = delete;
  FitWorker& operator=(const FitWorker&) = delete;

  // True from Start() until the outcome has been taken, and from RequestStop() on (no job can
  // start any more).
  bool busy() const ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a job; false (and nothing happens) when busy or stopped.
  bool Start(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // The finished job's outcome, once.
  std::optional<Outcome> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a running fit and joins the thread (a pause ends at once); later Start() calls
  // return false. The optimiser stops at its next check, after the likelihood evaluation in
  // progress, which on a busy machine can take long (the thread runs in the background): false
  // when the thread has not ended by `deadline`; it is then left running (not joined), and
  // the worker must not be destroyed before it ends.
  bool Stop(absl::Time deadline = absl::InfiniteFuture())
      ABSL_LOCKS_EXCLUDED(mu_, pause_mu_, handle_mu_);
  // Stop() without the wait: the fit is cancelled and the thread ends by itself; a later
  // Stop() joins it. Lets a shutdown stop the fit first and wait for it last.
  void RequestStop() ABSL_LOCKS_EXCLUDED(mu_, pause_mu_, handle_mu_);
  // Pauses begun so far between likelihood evaluations (RefitOptions::cpu_share < 1).
  int64_t pauses() const;

 private:
  void Loop();
  void Pause(absl::Duration pause) ABSL_LOCKS_EXCLUDED(mu_, pause_mu_);

  std::function<void()> ready_;
  std::atomic<bool> cancel_{false};
  mutable Mutex mu_;
  CondVar cv_;
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  std::optional<Outcome> outcome_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  // Pauses between evaluations (Pause) wait on their own lock, never on mu_.
  mutable Mutex pause_mu_;
  CondVar pause_cv_;
  bool pause_stop_ ABSL_GUARDED_BY(pause_mu_) = false;
  std::atomic<int64_t> pauses_{0};
  Notification exited_;  // the thread has left Loop
  // Held while the thread's handle is used outside the thread: a priority change, the join.
  Mutex handle_mu_;
  std::thread thread_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_
