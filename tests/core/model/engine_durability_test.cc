// Persistence and replay in-process (core/model/engine.h): bit-identical restarts and crash
// recovery, damaged logs and snapshots, the configured edge list.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "core/base/random.h"
#include "core/model/engine.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

TEST(EngineTest, RestartFromTheShutdownSnapshotIsBitIdentical) {
  TempDir dir;
  std::vector<double> before;
  int64_t learned = 0;
  uint64_t version = 0;
  {
    auto engine = OpenEngine({}, dir.path());
    before = DriveAndProbe(*engine, 80);
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    learned = model->View()->rewards_learned;
    version = model->View()->version;
    EXPECT_EQ(learned, 80);
  }
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->recovery().snapshot_seq, version);  // the shutdown snapshot holds everything
  EXPECT_EQ(model->recovery().records_replayed, 0);
  EXPECT_TRUE(model->recovery().damage.empty());
  EXPECT_EQ(model->View()->rewards_learned, learned);
  EXPECT_EQ(model->View()->version, version);
  EXPECT_EQ(model->View()->edges, 2);
  EXPECT_EQ(Probe(*engine), before);  // bit-identical
}

TEST(EngineTest, CrashRecoveryFromSnapshotPlusLogIsBitIdentical) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  DriveAndProbe(*engine, 40);
  auto snapshot = model->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // Decisions still waiting for their reward at the crash must survive it too.
  OwnedRequest open = ThreeArms("user1");
  open.event_id = "open-at-crash";
  auto open_decision = engine->SelectArm(open.View());
  ASSERT_TRUE(open_decision.ok());
  DriveAndProbe(*engine, 40);  // event ids e0..e39 again: retries, nothing new learned
  for (int round = 0; round < 30; ++round) {
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 5));
    request.event_id = absl::StrCat("late", round);
    auto decision = engine->SelectArm(request.View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.05 * (round % 7), {}, ""}).ok());
  }
  model->WaitForFits();
  const std::vector<double> before = Probe(*engine);
  const int64_t learned = model->View()->rewards_learned;
  const uint64_t version = model->View()->version;
  EXPECT_EQ(learned, 70);
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_EQ(again->recovery().snapshot_seq, *snapshot);
  EXPECT_GT(again->recovery().records_replayed, 30);
  EXPECT_TRUE(again->recovery().damage.empty());
  EXPECT_EQ(again->View()->rewards_learned, learned);
  EXPECT_GE(again->View()->version, version);  // the probes' decisions are logged too
  EXPECT_EQ(Probe(**recovered), before);       // bit-identical

  // The open decision is still open: its retry returns it, its reward is accepted once.
  auto retried = (*recovered)->SelectArm(open.View());
  ASSERT_TRUE(retried.ok());
  EXPECT_TRUE(retried->replayed);
  EXPECT_EQ(retried->arms[0].arm_id, open_decision->arms[0].arm_id);
  EXPECT_EQ(retried->arms[0].score, open_decision->arms[0].score);
  auto accepted = (*recovered)->ReportReward({"open-at-crash", 1.0, {}, ""});
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(accepted->outcome, RewardOutcome::kAccepted);
  // Rewards acknowledged before the crash are duplicates, not learned twice.
  auto repeated = (*recovered)->ReportReward({"late7", 1.0, {}, ""});
  ASSERT_TRUE(repeated.ok());
  EXPECT_EQ(repeated->outcome, RewardOutcome::kDuplicate);
  again->WaitForFits();
  EXPECT_EQ(again->View()->rewards_learned, learned + 1);
  (*recovered)->Shutdown();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, TornLogTailIsReportedAndTruncated) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 10));
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> segments = FilesMatching(crashed + "/default", "log-");
  ASSERT_EQ(segments.size(), 1u);
  std::filesystem::resize_file(segments[0], std::filesystem::file_size(segments[0]) - 5);

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_TRUE(again->recovery().truncated);
  ASSERT_EQ(again->recovery().damage.size(), 1u);
  EXPECT_THAT(again->recovery().damage[0], HasSubstr("truncated"));
  // The torn record was the last one: the LearnOp of the last reward's batch (the writer logs
  // one after each batch it applied). The reward survived: staged again by the replay, learned
  // by a new LearnOp once the writer runs, so all 10 are learned.
  again->WaitForWriter();
  EXPECT_EQ(again->View()->rewards_learned, 10);
  // The model keeps working and logging after recovery, and that survives a restart.
  auto decision = (*recovered)->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  EXPECT_TRUE((*recovered)->ReportReward({decision->event_id, 1.0, {}, ""}).ok());
  recovered->reset();
  auto reopened = Reopen(crashed);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  (*(*reopened)->FindModel(""))->WaitForWriter();
  EXPECT_EQ((*(*reopened)->FindModel(""))->View()->rewards_learned, 11);
  EXPECT_TRUE((*(*reopened)->FindModel(""))->recovery().damage.empty());
  reopened->reset();
  std::filesystem::remove_all(crashed);
}

