// The background threads' attributes (core/base/thread_priority.h), read back from the kernel.
#include "core/base/thread_priority.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace graphbandit {
namespace {

std::string ThreadComm() {
  std::ifstream in("/proc/self/task/" + std::to_string(syscall(SYS_gettid)) + "/comm");
  std::string name;
  std::getline(in, name);
  return name;
}

TEST(ThreadPriorityTest, NamesAreSetAndCutToTheKernelLimit) {
  std::string short_name, long_name;
  std::thread([&] {
    SetThreadName("gb-writer");
    short_name = ThreadComm();
    SetThreadName("gb-a-name-longer-than-fifteen");
    long_name = ThreadComm();
  }).join();
  EXPECT_EQ(short_name, "gb-writer");
  EXPECT_EQ(long_name, "gb-a-name-longe");  // 15 characters
}

TEST(ThreadPriorityTest, BackgroundThreadsAreIdleClassAndLeaveTheOthersAlone) {
  const int own_policy = sched_getscheduler(0);  // 0: the calling thread
  int background_policy = -1, background_nice = 0;
  std::thread([&] {
    SetThreadBackground();
    background_policy = sched_getscheduler(0);
    background_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  }).join();
  // Where the policy is refused (a seccomp profile), the fallback: nice 19.
  EXPECT_TRUE(background_policy == SCHED_IDLE || background_nice == 19)
      << "policy " << background_policy << ", nice " << background_nice;
  EXPECT_EQ(sched_getscheduler(0), own_policy);  // the test's own thread is untouched
}

TEST(ThreadPriorityTest, NiceIsPerThread) {
  int niced = 0, main_nice_after = 0;
  const int main_nice = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  std::thread([&] {
    SetThreadNice(19);
    niced = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  }).join();
  main_nice_after = getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)));
  EXPECT_EQ(niced, 19);
  EXPECT_EQ(main_nice_after, main_nice);
}

}  // namespace
}  // namespace graphbandit
