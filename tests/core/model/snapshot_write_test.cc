// Snapshots are written on a background thread (core/model/snapshots.h): the writer goes on
// learning while one is written, one is written at a time, and a snapshot asked for while one
// is being written is a new one, answered once it is on disk.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "core/model/engine.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

TEST(SnapshotWriteTest, TheWriterGoesOnLearningWhileASnapshotIsWritten) {
  TempDir dir;
  EngineOptions options;
  options.state_dir = dir.path();
  options.durability.snapshot_every_records = 100;
  options.durability.sync = Durability::Sync::kOs;  // the test must not wait for the disk
  auto opened = Engine::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Engine& engine = **opened;
  Model* model = *engine.FindModel("");
  // The first background write is held before its file until `release`.
  std::atomic<int> writes{0};
  absl::Notification entered, release;
  model->SetSnapshotWriteHookForTesting([&writes, &entered, &release] {
    if (writes.fetch_add(1) == 0) {
      entered.Notify();
      release.WaitForNotification();
    }
  });
  struct Cleanup {  // also on a failed ASSERT: the background thread must not stay blocked
    absl::Notification* release;
    ~Cleanup() {
      if (!release->HasBeenNotified()) release->Notify();
    }
  } cleanup{&release};

  for (int round = 0; round < 1000 && !entered.HasBeenNotified(); ++round) {
    ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 1));
  }
  ASSERT_TRUE(entered.WaitForNotificationWithTimeout(absl::Seconds(30)));
  model->WaitForWriter();
  const int64_t learned = model->View()->rewards_learned;
  // Three more snapshot cadences of records while the first snapshot is held.
  ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 150));
  model->WaitForWriter();
  EXPECT_EQ(model->View()->rewards_learned, learned + 150) << "learning waited for the write";
  EXPECT_EQ(model->Stats().snapshots_written, 0);
  EXPECT_EQ(writes.load(), 1) << "a second snapshot started while the first was being written";

  // Asked for now, a snapshot waits for the one being written and is a new one after it.
  const uint64_t applied = model->View()->version;
  absl::StatusOr<uint64_t> asked = absl::UnknownError("not answered");
  std::thread asker([model, &asked] { asked = model->Snapshot(); });
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(writes.load(), 1);
  release.Notify();
  asker.join();
  ASSERT_TRUE(asked.ok()) << asked.status();
  model->WaitForSnapshotWrite();
  const ModelStats stats = model->Stats();
  EXPECT_EQ(writes.load(), 2);
  EXPECT_EQ(stats.snapshots_written, 2);
  EXPECT_EQ(stats.last_snapshot_seq, *asked);
  EXPECT_GE(*asked, applied) << "the asked snapshot misses records applied before it was asked";
  EXPECT_TRUE(std::filesystem::exists(
      absl::StrFormat("%s/default/snapshot-%020d.snap", dir.path(), *asked)));
  model->SetSnapshotWriteHookForTesting(nullptr);

  // A restart finds every reward learned (the shutdown's snapshot after the asked one).
  opened->reset();
  auto reopened = Reopen(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const Model& restarted = **(*reopened)->FindModel("");
  EXPECT_GE(restarted.recovery().snapshot_seq, *asked);
  EXPECT_EQ(restarted.recovery().records_replayed, 0);
  EXPECT_EQ(restarted.View()->rewards_learned, learned + 150);
}

}  // namespace
}  // namespace graphbandit
