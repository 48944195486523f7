// NystromPosterior: the KORS dictionary: leverage scores, duplicate points, admission of
// accepted points, and the growth scan that computes pending points' rows of M and Gamma.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/learner/nystrom_posterior.h"
#include "core/linalg/nystrom_math.h"

namespace graphbandit {

double NystromPosterior::KorsScore(int32_t user,
                                   const Eigen::Ref<const Eigen::VectorXd>& point) const {
  double k_ss = 0.0;
  Eigen::VectorXd kz = DictionaryColumn(user, point, &k_ss);
  double u = 0.0;
  if (kz.size() > 0) {
    chol_kors_.ForwardSolveInPlace(kz);
    u = kz.squaredNorm();
  }
  const double r = std::max(k_ss - u, 0.0);
  return KorsLeverage(r, options_.kors_epsilon, options_.kors_mu);
}

uint64_t NystromPosterior::PointHash(int32_t user,
                                     const Eigen::Ref<const Eigen::VectorXd>& point) const {
  uint64_t h = static_cast<uint64_t>(static_cast<uint32_t>(user)) * 0x9E3779B97F4A7C15ULL;
  for (Eigen::Index i = 0; i < point.size(); ++i) {
    uint64_t bits;
    const double value = point(i) == 0.0 ? 0.0 : point(i);  // -0.0 and 0.0 are the same point
    std::memcpy(&bits, &value, sizeof bits);
    h ^= bits + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

int NystromPosterior::FindDuplicate(int32_t user,
                                    const Eigen::Ref<const Eigen::VectorXd>& point) const {
  auto it = basis_by_hash_.find(PointHash(user, point));
  if (it == basis_by_hash_.end()) return -1;
  for (int j : it->second) {
    if (basis_users_[j] == user && basis_x_.col(j) == point) return j;
  }
  return -1;
}

absl::Status NystromPosterior::AdmitAccepted(int32_t user,
                                             const Eigen::Ref<const Eigen::VectorXd>& point,
                                             const Eigen::VectorXd& kz, double k_ss, double p) {
  const int m = static_cast<int>(dictionary_size());
  ++stats_.kors_accepted;
  const int duplicate = FindDuplicate(user, point);
  if (duplicate >= 0) {
    // Same feature map as an existing dictionary point: its KORS weight grows by 1/p, i.e. the
    // diagonal entry mu / w of K_ZZ + mu W^-1 shrinks (a rank-one downdate).
    const double w_old = basis_weights_[duplicate];
    const double w_new = w_old + 1.0 / p;
    Eigen::VectorXd v = Eigen::VectorXd::Zero(m);
    v(duplicate) = std::sqrt(options_.kors_mu * (1.0 / w_old - 1.0 / w_new));
    if (!chol_kors_.RankOneDowndate(v).ok()) {
      // Cannot happen in exact arithmetic (the matrix stays positive definite); refactor.
      Eigen::MatrixXd kzz;
      kernel_.Cross(basis_x_.view(), basis_users_, basis_x_.view(), basis_users_.data(), &kzz);
      basis_weights_[duplicate] = w_new;
      kzz.diagonal().array() +=
          options_.kors_mu / Eigen::Map<const Eigen::ArrayXd>(basis_weights_.data(), m);
      return chol_kors_.Reset(kzz);
    }
    basis_weights_[duplicate] = w_new;
    ++stats_.merged_duplicates;
    return absl::OkStatus();
  }
  if (m >= options_.max_dictionary_size) {
    ++stats_.skipped_full;
    return absl::OkStatus();
  }
  return AdmitPending(point, user, kz, k_ss, p);
}

int NystromPosterior::GrowthBatch() const {
  if (options_.growth_batch_divisor <= 0) return 1;
  return std::clamp(regression_size() / options_.growth_batch_divisor, 1, kMaxGrowthBatch);
}

absl::Status NystromPosterior::AdmitPending(const Eigen::VectorXd& z, int32_t z_user,
                                            const Eigen::VectorXd& kz, double k_ss, double p) {
  const int m = static_cast<int>(dictionary_size());
  // K_ZZ grows first: its Schur complement is z's Nystrom residual, which the guard checks.
  const double guard = std::max(options_.min_relative_residual, admit_guard_);
  if (!chol_zz_.Append(kz, k_ss, guard * k_ss).ok()) {
    ++stats_.skipped_dependent;
    return absl::OkStatus();
  }
  // KORS matrix K_ZZ + mu W^-1 with the new point's weight w = 1/p: later leverage scores see
  // the point at once, so that the points pending beside it are not redundant with it.
  absl::Status status = chol_kors_.Append(kz, k_ss + options_.kors_mu * p);
  if (!status.ok()) {
    chol_zz_.Truncate(m);
    return absl::InternalError(absl::StrCat("KORS factor lost definiteness: ", status.message()));
  }
  basis_x_.Append(z);
  basis_users_.push_back(z_user);
  basis_weights_.push_back(1.0 / p);
  basis_by_hash_[PointHash(z_user, z)].push_back(m);
  const int waiting = static_cast<int>(dictionary_size()) - regression_size() - scan_.count;
  // At the cap no batch would fill again: the last points join as they are.
  if (waiting < GrowthBatch() && dictionary_size() < options_.max_dictionary_size) {
    return absl::OkStatus();
  }
  if (!options_.spread_growth_scan) return FlushPendingDictionary();
  if (scan_.count > 0) {
    // The next batch filled before this one's pass ended: finish that pass now, so that at most
    // two batches are ever pending.
    AdvanceScan(std::numeric_limits<int64_t>::max());
    if (absl::Status s = FinishScan(); !s.ok()) return s;
  }
  if (dictionary_size() > regression_size()) StartScan();
  return absl::OkStatus();
}

absl::Status NystromPosterior::FlushPendingDictionary() {
  frozen_.reset();
  // At most twice: the batch being scanned, then the points waiting behind it.
  while (scan_.count > 0 || dictionary_size() > regression_size()) {
    if (scan_.count == 0) StartScan();
    AdvanceScan(std::numeric_limits<int64_t>::max());
    if (absl::Status s = FinishScan(); !s.ok()) return s;
  }
  CheckSinglePrecision();
  return absl::OkStatus();
}

// The new rows of M = K_ZS K_SZ + lambda K_ZZ and of Gamma = K_ZS (Y - m0) for a batch of
// pending points, over the retained history (EK §4.6 step 7, k rows at once): every pending
// point, in one pass when the batch fills (or, with spread_growth_scan, over the history
// retained now, a step per later observation).
void NystromPosterior::StartScan() {
  const int mr = regression_size();
  scan_.count = static_cast<int>(dictionary_size()) - mr;
  scan_.end = history_.total();
  scan_.next = scan_.end - history_.size();
  scan_.rows.setZero(scan_.count, mr + scan_.count);
  scan_.gamma.setZero(scan_.count);
}

void NystromPosterior::AdvanceScan(int64_t entries) {
  const int64_t oldest = history_.total() - history_.size();
  scan_.next = std::max(scan_.next, oldest);  // entries evicted before their turn are not seen
  if (scan_.next >= scan_.end || entries <= 0) return;
  const int64_t stop = scan_.next + std::min(entries, scan_.end - scan_.next);
  const int k = scan_.count;
  const int width = regression_size() + k;
  std::vector<int32_t> prefix;
  const std::vector<int32_t>* users = &basis_users_;
  if (width < static_cast<int>(dictionary_size())) {  // points waiting behind this batch
    prefix.assign(basis_users_.begin(), basis_users_.begin() + width);
    users = &prefix;
  }
  history_.ForEachBlockIn(
      scan_.next - oldest, stop - oldest, kHistoryBlock,
      [&](const auto& block, const int32_t* block_users, const double* block_rewards, int64_t len) {
        Eigen::MatrixXd k_bs;  // width x len
        kernel_.Cross(basis_x_.view().leftCols(width), *users, block, block_users, &k_bs);
        scan_.rows.noalias() += k_bs.bottomRows(k) * k_bs.transpose();
        scan_.gamma.noalias() +=
            k_bs.bottomRows(k) *
            (Eigen::Map<const Eigen::VectorXd>(block_rewards, len).array() - options_.prior_mean)
                .matrix();
      });
  scan_.next = stop;
}

void NystromPosterior::ScanObservation(const Eigen::Ref<const Eigen::VectorXd>& kz, double reward,
                                       double sign) {
  const int mr = regression_size();
  const int k = scan_.count;
  scan_.rows.noalias() += (sign * kz.segment(mr, k)) * kz.head(mr + k).transpose();
  scan_.gamma += (sign * (reward - options_.prior_mean)) * kz.segment(mr, k);
}

int64_t NystromPosterior::ScanStep() const {
  // Per history entry the pass costs about width (2 d + 2 k + 20) flops (the kernel column and
  // the k rows), a rank-one update of M and of the scoring form about 4 width^2: a step of
  // 2 width / (d + k + 10) entries keeps the pass near one update's cost per observation.
  if (options_.growth_scan_step > 0) return options_.growth_scan_step;
  const int64_t width = regression_size() + scan_.count;
  return std::max<int64_t>(kMinGrowthScanStep, 2 * width / (dim_ + scan_.count + 10));
}

absl::Status NystromPosterior::FinishScan() {
  frozen_.reset();
  const int mr = regression_size();
  const int k = scan_.count;
  const int m = mr + k;
  Eigen::MatrixXd rows = std::move(scan_.rows);
  const Eigen::VectorXd gamma_new = std::move(scan_.gamma);
  scan_ = GrowthScan();
  if (k == 0) return absl::OkStatus();
  Eigen::MatrixXd kzz_new;  // k x m
  const std::vector<int32_t> new_users(basis_users_.begin() + mr, basis_users_.begin() + m);
  kernel_.Cross(basis_x_.view().middleCols(mr, k), new_users, basis_x_.view().leftCols(m),
                basis_users_.data(), &kzz_new);
  rows += options_.ridge * kzz_new;
  int joined = k;
  for (int j = 0; j < k; ++j) {
    const int index = mr + j;
    const double residual = chol_zz_.matrix()(index, index) * chol_zz_.matrix()(index, index);
    // The Schur complement of M is at least lambda * residual in exact arithmetic.
    if (!chol_m_
             .Append(rows.row(j).head(index).transpose(), rows(j, index),
                     1e-3 * options_.ridge * residual)
             .ok()) {
      if (!options_.spread_growth_scan) {
        // Round-off made a pending point dependent: rebuild the whole state without such
        // points (the papers' presets).
        ++stats_.growth_rebuilds;
        return Readmit(/*thin=*/false);
      }
      // Served: drop this point and every point pending after it instead, O(m) rather than a
      // rebuild from the history (O(t m^2), seconds on a long history). They are KORS draws
      // that M cannot tell apart from the points it has; KORS may draw their like again.
      // Points that close to the span would fail the same way: refuse them from now on (the
      // guard only rises, to kMaxReadmitGuard at most), rather than admit and drop them.
      const double k_ss = kernel_.Diagonal(basis_users_[index], basis_x_.col(index))(0);
      admit_guard_ = std::min(kMaxReadmitGuard, std::max(admit_guard_, 4.0 * residual / k_ss));
      joined = j;
      DropPendingFrom(index);
      if (joined == 0) return absl::OkStatus();  // M, Gamma and the form are unchanged
      break;
    }
  }
  gamma_.conservativeResize(mr + joined);
  gamma_.tail(joined) = gamma_new.head(joined);
  weights_dirty_ = true;
  basis_snapshot_.reset();
  frozen_.reset();
  // M and the covered block of K_ZZ grew by bordering: so does the form, unless it is due
  // for its exact rebuild anyway or is not the size the regression had (then it is rebuilt).
  if (form_.size() == mr && !form_.ExactDue()) {
    form_.Grow(chol_zz_.matrix().topLeftCorner(mr + joined, mr + joined), chol_m_.matrix(),
               options_.ridge);
  } else {
    RebuildForm();
  }
  return absl::OkStatus();
}

void NystromPosterior::DropPendingFrom(int index) {
  const int m = static_cast<int>(dictionary_size());
  stats_.dropped_pending += m - index;
  basis_x_.Truncate(index);
  basis_users_.resize(index);
  basis_weights_.resize(index);
  RebuildHashIndex();
  chol_zz_.Truncate(index);
  chol_kors_.Truncate(index);
  scan_ = GrowthScan();
}

void NystromPosterior::RebuildHashIndex() {
  basis_by_hash_.clear();
  for (int j = 0; j < static_cast<int>(dictionary_size()); ++j) {
    basis_by_hash_[PointHash(basis_users_[j], basis_x_.col(j))].push_back(j);
  }
}

}  // namespace graphbandit
