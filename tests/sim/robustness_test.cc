// The robustness presets (sim/robustness.h): the default policies are the server's
// defaults, and the findings table picks the tuned baselines and applies the targets' checks.
#include "sim/robustness.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace graphbandit::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

RunResult MakeRun(const std::string& environment, const std::string& policy, uint64_t seed,
                  double final_regret, double dictionary = -1.0) {
  RunResult r;
  r.environment = environment;
  r.policy = policy;
  r.seed = seed;
  r.steps = {50, 100};
  r.cumulative_regret = {final_regret / 2, final_regret};
  if (dictionary >= 0.0) r.auxiliary = {dictionary / 2, dictionary};
  return r;
}

TEST(RobustnessTest, FindingsTuneTheBaselinesAndCheckTheDefault) {
  std::vector<RunResult> runs;
  for (uint64_t seed : {0, 1}) {
    // Non-linear task: EK-UCB 0.8 of the best LinUCB (alpha 0.1) on average, 0.7 and 0.9 by
    // seed, 0.08 of random; the tuned GraphUCB (95) is the better baseline, and EK-UCB is 0.84
    // of it: below it, but not within the stricter 0.8.
    runs.push_back(MakeRun("curved", "PerUser-LinUCB+intercept [a=0.05]", seed, 120));
    runs.push_back(MakeRun("curved", "PerUser-LinUCB+intercept [a=0.1]", seed, 100));
    runs.push_back(MakeRun("curved", "Random", seed, 1000));
    runs.push_back(
        MakeRun("curved", "EK-UCB (default)", seed, seed == 0 ? 70 : 90, 300 + 100 * seed));
    runs.push_back(MakeRun("curved", "EK-TS (default)", seed, 90));
    runs.push_back(MakeRun("curved", "Pooled-LinUCB+intercept [a=1]", seed, 300));
    runs.push_back(MakeRun("curved", "Pooled-LinUCB+intercept [a=0.5]", seed, 200));
    runs.push_back(MakeRun("curved", "GraphUCB+intercept [a=0.1]", seed, 95));
    // Linear task: EK-UCB 1.05 of LinUCB passes (within 10%); 0.3 of random fails.
    runs.push_back(MakeRun("flat", "PerUser-LinUCB+intercept [a=0.05]", seed, 100));
    runs.push_back(MakeRun("flat", "Random", seed, 350));
    runs.push_back(MakeRun("flat", "EK-UCB (default)", seed, 105));
  }
  const std::string md = RobustnessFindings(runs, {"flat"});
  EXPECT_THAT(md, HasSubstr("| curved | 100.0 (a=0.1) | 1000.0 | 0.80 | 0.70–0.90 | 0.08 | 0.90 | "
                            "2.00 | 0.95 | 350 | < best tuned (GraphUCB) yes, ≤ 0.25× random "
                            "yes; ≤ 0.8× it **no** |"));
  EXPECT_THAT(md, HasSubstr("| flat | 100.0 (a=0.05) | 350.0 | 1.05 | 1.05–1.05 | 0.30 | – | – | "
                            "– | – | ≤ 1.10× best tuned (LinUCB) yes, ≤ 0.25× random **no**; ≤ "
                            "1.0× it **no** |"));
  EXPECT_THAT(md, HasSubstr("meets the first checks on 1 of 2 tasks, and these with the stricter "
                            "ones on 0 of 2"));
  EXPECT_THAT(md, Not(HasSubstr("(baseline ≥ random) |")));
}

TEST(RobustnessTest, NonLinearTasksNeedStrictlyLessThanTheTunedLinUcb) {
  std::vector<RunResult> runs = {MakeRun("t", "PerUser-LinUCB+intercept [a=1]", 0, 100),
                                 MakeRun("t", "Random", 0, 1000),
                                 MakeRun("t", "EK-UCB (default)", 0, 100)};
  EXPECT_THAT(RobustnessFindings(runs, {}), HasSubstr("< best tuned (LinUCB) **no**"));
  EXPECT_THAT(RobustnessFindings(runs, {"t"}), HasSubstr("≤ 1.10× best tuned (LinUCB) yes"));
  // The stricter checks: at most 1.0 of the tuned LinUCB on a linear task (equal passes), at
  // most 0.8 on a non-linear one.
  EXPECT_THAT(RobustnessFindings(runs, {"t"}), HasSubstr("; ≤ 1.0× it yes"));
  runs[2] = MakeRun("t", "EK-UCB (default)", 0, 81);
  EXPECT_THAT(RobustnessFindings(runs, {}), HasSubstr("; ≤ 0.8× it **no**"));
  runs[2] = MakeRun("t", "EK-UCB (default)", 0, 80);
  EXPECT_THAT(RobustnessFindings(runs, {}),
              HasSubstr("< best tuned (LinUCB) yes, ≤ 0.25× random yes; ≤ 0.8× it yes"));
  EXPECT_THAT(RobustnessFindings(runs, {}),
              HasSubstr("and these with the stricter ones on 1 of 1"));
  // Within 0.8 of LinUCB but above 0.25 of random: the stricter checks are not met either.
  runs[1] = MakeRun("t", "Random", 0, 300);
  EXPECT_THAT(RobustnessFindings(runs, {}), HasSubstr("≤ 0.25× random **no**; ≤ 0.8× it yes"));
  EXPECT_THAT(RobustnessFindings(runs, {}),
              HasSubstr("and these with the stricter ones on 0 of 1"));
}

