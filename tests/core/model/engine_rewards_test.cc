// The reward join in-process (core/model/engine.h): aggregation rules, default rewards, slates,
// tombstones.
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

TEST(EngineTest, AggregationRulesLearnTheCombinedRewardWhenTheWindowEnds) {
  struct Case {
    Aggregation rule;
    double expected;
  };
  for (const Case& c : {Case{Aggregation::kSum, 0.3 + 0.5 + 0.1}, Case{Aggregation::kMax, 0.5},
                        Case{Aggregation::kLast, 0.1}}) {
    SCOPED_TRACE(AggregationName(c.rule));
    ModelOptions options;
    options.aggregation = c.rule;
    options.reward_window = absl::Seconds(10);
    auto engine = ManualClockEngine(options);
    Model* model = *engine->FindModel("");
    const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
    ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
    for (double reward : {0.3, 0.5, 0.1}) {
      auto result = engine->ReportRewardAt({"e", reward, {}, ""}, t0 + absl::Seconds(1),
                                           absl::InfiniteFuture());
      ASSERT_TRUE(result.ok());
      EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);  // every report counts
    }
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 0);  // nothing learned before the window ends
    EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(9)), 0);
    EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
    // Exactly what learning the aggregate once teaches.
    EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(c.expected));
    auto late =
        engine->ReportRewardAt({"e", 1.0, {}, ""}, t0 + absl::Seconds(11), absl::InfiniteFuture());
    ASSERT_TRUE(late.ok());
    EXPECT_EQ(late->outcome, RewardOutcome::kLate);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
  }
}

TEST(EngineTest, FirstRuleLearnsAtOnceAndRepeatsAreDuplicatesEvenAfterTheWindow) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  auto first = engine->ReportRewardAt({"e", 0.3, {}, ""}, t0, absl::InfiniteFuture());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->outcome, RewardOutcome::kAccepted);
  auto again = engine->ReportRewardAt({"e", 0.9, {}, ""}, t0, absl::InfiniteFuture());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, RewardOutcome::kDuplicate);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(0.3));
  // "e" and the probe's decision close; only the probe's counts as expired without a reward.
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 2);
  auto after =
      engine->ReportRewardAt({"e", 0.9, {}, ""}, t0 + absl::Seconds(11), absl::InfiniteFuture());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->outcome, RewardOutcome::kDuplicate);  // complete, not late
  EXPECT_EQ(model->Stats().expired_decisions, 1);
}

TEST(EngineTest, DefaultRewardIsLearnedForDecisionsThatGetNone) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.25;
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_EQ(model->Stats().expired_decisions, 1);
  EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(0.25));
  auto late =
      engine->ReportRewardAt({"e", 1.0, {}, ""}, t0 + absl::Seconds(12), absl::InfiniteFuture());
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->outcome, RewardOutcome::kLate);
}

// A report's values are checked before its decision is looked up, whatever became of the
// decision: a reward beyond the bound is refused for a closed decision too, and a NaN for an
// event that no model of several knows.
TEST(EngineTest, AReportIsCheckedBeforeItsDecisionIsLookedUp) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  options.reward_bound = 2.0;
  auto engine = ManualClockEngine(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
  auto beyond =
      engine->ReportRewardAt({"e", 3.0, {}, ""}, t0 + absl::Seconds(11), absl::InfiniteFuture());
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kInvalidArgument) << beyond.status();
  EXPECT_THAT(beyond.status().message(), HasSubstr("limits.reward_bound"));
  auto within =
      engine->ReportRewardAt({"e", 2.0, {}, ""}, t0 + absl::Seconds(11), absl::InfiniteFuture());
  ASSERT_TRUE(within.ok()) << within.status();
  EXPECT_EQ(within->outcome, RewardOutcome::kLate);

  ModelOptions news, ads;
  news.name = "news";
  ads.name = "ads";
  auto two = OpenEngine({news, ads});
  auto nan = two->ReportReward({"nobody", std::nan(""), {}, ""});
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument) << nan.status();
  EXPECT_THAT(nan.status().message(), HasSubstr("reward is NaN"));
  auto unknown = two->ReportReward({"nobody", 1e12, {}, ""});  // no model's bound applies
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ(unknown->outcome, RewardOutcome::kUnknownEvent);
}

