// The frontier preset (sim/frontier.h): its caps are the served model's dictionary cap, its
// findings pair the caps' regret by seed, pick the tuned LinUCB and the smallest sufficient cap,
// and its costs are the CPU the runner measured choosing and learning.
#include "sim/frontier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "sim/presets.h"
#include "sim/robustness.h"
#include "sim/task_environment.h"

namespace graphbandit::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunOutput MakeOutput(const std::string& task, const std::string& policy, uint64_t seed,
                     double final_regret, double dictionary, double decision_ms, double learn_ms) {
  RunOutput out;
  out.result.environment = task;
  out.result.policy = policy;
  out.result.seed = seed;
  out.result.steps = {50, 100};
  out.result.cumulative_regret = {final_regret / 2, final_regret};
  if (dictionary > 0) out.result.auxiliary = {dictionary / 2, dictionary};
  out.decision_cpu_per_step = decision_ms / 1e3;
  out.learn_cpu_per_step = learn_ms / 1e3;
  out.result.seconds_per_step = (decision_ms + learn_ms) / 1e3;
  return out;
}

std::string Capped(int cap) { return absl::StrCat(kFrontierPrefix, cap, "]"); }

std::vector<RunOutput> TwoTasks() {
  std::vector<RunOutput> runs;
  // Task a: the small cap costs 1.5 and 1.3 times the reference's regret on the two seeds
  // (mean 1.4, SE 0.1); the large one is 2% better than the reference.
  const double reference[] = {100, 200};
  const double small[] = {150, 260};
  for (uint64_t seed : {0, 1}) {
    runs.push_back(MakeOutput("a", Capped(128), seed, small[seed], 128, 0.1, 0.2));
    runs.push_back(MakeOutput("a", Capped(1000), seed, reference[seed], 1000, 0.5, 1.5));
    runs.push_back(MakeOutput("a", Capped(4000), seed, 0.98 * reference[seed], 3000, 4.0, 8.0));
    runs.push_back(MakeOutput("a", "PerUser-LinUCB+intercept [a=0.1]", seed, 300, 0, 0.01, 0.01));
    runs.push_back(MakeOutput("a", "PerUser-LinUCB+intercept [a=1]", seed, 400, 0, 0.01, 0.01));
  }
  // Task b: every cap is as good as the others.
  for (uint64_t seed : {0, 1}) {
    for (int cap : {128, 1000, 4000}) {
      runs.push_back(MakeOutput("b", Capped(cap), seed, 100, 100, 0.1, 0.1));
    }
  }
  return runs;
}

TEST(FrontierTest, FindingsPairCapsBySeedAndPickTheSmallestSufficientCap) {
  const std::string md = FrontierFindings(TwoTasks());
  // Paired ratios 1.5 and 1.3: mean 1.4, SE 0.1; CPU choosing 0.1 ms, learning 0.2 ms.
  EXPECT_THAT(md, HasSubstr("| EK-UCB (default) [m<=128] | 2 | 205.0 ± 55.0 | 1.400 ± 0.100 | "
                            "128 | 0.1 | 0.2 | 0.3 |"));
  EXPECT_THAT(md, HasSubstr("| EK-UCB (default) [m<=1000] | 2 | 150.0 ± 50.0 | 1.000 ± 0.000 | "
                            "1000 | 0.5 | 1.50 | 2.00 |"));
  EXPECT_THAT(md, HasSubstr("| EK-UCB (default) [m<=4000] | 2 | 147.0 ± 49.0 | 0.980 ± 0.000 | "
                            "3000 | 4.00 | 8.00 | 12.00 |"));
  // The tuned LinUCB is the better alpha; the other is not shown.
  // (paired: 300/100 and 300/200)
  EXPECT_THAT(md,
              HasSubstr("| PerUser-LinUCB+intercept [a=0.1] | 2 | 300.0 ± 0.0 | 2.250 ± 0.750"));
  EXPECT_THAT(md, Not(HasSubstr("[a=1]")));
  // Over the tasks: geometric means; m<=1000 is within 5% of the best on both tasks, 128 is not
  // on task a.
  EXPECT_THAT(md, HasSubstr("| 128 | 2 | 1.183 | 0.245 | 1 of 2 |"));
  EXPECT_THAT(md, HasSubstr("| 1000 | 2 | 1.000 | 0.632 | 2 of 2 |"));
  EXPECT_THAT(md, HasSubstr("every task: **1000**"));
}

TEST(FrontierTest, PlotHasAPointPerCapAndTheLinUcb) {
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("frontier_test_", getpid(), ".svg"))
          .string();
  ASSERT_TRUE(WriteFrontierPlot(TwoTasks(), path).ok());
  std::ifstream in(path);
  std::stringstream svg;
  svg << in.rdbuf();
  std::remove(path.c_str());
  EXPECT_THAT(svg.str(), HasSubstr("m&lt;=128"));
  EXPECT_THAT(svg.str(), HasSubstr("m&lt;=4000"));
  EXPECT_THAT(svg.str(), HasSubstr("LinUCB"));
  EXPECT_THAT(svg.str(), HasSubstr("CPU per rewarded decision"));
}

TEST(FrontierTest, PresetSweepsTheServedModelsDictionaryCap) {
  const Preset* preset = FindPreset("frontier");
  ASSERT_NE(preset, nullptr);
  std::vector<int> caps;
  for (const PolicySpec& p : preset->policies) {
    if (p.name.rfind(kFrontierPrefix, 0) != 0) continue;
    EXPECT_TRUE(p.served()) << p.name;
    // The name's cap is the model's.
    EXPECT_EQ(p.name, Capped(p.model.max_dictionary_size));
    caps.push_back(p.model.max_dictionary_size);
  }
  EXPECT_EQ(caps, (std::vector<int>{128, 256, 512, 1000, 2000, 4000}));
  // At least four tasks, with at least 200 users, and with 16 and with 32 features.
  std::map<std::string, TaskOptions> tasks;
  for (const auto& [name, options] : RobustnessTaskOptions()) tasks[options.label] = options;
  int large = 0, d16 = 0, d32 = 0;
  for (const EnvironmentSpec& e : preset->environments) {
    ASSERT_TRUE(tasks.count(e.label)) << e.label;
    large += tasks[e.label].users >= 200;
    d16 += tasks[e.label].dim == 16;
    d32 += tasks[e.label].dim == 32;
  }
  EXPECT_GE(preset->environments.size(), 4u);
  EXPECT_GE(large, 1);
  EXPECT_GE(d16, 1);
  EXPECT_GE(d32, 1);
}

// The runner's CPU split on a real served run: both parts are spent, and together they are
// within the thread's CPU time for the run.
TEST(FrontierTest, RunnerSplitsTheStepsCpuIntoChoosingAndLearning) {
  const Preset* preset = FindPreset("frontier");
  ASSERT_NE(preset, nullptr);
  RunSpec spec;
  spec.environment = preset->environments[0].label;
  spec.make_environment = preset->environments[0].make;
  spec.policy = preset->policies[1];  // m<=256
  spec.rounds = 300;
  spec.sample_points = 3;
  const RunOutput out = sim::Run(spec, nullptr);
  ASSERT_EQ(out.error, "");
  EXPECT_GT(out.decision_cpu_per_step, 0.0);
  EXPECT_GT(out.learn_cpu_per_step, 0.0);
  EXPECT_LE(out.decision_cpu_per_step + out.learn_cpu_per_step, out.cpu_seconds_per_step * 1.0001);
}

}  // namespace
}  // namespace graphbandit::sim
