#include "core/policy/decision_step.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/policy/evaluation.h"

namespace graphbandit {

double ExplorationWidthOf(const DecisionSetup& setup, const Learner& learner,
                          int64_t rewards_learned) {
  if (setup.width == ExplorationWidth::kStddev) return 1.0;
  WidthInputs inputs;
  inputs.schedule = setup.index_schedule;
  inputs.rewards_learned = rewards_learned;
  if (setup.width == ExplorationWidth::kAmm) {
    inputs.information_gain = learner.InformationGain();
    inputs.mean_norm_squared = learner.MeanNormSquared();
  }
  return ExplorationWidthFor(setup.width, inputs);
}

DecisionRule RuleOf(const DecisionSetup& setup, double width, double baseline) {
  DecisionRule rule;
  rule.rule = setup.rule;
  rule.exploration = setup.exploration;
  rule.width = width;
  rule.baseline = baseline;
  rule.propensity = setup.propensity;
  rule.propensity_draws = setup.propensity_draws;
  return rule;
}

Rng DecisionStream(absl::string_view event_id, uint64_t seed) {
  return Rng(StableHash(event_id, seed));
}

Rng EvaluationCoin(absl::string_view event_id, uint64_t seed) {
  return Rng(StableHash(event_id, seed ^ kEvaluationStream));
}

void CandidatePoints(const FeatureScaling& scaling, const double* context,
                     absl::Span<const double* const> arms, bool intercept,
                     Eigen::MatrixXd* points) {
  const int n = static_cast<int>(arms.size());
  points->resize(scaling.joint_dim() + (intercept ? 1 : 0), n);
  for (int i = 0; i < n; ++i) {
    scaling.Apply(context, arms[i], points->col(i).data());
    if (intercept) (*points)(points->rows() - 1, i) = 1.0;
  }
}

namespace {

// Index of the largest value of `row`, exact ties broken uniformly with `rng`.
int ArgmaxWithTies(const Eigen::Ref<const Eigen::RowVectorXd>& row, Rng& rng) {
  int best = 0, ties = 1;
  for (Eigen::Index i = 1; i < row.size(); ++i) {
    if (row(i) > row(best)) {
      best = static_cast<int>(i);
      ties = 1;
    } else if (row(i) == row(best) && rng.UniformInt(static_cast<uint64_t>(++ties)) == 0) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

// pi_hat over the rows of `values`: each row's maximum counts 1, split evenly between exact ties
// (the probability of the uniform tie-break).
Eigen::VectorXd WinFrequencies(const Eigen::MatrixXd& values) {
  Eigen::VectorXd pi = Eigen::VectorXd::Zero(values.cols());
  for (Eigen::Index r = 0; r < values.rows(); ++r) {
    const double best = values.row(r).maxCoeff();
    const double ties = static_cast<double>((values.row(r).array() == best).count());
    for (Eigen::Index i = 0; i < values.cols(); ++i) {
      if (values(r, i) == best) pi(i) += 1.0 / ties;
    }
  }
  return pi / static_cast<double>(values.rows());
}

absl::Status DecideBySampledParameter(const Scorer& scorer, int32_t user,
                                      const Eigen::MatrixXd& points, const DecisionRule& rule,
                                      int slate_size, Rng& rng, ScoredSlate* out) {
  if (slate_size != 1) {
    return absl::InvalidArgumentError(
        "this policy chooses one arm per decision (slate_size must be 1): it learns from the "
        "probability of each candidate being the one chosen");
  }
  if (!scorer.SamplesParameters()) {
    return absl::InternalError("the policy's scorer cannot sample parameters");
  }
  const int draws = std::max(1, rule.propensity_draws);
  const double scale = rule.exploration * rule.width;
  Eigen::MatrixXd values;
  RankedChoice choice;
  if (rule.propensity == PropensityRule::kOwnDraw) {
    scorer.SampleValues(user, points, scale, 1, rng, &values);
    choice.candidate = ArgmaxWithTies(values.row(0), rng);
    choice.score = values(0, choice.candidate) + rule.baseline;
    scorer.SampleValues(user, points, scale, draws, rng, &values);
    out->propensities = WinFrequencies(values);
  } else {
    scorer.SampleValues(user, points, scale, draws, rng, &values);
    out->propensities = WinFrequencies(values);
    const double u = rng.Uniform();
    double cumulative = 0.0;
    choice.candidate = -1;
    for (Eigen::Index i = 0; i < out->propensities.size(); ++i) {
      if (out->propensities(i) <= 0.0) continue;
      cumulative += out->propensities(i);
      choice.candidate = static_cast<int>(i);  // the last candidate with mass absorbs rounding
      if (u < cumulative) break;
    }
    choice.score = out->propensities(choice.candidate);
  }
  if (!values.allFinite()) return absl::InternalError("the posterior produced a non-finite draw");
  choice.probability = out->propensities(choice.candidate);
  out->slate.assign(1, choice);
  return absl::OkStatus();
}

}  // namespace

absl::Status DecideSlate(const Scorer& scorer, int32_t user, const Eigen::MatrixXd& points,
                         const DecisionRule& rule, int slate_size, Rng& rng, bool probabilities,
                         ScoredSlate* out) {
  if (slate_size < 1 || slate_size > points.cols()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("slate_size %d must be between 1 and the number of candidates, %d",
                        slate_size, points.cols()));
  }
  scorer.Score(user, points, &out->mean, &out->stddev);
  // The same shift for every candidate: reported with the means, never changes the ranking's
  // meaning (a drifting baseline is arm-independent).
  if (rule.baseline != 0.0) out->mean.array() += rule.baseline;
  if (!out->mean.allFinite() || !out->stddev.allFinite()) {
    return absl::InternalError("the posterior produced a non-finite score");
  }
  out->propensities.resize(0);
  if (rule.rule == SelectionRule::kSampledParameter) {
    return DecideBySampledParameter(scorer, user, points, rule, slate_size, rng, out);
  }
  out->slate = SelectSlate(rule.rule, rule.exploration * rule.width, out->mean, out->stddev,
                           slate_size, rng, probabilities);
  return absl::OkStatus();
}

absl::Status LearnReward(Learner& learner, BaselineTracker& baseline, int32_t user,
                         const Eigen::Ref<const Eigen::VectorXd>& point, double reward) {
  double prediction = 0.0;
  if (baseline.enabled()) {
    Eigen::VectorXd mean;
    learner.Mean(user, point, &mean);
    prediction = mean(0);
  }
  const double target = baseline.Target(reward);
  absl::Status learned = learner.Observe(user, point, target);
  if (learned.ok()) baseline.Update(target, prediction);
  return learned;
}

absl::Status LearnRewards(Learner& learner, BaselineTracker& baseline,
                          const std::vector<int32_t>& users,
                          const std::vector<Eigen::VectorXd>& points,
                          const std::vector<double>& rewards) {
  const Eigen::Index n = static_cast<Eigen::Index>(users.size());
  if (points.size() != users.size() || rewards.size() != users.size()) {
    return absl::InvalidArgumentError("a batch needs one point and one reward per user");
  }
  if (n == 0) return absl::OkStatus();
  Eigen::MatrixXd x(points[0].size(), n);
  for (Eigen::Index i = 0; i < n; ++i) {
    if (points[i].size() != x.rows()) {
      return absl::InvalidArgumentError("the points of a batch differ in dimension");
    }
    x.col(i) = points[i];
  }
  Eigen::VectorXd predictions = Eigen::VectorXd::Zero(n);
  if (baseline.enabled()) learner.MeanBatch(users, x, &predictions);
  BaselineTracker moved = baseline;
  Eigen::VectorXd targets(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    targets(i) = moved.Target(rewards[i]);
    moved.Update(targets(i), predictions(i));
  }
  absl::Status learned = learner.ObserveBatch(users, x, targets);
  if (learned.ok()) baseline = moved;
  return learned;
}

}  // namespace graphbandit

namespace graphbandit {

absl::Status LearnDecision(Learner& learner, int32_t user, const Eigen::MatrixXd& points,
                           const Eigen::VectorXd& propensities, int chosen, double reward) {
  return learner.ObserveDecision(user, points, propensities, chosen, reward);
}

}  // namespace graphbandit
