// The findings a preset computes from its results (Markdown: orderings, ratios, checks),
// in C++, by name: a preset file (sim/presets/*.textproto) names its analysis.
#ifndef GRAPHBANDIT_SIM_PRESET_ANALYSES_H_
#define GRAPHBANDIT_SIM_PRESET_ANALYSES_H_

#include <functional>
#include <string>
#include <vector>

#include "sim/runner.h"

namespace graphbandit::sim {

using PresetAnalysis = std::function<std::string(const std::vector<RunOutput>&)>;

// Null for an unknown name.
const PresetAnalysis* FindPresetAnalysis(const std::string& name);
std::vector<std::string> PresetAnalysisNames();

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_PRESET_ANALYSES_H_
