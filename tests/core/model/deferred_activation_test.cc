// Deferred decisions (DecisionRequest.defer_activation, Personalizer's deferActivation): their
// rewards are held until the event is activated, a decision never activated teaches nothing
// (not even the default reward), and the held state survives a restart, a crash and the
// ledger's eviction of completed decisions.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/engine.h"
#include "core/model/ledger_records.h"
#include "core/model/model_ops.h"
#include "core/storage/log_reader.h"
#include "core/storage/log_writer.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

ModelOptions Windowed(double default_reward = -1.0) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  if (default_reward >= 0.0) options.default_reward = default_reward;
  return options;
}

OwnedRequest Deferred(const std::string& event_id) {
  OwnedRequest r = OneArm(event_id);
  r.defer_activation = true;
  return r;
}

absl::StatusOr<Decision> DecideAt(Engine& engine, const OwnedRequest& r) {
  return engine.SelectArmAt(r.View(), kT0, absl::InfiniteFuture());
}

RewardResult RewardAt(Engine& engine, const std::string& event_id, double value) {
  auto result = engine.ReportRewardAt({event_id, value, {}, ""}, kT0, absl::InfiniteFuture());
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? *result : RewardResult{};
}

ActivationOutcome ActivateOutcome(Engine& engine, const std::string& event_id,
                                  absl::Time now = kT0) {
  auto result = engine.ActivateAt("", event_id, now, absl::InfiniteFuture());
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? result->outcome : ActivationOutcome::kUnknownEvent;
}

std::pair<double, double> Prior() {
  auto engine = ManualClockEngine(Windowed());
  return MeanAndStddev(*engine, kT0);
}

void ExpectScores(const std::pair<double, double>& got, const std::pair<double, double>& want) {
  EXPECT_NEAR(got.first, want.first, 1e-12);
  EXPECT_NEAR(got.second, want.second, 1e-12);
}

TEST(DeferredActivationTest, ARewardIsHeldUntilTheEventIsActivated) {
  auto engine = ManualClockEngine(Windowed());
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(DecideAt(*engine, Deferred("d")).ok());
  const RewardResult held = RewardAt(*engine, "d", 1.0);
  EXPECT_EQ(held.outcome, RewardOutcome::kAccepted);
  EXPECT_EQ(held.model_version, 0u);  // nothing learned, so no version has learned it
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 0);
  ExpectScores(MeanAndStddev(*engine, kT0), Prior());
  // A repeat while held is still the first report's duplicate (FIRST), which no version has
  // learned yet.
  const RewardResult repeat = RewardAt(*engine, "d", 0.0);
  EXPECT_EQ(repeat.outcome, RewardOutcome::kDuplicate);
  EXPECT_EQ(repeat.model_version, 0u);

  // Activated after its window (before the sweeper closed it): too late, nothing learned.
  EXPECT_EQ(ActivateOutcome(*engine, "d", kT0 + absl::Seconds(11)), ActivationOutcome::kClosed);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 0);
  auto activated = engine->ActivateAt("", "d", kT0, absl::InfiniteFuture());
  ASSERT_TRUE(activated.ok()) << activated.status();
  EXPECT_EQ(activated->outcome, ActivationOutcome::kActivated);
  EXPECT_GT(activated->model_version, 0u);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  ExpectScores(MeanAndStddev(*engine, kT0), LearnedFromOne(1.0));
  // Again: nothing more to do; the reward is not learned twice.
  EXPECT_EQ(ActivateOutcome(*engine, "d"), ActivationOutcome::kAlreadyActive);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
}

TEST(DeferredActivationTest, ARewardAfterActivationIsLearnedAtOnce) {
  auto engine = ManualClockEngine(Windowed());
  ASSERT_TRUE(DecideAt(*engine, Deferred("d")).ok());
  auto activated = engine->ActivateAt("", "d", kT0, absl::InfiniteFuture());
  ASSERT_TRUE(activated.ok());
  EXPECT_EQ(activated->outcome, ActivationOutcome::kActivated);
  EXPECT_EQ(activated->model_version, 0u);  // nothing held, nothing learned yet
  const RewardResult learned = RewardAt(*engine, "d", 1.0);
  EXPECT_EQ(learned.outcome, RewardOutcome::kAccepted);
  EXPECT_GT(learned.model_version, 0u);
  (*engine->FindModel(""))->WaitForFits();
  ExpectScores(MeanAndStddev(*engine, kT0), LearnedFromOne(1.0));
}

