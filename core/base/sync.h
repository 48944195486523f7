// Locks for core: std::mutex and std::condition_variable behind Abseil's thread-safety
// annotations, so the locking rules stay written down and checked by clang, while
// ThreadSanitizer sees every acquire and release. (Debian's Abseil is not built with TSan, so
// TSan cannot see the synchronisation inside absl::Mutex and reports false races; core's stress
// test runs under TSan with these instead.)
#ifndef GRAPHBANDIT_CORE_BASE_SYNC_H_
#define GRAPHBANDIT_CORE_BASE_SYNC_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace graphbandit {

class ABSL_LOCKABLE Mutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Shared (reader) locking.
  void ReaderLock() ABSL_SHARED_LOCK_FUNCTION() { mu_.lock_shared(); }
  void ReaderUnlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock_shared(); }

 private:
  friend class CondVar;
  std::shared_mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* mu_;
};

class ABSL_SCOPED_LOCKABLE ReaderMutexLock {
 public:
  explicit ReaderMutexLock(Mutex* mu) ABSL_SHARED_LOCK_FUNCTION(mu) : mu_(mu) { mu_->ReaderLock(); }
  ~ReaderMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->ReaderUnlock(); }
  ReaderMutexLock(const ReaderMutexLock&) = delete;
  ReaderMutexLock& operator=(const ReaderMutexLock&) = delete;

 private:
  Mutex* mu_;
};

// A condition variable over Mutex (held exclusively by the waiter).
class CondVar {
 public:
  // Waits until pred() holds. REQUIRES: *mu held; it is released while waiting.
  template <typename Predicate>
  void Wait(Mutex* mu, Predicate pred) {
    std::unique_lock<std::shared_mutex> lock(mu->mu_, std::adopt_lock);
    cv_.wait(lock, pred);
    lock.release();  // the caller still owns the mutex
  }
  // As Wait, but gives up at `deadline`; returns pred().
  template <typename Predicate>
  bool WaitUntil(Mutex* mu, absl::Time deadline, Predicate pred) {
    std::unique_lock<std::shared_mutex> lock(mu->mu_, std::adopt_lock);
    const bool result = cv_.wait_until(lock, absl::ToChronoTime(deadline), pred);
    lock.release();
    return result;
  }
  // As Wait, but gives up after `timeout`; returns pred().
  template <typename Predicate>
  bool WaitFor(Mutex* mu, absl::Duration timeout, Predicate pred) {
    return WaitUntil(mu, absl::Now() + timeout, pred);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable_any cv_;
};

// Set once; waiters block until then.
class Notification {
 public:
  void Notify() {
    MutexLock lock(&mu_);
    notified_ = true;
    cv_.SignalAll();
  }
  void Wait() {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return notified_; });
  }
  // Returns whether it was notified before `deadline`.
  bool WaitUntil(absl::Time deadline) {
    MutexLock lock(&mu_);
    return cv_.WaitUntil(&mu_, deadline,
                         [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return notified_; });
  }

 private:
  Mutex mu_;
  CondVar cv_;
  bool notified_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_SYNC_H_
