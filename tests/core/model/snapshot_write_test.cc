// Snapshots are written on a background thread (core/model/snapshots.h): the writer goes on
// learning while one is written, one is written at a time, a snapshot asked for while one is
// being written is a new one, answered once it is on disk, and a write that outlasts the
// shutdown deadline does not hold the shutdown.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "core/model/engine.h"
#include "core/model/ledger_records.h"
#include "core/model/snapshots.h"
#include "core/storage/snapshot_file.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

// Holds the model's first background snapshot write before its file until released (or the
// hold is destroyed, or 20 s have passed). Its state is shared with the hook, which may outlive the
// test's frame.
class FirstWriteHold {
 public:
  explicit FirstWriteHold(Model* model) : state_(std::make_shared<State>()) {
    model->SetSnapshotWriteHookForTesting([state = state_] {
      if (state->writes.fetch_add(1) == 0) {
        state->entered.Notify();
        // Bounded, so that a change that makes someone wait for the write fails the test
        // instead of hanging it.
        state->release.WaitForNotificationWithTimeout(absl::Seconds(20));
      }
    });
  }
  ~FirstWriteHold() { Release(); }
  bool WaitUntilHeld() { return state_->entered.WaitForNotificationWithTimeout(absl::Seconds(30)); }
  bool held() const { return state_->entered.HasBeenNotified(); }
  void Release() {
    if (!state_->release.HasBeenNotified()) state_->release.Notify();
  }
  int writes() const { return state_->writes.load(); }

 private:
  struct State {
    std::atomic<int> writes{0};
    absl::Notification entered, release;
  };
  std::shared_ptr<State> state_;
};

EngineOptions WithCadence100(const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  options.durability.snapshot_every_records = 100;
  options.durability.sync = Durability::Sync::kOs;  // the test must not wait for the disk
  return options;
}

// Rounds (each a rewarded decision) until the first scheduled snapshot is being written (and
// held); *rounds counts them.
void PlayUntilHeld(Engine& engine, FirstWriteHold& hold, int64_t* rounds) {
  for (*rounds = 0; *rounds < 1000 && !hold.held(); ++*rounds) {
    ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 1));
  }
  ASSERT_TRUE(hold.WaitUntilHeld());
}

