// Presets as data: the text-format files under sim/presets/ (schema: sim/preset.proto), embedded
// into the binary at build time, parsed, validated and turned into sim/presets.h's Preset.
#ifndef GRAPHBANDIT_SIM_PRESET_LOADER_H_
#define GRAPHBANDIT_SIM_PRESET_LOADER_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sim/presets.h"

namespace graphbandit::sim {

struct EmbeddedPresetFile {
  std::string name;  // e.g. "lk-table1.textproto"
  absl::string_view text;
};

// The files of sim/presets/, in the order sim/CMakeLists.txt lists them (--list_presets' order).
// Defined by the build's generated embedded_presets.cc.
const std::vector<EmbeddedPresetFile>& EmbeddedPresetFiles();

// Parses and validates one preset file; errors start with `file_name` and say what is wrong
// (the line and column of a syntax error, the policy or environment a bad field belongs to).
absl::StatusOr<Preset> ParsePreset(absl::string_view text, const std::string& file_name);

// Where the Last.fm environments read the HetRec files from, instead of their presets'
// data_dir (graphbandit-sim --lastfm_dir; empty: the presets'). Set before any run starts.
void OverrideLastFmDirectory(const std::string& dir);
const std::string& LastFmDirectoryOverride();

// Every embedded preset, in order; an error names the first file that fails (or a name two
// files share).
absl::StatusOr<std::vector<Preset>> LoadEmbeddedPresets();

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_PRESET_LOADER_H_
