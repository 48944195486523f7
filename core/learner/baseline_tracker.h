// An arm-independent reward baseline that drifts (time of day, seasonality, a campaign): the
// same shift for every candidate of a decision, so it never changes which arm is best, but a
// learner that takes it for noise (or for signal) learns slowly or wrongly. The tracker follows
// it by exponential smoothing of the learner's one-step prediction errors (the steady-state
// Kalman filter of a local-level model) and the model subtracts it from each reward before the
// learner sees it; reported means add it back. With no drift the errors average out and the
// baseline stays near zero (its spread is about sqrt(rate / 2) times the prediction error).
// Deterministic: the model applies it in log order, and snapshots keep its value.
#ifndef GRAPHBANDIT_CORE_LEARNER_BASELINE_TRACKER_H_
#define GRAPHBANDIT_CORE_LEARNER_BASELINE_TRACKER_H_

#include <cmath>

namespace graphbandit {

class BaselineTracker {
 public:
  // half_life: rewards after which an old error's weight has halved; <= 0 turns tracking off.
  explicit BaselineTracker(double half_life = 0.0)
      : rate_(half_life > 0.0 ? 1.0 - std::exp2(-1.0 / half_life) : 0.0) {}

  bool enabled() const { return rate_ > 0.0; }
  double value() const { return value_; }
  void set_value(double value) { value_ = value; }

  // The target the learner learns for `reward`.
  double Target(double reward) const { return reward - value_; }
  // After the learner has learned `target`: moves the baseline towards the error of its
  // prediction (without the baseline) at the rewarded point, made before it learned.
  void Update(double target, double prediction) {
    if (rate_ > 0.0 && std::isfinite(prediction)) value_ += rate_ * (target - prediction);
  }

 private:
  double rate_;
  double value_ = 0.0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_BASELINE_TRACKER_H_
