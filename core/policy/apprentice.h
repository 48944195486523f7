// Apprentice mode: a model that serves the application's own choice (the request's baseline arm)
// while it learns, estimates from its own log how much more its policy would earn, and takes
// over when that lift is shown.
//
// The lift is estimated on the decisions logged with the evaluation share
// (core/policy/evaluation.h): for decision i, with logged arm a_i, logging probability p_i,
// reward r_i and prediction q, the doubly robust terms of the model's own policy (pi_m: what it
// would have served, its rule without the share) and of the baseline (pi_b) are
//   DR_m,i = sum_a pi_m(a) q(a) + pi_m(a_i) / p_i (r_i - q(a_i)),
//   DR_b,i = q(b_i) + [a_i = b_i] / p_i (r_i - q(a_i)),
// and the lift is the mean of their difference d_i = DR_m,i - DR_b,i, paired on the same
// decisions so that what the two share (the decision's context, its reward's noise where both
// would have chosen the logged arm) cancels. Its 95% interval is the normal one with the sample
// standard error.
//
// The switch. Looking at that interval after every reward and switching the first time its
// lower bound clears the margin would switch far more often than 5% of the time when the true
// lift is at the margin (each look is another chance for noise to cross it). So the rule looks
// only at checkpoints, when the count of lift terms reaches min_decisions * 2^j (j = 0, 1, ...),
// and at checkpoint j uses a one-sided level of 0.05 / 2^(j+1): the levels sum to 0.05, so by
// the union bound the chance of ever switching on a lift at or below the margin is at most 5%
// (as far as the normal approximation holds). The estimate averages over the whole apprenticeship,
// the early decisions of a policy that was still learning included: it understates the lift of
// the policy as it is at the checkpoint, which makes the switch late rather than wrong.
//
// What the 5% rests on. The terms are those of DR, whose interval holds while the model's
// predictions are about right where its policy departs from the baseline
// (core/policy/evaluation.h): an apprentice's own choices are logged only by the share, with
// weight K / epsilon, so until enough of them are, the lift is mostly the model's own prediction.
// A checkpoint therefore waits (and spends none of its level) until the model's target has an
// effective sample size of kMinEffectiveSampleSize.
//
// The rule (margin, min_decisions) is the one the apprenticeship started with, kept in the
// state and the log (ServingModeOp), so that replay switches at the same reward whatever the
// configuration says by then.
#ifndef GRAPHBANDIT_CORE_POLICY_APPRENTICE_H_
#define GRAPHBANDIT_CORE_POLICY_APPRENTICE_H_

#include <cstdint>
#include <optional>

#include "core/policy/evaluation.h"
#include "core/storage/coding.h"

namespace graphbandit {

// When an apprentice switches by itself.
struct ApprenticeRule {
  double margin = 0.0;          // the lift's lower bound must exceed this (reward units)
  int64_t min_decisions = 200;  // lift terms before the first checkpoint
};

struct LiftEstimate {
  int64_t decisions = 0;   // lift terms (single-arm decisions with a reward, in apprenticeship)
  bool valid = false;      // at least 2 terms
  ValueInterval lift;      // mean difference and its 95% interval
  int64_t next_check = 0;  // the term count of the next checkpoint
};

enum class ServingSwitch : uint8_t {
  kLift = 0,   // the lift's lower bound cleared the margin at a checkpoint
  kAdmin = 1,  // an admin call (AdminService.SetServingMode)
  kStart = 2,  // the configuration started a new model as an apprentice (ApprenticeConfig.start)
};

struct SwitchRecord {
  ServingSwitch reason = ServingSwitch::kLift;
  bool apprentice = false;  // the mode switched to
  int64_t decisions = 0;    // lift terms at the switch
  double lift = 0.0;        // the lift estimate then
  double lower = 0.0;       // the lower bound the rule used (kLift), or the 95% one (kAdmin)
  bool operator==(const SwitchRecord& o) const;
};

// The one-sided quantile of the standard normal: z with P(Z > z) = alpha, 0 < alpha < 1.
double NormalUpperQuantile(double alpha);

// A model's apprenticeship: its mode, the lift's sums and its last switch. Fed in log order by
// the model's writer, so that replaying the log reproduces every switch at the same reward.
class Apprenticeship {
 public:
  // A model serves itself until a switch says otherwise.
  Apprenticeship() = default;

  bool apprentice() const { return apprentice_; }
  const ApprenticeRule& rule() const { return rule_; }
  // Adds the lift term of a rewarded decision whose record carries the model's own policy
  // (EvaluationRecord::kModelTarget). Returns true when it switches the model to serving.
  bool Add(const EvaluationRecord& record, double reward);
  // A logged switch (kAdmin or kStart; `rule` for a switch to apprentice). A kStart switch
  // applies only to a model that has never had one. Returns whether the mode changed. A switch
  // to apprentice starts a new count.
  bool Set(bool apprentice, ServingSwitch reason, const ApprenticeRule& rule);
  LiftEstimate Lift() const;
  const std::optional<SwitchRecord>& last_switch() const { return last_; }

  void Save(storage::Encoder* out) const;
  bool Load(storage::Decoder* in);
  bool operator==(const Apprenticeship& o) const;

 private:
  bool apprentice_ = false;
  ApprenticeRule rule_;
  int64_t n_ = 0;
  double sum_ = 0.0, sum2_ = 0.0;
  double w_ = 0.0, w2_ = 0.0;  // the model target's weights: its effective sample size
  int32_t checkpoints_ = 0;    // checkpoints passed without a switch
  std::optional<SwitchRecord> last_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_POLICY_APPRENTICE_H_
