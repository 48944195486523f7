// Damage in the middle of a model's log (core/model/recovery.h): recovery keeps every intact
// record after the damage whose decision survived, counts what was lost and dropped by kind,
// never applies a reward to anything but its own decision, and stops reporting the damage once
// a snapshot covers it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/model/engine.h"
#include "core/model/model_ops.h"
#include "core/storage/log_format.h"
#include "core/storage/log_writer.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

// Rewards recovered after the log's last LearnOp are staged again and learned by the writer's
// next batch: what a recovered model has learned once its writer caught up.
int64_t LearnedOnceCaughtUp(Model* model) {
  model->WaitForWriter();
  return model->View()->rewards_learned;
}

uint64_t LoadLE(const std::string& bytes, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(bytes[at + i]);
  return v;
}

// One record of a log as the test reads it, independently of the reader under test: the
// layout of log_format.h, walked from the front of an undamaged file.
struct LoggedRecord {
  uint64_t begin = 0, end = 0;  // byte range
  uint64_t seq = 0;
  OpType type{};
  std::string event_id;  // decisions and rewards
};

std::vector<LoggedRecord> WalkLog(const std::string& bytes) {
  std::vector<LoggedRecord> records;
  size_t at = storage::kLogMagicSize;
  while (at + storage::kLogHeaderSize <= bytes.size()) {
    LoggedRecord r;
    r.begin = at;
    const uint64_t length = LoadLE(bytes, at + 8, 4);
    r.type = static_cast<OpType>(bytes[at + 12]);
    r.seq = LoadLE(bytes, at + 16, 8);
    r.end = at + storage::kLogHeaderSize + length;
    auto op = DecodeOp(bytes[at + 12],
                       absl::string_view(bytes).substr(at + storage::kLogHeaderSize, length));
    EXPECT_TRUE(op.ok()) << op.status();
    if (const auto* decide = std::get_if<DecideOp>(&*op)) r.event_id = decide->event_id;
    if (const auto* reward = std::get_if<RewardOp>(&*op)) r.event_id = reward->event_id;
    records.push_back(r);
    at = r.end;
  }
  EXPECT_EQ(at, bytes.size());
  return records;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The crash image of a model that played `rounds` rounds (one log segment), and that segment's
// bytes and records.
struct CrashImage {
  std::string dir;  // the state directory
  std::string segment;
  std::string bytes;
  std::vector<LoggedRecord> records;
};

CrashImage CrashImageAfterRounds(const std::string& state_dir, int rounds) {
  CrashImage image;
  auto engine = OpenEngine({}, state_dir);
  PlayRounds(*engine, rounds);
  image.dir = CrashCopy(state_dir, state_dir + "-image");
  engine.reset();
  image.segment = FilesMatching(image.dir + "/default", "log-").front();
  image.bytes = ReadBytes(image.segment);
  image.records = WalkLog(image.bytes);
  return image;
}

// The names recovery reports record kinds by.
// The name recovery reports a record kind under (every kind a live log can hold: a LearnOp,
// for one, is logged whenever the writer learns staged rewards as a batch, which depends on
// timing).
std::string KindOf(OpType type) {
  switch (type) {
    case OpType::kFixDimensions:
      return "fix_dimensions";
    case OpType::kAddUsers:
      return "add_users";
    case OpType::kSetEdges:
      return "set_edges";
    case OpType::kRemoveEdges:
      return "remove_edges";
    case OpType::kObserve:
      return "observe";
    case OpType::kDecide:
      return "decision";
    case OpType::kReward:
      return "reward";
    case OpType::kClose:
      return "close";
    case OpType::kHyperparameters:
      return "hyperparameters";
    case OpType::kLearn:
      return "learn";
    case OpType::kFeatureScaling:
      return "feature_scaling";
    case OpType::kActivate:
      return "activate";
    case OpType::kServingMode:
      return "serving_mode";
  }
  return "unknown";
}

int64_t Sum(const std::map<std::string, int64_t>& counts) {
  int64_t total = 0;
  for (const auto& [kind, n] : counts) total += n;
  return total;
}

// The damaged-log check, at the model level: damage at one byte of every record's header and
// payload, and damaged ranges spanning several records, in a crash image of a live log. The
// rewards still learned after recovery are exactly those whose reward record and decision
// record do not overlap the damage; everything else is counted.
TEST(LogDamageTest, RecoveryKeepsEveryIntactRewardWhoseDecisionSurvived) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 24));
  // Decisions rewarded out of order: a reward's decision is not always the record before it.
  std::vector<std::string> open;
  for (int i = 0; i < 6; ++i) {
    auto decision = engine->SelectArm(ThreeArms("bob").View());
    ASSERT_TRUE(decision.ok());
    open.push_back(decision->event_id);
  }
  for (auto it = open.rbegin(); it != open.rend(); ++it) {
    ASSERT_TRUE(engine->ReportReward({*it, 1.0, {}, ""}).ok());
  }
  model->WaitForFits();
  ASSERT_EQ(model->View()->rewards_learned, 30);
  const std::string image = CrashCopy(dir.path(), dir.path() + "-image");
  const std::vector<std::string> segments = FilesMatching(image + "/default", "log-");
  ASSERT_EQ(segments.size(), 1u);
  const std::string pristine = ReadBytes(segments[0]);
  const std::vector<LoggedRecord> records = WalkLog(pristine);
  ASSERT_GT(records.size(), 60u);

  std::vector<std::pair<uint64_t, uint64_t>> damages;  // [from, to)
  for (const LoggedRecord& r : records) {
    damages.emplace_back(r.begin + 5, r.begin + 6);  // a header byte
    if (r.end > r.begin + storage::kLogHeaderSize) {
      const uint64_t mid = (r.begin + storage::kLogHeaderSize + r.end) / 2;
      damages.emplace_back(mid, mid + 1);  // a payload byte
    }
  }
  std::mt19937_64 rng(3);
  for (int i = 0; i < 12; ++i) {
    const uint64_t from = storage::kLogMagicSize + rng() % (pristine.size() / 2);
    damages.emplace_back(from, from + 1 + rng() % 900);
  }

  int checked = 0;
  for (const auto& [from, to] : damages) {
    SCOPED_TRACE(testing::Message() << "damage [" << from << ", " << to << ")");
    auto hit = [&, from = from, to = to](const LoggedRecord& r) {
      return r.begin < to && r.end > from;
    };
    std::set<std::string> decisions_hit;
    std::map<std::string, int64_t> expected_kinds;  // for damage within one record
    for (const LoggedRecord& r : records) {
      if (r.type == OpType::kDecide && hit(r)) decisions_hit.insert(r.event_id);
      if (hit(r) && to - from == 1) {
        ++expected_kinds[from < r.begin + storage::kLogHeaderSize ? "unknown" : KindOf(r.type)];
      }
    }
    const bool tail = hit(records.back());
    int64_t expected_learned = 0, expected_dropped = 0, expected_lost = 0;
    for (const LoggedRecord& r : records) {
      if (hit(r)) {
        ++expected_lost;
      } else if (r.type == OpType::kReward) {
        if (decisions_hit.count(r.event_id)) {
          ++expected_dropped;
        } else {
          ++expected_learned;
        }
      }
    }
    const std::string copy = dir.path() + "-damaged";
    std::filesystem::remove_all(copy);
    CrashCopy(image, copy);
    std::string damaged = pristine;
    for (uint64_t i = from; i < to && i < damaged.size(); ++i) damaged[i] ^= 0x5a;
    WriteBytes(copy + "/default/" + std::filesystem::path(segments[0]).filename().string(),
               damaged);

    auto recovered = Reopen(copy);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* again = *(*recovered)->FindModel("");
    again->WaitForFits();
    const RecoveryReport& report = again->recovery();
    EXPECT_EQ(LearnedOnceCaughtUp(again), expected_learned);
    EXPECT_FALSE(report.damage.empty());
    if (!tail) {
      // Damage in the middle: exact counts. (A damaged tail is cut off as a torn write; how many
      // records it held is not known.)
      EXPECT_FALSE(report.truncated);
      EXPECT_EQ(Sum(report.records_lost), expected_lost);
      if (to - from == 1) {
        EXPECT_EQ(report.records_lost, expected_kinds);
      }
      EXPECT_EQ(report.records_dropped.count("reward") ? report.records_dropped.at("reward") : 0,
                expected_dropped);
    }
    // A retried reward is never learned again, nor applied to another decision.
    for (const LoggedRecord& r : records) {
      if (r.type != OpType::kReward || hit(r)) continue;
      auto retried = (*recovered)->ReportReward({r.event_id, 0.0, {}, ""});
      ASSERT_TRUE(retried.ok()) << retried.status();
      EXPECT_EQ(retried->outcome, decisions_hit.count(r.event_id) ? RewardOutcome::kUnknownEvent
                                                                  : RewardOutcome::kDuplicate);
    }
    again->WaitForFits();
    EXPECT_EQ(LearnedOnceCaughtUp(again), expected_learned);
    recovered->reset();
    ++checked;
  }
  EXPECT_GT(checked, 100);
  std::filesystem::remove_all(dir.path() + "-damaged");
  std::filesystem::remove_all(image);
}

