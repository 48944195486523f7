#include "core/learner/nystrom_posterior.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/linalg/disjoint_sets.h"
#include "core/linalg/nystrom_math.h"
#include "core/linalg/rank_update.h"
#include "core/linalg/variance_form.h"
#include "core/storage/state_coding.h"

namespace graphbandit {
namespace {

// The block of `a` on rows `rows` and columns `cols`, in order.
Eigen::MatrixXd GatherBlock(const Eigen::Ref<const Eigen::MatrixXd>& a,
                            const std::vector<int>& rows, const std::vector<Eigen::Index>& cols) {
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.size()),
                      static_cast<Eigen::Index>(cols.size()));
  for (size_t c = 0; c < cols.size(); ++c) {
    for (size_t r = 0; r < rows.size(); ++r) {
      out(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = a(rows[r], cols[c]);
    }
  }
  return out;
}

// The variance form's correction for a batch V learned by M's factor (B <- B + U U^T with
// U U^T = lambda X S^-1 X^T, X = M^-1 V, S = I + V^T X), from the factor after the update
// (`lower`, L') and its reflections' rows of Q: q21^T = L'^-1 V and q22 q22^T = S^-1, so that
// X S^-1 = L'^-T q21^T and U = sqrt(lambda) L'^-T q21^T q22^-T (CholeskyFactor::Reflected). No
// solve on the factor before the update. q22's singular values lie in [1 / sqrt(1 + |L^-1 V|^2),
// 1]; where round-off could make it numerically singular (reciprocal condition number below
// kMinCorrectionRcond) or U is not finite, false: the caller rebuilds the form exactly instead.
constexpr double kMinCorrectionRcond = 1e-10;
bool CorrectionFactor(const Eigen::Ref<const Eigen::MatrixXd>& lower,
                      const CholeskyFactor::Reflected& reflected, double ridge,
                      Eigen::MatrixXd* u) {
  const Eigen::PartialPivLU<Eigen::MatrixXd> lu(reflected.q22);
  if (!(lu.rcond() >= kMinCorrectionRcond)) return false;
  *u = reflected.q21.transpose();
  lower.transpose().triangularView<Eigen::Upper>().solveInPlace(*u);
  *u = std::sqrt(ridge) * lu.solve(u->transpose()).transpose();
  return u->allFinite();
}

// The entries of a sorted support below n (the regression's points among the dictionary's).
std::vector<int> RegressionPart(const std::vector<int>& support, int n) {
  return std::vector<int>(support.begin(), std::lower_bound(support.begin(), support.end(), n));
}

}  // namespace

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
  return (1.0 + options_.kors_epsilon) * r / (r + options_.kors_mu);
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
    const double tau = (1.0 + options_.kors_epsilon) * r / (r + options_.kors_mu);
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