// A damaged record in the middle of the log costs that record (and a reward whose decision it
// was), not everything after it (tests/core/model/log_damage_test.cc checks every record).
TEST(EngineTest, CorruptionInsideTheLogLosesOnlyTheDamagedRecord) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 40));
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> segments = FilesMatching(crashed + "/default", "log-");
  ASSERT_EQ(segments.size(), 1u);
  const auto size = std::filesystem::file_size(segments[0]);
  FlipByte(segments[0], static_cast<std::streamoff>(size / 2));

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_FALSE(again->recovery().truncated);
  ASSERT_FALSE(again->recovery().damage.empty());
  // The middle of the log is a decision or its reward: either way one reward is not learned.
  EXPECT_EQ(again->View()->rewards_learned, 39);
  // A copy of the damaged bytes is kept.
  bool set_aside = false;
  for (const auto& entry : std::filesystem::directory_iterator(crashed + "/default")) {
    set_aside |= entry.path().filename().string().find("corrupt") != std::string::npos ||
                 entry.path().filename().string().find("discard") != std::string::npos;
  }
  EXPECT_TRUE(set_aside);
  recovered->reset();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, WithEverySnapshotDamagedAndTheLogTrimmedItRefusesToStartEmpty) {
  TempDir dir;
  {
    auto engine = OpenEngine({}, dir.path());
    Model* model = *engine->FindModel("");
    for (int i = 0; i < 3; ++i) {
      ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
      ASSERT_TRUE(model->Snapshot().ok());  // the third removes the segments before the first
    }
  }
  const std::string model_dir = dir.path() + "/default";
  ASSERT_GT(std::filesystem::path(FilesMatching(model_dir, "log-").front()).filename().string(),
            "log-00000000000000000001.log");
  for (const std::string& snapshot : FilesMatching(model_dir, "snapshot-")) {
    FlipByte(snapshot, static_cast<std::streamoff>(std::filesystem::file_size(snapshot) / 2));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {  // also once the damaged files are set aside
    auto refused = Reopen(dir.path());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()),
                HasSubstr("refusing to start with an empty model"));
  }
}

TEST(EngineTest, AnIntactSnapshotThatContradictsTheConfigurationIsNotDiscarded) {
  TempDir dir;
  {
    auto engine = OpenEngine({}, dir.path());
    ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
  }
  ModelOptions other;
  other.policy = PolicyKind::kLinUcbPooled;  // another learner than the snapshot holds
  EngineOptions options;
  options.state_dir = dir.path();
  options.models = {other};
  auto refused = Engine::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("cannot be restored"));
  // The snapshot is still there, and the original configuration opens it.
  auto reopened = Reopen(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*(*reopened)->FindModel(""))->View()->rewards_learned, 5);
}

