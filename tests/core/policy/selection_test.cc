// Slate selection: UCB order and ties, Thompson-sampling probabilities against Monte Carlo.
#include "core/policy/selection.h"

#include <gtest/gtest.h>

namespace graphbandit {
namespace {

TEST(SelectionTest, UcbRanksByMeanPlusBetaStddev) {
  Eigen::VectorXd mean(4), sd(4);
  mean << 1.0, 0.0, 0.5, 0.9;
  sd << 0.0, 2.2, 0.1, 0.0;
  Rng rng(1);
  const auto slate = SelectSlate(SelectionRule::kUcb, 0.5, mean, sd, 3, rng);
  ASSERT_EQ(slate.size(), 3u);
  EXPECT_EQ(slate[0].candidate, 1);  // 0 + 0.5 * 2.2 = 1.1
  EXPECT_EQ(slate[1].candidate, 0);  // 1.0
  EXPECT_EQ(slate[2].candidate, 3);  // 0.9; candidate 2 scores 0.55
  EXPECT_DOUBLE_EQ(slate[2].score, 0.9);
  for (const auto& choice : slate) EXPECT_EQ(choice.probability, 1.0);
}

TEST(SelectionTest, UcbTiesAreBrokenUniformlyAndReportTheirShare) {
  const Eigen::VectorXd mean = Eigen::VectorXd::Zero(4);
  const Eigen::VectorXd sd = Eigen::VectorXd::Ones(4);
  std::vector<int> first(4, 0);
  Rng rng(2);
  const int trials = 40000;
  for (int t = 0; t < trials; ++t) {
    const auto slate = SelectSlate(SelectionRule::kUcb, 1.0, mean, sd, 2, rng);
    ASSERT_EQ(slate.size(), 2u);
    EXPECT_NE(slate[0].candidate, slate[1].candidate);
    EXPECT_DOUBLE_EQ(*slate[0].probability, 0.5);  // 2 slots shared by 4 tied arms
    ++first[slate[0].candidate];
  }
  for (int c : first) EXPECT_NEAR(c / static_cast<double>(trials), 0.25, 0.01);
}

TEST(SelectionTest, ThompsonProbabilityMatchesMonteCarlo) {
  Eigen::VectorXd mean(5), spread(5);
  mean << 0.0, 0.3, -0.2, 0.25, 1.5;
  spread << 0.5, 0.2, 1.0, 0.05, 0.0;  // the last arm is deterministic
  Rng rng(3);
  const int draws = 400000;
  std::vector<int> wins(5, 0);
  for (int d = 0; d < draws; ++d) {
    int best = 0;
    double best_value = -INFINITY;
    for (int j = 0; j < 5; ++j) {
      const double v = mean(j) + spread(j) * rng.Normal();
      if (v > best_value) best_value = v, best = j;
    }
    ++wins[best];
  }
  double total = 0.0;
  for (int i = 0; i < 5; ++i) {
    const double p = ProbabilityOfMaximum(i, mean, spread);
    total += p;
    EXPECT_NEAR(p, wins[i] / static_cast<double>(draws), 2e-3) << "arm " << i;
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(SelectionTest, ThompsonSlateReportsEstimatedInclusionProbabilities) {
  Eigen::VectorXd mean(3), sd(3);
  mean << 0.0, 0.0, 5.0;
  sd << 1.0, 1.0, 1.0;
  Rng rng(4);
  const auto slate = SelectSlate(SelectionRule::kThompson, 1.0, mean, sd, 2, rng);
  ASSERT_EQ(slate.size(), 2u);
  for (const auto& choice : slate) {
    ASSERT_TRUE(choice.probability.has_value());
    // Arm 2 is (almost) always in the top two; arms 0 and 1 each about half the time.
    EXPECT_NEAR(*choice.probability, choice.candidate == 2 ? 1.0 : 0.5, 0.06);
  }
  EXPECT_GE(slate[0].score, slate[1].score);
}

TEST(SelectionTest, ThompsonWithZeroExplorationIsGreedy) {
  Eigen::VectorXd mean(3), sd(3);
  mean << 0.1, 0.7, 0.3;
  sd << 5.0, 5.0, 5.0;
  Rng rng(5);
  const auto slate = SelectSlate(SelectionRule::kThompson, 0.0, mean, sd, 1, rng);
  EXPECT_EQ(slate[0].candidate, 1);
  EXPECT_EQ(slate[0].probability, 1.0);
}

TEST(SelectionTest, SameStreamSameDecision) {
  Eigen::VectorXd mean = Eigen::VectorXd::LinSpaced(50, 0.0, 1.0);
  Eigen::VectorXd sd = Eigen::VectorXd::Constant(50, 0.4);
  Rng a(42), b(42);
  const auto x = SelectSlate(SelectionRule::kThompson, 1.0, mean, sd, 5, a);
  const auto y = SelectSlate(SelectionRule::kThompson, 1.0, mean, sd, 5, b);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(x[r].candidate, y[r].candidate);
    EXPECT_EQ(x[r].score, y[r].score);
    EXPECT_EQ(x[r].probability, y[r].probability);
  }
}

}  // namespace
}  // namespace graphbandit