// A task where even the tuned baselines do no better than random (Bump): a ratio to them says
// nothing, so the task is checked against random alone and its ratios are marked.
TEST(RobustnessTest, ABaselineNoBetterThanRandomIsNotAReference) {
  std::vector<RunResult> runs = {MakeRun("bump", "PerUser-LinUCB+intercept [a=1]", 0, 1200),
                                 MakeRun("bump", "GraphUCB+intercept [a=1]", 0, 1100),
                                 MakeRun("bump", "Random", 0, 1000),
                                 MakeRun("bump", "EK-UCB (default)", 0, 200)};
  const std::string md = RobustnessFindings(runs, {});
  EXPECT_THAT(md, HasSubstr("| bump | 1200.0 (a=1) | 1000.0 | 0.17 (baseline ≥ random) | "));
  EXPECT_THAT(md, HasSubstr("| 0.92 (baseline ≥ random) | – | best tuned baseline ≥ random: ≤ "
                            "0.25× random yes |"));
  EXPECT_THAT(md, HasSubstr("On 1 task(s) no tuned baseline did better than random"));
  EXPECT_THAT(md, HasSubstr("meets the first checks on 1 of 1 tasks, and these with the stricter "
                            "ones on 1 of 1"));
  // The same EK-UCB at 0.3 of random fails the one check that is left.
  runs[3] = MakeRun("bump", "EK-UCB (default)", 0, 300);
  EXPECT_THAT(RobustnessFindings(runs, {}),
              HasSubstr("best tuned baseline ≥ random: ≤ 0.25× random **no**"));
  // GraphUCB better than random makes it the reference again, even with LinUCB worse.
  runs[1] = MakeRun("bump", "GraphUCB+intercept [a=1]", 0, 600);
  EXPECT_THAT(RobustnessFindings(runs, {}),
              HasSubstr("< best tuned (GraphUCB) yes, ≤ 0.25× random **no**; ≤ 0.8× it yes"));
}

// The policies named "default" are the server's default model, served as the server serves it
// (PolicySpec::served; tests/sim/served_policy_test.cc checks the choices against a model).
TEST(RobustnessTest, DefaultPoliciesAreTheServersDefaults) {
  const ModelOptions d;
  const PolicySpec ucb = ServedPolicy(kDefaultUcbName, d);
  EXPECT_TRUE(ucb.served());
  EXPECT_EQ(ucb.model.policy, PolicyKind::kEkUcb);
  EXPECT_EQ(ucb.model.exploration, d.exploration);
  EXPECT_EQ(ucb.model.ridge, d.ridge);
  EXPECT_TRUE(ucb.model.refits_hyperparameters());

  const Preset* preset = FindPreset("robustness");
  ASSERT_NE(preset, nullptr);
  EXPECT_GE(preset->seeds, 10);
  bool has_ucb = false, has_ts = false, has_random = false;
  for (const PolicySpec& p : preset->policies) {
    if (p.name == kDefaultUcbName || p.name == kDefaultTsName) {
      EXPECT_TRUE(p.served()) << p.name;
      EXPECT_EQ(p.model.policy, p.name == kDefaultUcbName ? PolicyKind::kEkUcb : PolicyKind::kEkTs);
      EXPECT_EQ(p.model.exploration, d.exploration) << p.name;
      EXPECT_EQ(p.model.max_dictionary_size, d.max_dictionary_size) << p.name;
      EXPECT_EQ(p.model.baseline_half_life, d.baseline_half_life) << p.name;
      EXPECT_TRUE(p.model.refits_hyperparameters()) << p.name;
    } else {
      EXPECT_FALSE(p.served()) << p.name;  // the baselines: the papers' settings
    }
    has_ucb |= p.name == kDefaultUcbName;
    has_ts |= p.name == kDefaultTsName;
    has_random |= p.name == kRandomName;
  }
  EXPECT_TRUE(has_ucb && has_ts && has_random);
  // Every task of the load generator's list is in the preset.
  for (const auto& [name, options] : RobustnessTaskOptions()) {
    bool found = false;
    for (const EnvironmentSpec& e : preset->environments) found |= e.label == options.label;
    EXPECT_TRUE(found) << name;
  }
}

}  // namespace
}  // namespace graphbandit::sim
