#include "sim/frontier.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "sim/report.h"
#include "sim/robustness.h"

namespace graphbandit::sim {
namespace {

using report_internal::MeanAndSe;
using report_internal::MeanSe;

// One (task, policy) over its seeds.
struct Cell {
  std::string policy;
  int cap = 0;  // 0: not a capped served model
  std::map<uint64_t, double> final_by_seed;
  // Per run: final regret, final dictionary size, CPU ms per round choosing, learning the
  // reward, refitting and all three, and wall ms per round.
  std::vector<double> finals, dictionary, decision_ms, learn_ms, fit_ms, cost_ms, wall_ms;
};

struct Task {
  std::string name;
  std::vector<Cell> cells;  // in the order the policies first appear
  Cell* Find(const std::string& policy) {
    for (Cell& c : cells) {
      if (c.policy == policy) return &c;
    }
    return nullptr;
  }
};

int CapOf(const std::string& policy) {
  if (!absl::StartsWith(policy, kFrontierPrefix)) return 0;
  return std::atoi(policy.c_str() + std::string(kFrontierPrefix).size());
}

std::vector<Task> Collect(const std::vector<RunOutput>& runs) {
  std::vector<Task> tasks;
  for (const RunOutput& r : runs) {
    if (!r.error.empty() || r.result.cumulative_regret.empty()) continue;
    auto task = std::find_if(tasks.begin(), tasks.end(),
                             [&r](const Task& t) { return t.name == r.result.environment; });
    if (task == tasks.end()) {
      tasks.emplace_back().name = r.result.environment;
      task = tasks.end() - 1;
    }
    Cell* cell = task->Find(r.result.policy);
    if (cell == nullptr) {
      cell = &task->cells.emplace_back();
      cell->policy = r.result.policy;
      cell->cap = CapOf(r.result.policy);
    }
    const double final_regret = r.result.cumulative_regret.back();
    cell->final_by_seed[r.result.seed] = final_regret;
    cell->finals.push_back(final_regret);
    if (!r.result.auxiliary.empty()) cell->dictionary.push_back(r.result.auxiliary.back());
    cell->decision_ms.push_back(1e3 * r.decision_cpu_per_step);
    cell->learn_ms.push_back(1e3 * r.learn_cpu_per_step);
    cell->fit_ms.push_back(1e3 * r.fit_cpu_per_step);
    cell->cost_ms.push_back(1e3 *
                            (r.decision_cpu_per_step + r.learn_cpu_per_step + r.fit_cpu_per_step));
    cell->wall_ms.push_back(1e3 * r.result.seconds_per_step);
  }
  return tasks;
}

// The tuned per-user LinUCB of a task: the grid's policy with the lowest mean final regret.
const Cell* TunedLinUcb(const Task& task) {
  const Cell* best = nullptr;
  double best_mean = INFINITY;
  for (const Cell& c : task.cells) {
    if (!absl::StartsWith(c.policy, kPerUserPrefix)) continue;
    const double mean = MeanAndSe(c.finals).mean;
    if (std::isfinite(mean) && mean < best_mean) {
      best_mean = mean;
      best = &c;
    }
  }
  return best;
}

const Cell* ReferenceCell(const Task& task) {
  for (const Cell& c : task.cells) {
    if (c.cap == kFrontierReferenceCap) return &c;
  }
  return nullptr;
}

// Paired by seed: the mean and SE of this cell's final regret over the reference's.
MeanSe RelativeRegret(const Cell& cell, const Cell* reference) {
  std::vector<double> ratios;
  if (reference == nullptr) return MeanSe();
  for (const auto& [seed, value] : cell.final_by_seed) {
    auto it = reference->final_by_seed.find(seed);
    if (it != reference->final_by_seed.end() && it->second > 0.0) {
      ratios.push_back(value / it->second);
    }
  }
  return MeanAndSe(ratios);
}

std::string Ms(double ms) {
  if (!std::isfinite(ms)) return "–";
  return ms >= 1.0 ? absl::StrFormat("%.2f", ms) : absl::StrFormat("%.3g", ms);
}

}  // namespace

std::string FrontierFindings(const std::vector<RunOutput>& runs) {
  std::vector<Task> tasks = Collect(runs);
  std::string out = absl::StrFormat(
      "Per task and cap: final regret (mean ± SE over seeds), the same relative to the cap of "
      "%d (paired by seed: mean ± SE of the per-seed ratios), the dictionary size reached (mean "
      "at the end: below the cap where the horizon was too short to fill it, and the costs are "
      "those of the size reached), and the CPU time per round of the run's thread in the "
      "policy's code: choosing (points and scores: the decision), learning the reward, and "
      "refitting (the fits and the rebuilds they apply, inline here: a server searches on its "
      "fitter thread and applies on its writer); their sum is the CPU per rewarded decision. "
      "The wall time per round exceeds the CPU when runs shared a core. The tuned per-user "
      "LinUCB is the best alpha of its grid.\n\n",
      kFrontierReferenceCap);
  // Per cap over the tasks: log relative regret and log cost, for geometric means.
  std::map<int, std::vector<double>> log_relative, log_choose, log_learn, log_fit, log_cost;
  // Tasks on which the cap's mean final regret is within 5% of the best cap's.
  std::map<int, int> within_5_percent;
  // A part that cost nothing on a task (no refits) makes its geometric mean 0: log(0) = -inf.
  const auto log_of = [](double v) { return std::log(v); };
  for (Task& task : tasks) {
    const Cell* reference = ReferenceCell(task);
    absl::StrAppend(&out, "### ", task.name,
                    "\n\n| policy | runs | final regret | relative to m<=", kFrontierReferenceCap,
                    " | m reached | CPU choosing (ms) | CPU learning (ms) | CPU refitting (ms) | "
                    "CPU per rewarded decision (ms) | wall per round (ms) |\n"
                    "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    std::vector<const Cell*> rows;
    double best_capped = INFINITY;
    for (const Cell& c : task.cells) {
      if (c.cap > 0) {
        rows.push_back(&c);
        best_capped = std::min(best_capped, MeanAndSe(c.finals).mean);
      }
    }
    std::sort(rows.begin(), rows.end(),
              [](const Cell* a, const Cell* b) { return a->cap < b->cap; });
    if (const Cell* linucb = TunedLinUcb(task)) rows.push_back(linucb);
    for (const Cell* c : rows) {
      const MeanSe regret = MeanAndSe(c->finals);
      const MeanSe relative = RelativeRegret(*c, reference);
      const double dictionary = MeanAndSe(c->dictionary).mean;
      const double choose = MeanAndSe(c->decision_ms).mean;
      const double learn = MeanAndSe(c->learn_ms).mean;
      const double fit = MeanAndSe(c->fit_ms).mean;
      const double cost = MeanAndSe(c->cost_ms).mean;
      absl::StrAppend(
          &out,
          absl::StrFormat(
              "| %s | %d | %.1f ± %.1f | %s | %s | %s | %s | %s | %s | %s |\n", c->policy, regret.n,
              regret.mean, regret.se,
              std::isfinite(relative.mean)
                  ? absl::StrFormat("%.3f ± %.3f", relative.mean, relative.se)
                  : std::string("–"),
              std::isfinite(dictionary) ? absl::StrFormat("%.0f", dictionary) : std::string("–"),
              Ms(choose), Ms(learn), Ms(fit), Ms(cost), Ms(MeanAndSe(c->wall_ms).mean)));
      if (c->cap > 0 && std::isfinite(relative.mean) && relative.mean > 0.0 && cost > 0.0) {
        log_relative[c->cap].push_back(std::log(relative.mean));
        log_choose[c->cap].push_back(log_of(choose));
        log_learn[c->cap].push_back(log_of(learn));
        log_fit[c->cap].push_back(log_of(fit));
        log_cost[c->cap].push_back(std::log(cost));
        if (regret.mean <= 1.05 * best_capped) ++within_5_percent[c->cap];
      }
    }
    absl::StrAppend(&out, "\n");
  }
  if (log_relative.empty()) return out;
  absl::StrAppend(
      &out, "### Over the tasks\n\nGeometric means over the tasks of the regret relative to m<=",
      kFrontierReferenceCap,
      " and of each CPU column (so the parts need not add up to the whole); the tasks on which "
      "the cap's mean final regret is within 5% of the best mean among the caps tried.\n\n"
      "| cap | tasks | relative regret | CPU choosing (ms) | CPU learning (ms) | CPU refitting "
      "(ms) | CPU per rewarded decision (ms) | within 5% of the best cap |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  const auto geometric = [](const std::vector<double>& logs) {
    double sum = 0.0;
    for (double v : logs) sum += v;
    return std::exp(sum / static_cast<double>(logs.size()));
  };
  int smallest_everywhere = 0;
  for (const auto& [cap, logs] : log_relative) {
    const int n = static_cast<int>(logs.size());
    absl::StrAppend(&out,
                    absl::StrFormat("| %d | %d | %.3f | %s | %s | %s | %s | %d of %d |\n", cap, n,
                                    geometric(logs), Ms(geometric(log_choose[cap])),
                                    Ms(geometric(log_learn[cap])), Ms(geometric(log_fit[cap])),
                                    Ms(geometric(log_cost[cap])), within_5_percent[cap], n));
    // Only a cap that ran on every task qualifies.
    if (smallest_everywhere == 0 && n == static_cast<int>(tasks.size()) &&
        within_5_percent[cap] == n) {
      smallest_everywhere = cap;
    }
  }
  absl::StrAppend(
      &out, smallest_everywhere > 0
                ? absl::StrFormat("\nThe smallest cap whose regret is within 5%% of the best cap's "
                                  "on every task: %d (of the caps tried).",
                                  smallest_everywhere)
                : std::string("\nNo cap's regret is within 5% of the best cap's on every task."));
  absl::StrAppend(&out,
                  absl::StrFormat(" m<=%d: within 5%% on %d of %zu tasks.\n", kFrontierReferenceCap,
                                  within_5_percent[kFrontierReferenceCap], tasks.size()));
  return out;
}

// LinUCB is in the table, not in the plot: its regret, far above the caps', would squash them.
absl::Status WriteFrontierPlot(const std::vector<RunOutput>& runs, const std::string& path) {
  std::vector<Task> tasks = Collect(runs);
  std::vector<ScatterPoint> points;
  for (Task& task : tasks) {
    const Cell* reference = ReferenceCell(task);
    for (const Cell& c : task.cells) {
      if (c.cap <= 0) continue;
      const MeanSe relative = RelativeRegret(c, reference);
      points.emplace_back(absl::StrCat("m<=", c.cap), MeanAndSe(c.cost_ms).mean, relative.mean,
                          relative.se, task.name);
    }
  }
  return WriteScatterPlot(
      points, path,
      absl::StrCat("Regret relative to m<=", kFrontierReferenceCap,
                   " against the CPU of a rewarded decision"),
      "CPU per rewarded decision: choosing, learning, refitting (ms, log scale)",
      absl::StrCat("final regret / that of m<=", kFrontierReferenceCap), /*log_x=*/true);
}

}  // namespace graphbandit::sim
