#include "core/learner/batched_nystrom_posterior.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/linalg/nystrom_math.h"
#include "core/storage/state_coding.h"

namespace graphbandit {
namespace {

class FrozenBatchedScorer final : public Scorer {
 public:
  FrozenBatchedScorer(MultiUserKernel kernel, double ridge, Eigen::MatrixXd basis_x,
                      std::vector<int32_t> basis_users, Eigen::MatrixXd chol_m,
                      Eigen::MatrixXd chol_zz, Eigen::VectorXd weights)
      : kernel_(std::move(kernel)),
        ridge_(ridge),
        basis_x_(std::move(basis_x)),
        basis_users_(std::move(basis_users)),
        chol_m_(std::move(chol_m)),
        chol_zz_(std::move(chol_zz)),
        weights_(std::move(weights)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    ScoreNystrom(kernel_, ridge_, basis_x_, basis_users_, chol_m_, chol_zz_, weights_, user, points,
                 mean, stddev);
  }

 private:
  MultiUserKernel kernel_;
  double ridge_;
  Eigen::MatrixXd basis_x_;
  std::vector<int32_t> basis_users_;
  Eigen::MatrixXd chol_m_, chol_zz_;
  Eigen::VectorXd weights_;
};

}  // namespace

BatchedNystromPosterior::BatchedNystromPosterior(int dim, const ArmKernel& arm,
                                                 std::shared_ptr<const UserKernel> users,
                                                 const BatchedNystromOptions& options)
    : dim_(dim),
      kernel_(arm, std::move(users)),
      options_(options),
      rng_(options.seed),
      history_(dim, 0),
      basis_x_(dim) {}

void BatchedNystromPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                                    Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  ScoreNystrom(kernel_, options_.ridge, basis_x_.view(), basis_users_, chol_m_.matrix(),
               chol_zz_.matrix(), weights_, user, points, mean, stddev);
}

double BatchedNystromPosterior::VarianceOverRidge(int64_t i) const {
  Eigen::VectorXd mean, sd;
  Score(history_.user(i), history_.point(i), &mean, &sd);
  return sd(0) * sd(0) / options_.ridge;
}

absl::Status BatchedNystromPosterior::Observe(int32_t user,
                                              const Eigen::Ref<const Eigen::VectorXd>& point,
                                              double reward) {
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  Eigen::VectorXd mean, sd;
  Score(user, point, &mean, &sd);
  accumulated_ += sd(0) * sd(0) / options_.ridge;
  history_.Append(point, user, reward);
  if (accumulated_ <= options_.threshold) return absl::OkStatus();
  if (options_.min_growth > 0.0 &&
      static_cast<double>(history_.size()) <
          static_cast<double>(last_redraw_size_) * (1.0 + options_.min_growth)) {
    return absl::OkStatus();  // keeps accumulating until the history has grown enough
  }
  accumulated_ = 0.0;
  return Resparsify();
}

Eigen::VectorXd BatchedNystromPosterior::HistoryVariancesOverRidge() const {
  Eigen::VectorXd out(history_.size());
  const int m = static_cast<int>(basis_x_.cols());
  int64_t done = 0;
  history_.ForEachBlock(kHistoryBlock, [&](const auto& block, const int32_t* block_users,
                                           const double*, int64_t len) {
    const Eigen::VectorXd arm = kernel_.arm().Diagonal(Eigen::Ref<const Eigen::MatrixXd>(block));
    for (int64_t j = 0; j < len; ++j) {
      out(done + j) = kernel_.users()->Entry(block_users[j], block_users[j]) * arm(j);
    }
    if (m > 0) {
      Eigen::MatrixXd kz;  // m x len
      kernel_.Cross(basis_x_.view(), basis_users_, block, block_users, &kz);
      Eigen::MatrixXd projected = kz;
      chol_m_.ForwardSolveInPlace(projected);
      chol_zz_.ForwardSolveInPlace(kz);
      out.segment(done, len).array() =
          options_.ridge * projected.colwise().squaredNorm().transpose().array() +
          (out.segment(done, len).array() - kz.colwise().squaredNorm().transpose().array())
              .cwiseMax(0.0);
    }
    done += len;
  });
  return out / options_.ridge;
}

