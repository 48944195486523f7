// Challengers (ModelOptions::shadow_of, core/model/shadow_feed.h) end to end in the engine: the
// configuration checks, the calls a challenger refuses, the decisions and rewards it follows,
// an exact identity (a challenger identical to its leader is estimated at exactly the leader's
// value), estimates that are kept across a restart, and a different challenger judged on the
// uniform share.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/model/engine.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

constexpr int kArms = 5;

// Five items whose expected rewards are 0.1, 0.3, 0.5, 0.7, 0.9 for item0..item4.
double Expected(int arm) { return 0.1 + 0.2 * arm; }
int ArmIndex(const std::string& id) { return id.back() - '0'; }

OwnedRequest Items(int round, const std::string& model = "") {
  OwnedRequest r;
  r.model = model;
  r.user = absl::StrCat("user", round % 3);
  for (int a = 0; a < kArms; ++a) {
    r.candidates.push_back({absl::StrCat("item", a), {std::cos(a), std::sin(a)}});
  }
  r.event_id = absl::StrCat("e", round);
  r.baseline = 1;
  return r;
}

// A model that learns each reward as it comes and fits nothing: two of them given the same
// decisions and rewards in the same order hold the same state.
ModelOptions Plain(const std::string& name, double epsilon, const std::string& shadow_of = "") {
  ModelOptions o;
  o.name = name;
  o.evaluation_epsilon = epsilon;
  o.shadow_of = shadow_of;
  o.refit.enabled = false;
  o.max_learn_batch = 1;
  o.max_learn_delay = absl::ZeroDuration();
  o.reward_window = absl::Seconds(600);
  return o;
}

absl::Status OpenStatus(std::vector<ModelOptions> models) {
  EngineOptions options;
  options.models = std::move(models);
  options.run_sweeper = false;
  return Engine::Open(options).status();
}

// Waits (at most 10 s) until `model` has learned `rewards` rewards.
void WaitLearned(Model* model, int64_t rewards) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (model->View()->rewards_learned < rewards && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(model->View()->rewards_learned, rewards) << model->name();
}

// Plays rounds [from, to) on the leader, rewarding each; with `lockstep`, waits after each
// reward until the leader and every challenger have learned it (so that each decides round t
// from the same state).
void Play(Engine& engine, int from, int to, bool lockstep) {
  Rng noise(5);
  Model* leader = *engine.FindModel("leader");
  for (int round = from; round < to; ++round) {
    auto decision = engine.SelectArm(Items(round, "leader").View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    const double reward = Expected(ArmIndex(decision->arms[0].arm_id)) + 0.1 * noise.Normal();
    // No model named: the reward is the leader's, although the challengers know the event too.
    auto result = engine.ReportReward({decision->event_id, reward, {}, ""});
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->outcome, RewardOutcome::kAccepted);
    EXPECT_EQ(result->model, "leader");
    if (lockstep) {
      ASSERT_TRUE(
          leader->WaitForVersion(result->model_version, absl::Now() + absl::Seconds(10)).ok());
      engine.DrainChallengers();
      for (const ShadowFeed* feed : engine.Challengers("leader")) {
        WaitLearned(feed->challenger(), round + 1);
      }
    }
  }
  engine.DrainChallengers();
}

