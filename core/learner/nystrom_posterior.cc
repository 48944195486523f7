// NystromPosterior's core: scoring, the weights, and learning one observation at a time. The
// rest of the class is in the files beside this one: nystrom_posterior_batch.cc (learning a
// batch), nystrom_posterior_dictionary.cc (KORS admission and dictionary growth),
// nystrom_posterior_refit.cc (re-admission, refits, rebuilds from the history) and
// nystrom_posterior_state.cc (snapshots).
#include "core/learner/nystrom_posterior.h"

#include <algorithm>
#include <cmath>

#include "core/linalg/variance_form.h"

namespace graphbandit {

// The points the regression covers and their squared norms (for the kernel's distances).
struct NystromPosterior::Basis {
  Eigen::MatrixXd x;
  Eigen::VectorXd squared_norms;
  std::vector<int32_t> users;
};

// What a published state scores with: everything shared with the learner, nothing m x m copied
// (core/linalg/variance_form.h).
class NystromPosterior::FrozenScorer final : public Scorer {
 public:
  FrozenScorer(MultiUserKernel kernel, double prior_mean, std::shared_ptr<const Basis> basis,
               VarianceForm::Snapshot form, Eigen::VectorXd weights)
      : kernel_(std::move(kernel)),
        prior_mean_(prior_mean),
        basis_(std::move(basis)),
        form_(std::move(form)),
        weights_(std::move(weights)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    ScoreWithVarianceForm(kernel_, basis_->x, basis_->squared_norms, basis_->users, form_, weights_,
                          prior_mean_, user, points, mean, stddev);
  }
  // The dictionary points in the regression are the representer points.
  bool ExplainMean(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point, int top,
                   MeanExplanation* out) const override {
    *out = ExplainRepresenterMean(kernel_, basis_->x, basis_->users, weights_, prior_mean_, user,
                                  point, top);
    return true;
  }

 private:
  MultiUserKernel kernel_;
  double prior_mean_;
  std::shared_ptr<const Basis> basis_;
  VarianceForm::Snapshot form_;
  Eigen::VectorXd weights_;
};

NystromPosterior::NystromPosterior(int dim, const ArmKernel& arm,
                                   std::shared_ptr<const UserKernel> users,
                                   const NystromOptions& options, double user_variance)
    : dim_(dim),
      kernel_(arm, std::move(users), user_variance),
      options_(options),
      rng_(options.seed),
      history_(dim, options.max_history),
      basis_x_(dim) {}

void NystromPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                             Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  const std::shared_ptr<const Basis> basis = BasisSnapshot();
  ScoreWithVarianceForm(kernel_, basis->x, basis->squared_norms, basis->users, form_.snapshot(),
                        Weights(), options_.prior_mean, user, points, mean, stddev);
}

void NystromPosterior::Mean(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                            Eigen::VectorXd* mean) const {
  const std::shared_ptr<const Basis> basis = BasisSnapshot();
  MeanWithVarianceForm(kernel_, basis->x, basis->squared_norms, basis->users, form_.size(),
                       Weights(), options_.prior_mean, user, points, mean);
}

void NystromPosterior::MeanBatch(const std::vector<int32_t>& users,
                                 const Eigen::Ref<const Eigen::MatrixXd>& points,
                                 Eigen::VectorXd* mean) const {
  const int mr = regression_size();
  if (mr == 0) {
    mean->setConstant(points.cols(), options_.prior_mean);
    return;
  }
  const std::shared_ptr<const Basis> basis = BasisSnapshot();
  Eigen::MatrixXd kz;
  kernel_.Cross(basis->x, basis->users, points, users.data(), &kz);
  mean->noalias() = kz.transpose() * Weights();
  mean->array() += options_.prior_mean;
}

void NystromPosterior::RebuildForm() {
  const int mr = regression_size();
  form_.Rebuild(chol_zz_.matrix().topLeftCorner(mr, mr), chol_m_.matrix(), options_.ridge);
}

bool NystromPosterior::TrackRankOne(const Eigen::Ref<const Eigen::VectorXd>& v, double sign) {
  if (form_.size() == 0) return true;
  const Eigen::VectorXd x = chol_m_.Solve(v);
  return form_.RankOne(x, v.dot(x), options_.ridge, sign);
}

const Eigen::VectorXd& NystromPosterior::Weights() const {
  if (weights_dirty_) {
    weights_ = regression_size() > 0 ? chol_m_.Solve(gamma_) : Eigen::VectorXd();
    weights_dirty_ = false;
  }
  return weights_;
}