absl::Status BatchedNystromPosterior::Resparsify() {
  ++redraws_;
  // Draw the new dictionary with the current (stale) posterior's variances: point by point as
  // the paper's algorithm (the simulator's presets), or in blocks of matrix products when
  // served (the same values up to round-off, an order of magnitude faster).
  std::vector<int64_t> chosen;
  const bool blocked = options_.min_growth > 0.0;
  const Eigen::VectorXd variances = blocked ? HistoryVariancesOverRidge() : Eigen::VectorXd();
  for (int64_t i = 0; i < history_.size(); ++i) {
    const double v = blocked ? variances(i) : VarianceOverRidge(i);
    const double p = std::min(1.0, options_.oversampling * v);
    if (rng_.Uniform() < p) chosen.push_back(i);
  }
  if (chosen.empty() && history_.size() > 0) chosen.push_back(history_.size() - 1);
  const size_t cap = static_cast<size_t>(std::max(options_.max_dictionary_size, 0));
  if (cap > 0 && chosen.size() > cap) {
    for (size_t k = 0; k < cap; ++k) {  // partial Fisher-Yates, then back in history order
      std::swap(chosen[k], chosen[k + rng_.UniformInt(chosen.size() - k)]);
    }
    chosen.resize(cap);
    std::sort(chosen.begin(), chosen.end());
  }
  last_redraw_size_ = history_.size();
  basis_x_.Clear();
  basis_users_.clear();
  for (int64_t i : chosen) {
    basis_x_.Append(history_.point(i));
    basis_users_.push_back(history_.user(i));
  }
  return Recompute();
}

absl::Status BatchedNystromPosterior::Recompute() {
  // K_ZZ with the same guard as EK-UCB: repeated or dependent points are dropped.
  Eigen::MatrixXd kzz_all;
  kernel_.Cross(basis_x_.view(), basis_users_, basis_x_.view(), basis_users_.data(), &kzz_all);
  std::vector<int> kept;
  chol_zz_.Clear();
  for (int j = 0; j < static_cast<int>(basis_users_.size()); ++j) {
    Eigen::VectorXd border(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) border(i) = kzz_all(kept[i], j);
    if (chol_zz_.Append(border, kzz_all(j, j), options_.min_relative_residual * kzz_all(j, j))
            .ok()) {
      kept.push_back(j);
    }
  }
  basis_x_.Select(kept);
  std::vector<int32_t> users;
  for (int j : kept) users.push_back(basis_users_[j]);
  basis_users_ = std::move(users);
  const int m = static_cast<int>(kept.size());
  if (m == 0) {
    chol_m_.Clear();
    weights_.resize(0);
    return absl::OkStatus();
  }
  Eigen::MatrixXd m_matrix(m, m);
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) m_matrix(a, b) = options_.ridge * kzz_all(kept[a], kept[b]);
  }
  Eigen::VectorXd gamma;
  AccumulateHistory(kernel_, basis_x_.view(), basis_users_, history_, &m_matrix, &gamma);
  // K_ZS K_SZ grows with t while lambda K_ZZ does not: when round-off makes the recomputed M
  // indefinite, add the smallest diagonal jitter (relative to its mean diagonal) that works.
  absl::Status status = chol_m_.Reset(m_matrix);
  const double scale = m_matrix.diagonal().mean();
  for (double jitter = 1e-12; !status.ok() && jitter <= 1e-4; jitter *= 10) {
    Eigen::MatrixXd jittered = m_matrix;
    jittered.diagonal().array() += jitter * scale;
    status = chol_m_.Reset(jittered);
    ++jittered_;
  }
  if (!status.ok()) {
    return absl::InternalError(absl::StrCat("batched Nystrom factor: ", status.message()));
  }
  weights_ = chol_m_.Solve(gamma);
  return absl::OkStatus();
}

absl::Status BatchedNystromPosterior::SetGraph(const UserGraph& /*graph*/,
                                               std::shared_ptr<const UserKernel> users) {
  kernel_.set_users(std::move(users));
  return Recompute();
}

