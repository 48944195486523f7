// The two steps every policy goes through, written once and used by the model (what the server
// serves, core/model/) and by the simulator's runner (sim/runner.cc), so that what the simulator
// measures is what the server serves:
//  * setting up a decision: its rule, exploration width and random streams, from what the
//    configuration fixes (DecisionSetup; the model's options make one with DecisionSetupOf,
//    core/learner/learner_factory.h);
//  * deciding: the candidates' joint points, the posterior at them, the drifting baseline added
//    to every mean, and a slate by the selection rule (core/policy/selection.h);
//  * learning: one reward at one point, with the drifting baseline taken out first
//    (core/learner/baseline_tracker.h).
#ifndef GRAPHBANDIT_CORE_POLICY_DECISION_STEP_H_
#define GRAPHBANDIT_CORE_POLICY_DECISION_STEP_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/base/random.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/baseline_tracker.h"
#include "core/learner/posterior.h"
#include "core/policy/selection.h"

namespace graphbandit {

// How a state turns scores into a slate.
struct DecisionRule {
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;  // beta (UCB) or nu (Thompson sampling)
  double width = 1.0;        // multiplies exploration (ExplorationWidthFor; 1: the stddev)
  double baseline = 0.0;     // the drifting baseline, added to every mean
  // kSampledParameter only.
  PropensityRule propensity = PropensityRule::kMultinomial;
  int propensity_draws = kDefaultPropensityDraws;  // M
};

// What a policy's configuration fixes about every decision it makes: the selection rule, its
// exploration weight, how the width follows the learner's state, and the propensity settings.
struct DecisionSetup {
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;
  ExplorationWidth width = ExplorationWidth::kStddev;
  IndexSchedule index_schedule;  // kGpUcbTheorem and kBayesUcb widths
  PropensityRule propensity = PropensityRule::kMultinomial;
  int propensity_draws = kDefaultPropensityDraws;
};

// The width multiplier once `learner` has learned `rewards_learned` rewards: 1 for the stddev,
// else ExplorationWidthFor with the learner's information gain and mean norm (AMM) or the round
// (the index schedules).
double ExplorationWidthOf(const DecisionSetup& setup, const Learner& learner,
                          int64_t rewards_learned);

// The rule of one decision: the setup's, at this width and drifting baseline.
DecisionRule RuleOf(const DecisionSetup& setup, double width, double baseline);

// The random streams of decision `event_id` by a policy seeded with `seed`: the one its draws and
// tie-breaks consume, and the coin of its evaluation share (core/policy/evaluation.h). Functions
// of the id, so that a retried or replicated decision draws the same.
Rng DecisionStream(absl::string_view event_id, uint64_t seed);
Rng EvaluationCoin(absl::string_view event_id, uint64_t seed);

// Writes the learner's joint point of each candidate into the columns of *points:
// scaling.Apply(context, arms[i]), then (with `intercept`) a trailing constant 1.
// REQUIRES: context has scaling.context_dim values and every arm scaling.arm_dim.
void CandidatePoints(const FeatureScaling& scaling, const double* context,
                     absl::Span<const double* const> arms, bool intercept, Eigen::MatrixXd* points);

struct ScoredSlate {
  Eigen::VectorXd mean;             // per candidate, baseline included
  Eigen::VectorXd stddev;           // per candidate
  std::vector<RankedChoice> slate;  // best first
  // kSampledParameter: every candidate's probability of being the chosen one (sums to 1);
  // empty for the other rules.
  Eigen::VectorXd propensities;
};

// Scores the candidate points for `user` and chooses `slate_size` of them (consuming `rng` as
// SelectSlate does). Fails with INTERNAL when the posterior produces a non-finite value, before
// any choice is made. kSampledParameter decisions choose one arm (slate_size 1, else
// INVALID_ARGUMENT), need a scorer that samples parameters (else INTERNAL), and fill
// out->propensities; the chosen arm's score is its sampled value (kOwnDraw) or its probability
// (kMultinomial).
absl::Status DecideSlate(const Scorer& scorer, int32_t user, const Eigen::MatrixXd& points,
                         const DecisionRule& rule, int slate_size, Rng& rng, bool probabilities,
                         ScoredSlate* out);

// Learns `reward` at `point` for `user` (a registered index): with the baseline tracker on, the
// learner's mean at the point before learning is its one-step prediction; the tracker's target
// is what the learner observes, and the tracker moves only when the learner accepted it.
absl::Status LearnReward(Learner& learner, BaselineTracker& baseline, int32_t user,
                         const Eigen::Ref<const Eigen::VectorXd>& point, double reward);

// Learns a batch of rewards at once (Learner::ObserveBatch): users[i], points[i] and rewards[i]
// in order. Each reward's baseline prediction is the learner's mean at its point before the
// batch; the tracker moves through the batch in order, as it does one reward at a time, and
// only if the learner accepted the batch. (The baseline predictions come from MeanBatch, which
// may round differently from LearnReward's Mean.)
absl::Status LearnRewards(Learner& learner, BaselineTracker& baseline,
                          const std::vector<int32_t>& users,
                          const std::vector<Eigen::VectorXd>& points,
                          const std::vector<double>& rewards);

// Learns `reward` for candidate `chosen` of a decision whose candidates' points are the columns
// of `points`, chosen with `propensities` (a learner that LearnsFromDecisions). No baseline
// tracker: such learners are built to be immune to an arm-independent baseline.
absl::Status LearnDecision(Learner& learner, int32_t user, const Eigen::MatrixXd& points,
                           const Eigen::VectorXd& propensities, int chosen, double reward);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_POLICY_DECISION_STEP_H_