Eigen::VectorXd NystromPosterior::DictionaryColumn(int32_t user,
                                                   const Eigen::Ref<const Eigen::VectorXd>& point,
                                                   double* k_ss) const {
  *k_ss = kernel_.Diagonal(user, point)(0);
  Eigen::MatrixXd cross;
  kernel_.CrossForUser(basis_x_.view(), basis_users_, user, point, &cross);
  if (cross.cols() == 0) return Eigen::VectorXd::Zero(dictionary_size());
  return cross.col(0);
}

absl::Status NystromPosterior::Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                       double reward) {
  absl::Status status = ObserveOne(user, point, reward);
  CheckSinglePrecision();
  return status;
}

absl::Status NystromPosterior::ObserveOne(int32_t user,
                                          const Eigen::Ref<const Eigen::VectorXd>& point,
                                          double reward) {
  if (refit_ != nullptr && !refit_->kernel.has_value()) {
    return absl::FailedPreconditionError("a restored refit was not resumed");
  }
  absl::Status status = LearnOne(user, point, reward);
  if (absl::Status s = StepRefit(1); !s.ok() && status.ok()) status = s;
  return status;
}

absl::Status NystromPosterior::LearnOne(int32_t user,
                                        const Eigen::Ref<const Eigen::VectorXd>& point,
                                        double reward) {
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  frozen_.reset();
  double k_ss = 0.0;
  const Eigen::VectorXd kz = DictionaryColumn(user, point, &k_ss);  // every dictionary point
  const int m = static_cast<int>(dictionary_size());
  const int mr = regression_size();  // the points M and Gamma cover (pending ones excluded)

  // KORS decision, on the dictionary as it was before this point (EK Algorithm 2, step 5).
  double p = 1.0;
  if (m > 0 && !force_accept_) {
    Eigen::VectorXd b = kz;
    chol_kors_.ForwardSolveInPlace(b);
    const double r = std::max(k_ss - b.squaredNorm(), 0.0);
    const double tau = KorsLeverage(r, options_.kors_epsilon, options_.kors_mu);
    p = std::min(1.0, options_.kors_gamma * tau);
  }
  // Always draw, so that the stream position depends only on the number of observations.
  const bool accept = rng_.Uniform() < p;
  force_accept_ = false;

  // Learn on the current dictionary (step 6): M += kz kz^T, Gamma += (y - m0) kz.
  bool form_current = true;
  if (mr > 0) {
    form_current = TrackRankOne(kz.head(mr), 1.0);
    chol_m_.RankOneUpdate(kz.head(mr));
    gamma_ += (reward - options_.prior_mean) * kz.head(mr);
  }
  // The points whose rows of M are being computed see this observation as it comes.
  if (scan_.count > 0) ScanObservation(kz, reward, 1.0);
  const int64_t oldest = history_.total() - history_.size();  // absolute index
  HistoryBuffer::Entry evicted;
  const bool evicts = history_.Append(point, user, reward, &evicted);
  if (refit_ != nullptr) RefitObservations(point, &user, &reward);
  if (evicts) {
    ++stats_.evicted;
    // Whether a scan under way counted the evicted observation already.
    const bool scanned = scan_.count > 0 && (oldest < scan_.next || oldest >= scan_.end);
    if (options_.forget_evicted && (mr > 0 || scanned)) {
      // Sliding window: remove the oldest observation exactly (its row on today's dictionary).
      double unused = 0.0;
      const Eigen::VectorXd old = DictionaryColumn(evicted.user, evicted.point, &unused);
      if (scanned) ScanObservation(old, evicted.reward, -1.0);
      if (mr > 0) {
        gamma_ -= (evicted.reward - options_.prior_mean) * old.head(mr);
        form_current = TrackRankOne(old.head(mr), -1.0) && form_current;
        if (!chol_m_.RankOneDowndate(old.head(mr)).ok()) {
          ++stats_.downdate_failures;  // round-off; M is rebuilt from the window instead
          Eigen::MatrixXd kzz;
          kernel_.Cross(basis_x_.view(), basis_users_, basis_x_.view(), basis_users_.data(), &kzz);
          if (absl::Status s = RefactorFromHistory(kzz); !s.ok()) return s;
        }
      }
    }
  }
  weights_dirty_ = true;
  // RefactorFromHistory above rebuilt the form already when it ran.
  if (!form_current || form_.ExactDue() || form_.size() != regression_size()) RebuildForm();

  if (accept) {
    if (absl::Status s = AdmitAccepted(user, point, kz, k_ss, p); !s.ok()) return s;
  }
  if (scan_.count > 0 && options_.spread_growth_scan) {
    AdvanceScan(ScanStep());
    if (scan_.next >= scan_.end) return FinishScan();
  }
  return absl::OkStatus();
}

