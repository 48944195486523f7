// Tests for Summarise (sim/report_stats.h): mean and standard error over seeds, grouping order,
// edge cases.

#include "sim/report_stats.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/sim/report_test_util.h"

namespace graphbandit::sim {
namespace {

using report_test::kNaN;
using report_test::MakeRun;
using report_test::ReportTest;

// ---------------------------------------------------------------- Summarise

TEST_F(ReportTest, SummariseMeanAndStandardError) {
  std::vector<RunResult> runs = {
      MakeRun("env", "pol", 1, {1, 2}, {0.5, 1.0}, 0.001),
      MakeRun("env", "pol", 2, {1, 2}, {0.5, 2.0}, 0.002),
      MakeRun("env", "pol", 3, {1, 2}, {0.5, 3.0}, 0.003),
  };
  const std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].environment, "env");
  EXPECT_EQ(s[0].policy, "pol");
  EXPECT_EQ(s[0].runs, 3);
  EXPECT_EQ(s[0].nan_finals, 0);
  EXPECT_EQ(s[0].final_step, 2);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 2.0);
  EXPECT_DOUBLE_EQ(s[0].final_se, 1.0 / std::sqrt(3.0));  // sd 1
  EXPECT_DOUBLE_EQ(s[0].seconds_per_step_mean, 0.002);
}

TEST_F(ReportTest, SummariseGroupsInFirstAppearanceOrder) {
  std::vector<RunResult> runs = {
      MakeRun("B", "y", 1, {1}, {1}), MakeRun("A", "x", 1, {1}, {2}),
      MakeRun("B", "x", 1, {1}, {3}), MakeRun("A", "y", 1, {1}, {4}),
      MakeRun("B", "y", 2, {1}, {5}), MakeRun("A", "x", 2, {1}, {6}),
  };
  const std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 4u);
  // Environments: B then A; policies in global first-appearance order: y then x.
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"B", "y"}, {"B", "x"}, {"A", "y"}, {"A", "x"}};
  for (size_t i = 0; i < s.size(); ++i) {
    EXPECT_EQ(std::make_pair(s[i].environment, s[i].policy), expected[i]) << i;
  }
  EXPECT_EQ(s[0].runs, 2);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);  // (1 + 5) / 2
  EXPECT_DOUBLE_EQ(s[0].final_se, 2.0);    // sd sqrt(8), / sqrt(2)
  EXPECT_EQ(s[1].runs, 1);
  EXPECT_DOUBLE_EQ(s[1].final_se, 0.0);  // a single run
  EXPECT_DOUBLE_EQ(s[3].final_mean, 4.0);
}

TEST_F(ReportTest, SummariseEdgeCases) {
  EXPECT_TRUE(Summarise({}).empty());

  // NaN finals are skipped and counted.
  std::vector<RunResult> runs = {
      MakeRun("e", "p", 1, {1, 2}, {1, 2}),
      MakeRun("e", "p", 2, {1, 2}, {1, kNaN}),
      MakeRun("e", "p", 3, {1, 2}, {1, 4}),
  };
  std::vector<Summary> s = Summarise(runs);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].runs, 3);
  EXPECT_EQ(s[0].nan_finals, 1);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);
  EXPECT_DOUBLE_EQ(s[0].final_se, 1.0);  // sd sqrt(2) / sqrt(2)

  // Different step grids: the common prefix decides the final step.
  runs = {
      MakeRun("e", "p", 1, {10, 20, 30}, {1, 2, 3}),
      MakeRun("e", "p", 2, {10, 20}, {1, 4}),
  };
  s = Summarise(runs);
  EXPECT_EQ(s[0].final_step, 20);
  EXPECT_DOUBLE_EQ(s[0].final_mean, 3.0);

  // All NaN.
  runs = {MakeRun("e", "p", 1, {1}, {kNaN})};
  s = Summarise(runs);
  EXPECT_EQ(s[0].nan_finals, 1);
  EXPECT_TRUE(std::isnan(s[0].final_mean));
}

}  // namespace
}  // namespace graphbandit::sim
