#include "core/learner/confidence_bound_posterior.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"

namespace graphbandit {

absl::string_view ConfidenceBoundName(ConfidenceBound bound) {
  switch (bound) {
    case ConfidenceBound::kTuned:
      return "TUNED";
    case ConfidenceBound::kAmm:
      return "AMM";
    case ConfidenceBound::kDmm:
      return "DMM";
    case ConfidenceBound::kAyGpUcb:
      return "AY_GP_UCB";
    case ConfidenceBound::kIgpUcb:
      return "IGP_UCB";
  }
  return "UNKNOWN";
}

absl::Status ConfidenceBoundOptions::Validate() const {
  if (bound == ConfidenceBound::kTuned) {
    return absl::InvalidArgumentError("a confidence-bound learner needs a bound, not TUNED");
  }
  for (auto [value, name] : {std::pair<double, const char*>{noise_std, "noise_std"},
                             {norm_bound, "norm_bound"},
                             {mixture, "mixture"},
                             {igp_eta, "igp_eta"},
                             {delta, "delta"}}) {
    if (!(value > 0.0) || !std::isfinite(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("confidence_bound.%s must be a finite number > 0, got %g", name, value));
    }
  }
  if (!(delta < 1.0)) {
    return absl::InvalidArgumentError("confidence_bound.delta must be below 1");
  }
  return absl::OkStatus();
}

std::vector<double> ConfidenceBoundOptions::Ridges() const {
  const double a_c = noise_std * noise_std / mixture;
  switch (bound) {
    case ConfidenceBound::kDmm:
      return {a_c, 0.1 * a_c, 0.3 * a_c, 3.0 * a_c, 10.0 * a_c};
    case ConfidenceBound::kIgpUcb:
      return {1.0 + igp_eta};
    default:
      return {a_c};
  }
}

void CombineBounds(const ConfidenceBoundOptions& o, int64_t observations,
                   const std::vector<RidgeStatistics>& statistics,
                   const std::vector<Eigen::VectorXd>& means,
                   const std::vector<Eigen::VectorXd>& stddevs, Eigen::VectorXd* upper) {
  const double sigma2 = o.noise_std * o.noise_std;
  const double log_inverse_delta = std::log(1.0 / o.delta);
  const double b2 = o.norm_bound * o.norm_bound;
  switch (o.bound) {
    case ConfidenceBound::kAyGpUcb: {
      const RidgeStatistics& s = statistics[0];
      const double width = (o.noise_std * std::sqrt(s.log_det + 2.0 * log_inverse_delta) +
                            std::sqrt(s.ridge) * o.norm_bound) /
                           std::sqrt(s.ridge);
      *upper = means[0] + width * stddevs[0];
      return;
    }
    case ConfidenceBound::kIgpUcb: {
      const RidgeStatistics& s = statistics[0];
      const double width =
          o.noise_std * std::sqrt(s.log_det + static_cast<double>(observations) * o.igp_eta +
                                  2.0 * log_inverse_delta) +
          o.norm_bound;
      *upper = means[0] + width * stddevs[0];
      return;
    }
    default:
      break;
  }
  // AMM and DMM share R^2 (of a_c, the first ridge); each ridge a has its own Rt(a).
  const RidgeStatistics& c = statistics[0];
  const double r2 = c.ridge * c.quadratic + sigma2 * c.log_det + 2.0 * sigma2 * log_inverse_delta;
  const size_t used = o.bound == ConfidenceBound::kDmm ? statistics.size() : 1;
  upper->setConstant(means[0].size(), std::numeric_limits<double>::infinity());
  for (size_t k = 0; k < used; ++k) {
    const RidgeStatistics& s = statistics[k];
    const double rt2 = std::max(0.0, r2 + s.ridge * b2 - s.ridge * s.quadratic);
    const double width = std::sqrt(rt2 / s.ridge);
    *upper = upper->cwiseMin(means[k] + width * stddevs[k]);
  }
}

class ConfidenceBoundPosterior::FrozenScorer final : public Scorer {
 public:
  FrozenScorer(ConfidenceBoundOptions options, int64_t observations,
               std::vector<RidgeStatistics> statistics,
               std::vector<std::shared_ptr<const Scorer>> scorers)
      : options_(options),
        observations_(observations),
        statistics_(std::move(statistics)),
        scorers_(std::move(scorers)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    std::vector<Eigen::VectorXd> means(scorers_.size()), stddevs(scorers_.size());
    for (size_t k = 0; k < scorers_.size(); ++k) {
      scorers_[k]->Score(user, points, &means[k], &stddevs[k]);
    }
    Eigen::VectorXd upper;
    CombineBounds(options_, observations_, statistics_, means, stddevs, &upper);
    *mean = means[0];
    *stddev = upper - means[0];
  }
  // The mean is the first posterior's.
  bool ExplainMean(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point, int top,
                   MeanExplanation* out) const override {
    return scorers_[0]->ExplainMean(user, point, top, out);
  }

