// DecisionLedger::JoinReward: one lookup tells what the event is and which reports are accepted.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "core/ledger/decision_ledger.h"

namespace graphbandit {
namespace {

std::unique_ptr<LedgerEntry> Entry(const std::string& id, std::initializer_list<const char*> arms) {
  auto entry = std::make_unique<LedgerEntry>();
  entry->event_id = id;
  for (const char* arm : arms) entry->arms.push_back(LedgerArm{arm, {1.0}, 0, 0.0});
  return entry;
}

RewardRequest Arms(const std::string& id, std::vector<std::pair<std::string, double>> rewards) {
  RewardRequest r;
  r.event_id = id;
  r.arm_rewards = std::move(rewards);
  return r;
}

TEST(RewardJoinTest, UnknownOpenAndClosedEvents) {
  DecisionLedger ledger(absl::Seconds(10), 10, 10, Aggregation::kFirst);
  EXPECT_EQ(ledger.JoinReward(Arms("nope", {{"a", 1.0}})).event, RewardJoin::Event::kUnknown);
  LedgerEntry* open = ledger.Insert(Entry("e1", {"a"}));
  ledger.Close(ledger.Insert(Entry("e2", {"a"})), ClosedAs::kExpired, absl::UnixEpoch());
  ledger.Close(ledger.Insert(Entry("e3", {"a"})), ClosedAs::kCompleted, absl::UnixEpoch());
  const RewardJoin join = ledger.JoinReward(Arms("e1", {{"a", 0.5}}));
  EXPECT_EQ(join.event, RewardJoin::Event::kOpen);
  EXPECT_EQ(join.entry, open);
  ASSERT_EQ(join.reports.size(), 1u);
  EXPECT_TRUE(join.reports[0].accepted);
  EXPECT_TRUE(join.reports[0].learn_now);
  EXPECT_EQ(ledger.JoinReward(Arms("e2", {{"a", 1.0}})).event, RewardJoin::Event::kExpired);
  EXPECT_EQ(ledger.JoinReward(Arms("e3", {{"a", 1.0}})).event, RewardJoin::Event::kCompleted);
}

TEST(RewardJoinTest, NothingChangesUntilTheLoggedReportsAreRecorded) {
  DecisionLedger ledger(absl::Seconds(10), 10, 10, Aggregation::kFirst);
  LedgerEntry* entry = ledger.Insert(Entry("e", {"a", "b"}));
  RewardJoin join = ledger.JoinReward(Arms("e", {{"a", 1.0}, {"b", 2.0}}));
  ASSERT_EQ(join.reports.size(), 2u);
  EXPECT_EQ(entry->unreported, 2);
  ledger.RecordJoined(join, 1);  // only the first was logged
  EXPECT_EQ(entry->arms[0].reports, 1);
  EXPECT_EQ(entry->arms[1].reports, 0);
  join = ledger.JoinReward(Arms("e", {{"a", 3.0}, {"b", 2.0}}));
  ASSERT_EQ(join.reports.size(), 2u);
  EXPECT_FALSE(join.reports[0].accepted);  // FIRST: a has its reward
  EXPECT_TRUE(join.reports[1].accepted);
}

TEST(RewardJoinTest, OtherRulesAcceptRepeatsAndLearnAtClosing) {
  DecisionLedger ledger(absl::Seconds(10), 10, 10, Aggregation::kSum);
  ledger.Insert(Entry("e", {"a"}));
  ledger.RecordJoined(ledger.JoinReward(Arms("e", {{"a", 1.0}})), 1);
  const RewardJoin join = ledger.JoinReward(Arms("e", {{"a", 2.0}}));
  ASSERT_EQ(join.reports.size(), 1u);
  EXPECT_TRUE(join.reports[0].accepted);
  EXPECT_FALSE(join.reports[0].learn_now);
  ledger.RecordJoined(join, 1);
  EXPECT_DOUBLE_EQ(join.entry->arms[0].aggregate, 3.0);
}

TEST(RewardJoinTest, ReportsThatDoNotFitTheDecision) {
  DecisionLedger ledger(absl::Seconds(10), 10, 10, Aggregation::kFirst);
  ledger.Insert(Entry("e", {"a", "b"}));
  RewardRequest single;
  single.event_id = "e";
  single.reward = 1.0;
  EXPECT_TRUE(ledger.JoinReward(single).single_reward_for_slate);
  const RewardJoin join = ledger.JoinReward(Arms("e", {{"a", 1.0}, {"zzz", 1.0}}));
  EXPECT_EQ(join.unknown_arm, "zzz");
  EXPECT_TRUE(join.reports.empty());
}

}  // namespace
}  // namespace graphbandit
