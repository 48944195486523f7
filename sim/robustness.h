// The robustness suite: tasks unlike the ones the papers and the bundled load
// generator use, on which the server's default model runs with no per-task tuning beside the
// simple baselines a user would otherwise deploy. Its presets are data
// (sim/presets/robustness*.textproto, with the tasks by short name):
//
//   robustness              the default EK_UCB and EK_TS models (the server's ModelOptions
//                           defaults, exactly), per-user LinUCB with an intercept and pooled
//                           LinUCB and GraphUCB (each with alpha tuned per task over a grid, the
//                           best alpha reported), and random choice; 10 seeds;
//   robustness-sensitivity  the evidence behind the defaults: the default against one change
//                           at a time (exploration scale, confidence width, the baseline
//                           tracker, the fit gate, no fitting at all), fewer seeds.
//
// The findings table reports, per task, every policy's final regret relative to the tuned
// per-user LinUCB and to random choice, and checks the targets set for EK_UCB:
// below the tuned LinUCB on non-linear tasks, within 10% of it on linear ones, at most 0.25 of
// random everywhere.
#ifndef GRAPHBANDIT_SIM_ROBUSTNESS_H_
#define GRAPHBANDIT_SIM_ROBUSTNESS_H_

#include <string>
#include <utility>
#include <vector>

#include "core/model/model_options.h"
#include "sim/presets.h"
#include "sim/report.h"
#include "sim/task_environment.h"

namespace graphbandit::sim {

// The suite's synthetic tasks by short name (e.g. "sbm-nonlinear"), as the load generator's
// --task plays them against a server.
std::vector<std::pair<std::string, TaskOptions>> RobustnessTaskOptions();

// A policy exactly as a server model configured with `options` serves it (PolicySpec::served):
// the model's learner factory, start values, fitting, exploration and its width, the baseline
// tracker and the model's per-decision random stream.
PolicySpec ServedPolicy(const std::string& name, const ModelOptions& options);

// The names the findings table looks for.
inline constexpr char kDefaultUcbName[] = "EK-UCB (default)";
inline constexpr char kDefaultTsName[] = "EK-TS (default)";
inline constexpr char kPerUserPrefix[] = "PerUser-LinUCB+intercept [";
inline constexpr char kPooledPrefix[] = "Pooled-LinUCB+intercept [";
inline constexpr char kGraphPrefix[] = "GraphUCB+intercept [";
inline constexpr char kRandomName[] = "Random";

// The findings of a robustness run (Markdown): per task, the tuned per-user LinUCB (its alpha
// and regret), random choice, and every other policy's final regret relative to both (tuned
// baselines: the best alpha of each grid), EK_UCB's final dictionary size, and the acceptance
// checks. `linear_tasks` lists the tasks whose rewards are linear (within 10% suffices there).
std::string RobustnessFindings(const std::vector<RunResult>& runs,
                               const std::vector<std::string>& linear_tasks);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_ROBUSTNESS_H_
