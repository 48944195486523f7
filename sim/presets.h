// Named experiments: each reproduces one table or figure of the papers (or one of our own
// claims) with one command, `graphbandit-sim --preset=NAME --out=DIR`. The presets are data:
// one text-format file each under sim/presets/ (schema: sim/preset.proto), embedded into the
// binary at build time (sim/preset_loader.h).
#ifndef GRAPHBANDIT_SIM_PRESETS_H_
#define GRAPHBANDIT_SIM_PRESETS_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sim/report.h"
#include "sim/runner.h"

namespace graphbandit::sim {

struct EnvironmentSpec {
  std::string label;
  EnvironmentFactory make;
};

struct Preset {
  std::string name;
  std::string description;  // what it reproduces or shows
  std::vector<EnvironmentSpec> environments;
  std::vector<PolicySpec> policies;
  int seeds = 1;
  int64_t rounds = 1000;
  int sample_points = 100;
  int64_t timing_window = 0;
  int slate_size = 1;
  // (environment label, policy name) -> the paper's number, shown beside ours.
  std::map<std::pair<std::string, std::string>, Reference> references;
  bool dictionary_plot = false;  // plot the Nystrom dictionary size over time
  bool tradeoff_plot = false;    // plot final regret against time per step
  bool frontier_plot = false;    // plot relative regret against cost per cap (sim/frontier.h)
  // Preset-specific findings (Markdown) computed from the results, e.g. orderings or ratios.
  std::function<std::string(const std::vector<RunOutput>&)> analysis;
};

// The embedded presets, in sim/CMakeLists.txt's order.
const std::vector<Preset>& Presets();
const Preset* FindPreset(const std::string& name);

// One of the EK paper's environments (Bump, Chessboard, Step Diagonal).
// With `fixed_instance` (Bump only), the EK authors' instance and initial pull (EkEnvironment).
EnvironmentSpec EkEnvironmentSpec(EkKind kind, bool fixed_instance = false);

// The LK paper's task sizes (§1.9): easy (M=10, d=5), medium (M=20, d=10), hard (M=50, d=20),
// 5 candidates a round.
EnvironmentOptions LkTask(const std::string& level, int users, RewardKind reward, GraphKind graph);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_PRESETS_H_