TEST(DeferredActivationTest, ADecisionNeverActivatedTeachesNothingNotEvenTheDefaultReward) {
  auto engine = ManualClockEngine(Windowed(/*default_reward=*/0.5));
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(DecideAt(*engine, Deferred("rewarded")).ok());
  ASSERT_TRUE(DecideAt(*engine, Deferred("silent")).ok());
  EXPECT_EQ(RewardAt(*engine, "rewarded", 1.0).outcome, RewardOutcome::kAccepted);
  EXPECT_EQ(engine->ExpireDue(kT0 + absl::Seconds(11)), 2);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 0);
  ExpectScores(MeanAndStddev(*engine, kT0), Prior());
  // Too late now; and an id never seen is unknown.
  EXPECT_EQ(ActivateOutcome(*engine, "silent"), ActivationOutcome::kClosed);
  EXPECT_EQ(ActivateOutcome(*engine, "never"), ActivationOutcome::kUnknownEvent);

  // The same without deferral: the default reward is learned at the close.
  auto plain = ManualClockEngine(Windowed(/*default_reward=*/0.5));
  ASSERT_TRUE(DecideAt(*plain, OneArm("silent")).ok());
  EXPECT_EQ(plain->ExpireDue(kT0 + absl::Seconds(11)), 1);
  (*plain->FindModel(""))->WaitForFits();
  EXPECT_EQ((*plain->FindModel(""))->View()->rewards_learned, 1);
  ExpectScores(MeanAndStddev(*plain, kT0), LearnedFromOne(0.5));
}

TEST(DeferredActivationTest, AnActivatedDecisionLearnsItsDefaultRewardAtTheClose) {
  auto engine = ManualClockEngine(Windowed(/*default_reward=*/0.5));
  ASSERT_TRUE(DecideAt(*engine, Deferred("d")).ok());
  EXPECT_EQ(ActivateOutcome(*engine, "d"), ActivationOutcome::kActivated);
  EXPECT_EQ(engine->ExpireDue(kT0 + absl::Seconds(11)), 1);
  (*engine->FindModel(""))->WaitForFits();
  ExpectScores(MeanAndStddev(*engine, kT0), LearnedFromOne(0.5));
}

TEST(DeferredActivationTest, ADecisionThatWasNotDeferredIsActiveAlready) {
  auto engine = ManualClockEngine(Windowed());
  ASSERT_TRUE(DecideAt(*engine, OneArm("p")).ok());
  EXPECT_GT(RewardAt(*engine, "p", 1.0).model_version, 0u);  // learned at once
  EXPECT_EQ(ActivateOutcome(*engine, "p"), ActivationOutcome::kAlreadyActive);
  (*engine->FindModel(""))->WaitForFits();
  EXPECT_EQ((*engine->FindModel(""))->View()->rewards_learned, 1);
}

TEST(DeferredActivationTest, AMalformedEventIdIsRefusedAndAnUnknownOneReported) {
  auto engine = ManualClockEngine(Windowed());
  for (const std::string& bad : {std::string(), std::string(300, 'e'), std::string("a\nb")}) {
    auto result = engine->ActivateAt("", bad, kT0, absl::InfiniteFuture());
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find("event_id"), absl::string_view::npos)
        << result.status();
  }
  EXPECT_EQ(ActivateOutcome(*engine, "never-ranked"), ActivationOutcome::kUnknownEvent);
  auto unknown_model = engine->ActivateAt("no-such-model", "e", kT0, absl::InfiniteFuture());
  EXPECT_EQ(unknown_model.status().code(), absl::StatusCode::kNotFound);
}

