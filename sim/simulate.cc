// graphbandit-sim: runs a named experiment (policies x environments x seeds, in-process, in
// parallel) and writes, into --out: regret.csv (cumulative regret over time of every run), one
// SVG plot per environment (mean cumulative regret with +-1 SE bands), optional dictionary-size
// and regret-vs-time plots, and summary.md (the table, the findings, and the exact command,
// commit and machine that produced them).
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/command_line.h"
#include "graphbandit_version.h"
#include "sim/frontier.h"
#include "sim/preset_loader.h"
#include "sim/presets.h"
#include "sim/report.h"
#include "sim/runner.h"

ABSL_FLAG(std::string, preset, "", "Experiment to run (see --list_presets).");
ABSL_FLAG(std::string, preset_file, "",
          "Run the preset in this text-format file (schema: sim/preset.proto) instead of a "
          "named one; the file's name must match its `name` field.");
ABSL_FLAG(std::string, lastfm_dir, "",
          "Directory of the HetRec 2011 Last.fm files (hetrec2011-lastfm-2k) for presets that "
          "replay them, instead of the preset's data_dir.");
ABSL_FLAG(std::string, out, "", "Directory for regret.csv, the plots and summary.md.");
ABSL_FLAG(bool, list_presets, false, "List the presets with what each reproduces, and exit.");
ABSL_FLAG(int32_t, seeds, 0, "Override the preset's number of seeds (0 keeps it).");
ABSL_FLAG(int64_t, rounds, 0, "Override the preset's number of rounds (0 keeps it).");
ABSL_FLAG(int32_t, jobs, 0, "Runs in parallel; 0 = one per core.");
ABSL_FLAG(std::string, policies, "",
          "Comma-separated substrings: only run policies whose name contains one of them.");
ABSL_FLAG(double, exploration_scale, 1.0,
          "Multiply every policy's exploration (beta, nu or alpha) by this factor: a sensitivity "
          "check; the summary records it.");
ABSL_FLAG(std::string, environments, "",
          "Comma-separated substrings: only run environments whose label contains one of them.");

namespace {

using namespace graphbandit::sim;  // NOLINT: a program's main file

std::string Slug(const std::string& text) {
  std::string slug;
  for (char c : text) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      slug.push_back(c);
    } else if (c >= 'A' && c <= 'Z') {
      slug.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if (!slug.empty() && slug.back() != '-') {
      slug.push_back('-');
    }
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug;
}

bool Matches(const std::string& name, const std::string& filter) {
  if (filter.empty()) return true;
  for (absl::string_view part : absl::StrSplit(filter, ',', absl::SkipEmpty())) {
    if (absl::StrContains(name, part)) return true;
  }
  return false;
}

std::string Shell(const std::string& command) {
  std::string output;
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    while (fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
    pclose(pipe);
  }
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  return output;
}

std::string MachineDescription() {
  std::string cpu = Shell("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'");
  const std::string memory =
      Shell("grep -m1 MemTotal /proc/meminfo | awk '{printf \"%.1f GiB\", $2/1048576}'");
  utsname name{};
  uname(&name);
  return absl::StrFormat("%s; %d cores; %s RAM; %s %s", cpu.empty() ? "unknown CPU" : cpu,
                         std::thread::hardware_concurrency(), memory, name.sysname, name.release);
}

// The commit this binary was built from (stamped at build time).
std::string Commit() {
  return std::string(GRAPHBANDIT_COMMIT) +
         (GRAPHBANDIT_TREE_DIRTY ? " (built with uncommitted changes)" : "");
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "graphbandit-sim: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args = graphbandit::ParseProgramCommandLine(
      argc, argv, "graphbandit-sim",
      "graphbandit-sim: runs a named bandit experiment in-process and writes its regret curves,\n"
      "plots and table.\n"
      "Usage: graphbandit-sim --preset=NAME --out=DIR [--seeds=N] [--rounds=T] [--jobs=J]\n"
      "       graphbandit-sim --preset_file=PATH.textproto --out=DIR [...]\n"
      "       graphbandit-sim --list_presets",
      {"sim/simulate.cc"});
  if (args.size() > 1) return Fail(absl::StrCat("unexpected argument '", args[1], "'"));

