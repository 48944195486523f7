// The records of a replicated model (core/model/replicated_records.h): their encoding, and how
// a replica resolves each against its ledger. A Replica here is what a cluster node's writer
// does with the stream: decode, resolve, apply the resulting operations with recovery's code.
#include "core/model/replicated_records.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/base/random.h"
#include "core/model/ledger_records.h"
#include "core/model/recovery.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

constexpr int64_t kT0 = 1'700'000'000'000'000;  // Unix micros
constexpr int64_t kSecond = 1'000'000;

ModelOptions Options() {
  ModelOptions options;
  options.name = "m";
  options.reward_window = absl::Seconds(10);
  return options;
}

class Replica {
 public:
  explicit Replica(const ModelOptions& options) : options_(options) {
    auto fresh = NewModelState(options);
    EXPECT_TRUE(fresh.ok()) << fresh.status();
    state_ = std::move(fresh->state);
    ledger_ = std::move(fresh->ledger);
  }

  // A replica restarted from another's snapshot (the state, then the ledger).
  static std::unique_ptr<Replica> FromSnapshot(const ModelOptions& options,
                                               const std::string& snapshot, uint64_t seq) {
    auto replica = std::make_unique<Replica>(options);
    storage::Decoder in(snapshot);
    EXPECT_TRUE(replica->state_->Load(&in).ok());
    EXPECT_TRUE(DecodeLedger(&in, options, replica->ledger_.get()).ok());
    EXPECT_TRUE(in.done());
    replica->seq_ = seq;
    return replica;
  }

  // Applies the next stream message.
  Resolution Apply(const std::string& message) {
    ++seq_;
    auto record = DecodeReplicated(message);
    EXPECT_TRUE(record.ok()) << record.status();
    if (!record.ok()) return {};
    auto capacity = [this](const LedgerEntry& entry, size_t) {
      if (state_->registry()->Find(entry.user_id) < 0 &&
          state_->registry()->size() >= options_.max_users) {
        return absl::ResourceExhaustedError("users");
      }
      return absl::OkStatus();
    };
    Resolution resolution = Resolve(*record, options_, *ledger_, capacity);
    for (const ModelOp& op : resolution.ops) {
      ApplyToLedger(op, options_, ledger_.get());
      EdgeEditResult ignored;
      EXPECT_TRUE(state_->Apply(op, &ignored).ok());
    }
    // As the writer does after each batch of records: the staged rewards are learned by a
    // LearnOp (learned_state.h, "Batches"), here one per record.
    if (state_->staged() > 0) {
      EdgeEditResult ignored;
      EXPECT_TRUE(state_->Apply(LearnOp{state_->staged_total()}, &ignored).ok());
    }
    return resolution;
  }

  std::string Snapshot() const { return state_->Save(seq_) + EncodeLedger(ledger_->Capture()); }
  uint64_t seq() const { return seq_; }
  const LearnedState& state() const { return *state_; }
  const DecisionLedger& ledger() const { return *ledger_; }

 private:
  const ModelOptions options_;
  std::unique_ptr<LearnedState> state_;
  std::unique_ptr<DecisionLedger> ledger_;
  uint64_t seq_ = 0;
};

std::string Fix(int arm_dim) { return EncodeReplicated(ModelOp(FixDimensionsOp{0, arm_dim})); }

DecideOp DecisionOp(const std::string& event_id, const std::string& user, int64_t created,
                    const std::vector<std::pair<std::string, std::vector<double>>>& arms,
                    uint64_t fingerprint = 0) {
  DecideOp op;
  op.event_id = event_id;
  op.fingerprint = fingerprint;
  op.created_micros = created;
  op.user = user;
  for (size_t i = 0; i < arms.size(); ++i) {
    DecideOp::Arm arm;
    arm.arm_id = arms[i].first;
    arm.features = arms[i].second;
    arm.candidate_index = static_cast<int32_t>(i);
    arm.mean = 0.25 * static_cast<double>(i);
    op.arms.push_back(std::move(arm));
  }
  return op;
}

std::string Decide(const std::string& event_id, const std::string& user, int64_t created,
                   uint64_t fingerprint = 0) {
  return EncodeReplicated(
      ModelOp(DecisionOp(event_id, user, created, {{"a", {1.0, 0.0}}}, fingerprint)));
}

std::string Report(const std::string& event_id, double reward, int64_t received) {
  ReportOp op;
  op.request.event_id = event_id;
  op.request.reward = reward;
  op.received_micros = received;
  return EncodeReplicated(op);
}

