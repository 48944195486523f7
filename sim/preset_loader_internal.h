#pragma once
// Shared between the two halves of the preset loader (preset_loader.cc, preset_environments.cc);
// not part of the simulator's interface.

#include "absl/status/statusor.h"
#include "sim/preset.pb.h"
#include "sim/presets.h"

namespace graphbandit::sim::internal {

// The environment a preset's `environment { ... }` message describes, or why it is invalid.
absl::StatusOr<EnvironmentSpec> ToEnvironmentSpec(const ::graphbandit::sim::v1::Environment& e);

}  // namespace graphbandit::sim::internal