TEST(EngineTest, ACorruptSnapshotFallsBackToTheOlderOneAndTheLog) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  DriveAndProbe(*engine, 30);
  const auto first = model->Snapshot();
  ASSERT_TRUE(first.ok());
  for (int round = 0; round < 20; ++round) {
    auto decision = engine->SelectArm(ThreeArms(absl::StrCat("user", round % 3)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.1 * (round % 4), {}, ""}).ok());
  }
  const auto second = model->Snapshot();
  ASSERT_TRUE(second.ok());
  ASSERT_GT(*second, *first);
  model->WaitForFits();
  const std::vector<double> before = Probe(*engine);
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> snapshots = FilesMatching(crashed + "/default", "snapshot-");
  ASSERT_EQ(snapshots.size(), 2u);
  FlipByte(snapshots[1], static_cast<std::streamoff>(std::filesystem::file_size(snapshots[1]) / 2));

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_EQ(again->recovery().snapshot_seq, *first);
  ASSERT_EQ(again->recovery().damage.size(), 1u);
  EXPECT_THAT(again->recovery().damage[0], HasSubstr("snapshot-"));
  EXPECT_EQ(again->View()->rewards_learned, 50);
  EXPECT_EQ(Probe(**recovered), before);  // the log after the older snapshot rebuilds it all
  recovered->reset();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, EdgeListFileIsAppliedAtStartAndNotRelogged) {
  TempDir dir;
  const std::string edges = dir.path() + "/edges.txt";
  {
    std::ofstream out(edges);
    out << "# friends\nalice\tbob\n bob carol 2.5\n\nbob alice 1\n";
  }
  ModelOptions options;
  options.edge_list_file = edges;
  uint64_t version = 0;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    EXPECT_EQ(model->View()->edges, 2);
    EXPECT_EQ(model->Stats().users, 3);
    EXPECT_EQ(model->View()->graph_components, 1);
    version = model->View()->version;
  }
  auto engine = OpenEngine({options}, dir.path());
  EXPECT_EQ((*engine->FindModel(""))->View()->version, version);  // nothing new logged

  {
    std::ofstream out(edges);
    out << "alice bob -1\n";
  }
  EngineOptions bad;
  bad.models = {options};
  const auto failed = Engine::Open(bad);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("line 1"));
}

}  // namespace
}  // namespace graphbandit

namespace graphbandit {
namespace {

// kill -9 while a snapshot is being written leaves "snapshot-<seq>.snap.tmp": the next start
// removes it (and says so), and recovers from the files that were complete.
TEST(EngineTest, ATemporarySnapshotLeftByAKilledProcessIsRemovedAtStart) {
  TempDir dir;
  int64_t learned = 0;
  {
    auto engine = OpenEngine({}, dir.path());
    PlayRounds(*engine, 5);
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    learned = model->View()->rewards_learned;
  }
  const std::string model_dir = dir.path() + "/default";
  const std::string leftover = model_dir + "/snapshot-00000000000000000099.snap.tmp";
  std::ofstream(leftover) << "half a snapshot";
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_EQ(model->recovery().temporary_files_removed, 1);
  EXPECT_TRUE(model->recovery().damage.empty());
  EXPECT_EQ(model->View()->rewards_learned, learned);
  EXPECT_GT(model->recovery().seconds, 0.0);  // measured (0 when it is not)
}

}  // namespace
}  // namespace graphbandit

