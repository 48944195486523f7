#include "sim/offline_replay.h"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/random.h"
#include "core/policy/decision_step.h"
#include "proto/json.h"
#include "sim/environment.h"
#include "sim/plot_axis.h"
#include "sim/policy_spec.h"
#include "sim/svg_canvas.h"

namespace graphbandit::replay {
namespace {

// The candidates' own random streams, apart from the server's: with the same seed, a candidate
// configured like the logging model would otherwise draw the very coins the server drew, and
// explore exactly where it explored.
constexpr uint64_t kReplayStream = 0x7265706c61792d31ULL;  // "replay-1"

// The history as the simulator's policies see an environment: its users (numbered in order of
// first appearance) and graph, and its dimensions. Rounds come from the history, not from here.
class LoggedEnvironment final : public sim::SimEnvironment {
 public:
  explicit LoggedEnvironment(const LoggedHistory& history) {
    for (const LoggedEvent& event : history.events) Index(event.user);
    for (const EdgeEdit& edge : history.edges) {
      const int a = Index(edge.user_a), b = Index(edge.user_b);
      if (a != b) edges_.push_back({std::min(a, b), std::max(a, b), edge.weight});
    }
    if (!history.events.empty()) {
      context_dim_ = static_cast<int>(history.events[0].context.size());
      arm_dim_ = static_cast<int>(history.events[0].features[0].size());
    }
  }
  std::string name() const override { return "logged history"; }
  int users() const override { return static_cast<int>(users_.size()); }
  const std::vector<sim::Edge>& edges() const override { return edges_; }
  int context_dim() const override { return context_dim_; }
  int arm_dim() const override { return arm_dim_; }
  sim::Round MakeRound(uint64_t) const override { return {}; }
  int32_t UserOf(const std::string& user) const { return users_.at(user); }

 private:
  int Index(const std::string& user) {
    return users_.emplace(user, static_cast<int>(users_.size())).first->second;
  }
  std::map<std::string, int> users_;
  std::vector<sim::Edge> edges_;
  int context_dim_ = 0, arm_dim_ = 0;
};

absl::Status CheckShapes(const LoggedHistory& history) {
  if (history.events.empty()) return absl::OkStatus();
  const size_t context = history.events[0].context.size();
  const size_t arm = history.events[0].features[0].size();
  for (const LoggedEvent& e : history.events) {
    if (e.context.size() != context) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "event %s has %d context values where the first has %d (a model's dimensions are "
          "fixed)",
          e.event_id, e.context.size(), context));
    }
    for (const std::vector<double>& f : e.features) {
      if (f.size() != arm) {
        return absl::InvalidArgumentError(
            absl::StrFormat("event %s has a candidate with %d features where the first has %d",
                            e.event_id, f.size(), arm));
      }
    }
  }
  return absl::OkStatus();
}