// Once recovery has passed over damage, the model writes a snapshot at once: the next start
// reads no damaged bytes and reports nothing (the copy of the bytes stays for an operator).
TEST(LogDamageTest, ASnapshotAfterRecoveryEndsTheDamageReports) {
  TempDir dir;
  CrashImage crash;
  ASSERT_NO_FATAL_FAILURE(crash = CrashImageAfterRounds(dir.path(), 20));
  const std::string& image = crash.dir;
  crash.bytes[crash.records[crash.records.size() / 2].begin + 3] ^= 1;
  WriteBytes(crash.segment, crash.bytes);
  {
    auto recovered = Reopen(image);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* model = *(*recovered)->FindModel("");
    EXPECT_EQ(Sum(model->recovery().records_lost), 1);
    EXPECT_THAT(model->recovery().damage.front(), HasSubstr("passed over"));
    EXPECT_GE(model->Stats().snapshots_written, 1);
    // Kill -9 right now: the snapshot written at open already covers the damage.
    const std::string again_image = CrashCopy(image, image + "-again");
    const int64_t learned = LearnedOnceCaughtUp(model);
    recovered->reset();
    auto reopened = Reopen(again_image);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    Model* again = *(*reopened)->FindModel("");
    EXPECT_TRUE(again->recovery().damage.empty());
    EXPECT_TRUE(again->recovery().records_lost.empty());
    EXPECT_EQ(LearnedOnceCaughtUp(again), learned);
    reopened->reset();
    std::filesystem::remove_all(again_image);
  }
  bool copy_kept = false;
  for (const std::string& file : FilesMatching(image + "/default", "log-")) {
    copy_kept |= file.find(".corrupt-") != std::string::npos;
  }
  EXPECT_TRUE(copy_kept);
  std::filesystem::remove_all(image);
}