void NystromPosterior::CheckSinglePrecision() {
  // Every B0 formed or grown is checked before it scores in single precision; folds of
  // corrections (every fold_rank() updates) change B0 by a low-rank term and are checked every
  // kSingleCheckEvery of them.
  if (form_.rebuild_version() == checked_rebuild_ &&
      form_.base_version() - checked_base_ < kSingleCheckEvery) {
    return;
  }
  checked_base_ = form_.base_version();
  checked_rebuild_ = form_.rebuild_version();
  const int mr = form_.size();
  if (!options_.single_precision || mr == 0) {
    form_.set_single(false);
    return;
  }
  constexpr int kProbes = 8;
  const int count = std::min(kProbes, mr);
  std::vector<int32_t> probe_users(count);
  Eigen::MatrixXd probes(dim_, count);
  Eigen::VectorXd k_ss(count);
  for (int i = 0; i < count; ++i) {
    const int j =
        count == 1 ? 0 : static_cast<int>(static_cast<int64_t>(i) * (mr - 1) / (count - 1));
    probes.col(i) = basis_x_.col(j);
    probe_users[i] = basis_users_[j];
    k_ss(i) = kernel_.Diagonal(probe_users[i], probes.col(i))(0);
  }
  const std::vector<int32_t> users(basis_users_.begin(), basis_users_.begin() + mr);
  Eigen::MatrixXd kz;
  kernel_.Cross(basis_x_.view().leftCols(mr), users, probes, probe_users.data(), &kz);
  stats_.single_error = form_.SingleStddevError(kz, k_ss);
  form_.set_single(stats_.single_error <= VarianceForm::kSingleTolerance);
}

double NystromPosterior::InformationGain() const {
  const int mr = regression_size();
  if (mr == 0) return 0.0;
  const double log_det_zz = 2.0 * chol_zz_.matrix().diagonal().head(mr).array().log().sum();
  return std::max(0.0, chol_m_.LogDeterminant() - mr * std::log(options_.ridge) - log_det_zz);
}

double NystromPosterior::MeanNormSquared() const {
  const int mr = regression_size();
  if (mr == 0) return 0.0;
  // w^T K_ZZ w = |L_ZZ^T w|^2 over the points the regression covers.
  const Eigen::MatrixXd factor = chol_zz_.matrix().topLeftCorner(mr, mr);
  const Eigen::VectorXd projected = factor.triangularView<Eigen::Lower>().transpose() * Weights();
  return projected.squaredNorm();
}

FitData NystromPosterior::SpreadObservations(int64_t max) const {
  FitData data;
  const std::vector<int64_t> indices = SpreadIndices(history_.size(), max);
  const int64_t n = static_cast<int64_t>(indices.size());
  data.x.resize(dim_, n);
  data.users.resize(n);
  data.y.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    data.x.col(i) = history_.point(indices[i]);
    data.users[i] = history_.user(indices[i]);
    data.y(i) = history_.reward(indices[i]);
  }
  return data;
}

std::shared_ptr<const NystromPosterior::Basis> NystromPosterior::BasisSnapshot() const {
  if (basis_snapshot_ == nullptr) {
    // The points the regression covers: pending ones join once their rows of M are computed.
    const int mr = regression_size();
    auto basis = std::make_shared<Basis>();
    basis->x = basis_x_.view().leftCols(mr);
    basis->squared_norms = basis->x.colwise().squaredNorm().transpose();
    basis->users.assign(basis_users_.begin(), basis_users_.begin() + mr);
    basis_snapshot_ = std::move(basis);
  }
  return basis_snapshot_;
}

std::shared_ptr<const Scorer> NystromPosterior::Freeze() const {
  // Shared until the learner changes: a publish without learning reuses it.
  if (frozen_ == nullptr) {
    frozen_ = std::make_shared<FrozenScorer>(kernel_, options_.prior_mean, BasisSnapshot(),
                                             form_.snapshot(), Weights());
  }
  return frozen_;
}

}  // namespace graphbandit
