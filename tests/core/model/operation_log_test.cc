// OperationLog::NotifyDurable: a callback answered OK only once an fdatasync that began after
// its record was written has succeeded, exactly once, with the failure when the sync fails,
// and by Close or the destructor when the log ends first.
#include "core/model/operation_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/storage/fault_injection.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using storage::LogIo;
using ::testing::HasSubstr;

// One callback's answer, and how many times it came.
struct Answer {
  absl::Notification done;
  absl::Status status;
  std::atomic<int> calls{0};
};

OperationLog::DurableCallback Into(Answer* answer) {
  return [answer](absl::Status status) {
    answer->status = std::move(status);
    if (answer->calls.fetch_add(1) == 0) answer->done.Notify();
  };
}

Durability Policy(Durability::Sync sync, absl::Duration interval = absl::Milliseconds(2)) {
  Durability durability;
  durability.sync = sync;
  durability.group_commit_interval = interval;
  return durability;
}

// Counts the syncs the log starts, noting how many appends had begun by then.
class SyncWatch {
 public:
  explicit SyncWatch(int fail_with = 0) : fail_with_(fail_with) {
    storage::SetLogFaultForTesting([this](LogIo io, const std::string&) {
      if (io != LogIo::kSync) return 0;
      syncs_.fetch_add(1);
      const int64_t begun = appends_begun_.load();
      int64_t seen = covered_.load();
      while (begun > seen && !covered_.compare_exchange_weak(seen, begun)) {
      }
      return fail_with_;
    });
  }
  ~SyncWatch() { storage::SetLogFaultForTesting(nullptr); }
  void AppendBegins() { appends_begun_.fetch_add(1); }
  int64_t syncs() const { return syncs_.load(); }
  // The most appends begun before some sync began: no sync covered a later record.
  int64_t covered() const { return covered_.load(); }

 private:
  const int fail_with_;
  std::atomic<int64_t> syncs_{0};
  std::atomic<int64_t> appends_begun_{0};
  std::atomic<int64_t> covered_{0};
};

std::unique_ptr<OperationLog> OpenLog(const TempDir& dir, Durability durability) {
  auto log = std::make_unique<OperationLog>("m", durability);
  EXPECT_TRUE(log->StartSegment(dir.path() + "/log-1", 0).ok());
  log->StartThreads();
  return log;
}