namespace graphbandit {
namespace {

// The shutdown is bounded: a writer still busy at the deadline is left behind, the log is
// synced and closed, and what was logged but not applied is replayed at the next start.
TEST(EngineTest, ShutdownIsBoundedWhenTheWriterIsBusyAndNothingLoggedIsLost) {
  TempDir dir;
  // Never notified, and never freed: the writer stays busy in it after the test returns.
  auto* release = new absl::Notification;
  auto* hold = new std::atomic<bool>(false);
  int acknowledged = 0;
  {
    auto engine = OpenEngine({}, dir.path());
    Model* model = *engine->FindModel("");
    PlayRounds(*engine, 3);
    acknowledged += 3;
    model->WaitForWriter();
    model->SetAfterApplyHookForTesting([release, hold] {
      if (*hold) release->WaitForNotification();
    });
    *hold = true;
    PlayRounds(*engine, 4);  // the first batch holds the writer; the rest stay queued
    acknowledged += 4;
    const absl::Time start = absl::Now();
    EXPECT_FALSE(engine->Shutdown(absl::Now() + absl::Milliseconds(300)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    // The engine is left alive (its writer still runs); the state directory is what a restart
    // sees.
    const std::string copy = CrashCopy(dir.path(), dir.path() + "-after-stop");
    auto reopened = Reopen(copy);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    Model* recovered = *(*reopened)->FindModel("");
    EXPECT_GT(recovered->recovery().records_replayed, 0);
    recovered->WaitForFits();
    EXPECT_EQ(recovered->View()->rewards_learned, acknowledged);
    reopened->reset();
    std::filesystem::remove_all(copy);
    static_cast<void>(engine.release());  // destroyed under its busy writer otherwise
  }
}

// Holds a model's writer in its after-apply hook until released; releases it when destroyed
// too, so that a failed ASSERT does not leave the writer blocked at shutdown.
class WriterHold {
 public:
  explicit WriterHold(Model* model) : model_(model), state_(std::make_shared<State>()) {
    model_->SetAfterApplyHookForTesting([state = state_] {
      absl::MutexLock lock(&state->mu);
      if (!state->hold) return;
      state->holding = true;
      state->mu.Await(absl::Condition(&state->released));
    });
  }
  ~WriterHold() {
    Release();
    model_->SetAfterApplyHookForTesting(nullptr);
  }
  void Hold() {
    absl::MutexLock lock(&state_->mu);
    state_->hold = true;
  }
  // Waits (at most 10 s) until the writer sits in the hook; it gets there after its next batch.
  bool WaitUntilHolding() {
    absl::MutexLock lock(&state_->mu);
    return state_->mu.AwaitWithTimeout(absl::Condition(&state_->holding), absl::Seconds(10));
  }
  void Release() {
    absl::MutexLock lock(&state_->mu);
    state_->hold = false;
    state_->released = true;
  }

 private:
  struct State {
    absl::Mutex mu;
    bool hold = false, holding = false, released = false;
  };
  Model* model_;
  std::shared_ptr<State> state_;
};

EngineOptions PersistentWithCadence100(const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  options.durability.snapshot_every_records = 100;  // a back-pressure bound of 64
  options.durability.sync = Durability::Sync::kOs;  // the tests must not wait for the disk
  return options;
}

// Back-pressure keeps what a crash leaves to replay near the snapshot cadence when learning is
// slower than the arrivals. (Without it, a writer busy re-sparsifying let 2,000-4,500 records
// pile up behind snapshot_every_records: 400, and the restart replayed all of them.)
TEST(EngineTest, ReplayAfterACrashStaysNearTheSnapshotCadenceWhenTheWriterIsSlow) {
  TempDir dir;
  auto opened = Engine::Open(PersistentWithCadence100(dir.path()));
  ASSERT_TRUE(opened.ok()) << opened.status();
  Engine& engine = **opened;
  Model* model = *engine.FindModel("");
  ASSERT_EQ(model->max_queued(), 64);
  ASSERT_NO_FATAL_FAILURE(PlayRounds(engine, 5));
  model->WaitForWriter();
  // A writer slower than the callers: 0.3 ms per applied record (at most ~3,300 records/s).
  // The crash image is taken while the writer is held between batches and no snapshot is being
  // written in the background, so that no snapshot file is written or removed during the copy.
  uint64_t last = model->View()->version;  // the writer thread's
  auto state = std::make_shared<std::pair<absl::Mutex, std::pair<bool, bool>>>();  // hold, held
  absl::Notification release;
  model->SetAfterApplyHookForTesting([model, &last, state, &release] {
    const uint64_t version = model->View()->version;
    absl::SleepFor(absl::Microseconds(300) * static_cast<int64_t>(version - last));
    last = version;
    bool hold;
    {
      absl::MutexLock lock(&state->first);
      hold = state->second.first;
      state->second.second = hold;
    }
    if (hold) release.WaitForNotification();
  });
  struct Cleanup {  // also on a failed ASSERT: the writer must not stay blocked
    absl::Notification* release;
    Model* model;
    ~Cleanup() {
      if (!release->HasBeenNotified()) release->Notify();
      model->SetAfterApplyHookForTesting(nullptr);
    }
  } cleanup{&release, model};
  constexpr int kThreads = 4;
  const absl::Time cap = absl::Now() + absl::Seconds(30);  // bounds the loop if all else fails
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&engine, &failures, &done, cap, t] {
      for (int i = 0; i < 1'000'000 && !done && absl::Now() < cap; ++i) {
        auto decision = engine.SelectArm(ThreeArms("u" + std::to_string(t)).View());
        if (!decision.ok() || !engine.ReportReward({decision->event_id, 0.5, {}, ""}).ok()) {
          ++failures;
        }
      }
    });
  }
  absl::SleepFor(absl::Milliseconds(800));
  {
    absl::MutexLock lock(&state->first);
    state->second.first = true;
  }
  for (bool held = false; !held && absl::Now() < cap;) {
    absl::SleepFor(absl::Milliseconds(1));
    absl::MutexLock lock(&state->first);
    held = state->second.second;
  }
  absl::SleepFor(absl::Milliseconds(20));  // the callers run into the bound
  // Rewards are held at the bound; only a decision per caller may pass it.
  EXPECT_LE(model->Stats().queued_operations, model->max_queued() + kThreads);
  model->WaitForSnapshotWrite();  // no snapshot file is written or removed during the copy
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");  // under load
  {
    absl::MutexLock lock(&state->first);
    state->second.first = false;
  }
  release.Notify();
  done = true;
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures, 0);
  EXPECT_GT(model->Stats().writes_delayed, 0) << "the load did not outrun the writer";

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  const RecoveryReport& report = (*(*recovered)->FindModel(""))->recovery();
  // A snapshot is due after 100 applied records; at most max_queued more are logged behind it
  // (plus a decision per caller, which are not held back), and as many again while it is
  // written.
  EXPECT_GT(report.snapshot_seq, 0u);
  EXPECT_LE(report.records_replayed, 100 + 2 * (model->max_queued() + kThreads));
  recovered->reset();
  std::filesystem::remove_all(crashed);
}

