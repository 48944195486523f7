// A model's evaluation share and off-policy estimates end to end: the share and the reported
// probabilities, estimates that cover what is known to be true, and estimates that are the same
// after a replay of the log, after a snapshot, and with decisions still open across a restart.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/engine.h"
#include "core/model/model_ops.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

constexpr int kArms = 5;

// Five items whose expected rewards are known: 0.1, 0.3, 0.5, 0.7, 0.9 for item0..item4.
double Expected(int arm) { return 0.1 + 0.2 * arm; }

OwnedRequest Items(int round) {
  OwnedRequest r;
  r.user = absl::StrCat("user", round % 3);
  for (int a = 0; a < kArms; ++a) {
    r.candidates.push_back({absl::StrCat("item", a), {std::cos(a), std::sin(a)}});
  }
  r.event_id = absl::StrCat("e", round);
  r.baseline = 1;  // the application would show item1
  return r;
}

ModelOptions Evaluated(double epsilon) {
  ModelOptions options;
  options.name = "default";
  options.evaluation_epsilon = epsilon;
  options.reward_window = absl::Seconds(600);
  // No hyper-parameter fits: these tests are about what is logged and estimated, and Play waits
  // for each reward to be learned, which would otherwise also wait for every fit.
  options.refit.enabled = false;
  options.max_learn_delay = absl::ZeroDuration();  // learned as soon as it is applied
  return options;
}

int ArmIndex(const std::string& id) { return id.back() - '0'; }

// Decides rounds [from, to) and rewards each decision whose round is below `reward_below`;
// adds the rewards to *rewards. Each reward is learned before the next decision: what every
// decision sees is then the same however the writer is scheduled, so the statistical checks
// below give the same answer on a busy machine.
void Play(Engine& engine, int from, int to, int reward_below, std::vector<double>* probabilities,
          int* explored, std::vector<double>* rewards = nullptr) {
  Model* model = *engine.FindModel("");
  Rng noise(77);
  for (int round = from; round < to; ++round) {
    auto decision = engine.SelectArm(Items(round).View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    ASSERT_EQ(decision->arms.size(), 1u);
    if (probabilities != nullptr) probabilities->push_back(*decision->arms[0].probability);
    if (explored != nullptr) *explored += decision->explored ? 1 : 0;
    if (round < reward_below) {
      const double reward = Expected(ArmIndex(decision->arms[0].arm_id)) + 0.1 * noise.Normal();
      ASSERT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
      model->WaitForFits();
      if (rewards != nullptr) rewards->push_back(reward);
    }
  }
}

void RewardRounds(Engine& engine, int from, int to) {
  for (int round = from; round < to; ++round) {
    // The same reward the uninterrupted run gives: a function of the round alone.
    Rng noise(1000 + round);
    auto decision = engine.SelectArm(Items(round).View());  // a retry: the stored decision
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(decision->replayed);
    const double reward = Expected(ArmIndex(decision->arms[0].arm_id)) + 0.1 * noise.Normal();
    ASSERT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
  }
}

std::vector<PolicyValue> Values(Engine& engine) {
  Model* model = *engine.FindModel("");
  model->WaitForFits();
  return model->View()->policy_values;
}

void ExpectSame(const std::vector<PolicyValue>& a, const std::vector<PolicyValue>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].decisions, b[i].decisions) << i;
    EXPECT_EQ(a[i].ips.estimate, b[i].ips.estimate) << i;
    EXPECT_EQ(a[i].snips.upper, b[i].snips.upper) << i;
    EXPECT_EQ(a[i].dr.lower, b[i].dr.lower) << i;
    EXPECT_EQ(a[i].effective_sample_size, b[i].effective_sample_size) << i;
  }
}

