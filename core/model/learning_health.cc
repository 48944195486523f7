#include "core/model/learning_health.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/graph/user_graph.h"

namespace graphbandit {

void RecentRewards::Add(double reward) {
  static const double kKeep = std::exp2(-1.0 / kRecentRewardHalfLife);
  sum_ = kKeep * sum_ + reward;
  weight_ = kKeep * weight_ + 1.0;
}

double SignalToNoise(const Hyperparameters& values, const UserKernel& kernel, int32_t users) {
  double diagonal = 0.0;
  if (users <= 0) {
    diagonal = kernel.ColumnOf(kUnknownUser).Diagonal();
  } else {
    const int32_t sampled = std::min<int32_t>(users, kSignalToNoiseUsers);
    for (int32_t k = 0; k < sampled; ++k) {
      const int32_t u = static_cast<int32_t>(static_cast<int64_t>(k) * users / sampled);
      diagonal += kernel.ColumnOf(u).Diagonal();
    }
    diagonal /= sampled;
  }
  // The user kernel's diagonal already holds the community part w S(u, u).
  return (diagonal + values.user_variance) * (values.signal_variance + values.offset_variance) /
         values.noise_variance;
}

absl::string_view FitOutcomeName(FitOutcome outcome) {
  switch (outcome) {
    case FitOutcome::kNone:
      return "none";
    case FitOutcome::kApplied:
      return "applied";
    case FitOutcome::kUnchanged:
      return "unchanged";
    case FitOutcome::kSkipped:
      return "skipped";
    case FitOutcome::kFailed:
      return "failed";
  }
  return "none";
}

LearningHealth AssessLearning(const LearningInputs& in) {
  LearningHealth health;
  auto add = [&health](const char* name, bool ok, std::string problem) {
    health.checks.push_back({name, ok, ok ? std::string() : std::move(problem)});
  };
  const bool behind = in.max_queued > 0 && 2 * in.queued_operations >= in.max_queued;
  add("keeps_up", !behind,
      absl::StrFormat("%d operations wait for the writer (back-pressure starts at %d): rewards "
                      "and decisions arrive faster than the model logs and learns them "
                      "(PERFORMANCE.md has what one "
                      "node learns per second)",
                      in.queued_operations, in.max_queued));
  const bool no_signal =
      in.signal_to_noise.has_value() && !(*in.signal_to_noise >= kMinSignalToNoise);
  add("signal", !no_signal,
      absl::StrFormat("the hyper-parameters in use see almost no signal in the rewards "
                      "(signal-to-noise %.3g, below %g): the model is too sure to explore; check "
                      "that the rewards depend on the features, or fix the kernel's variance "
                      "(ModelConfig.arm_kernel.variance)",
                      in.signal_to_noise.value_or(0.0), kMinSignalToNoise));
  health.dictionary_full =
      in.max_dictionary_size > 0 && in.dictionary_size >= in.max_dictionary_size;
  add("fits", in.last_fit != FitOutcome::kFailed,
      absl::StrFormat("the last hyper-parameter fit failed (%s): the model keeps its values",
                      in.last_fit_error));
  // The recent rewards against the baseline's and uniform choice's estimated values.
  std::string below;
  if (in.recent_weight >= kMinRecentWeight) {
    for (const PolicyValue& v : in.policy_values) {
      if (!v.valid) continue;
      if (v.policy != EvaluatedPolicy::kBaseline && v.policy != EvaluatedPolicy::kUniform) continue;
      if (v.policy == EvaluatedPolicy::kBaseline && in.apprentice) continue;
      if (in.recent_reward < v.dr.lower) {
        below = absl::StrFormat(
            "the recent mean reward, %.4g, is below what %s earns (%.4g, 95%% "
            "interval %.4g to %.4g, doubly robust)",
            in.recent_reward, EvaluatedPolicyName(v.policy), v.dr.estimate, v.dr.lower, v.dr.upper);
        break;
      }
    }
  }
  add("reward_trend", below.empty(), below);
  return health;
}

}  // namespace graphbandit