 private:
  ConfidenceBoundOptions options_;
  int64_t observations_;
  std::vector<RidgeStatistics> statistics_;
  std::vector<std::shared_ptr<const Scorer>> scorers_;
};

ConfidenceBoundPosterior::ConfidenceBoundPosterior(int dim, const ArmKernel& arm,
                                                   std::shared_ptr<const UserKernel> users,
                                                   const ConfidenceBoundOptions& options)
    : options_(options) {
  for (double ridge : options.Ridges()) {
    posteriors_.push_back(std::make_unique<ExactGpPosterior>(dim, arm, users, ridge));
  }
}

std::vector<RidgeStatistics> ConfidenceBoundPosterior::Statistics() const {
  std::vector<RidgeStatistics> out;
  for (const auto& p : posteriors_) {
    RidgeStatistics s;
    s.ridge = p->ridge();
    s.log_det = p->LogDetGain();
    if (p->history_size() > 0) {
      s.quadratic = p->alpha().dot(Eigen::Map<const Eigen::VectorXd>(
          p->history_rewards().data(), static_cast<Eigen::Index>(p->history_rewards().size())));
    }
    out.push_back(s);
  }
  return out;
}

void ConfidenceBoundPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                                     Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  std::vector<Eigen::VectorXd> means(posteriors_.size()), stddevs(posteriors_.size());
  for (size_t k = 0; k < posteriors_.size(); ++k) {
    posteriors_[k]->Score(user, points, &means[k], &stddevs[k]);
  }
  Eigen::VectorXd upper;
  CombineBounds(options_, history_size(), Statistics(), means, stddevs, &upper);
  *mean = means[0];
  *stddev = upper - means[0];
}

absl::Status ConfidenceBoundPosterior::Observe(int32_t user,
                                               const Eigen::Ref<const Eigen::VectorXd>& point,
                                               double reward) {
  // The first refuses what all would refuse, before any has changed.
  if (absl::Status s = posteriors_[0]->Observe(user, point, reward); !s.ok()) return s;
  for (size_t k = 1; k < posteriors_.size(); ++k) {
    if (absl::Status s = posteriors_[k]->Observe(user, point, reward); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ConfidenceBoundPosterior::SetGraph(const UserGraph& graph,
                                                std::shared_ptr<const UserKernel> users) {
  for (auto& p : posteriors_) {
    if (absl::Status s = p->SetGraph(graph, users); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::shared_ptr<const Scorer> ConfidenceBoundPosterior::Freeze() const {
  std::vector<std::shared_ptr<const Scorer>> scorers;
  for (const auto& p : posteriors_) scorers.push_back(p->Freeze());
  return std::make_shared<FrozenScorer>(options_, history_size(), Statistics(), std::move(scorers));
}

void ConfidenceBoundPosterior::SaveState(storage::Encoder* out) const {
  for (const auto& p : posteriors_) p->SaveState(out);
}

absl::Status ConfidenceBoundPosterior::LoadState(storage::Decoder* in) {
  for (auto& p : posteriors_) {
    if (absl::Status s = p->LoadState(in); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
