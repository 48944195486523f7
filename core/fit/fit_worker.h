// The helper thread on which a model fits its hyper-parameters (core/fit/hyperparameter_fit.h):
// one fit at a time, off the writer and off the decision path. The writer hands it a job (a
// copy of the recent observations and of what the fit needs), goes on applying the log, and
// picks the outcome up when `ready` tells it one is waiting; it then logs the fitted values and
// applies them in log order (core/model/model.h). Stop() cancels a running fit (the optimiser
// checks between likelihood evaluations) and joins the thread. The thread runs at nice
// kFitNice: under a saturating load the fits wait for idle cycles (and land later in the log)
// instead of taking a core from the decisions; when the machine has spare cycles they run at
// full speed.
#ifndef GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_
#define GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "core/base/sync.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"

namespace graphbandit {

inline constexpr int kFitNice = 19;

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

  // True from Start() until the outcome has been taken.
  bool busy() const ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a job; false (and nothing happens) when busy or stopped.
  bool Start(Job job) ABSL_LOCKS_EXCLUDED(mu_);
  // The finished job's outcome, once.
  std::optional<Outcome> Take() ABSL_LOCKS_EXCLUDED(mu_);
  // Cancels a running fit and joins the thread; later Start() calls return false.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop();

  std::function<void()> ready_;
  std::atomic<bool> cancel_{false};
  mutable Mutex mu_;
  CondVar cv_;
  std::optional<Job> job_ ABSL_GUARDED_BY(mu_);
  std::optional<Outcome> outcome_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FIT_FIT_WORKER_H_
