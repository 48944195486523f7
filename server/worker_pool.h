// A fixed set of threads for the calls that wait (a reward for room in its model's queue or for
// the cluster's log, a decision with min_model_version for the published state): gRPC's
// callback threads hand them over instead of blocking, so decisions that need no wait keep every
// core. The threads are started once; nothing is created per request. The queue is bounded: a
// call that finds it full is refused at once (the caller answers RESOURCE_EXHAUSTED) rather
// than piling up.
#ifndef GRAPHBANDIT_SERVER_WORKER_POOL_H_
#define GRAPHBANDIT_SERVER_WORKER_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/base/sync.h"

namespace graphbandit::server {

class WorkerPool {
 public:
  // `threads` >= 1 workers; at most `max_queued` tasks waiting for one.
  WorkerPool(int threads, int max_queued);
  ~WorkerPool();  // runs what is queued, then joins
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; false (task dropped) when the queue is full or the pool is stopping.
  bool Submit(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

  int threads() const { return static_cast<int>(threads_.size()); }
  int max_queued() const { return max_queued_; }
  int64_t queued() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t refused() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  const int max_queued_;
  mutable Mutex mu_;
  CondVar ready_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> threads_;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_WORKER_POOL_H_