// A reward that cannot be recorded before its deadline because the writer is behind is refused
// with RESOURCE_EXHAUSTED, records nothing, and is accepted when retried later. A refused user
// edit does not keep the user slots it reserved.
// The bound is half the snapshot cadence (64 here) unless durability.max_queued_operations sets
// it (10).
TEST(EngineTest, AWriterTooFarBehindRefusesRewardsAtTheirDeadline) {
  for (const int64_t configured : {int64_t{0}, int64_t{10}}) {
    SCOPED_TRACE(configured);
    TempDir dir;
    EngineOptions options = PersistentWithCadence100(dir.path());
    options.durability.max_queued_operations = configured;
    options.models.emplace_back();
    options.models.back().max_users = 8;
    auto opened = Engine::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    Engine* engine = opened->get();
    Model* model = *engine->FindModel("");
    const int64_t bound = model->max_queued();
    EXPECT_EQ(bound, configured > 0 ? configured : 64);
    ASSERT_TRUE(engine->SelectArm(OneArm("bp").View()).ok());
    model->WaitForWriter();
    WriterHold hold(model);
    hold.Hold();
    ASSERT_TRUE(engine->SelectArm(OneArm("blocker").View()).ok());
    ASSERT_TRUE(hold.WaitUntilHolding());
    for (int i = 0; model->Stats().queued_operations < bound; ++i) {
      ASSERT_TRUE(engine->SelectArm(OneArm("filler" + std::to_string(i)).View()).ok());
    }
    auto refused = engine->ReportRewardAt({"bp", 1.0, {}, ""}, absl::Now(),
                                          absl::Now() + absl::Milliseconds(100));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("behind in learning"));
    const std::vector<std::string> many = {"n1", "n2", "n3", "n4", "n5", "n6", "n7"};
    EXPECT_EQ(model->AddUsers(many, absl::Now() + absl::Milliseconds(100)).status().code(),
              absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(model->Stats().writes_refused_behind, 2);
    // The call that must not wait (the server's first try) does nothing: it leaves the
    // reward, and its callback, to a call that may wait.
    absl::Notification durable;
    absl::StatusOr<RewardResult> answer;
    Model::RewardCallback done = [&](absl::StatusOr<RewardResult> result) {
      answer = std::move(result);
      durable.Notify();
    };
    EXPECT_FALSE(
        engine->TryReportRewardWithoutWaiting({"bp", 1.0, {}, ""}, absl::InfiniteFuture(), &done));
    EXPECT_TRUE(static_cast<bool>(done));
    EXPECT_FALSE(durable.HasBeenNotified());
    EXPECT_EQ(model->Stats().queued_operations, bound);
    hold.Release();
    model->WaitForWriter();
    // With room again it is taken, and answered once durable: the refusals recorded nothing.
    ASSERT_TRUE(
        engine->TryReportRewardWithoutWaiting({"bp", 1.0, {}, ""}, absl::InfiniteFuture(), &done));
    ASSERT_TRUE(durable.WaitForNotificationWithTimeout(absl::Seconds(30)));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->outcome, RewardOutcome::kAccepted);
    // The refused edit's slots were released: seven others fit beside the one user so far.
    const std::vector<std::string> others = {"m1", "m2", "m3", "m4", "m5", "m6", "m7"};
    auto added = model->AddUsers(others, absl::InfiniteFuture());
    ASSERT_TRUE(added.ok()) << added.status();
    EXPECT_EQ(added->added, 7);
  }
}