TEST(EngineTest, SlatesGetPerSlotRewardsAndDefaultsForTheSilentSlots) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.0;
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  OwnedRequest slate = ThreeArms();
  slate.slate_size = 3;
  slate.event_id = "slate";
  auto decision = engine->SelectArmAt(slate.View(), t0, absl::InfiniteFuture());
  ASSERT_TRUE(decision.ok());
  auto clicked = engine->ReportRewardAt(
      {"slate", std::nullopt, {{decision->arms[1].arm_id, 1.0}}, ""}, t0, absl::InfiniteFuture());
  ASSERT_TRUE(clicked.ok());
  ASSERT_EQ(clicked->arm_outcomes.size(), 1u);
  EXPECT_EQ(clicked->arm_outcomes[0].first, decision->arms[1].arm_id);
  EXPECT_EQ(clicked->arm_outcomes[0].second, RewardOutcome::kAccepted);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);  // FIRST: the slot's reward at once
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 3);  // the two silent slots learn the default
}

// Semi-bandit feedback (CGP §2.1): the k rewards of a slate teach a model exactly what k
// decisions of one arm each, rewarded with the same values in the same order, teach it — on the
// Nystrom state (EK_UCB) and on the exact one (GP_UCB), with a prior mean and the CGP widths.
TEST(EngineTest, SlateRewardsChangeTheStateExactlyAsSingleRewards) {
  for (PolicyKind policy : {PolicyKind::kEkUcb, PolicyKind::kGpUcb}) {
    for (ExplorationWidth width : {ExplorationWidth::kStddev, ExplorationWidth::kBayesUcb}) {
      SCOPED_TRACE(absl::StrCat(PolicyName(policy), " width ", static_cast<int>(width)));
      ModelOptions options;
      options.policy = policy;
      options.exploration_width = width;
      options.prior_mean = 0.3;
      options.refit.enabled = false;  // no fit timing in the comparison
      // One reward per learning step on both sides: a slate's rewards would otherwise be learned
      // as one batch (learned_state.h), which rounds differently and draws KORS on the
      // dictionary before the batch (tests/core/learner/posterior_test.cc compares batches).
      options.max_learn_batch = 1;
      auto slates = OpenEngine({options});
      auto singles = OpenEngine({options});
      const std::vector<double> rewards = {0.9, -0.2, 0.45};
      for (int round = 0; round < 4; ++round) {
        const std::string user = absl::StrCat("user", round % 2);
        OwnedRequest slate = ThreeArms(user);
        slate.slate_size = 3;
        slate.event_id = absl::StrCat("slate", round);
        auto decision = slates->SelectArm(slate.View());
        ASSERT_TRUE(decision.ok()) << decision.status();
        ASSERT_EQ(decision->arms.size(), 3u);
        RewardRequest report{slate.event_id, std::nullopt, {}, ""};
        for (size_t k = 0; k < 3; ++k) {
          report.arm_rewards.emplace_back(decision->arms[k].arm_id, rewards[k] + 0.1 * round);
        }
        auto outcome = slates->ReportReward(report);
        ASSERT_TRUE(outcome.ok()) << outcome.status();
        for (const auto& [arm, result] : outcome->arm_outcomes) {
          EXPECT_EQ(result, RewardOutcome::kAccepted);
        }
        // The same arms, one decision each, in the slate's order.
        for (size_t k = 0; k < 3; ++k) {
          OwnedRequest one;
          one.user = user;
          const OwnedRequest all = ThreeArms(user);
          for (const auto& candidate : all.candidates) {
            if (candidate.first == decision->arms[k].arm_id) one.candidates = {candidate};
          }
          one.event_id = absl::StrCat("single", round, "-", k);
          auto single = singles->SelectArm(one.View());
          ASSERT_TRUE(single.ok()) << single.status();
          auto result = singles->ReportReward({one.event_id, rewards[k] + 0.1 * round, {}, ""});
          ASSERT_TRUE(result.ok()) << result.status();
          EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);
        }
      }
      Model* a = *slates->FindModel("");
      Model* b = *singles->FindModel("");
      a->WaitForFits();
      b->WaitForFits();
      EXPECT_EQ(a->View()->rewards_learned, 12);
      EXPECT_EQ(b->View()->rewards_learned, 12);
      const std::vector<std::string> users = {"user0", "user1", "stranger"};
      const std::vector<double> from_slates = Probe(*slates, users);
      const std::vector<double> from_singles = Probe(*singles, users);
      ASSERT_EQ(from_slates.size(), from_singles.size());
      for (size_t i = 0; i < from_slates.size(); ++i) {
        EXPECT_DOUBLE_EQ(from_slates[i], from_singles[i]) << "probe value " << i;
      }
      // And they did learn: the prior mean alone would give 0.3 everywhere.
      EXPECT_NE(from_slates[0], 0.3);
    }
  }
}