TEST(DeferredActivationTest, WindowedAggregationsLearnAtTheCloseOnlyWhenActivated) {
  for (bool activate : {false, true}) {
    ModelOptions options = Windowed();
    options.aggregation = Aggregation::kSum;
    auto engine = ManualClockEngine(options);
    ASSERT_TRUE(DecideAt(*engine, Deferred("d")).ok());
    RewardAt(*engine, "d", 0.25);
    RewardAt(*engine, "d", 0.75);
    if (activate) {
      auto activated = engine->ActivateAt("", "d", kT0, absl::InfiniteFuture());
      ASSERT_TRUE(activated.ok());
      EXPECT_EQ(activated->model_version, 0u);  // SUM learns at the close
    }
    EXPECT_EQ(engine->ExpireDue(kT0 + absl::Seconds(11)), 1);
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, activate ? 1 : 0) << activate;
    ExpectScores(MeanAndStddev(*engine, kT0), activate ? LearnedFromOne(1.0) : Prior());
  }
}

TEST(DeferredActivationTest, AHeldDecisionKeepsItsSlotWhenTheLedgerIsFull) {
  ModelOptions options = Windowed();
  options.max_decisions = 2;
  auto engine = ManualClockEngine(options);
  ASSERT_TRUE(DecideAt(*engine, Deferred("held")).ok());
  RewardAt(*engine, "held", 1.0);  // every arm reported, but held: not completed
  ASSERT_TRUE(DecideAt(*engine, OneArm("done")).ok());
  RewardAt(*engine, "done", 0.0);  // completed
  // A third decision takes the completed one's slot, not the held one's.
  ASSERT_TRUE(DecideAt(*engine, OneArm("third")).ok());
  Model* model = *engine->FindModel("");
  EXPECT_TRUE(model->Knows("held"));
  EXPECT_EQ(ActivateOutcome(*engine, "held"), ActivationOutcome::kActivated);
  // Now it is complete and can give its slot up.
  EXPECT_TRUE(DecideAt(*engine, OneArm("fourth")).ok());
  EXPECT_EQ(ActivateOutcome(*engine, "held"), ActivationOutcome::kClosed);
}

TEST(DeferredActivationTest, TheHeldStateSurvivesARestartAndACrash) {
  TempDir dir;
  ModelOptions options = Windowed();
  options.name = "default";
  {
    auto engine = OpenEngine({options}, dir.path());
    for (const char* id : {"a", "b", "c"}) {
      auto decided = engine->SelectArm(Deferred(id).View());
      ASSERT_TRUE(decided.ok()) << decided.status();
      ASSERT_TRUE(engine->ReportReward({id, 1.0, {}, ""}).ok());
    }
    EXPECT_EQ(ActivateOutcome(*engine, "b", absl::Now()), ActivationOutcome::kActivated);
    TempDir crash;  // the log alone, replayed
    CrashCopy(dir.path(), crash.path() + "/copy");
    auto replayed = Reopen(crash.path() + "/copy");
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    Model* model = *(*replayed)->FindModel("");
    EXPECT_EQ(model->recovery().snapshot_seq, 0u);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
    EXPECT_EQ(ActivateOutcome(**replayed, "a", absl::Now()), ActivationOutcome::kActivated);
    EXPECT_EQ(ActivateOutcome(**replayed, "b", absl::Now()), ActivationOutcome::kAlreadyActive);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 2);
  }
  // From the shutdown snapshot: a and c held, b active.
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  EXPECT_GT(model->recovery().snapshot_seq, 0u);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_EQ(ActivateOutcome(*engine, "b", absl::Now()), ActivationOutcome::kAlreadyActive);
  EXPECT_EQ(ActivateOutcome(*engine, "c", absl::Now()), ActivationOutcome::kActivated);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 2);
}