bool NystromPosterior::BatchBlocks(const std::vector<int32_t>& users, int m, int mr,
                                   std::vector<BatchBlock>* blocks) const {
  blocks->clear();
  if (!options_.learn_on_support || m == 0) return false;
  std::vector<int32_t> distinct = users;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  const std::vector<int32_t> dictionary(basis_users_.begin(), basis_users_.begin() + m);
  Eigen::VectorXd factors(m);
  std::map<std::vector<int>, size_t> by_support;
  std::vector<size_t> block_of(distinct.size());
  std::vector<int> support;
  for (size_t u = 0; u < distinct.size(); ++u) {
    kernel_.UserFactorsInto(dictionary, distinct[u], factors);
    support.clear();
    for (int i = 0; i < m; ++i) {
      if (factors(i) != 0.0) support.push_back(i);
    }
    if (2 * static_cast<int>(support.size()) > m) return false;  // most of the factors
    const auto [it, added] = by_support.emplace(support, blocks->size());
    if (added) {
      blocks->push_back(BatchBlock{support, RegressionPart(support, mr), {}});
    }
    block_of[u] = it->second;
  }
  // Supports that share a point (possible where a kernel entry inside a graph component is
  // exactly zero, so two users of one component reach different points) are one block: the
  // blocks must be disjoint for their updates to be independent.
  DisjointSets merged(static_cast<int>(blocks->size()));
  std::vector<int> owner(static_cast<size_t>(m), -1);
  for (size_t b = 0; b < blocks->size(); ++b) {
    for (int i : (*blocks)[b].support) {
      int& o = owner[static_cast<size_t>(i)];
      if (o < 0) {
        o = static_cast<int>(b);
      } else {
        merged.Join(o, static_cast<int>(b));
      }
    }
  }
  std::vector<size_t> renumbered(blocks->size(), blocks->size());
  std::vector<BatchBlock> disjoint;
  for (size_t b = 0; b < blocks->size(); ++b) {
    const size_t r = static_cast<size_t>(merged.Find(static_cast<int>(b)));
    if (renumbered[r] == blocks->size()) {
      renumbered[r] = disjoint.size();
      disjoint.emplace_back();
    }
    renumbered[b] = renumbered[r];
  }
  if (disjoint.size() < blocks->size()) {
    for (size_t b = 0; b < blocks->size(); ++b) {
      BatchBlock& d = disjoint[renumbered[b]];
      d.support.insert(d.support.end(), (*blocks)[b].support.begin(), (*blocks)[b].support.end());
    }
    for (BatchBlock& d : disjoint) {
      std::sort(d.support.begin(), d.support.end());
      d.support.erase(std::unique(d.support.begin(), d.support.end()), d.support.end());
      if (2 * static_cast<int>(d.support.size()) > m) return false;
      d.support_r = RegressionPart(d.support, mr);
    }
    for (size_t& b : block_of) b = renumbered[b];
    *blocks = std::move(disjoint);
  }
  for (Eigen::Index i = 0; i < static_cast<Eigen::Index>(users.size()); ++i) {
    const size_t u = static_cast<size_t>(
        std::lower_bound(distinct.begin(), distinct.end(), users[i]) - distinct.begin());
    (*blocks)[block_of[u]].cols.push_back(i);
  }
  double work = 0.0;
  for (const BatchBlock& b : *blocks) {
    work += static_cast<double>(b.support.size()) * static_cast<double>(b.support.size()) *
            static_cast<double>(b.cols.size());
  }
  return 4.0 * work <= static_cast<double>(m) * m * static_cast<double>(users.size());
}

