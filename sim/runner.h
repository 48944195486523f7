// Plays policies against environments in-process and records regret over time and the cost of
// each step. One run = (environment, policy, seed); RunAll spreads runs over threads and shows
// progress.
#ifndef GRAPHBANDIT_SIM_RUNNER_H_
#define GRAPHBANDIT_SIM_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/policy/evaluation.h"
#include "sim/environment.h"
#include "sim/policy_spec.h"
#include "sim/report.h"

namespace graphbandit::sim {

using EnvironmentFactory =
    std::function<absl::StatusOr<std::unique_ptr<SimEnvironment>>(uint64_t seed)>;

struct RunSpec {
  std::string environment;  // label
  EnvironmentFactory make_environment;
  PolicySpec policy;
  uint64_t seed = 0;
  int64_t rounds = 1000;
  int sample_points = 100;      // cumulative-regret samples per run
  int64_t timing_window = 0;    // > 0: also record the mean step time of each window of rounds
  bool record_choices = false;  // keep the chosen candidate of every round (RunOutput::choices)
  // Arms chosen per round (a slate, the top slate_size by index). Each chosen arm's reward is
  // learned as a single reward (semi-bandit feedback); the regret of a round is the summed mean
  // of the best slate_size shown arms minus that of the chosen ones.
  int slate_size = 1;
  // > 0: that share of decisions is drawn uniformly, as a model with evaluation.epsilon does,
  // and the run estimates every evaluated policy's value off-policy (slate_size 1 only;
  // core/policy/evaluation.h), next to its true value (RunOutput::policy_truth).
  double evaluation_epsilon = 0.0;
};

struct RunOutput {
  RunResult result;                    // regret over time (and dictionary size as auxiliary)
  std::vector<double> window_seconds;  // mean seconds per step in each timing window
  // Heap in use at the end of the run minus at its start (glibc's mallinfo2): the memory the
  // run's learner and environment hold. Meaningful only when runs do not overlap (--jobs=1).
  double heap_growth_bytes = 0.0;
  // The CPU time of the run's thread per round (seconds) in the policy's code, in three parts:
  // choosing (building the candidates' points and scoring them, as a model's SelectArm does),
  // learning the reward(s), and the refits the policy's refitter runs after a reward (fits and
  // the rebuilds they apply: inline here, where a server searches on its fitter thread and
  // applies on its writer). The environment's rounds and reward draws are in none of them, but
  // in cpu_seconds_per_step, the thread's whole CPU time per round. The wall time of the three
  // parts is result.seconds_per_step.
  double decision_cpu_per_step = 0.0;
  double learn_cpu_per_step = 0.0;
  double fit_cpu_per_step = 0.0;
  double cpu_seconds_per_step = 0.0;
  // With evaluation_epsilon: the estimates a model would report at the end of the run, per
  // EvaluatedPolicy, and what they estimate, computed from the environment's expected rewards:
  // the mean over the run's decisions of each policy's expected reward on that decision.
  std::vector<PolicyValue> policy_values;
  std::vector<double> policy_truth;
  std::string error;         // empty when the run succeeded
  std::vector<int> choices;  // with record_choices: the chosen candidate per round
};

// Runs one spec; adds each finished round to *steps_done (may be null).
RunOutput Run(const RunSpec& spec, std::atomic<int64_t>* steps_done);

// Runs every spec on `jobs` threads, in order of the specs; prints a progress bar on stderr.
std::vector<RunOutput> RunAll(const std::vector<RunSpec>& specs, int jobs, bool show_progress);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_RUNNER_H_
