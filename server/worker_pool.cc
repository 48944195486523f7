#include "server/worker_pool.h"

#include <algorithm>
#include <utility>

#include "core/base/thread_priority.h"

namespace graphbandit::server {

WorkerPool::WorkerPool(int threads, int max_queued) : max_queued_(std::max(1, max_queued)) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back([this] {
      SetThreadName("gb-waiter");
      Loop();
    });
  }
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  ready_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::Submit(std::function<void()> task) {
  MutexLock lock(&mu_);
  if (stopping_ || static_cast<int>(queue_.size()) >= max_queued_) {
    ++refused_;
    return false;
  }
  queue_.push_back(std::move(task));
  ready_.Signal();
  return true;
}

int64_t WorkerPool::queued() const {
  MutexLock lock(&mu_);
  return static_cast<int64_t>(queue_.size());
}

int64_t WorkerPool::refused() const {
  MutexLock lock(&mu_);
  return refused_;
}

void WorkerPool::Loop() {
  for (;;) {
    std::function<void()> task;
    {
      MutexLock lock(&mu_);
      ready_.Wait(&mu_,
                  [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace graphbandit::server
