#include "core/learner/exact_gp_posterior.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/storage/state_coding.h"

namespace graphbandit {
namespace {

void ScoreExact(const MultiUserKernel& kernel, const Eigen::Ref<const Eigen::MatrixXd>& history_x,
                const std::vector<int32_t>& history_users,
                const Eigen::Ref<const Eigen::MatrixXd>& chol, const Eigen::VectorXd& alpha,
                int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                Eigen::VectorXd* mean, Eigen::VectorXd* stddev, double prior_mean) {
  const Eigen::VectorXd prior = kernel.Diagonal(user, points);
  if (history_x.cols() == 0) {
    *mean = Eigen::VectorXd::Constant(points.cols(), prior_mean);
    *stddev = prior.cwiseMax(0.0).cwiseSqrt();
    return;
  }
  Eigen::MatrixXd k;
  kernel.CrossForUser(history_x, history_users, user, points, &k);
  mean->noalias() = k.transpose() * alpha;
  if (prior_mean != 0.0) mean->array() += prior_mean;
  chol.triangularView<Eigen::Lower>().solveInPlace(k);
  *stddev =
      (prior.array() - k.colwise().squaredNorm().transpose().array()).cwiseMax(0.0).sqrt().matrix();
}

}  // namespace

class ExactGpPosterior::FrozenScorer final : public Scorer {
 public:
  FrozenScorer(MultiUserKernel kernel, Eigen::MatrixXd history_x,
               std::vector<int32_t> history_users, Eigen::MatrixXd chol, Eigen::VectorXd alpha,
               double prior_mean)
      : kernel_(std::move(kernel)),
        prior_mean_(prior_mean),
        history_x_(std::move(history_x)),
        history_users_(std::move(history_users)),
        chol_(std::move(chol)),
        alpha_(std::move(alpha)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    ScoreExact(kernel_, history_x_, history_users_, chol_, alpha_, user, points, mean, stddev,
               prior_mean_);
  }
  // Every retained observation is a representer point, weighted by alpha.
  bool ExplainMean(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point, int top,
                   MeanExplanation* out) const override {
    *out = ExplainRepresenterMean(kernel_, history_x_, history_users_, alpha_, prior_mean_, user,
                                  point, top);
    return true;
  }

 private:
  MultiUserKernel kernel_;
  double prior_mean_;
  Eigen::MatrixXd history_x_;
  std::vector<int32_t> history_users_;
  Eigen::MatrixXd chol_;
  Eigen::VectorXd alpha_;
};

ExactGpPosterior::ExactGpPosterior(int dim, const ArmKernel& arm,
                                   std::shared_ptr<const UserKernel> users, double ridge,
                                   double prior_mean, double user_variance)
    : dim_(dim),
      kernel_(arm, std::move(users), user_variance),
      ridge_(ridge),
      prior_mean_(prior_mean),
      history_x_(dim) {}

const Eigen::VectorXd& ExactGpPosterior::Alpha() const {
  if (alpha_dirty_) {
    alpha_ = history_size() > 0 ? chol_.Solve((Eigen::Map<const Eigen::VectorXd>(
                                                   history_rewards_.data(), history_rewards_.size())
                                                   .array() -
                                               prior_mean_)
                                                  .matrix())
                                : Eigen::VectorXd();
    alpha_dirty_ = false;
  }
  return alpha_;
}

void ExactGpPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                             Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  ScoreExact(kernel_, history_x_.view(), history_users_, chol_.matrix(), Alpha(), user, points,
             mean, stddev, prior_mean_);
}

absl::Status ExactGpPosterior::Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                       double reward) {
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  Eigen::MatrixXd border;
  kernel_.CrossForUser(history_x_.view(), history_users_, user, point, &border);
  const double k_ss = kernel_.Diagonal(user, point)(0);
  const double corner = k_ss + ridge_;
  // Posterior variance of the new point before it is added, for the log-det recursion (P4).
  Eigen::VectorXd projected = border.col(0);
  chol_.ForwardSolveInPlace(projected);
  const double variance = std::max(k_ss - projected.squaredNorm(), 0.0);
  absl::Status status = chol_.Append(border.col(0), corner);
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("exact GP factor: ", status.message()));
  }
  log_det_gain_ += std::log1p(variance / ridge_);
  history_x_.Append(point);
  history_users_.push_back(user);
  history_rewards_.push_back(reward);
  alpha_dirty_ = true;
  return absl::OkStatus();
}

absl::Status ExactGpPosterior::SetGraph(const UserGraph& /*graph*/,
                                        std::shared_ptr<const UserKernel> users) {
  kernel_.set_users(std::move(users));
  return Refactor();
}

absl::Status ExactGpPosterior::SetRidge(double ridge) {
  if (!(ridge > 0.0) || !std::isfinite(ridge)) {
    return absl::InvalidArgumentError(absl::StrFormat("ridge must be > 0, got %g", ridge));
  }
  ridge_ = ridge;
  return Refactor();
}

