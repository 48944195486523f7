// A log that cannot be written (a full disk, an I/O error; injected here with the storage test
// hook, and on a real size-limited tmpfs where one can be mounted): the model keeps deciding
// (unlogged), refuses changes with UNAVAILABLE naming the cause, reports itself degraded,
// repairs its log by itself once writing works again, and loses nothing it acknowledged.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <atomic>
#include <cerrno>
#include <fstream>

#include "core/storage/fault_injection.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using storage::LogIo;
using ::testing::HasSubstr;

// Injects `err` into every log write and sync (and the repair's truncation) while `on`.
class InjectedFault {
 public:
  explicit InjectedFault(int err) : err_(err) {
    storage::SetLogFaultForTesting([this](LogIo, const std::string&) { return on_ ? err_ : 0; });
  }
  ~InjectedFault() { storage::SetLogFaultForTesting(nullptr); }
  void Set(bool on) { on_ = on; }

 private:
  const int err_;
  std::atomic<bool> on_{false};
};

bool WaitUntilHealthy(Model* model, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (model->LogDegraded()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

absl::StatusOr<RewardResult> Reward(Engine& engine, const std::string& event_id, double value) {
  return engine.ReportReward({event_id, value, {}, ""});
}

TEST(DegradedLogTest, DecisionsContinueWritesFailPreciselyAndTheLogRepairsItself) {
  TempDir dir;
  InjectedFault fault(ENOSPC);
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  // Acknowledged before the disk fills: 10 rewards, and one decision still waiting.
  for (int i = 0; i < 10; ++i) {
    OwnedRequest request = OneArm("before-" + std::to_string(i));
    ASSERT_TRUE(engine->SelectArm(request.View()).ok());
    ASSERT_EQ(Reward(*engine, request.event_id, 0.5)->outcome, RewardOutcome::kAccepted);
  }
  auto waiting = engine->SelectArm(OneArm("waiting").View());
  ASSERT_TRUE(waiting.ok());
  EXPECT_TRUE(waiting->logged);

  fault.Set(true);
  // The first write that fails makes the model degraded; the reward is refused, naming why.
  auto refused = Reward(*engine, "waiting", 1.0);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("No space left on device"));
  EXPECT_TRUE(model->LogDegraded());
  const ModelStats degraded = model->Stats();
  EXPECT_TRUE(degraded.log.degraded);
  EXPECT_EQ(degraded.log.reason, "disk_full");
  EXPECT_EQ(degraded.log.degraded_episodes, 1);

  // Decisions are still served, from the last state, and say they were not logged. (Quiet
  // first: a fit started by the earlier rewards may still publish its state.)
  model->WaitForFits();
  const uint64_t version = model->View()->version;
  for (int i = 0; i < 5; ++i) {
    auto decision = engine->SelectArm(OneArm("while-full-" + std::to_string(i)).View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    EXPECT_FALSE(decision->logged);
    EXPECT_EQ(decision->model_version, version);
  }
  EXPECT_EQ(model->Stats().unlogged_decisions, 5);
  // Their rewards are unknown; graph changes are refused like rewards.
  EXPECT_EQ(Reward(*engine, "while-full-0", 1.0)->outcome, RewardOutcome::kUnknownEvent);
  const std::vector<std::string> users = {"bob"};
  auto added = model->AddUsers(users, absl::InfiniteFuture());
  EXPECT_EQ(added.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(added.status().message()), HasSubstr("No space left on device"));

  // Writing works again: the model repairs its log by itself (the repairer's back-off starts at
  // 100 ms) and accepts changes again.
  fault.Set(false);
  ASSERT_TRUE(WaitUntilHealthy(model, absl::Seconds(20)));
  EXPECT_FALSE(model->Stats().log.degraded);
  auto again = Reward(*engine, "waiting", 1.0);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome, RewardOutcome::kAccepted);
  auto logged = engine->SelectArm(OneArm("after").View());
  ASSERT_TRUE(logged.ok());
  EXPECT_TRUE(logged->logged);
  ASSERT_EQ(Reward(*engine, "after", 0.25)->outcome, RewardOutcome::kAccepted);
  model->WaitForFits();
  const int64_t learned = model->View()->rewards_learned;
  EXPECT_EQ(learned, 12);

  // A crash now: everything acknowledged is on disk, in order.
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  auto reopened = Reopen(crashed);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  Model* recovered = *(*reopened)->FindModel("");
  EXPECT_TRUE(recovered->recovery().damage.empty());
  EXPECT_EQ(recovered->View()->rewards_learned, learned);
  std::filesystem::remove_all(crashed);
}

// A failed fdatasync after successful writes: the records written since the last sync were
// applied; the repair cuts the segment back and writes them again, so they survive a crash.
TEST(DegradedLogTest, RecordsWrittenButNotSyncedAreWrittenAgainByTheRepair) {
  TempDir dir;
  std::atomic<bool> fail_syncs{false};
  storage::SetLogFaultForTesting(
      [&](LogIo io, const std::string&) { return fail_syncs && io == LogIo::kSync ? EIO : 0; });
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  // Decisions alone never wait for a sync: these are written, not yet synced.
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(engine->SelectArm(OneArm("d" + std::to_string(i)).View()).ok());
  fail_syncs = true;
  auto refused = Reward(*engine, "d0", 1.0);  // written, applied, but its sync fails
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("Input/output error"));
  EXPECT_EQ(model->Stats().log.reason, "io_error");
  EXPECT_FALSE(model->RepairLog().ok());  // still failing: stays degraded
  EXPECT_TRUE(model->LogDegraded());
  fail_syncs = false;
  ASSERT_TRUE(WaitUntilHealthy(model, absl::Seconds(20)));
  EXPECT_GE(model->Stats().log.repair_attempts, 1);
  // The reward was applied before its sync failed: a retry is a duplicate, not a second lesson.
  EXPECT_EQ(Reward(*engine, "d0", 1.0)->outcome, RewardOutcome::kDuplicate);
  ASSERT_EQ(Reward(*engine, "d1", 0.5)->outcome, RewardOutcome::kAccepted);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 2);
  storage::SetLogFaultForTesting(nullptr);

  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  auto reopened = Reopen(crashed);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  Model* recovered = *(*reopened)->FindModel("");
  EXPECT_TRUE(recovered->recovery().damage.empty());
  EXPECT_EQ(recovered->View()->rewards_learned, 2);
  // The decisions written before the failure are all there: d2 and d3 can still be rewarded.
  EXPECT_EQ(Reward(**reopened, "d2", 1.0)->outcome, RewardOutcome::kAccepted);
  EXPECT_EQ(Reward(**reopened, "d3", 1.0)->outcome, RewardOutcome::kAccepted);
  std::filesystem::remove_all(crashed);
}