TEST(EvaluationModelTest, WithoutTheShareOnlyTheDeployedPolicyIsEstimated) {
  auto engine = OpenEngine({Evaluated(0.0)});
  std::vector<double> probabilities, rewards;
  int explored = 0;
  Play(*engine, 0, 200, 200, &probabilities, &explored, &rewards);
  EXPECT_EQ(explored, 0);
  // UCB: 1, or a tie's share 1/k with k the items tied for the best score.
  for (double p : probabilities) {
    bool valid = false;
    for (int k = 1; k <= kArms; ++k) valid = valid || std::abs(p - 1.0 / k) < 1e-15;
    EXPECT_TRUE(valid) << p;
  }
  // Without the share nothing new is logged with a decision.
  auto decision = engine->SelectArm(Items(999).View());
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->evaluation, nullptr);
  EXPECT_FALSE(decision->explored);
  const std::vector<PolicyValue> values = Values(*engine);
  ASSERT_EQ(values.size(), 4u);
  EXPECT_EQ(values[0].decisions, 200);
  EXPECT_TRUE(values[0].valid);
  // The deployed policy's value is the mean of its rewards, with the sample's interval.
  double mean = 0.0, var = 0.0;
  for (double r : rewards) mean += r / rewards.size();
  for (double r : rewards) var += (r - mean) * (r - mean) / (rewards.size() - 1);
  const double half = 1.959963984540054 * std::sqrt(var / rewards.size());
  const double n = static_cast<double>(rewards.size());
  for (const ValueInterval* v : {&values[0].ips, &values[0].snips, &values[0].dr}) {
    EXPECT_NEAR(v->estimate, mean, 1e-12);
    // SNIPS's delta method divides by n where the sample variance divides by n - 1.
    const double want = v == &values[0].snips ? half * std::sqrt((n - 1) / n) : half;
    EXPECT_NEAR(v->upper - v->estimate, want, 1e-9);
  }
  for (int t = 1; t < 4; ++t) {
    EXPECT_EQ(values[t].decisions, 0) << t;
    EXPECT_FALSE(values[t].valid) << t;
  }
}

TEST(EvaluationModelTest, TheShareIsDrawnAndItsProbabilitiesAreTheMixture) {
  const double epsilon = 0.4;
  auto engine = OpenEngine({Evaluated(epsilon)});
  std::vector<double> probabilities;
  int explored = 0;
  const int rounds = 2000;
  Play(*engine, 0, rounds, rounds, &probabilities, &explored);
  EXPECT_NEAR(static_cast<double>(explored) / rounds, epsilon,
              5 * std::sqrt(epsilon * (1 - epsilon) / rounds));
  // (1 - epsilon) q + epsilon / K, with q the policy's probability: 0 for an arm the share drew
  // that the policy would not have chosen, else 1/k with k the arms tied for the best score
  // (every item while the prior scores them alike; pairs early on, the items on either side of
  // a rewarded one on the features' circle).
  for (double p : probabilities) {
    const double q = (p - epsilon / kArms) / (1 - epsilon);
    bool valid = std::abs(q) < 1e-14;
    for (int k = 1; k <= kArms; ++k) valid = valid || std::abs(q - 1.0 / k) < 1e-14;
    EXPECT_TRUE(valid) << p;
  }
  Model* model = *engine->FindModel("");
  model->WaitForFits();
  EXPECT_EQ(model->View()->decisions_explored, explored);
}

// What the uniform policy and the baseline earn is known here: every decision has the same five
// items. Their intervals must cover it, by every estimator.
TEST(EvaluationModelTest, EstimatesCoverTheKnownValues) {
  auto engine = OpenEngine({Evaluated(0.3)});
  Play(*engine, 0, 3000, 3000, nullptr, nullptr);
  const std::vector<PolicyValue> values = Values(*engine);
  double uniform = 0.0;
  for (int a = 0; a < kArms; ++a) uniform += Expected(a) / kArms;
  const double truth[4] = {NAN, uniform, NAN, Expected(1)};
  for (int t : {1, 3}) {
    const PolicyValue& v = values[t];
    EXPECT_EQ(v.decisions, 3000);
    for (const ValueInterval* i : {&v.ips, &v.snips, &v.dr}) {
      EXPECT_LE(i->lower, truth[t]) << EvaluatedPolicyName(v.policy);
      EXPECT_GE(i->upper, truth[t]) << EvaluatedPolicyName(v.policy);
      EXPECT_LT(i->upper - i->lower, 0.2) << EvaluatedPolicyName(v.policy);
    }
  }
  // The model learns item4 is best: its greedy policy and its deployed one beat the others.
  EXPECT_GT(values[2].dr.estimate, values[1].dr.upper);
  EXPECT_GT(values[0].ips.estimate, values[3].dr.upper);
}

