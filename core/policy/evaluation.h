// Knowing whether a policy works from the decisions it logged: a share of decisions drawn
// uniformly from the candidates (evaluation exploration), which gives every candidate a known,
// positive probability of being logged, and off-policy estimates of what other policies would
// have earned on the same decisions.
//
// The estimators are the standard ones of the contextual-bandit literature (Dudik, Langford and
// Li, "Doubly Robust Policy Evaluation and Learning", 2011; Swaminathan and Joachims, "The
// Self-Normalized Estimator for Counterfactual Learning", 2015). For decision i with logged arm
// a_i, logging probability p_i, observed reward r_i and a target policy pi:
//   w_i  = pi(a_i) / p_i                                    (importance weight)
//   IPS  = mean_i  w_i r_i
//   SNIPS = sum_i w_i r_i / sum_i w_i
//   DR   = mean_i [ sum_a pi(a) q(a) + w_i (r_i - q(a_i)) ]
// where q is the reward model's prediction at decision time (the posterior mean the model
// served with, its drifting baseline included).
//
// Their 95% intervals: DR's is the normal approximation with the sample standard error. IPS's
// (the sample standard error) and SNIPS' (the delta method) are normal approximations too, but
// each bound is also computed as if one more decision had been logged with the largest weight
// the log has shown possible and the most adverse reward seen (the lowest for the lower bound,
// the highest for the upper), and the more cautious of the two is kept. The reason: when a
// target rarely picks what the logging policy picks, its estimate rests on a few decisions of
// weight near K / epsilon; in a run that has seen few of them, the estimate is off and the
// sample variance is small at once, and the plain interval covers far less than 95% (measured
// for IPS: 76% of 50 seeds for the greedy policy). That extra decision stands for the large
// weight the sample may not have shown yet, as the empirical-likelihood intervals of
// Karampatziakis, Langford and Mineiro ("Empirical Likelihood for Contextual Bandits", 2020)
// account for the largest weight the logging policy allows. Its effect shrinks as 1/n, faster
// than the standard error. DR has no such term: there a rare large weight multiplies only the
// reward model's residual, so its interval holds while the model's predictions are about right
// where the target departs from the logged policy, and misses like plain IPS where they are not.
// The deployed policy's weights are all 1: its estimates are the plain mean and its interval.
//
// What is estimated is the average over the logged decisions of each target's expected
// reward on that decision's candidates, at the model's state then: for `greedy`, the greedy
// policy of the state that decided, which changes as the model learns.
#ifndef GRAPHBANDIT_CORE_POLICY_EVALUATION_H_
#define GRAPHBANDIT_CORE_POLICY_EVALUATION_H_

#include <Eigen/Dense>
#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/base/random.h"
#include "core/policy/decision_step.h"
#include "core/storage/coding.h"

namespace graphbandit {

// The policies every model evaluates, in this order. kDeployed is the policy in service (its
// weights are 1: its three estimates are the mean reward of its decisions); the others are
// estimated only from decisions logged with evaluation exploration, whose logging probability
// covers every candidate.
enum class EvaluatedPolicy : uint8_t {
  kDeployed = 0,
  kUniform = 1,   // a candidate uniformly at random
  kGreedy = 2,    // the largest posterior mean (exact ties split evenly)
  kBaseline = 3,  // the request's baseline arm, or else its first candidate
};
inline constexpr int kEvaluatedPolicies = 4;
inline constexpr int kOffPolicyTargets = kEvaluatedPolicies - 1;  // all but kDeployed
// One more target that only some decisions carry (EvaluationRecord::kModelTarget): the model's
// own policy, where the decision was made by another (an apprentice serving the baseline, or a
// challenger shadowing its leader, core/model/shadow_feed.h). Its value is
// PolicyEvaluator::OwnValue().
inline constexpr int kEvaluatorTargets = kEvaluatedPolicies + 1;
absl::string_view EvaluatedPolicyName(EvaluatedPolicy policy);

// What a single-arm decision logs for evaluation.
struct EvaluationRecord {
  int32_t candidates = 0;   // K
  double propensity = 1.0;  // probability that the logging policy chose the logged arm
  double predicted = 0.0;   // q(a_i): the reward model's prediction at the logged arm
  bool explored = false;    // drawn by the uniform share
  // Per off-policy target (kUniform onwards, in order): pi(a_i) and sum_a pi(a) q(a). Empty when
  // the decision was logged without evaluation exploration. An apprentice's decisions
  // (core/policy/apprentice.h) add one more, kModelTarget: the model's own policy, its rule
  // without the share; so do a challenger's (core/model/shadow_feed.h): its rule with its own
  // share, as it would serve.
  struct Target {
    double probability = 0.0;
    double direct = 0.0;
  };
  std::vector<Target> targets;
  static constexpr size_t kBaselineTarget = 2;
  static constexpr size_t kModelTarget = 3;