// durability.max_learning_lag: once an acknowledged reward has waited that long to be learned,
// a decision waits for the writer (at most the bound; counted) and is then served, and the next
// reward waits too and is refused with RESOURCE_EXHAUSTED at its deadline, recording nothing;
// it is accepted once the writer caught up. Zero turns the bound off.
TEST(EngineTest, ARewardNotLearnedWithinTheLagBoundHoldsBackTheNext) {
  for (const absl::Duration lag : {absl::Milliseconds(100), absl::ZeroDuration()}) {
    SCOPED_TRACE(absl::FormatDuration(lag));
    TempDir dir;
    EngineOptions options = PersistentWithCadence100(dir.path());
    options.durability.max_learning_lag = lag;
    options.models.emplace_back();
    auto opened = Engine::Open(options);
    ASSERT_TRUE(opened.ok()) << opened.status();
    Engine* engine = opened->get();
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(engine->SelectArm(OneArm("first").View()).ok());
    ASSERT_TRUE(engine->SelectArm(OneArm("second").View()).ok());
    model->WaitForWriter();
    WriterHold hold(model);
    hold.Hold();
    ASSERT_TRUE(engine->SelectArm(OneArm("blocker").View()).ok());
    ASSERT_TRUE(hold.WaitUntilHolding());
    auto first = engine->ReportReward({"first", 1.0, {}, ""});  // nothing unlearned yet
    ASSERT_TRUE(first.ok()) << first.status();
    absl::SleepFor(absl::Milliseconds(150));  // the first reward is now older than the bound
    EXPECT_EQ(model->Stats().decisions_paced, 0);
    // A decision now waits for the writer, at most the bound, and is then served.
    const absl::Time asked = absl::Now();
    ASSERT_TRUE(engine->SelectArm(OneArm("paced").View()).ok());
    const absl::Duration decided_in = absl::Now() - asked;
    auto second = engine->ReportRewardAt({"second", 1.0, {}, ""}, absl::Now(),
                                         absl::Now() + absl::Milliseconds(100));
    if (lag > absl::ZeroDuration()) {
      EXPECT_EQ(model->Stats().decisions_paced, 1);
      EXPECT_GE(model->Stats().decision_pacing_seconds, 0.09);
      EXPECT_LE(model->Stats().decision_pacing_seconds, absl::ToDoubleSeconds(decided_in));
      EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
      EXPECT_THAT(std::string(second.status().message()), HasSubstr("max_learning_lag_ms = 100"));
      EXPECT_EQ(model->Stats().writes_refused_behind, 1);
      hold.Release();
      second = engine->ReportReward({"second", 1.0, {}, ""});
    } else {
      EXPECT_EQ(model->Stats().decisions_paced, 0);
      EXPECT_EQ(model->Stats().decision_pacing_seconds, 0.0);
      hold.Release();
    }
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ(second->outcome, RewardOutcome::kAccepted);
    model->WaitForWriter();
    EXPECT_EQ(model->View()->rewards_learned, 2);
  }
}

