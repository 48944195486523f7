// The quality/cost frontier of the served model (the `frontier` preset): the server's default
// model at a range of dictionary caps m, beside per-user LinUCB with an intercept (alpha tuned
// per task), on robustness tasks (sim/robustness.h). For each cap and task it reports the final
// regret (mean ± SE over seeds), the dictionary size reached, and what a decision and a reward
// cost at that size on one core: the simulator runs the model's own decision and learning code
// (core/policy/decision_step.h), and times choosing, learning and refitting apart on the run
// thread's CPU clock (sim/runner.h; refits run inline, where a server searches on its fitter
// thread and applies on its writer).
//
// Policies are recognised by name: kFrontierPrefix followed by the cap ("EK-UCB (default)
// [m<=1000]"), and the robustness suite's per-user LinUCB grid (kPerUserPrefix).
#ifndef GRAPHBANDIT_SIM_FRONTIER_H_
#define GRAPHBANDIT_SIM_FRONTIER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "sim/runner.h"

namespace graphbandit::sim {

inline constexpr char kFrontierPrefix[] = "EK-UCB (default) [m<=";
// The cap the others are compared with (the server's default before the frontier was measured).
inline constexpr int kFrontierReferenceCap = 1000;

// The findings (Markdown): per task, one row per cap and one for the tuned LinUCB, with regret
// relative to the reference cap; then, per cap, the geometric mean over tasks of that relative
// regret and of each cost, the tasks on which the cap's mean regret is within 5% of the best
// cap's, and the smallest cap (among those that ran on every task) within 5% on every task.
std::string FrontierFindings(const std::vector<RunOutput>& runs);

// The plot: per task and cap, regret relative to the task's reference cap (± its SE) against
// the CPU per rewarded decision (ms, log scale). LinUCB is in the findings only.
absl::Status WriteFrontierPlot(const std::vector<RunOutput>& runs, const std::string& path);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_FRONTIER_H_