// A record repeated in the log (its sequence number applied already) is not applied again.
TEST(LogDamageTest, ARepeatedRecordIsNotAppliedTwice) {
  TempDir dir;
  CrashImage crash;
  ASSERT_NO_FATAL_FAILURE(crash = CrashImageAfterRounds(dir.path(), 6));
  const std::string& image = crash.dir;
  const std::string& bytes = crash.bytes;
  const LoggedRecord& reward = crash.records[crash.records.size() - 3];
  ASSERT_EQ(reward.type, OpType::kReward);
  {
    // The same record again, as a writer that repeated it would have written it.
    auto writer = storage::LogWriter::Open(crash.segment);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)
                    ->Append(reward.seq, static_cast<uint8_t>(reward.type),
                             absl::string_view(bytes).substr(
                                 reward.begin + storage::kLogHeaderSize,
                                 reward.end - reward.begin - storage::kLogHeaderSize))
                    .ok());
    ASSERT_TRUE((*writer)->Close().ok());
  }
  auto recovered = Reopen(image);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* model = *(*recovered)->FindModel("");
  EXPECT_EQ(LearnedOnceCaughtUp(model), 6);
  EXPECT_EQ(model->recovery().records_repeated, 1);
  EXPECT_TRUE(model->recovery().records_lost.empty());
  recovered->reset();
  std::filesystem::remove_all(image);
}