TEST(ChallengerTest, ConfigurationIsChecked) {
  auto message = [](std::vector<ModelOptions> models) {
    absl::Status s = OpenStatus(std::move(models));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    return std::string(s.message());
  };
  EXPECT_NE(message({Plain("leader", 0.2), Plain("c", 0.0, "nobody")})
                .find("shadow_of names \"nobody\", which this server does not host"),
            std::string::npos);
  EXPECT_NE(message({Plain("leader", 0.0), Plain("c", 0.0, "leader")})
                .find("whose evaluation.epsilon is 0"),
            std::string::npos);
  EXPECT_NE(message({Plain("leader", 0.2), Plain("c", 0.2, "leader"), Plain("d", 0.0, "c")})
                .find("itself a challenger"),
            std::string::npos);
  EXPECT_NE(message({Plain("leader", 0.2), Plain("c", 0.0, "c")}).find("another model"),
            std::string::npos);
  ModelOptions apprentice = Plain("c", 0.2, "leader");
  apprentice.apprentice_start = true;
  EXPECT_NE(message({Plain("leader", 0.2), apprentice}).find("cannot start as an apprentice"),
            std::string::npos);
  EXPECT_NE(
      message({Plain("leader", 0.2), Plain("greedy", 0.0, "leader")}).find("give it another name"),
      std::string::npos);
  EXPECT_NE(message({Plain("c", 0.0, "default")}).find("the default model, which is not declared"),
            std::string::npos);
  {
    EngineOptions options;
    options.models = {Plain("leader", 0.2), Plain("c", 0.0, "leader")};
    options.default_model = "c";
    options.run_sweeper = false;
    absl::Status s = Engine::Open(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("make another model the default"), std::string::npos) << s;
  }
  {
    EngineOptions options;
    options.models = {Plain("leader", 0.2), Plain("c", 0.0, "leader")};
    options.node_id = "n1";
    options.shared_log = [](const ModelOptions&) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
      return absl::InternalError("not reached");
    };
    absl::Status s = Engine::Open(options).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("not available in cluster mode"), std::string::npos) << s;
  }
  EXPECT_TRUE(OpenStatus({Plain("leader", 0.2), Plain("c", 0.0, "leader")}).ok());
}

