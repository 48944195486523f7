// graphbandit-replay: offline evaluation and export of a model's logged decisions
// (sim/logged_history.h, sim/offline_replay.h).
//
//   graphbandit-replay --state_dir=DIR --model=NAME --export_dsjson=FILE
//   graphbandit-replay --state_dir=DIR --model=NAME --candidates=CONFIG [--json=F] [--svg=F]
//   graphbandit-replay --dsjson=FILE --candidates=CONFIG
//   graphbandit-replay --dsjson=FILE --warm_start_state_dir=DIR [--config=CONFIG] [--model=NAME]
//
// CONFIG is a server configuration in text format (the server's --config); each of its
// `models` is one candidate, named by its name. The state directory may belong to a running
// server: it is only read.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/command_line.h"
#include "core/graph/edge_list.h"
#include "proto/model_config.h"
#include "proto/text_format.h"
#include "sim/logged_history.h"
#include "sim/offline_replay.h"
#include "sim/warm_start.h"

ABSL_FLAG(std::string, state_dir, "", "The server's state directory (its --state_dir).");
ABSL_FLAG(std::string, model, "default",
          "The model whose log is read (with --state_dir), and the model warm-started.");
ABSL_FLAG(std::string, dsjson, "", "Read the decisions from this DSJSON file instead.");
ABSL_FLAG(std::string, graph, "",
          "A user-graph edge list (\"user_a user_b [weight]\" per line) added to the graph the "
          "log holds: needed when the log no longer reaches back to the graph's edits.");
ABSL_FLAG(std::string, export_dsjson, "",
          "Write the decisions and rewards to this file as DSJSON.");
ABSL_FLAG(std::string, candidates, "",
          "A server configuration (text format) whose models are the candidates to evaluate.");
ABSL_FLAG(std::string, warm_start_state_dir, "",
          "Teach the history to model --warm_start_model of the state directory DIR "
          "(sim/warm_start.h), configured by --config; the server must not be running on DIR.");
ABSL_FLAG(std::string, warm_start_model, "", "The model warm-started (default: --model).");
ABSL_FLAG(std::string, config, "",
          "The server configuration (text format) that configures the warm-started model "
          "(default: a model with default options).");
ABSL_FLAG(std::string, json, "", "Also write the report as JSON to this file.");
ABSL_FLAG(std::string, svg, "", "Also write a chart of the values to this SVG file.");
ABSL_FLAG(uint64_t, seed, 1, "Seeds the candidates' randomness.");

namespace graphbandit::replay {
namespace {

absl::StatusOr<std::vector<ReplayCandidate>> ReadCandidates(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open \"%s\"", path));
  std::stringstream text;
  text << in.rdbuf();
  v1::ServerConfig config;
  if (absl::Status s = ParseTextFormat(text.str(), &config); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.message()));
  }
  if (config.models().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, " declares no models"));
  }
  std::vector<ReplayCandidate> out;
  for (const v1::ModelConfig& model : config.models()) {
    absl::StatusOr<ModelOptions> options = config::ToModelOptions(model);
    if (!options.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s, model \"%s\": %s", path, model.name(), options.status().message()));
    }
    out.push_back({options->name, *std::move(options)});
  }
  return out;
}