std::string Expire(int64_t cutoff) { return EncodeReplicated(ExpireOp{cutoff}); }

TEST(ReplicatedRecordsTest, EveryRecordKindSurvivesItsEncoding) {
  ReportOp slate;
  slate.request.event_id = "e\x01\xff";
  slate.request.arm_rewards = {{"a", 0.5}, {"", -2.0}};
  slate.received_micros = -7;  // before 1970: the encoding keeps the sign
  auto decoded = DecodeReplicated(EncodeReplicated(slate));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& report = std::get<ReportOp>(*decoded);
  EXPECT_EQ(report.request.event_id, slate.request.event_id);
  EXPECT_FALSE(report.request.reward.has_value());
  EXPECT_EQ(report.request.arm_rewards, slate.request.arm_rewards);
  EXPECT_EQ(report.received_micros, -7);

  decoded = DecodeReplicated(Report("x", 0.75, kT0));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<ReportOp>(*decoded).request.reward, 0.75);
  EXPECT_TRUE(std::get<ReportOp>(*decoded).request.arm_rewards.empty());

  decoded = DecodeReplicated(Expire(kT0 + 3));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<ExpireOp>(*decoded).cutoff_micros, kT0 + 3);

  decoded = DecodeReplicated(EncodeReplicated(ActivationRequestOp{"held\x01", -3}));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(std::get<ActivationRequestOp>(*decoded).event_id, "held\x01");
  EXPECT_EQ(std::get<ActivationRequestOp>(*decoded).received_micros, -3);

  decoded = DecodeReplicated(EncodeReplicated(ModelOp(AddUsersOp{{"u1", "u2"}})));
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(std::get<AddUsersOp>(std::get<ModelOp>(*decoded)).users,
            (std::vector<std::string>{"u1", "u2"}));
}

TEST(ReplicatedRecordsTest, MalformedMessagesAreDataLoss) {
  const std::string report = Report("event", 1.0, kT0);
  const std::string activation = EncodeReplicated(ActivationRequestOp{"held", kT0});
  for (const std::string& bad :
       {std::string(), std::string(1, '\xc8'), report.substr(0, report.size() - 1), report + "x",
        Expire(kT0).substr(0, 5), std::string("\x21\x01", 2),
        activation.substr(0, activation.size() - 1), activation + "x", activation.substr(0, 1)}) {
    auto decoded = DecodeReplicated(bad);
    ASSERT_FALSE(decoded.ok()) << absl::CHexEscape(bad);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << decoded.status();
  }
}

TEST(ReplicatedRecordsTest, AReportRetriedThroughAnotherNodeIsLearnedOnce) {
  Replica replica(Options());
  replica.Apply(Fix(2));
  Resolution decided = replica.Apply(Decide("e1", "alice", kT0));
  ASSERT_TRUE(decided.status.ok());
  ASSERT_TRUE(decided.decision.has_value());
  EXPECT_EQ(decided.decision->event_id, "e1");
  EXPECT_FALSE(decided.decision->replayed);

  Resolution first = replica.Apply(Report("e1", 1.0, kT0 + kSecond));
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_EQ(first.reward.outcome, RewardOutcome::kAccepted);
  EXPECT_EQ(first.reward.model, "m");
  EXPECT_TRUE(first.learned_now);
  ASSERT_EQ(first.ops.size(), 1u);
  EXPECT_EQ(replica.state().rewards_learned(), 1);

  // The same report, published again by the node the client retried against.
  Resolution retry = replica.Apply(Report("e1", 1.0, kT0 + 2 * kSecond));
  ASSERT_TRUE(retry.status.ok());
  EXPECT_EQ(retry.reward.outcome, RewardOutcome::kDuplicate);
  EXPECT_FALSE(retry.learned_now);
  EXPECT_TRUE(retry.ops.empty());
  EXPECT_EQ(replica.state().rewards_learned(), 1);
}

TEST(ReplicatedRecordsTest, AReportBeforeAnyDecisionOfItsIdIsUnknownAndChangesNothing) {
  Replica replica(Options());
  replica.Apply(Fix(2));
  Resolution early = replica.Apply(Report("e9", 1.0, kT0));
  ASSERT_TRUE(early.status.ok());
  EXPECT_EQ(early.reward.outcome, RewardOutcome::kUnknownEvent);
  EXPECT_EQ(early.reward.model, "");
  EXPECT_TRUE(early.ops.empty());
  Resolution decided = replica.Apply(Decide("e9", "alice", kT0 + 1));
  ASSERT_TRUE(decided.status.ok());
  EXPECT_EQ(replica.ledger().size(), 1);
  EXPECT_EQ(replica.ledger().pending(), 1);
  EXPECT_EQ(replica.state().rewards_learned(), 0);
}