  if (absl::GetFlag(FLAGS_list_presets)) {
    for (const Preset& preset : Presets()) {
      std::printf("%s\n    %s\n    %zu environments x %zu policies x %d seeds x %lld rounds\n",
                  preset.name.c_str(), preset.description.c_str(), preset.environments.size(),
                  preset.policies.size(), preset.seeds, static_cast<long long>(preset.rounds));
    }
    return 0;
  }
  const Preset* preset = FindPreset(absl::GetFlag(FLAGS_preset));
  std::optional<Preset> from_file;
  if (!absl::GetFlag(FLAGS_preset_file).empty()) {
    if (!absl::GetFlag(FLAGS_preset).empty())
      return Fail("give --preset or --preset_file, not both");
    const std::string path = absl::GetFlag(FLAGS_preset_file);
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) return Fail(absl::StrCat("cannot read ", path));
    auto parsed = ParsePreset(text.str(), path);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()));
    from_file = *std::move(parsed);
    preset = &*from_file;
  }
  if (preset == nullptr) {
    return Fail(absl::StrCat("unknown or missing --preset '", absl::GetFlag(FLAGS_preset),
                             "'; see --list_presets"));
  }
  OverrideLastFmDirectory(absl::GetFlag(FLAGS_lastfm_dir));
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail("--out=DIR is required");
  if (Shell("mkdir -p '" + out + "' && echo ok") != "ok") return Fail("cannot create " + out);

  const int seeds = absl::GetFlag(FLAGS_seeds) > 0 ? absl::GetFlag(FLAGS_seeds) : preset->seeds;
  const int64_t rounds =
      absl::GetFlag(FLAGS_rounds) > 0 ? absl::GetFlag(FLAGS_rounds) : preset->rounds;
  const int jobs = absl::GetFlag(FLAGS_jobs) > 0
                       ? absl::GetFlag(FLAGS_jobs)
                       : static_cast<int>(std::thread::hardware_concurrency());
  std::vector<RunSpec> specs;
  for (const EnvironmentSpec& env : preset->environments) {
    if (!Matches(env.label, absl::GetFlag(FLAGS_environments))) continue;
    for (const PolicySpec& policy : preset->policies) {
      if (!Matches(policy.name, absl::GetFlag(FLAGS_policies))) continue;
      for (int s = 0; s < seeds; ++s) {
        RunSpec spec;
        spec.environment = env.label;
        spec.make_environment = env.make;
        spec.policy = policy;
        spec.policy.model.exploration *= absl::GetFlag(FLAGS_exploration_scale);
        spec.seed = static_cast<uint64_t>(s);
        spec.rounds = rounds;
        spec.sample_points = static_cast<int>(std::min<int64_t>(preset->sample_points, rounds));
        spec.timing_window = preset->timing_window;
        spec.slate_size = preset->slate_size;
        specs.push_back(std::move(spec));
      }
    }
  }
  if (specs.empty()) return Fail("the filters leave no run");
  const std::string commit = Commit();
  std::fprintf(stderr, "graphbandit-sim: preset %s: %zu runs on %d threads\n", preset->name.c_str(),
               specs.size(), jobs);
  const absl::Time started = absl::Now();
  const std::vector<RunOutput> outputs = RunAll(specs, jobs, /*show_progress=*/true);
  const absl::Duration took = absl::Now() - started;

  std::vector<RunResult> results;
  std::vector<std::string> failures;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i].error.empty()) {
      failures.push_back(absl::StrFormat("%s / %s / seed %d: %s", specs[i].environment,
                                         specs[i].policy.name, specs[i].seed, outputs[i].error));
      continue;
    }
    results.push_back(outputs[i].result);
  }
  if (results.empty()) return Fail("every run failed: " + failures.front());

  absl::Status status = WriteRegretCsv(results, out + "/regret.csv");
  if (!status.ok()) return Fail(std::string(status.message()));
  std::string plots;
  std::vector<std::string> environments;
  for (const RunResult& r : results) {
    if (std::find(environments.begin(), environments.end(), r.environment) == environments.end()) {
      environments.push_back(r.environment);
    }
  }
  for (const std::string& env : environments) {
    const std::string file = "regret-" + Slug(env) + ".svg";
    status = WriteRegretPlot(results, env, out + "/" + file,
                             absl::StrFormat("%s: cumulative regret (mean ± 1 SE)", env));
    if (!status.ok()) return Fail(std::string(status.message()));
    absl::StrAppend(&plots, absl::StrFormat("![%s](%s)\n\n", env, file));
    if (preset->dictionary_plot) {
      const std::string dict = "dictionary-" + Slug(env) + ".svg";
      if (WriteAuxiliaryPlot(results, env, out + "/" + dict,
                             absl::StrFormat("%s: Nystrom dictionary size", env),
                             "dictionary size m")
              .ok()) {
        absl::StrAppend(&plots, absl::StrFormat("![%s dictionary](%s)\n\n", env, dict));
      }
    }
  }
  const std::vector<Summary> summaries = Summarise(results);
  if (preset->tradeoff_plot) {
    std::vector<ScatterPoint> points;
    for (const Summary& s : summaries) {
      points.emplace_back(s.policy, 1e3 * s.seconds_per_step_mean, s.final_mean, s.final_se,
                          s.environment);
    }
    if (WriteScatterPlot(points, out + "/tradeoff.svg", "Final regret against time per step",
                         "time per step (ms, log scale)", "final cumulative regret", true)
            .ok()) {
      absl::StrAppend(&plots, "![regret against time per step](tradeoff.svg)\n\n");
    }
  }
  if (preset->frontier_plot) {
    if (WriteFrontierPlot(outputs, out + "/frontier.svg").ok()) {
      absl::StrAppend(&plots,
                      "![regret against the cost of a rewarded decision](frontier.svg)\n\n");
    }
  }
  if (preset->timing_window > 0) {
    std::ofstream timing(out + "/timing.csv");
    timing << "environment,policy,seed,window_start,window_end,mean_seconds_per_step\n";
    for (size_t i = 0; i < outputs.size(); ++i) {
      for (size_t w = 0; w < outputs[i].window_seconds.size(); ++w) {
        timing << absl::StrFormat("\"%s\",\"%s\",%d,%d,%d,%.9g\n", specs[i].environment,
                                  specs[i].policy.name, specs[i].seed, w * preset->timing_window,
                                  (w + 1) * preset->timing_window, outputs[i].window_seconds[w]);
      }
    }
  }

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  // The program by its name (not the path it was started from), then the arguments as given.
  std::string command = "graphbandit-sim";
  for (int i = 1; i < argc; ++i) absl::StrAppend(&command, " ", argv[i]);
  std::ostringstream md;
  md << "# " << preset->name << "\n\n"
     << preset->description << "\n\n"
     << "- command: `" << command << "`\n"
     << "- commit: " << commit << "\n"
     << "- machine: " << MachineDescription() << "\n"
     << absl::StrFormat(
            "- runs: %zu (%d seeds x %lld rounds), %d threads, %s wall time, peak "
            "resident memory %.1f MiB\n",
            specs.size(), seeds, static_cast<long long>(rounds), jobs,
            absl::FormatDuration(absl::Trunc(took, absl::Seconds(1))), usage.ru_maxrss / 1024.0)
     << "- date: " << absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()) << "\n\n"
     << "## Final regret\n\n"
     << MarkdownTable(summaries, preset->references) << "\n";
  if (preset->analysis) md << "## Findings\n\n" << preset->analysis(outputs) << "\n";
  if (!failures.empty()) {
    md << "## Failed runs\n\n";
    for (const std::string& f : failures) md << "- " << f << "\n";
    md << "\n";
  }
  md << "## Plots\n\n"
     << plots << "Raw curves: `regret.csv`"
     << (preset->timing_window > 0 ? ", timing per window: `timing.csv`" : "") << ".\n";
  std::ofstream(out + "/summary.md") << md.str();
  std::printf("%s", MarkdownTable(summaries, preset->references).c_str());
  if (preset->analysis) std::printf("\n%s", preset->analysis(outputs).c_str());
  std::fprintf(stderr, "graphbandit-sim: wrote %s/summary.md (%zu failed runs)\n", out.c_str(),
               failures.size());
  return failures.empty() ? 0 : 2;
}