// A reward held back by back-pressure that arrived within its decision's window: the expiry
// sweep leaves the decision open meanwhile, so the wait does not turn it LATE. A reward that
// arrived after the window gets no such protection.
TEST(EngineTest, ARewardWaitingForTheWriterIsNotMadeLateByTheWait) {
  TempDir dir;
  EngineOptions options = PersistentWithCadence100(dir.path());
  options.run_sweeper = false;  // expiry runs when the test says
  options.models.emplace_back();
  options.models.back().reward_window = absl::Seconds(10);
  auto opened = Engine::Open(options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  Engine* engine = opened->get();
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(engine->SelectArm(OneArm("on-time").View()).ok());
  ASSERT_TRUE(engine->SelectArm(OneArm("too-late").View()).ok());
  model->WaitForWriter();
  WriterHold hold(model);
  hold.Hold();
  ASSERT_TRUE(engine->SelectArm(OneArm("blocker").View()).ok());
  ASSERT_TRUE(hold.WaitUntilHolding());
  for (int i = 0; model->Stats().queued_operations < model->max_queued(); ++i) {
    ASSERT_TRUE(engine->SelectArm(OneArm("filler" + std::to_string(i)).View()).ok());
  }
  absl::StatusOr<RewardResult> on_time, too_late;
  std::thread first([&] { on_time = engine->ReportReward({"on-time", 1.0, {}, ""}); });
  std::thread second([&] {
    // Arrives (as far as the model knows) an hour after its decision: past the window.
    too_late = engine->ReportRewardAt({"too-late", 1.0, {}, ""}, absl::Now() + absl::Hours(1),
                                      absl::InfiniteFuture());
  });
  while (model->Stats().writes_delayed < 2) absl::SleepFor(absl::Milliseconds(1));
  engine->ExpireDue(absl::Now() + absl::Hours(1));
  EXPECT_EQ(model->Stats().pending_decisions, 1);  // only the on-time one stays open
  hold.Release();
  first.join();
  second.join();
  ASSERT_TRUE(on_time.ok()) << on_time.status();
  EXPECT_EQ(on_time->outcome, RewardOutcome::kAccepted);
  ASSERT_TRUE(too_late.ok()) << too_late.status();
  EXPECT_EQ(too_late->outcome, RewardOutcome::kLate);
}

}  // namespace
}  // namespace graphbandit
