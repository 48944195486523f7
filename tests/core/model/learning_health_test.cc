// The learning checks (core/model/learning_health.h): each fails exactly when its condition
// holds and says why; a full dictionary is reported, not failed; the recent mean's weights; the
// signal-to-noise against its formula.
#include "core/model/learning_health.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/graph/green_function.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

const LearningHealth::Check& Find(const LearningHealth& health, const std::string& name) {
  for (const LearningHealth::Check& check : health.checks) {
    if (check.name == name) return check;
  }
  static const LearningHealth::Check missing{"missing", false, "no such check"};
  ADD_FAILURE() << "no check " << name;
  return missing;
}

LearningInputs Healthy() {
  LearningInputs in;
  in.queued_operations = 10;
  in.max_queued = 100;
  in.signal_to_noise = 1.0;
  in.dictionary_size = 500;
  in.max_dictionary_size = 1000;
  in.last_fit = FitOutcome::kApplied;
  in.recent_reward = 0.6;
  in.recent_weight = 500.0;
  PolicyValue baseline;
  baseline.policy = EvaluatedPolicy::kBaseline;
  baseline.valid = true;
  baseline.dr = {0.5, 0.45, 0.55};
  in.policy_values.push_back(baseline);
  return in;
}

TEST(LearningHealthTest, AHealthyModelPassesEveryCheckInOrder) {
  const LearningHealth health = AssessLearning(Healthy());
  ASSERT_EQ(health.checks.size(), 4u);
  const char* names[] = {"keeps_up", "signal", "fits", "reward_trend"};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(health.checks[i].name, names[i]);
    EXPECT_TRUE(health.checks[i].ok) << names[i];
    EXPECT_EQ(health.checks[i].problem, "");
  }
  EXPECT_TRUE(health.healthy());
}

TEST(LearningHealthTest, EachCheckFailsOnItsOwnCondition) {
  LearningInputs in = Healthy();
  in.queued_operations = 50;  // half the bound
  LearningHealth health = AssessLearning(in);
  EXPECT_FALSE(Find(health, "keeps_up").ok);
  EXPECT_THAT(Find(health, "keeps_up").problem, HasSubstr("50 operations wait"));
  EXPECT_FALSE(health.healthy());
  in.queued_operations = 49;
  EXPECT_TRUE(AssessLearning(in).healthy());

  in = Healthy();
  in.signal_to_noise = 0.02;
  health = AssessLearning(in);
  EXPECT_FALSE(Find(health, "signal").ok);
  EXPECT_THAT(Find(health, "signal").problem, HasSubstr("signal-to-noise 0.02"));
  in.signal_to_noise.reset();  // a policy without hyper-parameters: nothing to judge
  EXPECT_TRUE(AssessLearning(in).healthy());

  in = Healthy();
  EXPECT_FALSE(AssessLearning(in).dictionary_full);
  in.dictionary_size = 1000;
  EXPECT_TRUE(AssessLearning(in).dictionary_full);
  EXPECT_TRUE(AssessLearning(in).healthy()) << "a full dictionary is information, not a failure";

  in = Healthy();
  in.last_fit = FitOutcome::kFailed;
  in.last_fit_error = "the likelihood could not be evaluated";
  health = AssessLearning(in);
  EXPECT_FALSE(Find(health, "fits").ok);
  EXPECT_THAT(Find(health, "fits").problem, HasSubstr("could not be evaluated"));
  in.last_fit = FitOutcome::kUnchanged;
  EXPECT_TRUE(AssessLearning(in).healthy());

  in = Healthy();
  in.recent_reward = 0.44;  // below the baseline's lower bound, 0.45
  health = AssessLearning(in);
  EXPECT_FALSE(Find(health, "reward_trend").ok);
  EXPECT_THAT(Find(health, "reward_trend").problem, HasSubstr("below what baseline earns"));
  in.recent_weight = 50.0;  // too few rewards to say
  EXPECT_TRUE(AssessLearning(in).healthy());
  in.recent_weight = 500.0;
  in.policy_values[0].valid = false;  // no estimate yet
  EXPECT_TRUE(AssessLearning(in).healthy());
}

TEST(LearningHealthTest, RecentRewardsWeighByHalfLife) {
  RecentRewards recent;
  EXPECT_EQ(recent.weight(), 0.0);
  for (int i = 0; i < 1000; ++i) recent.Add(1.0);
  // A geometric sum: weight (1 - q^n) / (1 - q) with q^1000 = 1/2.
  const double q = std::exp2(-1.0 / kRecentRewardHalfLife);
  EXPECT_NEAR(recent.weight(), 0.5 / (1 - q), 1e-6);
  EXPECT_NEAR(recent.mean(), 1.0, 1e-12);
  for (int i = 0; i < 1000; ++i) recent.Add(0.0);
  // The first thousand now weigh half as much as before, against the new ones' full weight.
  EXPECT_NEAR(recent.mean(), 0.25 / 0.75, 1e-9);
}

TEST(LearningHealthTest, SignalToNoiseFollowsItsFormula) {
  UserGraph graph;
  graph.EnsureUsers(3);
  graph.SetEdge(0, 1, 1.0);
  const auto green = *GreenFunction::Build(graph, 0.5);
  Hyperparameters h;
  h.signal_variance = 0.2;
  h.offset_variance = 0.05;
  h.user_variance = 0.1;
  h.noise_variance = 0.4;
  double diagonal = 0.0;
  for (int u = 0; u < 3; ++u) diagonal += green->ColumnOf(u).Diagonal();
  EXPECT_NEAR(SignalToNoise(h, *green, 3), (diagonal / 3 + 0.1) * 0.25 / 0.4, 1e-12);
  // Without users: the unknown user's prior, 1 / rho.
  EXPECT_NEAR(SignalToNoise(h, *green, 0), (2.0 + 0.1) * 0.25 / 0.4, 1e-12);
}

}  // namespace
}  // namespace graphbandit