absl::Status ExactGpPosterior::Refactor() {
  alpha_dirty_ = true;
  const int64_t t = history_size();
  if (t == 0) {
    chol_.Clear();
    log_det_gain_ = 0.0;
    return absl::OkStatus();
  }
  Eigen::MatrixXd gram;
  kernel_.Cross(history_x_.view(), history_users_, history_x_.view(), history_users_.data(), &gram);
  gram.diagonal().array() += ridge_;
  absl::Status status = chol_.Reset(gram);
  if (!status.ok()) return status;
  // log det(I + K/lambda) = log det(K + lambda I) - t log lambda.
  log_det_gain_ = chol_.LogDeterminant() - static_cast<double>(t) * std::log(ridge_);
  return absl::OkStatus();
}

std::shared_ptr<const Scorer> ExactGpPosterior::Freeze() const {
  return std::make_shared<FrozenScorer>(kernel_, Eigen::MatrixXd(history_x_.view()), history_users_,
                                        Eigen::MatrixXd(chol_.matrix()), Alpha(), prior_mean_);
}

double ExactGpPosterior::MeanNormSquared() const {
  if (history_size() == 0) return 0.0;
  const Eigen::VectorXd& a = Alpha();
  const Eigen::VectorXd centred =
      Eigen::Map<const Eigen::VectorXd>(history_rewards_.data(), history_rewards_.size()).array() -
      prior_mean_;
  return std::max(0.0, a.dot(centred) - ridge_ * a.squaredNorm());
}

FitData ExactGpPosterior::SpreadObservations(int64_t max) const {
  FitData data;
  const std::vector<int64_t> indices = SpreadIndices(history_size(), max);
  const int64_t n = static_cast<int64_t>(indices.size());
  data.x.resize(dim_, n);
  data.users.resize(n);
  data.y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    data.x.col(i) = history_x_.col(indices[i]);
    data.users[i] = history_users_[indices[i]];
    data.y(i) = history_rewards_[indices[i]];
  }
  return data;
}

absl::Status ExactGpPosterior::Refit(const LearnerRefit& refit) {
  if (absl::Status status = CheckRefit(refit, dim_, /*kors=*/false); !status.ok()) return status;
  if (refit.rescale.size() > 0) history_x_.ScaleRows(refit.rescale);
  kernel_ = MultiUserKernel(refit.arm, refit.users, refit.user_variance);
  ridge_ = refit.ridge;
  prior_mean_ = refit.prior_mean;
  return Refactor();
}

// Payload, version 1: columns history_x, users history_users, doubles history_rewards,
// cholesky chol (of K_t + lambda I), double log_det_gain, double ridge (SetRidge changes it).
// Not stored: alpha = (K_t + lambda I)^-1 y, recomputed lazily from the factor and the rewards
// (bit-identically).
namespace {
constexpr uint8_t kExactGpStateVersion = 1;
}  // namespace

void ExactGpPosterior::SaveState(storage::Encoder* out) const {
  storage::Encoder s;
  PutColumns(&s, history_x_);
  PutUsers(&s, history_users_);
  PutDoubleVector(&s, history_rewards_);
  PutCholesky(&s, chol_);
  s.PutDouble(log_det_gain_);
  s.PutDouble(ridge_);
  PutStateFrame(out, LearnerStateTag::kExactGp, kExactGpStateVersion, s.data());
}

absl::Status ExactGpPosterior::LoadState(storage::Decoder* in) {
  std::string payload;
  if (absl::Status status =
          GetStateFrame(in, LearnerStateTag::kExactGp, kExactGpStateVersion, &payload);
      !status.ok()) {
    return status;
  }
  storage::Decoder d(payload);
  const auto malformed = [](absl::string_view what) { return MalformedState("exact GP", what); };

  // Decoded into locals and committed at the end: on failure the learner is unchanged.
  GrowableColumns history_x(dim_);
  std::vector<int32_t> history_users;
  std::vector<double> history_rewards;
  if (const char* bad = GetPointHistory(&d, &history_x, &history_users, &history_rewards)) {
    return malformed(bad);
  }
  const int64_t t = history_x.cols();
  // The factor grows with the history: its storage never exceeds max(8, 2 t).
  CholeskyFactor chol;
  if (!GetCholesky(&d, std::max<int64_t>(8, 2 * t), &chol) || chol.size() != t) {
    return malformed("factor");
  }
  double log_det_gain = 0.0, ridge = 0.0;
  if (!d.GetDouble(&log_det_gain) || !d.GetDouble(&ridge)) return malformed("truncated");
  if (!(ridge > 0.0) || !std::isfinite(ridge)) return malformed("ridge");
  if (!d.done()) return malformed("trailing bytes");

  history_x_ = std::move(history_x);
  history_users_ = std::move(history_users);
  history_rewards_ = std::move(history_rewards);
  chol_ = std::move(chol);
  log_det_gain_ = log_det_gain;
  ridge_ = ridge;
  alpha_.resize(0);
  alpha_dirty_ = true;
  return absl::OkStatus();
}

}  // namespace graphbandit
