// The statistics behind the simulator's reports: per-run cumulative-regret series go in; out
// come, per (environment, policy), the mean and standard error of the final regret and of the
// time per step (Summarise), and, for the plots, the mean and standard error at every step.
//
// Aggregation over seeds: within one (environment, policy), the mean and the standard error
// (sample sd / sqrt(n), 0 for n = 1) are taken across runs at the same step index. Runs whose
// step grids differ are only aggregated over their common prefix (the longest prefix of steps
// shared by every run of the group). NaN values are skipped and counted (Summary::nan_finals,
// Aggregate::skipped).
//
// Thread-compatible: pure functions.
#ifndef GRAPHBANDIT_SIM_REPORT_STATS_H_
#define GRAPHBANDIT_SIM_REPORT_STATS_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace graphbandit::sim {

struct RunResult {
  std::string environment;  // e.g. "medium GP-draw ER n=20"
  std::string policy;       // e.g. "LK-GP-UCB"
  uint64_t seed = 0;
  std::vector<int64_t> steps;  // rounds at which the series are sampled (1-based, increasing)
  std::vector<double> cumulative_regret;  // at those steps
  std::vector<double> auxiliary;  // optional (e.g. dictionary size): empty or same length as steps
  double seconds_per_step = 0.0;  // mean wall time per round of this run
};

// Over the seeds of one (environment, policy).
struct Summary {
  std::string environment, policy;
  int runs = 0;            // runs in the group, including those with a NaN final regret
  int nan_finals = 0;      // runs whose final regret is NaN (or that have no steps): excluded
  int64_t final_step = 0;  // the last step of the group's common prefix
  double final_mean = 0;   // final cumulative regret at final_step; NaN if no run has one
  double final_se = 0;     // sample sd / sqrt(n) over the finite finals; 0 for n <= 1
  double seconds_per_step_mean = 0;  // over the runs with a finite seconds_per_step
};

// Grouped by (environment, policy): environments in first-appearance order, and within an
// environment, policies in their first appearance order in the whole input (so the order is the
// same in every environment). Empty input gives an empty vector. Series longer than their
// steps (or vice versa) are cut to the shorter length.
std::vector<Summary> Summarise(const std::vector<RunResult>& runs);

namespace report_internal {

// OK, or InvalidArgument for empty input, a run whose series lengths differ from its steps,
// or steps that are not increasing.
absl::Status ValidateRuns(const std::vector<RunResult>& runs);

struct Group {
  std::string environment, policy;
  int policy_index = 0;  // first appearance of the policy in the whole input: fixes its colour
  std::vector<const RunResult*> runs;
};

// Environments in first-appearance order; within one, policies in global first-appearance order.
std::vector<Group> GroupRuns(const std::vector<RunResult>& runs);

enum class Field { kRegret, kAuxiliary };

const std::vector<double>& Values(const RunResult& run, Field field);

// The common prefix of the runs' step grids: the largest k such that every run has at least k
// values and the same first k steps as the first run. `truncated` tells whether some run had
// more.
size_t CommonPrefix(const std::vector<const RunResult*>& runs, Field field, bool* truncated);

struct MeanSe {
  double mean = std::numeric_limits<double>::quiet_NaN(), se = 0;
  int n = 0;        // finite values used
  int skipped = 0;  // NaN (or infinite) values skipped
};

// Over the finite values; mean NaN if there are none, se 0 for fewer than two.
MeanSe MeanAndSe(const std::vector<double>& values);

// Mean and SE across the runs of one group at each step of their common prefix.
struct Aggregate {
  std::vector<int64_t> steps;
  std::vector<double> mean, se;
  std::vector<int> count;  // finite values behind each mean
  int runs = 0;
  int skipped = 0;         // non-finite values skipped
  bool truncated = false;  // some run went beyond the common prefix
};

Aggregate AggregateRuns(const std::vector<const RunResult*>& runs, Field field);

}  // namespace report_internal
}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_REPORT_STATS_H_