// A segment file that is missing is reported as such, and the records after it are applied
// where their decisions survived.
TEST(LogDamageTest, AMissingSegmentIsReportedAndTheLaterOnesApplied) {
  TempDir dir;
  {
    auto engine = OpenEngine({}, dir.path());
    Model* model = *engine->FindModel("");
    ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
    ASSERT_TRUE(model->Snapshot().ok());
    ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
    ASSERT_TRUE(model->Snapshot().ok());
    ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
    CrashCopy(dir.path(), dir.path() + "-image");
  }
  const std::string image = dir.path() + "-image";
  const std::string model_dir = image + "/default";
  const std::vector<std::string> snapshots = FilesMatching(model_dir, "snapshot-");
  std::vector<std::string> segments;
  for (const std::string& file : FilesMatching(model_dir, "log-")) {
    if (file.find(".corrupt") == std::string::npos) segments.push_back(file);
  }
  ASSERT_EQ(snapshots.size(), 2u);
  ASSERT_EQ(segments.size(), 2u);  // the ones after each snapshot
  // The segment between the two snapshots: its 5 rounds, and a LearnOp wherever the writer
  // happened to learn staged rewards as a batch.
  const std::vector<LoggedRecord> missing = WalkLog(ReadBytes(segments[0]));
  const int64_t learn_records =
      std::count_if(missing.begin(), missing.end(),
                    [](const LoggedRecord& r) { return r.type == OpType::kLearn; });
  EXPECT_EQ(static_cast<int64_t>(missing.size()) - learn_records, 10);
  std::filesystem::remove(snapshots[1]);  // the newest snapshot
  std::filesystem::remove(segments[0]);
  auto recovered = Reopen(image);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* model = *(*recovered)->FindModel("");
  EXPECT_EQ(LearnedOnceCaughtUp(model), 10);  // 5 from the snapshot, 5 after the gap
  ASSERT_EQ(model->recovery().records_lost.count("in_missing_segment"), 1u);
  EXPECT_EQ(model->recovery().records_lost.at("in_missing_segment"),
            static_cast<int64_t>(missing.size()));
  EXPECT_THAT(absl::StrJoin(model->recovery().damage, "\n"), HasSubstr("are missing"));
  recovered->reset();
  std::filesystem::remove_all(image);
}

// A segment whose tail was damaged after a later (here empty) segment began: the records the tail
// held are counted as lost (the later segment's first sequence number says how many), and the
// log continues after them.
TEST(LogDamageTest, ADamagedTailBeforeALaterSegmentIsCounted) {
  TempDir dir;
  CrashImage crash;
  ASSERT_NO_FATAL_FAILURE(crash = CrashImageAfterRounds(dir.path(), 6));
  const std::string& image = crash.dir;
  const std::vector<LoggedRecord>& records = crash.records;
  const uint64_t last_seq = records.back().seq;
  const std::string next_segment =
      absl::StrCat(image, "/default/log-", absl::StrFormat("%020d", last_seq + 1), ".log");
  {
    // The segment a restart after the last record would have begun, still empty.
    auto next = storage::LogWriter::Open(next_segment);
    ASSERT_TRUE(next.ok()) << next.status();
  }
  // Bit rot in the last two records: a damaged tail of the first segment.
  WriteBytes(crash.segment, crash.bytes.substr(0, records[records.size() - 2].begin + 3));
  auto recovered = Reopen(image);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* model = *(*recovered)->FindModel("");
  EXPECT_TRUE(model->recovery().truncated);
  EXPECT_EQ(Sum(model->recovery().records_lost), 2);  // the last decision and its reward
  EXPECT_EQ(LearnedOnceCaughtUp(model), 5);
  // The log goes on after the lost records. The writer may have logged records since recovery
  // (a LearnOp for the staged rewards, at a moment the test does not control), so the version
  // is last_seq plus those, and they are numbered on from last_seq + 1.
  const uint64_t version = model->View()->version;
  recovered->reset();
  const std::vector<LoggedRecord> after = WalkLog(ReadBytes(next_segment));
  for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(after[i].seq, last_seq + 1 + i);
  EXPECT_GE(version, last_seq);
  EXPECT_LE(version, last_seq + after.size());
  std::filesystem::remove_all(image);
}

}  // namespace
}  // namespace graphbandit
