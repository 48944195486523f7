// graphbandit-ope-coverage: do the off-policy estimates a model reports (core/policy/evaluation.h)
// cover what they estimate? Runs the default served model with an evaluation share on
// simulated tasks, where each policy's true value is known, for many seeds, and counts how often
// each estimator's 95% interval holds the truth.
//
// Writes coverage.csv (one row per task, seed, policy and estimator) and summary.md (coverage,
// mean interval width and mean error per task, policy and estimator) into --out.
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/base/command_line.h"
#include "graphbandit_version.h"
#include "sim/robustness.h"
#include "sim/runner.h"
#include "sim/task_environment.h"

ABSL_FLAG(std::string, tasks, "sbm-nonlinear,er-linear",
          "Robustness tasks to run (the robustness preset's names), comma-separated.");
ABSL_FLAG(int, seeds, 50, "Seeds per task (1..10000).");
ABSL_FLAG(int64_t, rounds, 2000, "Decisions per run (2..1000000).");
ABSL_FLAG(double, epsilon, 0.2, "The evaluation share, in (0, 1).");
ABSL_FLAG(bool, regret, true,
          "Also run every seed without the evaluation share and report what the share costs in "
          "regret.");
ABSL_FLAG(int, jobs, 0, "Runs in parallel (0: one per core).");
ABSL_FLAG(std::string, out, "results/ope", "Directory for coverage.csv and summary.md.");