std::shared_ptr<const Scorer> BatchedNystromPosterior::Freeze() const {
  return std::make_shared<FrozenBatchedScorer>(kernel_, options_.ridge, basis_x_.view(),
                                               basis_users_, chol_m_.matrix(), chol_zz_.matrix(),
                                               weights_);
}

// Payload, version 2: rng, double accumulated, count redraws, count jittered, count
// last_redraw_size (version 1: absent, taken as 0), history,
// columns basis_x, users basis_users, cholesky chol_m, cholesky chol_zz, vector weights (stored:
// they were solved against a Gamma that is not kept).
namespace {
constexpr uint8_t kBatchedStateVersion = 2;
}  // namespace

void BatchedNystromPosterior::SaveState(storage::Encoder* out) const {
  storage::Encoder s;
  PutRngState(&s, rng_.state());
  s.PutDouble(accumulated_);
  PutCount(&s, redraws_);
  PutCount(&s, jittered_);
  PutCount(&s, last_redraw_size_);
  PutHistory(&s, history_);
  PutColumns(&s, basis_x_);
  PutUsers(&s, basis_users_);
  PutCholesky(&s, chol_m_);
  PutCholesky(&s, chol_zz_);
  PutVector(&s, weights_);
  PutStateFrame(out, LearnerStateTag::kBatchedNystrom, kBatchedStateVersion, s.data());
}

absl::Status BatchedNystromPosterior::LoadState(storage::Decoder* in) {
  std::string payload;
  uint8_t version = 0;
  if (absl::Status status = GetStateFrame(in, LearnerStateTag::kBatchedNystrom,
                                          kBatchedStateVersion, &payload, /*oldest=*/1, &version);
      !status.ok()) {
    return status;
  }
  storage::Decoder d(payload);
  const auto malformed = [](absl::string_view what) {
    return MalformedState("batched Nystrom", what);
  };

  // Decoded into locals and committed at the end: on failure the learner is unchanged.
  Rng::State rng_state;
  if (!GetRngState(&d, &rng_state)) return malformed("random state");
  double accumulated = 0.0;
  if (!d.GetDouble(&accumulated) || !std::isfinite(accumulated)) {
    return malformed("accumulated variance");
  }
  int64_t redraws = 0, jittered = 0, last_redraw_size = 0;
  if (!GetCount(&d, &redraws) || !GetCount(&d, &jittered)) return malformed("counters");
  if (version >= 2 && !GetCount(&d, &last_redraw_size)) return malformed("counters");
  HistoryBuffer history(dim_, 0);
  if (!GetHistory(&d, &history)) return malformed("history");
  if (last_redraw_size > history.size()) return malformed("last re-draw after the history");
  GrowableColumns basis_x(dim_);
  if (!GetColumns(&d, &basis_x)) return malformed("dictionary points");
  const int64_t m = basis_x.cols();
  // The dictionary is drawn from the history, which only grows.
  if (m > history.size()) return malformed("dictionary larger than the history");
  std::vector<int32_t> basis_users;
  if (!GetUsers(&d, m, &basis_users) || static_cast<int64_t>(basis_users.size()) != m) {
    return malformed("dictionary users");
  }
  // A factor's storage never exceeds max(8, twice the largest size it ever had).
  const int64_t max_capacity = std::max<int64_t>(8, 2 * history.size());
  CholeskyFactor chol_m, chol_zz;
  if (!GetCholesky(&d, max_capacity, &chol_m) || chol_m.size() != m)
    return malformed("factor of M");
  if (!GetCholesky(&d, max_capacity, &chol_zz) || chol_zz.size() != m) {
    return malformed("factor of K_ZZ");
  }
  Eigen::VectorXd weights;
  if (!GetVector(&d, &weights) || weights.size() != m) return malformed("weights");
  if (!d.done()) return malformed("trailing bytes");

  rng_.set_state(rng_state);
  accumulated_ = accumulated;
  redraws_ = redraws;
  jittered_ = jittered;
  last_redraw_size_ = last_redraw_size;
  history_ = std::move(history);
  basis_x_ = std::move(basis_x);
  basis_users_ = std::move(basis_users);
  chol_m_ = std::move(chol_m);
  chol_zz_ = std::move(chol_zz);
  weights_ = std::move(weights);
  return absl::OkStatus();
}

}  // namespace graphbandit