// Replay applies an activation only to its own held decision: a record whose held reward names
// an arm the decision never offered, or a reward the decision did not hold (an id used again, a
// misplaced record), is dropped and counted, and the decision stays held. The same record with
// the decision's own arm and reward applies.
TEST(DeferredActivationTest, ReplayAppliesAnActivationOnlyWithTheDecisionsOwnArms) {
  TempDir dir;
  ModelOptions options = Windowed();
  options.name = "default";
  auto engine = OpenEngine({options}, dir.path());
  for (const char* id : {"a", "b"}) {
    ASSERT_TRUE(engine->SelectArm(Deferred(id).View()).ok());
    ASSERT_TRUE(engine->ReportReward({id, 1.0, {}, ""}).ok());
  }
  ASSERT_EQ(ActivateOutcome(*engine, "b", absl::Now()), ActivationOutcome::kActivated);
  (*engine->FindModel(""))->WaitForWriter();
  TempDir crash;
  const std::string image = CrashCopy(dir.path(), crash.path() + "/image");
  // b's activation record, and the last sequence number in the log.
  ActivateOp logged;
  uint64_t last_seq = 0;
  for (const std::string& segment : FilesMatching(image + "/default", "log-")) {
    auto reader = storage::LogReader::Open(segment);
    ASSERT_TRUE(reader.ok()) << reader.status();
    uint8_t type = 0;
    std::string payload;
    while ((*reader)->Next(&type, &payload) == storage::ReadResult::kRecord) {
      last_seq = (*reader)->seq();
      if (type != static_cast<uint8_t>(OpType::kActivate)) continue;
      auto op = DecodeOp(type, payload);
      ASSERT_TRUE(op.ok()) << op.status();
      logged = std::get<ActivateOp>(*op);
    }
  }
  ASSERT_EQ(logged.event_id, "b");
  ASSERT_EQ(logged.learn.size(), 1u);
  ASSERT_EQ(logged.learn[0].arm_id, "only");

  struct Case {
    std::string name, arm_id;
    double reward;
    bool applies;
  };
  for (const Case& c :
       {Case{"another_arm", "forged", 1.0, false}, Case{"another_reward", "only", 0.5, false},
        Case{"its_own", "only", 1.0, true}}) {
    SCOPED_TRACE(c.name);
    const std::string copy = CrashCopy(image, absl::StrCat(crash.path(), "/", c.name));
    // b's held reward moved to a: the same user and context (both decisions have them empty).
    ActivateOp moved = logged;
    moved.event_id = "a";
    moved.learn[0].event_id = "a";
    moved.learn[0].arm_id = c.arm_id;
    moved.learn[0].reward = c.reward;
    auto log =
        storage::LogWriter::Open(absl::StrFormat("%s/default/log-%020d.log", copy, last_seq + 1));
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)
                    ->Append(last_seq + 1, static_cast<uint8_t>(OpType::kActivate), EncodeOp(moved))
                    .ok());
    ASSERT_TRUE((*log)->Close().ok());
    auto replayed = Reopen(copy);
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    Model* model = *(*replayed)->FindModel("");
    const auto& dropped = model->recovery().records_dropped;
    EXPECT_EQ(dropped.count("activate") ? dropped.at("activate") : 0, c.applies ? 0 : 1);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, c.applies ? 2 : 1);
    EXPECT_EQ(ActivateOutcome(**replayed, "a", absl::Now()),
              c.applies ? ActivationOutcome::kAlreadyActive : ActivationOutcome::kActivated);
  }
}

TEST(DeferredActivationTest, DecisionRecordsCarryTheDeferralAndTheBaseline) {
  DecideOp op;
  op.event_id = "e";
  op.user = "u";
  op.arms.push_back(DecideOp::Arm{"x", {1.0}, 2, 0.1, 0.2, 0.3, false, 0.0});
  op.model_version = 7;
  for (auto [deferred, baseline] : {std::pair{false, -1}, {true, -1}, {false, 0}, {true, 3}}) {
    op.deferred = deferred;
    op.baseline = baseline;
    auto decoded = DecodeOp(static_cast<uint8_t>(OpType::kDecide), EncodeOp(ModelOp(op)));
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    const auto& back = std::get<DecideOp>(*decoded);
    EXPECT_EQ(back.deferred, deferred);
    EXPECT_EQ(back.baseline, baseline);
    EXPECT_EQ(back.model_version, 7u);
  }
  // A record without the section (as written before it existed) is neither.
  op.deferred = false;
  op.baseline = -1;
  const std::string plain = EncodeOp(ModelOp(op));
  op.deferred = true;
  const std::string with_section = EncodeOp(ModelOp(op));
  EXPECT_EQ(with_section.substr(0, plain.size()), plain);
  // Sections out of order, repeated, or unknown are damage.
  const std::string section = with_section.substr(plain.size());
  for (const std::string& bad :
       {plain + section + section, plain + "\x03", plain + section.substr(0, 2)}) {
    EXPECT_FALSE(DecodeOp(static_cast<uint8_t>(OpType::kDecide), bad).ok());
  }

  ActivateOp activate;
  activate.event_id = "e";
  ObserveOp learned;
  learned.event_id = "e";
  learned.arm_id = "x";
  learned.user = "u";
  learned.features = {1.0};
  learned.reward = 0.5;
  activate.learn.push_back(learned);
  auto decoded = DecodeOp(static_cast<uint8_t>(OpType::kActivate), EncodeOp(ModelOp(activate)));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& back = std::get<ActivateOp>(*decoded);
  EXPECT_EQ(back.event_id, "e");
  ASSERT_EQ(back.learn.size(), 1u);
  EXPECT_EQ(back.learn[0].reward, 0.5);
  EXPECT_EQ(ObservationsOf(ModelOp(back)).size(), 1u);
}