namespace graphbandit::sim {
namespace {

struct Cell {
  int runs = 0;
  int estimated = 0;   // runs with an estimate (enough effective decisions)
  int covered = 0;     // runs whose interval held the truth (none without an estimate)
  double width = 0.0;  // summed over the runs with an estimate
  double error = 0.0;
};

int Main(int argc, char** argv) {
  ParseProgramCommandLine(argc, argv, "graphbandit-ope-coverage",
                          "graphbandit-ope-coverage: whether the off-policy estimates' 95% "
                          "intervals cover the truth, in simulation.\n"
                          "Usage: graphbandit-ope-coverage [--tasks=a,b] [--seeds=50] "
                          "[--rounds=2000] [--epsilon=0.2] [--out=results/ope]",
                          {"sim/ope_coverage.cc"});
  const int seeds = absl::GetFlag(FLAGS_seeds);
  const int64_t rounds = absl::GetFlag(FLAGS_rounds);
  const double epsilon = absl::GetFlag(FLAGS_epsilon);
  if (seeds < 1 || seeds > 10000 || rounds < 2 || rounds > 1000000 || !(epsilon > 0.0) ||
      !(epsilon < 1.0)) {
    std::fprintf(stderr, "--seeds must be 1..10000, --rounds 2..1000000, --epsilon in (0, 1)\n");
    return kExitUsage;
  }
  std::map<std::string, TaskOptions> known;
  for (const auto& [name, options] : RobustnessTaskOptions()) known[name] = options;
  std::vector<std::string> tasks = absl::StrSplit(absl::GetFlag(FLAGS_tasks), ',');
  std::vector<RunSpec> specs;
  for (const std::string& task : tasks) {
    auto it = known.find(task);
    if (it == known.end()) {
      std::fprintf(stderr, "unknown task \"%s\"\n", task.c_str());
      return kExitUsage;
    }
    const TaskOptions options = it->second;
    for (int seed = 1; seed <= seeds; ++seed) {
      RunSpec spec;
      spec.environment = task;
      spec.make_environment =
          [options](uint64_t s) -> absl::StatusOr<std::unique_ptr<SimEnvironment>> {
        TaskOptions seeded = options;
        seeded.seed = s;
        auto env = TaskEnvironment::Create(seeded);
        if (!env.ok()) return env.status();
        return std::unique_ptr<SimEnvironment>(new TaskEnvironment(*std::move(env)));
      };
      spec.policy.name = "EK_UCB (served defaults)";
      spec.seed = static_cast<uint64_t>(seed);
      spec.rounds = rounds;
      spec.sample_points = 1;
      spec.evaluation_epsilon = epsilon;
      if (absl::GetFlag(FLAGS_regret)) {
        RunSpec without = spec;
        without.evaluation_epsilon = 0.0;
        specs.push_back(std::move(without));
      }
      specs.push_back(std::move(spec));
    }
  }
  int jobs = absl::GetFlag(FLAGS_jobs);
  if (jobs <= 0) jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const std::vector<RunOutput> outputs = RunAll(specs, jobs, /*show_progress=*/true);

  const std::string dir = absl::GetFlag(FLAGS_out);
  std::filesystem::create_directories(dir);
  std::ofstream csv(dir + "/coverage.csv");
  csv << "task,seed,policy,estimator,decisions,effective_sample_size,estimate,lower,upper,truth,"
         "covered\n";
  // (task, policy, estimator) -> cell, in the order first seen.
  std::vector<std::string> order;
  std::map<std::string, Cell> cells;
  int failed = 0;
  // task -> (sum of final regrets without the share, with it, runs of each)
  std::map<std::string, std::array<double, 4>> regret;
  for (size_t i = 0; i < specs.size(); ++i) {
    const RunOutput& out = outputs[i];
    if (out.error.empty() && !out.result.cumulative_regret.empty()) {
      const int with = specs[i].evaluation_epsilon > 0.0 ? 1 : 0;
      regret[specs[i].environment][with] += out.result.cumulative_regret.back();
      regret[specs[i].environment][2 + with] += 1.0;
    }
    if (specs[i].evaluation_epsilon == 0.0 && out.error.empty()) continue;
    if (!out.error.empty() || out.policy_values.size() != kEvaluatedPolicies) {
      std::fprintf(stderr, "%s seed %d: %s\n", specs[i].environment.c_str(),
                   static_cast<int>(specs[i].seed), out.error.c_str());
      ++failed;
      continue;
    }
    for (const PolicyValue& v : out.policy_values) {
      const double truth = out.policy_truth[static_cast<int>(v.policy)];
      for (const auto& [estimator, interval] :
           {std::pair{"ips", &v.ips}, std::pair{"snips", &v.snips}, std::pair{"dr", &v.dr}}) {
        const bool covered = v.valid && interval->lower <= truth && truth <= interval->upper;
        csv << absl::StrFormat("%s,%d,%s,%s,%d,%.6g,%.9g,%.9g,%.9g,%.9g,%d\n", specs[i].environment,
                               specs[i].seed, EvaluatedPolicyName(v.policy), estimator, v.decisions,
                               v.effective_sample_size, interval->estimate, interval->lower,
                               interval->upper, truth, covered ? 1 : 0);
        const std::string key =
            absl::StrCat(specs[i].environment, "|", EvaluatedPolicyName(v.policy), "|", estimator);
        if (cells.find(key) == cells.end()) order.push_back(key);
        Cell& cell = cells[key];
        ++cell.runs;
        cell.covered += covered ? 1 : 0;
        if (!v.valid) continue;
        ++cell.estimated;
        cell.width += interval->upper - interval->lower;
        cell.error += std::abs(interval->estimate - truth);
      }
    }
  }
  std::ofstream md(dir + "/summary.md");
  md << "# Off-policy estimates: do their 95% intervals cover the truth?\n\n";
  md << absl::StrFormat(
      "The served default model (EK_UCB) with `evaluation { epsilon: %g }`, %d decisions per "
      "run, %d seeds per task. The truth of a policy is the mean, over the run's decisions, of "
      "its expected reward on that decision's candidates (the simulator knows every item's "
      "expected reward); `greedy` is the greedy policy of the model's state at each decision, "
      "`baseline` always shows the first candidate, `deployed` is the served policy with its "
      "evaluation share. Coverage is the share of seeds whose interval holds the truth; the "
      "target is at least 90%% (the intervals are nominally 95%%). The `ips` and `snips` "
      "bounds allow for one more decision of the largest possible weight and the most adverse "
      "reward seen (core/policy/evaluation.h), so they are cautious where a policy rarely "
      "agrees with the logged one; `dr` is the plain normal interval.\n\n",
      epsilon, rounds, seeds);
  md << "Made by commit " << GRAPHBANDIT_COMMIT
     << (GRAPHBANDIT_TREE_DIRTY ? " (with local changes)" : "") << ".\n\n";
  md << "Reproduce: `build/sim/graphbandit-ope-coverage --tasks=" << absl::GetFlag(FLAGS_tasks)
     << " --seeds=" << seeds << " --rounds=" << rounds << " --epsilon=" << epsilon
     << " --out=" << dir << "`\n\n";
  md << "A run without an estimate (fewer than 10 effective decisions behind it) counts as not "
        "covered; width and error are means over the runs with an estimate.\n\n";
  md << "| task | policy | estimator | coverage | runs with an estimate | mean width | mean abs. "
        "error |\n";
  md << "|---|---|---|---|---|---|---|\n";
  int below = 0;
  for (const std::string& key : order) {
    const Cell& cell = cells[key];
    const std::vector<std::string> parts = absl::StrSplit(key, '|');
    const double coverage = static_cast<double>(cell.covered) / cell.runs;
    below += coverage < 0.9 ? 1 : 0;
    const std::string width =
        cell.estimated > 0 ? absl::StrFormat("%.4f", cell.width / cell.estimated) : "-";
    const std::string error =
        cell.estimated > 0 ? absl::StrFormat("%.4f", cell.error / cell.estimated) : "-";
    md << absl::StrFormat("| %s | %s | %s | %d/%d (%.0f%%) | %d | %s | %s |\n", parts[0], parts[1],
                          parts[2], cell.covered, cell.runs, 100.0 * coverage, cell.estimated,
                          width, error);
  }
  md << absl::StrFormat("\nCells below 90%% coverage: %d of %d. Failed runs: %d.\n", below,
                        order.size(), failed);
  if (absl::GetFlag(FLAGS_regret)) {
    md << "\n## What the share costs\n\nMean cumulative regret after " << rounds
       << " decisions, the same seeds with and without the share:\n\n";
    md << "| task | without | with epsilon " << epsilon << " | change |\n|---|---|---|---|\n";
    for (const auto& [task, sums] : regret) {
      if (sums[2] == 0 || sums[3] == 0) continue;
      const double without = sums[0] / sums[2], with = sums[1] / sums[3];
      md << absl::StrFormat("| %s | %.1f | %.1f | %+.0f%% |\n", task, without, with,
                            100.0 * (with / without - 1.0));
    }
  }
  std::printf(
      "wrote %s/coverage.csv and %s/summary.md: %d of %zu cells below 90%% coverage, "
      "%d failed runs\n",
      dir.c_str(), dir.c_str(), below, order.size(), failed);
  return failed > 0 ? 1 : 0;
}

}  // namespace
}  // namespace graphbandit::sim

int main(int argc, char** argv) { return graphbandit::sim::Main(argc, argv); }