// Lateness follows the time a report was received, not where the expiry lands in the stream.
TEST(ReplicatedRecordsTest, LatenessIsJudgedByReceiveTimeWhereverTheExpiryLands) {
  ModelOptions options = Options();
  options.aggregation = Aggregation::kSum;
  Replica replica(options);
  replica.Apply(Fix(2));
  ASSERT_TRUE(replica.Apply(Decide("e1", "alice", kT0)).status.ok());
  // Received 11 s after a 10 s window, applied before any expiry: late, nothing recorded.
  Resolution late = replica.Apply(Report("e1", 2.0, kT0 + 11 * kSecond));
  ASSERT_TRUE(late.status.ok());
  EXPECT_EQ(late.reward.outcome, RewardOutcome::kLate);
  ASSERT_EQ(late.reward.arm_outcomes.size(), 1u);
  EXPECT_EQ(late.reward.arm_outcomes[0].second, RewardOutcome::kLate);
  EXPECT_TRUE(late.ops.empty());
  // Received within the window, applied later (its node was slower to publish): accepted.
  Resolution on_time = replica.Apply(Report("e1", 3.0, kT0 + 9 * kSecond));
  EXPECT_EQ(on_time.reward.outcome, RewardOutcome::kAccepted);
  EXPECT_FALSE(on_time.learned_now);  // SUM learns when the window closes
  EXPECT_EQ(replica.state().rewards_learned(), 0);
  // The expiry closes it and teaches the sum of what was accepted (3, not 5).
  Resolution expiry = replica.Apply(Expire(kT0 + 10 * kSecond));
  ASSERT_EQ(expiry.ops.size(), 1u);
  const auto& close = std::get<CloseOp>(expiry.ops[0]);
  EXPECT_EQ(close.how, static_cast<uint8_t>(ClosedAs::kExpired));
  ASSERT_EQ(close.learn.size(), 1u);
  EXPECT_EQ(close.learn[0].reward, 3.0);
  EXPECT_EQ(replica.state().rewards_learned(), 1);
  // Closed now: whatever its receive time, a report is late.
  EXPECT_EQ(replica.Apply(Report("e1", 1.0, kT0 + kSecond)).reward.outcome, RewardOutcome::kLate);
}

TEST(ReplicatedRecordsTest, UnderFirstARepeatAfterTheWindowIsADuplicateNotLate) {
  Replica replica(Options());
  replica.Apply(Fix(2));
  ASSERT_TRUE(replica.Apply(Decide("e1", "alice", kT0)).status.ok());
  EXPECT_EQ(replica.Apply(Report("e1", 1.0, kT0 + kSecond)).reward.outcome,
            RewardOutcome::kAccepted);
  EXPECT_EQ(replica.Apply(Report("e1", 1.0, kT0 + 60 * kSecond)).reward.outcome,
            RewardOutcome::kDuplicate);
  ASSERT_TRUE(replica.Apply(Decide("e2", "alice", kT0)).status.ok());
  EXPECT_EQ(replica.Apply(Report("e2", 1.0, kT0 + 60 * kSecond)).reward.outcome,
            RewardOutcome::kLate);
  EXPECT_EQ(replica.state().rewards_learned(), 1);
}

