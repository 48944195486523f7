#include "sim/presets.h"

#include <cstdio>
#include <cstdlib>

#include "sim/preset_loader.h"

namespace graphbandit::sim {

EnvironmentSpec EkEnvironmentSpec(EkKind kind, bool fixed_instance) {
  EnvironmentSpec spec;
  spec.label = EkEnvironment(kind, 0).name();
  if (fixed_instance) spec.label += " (fixed instance)";
  spec.make = [kind,
               fixed_instance](uint64_t seed) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
    return std::unique_ptr<SimEnvironment>(new EkEnvironment(kind, seed, fixed_instance));
  };
  return spec;
}

EnvironmentOptions LkTask(const std::string& level, int users, RewardKind reward, GraphKind graph) {
  EnvironmentOptions options;
  options.users = users;
  options.candidates = 5;
  options.reward = reward;
  options.graph = graph;
  if (level == "easy") {
    options.pool = 10;
    options.dim = 5;
  } else if (level == "hard") {
    options.pool = 50;
    options.dim = 20;
  } else {
    options.pool = 20;
    options.dim = 10;
  }
  return options;
}

const std::vector<Preset>& Presets() {
  static const std::vector<Preset>* presets = [] {
    absl::StatusOr<std::vector<Preset>> loaded = LoadEmbeddedPresets();
    if (!loaded.ok()) {
      // The embedded files are checked by tests/sim/presets_test.cc: this is a build's bug.
      std::fprintf(stderr, "graphbandit: invalid embedded preset: %s\n",
                   std::string(loaded.status().message()).c_str());
      std::abort();
    }
    return new std::vector<Preset>(*std::move(loaded));
  }();
  return *presets;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& preset : Presets()) {
    if (preset.name == name) return &preset;
  }
  return nullptr;
}

}  // namespace graphbandit::sim