TEST(EvaluationModelTest, EstimatesAreRebuiltByReplayAndKeptBySnapshots) {
  TempDir dir;
  std::vector<PolicyValue> before;
  {
    auto engine = OpenEngine({Evaluated(0.3)}, dir.path());
    Play(*engine, 0, 300, 300, nullptr, nullptr);
    before = Values(*engine);
    ASSERT_EQ(before[1].decisions, 300);
    TempDir crash;  // the log alone, replayed
    CrashCopy(dir.path(), crash.path() + "/copy");
    auto replayed = Reopen(crash.path() + "/copy");
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    EXPECT_EQ((*(*replayed)->FindModel(""))->recovery().snapshot_seq, 0u);
    ExpectSame(Values(**replayed), before);
  }
  auto engine = OpenEngine({Evaluated(0.3)}, dir.path());  // from the shutdown snapshot
  EXPECT_GT((*engine->FindModel(""))->recovery().snapshot_seq, 0u);
  ExpectSame(Values(*engine), before);
}

// Decisions still open at a shutdown keep their records in the snapshot's ledger: rewarded after
// the restart, they count as they would have without it.
TEST(EvaluationModelTest, OpenDecisionsKeepTheirRecordsAcrossARestart) {
  std::vector<PolicyValue> uninterrupted;
  {
    auto engine = OpenEngine({Evaluated(0.3)});
    Play(*engine, 0, 100, 0, nullptr, nullptr);
    RewardRounds(*engine, 0, 100);
    uninterrupted = Values(*engine);
  }
  TempDir dir;
  {
    auto engine = OpenEngine({Evaluated(0.3)}, dir.path());
    Play(*engine, 0, 100, 0, nullptr, nullptr);
    RewardRounds(*engine, 0, 40);
  }
  auto engine = OpenEngine({Evaluated(0.3)}, dir.path());
  RewardRounds(*engine, 40, 100);
  ExpectSame(Values(*engine), uninterrupted);
  EXPECT_EQ(Values(*engine)[1].decisions, 100);
}

TEST(EvaluationModelTest, RecordsRoundTripThroughTheLogCoding) {
  DecideOp decide;
  decide.event_id = "e";
  decide.user = "u";
  decide.arms.resize(1);
  decide.arms[0].arm_id = "a";
  decide.explored = true;
  Eigen::VectorXd mean(3);
  mean << 0.1, 0.4, 0.2;
  decide.evaluation =
      std::make_shared<EvaluationRecord>(MakeEvaluationRecord(mean, 0, 0.1, true, 2, true));
  auto back = DecodeOp(static_cast<uint8_t>(OpType::kDecide), EncodeOp(ModelOp(decide)));
  ASSERT_TRUE(back.ok()) << back.status();
  const auto& decoded = std::get<DecideOp>(*back);
  EXPECT_TRUE(decoded.explored);
  ASSERT_NE(decoded.evaluation, nullptr);
  EXPECT_TRUE(*decoded.evaluation == *decide.evaluation);
  // A record on a slate is refused.
  DecideOp slate = decide;
  slate.arms.resize(2);
  EXPECT_FALSE(DecodeOp(static_cast<uint8_t>(OpType::kDecide), EncodeOp(ModelOp(slate))).ok());

  // Every candidate, as logged for offline evaluation.
  auto logged = std::make_shared<LoggedCandidates>();
  logged->ids = {"a", "b", "c"};
  logged->features = {{1.0, 2.0}, {3.0, 4.0}, {-5.0, 0.5}};
  logged->probabilities = {0.1, 0.85, 0.05};
  logged->means = {0.3, -0.25, 1e-3};
  DecideOp with_all = decide;
  with_all.logged = logged;
  const std::string bytes = EncodeOp(ModelOp(with_all));
  auto all_back = DecodeOp(static_cast<uint8_t>(OpType::kDecide), bytes);
  ASSERT_TRUE(all_back.ok()) << all_back.status();
  const auto& all = std::get<DecideOp>(*all_back);
  ASSERT_NE(all.logged, nullptr);
  EXPECT_EQ(all.logged->ids, logged->ids);
  EXPECT_EQ(all.logged->features, logged->features);
  EXPECT_EQ(all.logged->probabilities, logged->probabilities);
  EXPECT_EQ(all.logged->means, logged->means);
  EXPECT_TRUE(*all.evaluation == *decide.evaluation);
  // Every truncation of the section is refused, as is a chosen index past its candidates.
  const size_t plain = EncodeOp(ModelOp(decide)).size();
  for (size_t cut = plain + 1; cut < bytes.size(); ++cut) {
    EXPECT_FALSE(DecodeOp(static_cast<uint8_t>(OpType::kDecide), bytes.substr(0, cut)).ok()) << cut;
  }
  with_all.arms[0].candidate_index = 3;
  EXPECT_FALSE(DecodeOp(static_cast<uint8_t>(OpType::kDecide), EncodeOp(ModelOp(with_all))).ok());

  RewardOp reward;
  reward.event_id = "e";
  reward.learn.resize(1);
  reward.learn[0].event_id = "e";
  reward.learn[0].evaluation = decide.evaluation;
  auto reward_back = DecodeOp(static_cast<uint8_t>(OpType::kReward), EncodeOp(ModelOp(reward)));
  ASSERT_TRUE(reward_back.ok()) << reward_back.status();
  const auto& learned = std::get<RewardOp>(*reward_back).learn;
  ASSERT_EQ(learned.size(), 1u);
  ASSERT_NE(learned[0].evaluation, nullptr);
  EXPECT_TRUE(*learned[0].evaluation == *decide.evaluation);
  EXPECT_EQ(learned[0].candidates, nullptr);
}