TEST(ReplicatedRecordsTest, EachDecisionClosesOnceHoweverManyExpiriesArrive) {
  ModelOptions options = Options();
  options.default_reward = 0.0;
  Replica replica(options);
  replica.Apply(Fix(2));
  ASSERT_TRUE(replica.Apply(Decide("e1", "alice", kT0)).status.ok());
  ASSERT_TRUE(replica.Apply(Decide("e2", "bob", kT0 + 5 * kSecond)).status.ok());
  ASSERT_TRUE(replica.Apply(Decide("e3", "carol", kT0 + 6 * kSecond)).status.ok());
  EXPECT_TRUE(replica.Apply(Expire(kT0 + 9 * kSecond)).ops.empty());
  ASSERT_TRUE(replica.Apply(Report("e2", 1.0, kT0 + 6 * kSecond)).status.ok());
  // Two nodes' expiries with overlapping cut-offs: e1 and e2 close once, e3 stays open.
  Resolution first = replica.Apply(Expire(kT0 + 15 * kSecond));
  Resolution second = replica.Apply(Expire(kT0 + 15 * kSecond + 1));
  ASSERT_EQ(first.ops.size(), 2u);
  EXPECT_EQ(std::get<CloseOp>(first.ops[0]).event_id, "e1");
  EXPECT_EQ(std::get<CloseOp>(first.ops[1]).event_id, "e2");
  // e1 had no reward: it teaches the default; e2 (FIRST) learned its reward on arrival.
  EXPECT_EQ(std::get<CloseOp>(first.ops[0]).learn.size(), 1u);
  EXPECT_EQ(std::get<CloseOp>(first.ops[0]).how, static_cast<uint8_t>(ClosedAs::kExpired));
  EXPECT_TRUE(std::get<CloseOp>(first.ops[1]).learn.empty());
  EXPECT_EQ(std::get<CloseOp>(first.ops[1]).how, static_cast<uint8_t>(ClosedAs::kCompleted));
  EXPECT_TRUE(second.ops.empty());
  EXPECT_EQ(replica.ledger().size(), 1);
  EXPECT_EQ(replica.state().rewards_learned(), 2);
}