absl::Status NystromPosterior::ObserveBatch(const std::vector<int32_t>& users,
                                            const Eigen::Ref<const Eigen::MatrixXd>& points,
                                            const Eigen::Ref<const Eigen::VectorXd>& rewards) {
  const Eigen::Index k = points.cols();
  if (static_cast<Eigen::Index>(users.size()) != k || rewards.size() != k) {
    return absl::InvalidArgumentError("a batch needs one user and one reward per point");
  }
  for (Eigen::Index i = 0; i < k; ++i) {
    if (absl::Status s = CheckObservation(users[i], points.col(i), rewards(i), dim_); !s.ok()) {
      return s;
    }
  }
  if (refit_ != nullptr && !refit_->kernel.has_value()) {
    return absl::FailedPreconditionError("a restored refit was not resumed");
  }
  const int m = static_cast<int>(dictionary_size());
  if (k <= 1 || options_.forget_evicted || m == 0 || force_accept_) {
    // Every observation is learned even if one fails (a numerical breakdown; the input was
    // checked above); the first failure is returned.
    absl::Status status;
    for (Eigen::Index i = 0; i < k; ++i) {
      absl::Status s = ObserveOne(users[i], points.col(i), rewards(i));
      if (status.ok()) status = s;
    }
    CheckSinglePrecision();
    return status;
  }
  frozen_.reset();
  ++stats_.batches;
  const int mr = regression_size();
  // Every point's kernel column over every dictionary point (pending ones included).
  Eigen::MatrixXd kz;  // m x k
  kernel_.Cross(basis_x_.view(), basis_users_, points, users.data(), &kz);
  Eigen::VectorXd k_ss(k);
  for (Eigen::Index i = 0; i < k; ++i) k_ss(i) = kernel_.Diagonal(users[i], points.col(i))(0);
  // Users who share nothing with most of the dictionary (their own graph components) touch
  // only their block of the factors: the batch is learned block by block, each group of its
  // rewards on the points its users reach, when both factors separate every block
  // (CholeskyFactor::Separates).
  std::vector<BatchBlock> blocks;
  bool on_support = chol_kors_.size() == m && BatchBlocks(users, m, mr, &blocks);
  for (size_t b = 0; on_support && b < blocks.size(); ++b) {
    on_support = chol_kors_.Separates(blocks[b].support) && chol_m_.Separates(blocks[b].support_r);
  }
  if (on_support) ++stats_.support_batches;

  // KORS draws on the dictionary before the batch, one per observation in order (EK Algorithm 2,
  // step 5). At the cap, with nothing pending, a point can only merge into an identical
  // dictionary point; for every other one the draw only counts it (kors_accepted,
  // skipped_full), and its leverage is computed in single precision: a third of a batch's
  // triangular solves, where the statistics need no more.
  std::vector<double> p(k, 1.0);
  std::vector<bool> accept(k);
  {
    const bool full = m >= options_.max_dictionary_size && mr == m && scan_.count == 0;
    std::vector<Eigen::Index> exact;  // columns whose leverage needs double precision
    for (Eigen::Index i = 0; i < k; ++i) {
      if (!full || FindDuplicate(users[i], points.col(i)) >= 0) exact.push_back(i);
    }
    Eigen::VectorXd fitted(k);  // |L^-1 kz|^2 per point
    if (static_cast<Eigen::Index>(exact.size()) < k) {
      if (on_support) {
        const Eigen::MatrixXf& single = chol_kors_.SingleLower();
        for (const BatchBlock& block : blocks) {
          Eigen::MatrixXf b = GatherBlock(kz, block.support, block.cols).cast<float>();
          GatherLowerBlock(single, block.support).triangularView<Eigen::Lower>().solveInPlace(b);
          for (size_t j = 0; j < block.cols.size(); ++j) {
            fitted(block.cols[j]) =
                static_cast<double>(b.col(static_cast<Eigen::Index>(j)).squaredNorm());
          }
        }
      } else {
        Eigen::MatrixXf b = kz.cast<float>();
        chol_kors_.SingleLower().triangularView<Eigen::Lower>().solveInPlace(b);
        fitted = b.colwise().squaredNorm().transpose().cast<double>();
      }
    }
    if (!exact.empty()) {
      if (on_support) {
        std::vector<char> is_exact(static_cast<size_t>(k), 0);
        for (Eigen::Index i : exact) is_exact[static_cast<size_t>(i)] = 1;
        for (const BatchBlock& block : blocks) {
          std::vector<Eigen::Index> cols;
          for (Eigen::Index i : block.cols) {
            if (is_exact[static_cast<size_t>(i)] != 0) cols.push_back(i);
          }
          if (cols.empty()) continue;
          Eigen::MatrixXd bs = GatherBlock(kz, block.support, cols);
          chol_kors_.GatherLower(block.support).triangularView<Eigen::Lower>().solveInPlace(bs);
          for (size_t j = 0; j < cols.size(); ++j) {
            fitted(cols[j]) = bs.col(static_cast<Eigen::Index>(j)).squaredNorm();
          }
        }
      } else {
        Eigen::MatrixXd b(m, static_cast<Eigen::Index>(exact.size()));
        for (size_t j = 0; j < exact.size(); ++j) b.col(j) = kz.col(exact[j]);
        chol_kors_.ForwardSolveInPlace(b);
        for (size_t j = 0; j < exact.size(); ++j) fitted(exact[j]) = b.col(j).squaredNorm();
      }
    }
    for (Eigen::Index i = 0; i < k; ++i) {
      const double r = std::max(k_ss(i) - fitted(i), 0.0);
      const double tau = (1.0 + options_.kors_epsilon) * r / (r + options_.kors_mu);
      p[i] = std::min(1.0, options_.kors_gamma * tau);
      accept[i] = rng_.Uniform() < p[i];
    }
  }

  // Learn the batch on the regression's points (step 6 for k points): M += V V^T with
  // V = K_Z(points) over them, Gamma += V (y - m0), and the form's correction read off the
  // factor's update (CorrectionFactor).
  bool form_current = true;
  if (on_support) {
    // The same block by block: off a block its columns of V and M^-1 V are zero, and so is
    // V^T M^-1 V between two blocks (they are disjoint, and M's factor separates each), so the
    // form's correction is the sum of the blocks' (CorrectionFactor on each), taken at once.
    Eigen::MatrixXd u_full;
    if (form_.size() > 0) u_full = Eigen::MatrixXd::Zero(mr, k);
    bool learned = false;
    for (const BatchBlock& b : blocks) {
      if (b.support_r.empty()) continue;  // its users reach no point of the regression
      learned = true;
      Eigen::MatrixXd block = chol_m_.GatherLower(b.support_r);
      const Eigen::MatrixXd v = GatherBlock(kz, b.support_r, b.cols);
      CholeskyFactor::Reflected reflected;
      CholeskyFactor::RankUpdateLower(block, v, form_.size() > 0 ? &reflected : nullptr);
      if (form_.size() > 0) {
        Eigen::MatrixXd u;
        form_current = form_current && CorrectionFactor(block, reflected, options_.ridge, &u);
        for (size_t j = 0; form_current && j < b.cols.size(); ++j) {
          for (size_t r = 0; r < b.support_r.size(); ++r) {
            u_full(b.support_r[r], b.cols[j]) =
                u(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(j));
          }
        }
      }
      chol_m_.ScatterLower(b.support_r, block);
    }
    if (learned) {
      if (form_.size() > 0 && form_current) form_.AddCorrection(u_full);
      gamma_.noalias() += kz.topRows(mr) * (rewards.array() - options_.prior_mean).matrix();
    }
  } else if (mr > 0) {
    const auto v = kz.topRows(mr);
    CholeskyFactor::Reflected reflected;
    chol_m_.RankUpdate(v, form_.size() > 0 ? &reflected : nullptr);
    if (form_.size() > 0) {
      Eigen::MatrixXd u;
      form_current = CorrectionFactor(chol_m_.matrix(), reflected, options_.ridge, &u);
      if (form_current) form_.AddCorrection(u);
    }
    gamma_.noalias() += v * (rewards.array() - options_.prior_mean).matrix();
  }
  if (scan_.count > 0) {
    for (Eigen::Index i = 0; i < k; ++i) ScanObservation(kz.col(i), rewards(i), 1.0);
  }
  for (Eigen::Index i = 0; i < k; ++i) {
    if (history_.Append(points.col(i), users[i], rewards(i))) ++stats_.evicted;
  }
  if (refit_ != nullptr) RefitObservations(points, users.data(), rewards.data());
  weights_dirty_ = true;
  if (!form_current || form_.ExactDue() || form_.size() != regression_size()) RebuildForm();

  // The accepted points join in order; once one has changed the dictionary, the later ones'
  // columns are computed again over the dictionary as it is then.
  bool changed = false;
  absl::Status status;  // the first admission that failed; the others are still tried
  for (Eigen::Index i = 0; i < k; ++i) {
    if (!accept[i]) continue;
    const int64_t before = dictionary_size();
    absl::Status s;
    if (!changed) {
      s = AdmitAccepted(users[i], points.col(i), kz.col(i), k_ss(i), p[i]);
    } else {
      double kss = 0.0;
      const Eigen::VectorXd column = DictionaryColumn(users[i], points.col(i), &kss);
      s = AdmitAccepted(users[i], points.col(i), column, kss, p[i]);
    }
    if (!s.ok() && status.ok()) status = s;
    changed = changed || dictionary_size() != before || regression_size() != mr;
  }
  if (scan_.count > 0 && options_.spread_growth_scan) {
    AdvanceScan(k * ScanStep());
    if (scan_.next >= scan_.end) {
      if (absl::Status s = FinishScan(); !s.ok() && status.ok()) status = s;
    }
  }
  if (absl::Status s = StepRefit(k); !s.ok() && status.ok()) status = s;
  CheckSinglePrecision();  // on every exit: a saved state has always been checked
  return status;
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

absl::Status NystromPosterior::SetGraph(const UserGraph& /*graph*/,
                                        std::shared_ptr<const UserKernel> users) {
  // A pending refit was built for the old graph: it switches first.
  if (absl::Status s = CompleteRefit(); !s.ok()) return s;
  kernel_.set_users(std::move(users));
  absl::Status status = Readmit(/*thin=*/false);
  CheckSinglePrecision();
  return status;
}

void NystromPosterior::RebuildHashIndex() {
  basis_by_hash_.clear();
  for (int j = 0; j < static_cast<int>(dictionary_size()); ++j) {
    basis_by_hash_[PointHash(basis_users_[j], basis_x_.col(j))].push_back(j);
  }
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
      const double tau = (1.0 + options_.kors_epsilon) * r / (r + kors_mu);
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

// Payload, version 4: rng, u8 force_accept, counts kors_accepted merged_duplicates
// skipped_dependent skipped_full evicted downdate_failures thinned refits growth_rebuilds
// dropped_pending (the last two since 4), history, columns basis_x, users basis_users, doubles
// basis_weights, cholesky chol_m, cholesky chol_zz, cholesky chol_kors, vector gamma, variance
// form (since 3), double admission guard (since 4), growth scan (since 4: count scanning and,
// when it is not 0, count next, count end, matrix rows, vector gamma), u8 single-precision
// scoring (2: never checked) and count folds since its check (since 5), counts refits_spread
// refits_abandoned and u8 pending refit, then if 1 its doubles ridge kors_mu prior_mean
// user_variance, vector rescale, columns, users, doubles weights, choleskys K_ZZ and KORS, matrix
// M, vector Gamma, counts next end step (since 6). Not stored: the weights
// M^-1 Gamma (recomputed lazily from chol_m and gamma, bit-identically), the duplicate index
// (rebuilt from the dictionary in order), the basis snapshot shared with frozen scorers.
namespace {
// 1: without the thinned and refits counts; 2: without the variance form (rebuilt on load);
// 3: without the growth scan (none under way) and the growth_rebuilds count; 4: without the
// single-precision check (checked again on load); 5: without the spread refit.
constexpr uint8_t kNystromStateVersion = 6;
}  // namespace

void NystromPosterior::SaveState(storage::Encoder* out) const {
  // Tens of megabytes at m = 1,000 (the history, three factors' triangles, the form and,
  // while a refit is pending, its factors and M), encoded straight into the snapshot's buffer.
  PutStateFrameOf(out, LearnerStateTag::kNystrom, kNystromStateVersion,
                  [this](storage::Encoder* into) { EncodeState(into); });
}

void NystromPosterior::EncodeState(storage::Encoder* into) const {
  storage::Encoder& s = *into;
  PutRngState(&s, rng_.state());
  s.PutU8(force_accept_ ? 1 : 0);
  for (int64_t count :
       {stats_.kors_accepted, stats_.merged_duplicates, stats_.skipped_dependent,
        stats_.skipped_full, stats_.evicted, stats_.downdate_failures, stats_.thinned,
        stats_.refits, stats_.growth_rebuilds, stats_.dropped_pending}) {
    PutCount(&s, count);
  }
  PutHistory(&s, history_);
  PutColumns(&s, basis_x_);
  PutUsers(&s, basis_users_);
  PutDoubleVector(&s, basis_weights_);
  PutCholesky(&s, chol_m_);
  PutCholesky(&s, chol_zz_);
  PutCholesky(&s, chol_kors_);
  PutVector(&s, gamma_);
  form_.Save(&s);
  s.PutDouble(admit_guard_);
  PutCount(&s, scan_.count);
  if (scan_.count > 0) {
    PutCount(&s, scan_.next);
    PutCount(&s, scan_.end);
    PutMatrix(&s, scan_.rows);
    PutVector(&s, scan_.gamma);
  }
  // Since 5: whether the form scores in single precision (0 double, 1 single, 2 never checked
  // because this learner's option is off) and the folds since its last check, so that a restored
  // learner scores and checks exactly as this one.
  s.PutU8(!options_.single_precision ? 2 : form_.single() ? 1 : 0);
  PutCount(&s, static_cast<int64_t>(form_.base_version() - checked_base_));
  // Since 6: the spread refits' counts and the pending refit, if any (its kernel is the
  // owner's to restore: ResumeRefit).
  PutCount(&s, stats_.refits_spread);
  PutCount(&s, stats_.refits_abandoned);
  s.PutU8(refit_ != nullptr ? 1 : 0);
  if (refit_ != nullptr) {
    const PendingRefit& r = *refit_;
    s.PutDouble(r.ridge);
    s.PutDouble(r.kors_mu);
    s.PutDouble(r.prior_mean);
    s.PutDouble(r.user_variance);
    PutVector(&s, r.rescale);
    PutColumns(&s, r.x);
    PutUsers(&s, r.users);
    PutDoubleVector(&s, r.weights);
    PutCholesky(&s, r.chol_zz);
    PutCholesky(&s, r.chol_kors);
    PutMatrix(&s, r.m);
    PutVector(&s, r.gamma);
    PutCount(&s, r.next);
    PutCount(&s, r.end);
    PutCount(&s, r.step);
  }
}

absl::Status NystromPosterior::LoadState(storage::Decoder* in) {
  std::string payload;
  uint8_t version = 0;
  if (absl::Status status = GetStateFrame(in, LearnerStateTag::kNystrom, kNystromStateVersion,
                                          &payload, /*oldest=*/1, &version);
      !status.ok()) {
    return status;
  }
  storage::Decoder d(payload);
  const auto malformed = [](absl::string_view what) { return MalformedState("Nystrom", what); };

  // Decoded into locals and committed at the end: on failure the learner is unchanged.
  Rng::State rng_state;
  if (!GetRngState(&d, &rng_state)) return malformed("random state");
  uint8_t force_accept = 0;
  if (!d.GetU8(&force_accept) || force_accept > 1) return malformed("force_accept");
  NystromStats stats;
  for (int64_t* count : {&stats.kors_accepted, &stats.merged_duplicates, &stats.skipped_dependent,
                         &stats.skipped_full, &stats.evicted, &stats.downdate_failures}) {
    if (!GetCount(&d, count)) return malformed("statistics");
  }
  if (version >= 2) {
    for (int64_t* count : {&stats.thinned, &stats.refits}) {
      if (!GetCount(&d, count)) return malformed("statistics");
    }
  }
  if (version >= 4) {
    for (int64_t* count : {&stats.growth_rebuilds, &stats.dropped_pending}) {
      if (!GetCount(&d, count)) return malformed("statistics");
    }
  }
  HistoryBuffer history(dim_, options_.max_history);
  if (!GetHistory(&d, &history)) return malformed("history");
  GrowableColumns basis_x(dim_);
  if (!GetColumns(&d, &basis_x)) return malformed("dictionary points");
  const int64_t m = basis_x.cols();
  // Every dictionary point was an observation, and the dictionary never exceeds its cap.
  const int64_t max_m =
      std::min<int64_t>(std::max(options_.max_dictionary_size, 0), history.total());
  if (m > max_m) return malformed("dictionary larger than its cap or the observations");
  std::vector<int32_t> basis_users;
  if (!GetUsers(&d, m, &basis_users) || static_cast<int64_t>(basis_users.size()) != m) {
    return malformed("dictionary users");
  }
  std::vector<double> basis_weights;
  if (!GetDoubleVector(&d, m, &basis_weights) || static_cast<int64_t>(basis_weights.size()) != m) {
    return malformed("dictionary weights");
  }
  // A factor's storage never exceeds max(8, twice the largest size it ever had).
  const int64_t max_capacity = std::max<int64_t>(8, 2 * max_m);
  CholeskyFactor chol_m, chol_zz, chol_kors;
  // M covers the dictionary but for the points still pending: at most a growth batch, or
  // (version 4) a batch being scanned and fewer than a batch waiting behind it.
  if (!GetCholesky(&d, max_capacity, &chol_m) || chol_m.size() > m ||
      m - chol_m.size() > (version >= 4 ? 2 * kMaxGrowthBatch - 1 : kMaxGrowthBatch)) {
    return malformed("factor of M");
  }
  if (!GetCholesky(&d, max_capacity, &chol_zz) || chol_zz.size() != m) {
    return malformed("factor of K_ZZ");
  }
  if (!GetCholesky(&d, max_capacity, &chol_kors) || chol_kors.size() != m) {
    return malformed("KORS factor");
  }
  Eigen::VectorXd gamma;
  if (!GetVector(&d, &gamma) || gamma.size() != chol_m.size()) return malformed("Gamma");
  VarianceForm form;
  if (version >= 3 && !form.Load(&d, chol_m.size())) return malformed("variance form");
  GrowthScan scan;
  double admit_guard = 0.0;
  if (version >= 4 &&
      (!d.GetDouble(&admit_guard) || !(admit_guard >= 0.0 && admit_guard <= kMaxReadmitGuard))) {
    return malformed("admission guard");
  }
  if (version >= 4) {
    int64_t count = 0;
    if (!GetCount(&d, &count) || count > m - chol_m.size() || count > kMaxGrowthBatch) {
      return malformed("growth scan");
    }
    scan.count = static_cast<int>(count);
    // Points waiting behind the scan: fewer than a batch (the next batch starts the scan).
    if (m - chol_m.size() - scan.count >= kMaxGrowthBatch) return malformed("growth scan");
    if (scan.count > 0) {
      const int64_t width = chol_m.size() + scan.count;
      if (!GetCount(&d, &scan.next) || !GetCount(&d, &scan.end) || scan.next > scan.end ||
          scan.end > history.total() || !GetMatrix(&d, &scan.rows) ||
          scan.rows.rows() != scan.count || scan.rows.cols() != width ||
          !GetVector(&d, &scan.gamma) || scan.gamma.size() != scan.count) {
        return malformed("growth scan");
      }
    }
  }
  uint8_t single = 0;
  int64_t folds_unchecked = 0;
  if (version >= 5 && (!d.GetU8(&single) || single > 2 || !GetCount(&d, &folds_unchecked))) {
    return malformed("single-precision check");
  }
  std::unique_ptr<PendingRefit> refit;
  if (version >= 6) {
    uint8_t pending = 0;
    if (!GetCount(&d, &stats.refits_spread) || !GetCount(&d, &stats.refits_abandoned) ||
        !d.GetU8(&pending) || pending > 1) {
      return malformed("refit statistics");
    }
    if (pending == 1) {
      refit = std::make_unique<PendingRefit>();
      PendingRefit& r = *refit;
      r.x = GrowableColumns(dim_);
      if (!d.GetDouble(&r.ridge) || !d.GetDouble(&r.kors_mu) || !d.GetDouble(&r.prior_mean) ||
          !d.GetDouble(&r.user_variance) || !GetVector(&d, &r.rescale) ||
          (r.rescale.size() != 0 && r.rescale.size() != dim_) || !GetColumns(&d, &r.x) ||
          r.x.cols() > max_m) {
        return malformed("pending refit");
      }
      const int64_t mk = r.x.cols();
      if (!GetUsers(&d, mk, &r.users) || static_cast<int64_t>(r.users.size()) != mk ||
          !GetDoubleVector(&d, mk, &r.weights) || static_cast<int64_t>(r.weights.size()) != mk ||
          !GetCholesky(&d, max_capacity, &r.chol_zz) || r.chol_zz.size() != mk ||
          !GetCholesky(&d, max_capacity, &r.chol_kors) || r.chol_kors.size() != mk ||
          !GetMatrix(&d, &r.m) || r.m.rows() != mk || r.m.cols() != mk ||
          !GetVector(&d, &r.gamma) || r.gamma.size() != mk || !GetCount(&d, &r.next) ||
          !GetCount(&d, &r.end) || !GetCount(&d, &r.step) || r.next > r.end ||
          r.end > history.total() || r.step < kMinRefitScanStep ||
          r.step > std::max(kMinRefitScanStep, (history.total() + kRefitScanObservations - 1) /
                                                   kRefitScanObservations)) {
        return malformed("pending refit");
      }
    }
  }
  if (!d.done()) return malformed("trailing bytes");

  rng_.set_state(rng_state);
  force_accept_ = force_accept != 0;
  stats_ = stats;
  history_ = std::move(history);
  basis_x_ = std::move(basis_x);
  basis_users_ = std::move(basis_users);
  basis_weights_ = std::move(basis_weights);
  RebuildHashIndex();
  chol_m_ = std::move(chol_m);
  chol_zz_ = std::move(chol_zz);
  chol_kors_ = std::move(chol_kors);
  gamma_ = std::move(gamma);
  weights_.resize(0);
  weights_dirty_ = true;
  basis_snapshot_.reset();
  frozen_.reset();
  form_ = std::move(form);
  scan_ = std::move(scan);
  refit_ = std::move(refit);
  last_refit_applied_ = true;
  admit_guard_ = admit_guard;
  if (version < 3) RebuildForm();
  if (version >= 5) {
    form_.set_single(single == 1 && options_.single_precision);
    checked_rebuild_ = form_.rebuild_version();
    checked_base_ = form_.base_version() - static_cast<uint64_t>(folds_unchecked);
    // Saved with the option off and loaded with it on, or due for a check: checked now.
    if ((single == 2 && options_.single_precision) ||
        folds_unchecked >= static_cast<int64_t>(kSingleCheckEvery)) {
      checked_rebuild_ = ~uint64_t{0};
    }
  } else {
    checked_rebuild_ = ~uint64_t{0};
  }
  CheckSinglePrecision();
  return absl::OkStatus();
}

}  // namespace graphbandit
