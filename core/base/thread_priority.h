// Per-thread attributes of the background threads (the model's writer, the fit helper, the
// log's syncer and repairer, the server's waiter pool): a name, so that `top -H` and `perf`
// show who uses the CPU, and a CPU priority, so that when the cores are saturated, decisions,
// which a caller waits for, go first. On Linux the nice value is per thread (setpriority on
// the thread id); elsewhere both do nothing. A niced thread still runs at full speed whenever
// a core is idle.
#ifndef GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_
#define GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <thread>

namespace graphbandit {

// Sets the calling thread's nice value (0 normal, 19 lowest). Best effort: an error (e.g. a
// container that forbids it) leaves the priority unchanged.
inline void SetThreadNice(int nice) {
#if defined(__linux__)
  setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), nice);
#else
  (void)nice;
#endif
}

// Makes the calling thread background work: Linux's SCHED_IDLE policy, under which it runs
// only on cycles no normal thread of the process wants (a waking normal thread preempts it at
// once, and the scheduler counts its core as free when placing woken threads). A nice value,
// even 19, does neither: a niced thread keeps its core until its slice ends, and under a load
// near saturation that took a fifth of the decisions' CPU for the length of a fit. Falls back
// to nice 19 where the policy is refused.
inline void SetThreadBackground() {
#if defined(__linux__)
  sched_param param{};
  param.sched_priority = 0;
  if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &param) == 0) return;
#endif
  SetThreadNice(19);
}

// Gives a thread that SetThreadBackground demoted normal scheduling again (e.g. to let it reach
// a cancellation check on a busy machine). Best effort: an unprivileged process may not be
// allowed to (Linux lets it only within its RLIMIT_NICE); false when refused.
inline bool SetThreadForeground(std::thread& thread) {
#if defined(__linux__)
  sched_param param{};
  param.sched_priority = 0;
  return pthread_setschedparam(thread.native_handle(), SCHED_OTHER, &param) == 0;
#else
  static_cast<void>(thread);
  return true;
#endif
}

// Names the calling thread (at most 15 characters are kept, the kernel's limit). Best effort.
inline void SetThreadName(const char* name) {
#if defined(__linux__)
  char truncated[16] = {};
  for (int i = 0; i < 15 && name[i] != '\0'; ++i) truncated[i] = name[i];
  pthread_setname_np(pthread_self(), truncated);
#else
  (void)name;
#endif
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_