// Apprentice mode (core/policy/apprentice.h) at the model: the new model logs its start, serves
// the baseline (item1) until its lift over it shows, and switches; replaying the log alone
// switches at the same reward, by the rule logged with the start even when the configuration
// has changed since; a model with state is not made an apprentice by a later configuration.
TEST(EvaluationModelTest, ApprenticeSwitchIsReplayedAtTheSameReward) {
  ModelOptions options = Evaluated(0.3);
  options.apprentice_start = true;
  options.apprentice.min_decisions = 50;
  TempDir dir, crash;
  std::optional<SwitchRecord> switched;
  int rounds = 0;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(model->View()->apprentice);
    ASSERT_EQ(model->View()->last_switch->reason, ServingSwitch::kStart);
    Rng noise(5);
    for (; rounds < 3000 && model->View()->apprentice; ++rounds) {
      auto decision = engine->SelectArm(Items(rounds).View());
      ASSERT_TRUE(decision.ok()) << decision.status();
      const int arm = ArmIndex(decision->arms[0].arm_id);
      if (!decision->explored) {
        ASSERT_EQ(arm, 1) << "round " << rounds;
      }
      ASSERT_TRUE(
          engine->ReportReward({decision->event_id, Expected(arm) + 0.1 * noise.Normal(), {}, ""})
              .ok());
      model->WaitForWriter();
    }
    ASSERT_FALSE(model->View()->apprentice) << "no switch in " << rounds << " rounds";
    switched = model->View()->last_switch;
    ASSERT_EQ(switched->reason, ServingSwitch::kLift);
    EXPECT_GE(switched->decisions, 50);
    EXPECT_GT(switched->lower, 0.0);
    CrashCopy(dir.path(), crash.path() + "/copy");
  }
  // The log alone, under a configuration that would never switch and would not start one.
  ModelOptions changed = options;
  changed.apprentice_start = false;
  changed.apprentice.margin = 100.0;
  changed.apprentice.min_decisions = 1000000;
  EngineOptions reopen;
  reopen.models = {changed};
  reopen.state_dir = crash.path() + "/copy";
  auto replayed = Engine::Open(reopen);
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  Model* model = *(*replayed)->FindModel("");
  EXPECT_EQ(model->recovery().snapshot_seq, 0u);
  EXPECT_FALSE(model->View()->apprentice);
  EXPECT_EQ(model->View()->last_switch, switched);
  EXPECT_EQ(model->View()->apprentice_rule.min_decisions, 50);
  // A model with rewards that never was an apprentice is not made one by its configuration.
  TempDir serving;
  {
    auto engine = OpenEngine({Evaluated(0.3)}, serving.path());
    Play(*engine, 0, 20, 20, nullptr, nullptr);
  }
  auto engine = OpenEngine({options}, serving.path());
  EXPECT_FALSE((*engine->FindModel(""))->View()->apprentice);
  EXPECT_FALSE((*engine->FindModel(""))->View()->last_switch.has_value());
}

}  // namespace
}  // namespace graphbandit