TEST(ReplicatedRecordsTest, DecisionRetriesGetTheStoredDecisionAndReusedIdsAreRefused) {
  Replica replica(Options());
  replica.Apply(Fix(2));
  Resolution first = replica.Apply(Decide("e1", "alice", kT0, /*fingerprint=*/7));
  ASSERT_TRUE(first.status.ok());
  // The client retried on another node, which decided again (another arm) before it had
  // applied the first: the retry gets the first decision, and nothing is entered twice.
  DecideOp again = DecisionOp("e1", "alice", kT0 + 1, {{"b", {0.0, 1.0}}}, 7);
  Resolution retry = replica.Apply(EncodeReplicated(ModelOp(again)));
  ASSERT_TRUE(retry.status.ok());
  ASSERT_TRUE(retry.decision.has_value());
  EXPECT_TRUE(retry.decision->replayed);
  ASSERT_EQ(retry.decision->arms.size(), 1u);
  EXPECT_EQ(retry.decision->arms[0].arm_id, "a");
  EXPECT_TRUE(retry.ops.empty());
  EXPECT_EQ(replica.ledger().size(), 1);

  Resolution other = replica.Apply(Decide("e1", "alice", kT0 + 2, /*fingerprint=*/8));
  EXPECT_EQ(other.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(other.decision.has_value());
  // Generated ids carry no fingerprint: a second record with one is another request.
  ASSERT_TRUE(replica.Apply(Decide("g1", "alice", kT0)).status.ok());
  EXPECT_EQ(replica.Apply(Decide("g1", "bob", kT0)).status.code(),
            absl::StatusCode::kAlreadyExists);

  ASSERT_FALSE(replica.Apply(Expire(kT0 + 20 * kSecond)).ops.empty());
  Resolution closed = replica.Apply(Decide("e1", "alice", kT0, 7));
  EXPECT_EQ(closed.status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(closed.status.message().find("closed"), absl::string_view::npos) << closed.status;
  EXPECT_EQ(replica.ledger().size(), 0);
}

TEST(ReplicatedRecordsTest, AFullLedgerMakesRoomFromCompletedDecisionsOrRefuses) {
  ModelOptions options = Options();
  options.max_decisions = 2;
  Replica replica(options);
  replica.Apply(Fix(2));
  ASSERT_TRUE(replica.Apply(Decide("e1", "alice", kT0)).status.ok());
  ASSERT_TRUE(replica.Apply(Decide("e2", "alice", kT0)).status.ok());
  Resolution refused = replica.Apply(Decide("e3", "alice", kT0));
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted) << refused.status;
  EXPECT_TRUE(refused.ops.empty());
  ASSERT_EQ(replica.Apply(Report("e1", 1.0, kT0)).reward.outcome, RewardOutcome::kAccepted);
  Resolution admitted = replica.Apply(Decide("e3", "alice", kT0 + 1));
  ASSERT_TRUE(admitted.status.ok()) << admitted.status;
  ASSERT_EQ(admitted.ops.size(), 2u);
  EXPECT_EQ(std::get<CloseOp>(admitted.ops[0]).event_id, "e1");
  EXPECT_EQ(std::get<DecideOp>(admitted.ops[1]).event_id, "e3");
  EXPECT_EQ(replica.Apply(Report("e1", 1.0, kT0)).reward.outcome, RewardOutcome::kDuplicate);
}

TEST(ReplicatedRecordsTest, InvalidReportsAndCapacityRefusalsChangeNothing) {
  ModelOptions options = Options();
  options.max_users = 1;
  options.reward_bound = 5.0;
  Replica replica(options);
  replica.Apply(Fix(2));
  ASSERT_TRUE(replica.Apply(Decide("e1", "alice", kT0)).status.ok());
  ASSERT_TRUE(replica.Apply(Decide("e2", "bob", kT0)).status.ok());
  Resolution beyond = replica.Apply(Report("e1", 6.0, kT0));
  EXPECT_EQ(beyond.status.code(), absl::StatusCode::kInvalidArgument);
  // A report's own values are judged before the join, with this replica's bound: the same for
  // an event it does not know.
  Resolution beyond_unknown = replica.Apply(Report("nobody", -6.0, kT0));
  EXPECT_EQ(beyond_unknown.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(beyond_unknown.status.message().find("limits.reward_bound"), absl::string_view::npos);
  ReportOp wrong_arm;
  wrong_arm.request.event_id = "e1";
  wrong_arm.request.arm_rewards = {{"zzz", 1.0}};
  wrong_arm.received_micros = kT0;
  Resolution unknown_arm = replica.Apply(EncodeReplicated(wrong_arm));
  EXPECT_EQ(unknown_arm.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown_arm.status.message().find("zzz"), absl::string_view::npos);
  ASSERT_EQ(replica.Apply(Report("e1", 1.0, kT0)).reward.outcome, RewardOutcome::kAccepted);
  // bob would be a second user beyond limits.max_users = 1.
  Resolution full = replica.Apply(Report("e2", 1.0, kT0));
  EXPECT_EQ(full.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(full.ops.empty());
  EXPECT_EQ(replica.state().rewards_learned(), 1);
  EXPECT_EQ(replica.ledger().pending(), 1);  // e2 still waits
}

// A full ledger makes room from a completed decision chosen the same way by a replica that
// restarted from a snapshot (decisions completed in another order than they were made).
TEST(ReplicatedRecordsTest, ARestartedReplicaMakesRoomFromTheSameDecision) {
  ModelOptions options = Options();
  options.max_decisions = 3;
  Replica a(options);
  for (const std::string& message :
       {Fix(2), Decide("e1", "u", kT0), Decide("e2", "u", kT0 + kSecond),
        Decide("e3", "u", kT0 + 2 * kSecond), Report("e2", 1.0, kT0 + 3 * kSecond),
        Report("e1", 1.0, kT0 + 3 * kSecond)}) {
    a.Apply(message);
  }
  auto restarted = Replica::FromSnapshot(options, a.Snapshot(), a.seq());
  Resolution from_a = a.Apply(Decide("e4", "u", kT0 + 4 * kSecond));
  Resolution from_restarted = restarted->Apply(Decide("e4", "u", kT0 + 4 * kSecond));
  ASSERT_EQ(from_a.ops.size(), 2u);
  ASSERT_EQ(from_restarted.ops.size(), 2u);
  EXPECT_EQ(std::get<CloseOp>(from_a.ops[0]).event_id, "e1");  // the first made of the two
  EXPECT_EQ(std::get<CloseOp>(from_restarted.ops[0]).event_id, "e1");
  EXPECT_EQ(a.Snapshot(), restarted->Snapshot());
}

// The ledger is in stream order: a decision made earlier but published later still closes when
// its window ends.
TEST(ReplicatedRecordsTest, ADecisionPublishedOutOfCreationOrderClosesInTime) {
  Replica replica(Options());
  replica.Apply(Fix(2));
  replica.Apply(Decide("later-clock", "u", kT0 + 5 * kSecond));
  replica.Apply(Decide("early", "u", kT0));
  Resolution expiry = replica.Apply(Expire(kT0 + 11 * kSecond));
  ASSERT_EQ(expiry.ops.size(), 1u);
  EXPECT_EQ(std::get<CloseOp>(expiry.ops[0]).event_id, "early");
  EXPECT_EQ(replica.ledger().size(), 1);
}

// Many nodes' records interleaved in one stream, with retries, reports for unknown ids, late
// reports and expiries: two replicas end identical, a replica restarted from a snapshot in the
// middle ends identical to both, and every accepted report was learned exactly once.
TEST(ReplicatedRecordsTest, ReplicasAndARestartedReplicaConvergeAndLearnEachRewardOnce) {
  for (Aggregation aggregation : {Aggregation::kFirst, Aggregation::kSum}) {
    ModelOptions options = Options();
    options.aggregation = aggregation;
    options.max_decisions = 40;
    options.default_reward = 0.0;
    Rng rng(aggregation == Aggregation::kFirst ? 11 : 12);
    std::vector<std::string> stream = {Fix(2)};
    std::vector<std::string> ids;
    int64_t now = kT0;
    for (int i = 0; i < 600; ++i) {
      now += static_cast<int64_t>(rng.Uniform() * 0.2 * kSecond);
      const double u = rng.Uniform();
      if (u < 0.35 || ids.empty()) {
        const std::string id = absl::StrCat("n", i % 3, "-", i);
        const double x = rng.Normal();
        stream.push_back(EncodeReplicated(ModelOp(
            DecisionOp(id, absl::StrCat("u", rng.UniformInt(5)), now, {{"a", {x, 1.0 - x}}}))));
        ids.push_back(id);
      } else if (u < 0.9) {
        // A report, its receive time up to 12 s after now (some late), sometimes published
        // twice (a retry through another node), sometimes for an id nobody decided.
        const std::string id = rng.Uniform() < 0.05 ? "nobody" : ids[rng.UniformInt(ids.size())];
        const std::string report =
            Report(id, rng.Normal(), now - static_cast<int64_t>(rng.Uniform() * 12 * kSecond));
        stream.push_back(report);
        if (rng.Uniform() < 0.2) stream.push_back(report);
      } else {
        stream.push_back(Expire(now - 10 * kSecond));
      }
    }
    Replica a(options), b(options);
    std::vector<Resolution> answers;
    int64_t accepted = 0;
    for (const std::string& message : stream) {
      answers.push_back(a.Apply(message));
      b.Apply(message);
      for (const auto& [arm, outcome] : answers.back().reward.arm_outcomes) {
        accepted += outcome == RewardOutcome::kAccepted ? 1 : 0;
      }
    }
    const size_t half = stream.size() / 2;
    Replica first_half(options);
    for (size_t i = 0; i < half; ++i) first_half.Apply(stream[i]);
    auto restarted = Replica::FromSnapshot(options, first_half.Snapshot(), first_half.seq());
    for (size_t i = half; i < stream.size(); ++i) {
      Resolution r = restarted->Apply(stream[i]);
      EXPECT_EQ(r.status, answers[i].status) << i;
      EXPECT_EQ(r.reward.outcome, answers[i].reward.outcome) << i;
      EXPECT_EQ(r.ops.size(), answers[i].ops.size()) << i;
    }
    EXPECT_EQ(a.Snapshot(), b.Snapshot());
    EXPECT_EQ(a.Snapshot(), restarted->Snapshot());
    // Close what is left: every accepted report, and a default for each decision without one,
    // is learned once (FIRST learns on arrival, SUM one aggregate per reported arm).
    a.Apply(Expire(now + 60 * kSecond));
    EXPECT_EQ(a.ledger().size(), 0);
    int64_t decisions = 0, reported = 0;
    std::map<std::string, bool> has_report;
    for (size_t i = 0; i < stream.size(); ++i) {
      if (answers[i].decision.has_value() && !answers[i].decision->replayed) {
        ++decisions;
        has_report[answers[i].decision->event_id] = false;
      }
    }
    for (size_t i = 0; i < stream.size(); ++i) {
      auto record = DecodeReplicated(stream[i]);
      if (const auto* report = std::get_if<ReportOp>(&*record)) {
        if (answers[i].reward.outcome == RewardOutcome::kAccepted) {
          has_report[report->request.event_id] = true;
        }
      }
    }
    for (const auto& [id, reported_once] : has_report) reported += reported_once ? 1 : 0;
    EXPECT_GT(accepted, 50);
    EXPECT_GT(decisions - reported, 5);  // some decisions closed with the default
    const int64_t expected = aggregation == Aggregation::kFirst
                                 ? accepted + (decisions - reported)
                                 : decisions;  // SUM: one aggregate or one default per decision
    EXPECT_EQ(a.state().rewards_learned(), expected);
  }
}

}  // namespace
}  // namespace graphbandit
