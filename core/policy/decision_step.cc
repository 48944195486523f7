#include "core/policy/decision_step.h"

namespace graphbandit {

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

absl::Status DecideSlate(const Scorer& scorer, int32_t user, const Eigen::MatrixXd& points,
                         const DecisionRule& rule, int slate_size, Rng& rng, bool probabilities,
                         ScoredSlate* out) {
  scorer.Score(user, points, &out->mean, &out->stddev);
  // The same shift for every candidate: reported with the means, never changes the ranking's
  // meaning (a drifting baseline is arm-independent).
  if (rule.baseline != 0.0) out->mean.array() += rule.baseline;
  if (!out->mean.allFinite() || !out->stddev.allFinite()) {
    return absl::InternalError("the posterior produced a non-finite score");
  }
  out->slate = SelectSlate(rule.rule, rule.exploration * rule.width, out->mean, out->stddev,
                           slate_size, rng, probabilities);
  return absl::OkStatus();
}

absl::Status LearnReward(Learner& learner, BaselineTracker& baseline, int32_t user,
                         const Eigen::Ref<const Eigen::VectorXd>& point, double reward) {
  double prediction = 0.0;
  if (baseline.enabled()) {
    Eigen::VectorXd mean, stddev;
    learner.Score(user, point, &mean, &stddev);
    prediction = mean(0);
  }
  const double target = baseline.Target(reward);
  absl::Status learned = learner.Observe(user, point, target);
  if (learned.ok()) baseline.Update(target, prediction);
  return learned;
}

}  // namespace graphbandit
