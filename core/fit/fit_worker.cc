#include "core/fit/fit_worker.h"

#include <utility>

#include "core/base/thread_priority.h"

namespace graphbandit {

FitWorker::FitWorker(std::function<void()> ready) : ready_(std::move(ready)) {
  thread_ = std::thread([this] { Loop(); });
}

FitWorker::~FitWorker() { Stop(); }

bool FitWorker::busy() const {
  MutexLock lock(&mu_);
  return running_ || job_.has_value() || outcome_.has_value();
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

void FitWorker::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    cv_.SignalAll();
  }
  cancel_.store(true);
  if (thread_.joinable()) thread_.join();
}

void FitWorker::Loop() {
  SetThreadNice(kFitNice);  // background work: decisions and learning go first
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
