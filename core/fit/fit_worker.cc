#include "core/fit/fit_worker.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "core/base/log.h"
#include "core/base/thread_priority.h"

namespace graphbandit {

FitWorker::FitWorker(std::function<void()> ready) : ready_(std::move(ready)) {
  thread_ = std::thread([this] {
    SetThreadName("gb-fit");
    Loop();
    exited_.Notify();
  });
}

FitWorker::~FitWorker() { Stop(); }

bool FitWorker::busy() const {
  MutexLock lock(&mu_);
  return stop_ || running_ || job_.has_value() || outcome_.has_value();
}

bool FitWorker::Start(Job job) {
  MutexLock lock(&mu_);
  if (stop_ || running_ || job_.has_value() || outcome_.has_value()) return false;
  job_ = std::move(job);
  cv_.SignalAll();
  return true;
}

std::optional<FitWorker::Outcome> FitWorker::Take() {
  MutexLock lock(&mu_);
  std::optional<Outcome> outcome = std::move(outcome_);
  outcome_.reset();
  return outcome;
}

void FitWorker::RequestStop() {
  bool fitting = false;
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    stop_ = true;
    fitting = running_;
    cv_.SignalAll();
  }
  cancel_.store(true);  // before ending a pause: the optimiser stops at its next check
  {
    // Not under mu_: the fit thread, idle class, may hold this lock while it waits for a core,
    // and the writer takes mu_ after every batch.
    MutexLock lock(&pause_mu_);
    pause_stop_ = true;
    pause_cv_.SignalAll();
  }
  if (!fitting) return;
  // Out of the background, so that a busy machine does not starve the fit of the CPU it needs
  // to reach the cancellation check. (Stop() joins the thread only under handle_mu_.)
  MutexLock handle(&handle_mu_);
  if (thread_.joinable() && !SetThreadForeground(thread_)) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      LogWarning(
          "a hyper-parameter fit being cancelled could not leave the idle scheduling class "
          "(this process may not raise a thread's priority: CAP_SYS_NICE or RLIMIT_NICE); on a "
          "busy machine its cancellation waits for idle cycles");
    }
  }
}

bool FitWorker::Stop(absl::Time deadline) {
  RequestStop();
  MutexLock handle(&handle_mu_);
  if (!thread_.joinable()) return true;
  if (!exited_.WaitUntil(deadline)) return false;
  thread_.join();
  return true;
}

absl::Duration FitPause(double evaluation_seconds, double cpu_share) {
  if (!(cpu_share > 0.0) || cpu_share >= 1.0 || !(evaluation_seconds > 0.0)) {
    return absl::ZeroDuration();
  }
  const double pause = evaluation_seconds * (1.0 / cpu_share - 1.0);
  return std::min(absl::Seconds(pause), kMaxFitPause);
}

void FitWorker::Pause(absl::Duration pause) {
  if (pause <= absl::ZeroDuration()) return;
  pauses_.fetch_add(1);
  // Its own lock: the writer takes mu_ after every batch (Take, busy), and this thread, idle
  // class, may wait long for a core while it holds a lock.
  MutexLock lock(&pause_mu_);
  pause_cv_.WaitFor(&pause_mu_, pause,
                    [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return pause_stop_; });
}

int64_t FitWorker::pauses() const { return pauses_.load(); }

void FitWorker::Loop() {
  SetThreadBackground();  // decisions and learning go first
  for (;;) {
    Job job;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_ || job_.has_value(); });
      if (stop_) return;
      job = std::move(*job_);
      job_.reset();
      running_ = true;
    }
    FitUsers users;
    users.graph = job.graph.get();
    users.fixed = job.fixed_users;
    job.spec.cancel = &cancel_;
    if (job.spec.cpu_share < 1.0) {
      job.spec.after_evaluation = [this, share = job.spec.cpu_share,
                                   then = std::move(job.spec.after_evaluation)](double seconds) {
        if (then) then(seconds);
        Pause(FitPause(seconds, share));
      };
    }
    Outcome outcome{FitHyperparameters(job.data, users, job.start, job.spec), job.fitted_at};
    {
      MutexLock lock(&mu_);
      running_ = false;
      if (stop_) return;
      outcome_ = std::move(outcome);
    }
    if (ready_) ready_();
  }
}

}  // namespace graphbandit