// Waits (at most 30 s) until the model has learned `rewards`.
bool LearnedWithin30s(const Model& model, int64_t rewards) {
  const absl::Time cap = absl::Now() + absl::Seconds(30);
  while (model.View()->rewards_learned < rewards) {
    if (absl::Now() > cap) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// After each write, on the writer (at open and shutdown) or in the background, the memory of
// the state part goes back to the writer for the next snapshot to encode into; the file holds
// the state, then the ledger, under one checksum.
TEST(SnapshotWriteTest, TheStatesMemoryIsKeptForTheNextSnapshot) {
  TempDir tmp;
  absl::StatusOr<StateDirectory> dir = StateDirectory::Create(tmp.path() + "/model");
  ASSERT_TRUE(dir.ok()) << dir.status();
  SnapshotWriter writer(&*dir, /*every_records=*/0);
  EXPECT_TRUE(writer.TakeBuffer().empty());
  const std::string ledger = EncodeLedger(LedgerCapture());
  for (const bool background : {false, true}) {
    SCOPED_TRACE(background ? "in the background" : "on the writer");
    PreparedSnapshot prepared;
    prepared.seq = background ? 2 : 1;
    prepared.payload = std::string(1 << 20, background ? 'b' : 'a');
    const std::string state = prepared.payload;
    const char* memory = prepared.payload.data();
    absl::StatusOr<uint64_t> written;
    if (background) {
      writer.WriteInBackground(std::move(prepared));
      ASSERT_TRUE(writer.WaitForBackground(absl::Now() + absl::Seconds(30)));
      std::optional<absl::StatusOr<uint64_t>> taken = writer.TakeResult();
      ASSERT_TRUE(taken.has_value());
      written = *taken;
    } else {
      written = writer.Write(std::move(prepared));
    }
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(*written, background ? 2u : 1u);
    absl::StatusOr<storage::SnapshotContents> contents =
        storage::ReadSnapshotFile(dir->SnapshotPath(*written));
    ASSERT_TRUE(contents.ok()) << contents.status();
    EXPECT_EQ(contents->seq, *written);
    EXPECT_EQ(contents->payload, state + ledger);
    EXPECT_EQ(writer.TakeBuffer().data(), memory);
    EXPECT_TRUE(writer.TakeBuffer().empty());  // handed over once
  }
  EXPECT_EQ(writer.stats().written, 2);

  // A write that fails (its directory is gone) hands the memory back too.
  PreparedSnapshot failing;
  failing.seq = 3;
  failing.payload = std::string(1 << 20, 'c');
  const char* memory = failing.payload.data();
  std::filesystem::remove_all(dir->path());
  EXPECT_FALSE(writer.Write(std::move(failing)).ok());
  EXPECT_EQ(writer.TakeBuffer().data(), memory);
  EXPECT_EQ(writer.stats().written, 2);
}

TEST(SnapshotWriteTest, TheWriterGoesOnLearningWhileASnapshotIsWritten) {
  TempDir dir;
  auto opened = Engine::Open(WithCadence100(dir.path()));
  ASSERT_TRUE(opened.ok()) << opened.status();
  Engine& engine = **opened;
  Model* model = *engine.FindModel("");
  FirstWriteHold hold(model);
  int64_t learned = 0;
  ASSERT_NO_FATAL_FAILURE(PlayUntilHeld(engine, hold, &learned));
  ASSERT_TRUE(LearnedWithin30s(*model, learned));
  // Three more snapshot cadences of records while the first snapshot is held.
  ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 150));
  ASSERT_TRUE(LearnedWithin30s(*model, learned + 150)) << "learning waited for the write";
  EXPECT_EQ(model->Stats().snapshots_written, 0);
  EXPECT_EQ(hold.writes(), 1) << "a second snapshot started while the first was being written";

  // Asked for now, a snapshot waits for the one being written and is a new one after it.
  const uint64_t applied = model->View()->version;
  absl::StatusOr<uint64_t> asked = absl::UnknownError("not answered");
  std::thread asker([model, &asked] { asked = model->Snapshot(); });
  absl::SleepFor(absl::Milliseconds(50));  // lets the request arrive during the held write
  EXPECT_EQ(hold.writes(), 1);
  hold.Release();
  asker.join();
  ASSERT_TRUE(asked.ok()) << asked.status();
  model->WaitForSnapshotWrite();
  const ModelStats stats = model->Stats();
  EXPECT_EQ(hold.writes(), 2);
  EXPECT_EQ(stats.snapshots_written, 2);
  EXPECT_EQ(stats.last_snapshot_seq, *asked);
  EXPECT_GE(*asked, applied) << "the asked snapshot misses records applied before it was asked";
  EXPECT_TRUE(std::filesystem::exists(
      absl::StrFormat("%s/default/snapshot-%020d.snap", dir.path(), *asked)));

  // A restart finds every reward learned (the shutdown's snapshot after the asked one).
  opened->reset();
  auto reopened = Reopen(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const Model& restarted = **(*reopened)->FindModel("");
  EXPECT_GE(restarted.recovery().snapshot_seq, *asked);
  EXPECT_EQ(restarted.recovery().records_replayed, 0);
  EXPECT_EQ(restarted.View()->rewards_learned, learned + 150);
}

// A snapshot still being written at the shutdown deadline does not hold the shutdown: the log
// is closed without a final snapshot, and a restart replays it (nothing acknowledged is lost).
TEST(SnapshotWriteTest, AWriteThatOutlastsTheShutdownDeadlineDoesNotHoldIt) {
  TempDir dir;
  auto opened = Engine::Open(WithCadence100(dir.path()));
  ASSERT_TRUE(opened.ok()) << opened.status();
  Engine& engine = **opened;
  Model* model = *engine.FindModel("");
  FirstWriteHold hold(model);
  int64_t learned = 0;
  ASSERT_NO_FATAL_FAILURE(PlayUntilHeld(engine, hold, &learned));
  ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 20));
  learned += 20;
  ASSERT_TRUE(LearnedWithin30s(*model, learned));
  const absl::Time start = absl::Now();
  EXPECT_FALSE(model->Shutdown(absl::Now() + absl::Milliseconds(300)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(model->Stats().snapshots_written, 0);
  const std::string copy = CrashCopy(dir.path(), dir.path() + "-after-stop");
  hold.Release();  // the held write may finish now (into the original directory)
  auto reopened = Reopen(copy);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  const Model& restarted = **(*reopened)->FindModel("");
  EXPECT_EQ(restarted.recovery().snapshot_seq, 0u) << "no snapshot was written before the stop";
  EXPECT_GT(restarted.recovery().records_replayed, 0);
  EXPECT_EQ(restarted.View()->rewards_learned, learned);
  reopened->reset();
  std::filesystem::remove_all(copy);
}

}  // namespace
}  // namespace graphbandit
