// Whether a model is learning, in a few checks an operator can act on (DescribeModel's
// `learning`, the metric graphbandit_learning_healthy{model,check} and the alert
// GraphbanditModelLearningUnhealthy in deploy/prometheus/alerts.yml):
//  * keeps_up:     the writer learns the rewards as fast as they arrive (its queue is below half
//                  the back-pressure bound);
//  * signal:       the hyper-parameters in use see a signal in the rewards (fitted
//                  signal-to-noise at least kMinSignalToNoise): a fit that calls the rewards
//                  noise leaves the model too sure of itself to explore;
//  * fits:         the last hyper-parameter fit did not fail;
//  * reward_trend: the recent rewards are not below what always showing the baseline arm, or a
//                  uniformly random one, is estimated to earn (the lower bound of their doubly
//                  robust 95% interval; judged only with ModelConfig.evaluation on, and the
//                  recent rewards include those of the share's uniform draws).
// Beside them, whether the Nystrom dictionary is full: information, not a check (a full
// dictionary refusing points is how the model bounds its cost; docs/model.md, "When the
// dictionary is full").
#ifndef GRAPHBANDIT_CORE_MODEL_LEARNING_HEALTH_H_
#define GRAPHBANDIT_CORE_MODEL_LEARNING_HEALTH_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_kernel.h"
#include "core/policy/evaluation.h"

namespace graphbandit {

// Below this fitted signal-to-noise the rewards are taken as (nearly) pure noise.
inline constexpr double kMinSignalToNoise = 0.05;
// The recent rewards' half-life, in rewards.
inline constexpr double kRecentRewardHalfLife = 1000.0;
// The recent mean is compared with the estimates once it rests on this much weight.
inline constexpr double kMinRecentWeight = 100.0;

// An exponentially weighted mean of the rewards learned (half-life kRecentRewardHalfLife).
class RecentRewards {
 public:
  void Add(double reward);
  double mean() const { return weight_ > 0.0 ? sum_ / weight_ : 0.0; }
  double weight() const { return weight_; }  // the rewards it rests on, discounted

 private:
  double sum_ = 0.0;
  double weight_ = 0.0;
};

// The prior variance of the reward function over the noise variance, for the values in use:
// (mean over users of the user kernel's diagonal, its community part included, + eta) *
// (s2 + b2) / lambda, the users sampled evenly (at most kSignalToNoiseUsers of `users`; the
// unknown user's diagonal when there are none). Not counted: the linear part c2 <s, s'>, whose
// variance depends on the input. For the linear arm kernel s2 counts as the variance of a
// unit-length input.
inline constexpr int32_t kSignalToNoiseUsers = 16;
double SignalToNoise(const Hyperparameters& values, const UserKernel& kernel, int32_t users);

enum class FitOutcome { kNone, kApplied, kUnchanged, kSkipped, kFailed };
absl::string_view FitOutcomeName(FitOutcome outcome);

struct LearningInputs {
  int64_t queued_operations = 0;
  int64_t max_queued = 0;                 // 0: no bound
  std::optional<double> signal_to_noise;  // kernel policies with hyper-parameters in use
  int64_t dictionary_size = 0;
  int64_t max_dictionary_size = 0;  // 0: not a Nystrom policy
  FitOutcome last_fit = FitOutcome::kNone;
  std::string last_fit_error;
  double recent_reward = 0.0;
  double recent_weight = 0.0;
  std::vector<PolicyValue> policy_values;
  // An apprentice serves the baseline: its rewards are not compared with the baseline's.
  bool apprentice = false;
};

struct LearningHealth {
  struct Check {
    std::string name;
    bool ok = true;
    std::string problem;  // what is wrong and what to do, when not ok
  };
  std::vector<Check> checks;     // in the order above, every one present
  bool dictionary_full = false;  // at max_dictionary_size
  bool healthy() const {
    for (const Check& c : checks) {
      if (!c.ok) return false;
    }
    return true;
  }
};

LearningHealth AssessLearning(const LearningInputs& in);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_LEARNING_HEALTH_H_
