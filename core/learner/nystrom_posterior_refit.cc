// NystromPosterior: re-admitting the dictionary (a new graph or new hyper-parameters),
// refits, synchronous or spread over later observations, and rebuilding M from the history.
#include <algorithm>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/learner/nystrom_posterior.h"
#include "core/linalg/disjoint_sets.h"
#include "core/linalg/nystrom_math.h"
#include "core/linalg/rank_update.h"
#include "core/storage/state_coding.h"

namespace graphbandit {

absl::Status NystromPosterior::SetGraph(const UserGraph& /*graph*/,
                                        std::shared_ptr<const UserKernel> users) {
  // A pending refit was built for the old graph: it switches first.
  if (absl::Status s = CompleteRefit(); !s.ok()) return s;
  kernel_.set_users(std::move(users));
  absl::Status status = Readmit(/*thin=*/false);
  CheckSinglePrecision();
  return status;
}

absl::StatusOr<NystromPosterior::Readmission> NystromPosterior::SelectReadmitted(
    const Eigen::MatrixXd& kzz_all, bool thin, double guard, double kors_mu) {
  // Re-admit the dictionary in order, dropping points that became (numerically) dependent,
  // with the same guard as growth; when thinning, a point is also kept only with KORS's
  // probability given the points kept before it (the first always is).
  //
  // Points that share no non-zero kernel entry (users in different graph components) fall
  // into groups whose blocks of K_ZZ are independent: the factors of the kept points are
  // block-diagonal (in any order), so each group keeps its own small factors and a point's
  // solves cost its group's size squared instead of the dictionary's. The points are still
  // taken in order, with the draws in the same sequence; the whole factor is assembled at the
  // end.
  const int m = static_cast<int>(kzz_all.rows());
  DisjointSets components(m);
  components.JoinLowerPattern(kzz_all);
  struct Group {
    std::vector<int> kept;
    CholeskyFactor zz;    // K over the group's kept points
    CholeskyFactor kors;  // the same + mu W^-1, for the thinning draws
  };
  std::vector<int> group_of(static_cast<size_t>(m), -1);
  std::vector<Group> groups;
  for (int j = 0; j < m; ++j) {
    const int root = components.Find(j);
    if (group_of[root] < 0) {
      group_of[root] = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    group_of[j] = group_of[root];
  }
  Readmission out;
  for (int j = 0; j < m; ++j) {
    Group& g = groups[static_cast<size_t>(group_of[j])];
    Eigen::VectorXd border(g.kept.size());
    for (size_t i = 0; i < g.kept.size(); ++i) border(i) = kzz_all(g.kept[i], j);
    double weight = basis_weights_[j];
    Eigen::VectorXd solved;  // border solved with the group's KORS factor
    if (thin) {
      solved = border;
      g.kors.ForwardSolveInPlace(solved);
    }
    if (thin && !out.kept.empty()) {
      const double r = std::max(kzz_all(j, j) - solved.squaredNorm(), 0.0);
      const double tau = KorsLeverage(r, options_.kors_epsilon, kors_mu);
      const double p = std::min(1.0, options_.kors_gamma * tau);
      if (!(rng_.Uniform() < p)) {
        ++stats_.thinned;
        continue;
      }
      weight /= p;
    }
    if (!g.zz.Append(border, kzz_all(j, j), guard * kzz_all(j, j)).ok()) {
      ++stats_.skipped_dependent;
      continue;
    }
    if (thin && !g.kors.AppendSolved(solved, kzz_all(j, j) + kors_mu / weight).ok()) {
      return absl::InternalError("KORS factor lost definiteness while re-admitting");
    }
    g.kept.push_back(j);
    out.kept.push_back(j);
    out.weights.push_back(weight);
  }
  const int mk = static_cast<int>(out.kept.size());
  std::vector<int> position(static_cast<size_t>(m), -1);
  for (int a = 0; a < mk; ++a) position[out.kept[a]] = a;
  Eigen::MatrixXd lower = Eigen::MatrixXd::Zero(mk, mk);
  for (const Group& g : groups) {
    const auto l = g.zz.matrix();
    for (size_t b = 0; b < g.kept.size(); ++b) {
      for (size_t a = b; a < g.kept.size(); ++a) {
        lower(position[g.kept[a]], position[g.kept[b]]) =
            l(static_cast<Eigen::Index>(a), static_cast<Eigen::Index>(b));
      }
    }
  }
  if (absl::Status s = out.chol_zz.Restore(std::move(lower), mk); !s.ok()) return s;
  return out;
}

absl::Status NystromPosterior::Readmit(bool thin, double guard) {
  scan_ = GrowthScan();  // every point joins the regression below
  admit_guard_ = 0.0;    // a new kernel or graph: round-off is learned afresh
  basis_snapshot_.reset();
  frozen_.reset();
  weights_dirty_ = true;
  form_.Clear();  // rebuilt with M below
  const int m = static_cast<int>(dictionary_size());
  if (m == 0) return absl::OkStatus();

  Eigen::MatrixXd kzz_all;
  kernel_.Cross(basis_x_.view(), basis_users_, basis_x_.view(), basis_users_.data(), &kzz_all);
  auto selected = SelectReadmitted(kzz_all, thin, guard, options_.kors_mu);
  if (!selected.ok()) return selected.status();
  std::vector<int>& kept = selected->kept;
  chol_zz_ = std::move(selected->chol_zz);
  if (static_cast<int>(kept.size()) < m) {
    basis_x_.Select(kept);
    std::vector<int32_t> users;
    for (int j : kept) users.push_back(basis_users_[j]);
    basis_users_ = std::move(users);
  }
  basis_weights_ = std::move(selected->weights);
  RebuildHashIndex();
  const int mk = static_cast<int>(kept.size());
  Eigen::MatrixXd kzz(mk, mk);
  for (int a = 0; a < mk; ++a) {
    for (int b = 0; b < mk; ++b) kzz(a, b) = kzz_all(kept[a], kept[b]);
  }
  absl::Status status = RefactorFromHistory(kzz);
  if (!status.ok() && guard * 100.0 <= kMaxReadmitGuard) {
    return Readmit(/*thin=*/false, guard * 100.0);
  }
  return status;
}

absl::Status NystromPosterior::Refit(const LearnerRefit& refit) {
  if (absl::Status status = CheckRefit(refit, dim_, /*kors=*/true); !status.ok()) return status;
  // One refit at a time: a pending one switches first.
  if (absl::Status status = CompleteRefit(); !status.ok()) return status;
  last_refit_applied_ = true;
  const double m = static_cast<double>(dictionary_size());
  if (refit.may_spread && options_.spread_growth_scan && !options_.forget_evicted &&
      options_.spread_refit_work >= 0.0 && m > 0 && history_.size() > 0 &&
      static_cast<double>(history_.size()) * m * m >= options_.spread_refit_work) {
    return StartRefit(refit);
  }
  if (refit.rescale.size() > 0) {
    history_.ScaleRows(refit.rescale);
    basis_x_.ScaleRows(refit.rescale);
  }
  kernel_ = MultiUserKernel(refit.arm, refit.users, refit.user_variance);
  options_.ridge = refit.ridge;
  options_.kors_mu = refit.kors_mu;
  options_.prior_mean = refit.prior_mean;
  ++stats_.refits;
  absl::Status status = Readmit(/*thin=*/true);
  CheckSinglePrecision();
  return status;
}

absl::Status NystromPosterior::StartRefit(const LearnerRefit& refit) {
  auto r = std::make_unique<PendingRefit>();
  r->kernel.emplace(refit.arm, refit.users, refit.user_variance);
  r->ridge = refit.ridge;
  r->kors_mu = refit.kors_mu;
  r->prior_mean = refit.prior_mean;
  r->user_variance = refit.user_variance;
  r->rescale = refit.rescale;
  r->x = basis_x_;
  if (r->rescale.size() > 0) r->x.ScaleRows(r->rescale);
  // The re-admission Readmit(thin) would do, on the dictionary as it is now.
  Eigen::MatrixXd kzz_all;
  r->kernel->Cross(r->x.view(), basis_users_, r->x.view(), basis_users_.data(), &kzz_all);
  auto selected =
      SelectReadmitted(kzz_all, /*thin=*/true, options_.min_relative_residual, r->kors_mu);
  if (!selected.ok()) return selected.status();
  const std::vector<int>& kept = selected->kept;
  const int mk = static_cast<int>(kept.size());
  r->x.Select(kept);
  for (int j : kept) r->users.push_back(basis_users_[j]);
  r->weights = std::move(selected->weights);
  r->chol_zz = std::move(selected->chol_zz);
  Eigen::MatrixXd kzz(mk, mk);
  for (int a = 0; a < mk; ++a) {
    for (int b = 0; b < mk; ++b) kzz(a, b) = kzz_all(kept[a], kept[b]);
  }
  Eigen::MatrixXd kors = kzz;
  kors.diagonal().array() += r->kors_mu / Eigen::Map<const Eigen::ArrayXd>(r->weights.data(), mk);
  if (absl::Status s = r->chol_kors.Reset(kors); !s.ok()) {
    return absl::InternalError(absl::StrCat("KORS factor of the refit: ", s.message()));
  }
  r->m = r->ridge * kzz;
  r->gamma = Eigen::VectorXd::Zero(mk);
  r->end = history_.total();
  r->next = r->end - history_.size();
  refit_ = std::move(r);
  refit_->step = RefitScanStep();
  ++stats_.refits_spread;
  return absl::OkStatus();
}

int64_t NystromPosterior::RefitScanStep() const {
  // Per history entry the pass costs up to m^2 multiply-adds (a rank-one term of M; far less
  // for users in small graph components, rank_update.h), a third of learning one observation
  // at the same size: kMinRefitScanStep entries per observation keep
  // learning at a fraction of its speed while the pass lasts, and the pass ends within
  // kRefitScanObservations observations however long the history is.
  const int64_t entries = refit_->end - refit_->next;
  return std::max(kMinRefitScanStep,
                  (entries + kRefitScanObservations - 1) / kRefitScanObservations);
}

int64_t NystromPosterior::refit_remaining() const {
  if (refit_ == nullptr) return 0;
  const int64_t oldest = history_.total() - history_.size();
  return std::max<int64_t>(0, refit_->end - std::max(refit_->next, oldest));
}

void NystromPosterior::RefitObservations(const Eigen::Ref<const Eigen::MatrixXd>& points,
                                         const int32_t* users, const double* rewards) {
  PendingRefit& r = *refit_;
  const Eigen::Index len = points.cols();
  Eigen::MatrixXd scaled;
  if (r.rescale.size() > 0) scaled = points.array().colwise() * r.rescale.array();
  const Eigen::Ref<const Eigen::MatrixXd> b =
      r.rescale.size() > 0 ? Eigen::Ref<const Eigen::MatrixXd>(scaled) : points;
  const Eigen::VectorXd centered =
      Eigen::Map<const Eigen::VectorXd>(rewards, len).array() - r.prior_mean;
  // When the entries' users share kernel entries with few dictionary points (users in small
  // graph components), each component's entries update only those points' rows of M and
  // Gamma: no m' x len matrix, mostly zeros, to fill and scan.
  std::vector<MultiUserKernel::CrossBlock> blocks;
  Eigen::MatrixXd k_bs;  // m' x len, when the entries meet most of the dictionary
  if (!r.kernel->CrossBlocks(r.x.view(), r.users, b, users, &blocks, &k_bs)) {
    AddRankUpdateOnRows<Eigen::Lower>(k_bs, 1.0, &r.m);
    r.gamma.noalias() += k_bs * centered;
    return;
  }
  // The users of one component meet the same dictionary points: their blocks (one per user)
  // are joined, so that a component costs one rank-k update, not one per user. In the rows'
  // order, so that the sums' order depends on the entries alone.
  std::map<std::vector<Eigen::Index>, std::vector<size_t>> by_rows;
  for (size_t i = 0; i < blocks.size(); ++i) by_rows[blocks[i].rows].push_back(i);
  Eigen::MatrixXd joined, outer;
  Eigen::VectorXd centered_cols, gamma_rows;
  for (const auto& [rows, members] : by_rows) {
    const auto s = static_cast<Eigen::Index>(rows.size());
    Eigen::Index cols = 0;
    for (size_t i : members) cols += blocks[i].block.cols();
    joined.resize(s, cols);
    centered_cols.resize(cols);
    Eigen::Index at = 0;
    for (size_t i : members) {
      const MultiUserKernel::CrossBlock& block = blocks[i];
      joined.middleCols(at, block.block.cols()) = block.block;
      for (size_t c = 0; c < block.cols.size(); ++c) {
        centered_cols(at + static_cast<Eigen::Index>(c)) = centered(block.cols[c]);
      }
      at += block.block.cols();
    }
    outer.setZero(s, s);
    outer.selfadjointView<Eigen::Lower>().rankUpdate(joined);
    for (Eigen::Index j = 0; j < s; ++j) {
      for (Eigen::Index i = j; i < s; ++i) r.m(rows[i], rows[j]) += outer(i, j);
    }
    gamma_rows.noalias() = joined * centered_cols;
    for (Eigen::Index i = 0; i < s; ++i) r.gamma(rows[i]) += gamma_rows(i);
  }
}

void NystromPosterior::AdvanceRefit(int64_t entries) {
  PendingRefit& r = *refit_;
  const int64_t oldest = history_.total() - history_.size();
  r.next = std::max(r.next, oldest);  // entries evicted before their turn are not seen
  if (r.next >= r.end || entries <= 0) return;
  const int64_t stop = r.next + std::min(entries, r.end - r.next);
  history_.ForEachBlockIn(
      r.next - oldest, stop - oldest, kHistoryBlock,
      [&](const auto& block, const int32_t* block_users, const double* block_rewards,
          int64_t /*len*/) { RefitObservations(block, block_users, block_rewards); });
  r.next = stop;
}

absl::Status NystromPosterior::StepRefit(int64_t k) {
  if (refit_ == nullptr) return absl::OkStatus();
  AdvanceRefit(k * refit_->step);
  if (refit_->next < refit_->end) return absl::OkStatus();
  return FinishRefit();
}

absl::Status NystromPosterior::CompleteRefit() {
  if (refit_ == nullptr) return absl::OkStatus();
  if (!refit_->kernel.has_value()) {
    return absl::FailedPreconditionError("a restored refit was not resumed");
  }
  AdvanceRefit(std::numeric_limits<int64_t>::max());
  absl::Status status = FinishRefit();
  CheckSinglePrecision();
  return status;
}

absl::Status NystromPosterior::FinishRefit() {
  std::unique_ptr<PendingRefit> r = std::move(refit_);
  CholeskyFactor chol_m;
  if (!chol_m.Reset(r->m).ok()) {
    // Round-off: M under the new values is not numerically positive definite. The synchronous
    // rebuild would re-admit with a larger guard from the history now (seconds on a long one);
    // the old values stay instead, and the next fit tries again.
    ++stats_.refits_abandoned;
    last_refit_applied_ = false;
    return absl::OkStatus();
  }
  // The switch: everything the old state had learned since the refit started is in r's M and
  // Gamma; points the old dictionary admitted meanwhile are dropped (KORS may draw them again).
  if (r->rescale.size() > 0) history_.ScaleRows(r->rescale);
  kernel_ = *std::move(r->kernel);
  options_.ridge = r->ridge;
  options_.kors_mu = r->kors_mu;
  options_.prior_mean = r->prior_mean;
  basis_x_ = std::move(r->x);
  basis_users_ = std::move(r->users);
  basis_weights_ = std::move(r->weights);
  RebuildHashIndex();
  chol_zz_ = std::move(r->chol_zz);
  chol_kors_ = std::move(r->chol_kors);
  chol_m_ = std::move(chol_m);
  gamma_ = std::move(r->gamma);
  scan_ = GrowthScan();
  admit_guard_ = 0.0;
  weights_dirty_ = true;
  basis_snapshot_.reset();
  frozen_.reset();
  RebuildForm();
  ++stats_.refits;
  last_refit_applied_ = true;
  return absl::OkStatus();
}

absl::Status NystromPosterior::ResumeRefit(const LearnerRefit& refit) {
  if (refit_ == nullptr || refit_->kernel.has_value()) {
    return absl::FailedPreconditionError("no restored refit waits for its kernel");
  }
  if (absl::Status s = CheckRefit(refit, dim_, /*kors=*/true); !s.ok()) return s;
  const PendingRefit& r = *refit_;
  if (refit.ridge != r.ridge || refit.kors_mu != r.kors_mu || refit.prior_mean != r.prior_mean ||
      refit.user_variance != r.user_variance || refit.rescale.size() != r.rescale.size() ||
      refit.rescale != r.rescale) {
    return MalformedState("Nystrom", "pending refit (its values differ from the model's)");
  }
  refit_->kernel.emplace(refit.arm, refit.users, refit.user_variance);
  return absl::OkStatus();
}

absl::Status NystromPosterior::RefactorFromHistory(const Eigen::MatrixXd& kzz) {
  scan_ = GrowthScan();  // M covers every dictionary point from here
  const int m = static_cast<int>(dictionary_size());
  Eigen::MatrixXd m_matrix = options_.ridge * kzz;
  AccumulateHistory(kernel_, basis_x_.view(), basis_users_, history_, &m_matrix, &gamma_,
                    options_.prior_mean);
  weights_dirty_ = true;
  absl::Status status = chol_m_.Reset(m_matrix);  // reads the lower triangle
  if (!status.ok()) {
    form_.Clear();
    return absl::InternalError(absl::StrCat("rebuilding the Nystrom factor: ", status.message()));
  }
  RebuildForm();
  Eigen::MatrixXd kors = kzz;
  kors.diagonal().array() +=
      options_.kors_mu / Eigen::Map<const Eigen::ArrayXd>(basis_weights_.data(), m);
  return chol_kors_.Reset(kors);
}

}  // namespace graphbandit
