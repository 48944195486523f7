// Offline evaluation of candidate model configurations on a logged history (sim/logged_history.h):
// what graphbandit-replay reports. Each candidate is built as the simulator builds a policy
// (sim/policy_spec.h: the model's own learner factory, scaling, rule and refits) and replayed
// through the history twice:
//
//  * Rejection-sampling replay (Li, Chu, Langford and Wang, "Unbiased offline evaluation of
//    contextual-bandit-based news article recommendation algorithms", WSDM 2011), on the
//    decisions the uniform evaluation share drew: the candidate decides each in log order; when
//    it chooses the logged arm, it learns the logged reward and the reward counts toward its
//    value, else the decision is passed over. Because the logged arm was uniform, the kept
//    decisions are what the candidate would have met had it served: the value is unbiased for
//    a candidate that learns as it goes, and about 1 in K decisions is kept.
//  * Off-policy estimates on every decision: the candidate decides (its own evaluation share
//    included), then learns the logged reward, as a challenger would that watches the deployed
//    model. Its probability of the logged arm over the logging probability weighs the reward:
//    IPS, self-normalised IPS and doubly robust (with the candidate's own posterior mean as the
//    reward model), each with a 95% interval (core/policy/evaluation.h). These estimate what
//    its decisions would have earned while it learned from the deployed policy's decisions,
//    which is not quite what it would earn serving.
//
// The logged policy's own value (the mean logged reward) is reported beside them.
#ifndef GRAPHBANDIT_SIM_OFFLINE_REPLAY_H_
#define GRAPHBANDIT_SIM_OFFLINE_REPLAY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model_options.h"
#include "core/policy/evaluation.h"
#include "sim/logged_history.h"

namespace graphbandit::replay {

struct ReplayCandidate {
  std::string name;
  ModelOptions options;  // dimensions and named features are the history's
};

struct CandidateValue {
  std::string name;
  std::string error;  // empty when the replay ran
  // Rejection-sampling replay: uniform decisions seen, those kept, and the kept rewards' mean.
  int64_t uniform_decisions = 0;
  int64_t kept = 0;
  ValueInterval replay;
  // Off-policy estimates over every decision (ips, snips, dr; valid as in PolicyValue).
  PolicyValue off_policy;
};

struct ReplayReport {
  std::string history;  // DescribeHistory
  int64_t decisions = 0;
  int64_t uniform_decisions = 0;
  ValueInterval logged;  // the logged rewards' mean
  std::vector<CandidateValue> candidates;
};

// Replays every candidate (see the top of this file); `seed` seeds the candidates' randomness.
ReplayReport Replay(const LoggedHistory& history, const std::vector<ReplayCandidate>& candidates,
                    uint64_t seed);

std::string FormatTable(const ReplayReport& report);
std::string FormatJson(const ReplayReport& report);
// A chart of every value with its interval.
std::string FormatSvg(const ReplayReport& report);

}  // namespace graphbandit::replay

#endif  // GRAPHBANDIT_SIM_OFFLINE_REPLAY_H_
