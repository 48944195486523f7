// Per-thread CPU priority for the background threads (the model's writer, the fit helper):
// when the cores are saturated, decisions, which a caller waits for, go first. On Linux the
// nice value is per thread (setpriority on the thread id); elsewhere this does nothing. A
// niced thread still runs at full speed whenever a core is idle.
#ifndef GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_
#define GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_

#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

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

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_THREAD_PRIORITY_H_