TEST(EngineTest, TombstonesAreBoundedAndOlderEventsBecomeUnknown) {
  ModelOptions options;
  options.reward_window = absl::Seconds(1);
  options.max_tombstones = 2;
  auto engine = ManualClockEngine(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(engine->SelectArmAt(OneArm(id).View(), t0, absl::InfiniteFuture()).ok());
  }
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(2)), 3);
  auto outcome = [&](const char* id) {
    auto result =
        engine->ReportRewardAt({id, 1.0, {}, ""}, t0 + absl::Seconds(3), absl::InfiniteFuture());
    EXPECT_TRUE(result.ok());
    return result->outcome;
  };
  EXPECT_EQ(outcome("a"), RewardOutcome::kUnknownEvent);  // its tombstone was evicted
  EXPECT_EQ(outcome("b"), RewardOutcome::kLate);
  EXPECT_EQ(outcome("c"), RewardOutcome::kLate);
  // A closed event id cannot be reused for a new decision.
  EXPECT_EQ(engine->SelectArmAt(OneArm("c").View(), t0 + absl::Seconds(3), absl::InfiniteFuture())
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace graphbandit

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

// ACCEPTED is durable, not yet published: a decision right after may predate the reward.
// ReportReward's model_version and SelectArm's min_model_version close that gap.
TEST(EngineTest, ReadYourWritesWaitsForTheVersionThatLearnedTheReward) {
  auto engine = OpenEngine();
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(engine->SelectArm(OneArm("r1").View()).ok());
  model->WaitForWriter();
  // Hold the writer after its next batch, so that the reward below is queued, not applied.
  absl::Notification release;
  std::atomic<bool> hold{true};
  model->SetAfterApplyHookForTesting([&] {
    if (hold) release.WaitForNotification();
  });
  ASSERT_TRUE(engine->SelectArm(OneArm("blocker").View()).ok());
  absl::SleepFor(absl::Milliseconds(50));  // the writer reaches the hook
  auto reward = engine->ReportReward({"r1", 1.0, {}, ""});
  ASSERT_TRUE(reward.ok()) << reward.status();
  ASSERT_EQ(reward->outcome, RewardOutcome::kAccepted);
  ASSERT_GT(reward->model_version, 0u);

  OwnedRequest probe = OneArm("");
  DecisionRequest stale_request = probe.View();
  auto stale = engine->SelectArm(stale_request);
  ASSERT_TRUE(stale.ok());
  EXPECT_LT(stale->model_version, reward->model_version);  // served before it learned

  DecisionRequest fresh_request = probe.View();
  fresh_request.min_model_version = reward->model_version;
  auto early = engine->SelectArm(fresh_request, absl::Now() + absl::Milliseconds(100));
  EXPECT_EQ(early.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(early.status().message()), HasSubstr("published version"));

  hold = false;
  release.Notify();
  auto fresh = engine->SelectArm(fresh_request, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_GE(fresh->model_version, reward->model_version);
  EXPECT_EQ(model->View()->rewards_learned, 1);

  // A duplicate names a version that has it too; a version never recorded is refused.
  auto duplicate = engine->ReportReward({"r1", 1.0, {}, ""});
  ASSERT_TRUE(duplicate.ok());
  EXPECT_EQ(duplicate->outcome, RewardOutcome::kDuplicate);
  EXPECT_GE(duplicate->model_version, reward->model_version);
  fresh_request.min_model_version = 1'000'000;
  EXPECT_EQ(engine->SelectArm(fresh_request).status().code(), absl::StatusCode::kInvalidArgument);
  model->SetAfterApplyHookForTesting(nullptr);
}

// A shutdown does not wait for calls waiting for a version behind a busy writer: they end.
TEST(EngineTest, ShutdownEndsCallsWaitingForAVersion) {
  auto engine = OpenEngine();
  Model* model = *engine->FindModel("");
  auto* release = new absl::Notification;  // freed below, after the writer left the hook
  std::atomic<bool> hold{true};
  model->SetAfterApplyHookForTesting([&hold, release] {
    if (hold) release->WaitForNotification();
  });
  auto decided = engine->SelectArm(OneArm("v").View());
  ASSERT_TRUE(decided.ok());
  absl::SleepFor(absl::Milliseconds(50));  // the writer holds in the hook
  auto reward = engine->ReportReward({"v", 1.0, {}, ""});
  ASSERT_TRUE(reward.ok());
  OwnedRequest probe = OneArm("");
  DecisionRequest request = probe.View();
  request.min_model_version = reward->model_version;
  absl::Status waited;
  std::thread waiter([&] { waited = engine->SelectArm(request).status(); });  // no deadline
  absl::SleepFor(absl::Milliseconds(100));
  engine->BeginShutdown();
  waiter.join();
  EXPECT_EQ(waited.code(), absl::StatusCode::kUnavailable);
  hold = false;
  release->Notify();
  model->SetAfterApplyHookForTesting(nullptr);
  EXPECT_TRUE(engine->Shutdown());
  delete release;
}

// Decisions and staged rewards wake the writer once per group, not once each
// (Model::DeferrableLocked): the writer wakes for the first into an empty queue and applies
// what came up to kMaxApplyDelay later, so a stream of decisions takes at most one batch per
// kMaxApplyDelay of the stream (about one per decision when every append wakes the writer: the
// decisions come 0.2 ms apart). A reward nobody waits for is still learned, without any call
// prodding the writer.
TEST(EngineTest, TheWriterAppliesDecisionsAndRewardsInGroups) {
  std::atomic<int> batches{0};  // outlives the engine, whose shutdown may still apply a batch
  ModelOptions options;
  options.max_learn_delay = absl::Milliseconds(50);
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(engine->SelectArm(OneArm("first").View()).ok());
  model->WaitForWriter();
  model->SetAfterApplyHookForTesting([&] { ++batches; });
  constexpr int kDecisions = 60;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kDecisions; ++i) {
    ASSERT_TRUE(engine->SelectArm(OneArm(absl::StrCat("d", i)).View()).ok());
    absl::SleepFor(absl::Microseconds(200));
  }
  const absl::Duration stream = absl::Now() - start;
  model->WaitForWriter();  // it waits; it does not wake the writer
  const int decision_batches = batches.load();
  EXPECT_GE(decision_batches, 1);
  EXPECT_LE(decision_batches, stream / Model::kMaxApplyDelay + 2)
      << "about one wake-up per decision; the decisions took " << stream;

  auto reward = engine->ReportReward({"d7", 0.5, {}, ""});
  ASSERT_TRUE(reward.ok()) << reward.status();
  ASSERT_EQ(reward->outcome, RewardOutcome::kAccepted);
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (model->View()->rewards_learned < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(model->View()->rewards_learned, 1);
  model->SetAfterApplyHookForTesting(nullptr);
}

}  // namespace
}  // namespace graphbandit