TEST(OperationLogTest, EveryRecordAnswersAfterASyncThatCoversTheRecord) {
  TempDir dir;
  SyncWatch watch;
  auto log = OpenLog(dir, Policy(Durability::Sync::kEveryRecord));
  for (int i = 0; i < 3; ++i) {
    watch.AppendBegins();
    ASSERT_TRUE(log->Append(1, "record").ok());
  }
  Answer third;
  log->NotifyDurable(3, Into(&third));
  ASSERT_TRUE(third.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(third.status.ok()) << third.status;
  EXPECT_GE(watch.covered(), 3);
  EXPECT_GE(log->syncs(), 1);
  // An earlier record is covered already: answered at once, without another sync.
  const int64_t syncs = watch.syncs();
  Answer second;
  log->NotifyDurable(2, Into(&second));
  EXPECT_TRUE(second.done.HasBeenNotified());
  EXPECT_TRUE(second.status.ok());
  EXPECT_EQ(watch.syncs(), syncs);
  log->Close(3);
  EXPECT_EQ(third.calls.load(), 1);
  EXPECT_EQ(second.calls.load(), 1);
}

TEST(OperationLogTest, ConcurrentCallersAreEachAnsweredOnceAndOnlyWhenCovered) {
  TempDir dir;
  SyncWatch watch;
  auto log = OpenLog(dir, Policy(Durability::Sync::kEveryRecord));
  constexpr int kThreads = 6;
  constexpr int kPerThread = 150;
  Mutex append_mu;  // sequence numbers follow the appends, as in the model
  uint64_t last_seq = 0;
  std::vector<std::unique_ptr<Answer>> answers(kThreads * kPerThread);
  std::vector<uint64_t> seqs(answers.size());
  std::atomic<int> early{0};  // answered OK before a sync that could cover them had begun
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const size_t slot = static_cast<size_t>(t * kPerThread + i);
        answers[slot] = std::make_unique<Answer>();
        {
          MutexLock lock(&append_mu);
          watch.AppendBegins();
          ASSERT_TRUE(log->Append(1, "payload").ok());
          seqs[slot] = ++last_seq;
        }
        Answer* answer = answers[slot].get();
        const uint64_t seq = seqs[slot];
        log->NotifyDurable(seq, [answer, seq, &watch, &early](absl::Status status) {
          if (status.ok() && watch.covered() < static_cast<int64_t>(seq)) early.fetch_add(1);
          answer->status = std::move(status);
          if (answer->calls.fetch_add(1) == 0) answer->done.Notify();
        });
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& answer : answers) {
    ASSERT_TRUE(answer->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_TRUE(answer->status.ok()) << answer->status;
  }
  EXPECT_EQ(early.load(), 0);
  log->Close(last_seq);
  for (const auto& answer : answers) EXPECT_EQ(answer->calls.load(), 1);
}

TEST(OperationLogTest, AFailedSyncAnswersWithTheFailure) {
  TempDir dir;
  SyncWatch watch(/*fail_with=*/EIO);
  auto log = OpenLog(dir, Policy(Durability::Sync::kEveryRecord));
  watch.AppendBegins();
  ASSERT_TRUE(log->Append(1, "record").ok());
  Answer answer;
  log->NotifyDurable(1, Into(&answer));
  ASSERT_TRUE(answer.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(answer.status.message()), HasSubstr("Input/output error"));
  EXPECT_TRUE(log->degraded());
  // While degraded, a new caller for the same record gets the failure at once.
  Answer again;
  log->NotifyDurable(1, Into(&again));
  EXPECT_TRUE(again.done.HasBeenNotified());
  EXPECT_EQ(again.status.code(), absl::StatusCode::kUnavailable);
  log->StopThreads();
  EXPECT_EQ(answer.calls.load(), 1);
}

TEST(OperationLogTest, GroupCommitAnswersAtTheSyncerTickAndCloseAnswersTheRest) {
  TempDir dir;
  {
    SyncWatch watch;
    auto log = OpenLog(dir, Policy(Durability::Sync::kGroupCommit, absl::Milliseconds(5)));
    watch.AppendBegins();
    ASSERT_TRUE(log->Append(1, "record").ok());
    Answer ticked;
    log->NotifyDurable(1, Into(&ticked));
    ASSERT_TRUE(ticked.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
    EXPECT_TRUE(ticked.status.ok()) << ticked.status;
    EXPECT_GE(watch.covered(), 1);
    log->Close(1);
  }
  TempDir second;
  SyncWatch watch;
  // A syncer that never ticks within the test: only Close's final sync covers the record.
  auto log = OpenLog(second, Policy(Durability::Sync::kGroupCommit, absl::Hours(1)));
  watch.AppendBegins();
  ASSERT_TRUE(log->Append(1, "record").ok());
  Answer waiting;
  log->NotifyDurable(1, Into(&waiting));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(waiting.done.HasBeenNotified());
  log->StopThreads();
  log->Close(1);
  ASSERT_TRUE(waiting.done.HasBeenNotified());
  EXPECT_TRUE(waiting.status.ok()) << waiting.status;
  EXPECT_EQ(watch.syncs(), 1);
  // After Close, a covered record is answered at once.
  Answer after;
  log->NotifyDurable(1, Into(&after));
  EXPECT_TRUE(after.done.HasBeenNotified());
  EXPECT_TRUE(after.status.ok());
}

TEST(OperationLogTest, ALogDestroyedUnclosedAnswersWhatIsLeftUnavailable) {
  TempDir dir;
  SyncWatch watch;
  auto log = OpenLog(dir, Policy(Durability::Sync::kGroupCommit, absl::Hours(1)));
  ASSERT_TRUE(log->Append(1, "record").ok());
  Answer answer;
  log->NotifyDurable(1, Into(&answer));
  log.reset();
  ASSERT_TRUE(answer.done.HasBeenNotified());
  EXPECT_EQ(answer.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(watch.syncs(), 0);
}

TEST(OperationLogTest, UnderTheOsPolicyAWrittenRecordIsAnsweredAtOnce) {
  TempDir dir;
  SyncWatch watch;
  auto log = OpenLog(dir, Policy(Durability::Sync::kOs));
  ASSERT_TRUE(log->Append(1, "record").ok());
  Answer answer;
  log->NotifyDurable(1, Into(&answer));
  EXPECT_TRUE(answer.done.HasBeenNotified());
  EXPECT_TRUE(answer.status.ok());
  EXPECT_EQ(watch.syncs(), 0);
  log->Close(1);
}

}  // namespace
}  // namespace graphbandit
