// NystromPosterior: learning a batch of observations at once (ObserveBatch), block by block
// where the users of a batch reach disjoint parts of the dictionary.
#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "core/learner/nystrom_posterior.h"
#include "core/linalg/disjoint_sets.h"

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
      const double tau = KorsLeverage(r, options_.kors_epsilon, options_.kors_mu);
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

}  // namespace graphbandit