// A failed write leaves the complete records before it intact: they are kept even if the
// process ends before the repair (no copy needs writing again).
TEST(DegradedLogTest, AFailedWriteKeepsTheRecordsBeforeItEvenWithoutARepair) {
  TempDir dir;
  std::atomic<bool> fail_writes{false};
  storage::SetLogFaultForTesting([&](LogIo io, const std::string&) {
    return fail_writes && io == LogIo::kWrite ? ENOSPC : 0;
  });
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(engine->SelectArm(OneArm("w" + std::to_string(i)).View()).ok());
  }
  fail_writes = true;
  EXPECT_EQ(Reward(*engine, "w0", 1.0).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(model->LogDegraded());
  // Give the repairer time to act (it needs no write: it cuts off the partial record only),
  // then the process ends (a copy of the directory is what a restart would see).
  absl::SleepFor(absl::Milliseconds(400));
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  storage::SetLogFaultForTesting(nullptr);
  auto reopened = Reopen(crashed);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Reward(**reopened, "w" + std::to_string(i), 1.0)->outcome, RewardOutcome::kAccepted)
        << i;
  }
  reopened->reset();
  std::filesystem::remove_all(crashed);
  ASSERT_TRUE(WaitUntilHealthy(model, absl::Seconds(20)));
}

// The real thing where the machine allows it: a 1 MiB tmpfs as the state directory, filled.
TEST(DegradedLogTest, ARealFullFilesystem) {
  TempDir mount_point;
  if (::mount("graphbandit-test", mount_point.path().c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); the injected-fault tests above cover the same paths";
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{mount_point.path()};
  const std::string state = mount_point.path() + "/state";
  int64_t acknowledged = 0;
  {
    auto engine = OpenEngine({}, state);
    Model* model = *engine->FindModel("");
    // Fill the filesystem but for a few KiB.
    const std::string filler = mount_point.path() + "/filler";
    {
      std::ofstream out(filler, std::ios::binary);
      const std::string block(4096, 'x');
      while (out.write(block.data(), block.size())) {
      }
    }
    std::filesystem::resize_file(filler, std::filesystem::file_size(filler) - 16 * 1024);
    // Decide and reward until the disk is full.
    int i = 0;
    for (; i < 100000 && !model->LogDegraded(); ++i) {
      const std::string id = "e" + std::to_string(i);
      auto decision = engine->SelectArm(OneArm(id).View());
      ASSERT_TRUE(decision.ok()) << decision.status();
      if (!decision->logged) break;
      auto reward = Reward(*engine, id, 0.5);
      if (reward.ok() && reward->outcome == RewardOutcome::kAccepted) ++acknowledged;
    }
    ASSERT_TRUE(model->LogDegraded()) << "the disk never filled after " << i << " rounds";
    EXPECT_EQ(model->Stats().log.reason, "disk_full");
    auto refused = Reward(*engine, "e0", 1.0);
    EXPECT_FALSE(refused.ok() && refused->outcome == RewardOutcome::kAccepted);
    // The operator frees space; the model recovers by itself.
    std::filesystem::remove(filler);
    ASSERT_TRUE(WaitUntilHealthy(model, absl::Seconds(20)));
    auto after = engine->SelectArm(OneArm("after").View());
    ASSERT_TRUE(after.ok());
    EXPECT_TRUE(after->logged);
    ASSERT_EQ(Reward(*engine, "after", 1.0)->outcome, RewardOutcome::kAccepted);
    ++acknowledged;
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, acknowledged);
  }
  auto reopened = Reopen(state);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*(*reopened)->FindModel(""))->View()->rewards_learned, acknowledged);
}

}  // namespace
}  // namespace graphbandit