  bool operator==(const EvaluationRecord& o) const;
};

// The uniform share's coin is seeded with StableHash(event id, model seed ^ this), a stream
// of its own.
inline constexpr uint64_t kEvaluationStream = 0x65766c2d636f696eULL;  // "evl-coin"

// The uniform share's part of a decision. With probability `epsilon` the rule's slate is
// replaced by `slate_size` candidates drawn uniformly without replacement, in random order;
// either way each chosen arm's probability becomes its probability under the mixture,
// (1 - epsilon) * P_rule(arm in slate) + epsilon * slate_size / K. A kSampledParameter decision's
// propensity vector is mixed the same way (its learner learns from the law the arm was drawn
// by). `coin` is a stream of its own (epsilon 0 draws nothing from anything, so decisions are
// what they were without this step); `rule_rng` is used only to estimate a Thompson slate's
// inclusion probabilities. Returns whether the slate was drawn uniformly. With `every`, also
// writes every candidate's probability under the mixture (a simulation's truth; it costs one
// probability per candidate). REQUIRES a slate decided by DecideSlate with probabilities,
// 0 <= epsilon < 1.
bool MixUniformShare(double epsilon, const DecisionRule& rule, int slate_size, Rng& coin,
                     Rng& rule_rng, ScoredSlate* scored, Eigen::VectorXd* every = nullptr);

// An apprentice's decision (core/policy/apprentice.h): the slate is the baseline arm (or else
// the first candidate) followed by the other candidates in request order, replaced with
// probability `epsilon` by `slate_size` candidates drawn uniformly as MixUniformShare draws
// them. Each returned arm's probability is its probability under that mixture, its score its
// posterior mean. `scored` holds the rule's decision on entry (its means are kept); returns
// whether the slate was drawn uniformly. REQUIRES 0 <= epsilon < 1, 1 <= slate_size <= K.
// With `every`, also writes every candidate's probability of being in the slate.
bool ServeBaseline(double epsilon, int baseline, int slate_size, Rng& coin, ScoredSlate* scored,
                   Eigen::VectorXd* every = nullptr);

// The record of a single-arm decision: `chosen` (a candidate index) was logged with
// `propensity`; `mean` holds every candidate's prediction; `baseline` the baseline candidate or
// -1 (then the first). `off_policy`: fill the targets (the decision had evaluation exploration).
EvaluationRecord MakeEvaluationRecord(const Eigen::VectorXd& mean, int chosen, double propensity,
                                      bool explored, int baseline, bool off_policy);
// Appends kModelTarget to a record with the off-policy targets: `rule` holds every candidate's
// probability under the model's own rule (MixUniformShare's `every` at epsilon 0).
void AddModelTarget(const Eigen::VectorXd& mean, const Eigen::VectorXd& rule, int chosen,
                    EvaluationRecord* record);

struct ValueInterval {
  double estimate = 0.0;
  double lower = 0.0;
  double upper = 0.0;
};

struct PolicyValue {
  EvaluatedPolicy policy = EvaluatedPolicy::kDeployed;
  int64_t decisions = 0;  // decisions the estimates average over
  // Kish's effective sample size of the importance weights, (sum w)^2 / sum w^2.
  double effective_sample_size = 0.0;
  ValueInterval ips, snips, dr;
  // Whether the estimates mean something: at least kMinEffectiveSampleSize effective decisions
  // (below that, one or two decisions with a large weight decide the estimate and its interval
  // is far too narrow).
  bool valid = false;
};
inline constexpr double kMinEffectiveSampleSize = 10.0;

// Running sums of one target's estimators.
struct EstimatorSums {
  int64_t n = 0;
  double ips = 0.0, ips2 = 0.0;  // sum of w r and of its square
  double dr = 0.0, dr2 = 0.0;    // sum of the DR terms and of their squares
  double w = 0.0, w2 = 0.0;      // sum of w and of w^2
  double w2r = 0.0, w2r2 = 0.0;  // sum of w^2 r and of w^2 r^2 (SNIPS' delta method)
  // The largest weight any decision could have given this target (its largest probability
  // over the logging probability, taken as the logged arm's), and the rewards' range: the
  // extra decision of the IPS and SNIPS bounds.
  double weight_bound = 0.0;
  double reward_min = 0.0, reward_max = 0.0;

  // `weight_bound`: the largest weight this decision could have given the target.
  void Add(double weight, double reward, double dr_term, double weight_bound);
  PolicyValue Value(EvaluatedPolicy policy) const;
};

// A model's off-policy evaluation: every target's sums, fed with each reward the model
// observes. Deterministic in the order of the rewards, so that replaying a
// log rebuilds it exactly.
class PolicyEvaluator {
 public:
  // A reward of a decision with a record: every target. Without one (a slate's arm, a decision
  // logged before records existed), only the deployed policy, whose weight is 1 anyway. A reward
  // that would make a sum overflow is left out (it cannot be told from infinity).
  void Add(const EvaluationRecord& record, double reward);
  void AddOnPolicy(double reward);
  std::vector<PolicyValue> Values() const;
  // The model's own policy (kModelTarget), from the decisions that carried it; none when no
  // such decision has had a reward. Its `policy` field says kDeployed: callers name it.
  std::optional<PolicyValue> OwnValue() const;
  int64_t explored() const { return explored_; }

  void Save(storage::Encoder* out) const;
  // `with_bounds`: the coding has each target's weight bound and reward range (state version 9
  // on). Without (version 8), they start empty and grow with the decisions that follow. The
  // own policy's sums are coded from state version 11 on; before, they start empty.
  bool Load(storage::Decoder* in, bool with_bounds = true);
  bool operator==(const PolicyEvaluator& o) const;

 private:
  std::array<EstimatorSums, kEvaluatorTargets> sums_{};  // the own policy's last
  int64_t explored_ = 0;  // of the decisions added, drawn by the uniform share
};

// The record's coding, for the log and the snapshot's ledger.
void PutEvaluationRecord(storage::Encoder* out, const EvaluationRecord& record);
bool GetEvaluationRecord(storage::Decoder* in, EvaluationRecord* record);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_POLICY_EVALUATION_H_