// One pass of a candidate through the history. `rejection`: learn only the uniform decisions
// whose logged arm the candidate chose (and count their rewards); else decide and learn every
// decision, adding its off-policy terms to *sums.
absl::Status Pass(const LoggedHistory& history, const LoggedEnvironment& env,
                  const ReplayCandidate& candidate, uint64_t seed, bool rejection,
                  EstimatorSums* sums, int64_t* uniform, int64_t* kept) {
  sim::PolicySpec spec;
  spec.name = candidate.name;
  spec.model = candidate.options;
  spec.model.features = ModelOptions::FeatureOptions{};  // the history's vectors are encoded
  absl::StatusOr<sim::RunPolicy> made =
      sim::MakeRunPolicy(spec, env, static_cast<int64_t>(history.events.size()), seed);
  if (!made.ok()) return made.status();
  sim::RunPolicy& policy = *made;
  const double epsilon = candidate.options.evaluation_epsilon;
  int64_t learned = 0;
  Eigen::MatrixXd points;
  ScoredSlate scored;
  Eigen::VectorXd every;
  std::vector<const double*> arms;
  for (const LoggedEvent& event : history.events) {
    const int n = static_cast<int>(event.ids.size());
    // A decision with one candidate was uniform and chosen by every policy alike: it teaches
    // the rejection replay nothing.
    if (rejection && (!event.explored || n < 2)) continue;
    arms.resize(n);
    for (int k = 0; k < n; ++k) arms[k] = event.features[k].data();
    const int32_t user = policy.pooled ? 0 : env.UserOf(event.user);
    CandidatePoints(policy.scaling, event.context.data(), arms, policy.intercept, &points);
    const DecisionRule rule = sim::DecisionRuleOf(policy, learned);
    Rng rng = DecisionStream(event.event_id, seed ^ kReplayStream);
    if (absl::Status s = DecideSlate(*policy.learner, user, points, rule, 1, rng,
                                     /*probabilities=*/true, &scored);
        !s.ok()) {
      return s;
    }
    Rng coin = EvaluationCoin(event.event_id, seed ^ kReplayStream);
    MixUniformShare(epsilon, rule, 1, coin, rng, &scored, &every);
    const int chosen = scored.slate[0].candidate;
    bool learn = true;
    if (rejection) {
      ++*uniform;
      learn = chosen == event.chosen;
      if (learn) {
        // Kept with probability 1 / K: weighted by K, the kept rewards stay unbiased when K
        // varies (with a fixed K this is their plain mean). No extra decision in the bounds.
        ++*kept;
        sums->Add(static_cast<double>(n), event.reward, event.reward, 0.0);
      }
    } else {
      // The candidate's probability of the logged arm over the logging policy's.
      const double logging = event.probabilities[event.chosen];
      const double weight = every(event.chosen) / logging;
      const double direct = every.dot(scored.mean);
      const double dr = direct + weight * (event.reward - scored.mean(event.chosen));
      // The largest weight this decision could have given: over every arm whose logging
      // probability is known, else the candidate's largest probability over the logged arm's.
      double bound = every.maxCoeff() / logging;
      bool all_known = true;
      for (int k = 0; k < n; ++k) all_known = all_known && event.probabilities[k] > 0.0;
      if (all_known) {
        bound = 0.0;
        for (int k = 0; k < n; ++k) bound = std::max(bound, every(k) / event.probabilities[k]);
      }
      sums->Add(weight, event.reward, dr, bound);
    }
    if (!learn) continue;
    absl::Status s;
    if (policy.learner->LearnsFromDecisions()) {
      Eigen::VectorXd logged(n);
      for (int k = 0; k < n; ++k) {
        logged(k) = rejection ? scored.propensities(k) : event.probabilities[k];
      }
      s = LearnDecision(*policy.learner, user, points, logged, event.chosen, event.reward);
    } else {
      s = LearnReward(*policy.learner, policy.baseline, user, points.col(event.chosen),
                      event.reward);
    }
    if (!s.ok()) return s;
    ++learned;
    if (policy.refitter != nullptr) {
      if (s = policy.refitter->AfterObservation(policy.learner.get(), &policy.scaling); !s.ok()) {
        return s;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

ReplayReport Replay(const LoggedHistory& history, const std::vector<ReplayCandidate>& candidates,
                    uint64_t seed) {
  ReplayReport report;
  report.history = DescribeHistory(history);
  report.decisions = static_cast<int64_t>(history.events.size());
  EstimatorSums logged;
  for (const LoggedEvent& event : history.events) {
    logged.Add(1.0, event.reward, event.reward, 1.0);
    if (event.explored) ++report.uniform_decisions;
  }
  report.logged = logged.Value(EvaluatedPolicy::kDeployed).dr;
  const absl::Status shapes = CheckShapes(history);
  const LoggedEnvironment env(history);
  for (const ReplayCandidate& candidate : candidates) {
    CandidateValue value;
    value.name = candidate.name;
    EstimatorSums replayed, off_policy;
    absl::Status s = shapes;
    if (s.ok()) {
      s = Pass(history, env, candidate, seed, /*rejection=*/true, &replayed,
               &value.uniform_decisions, &value.kept);
    }
    if (s.ok()) s = Pass(history, env, candidate, seed, false, &off_policy, nullptr, nullptr);
    if (!s.ok()) {
      value.error = std::string(s.message());
    } else {
      const PolicyValue kept = replayed.Value(EvaluatedPolicy::kDeployed);
      if (kept.valid) value.replay = kept.snips;  // sum K r / sum K over the kept decisions
      value.off_policy = off_policy.Value(EvaluatedPolicy::kDeployed);
    }
    report.candidates.push_back(std::move(value));
  }
  return report;
}

// ------------------------------------------------------------------------------------------
// Reports.

namespace {

std::string Interval(const ValueInterval& v) {
  return absl::StrFormat("%.4f [%.4f, %.4f]", v.estimate, v.lower, v.upper);
}

constexpr int kMinKept = 10;  // fewer kept decisions: no replay value (as PolicyValue::valid)

}  // namespace

std::string FormatTable(const ReplayReport& report) {
  std::string out = report.history;
  absl::StrAppend(&out, absl::StrFormat("%d decisions, %d drawn uniformly\n\n", report.decisions,
                                        report.uniform_decisions));
  absl::StrAppend(
      &out, absl::StrFormat("%-20s %-30s %s\n", "policy", "estimator", "value [95% interval]"));
  absl::StrAppend(
      &out, absl::StrFormat("%-20s %-30s %s\n", "logged", "mean reward", Interval(report.logged)));
  for (const CandidateValue& c : report.candidates) {
    if (!c.error.empty()) {
      absl::StrAppend(&out, absl::StrFormat("%-20s failed: %s\n", c.name, c.error));
      continue;
    }
    const std::string replay_label =
        absl::StrFormat("replay (%d of %d kept)", c.kept, c.uniform_decisions);
    absl::StrAppend(
        &out, absl::StrFormat("%-20s %-30s %s\n", c.name, replay_label,
                              c.kept >= kMinKept ? Interval(c.replay) : "too few kept decisions"));
    const PolicyValue& v = c.off_policy;
    if (!v.valid) {
      absl::StrAppend(&out, absl::StrFormat("%-20s %-30s effective sample size %.1f: too small\n",
                                            "", "ips/snips/dr", v.effective_sample_size));
      continue;
    }
    absl::StrAppend(&out,
                    absl::StrFormat("%-20s %-30s %s\n", "",
                                    absl::StrFormat("ips (ess %.0f)", v.effective_sample_size),
                                    Interval(v.ips)));
    absl::StrAppend(&out, absl::StrFormat("%-20s %-30s %s\n", "", "snips", Interval(v.snips)));
    absl::StrAppend(&out, absl::StrFormat("%-20s %-30s %s\n", "", "dr", Interval(v.dr)));
  }
  return out;
}

namespace {

json::Value JsonInterval(const ValueInterval& v) {
  return json::Object({{"estimate", json::Number(v.estimate)},
                       {"lower", json::Number(v.lower)},
                       {"upper", json::Number(v.upper)}});
}

}  // namespace

std::string FormatJson(const ReplayReport& report) {
  json::Value candidates = json::List();
  for (const CandidateValue& c : report.candidates) {
    json::Value candidate = json::Object({{"name", json::Text(c.name)}});
    if (!c.error.empty()) {
      json::Set(&candidate, "error", json::Text(c.error));
      json::Append(&candidates, std::move(candidate));
      continue;
    }
    json::Value replay = json::Object({{"uniform_decisions", json::Integer(c.uniform_decisions)},
                                       {"kept", json::Integer(c.kept)}});
    if (c.kept >= kMinKept) json::Set(&replay, "value", JsonInterval(c.replay));
    const PolicyValue& v = c.off_policy;
    json::Value off_policy =
        json::Object({{"decisions", json::Integer(v.decisions)},
                      {"effective_sample_size", json::Number(v.effective_sample_size)},
                      {"valid", json::Bool(v.valid)}});
    if (v.valid) {
      json::Set(&off_policy, "ips", JsonInterval(v.ips));
      json::Set(&off_policy, "snips", JsonInterval(v.snips));
      json::Set(&off_policy, "dr", JsonInterval(v.dr));
    }
    json::Set(&candidate, "replay", std::move(replay));
    json::Set(&candidate, "off_policy", std::move(off_policy));
    json::Append(&candidates, std::move(candidate));
  }
  const json::Value out =
      json::Object({{"decisions", json::Integer(report.decisions)},
                    {"uniform_decisions", json::Integer(report.uniform_decisions)},
                    {"logged", JsonInterval(report.logged)},
                    {"candidates", std::move(candidates)}});
  return json::Print(out) + "\n";
}

std::string FormatSvg(const ReplayReport& report) {
  using sim::report_internal::Frame;
  using sim::report_internal::Svg;
  struct Row {
    std::string label;
    ValueInterval value;
  };
  std::vector<Row> rows = {{"logged: mean reward", report.logged}};
  for (const CandidateValue& c : report.candidates) {
    if (!c.error.empty()) continue;
    if (c.kept >= kMinKept) rows.push_back({absl::StrCat(c.name, ": replay"), c.replay});
    if (c.off_policy.valid) {
      rows.push_back({absl::StrCat(c.name, ": ips"), c.off_policy.ips});
      rows.push_back({absl::StrCat(c.name, ": snips"), c.off_policy.snips});
      rows.push_back({absl::StrCat(c.name, ": dr"), c.off_policy.dr});
    }
  }
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Row& r : rows) {
    lo = std::min(lo, r.value.lower);
    hi = std::max(hi, r.value.upper);
  }
  const sim::Axis axis = sim::NiceAxis(lo, hi, true);
  Frame f;
  f.left = 230;
  Svg svg("graphbandit-replay: policy values", f);
  svg.Heading("Estimated value per decision (95% intervals)",
              absl::StrFormat("%d logged decisions, %d drawn uniformly", report.decisions,
                              report.uniform_decisions));
  const double step = (f.bottom - f.top) / static_cast<double>(rows.size() + 1);
  for (double tick : axis.ticks) {
    const double x = sim::report_internal::MapX(f, axis, tick);
    svg.Line(x, f.top, x, f.bottom, "stroke=\"#dddddd\"");
    svg.Text(x, f.bottom + 18, sim::FormatTick(tick),
             "font-size=\"11\" text-anchor=\"middle\" fill=\"#333333\"");
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const double y = f.top + step * static_cast<double>(i + 1);
    const Row& r = rows[i];
    const char* colour =
        sim::report_internal::Colour(static_cast<int>(i == 0 ? 0 : 1 + (i - 1) / 4));
    svg.Text(f.left - 8, y + 4, r.label, "font-size=\"12\" text-anchor=\"end\" fill=\"#222222\"");
    svg.Line(sim::report_internal::MapX(f, axis, r.value.lower), y,
             sim::report_internal::MapX(f, axis, r.value.upper), y,
             absl::StrCat("stroke=\"", colour, "\" stroke-width=\"3\""));
    const double x = sim::report_internal::MapX(f, axis, r.value.estimate);
    svg.Line(x, y - 6, x, y + 6, absl::StrCat("stroke=\"", colour, "\" stroke-width=\"2\""));
  }
  return svg.Finish();
}

}  // namespace graphbandit::replay