TEST(ChallengerTest, AChallengerServesNothingAndRewardsGoToItsLeader) {
  auto engine = OpenEngine({Plain("leader", 0.3), Plain("challenger", 0.0, "leader")});
  auto refused = engine->SelectArm(Items(0, "challenger").View());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("send SelectArm to \"leader\""), std::string::npos)
      << refused.status();
  auto decision = engine->SelectArm(Items(0, "leader").View());
  ASSERT_TRUE(decision.ok()) << decision.status();
  engine->DrainChallengers();
  Model* challenger = *engine->FindModel("challenger");
  EXPECT_TRUE(challenger->Knows("e0"));
  EXPECT_EQ(engine->ReportReward({"e0", 0.5, {}, "challenger"}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine->Activate("challenger", "e0").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(challenger->SetServingMode(true, absl::InfiniteFuture()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A retry of the leader's decision is not shadowed again; a slate is not shadowed at all.
  ASSERT_TRUE(engine->SelectArm(Items(0, "leader").View()).ok());
  OwnedRequest slate = Items(1, "leader");
  slate.slate_size = 2;
  auto slate_decision = engine->SelectArm(slate.View());
  ASSERT_TRUE(slate_decision.ok()) << slate_decision.status();
  auto reward = engine->ReportReward({"e0", 0.5, {}, ""});
  ASSERT_TRUE(reward.ok());
  EXPECT_EQ(reward->model, "leader");
  // The slate's rewards are the leader's alone: never shadowed, never forwarded.
  auto slate_reward = engine->ReportReward({"e1", {}, {{slate_decision->arms[0].arm_id, 1.0}}, ""});
  ASSERT_TRUE(slate_reward.ok()) << slate_reward.status();
  // A reward the leader refuses (an arm it did not choose) is not forwarded either.
  EXPECT_FALSE(engine->ReportReward({"e0", {}, {{"nope", 1.0}}, ""}).ok());
  engine->DrainChallengers();
  WaitLearned(challenger, 1);
  const ShadowCounts counts = engine->Challengers("leader")[0]->counts();
  EXPECT_EQ(counts.applied[ShadowCounts::kDecision], 1);
  EXPECT_EQ(counts.applied[ShadowCounts::kReward], 1);
  EXPECT_EQ(counts.failed[ShadowCounts::kDecision] + counts.dropped[ShadowCounts::kDecision], 0);
  EXPECT_EQ(counts.failed[ShadowCounts::kReward] + counts.dropped[ShadowCounts::kReward], 0);
  EXPECT_FALSE(challenger->Knows("e1"));
}

// After a stop, what a feed is sent is dropped and counted, rewards of shadowed decisions
// included (they used to vanish uncounted).
TEST(ChallengerTest, WhatArrivesAfterAStopIsCountedAsDropped) {
  auto engine = OpenEngine({Plain("leader", 0.3), Plain("challenger", 0.0, "leader")});
  ASSERT_TRUE(engine->SelectArm(Items(0, "leader").View()).ok());
  engine->DrainChallengers();
  Model* challenger = *engine->FindModel("challenger");
  ASSERT_TRUE(challenger->Knows("e0"));

  ShadowFeed feed(challenger);
  feed.RequestStop(absl::Now());
  feed.Rewarded({"e0", 0.5, {}, ""}, absl::Now());
  feed.Activated("e0", absl::Now());
  feed.Rewarded({"never-decided", 0.5, {}, ""}, absl::Now());  // not shadowed: ignored
  const OwnedRequest request = Items(1, "leader");
  Decision decision;  // as the leader answers one it explored on
  decision.explored = true;
  decision.event_id = "e1";
  decision.arms.push_back(ChosenArm{});
  decision.arms[0].candidate_index = 2;
  auto record = std::make_shared<EvaluationRecord>();
  record->propensity = 0.2;
  decision.evaluation = record;
  decision.logging_probabilities = std::make_shared<const std::vector<double>>(kArms, 0.2);
  feed.Decided(request.View(), decision, absl::Now());
  feed.Stop(absl::Now());
  const ShadowCounts counts = feed.counts();
  EXPECT_EQ(counts.dropped[ShadowCounts::kReward], 1);
  EXPECT_EQ(counts.dropped[ShadowCounts::kActivation], 1);
  EXPECT_EQ(counts.dropped[ShadowCounts::kDecision], 1);
}

// The queue's byte budget counts what a decision's copy holds, named features' strings
// included (a request of long category texts used to count as a few dozen bytes).
TEST(ChallengerTest, AQueuedDecisionsSizeCountsItsNamedFeatures) {
  OwnedRequest plain = Items(0);
  const size_t small = ShadowFeed::EstimatedBytes(plain.View());
  const std::string long_text(1 << 20, 'x');
  std::vector<FeatureNamespace> named(1);
  named[0].name = "item";
  named[0].features.push_back({"description", FeatureValue{}});
  named[0].features[0].value.text = long_text;
  named[0].features.push_back({"tags", FeatureValue{}});
  named[0].features[1].value.texts = {long_text, long_text};
  DecisionRequest request = plain.View();
  request.candidates[0].named_features = named;
  const size_t large = ShadowFeed::EstimatedBytes(request);
  EXPECT_GE(large, small + 3 * long_text.size());
  EXPECT_LT(large, small + 3 * long_text.size() + 4096);
  request.context_features = named;
  EXPECT_GE(ShadowFeed::EstimatedBytes(request), large + 3 * long_text.size());
}

TEST(ChallengerTest, ATwinOfTheLeaderIsEstimatedAtExactlyTheLeadersValue) {
  // The same configuration, and each round decided from the same state: the twin's own policy
  // is the leader's logging policy, so every weight is exactly 1 and its IPS and SNIPS
  // estimates are the mean reward, as the leader's deployed value is. (Its DR estimate is not:
  // with weights of 1 it is mean(sum_a pi(a) q(a) + r - q(a_i)), another unbiased estimate.)
  auto engine = OpenEngine({Plain("leader", 0.3), Plain("twin", 0.3, "leader")});
  Play(*engine, 0, 150, /*lockstep=*/true);
  Model* leader = *engine->FindModel("leader");
  Model* twin = *engine->FindModel("twin");
  const std::shared_ptr<const ModelView> lv = leader->View(), tv = twin->View();
  EXPECT_EQ(tv->rewards_learned, 150);
  ASSERT_TRUE(tv->own_value.has_value());
  const PolicyValue& own = *tv->own_value;
  const PolicyValue& deployed = lv->policy_values[0];
  EXPECT_EQ(own.decisions, 150);
  EXPECT_NEAR(own.effective_sample_size, 150.0, 1e-9);
  EXPECT_NEAR(own.ips.estimate, deployed.ips.estimate, 1e-12);
  EXPECT_NEAR(own.snips.estimate, deployed.ips.estimate, 1e-12);
  // Its interval is at least as wide: its bounds allow for the largest weight the leader's
  // probabilities made possible (core/policy/evaluation.h), which the twin never needed.
  EXPECT_LE(own.ips.lower, deployed.ips.lower + 1e-12);
  EXPECT_GE(own.ips.upper, deployed.ips.upper - 1e-12);
  EXPECT_GT(own.dr.upper, deployed.ips.estimate);
  EXPECT_LT(own.dr.lower, deployed.ips.estimate);
  // The twin's own view of the leader's policy ("deployed": the rewards of what was served) is
  // the leader's, and so are its uniform, greedy and baseline estimates (same state, same means).
  for (size_t p = 0; p < lv->policy_values.size(); ++p) {
    EXPECT_NEAR(tv->policy_values[p].dr.estimate, lv->policy_values[p].dr.estimate, 1e-9) << p;
    EXPECT_EQ(tv->policy_values[p].decisions, lv->policy_values[p].decisions) << p;
  }
  // The leader has no own value: it served its own policy.
  EXPECT_FALSE(lv->own_value.has_value());
}

TEST(ChallengerTest, EstimatesAreKeptAcrossACrashAndARestart) {
  // A crash leaves the challenger's state as its snapshot plus the log after it: what it had
  // learned from the shadowed decisions and rewards comes back, from the snapshot's sums and
  // from replaying its own log.
  TempDir dir, crash;
  PolicyValue before;
  std::string image;
  {
    auto engine =
        OpenEngine({Plain("leader", 0.3), Plain("challenger", 0.0, "leader")}, dir.path());
    Play(*engine, 0, 120, /*lockstep=*/false);
    Model* challenger = *engine->FindModel("challenger");
    WaitLearned(challenger, 120);
    if (absl::StatusOr<uint64_t> s = challenger->Snapshot(); !s.ok()) FAIL() << s.status();
    Play(*engine, 120, 160, /*lockstep=*/false);
    WaitLearned(challenger, 160);
    challenger->WaitForFits();
    ASSERT_TRUE(challenger->View()->own_value.has_value());
    before = *challenger->View()->own_value;
    EXPECT_EQ(before.decisions, 160);
    image = CrashCopy(dir.path(), crash.path() + "/image");
  }
  auto engine = OpenEngine({Plain("leader", 0.3), Plain("challenger", 0.0, "leader")}, image);
  Model* challenger = *engine->FindModel("challenger");
  EXPECT_GT(challenger->recovery().records_replayed, 0);
  ASSERT_TRUE(challenger->View()->own_value.has_value());
  const PolicyValue after = *challenger->View()->own_value;
  EXPECT_EQ(after.decisions, before.decisions);
  EXPECT_EQ(after.ips.estimate, before.ips.estimate);
  EXPECT_EQ(after.snips.lower, before.snips.lower);
  EXPECT_EQ(after.dr.upper, before.dr.upper);
}

TEST(ChallengerTest, AGreedyChallengerOfAnExploringLeaderIsJudgedBetter) {
  // The leader explores half the time; the challenger (no share, little exploration) settles on
  // item4, worth 0.9. Its estimated value (an average over its learning, from 0.5 at the start)
  // must exceed the leader's deployed value and come near 0.9.
  ModelOptions leader = Plain("leader", 0.5);
  leader.exploration = 3.0;
  ModelOptions challenger = Plain("sharp", 0.0, "leader");
  challenger.exploration = 0.05;
  auto engine = OpenEngine({leader, challenger});
  Play(*engine, 0, 600, /*lockstep=*/true);  // deterministic
  Model* c = *engine->FindModel("sharp");
  WaitLearned(c, 600);
  const std::optional<PolicyValue> own = c->View()->own_value;
  ASSERT_TRUE(own.has_value());
  ASSERT_TRUE(own->valid);
  const PolicyValue deployed = (*engine->FindModel("leader"))->View()->policy_values[0];
  EXPECT_GT(own->dr.estimate, deployed.dr.upper) << own->dr.estimate;
  EXPECT_GT(own->dr.estimate, 0.75);
  EXPECT_LT(own->dr.lower, 0.9);
}

}  // namespace
}  // namespace graphbandit
