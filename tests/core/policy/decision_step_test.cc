// core/policy/decision_step.h, the decision and learning steps the model and the simulator
// share: candidate points, the slate with the drifting baseline and the exploration width, the
// failures that leave everything as it was, and learning with the baseline taken out (one
// reward at a time and in a batch, which must agree).
#include "core/policy/decision_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/learner/posterior.h"

namespace graphbandit {
namespace {

// Scores every column with fixed means and standard deviations, whoever the user.
class FixedScorer : public Scorer {
 public:
  FixedScorer(Eigen::VectorXd mean, Eigen::VectorXd stddev)
      : mean_(std::move(mean)), stddev_(std::move(stddev)) {}
  void Score(int32_t /*user*/, const Eigen::Ref<const Eigen::MatrixXd>& points,
             Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const override {
    *mean = mean_.head(points.cols());
    *stddev = stddev_.head(points.cols());
  }

 private:
  Eigen::VectorXd mean_, stddev_;
};

// Predicts `prediction` plus `drift` times the rewards learned so far, everywhere, and records
// what it is asked to learn (drift 0: a prediction that never moves).
class RecordingLearner : public Learner {
 public:
  explicit RecordingLearner(double prediction, double drift = 0.0)
      : prediction_(prediction), drift_(drift) {}
  void Score(int32_t /*user*/, const Eigen::Ref<const Eigen::MatrixXd>& points,
             Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const override {
    *mean = Eigen::VectorXd::Constant(points.cols(), Now());
    *stddev = Eigen::VectorXd::Ones(points.cols());
  }
  double Now() const { return prediction_ + drift_ * static_cast<double>(targets.size()); }
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override {
    if (absl::Status s = CheckObservation(user, point, reward, 2); !s.ok()) return s;
    users.push_back(user);
    targets.push_back(reward);
    return absl::OkStatus();
  }
  absl::Status SetGraph(const UserGraph& /*graph*/,
                        std::shared_ptr<const UserKernel> /*kernel*/) override {
    return absl::OkStatus();
  }
  std::shared_ptr<const Scorer> Freeze() const override {
    return std::make_shared<FixedScorer>(Eigen::VectorXd::Constant(64, prediction_),
                                         Eigen::VectorXd::Ones(64));
  }
  int64_t history_size() const override { return static_cast<int64_t>(targets.size()); }
  int64_t dictionary_size() const override { return 0; }

  std::vector<int32_t> users;
  std::vector<double> targets;

 private:
  double prediction_;
  double drift_;
};

TEST(DecisionStepTest, CandidatePointsAreScaledAndTakeTheIntercept) {
  FeatureScaling scaling;
  scaling.context_dim = 1;
  scaling.arm_dim = 2;
  scaling.context_lengthscale = 2.0;
  scaling.arm_lengthscale = 0.5;
  const double context[] = {4.0};
  const double a[] = {1.0, 2.0}, b[] = {3.0, 4.0};
  const std::vector<const double*> arms = {a, b};
  Eigen::MatrixXd points;
  CandidatePoints(scaling, context, arms, /*intercept=*/true, &points);
  Eigen::MatrixXd expected(4, 2);
  expected << 2, 2, 2, 6, 4, 8, 1, 1;
  EXPECT_EQ(points, expected);
  CandidatePoints(scaling, context, arms, /*intercept=*/false, &points);
  EXPECT_EQ(points, expected.topRows(3));
}

TEST(DecisionStepTest, UcbRanksByMeanPlusExplorationTimesWidthAndAddsTheBaseline) {
  Eigen::VectorXd mean(3), stddev(3);
  mean << 1.0, 0.5, 0.9;
  stddev << 0.0, 1.0, 0.2;
  const FixedScorer scorer(mean, stddev);
  const Eigen::MatrixXd points = Eigen::MatrixXd::Zero(2, 3);
  DecisionRule rule;
  rule.rule = SelectionRule::kUcb;
  rule.exploration = 0.5;
  rule.width = 2.0;  // index = mean + 1.0 * stddev: 1.0, 1.5, 1.1
  Rng rng(7);
  ScoredSlate out;
  ASSERT_TRUE(DecideSlate(scorer, 0, points, rule, 2, rng, false, &out).ok());
  ASSERT_EQ(out.slate.size(), 2u);
  EXPECT_EQ(out.slate[0].candidate, 1);
  EXPECT_EQ(out.slate[1].candidate, 2);
  EXPECT_DOUBLE_EQ(out.slate[0].score, 1.5);
  EXPECT_EQ(out.mean, mean);
  EXPECT_EQ(out.propensities.size(), 0);

  // A baseline shifts every mean and score alike: the same slate.
  rule.baseline = 10.0;
  ScoredSlate shifted;
  ASSERT_TRUE(DecideSlate(scorer, 0, points, rule, 2, rng, false, &shifted).ok());
  EXPECT_EQ(shifted.mean, (mean.array() + 10.0).matrix());
  EXPECT_EQ(shifted.slate[0].candidate, 1);
  EXPECT_EQ(shifted.slate[1].candidate, 2);
  EXPECT_DOUBLE_EQ(shifted.slate[0].score, 11.5);

  // Without the width the greedy mean wins.
  rule.width = 0.0;
  ASSERT_TRUE(DecideSlate(scorer, 0, points, rule, 1, rng, false, &out).ok());
  EXPECT_EQ(out.slate[0].candidate, 0);
}

TEST(DecisionStepTest, FailuresComeBeforeAnyChoiceAndLeaveTheStreamAlone) {
  Eigen::VectorXd mean(3), stddev(3);
  mean << 1.0, NAN, 0.9;
  stddev << 0.1, 0.1, 0.1;
  const Eigen::MatrixXd points = Eigen::MatrixXd::Zero(2, 3);
  DecisionRule rule;
  Rng rng(11), untouched(11);
  ScoredSlate out;
  absl::Status s = DecideSlate(FixedScorer(mean, stddev), 0, points, rule, 1, rng, false, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(rng.NextU64(), untouched.NextU64());

  mean(1) = 0.0;
  const FixedScorer finite(mean, stddev);
  EXPECT_EQ(DecideSlate(finite, 0, points, rule, 4, rng, false, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecideSlate(finite, 0, points, rule, 0, rng, false, &out).code(),
            absl::StatusCode::kInvalidArgument);
  rule.rule = SelectionRule::kSampledParameter;
  // One arm per decision, and a scorer that can draw parameters.
  EXPECT_EQ(DecideSlate(finite, 0, points, rule, 2, rng, false, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecideSlate(finite, 0, points, rule, 1, rng, false, &out).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(rng.NextU64(), untouched.NextU64());
}

TEST(DecisionStepTest, LearningTakesTheBaselineOutAndMovesItOnlyWhenLearned) {
  RecordingLearner learner(/*prediction=*/0.1);
  BaselineTracker baseline(/*half_life=*/1.0);  // each error moves it halfway
  baseline.set_value(0.3);
  const Eigen::Vector2d point(1.0, 2.0);
  ASSERT_TRUE(LearnReward(learner, baseline, 4, point, 1.0).ok());
  ASSERT_EQ(learner.targets.size(), 1u);
  EXPECT_DOUBLE_EQ(learner.targets[0], 0.7);  // 1.0 - 0.3
  EXPECT_DOUBLE_EQ(baseline.value(), 0.3 + 0.5 * (0.7 - 0.1));

  // A reward the learner refuses (no registered user) moves nothing.
  const double before = baseline.value();
  EXPECT_EQ(LearnReward(learner, baseline, -1, point, 5.0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(baseline.value(), before);
  EXPECT_EQ(learner.targets.size(), 1u);

  // Tracking off: the reward is learned as it is.
  BaselineTracker off;
  ASSERT_TRUE(LearnReward(learner, off, 4, point, 2.5).ok());
  EXPECT_EQ(learner.targets.back(), 2.5);
}

// A batch takes every reward's prediction before the batch, and moves the baseline through the
// batch in order; with predictions that do not move, that is what one reward at a time learns.
TEST(DecisionStepTest, ABatchLearnsWhatOneRewardAtATimeLearns) {
  const std::vector<int32_t> users = {0, 3, 1, 3};
  const std::vector<Eigen::VectorXd> points = {Eigen::Vector2d(0, 1), Eigen::Vector2d(1, 0),
                                               Eigen::Vector2d(2, 2), Eigen::Vector2d(-1, 3)};
  const std::vector<double> rewards = {1.0, -0.5, 0.25, 2.0};

  RecordingLearner one(0.2), batch(0.2);
  BaselineTracker one_baseline(3.0), batch_baseline(3.0);
  for (size_t i = 0; i < users.size(); ++i) {
    ASSERT_TRUE(LearnReward(one, one_baseline, users[i], points[i], rewards[i]).ok());
  }
  ASSERT_TRUE(LearnRewards(batch, batch_baseline, users, points, rewards).ok());
  EXPECT_EQ(batch.users, one.users);
  ASSERT_EQ(batch.targets.size(), one.targets.size());
  for (size_t i = 0; i < one.targets.size(); ++i) {
    EXPECT_DOUBLE_EQ(batch.targets[i], one.targets[i]) << i;
  }
  EXPECT_DOUBLE_EQ(batch_baseline.value(), one_baseline.value());
  EXPECT_NE(batch_baseline.value(), 0.0);

  // A learner whose prediction moves as it learns: one reward at a time sees each new
  // prediction, the batch sees the one from before the batch for every reward.
  RecordingLearner moving(0.2, /*drift=*/0.5);
  BaselineTracker moving_baseline(1.0);  // rate 1/2
  ASSERT_TRUE(LearnRewards(moving, moving_baseline, users, points, rewards).ok());
  double value = 0.0;
  for (size_t i = 0; i < rewards.size(); ++i) {
    const double target = rewards[i] - value;
    EXPECT_DOUBLE_EQ(moving.targets[i], target) << i;
    value += 0.5 * (target - 0.2);  // the prediction before the batch, 0.2, for every reward
  }
  EXPECT_DOUBLE_EQ(moving_baseline.value(), value);

  // A batch with a bad observation fails, and the baseline stays where it was. (A learner
  // without batch learning, like this one, still learns the valid rewards of the batch: the
  // default ObserveBatch; a learner that LearnsInBatches learns none of them.)
  std::vector<int32_t> bad_users = users;
  bad_users[2] = -1;
  const double before = batch_baseline.value();
  const size_t learned_before = batch.targets.size();
  EXPECT_FALSE(LearnRewards(batch, batch_baseline, bad_users, points, rewards).ok());
  EXPECT_EQ(batch_baseline.value(), before);
  EXPECT_EQ(batch.targets.size(), learned_before + 3);
  // Shapes are checked first.
  EXPECT_EQ(LearnRewards(batch, batch_baseline, users, points, {1.0}).code(),
            absl::StatusCode::kInvalidArgument);
}

// Reports fixed information gain and mean norm, which the AMM width reads.
class GainLearner : public RecordingLearner {
 public:
  GainLearner() : RecordingLearner(0.0) {}
  double InformationGain() const override { return 3.0; }
  double MeanNormSquared() const override { return 2.0; }
};

TEST(DecisionStepTest, TheSetupGivesTheRuleAndTheWidthFromTheLearnersState) {
  GainLearner learner;
  DecisionSetup setup;
  setup.rule = SelectionRule::kThompson;
  setup.exploration = 0.7;
  setup.propensity = PropensityRule::kOwnDraw;
  setup.propensity_draws = 12;
  EXPECT_EQ(ExplorationWidthOf(setup, learner, 500), 1.0);  // the stddev
  setup.width = ExplorationWidth::kAmm;
  WidthInputs amm;
  amm.information_gain = 3.0;
  amm.mean_norm_squared = 2.0;
  EXPECT_EQ(ExplorationWidthOf(setup, learner, 500),
            ExplorationWidthFor(ExplorationWidth::kAmm, amm));
  EXPECT_GT(ExplorationWidthOf(setup, learner, 500), std::sqrt(5.0));
  // The theorem's schedule widens with the rewards learned, whatever the learner.
  setup.width = ExplorationWidth::kGpUcbTheorem;
  EXPECT_LT(ExplorationWidthOf(setup, learner, 10), ExplorationWidthOf(setup, learner, 1000));
  setup.index_schedule.arm_count = 10.0;
  WidthInputs theorem;
  theorem.schedule = setup.index_schedule;
  theorem.rewards_learned = 10;
  EXPECT_EQ(ExplorationWidthOf(setup, learner, 10),
            ExplorationWidthFor(ExplorationWidth::kGpUcbTheorem, theorem));

  const DecisionRule rule = RuleOf(setup, 2.5, -0.25);
  EXPECT_EQ(rule.rule, SelectionRule::kThompson);
  EXPECT_EQ(rule.exploration, 0.7);
  EXPECT_EQ(rule.width, 2.5);
  EXPECT_EQ(rule.baseline, -0.25);
  EXPECT_EQ(rule.propensity, PropensityRule::kOwnDraw);
  EXPECT_EQ(rule.propensity_draws, 12);
}

TEST(DecisionStepTest, EachDecisionHasItsOwnStreamsFromItsIdAndSeed) {
  auto draws = [](Rng rng) {
    std::vector<uint64_t> out;
    for (int i = 0; i < 4; ++i) out.push_back(rng.NextU64());
    return out;
  };
  const auto decision = draws(DecisionStream("e-1", 7));
  EXPECT_EQ(draws(DecisionStream("e-1", 7)), decision);  // a retry or a replica draws the same
  EXPECT_NE(draws(DecisionStream("e-2", 7)), decision);
  EXPECT_NE(draws(DecisionStream("e-1", 8)), decision);
  // The evaluation coin is another stream of the same decision.
  EXPECT_EQ(draws(EvaluationCoin("e-1", 7)), draws(EvaluationCoin("e-1", 7)));
  EXPECT_NE(draws(EvaluationCoin("e-1", 7)), decision);
}

}  // namespace
}  // namespace graphbandit