// Opens the state directory with the one model (named --model, configured by --config's model
// of that name or by default) and teaches it the history.
absl::Status RunWarmStart(const LoggedHistory& history, const std::string& state_dir,
                          const std::string& model) {
  ModelOptions options;
  options.name = model;
  if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
    absl::StatusOr<std::vector<ReplayCandidate>> models = ReadCandidates(path);
    if (!models.ok()) return models.status();
    bool found = false;
    for (ReplayCandidate& m : *models) {
      if (m.name == model) {
        options = std::move(m.options);
        found = true;
      }
    }
    if (!found) {
      return absl::NotFoundError(absl::StrFormat("%s configures no model \"%s\"", path, model));
    }
  }
  if (options.samples_parameters()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be warm-started: its policy learns from every candidate of a "
        "decision and their probabilities, which a forced one-candidate decision does not give",
        model));
  }
  if (options.aggregation != Aggregation::kFirst) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be warm-started: it aggregates rewards over a window "
        "(rewards.aggregation), and a warm start teaches each logged reward at once (FIRST)",
        model));
  }
  // Imported decisions have one candidate each: they would tell the model's off-policy
  // estimates nothing about its own traffic, so none is recorded for them.
  options.evaluation_epsilon = 0.0;
  EngineOptions engine_options;
  engine_options.state_dir = state_dir;
  engine_options.models = {options};
  engine_options.default_model = model;
  engine_options.run_sweeper = false;
  engine_options.durability.sync = Durability::Sync::kGroupCommit;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Open(engine_options);
  if (!engine.ok()) return engine.status();
  absl::StatusOr<WarmStartResult> result = WarmStart(history, **engine, model);
  const bool closed = (*engine)->Shutdown();
  if (!result.ok()) return result.status();
  if (!closed) return absl::InternalError("the model did not close cleanly");
  std::fprintf(stderr, "model \"%s\" in %s learned %lld rewards (%lld imported before)\n",
               model.c_str(), state_dir.c_str(), static_cast<long long>(result->learned),
               static_cast<long long>(result->already_known));
  return absl::OkStatus();
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.flush();
  if (!out) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "graphbandit-replay: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  ParseProgramCommandLine(
      argc, argv, "graphbandit-replay",
      "graphbandit-replay: evaluate candidate configurations on a model's logged decisions, or "
      "export them as DSJSON.\n"
      "Usage: graphbandit-replay (--state_dir=DIR [--model=NAME] | --dsjson=FILE) "
      "[--export_dsjson=FILE] [--candidates=CONFIG] [--json=FILE] [--svg=FILE] [--graph=FILE] "
      "[--warm_start_state_dir=DIR [--config=CONFIG]]",
      {"sim/replay_main.cc"});
  const std::string state_dir = absl::GetFlag(FLAGS_state_dir);
  const std::string dsjson = absl::GetFlag(FLAGS_dsjson);
  if (state_dir.empty() == dsjson.empty()) {
    std::fprintf(stderr, "graphbandit-replay: give either --state_dir or --dsjson\n");
    return kExitUsage;
  }
  absl::StatusOr<LoggedHistory> history =
      dsjson.empty() ? ReadStateDirectory(state_dir, absl::GetFlag(FLAGS_model))
                     : ReadDsjson(dsjson);
  if (!history.ok()) return Fail(history.status());
  if (const std::string graph = absl::GetFlag(FLAGS_graph); !graph.empty()) {
    absl::StatusOr<std::vector<EdgeEdit>> edges = ReadEdgeList(graph);
    if (!edges.ok()) return Fail(edges.status());
    history->edges.insert(history->edges.end(), edges->begin(), edges->end());
  }
  if (const std::string out = absl::GetFlag(FLAGS_export_dsjson); !out.empty()) {
    if (absl::Status s = WriteDsjson(*history, out); !s.ok()) return Fail(s);
    std::fprintf(stderr, "wrote %zu decisions to %s\n%s", history->events.size(), out.c_str(),
                 DescribeHistory(*history).c_str());
  }
  if (const std::string dir = absl::GetFlag(FLAGS_warm_start_state_dir); !dir.empty()) {
    std::string model = absl::GetFlag(FLAGS_warm_start_model);
    if (model.empty()) model = absl::GetFlag(FLAGS_model);
    if (absl::Status s = RunWarmStart(*history, dir, model); !s.ok()) {
      return Fail(s);
    }
  }
  std::vector<ReplayCandidate> candidates;
  if (const std::string path = absl::GetFlag(FLAGS_candidates); !path.empty()) {
    absl::StatusOr<std::vector<ReplayCandidate>> read = ReadCandidates(path);
    if (!read.ok()) return Fail(read.status());
    candidates = *std::move(read);
  } else if (!absl::GetFlag(FLAGS_export_dsjson).empty() ||
             !absl::GetFlag(FLAGS_warm_start_state_dir).empty()) {
    return 0;  // an export or a warm start alone
  }
  if (history->events.size() < 2) {
    std::fputs(DescribeHistory(*history).c_str(), stderr);
    return Fail(absl::FailedPreconditionError(
        "fewer than 2 rewarded decisions with every candidate: nothing to evaluate (a model logs "
        "every candidate only with evaluation { epsilon } above 0, for single-arm decisions)"));
  }
  const ReplayReport report = Replay(*history, candidates, absl::GetFlag(FLAGS_seed));
  std::fputs(FormatTable(report).c_str(), stdout);
  if (const std::string path = absl::GetFlag(FLAGS_json); !path.empty()) {
    if (absl::Status s = WriteText(path, FormatJson(report)); !s.ok()) return Fail(s);
  }
  if (const std::string path = absl::GetFlag(FLAGS_svg); !path.empty()) {
    if (absl::Status s = WriteText(path, FormatSvg(report)); !s.ok()) return Fail(s);
  }
  for (const CandidateValue& c : report.candidates) {
    if (!c.error.empty()) return 1;
  }
  return 0;
}

}  // namespace
}  // namespace graphbandit::replay

int main(int argc, char** argv) { return graphbandit::replay::Main(argc, argv); }