TEST(DeferredActivationTest, TheBaselineIsValidatedAndTheFlagsKeptInTheLedgerAcrossASnapshot) {
  TempDir dir;
  OwnedRequest r = ThreeArms();
  {
    auto engine = OpenEngine({}, dir.path());
    r.baseline = 3;
    EXPECT_EQ(SelectStatus(*engine, r).code(), absl::StatusCode::kInvalidArgument);
    r.baseline = -2;
    EXPECT_EQ(SelectStatus(*engine, r).code(), absl::StatusCode::kInvalidArgument);
    r.baseline = 2;
    r.event_id = "with-baseline";
    ASSERT_TRUE(engine->SelectArm(r.View()).ok());
  }
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  EXPECT_GT(model->recovery().snapshot_seq, 0u);
  auto retry = engine->SelectArm(r.View());  // restored with its flags: the stored decision
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->replayed);
  // The ledger's capture, encoded and decoded again, keeps it.
  ModelOptions options;
  DecisionLedger ledger(absl::Hours(1), 10, 10, Aggregation::kFirst);
  DecideOp op;
  op.event_id = "x";
  op.arms.push_back(DecideOp::Arm{"a", {1.0}, 0, 0, 0, 0, false, 0});
  op.baseline = 2;
  op.deferred = true;
  ledger.Insert(EntryOf(op, options));
  const std::string bytes = EncodeLedger(ledger.Capture());
  storage::Decoder in(bytes);
  DecisionLedger restored(absl::Hours(1), 10, 10, Aggregation::kFirst);
  ASSERT_TRUE(DecodeLedger(&in, options, &restored).ok());
  ASSERT_NE(restored.Find("x"), nullptr);
  EXPECT_EQ(restored.Find("x")->baseline, 2);
  EXPECT_TRUE(restored.Find("x")->held());
  // Activated, and held with every arm reported (not completed: no slot to give up).
  DecisionLedger both(absl::Hours(1), 10, 10, Aggregation::kFirst);
  op.event_id = "active";
  both.Activate(both.Insert(EntryOf(op, options)));
  op.event_id = "held";
  op.baseline = -1;
  LedgerEntry* held = both.Insert(EntryOf(op, options));
  both.Report(held, 0, 1.0);
  EXPECT_EQ(both.OldestCompleted(), nullptr);
  const std::string both_bytes = EncodeLedger(both.Capture());
  storage::Decoder both_in(both_bytes);
  DecisionLedger back(absl::Hours(1), 10, 10, Aggregation::kFirst);
  ASSERT_TRUE(DecodeLedger(&both_in, options, &back).ok());
  ASSERT_NE(back.Find("active"), nullptr);
  EXPECT_TRUE(back.Find("active")->deferred);
  EXPECT_FALSE(back.Find("active")->held());
  EXPECT_EQ(back.Find("active")->baseline, 2);
  ASSERT_NE(back.Find("held"), nullptr);
  EXPECT_TRUE(back.Find("held")->held());
  EXPECT_EQ(back.Find("held")->baseline, -1);
  EXPECT_EQ(back.Find("held")->arms[0].reports, 1);
  EXPECT_EQ(back.OldestCompleted(), nullptr);  // restored complete, but held
  back.Activate(back.Find("held"));
  EXPECT_EQ(back.OldestCompleted(), back.Find("held"));
}

}  // namespace
}  // namespace graphbandit
