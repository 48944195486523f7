#include "core/linalg/variance_form.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/linalg/cholesky_factor.h"
#include "core/linalg/disjoint_sets.h"
#include "core/linalg/rank_update.h"
#include "core/storage/state_coding.h"

namespace graphbandit {

namespace {

// B0 += scale * (L^-1)^T L^-1 on the upper triangle, for a lower factor L: the inverse of L L^T.
void AddScaledInverse(const Eigen::Ref<const Eigen::MatrixXd>& chol, double scale,
                      Eigen::MatrixXd* b) {
  const Eigen::Index m = chol.rows();
  Eigen::MatrixXd inverse = Eigen::MatrixXd::Identity(m, m);
  chol.triangularView<Eigen::Lower>().solveInPlace(inverse);  // L^-1, lower triangular
  b->selfadjointView<Eigen::Upper>().rankUpdate(inverse.transpose(), scale);
}

int FoldRankFor(int size) { return std::clamp(size / 16, 4, 64); }

// The rows on which some column of u is not zero, in order.
std::vector<int> NonZeroRows(const Eigen::Ref<const Eigen::MatrixXd>& u) {
  std::vector<char> hit(static_cast<size_t>(u.rows()), 0);
  for (Eigen::Index c = 0; c < u.cols(); ++c) {
    for (Eigen::Index r = 0; r < u.rows(); ++r) hit[r] |= u(r, c) != 0.0;
  }
  std::vector<int> rows;
  for (Eigen::Index r = 0; r < u.rows(); ++r) {
    if (hit[r]) rows.push_back(static_cast<int>(r));
  }
  return rows;
}

// Per-thread scratch of the scoring path: grows to the largest request and stays.
struct ScoreWorkspace {
  Eigen::VectorXd cross;     // kz, m x C
  Eigen::VectorXd product;   // T kz (B0's upper triangle), m x C
  Eigen::VectorXd low_rank;  // U^T kz, r x C
  Eigen::VectorXd factors;   // the user factors, m
  Eigen::VectorXd diagonal;  // B0's diagonal, m
  Eigen::VectorXd forms;     // kz^T B kz, C
  Eigen::VectorXf cross_single, product_single, low_rank_single, diagonal_single;
  // The sparse path: the basis points with a non-zero user factor, their features, squared
  // norms and weights, and B's block and correction rows on them.
  std::vector<Eigen::Index> support;
  Eigen::VectorXd support_x, support_norms, support_weights, support_base, support_u;

  template <typename Vector>
  static typename Vector::Scalar* Reserve(Vector* buffer, Eigen::Index size) {
    if (buffer->size() < size) buffer->resize(size);
    return buffer->data();
  }
};

ScoreWorkspace& ThreadWorkspace() {
  thread_local ScoreWorkspace workspace;
  return workspace;
}

// q_j = kz_j^T B kz_j for every column of kz, with B = B0 + U S U^T as the snapshot holds it,
// in the snapshot's precision (single: kz is rounded to single precision first). B0 is read
// through its upper triangle T: kz^T B0 kz = kz^T (2 T - D) kz per column, D its diagonal. The
// triangular product does half the multiply-adds of the full one; Eigen runs it at a lower
// rate, so a whole call is about 1.4x faster (m = 256, C = 100, AVX-512).
void QuadraticForms(const VarianceForm::Snapshot& form, const Eigen::MatrixXd* base,
                    const Eigen::Ref<const Eigen::MatrixXd>& kz, bool single,
                    Eigen::Ref<Eigen::VectorXd> q) {
  const Eigen::Index m = kz.rows(), c = kz.cols();
  ScoreWorkspace& ws = ThreadWorkspace();
  if (single) {
    Eigen::Map<Eigen::MatrixXf> kzf(ScoreWorkspace::Reserve(&ws.cross_single, m * c), m, c);
    kzf = kz.cast<float>();
    Eigen::Map<Eigen::MatrixXf> product(ScoreWorkspace::Reserve(&ws.product_single, m * c), m, c);
    product.noalias() = form.base_single->triangularView<Eigen::Upper>() * kzf;
    Eigen::Map<Eigen::VectorXf> diagonal(ScoreWorkspace::Reserve(&ws.diagonal_single, m), m);
    diagonal = form.base_single->diagonal();
    for (Eigen::Index j = 0; j < c; ++j) {
      q(j) = kzf.col(j).dot(2.0f * product.col(j) - diagonal.cwiseProduct(kzf.col(j)));
    }
    if (form.rank > 0) {
      const auto u = form.corrections->u_single.leftCols(form.rank);
      Eigen::Map<Eigen::MatrixXf> low(ScoreWorkspace::Reserve(&ws.low_rank_single, form.rank * c),
                                      form.rank, c);
      low.noalias() = u.transpose() * kzf;
      const Eigen::VectorXf sign = form.corrections->sign.head(form.rank).cast<float>();
      for (Eigen::Index j = 0; j < c; ++j) q(j) += sign.dot(low.col(j).cwiseAbs2());
    }
    return;
  }
  Eigen::Map<Eigen::MatrixXd> product(ScoreWorkspace::Reserve(&ws.product, m * c), m, c);
  product.noalias() = base->triangularView<Eigen::Upper>() * kz;
  Eigen::Map<Eigen::VectorXd> diagonal(ScoreWorkspace::Reserve(&ws.diagonal, m), m);
  diagonal = base->diagonal();
  for (Eigen::Index j = 0; j < c; ++j) {
    q(j) = kz.col(j).dot(2.0 * product.col(j) - diagonal.cwiseProduct(kz.col(j)));
  }
  if (form.rank > 0) {
    const auto u = form.corrections->u.leftCols(form.rank);
    Eigen::Map<Eigen::MatrixXd> low(ScoreWorkspace::Reserve(&ws.low_rank, form.rank * c), form.rank,
                                    c);
    low.noalias() = u.transpose() * kz;
    for (Eigen::Index j = 0; j < c; ++j) {
      q(j) += form.corrections->sign.head(form.rank).dot(low.col(j).cwiseAbs2());
    }
  }
}

}  // namespace

void VarianceForm::BaseChanged(bool structural, const std::vector<int>* rows) {
  // The old copy is dropped first: when nothing else holds it, it goes onto the shelf now and
  // is reused below. Until the new copy is in place the form scores in double precision (should
  // an allocation below throw, it stays so).
  base_single_.reset();
  const bool single = single_ && !structural;
  single_ = false;
  ++base_version_;
  if (structural) ++rebuild_version_;  // checked again before it scores in single
  BaseChange change;
  change.version = base_version_;
  change.rows_known = !structural && rows != nullptr;
  if (change.rows_known) change.rows = *rows;
  recent_changes_.push_back(std::move(change));
  if (recent_changes_.size() > kRecentChanges) recent_changes_.erase(recent_changes_.begin());
  if (single_buffers_.shelf == nullptr) {  // moved from
    single_buffers_.shelf = std::make_shared<SingleBuffers::Shelf>();
  }
  std::unique_ptr<Eigen::MatrixXf> copy;
  uint64_t kept_version = 0;
  {
    std::lock_guard<std::mutex> lock(single_buffers_.shelf->mu);
    copy = std::move(single_buffers_.shelf->kept);
    kept_version = single_buffers_.shelf->version;
  }
  if (base_ == nullptr) return;  // (the kept buffer, if any, is freed)
  const Eigen::Index n = base_->rows();
  if (copy != nullptr && copy->rows() != n) copy.reset();
  // The kept copy matched B0 at kept_version: the changes since then, if each touched known rows
  // only, say which entries to round again.
  bool partial = copy != nullptr && kept_version < base_version_ &&
                 base_version_ - kept_version <= recent_changes_.size();
  double work = 0.0;
  for (const BaseChange& c : recent_changes_) {
    if (!partial || c.version <= kept_version) continue;
    partial = c.rows_known;
    work += static_cast<double>(c.rows.size()) * static_cast<double>(c.rows.size());
  }
  if (copy == nullptr) copy = std::make_unique<Eigen::MatrixXf>(n, n);
  if (partial && work < 0.5 * static_cast<double>(n) * static_cast<double>(n)) {
    for (const BaseChange& c : recent_changes_) {
      if (c.version <= kept_version) continue;
      for (size_t j = 0; j < c.rows.size(); ++j) {
        const int col = c.rows[j];
        for (size_t i = 0; i <= j; ++i) {
          (*copy)(c.rows[i], col) = static_cast<float>((*base_)(c.rows[i], col));
        }
      }
    }
  } else {
    copy->triangularView<Eigen::Upper>() = base_->cast<float>();
  }
  // When its last holder (this form or a snapshot) drops it, the copy goes back on the shelf.
  const uint64_t version = base_version_;
  base_single_ = std::shared_ptr<const Eigen::MatrixXf>(
      copy.release(), [shelf = single_buffers_.shelf, version](const Eigen::MatrixXf* m) {
        std::unique_ptr<Eigen::MatrixXf> owned(const_cast<Eigen::MatrixXf*>(m));
        std::lock_guard<std::mutex> lock(shelf->mu);
        if (shelf->kept == nullptr || shelf->version < version) {
          shelf->kept = std::move(owned);
          shelf->version = version;
        }
      });
  single_ = single;
}

Eigen::MatrixXd* VarianceForm::WritableBase() {
  // use_count() == 1: no snapshot holds B0 (only the writer hands them out, so none can appear
  // meanwhile), and it may change in place.
  if (base_.use_count() > 1) {
    base_ = std::make_shared<Eigen::MatrixXd>(*base_);
  } else {
    // use_count() is a relaxed load: order the last reader's reads of B0 (before it released
    // its snapshot) before the writes that follow.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  return base_.get();
}

VarianceForm::Snapshot VarianceForm::snapshot() const {
  Snapshot s;
  s.m = size();
  if (s.m == 0) return s;
  s.single = single_;
  if (!single_) s.base = base_;
  s.base_single = base_single_;
  s.corrections = corrections_;
  s.rank = rank_;
  return s;
}

void VarianceForm::Rebuild(const Eigen::Ref<const Eigen::MatrixXd>& chol_zz,
                           const Eigen::Ref<const Eigen::MatrixXd>& chol_m, double ridge) {
  rank_ = 0;
  corrections_.reset();
  updates_since_exact_ = 0;
  const Eigen::Index m = chol_m.rows();
  if (m == 0) {
    base_.reset();
    BaseChanged();
    return;
  }
  auto base = std::make_shared<Eigen::MatrixXd>(Eigen::MatrixXd::Zero(m, m));
  const auto zz = chol_zz.topLeftCorner(m, m);
  // Both inverses are block-diagonal on the groups of points that neither factor links (users
  // in different graph components): each block is formed alone, at its size cubed.
  const std::vector<std::vector<int>> groups = LowerPatternGroups(static_cast<int>(m), zz, chol_m);
  if (BlocksPay(groups, static_cast<int>(m))) {
    Eigen::MatrixXd block;
    for (const std::vector<int>& g : groups) {
      const Eigen::Index s = static_cast<Eigen::Index>(g.size());
      block.setZero(s, s);
      AddScaledInverse(GatherLowerBlock(zz, g), 1.0, &block);
      AddScaledInverse(GatherLowerBlock(chol_m, g), -ridge, &block);
      for (Eigen::Index c = 0; c < s; ++c) {
        for (Eigen::Index r = 0; r <= c; ++r) (*base)(g[r], g[c]) = block(r, c);
      }
    }
  } else {
    AddScaledInverse(zz, 1.0, base.get());
    AddScaledInverse(chol_m, -ridge, base.get());
  }
  base_ = std::move(base);
  BaseChanged();
}

namespace {

// The new blocks of (L L^T)^-1 for a lower factor L whose leading p x p block was known (see
// VarianceForm::Grow): P (p x k) and N = L22^-1 (k x k, lower triangular).
void BorderOfInverse(const Eigen::Ref<const Eigen::MatrixXd>& chol, Eigen::Index p,
                     Eigen::MatrixXd* border, Eigen::MatrixXd* corner_inverse) {
  const Eigen::Index k = chol.rows() - p;
  *corner_inverse = Eigen::MatrixXd::Identity(k, k);
  chol.bottomRightCorner(k, k).triangularView<Eigen::Lower>().solveInPlace(*corner_inverse);
  Eigen::MatrixXd x = chol.bottomLeftCorner(k, p).transpose();  // L21^T
  chol.topLeftCorner(p, p).triangularView<Eigen::Lower>().transpose().solveInPlace(x);
  border->noalias() = -x * corner_inverse->transpose();
}

}  // namespace

void VarianceForm::Grow(const Eigen::Ref<const Eigen::MatrixXd>& chol_zz,
                        const Eigen::Ref<const Eigen::MatrixXd>& chol_m, double ridge) {
  const Eigen::Index n = chol_m.rows();
  const Eigen::Index p = size();
  if (p == 0 || p > n || chol_zz.rows() != n) {
    Rebuild(chol_zz, chol_m, ridge);
    return;
  }
  if (p == n) return;
  const Eigen::Index k = n - p;
  Eigen::MatrixXd pz, nz, pm, nm;
  BorderOfInverse(chol_zz, p, &pz, &nz);
  BorderOfInverse(chol_m, p, &pm, &nm);
  auto base = std::make_shared<Eigen::MatrixXd>(n, n);
  base->topLeftCorner(p, p).triangularView<Eigen::Upper>() = *base_;
  base->topLeftCorner(p, p).selfadjointView<Eigen::Upper>().rankUpdate(pz, 1.0);
  base->topLeftCorner(p, p).selfadjointView<Eigen::Upper>().rankUpdate(pm, -ridge);
  base->topRightCorner(p, k).noalias() = pz * nz;
  base->topRightCorner(p, k).noalias() -= ridge * (pm * nm);
  base->bottomRightCorner(k, k).noalias() = nz.transpose() * nz;
  base->bottomRightCorner(k, k).noalias() -= ridge * (nm.transpose() * nm);
  base_ = std::move(base);
  BaseChanged();
  if (corrections_ != nullptr) {
    // A fresh buffer (published scorers keep theirs): the same columns with zero rows below.
    auto grown = std::make_shared<Corrections>();
    const int capacity = FoldRankFor(static_cast<int>(n));  // >= the old one, so >= rank_
    grown->u.resize(n, capacity);
    grown->u_single.resize(n, capacity);
    grown->sign.resize(capacity);
    grown->u.topLeftCorner(p, rank_) = corrections_->u.leftCols(rank_);
    grown->u.bottomLeftCorner(k, rank_).setZero();
    grown->u_single.topLeftCorner(p, rank_) = corrections_->u_single.leftCols(rank_);
    grown->u_single.bottomLeftCorner(k, rank_).setZero();
    grown->sign.head(rank_) = corrections_->sign.head(rank_);
    corrections_ = std::move(grown);
  }
  updates_since_exact_ += k;
}

void VarianceForm::Clear() {
  base_.reset();
  corrections_.reset();
  rank_ = 0;
  updates_since_exact_ = 0;
  BaseChanged();
}

int VarianceForm::fold_rank() const { return FoldRankFor(size()); }

void VarianceForm::MakeRoom(int columns) {
  if (corrections_ != nullptr && rank_ + columns <= fold_rank()) return;
  if (rank_ > 0) Fold();
  // A fresh buffer: scorers published earlier keep the previous one.
  auto fresh = std::make_shared<Corrections>();
  fresh->u.resize(size(), fold_rank());
  fresh->u_single.resize(size(), fold_rank());
  fresh->sign.resize(fold_rank());
  corrections_ = std::move(fresh);
  rank_ = 0;
}

bool VarianceForm::RankOne(const Eigen::Ref<const Eigen::VectorXd>& x, double v_dot_x, double ridge,
                           double sign) {
  if (base_ == nullptr) return true;  // nothing to keep current
  const double denominator = 1.0 + sign * v_dot_x;
  if (!(denominator > 0.0)) return false;
  MakeRoom(1);
  corrections_->u.col(rank_) = std::sqrt(ridge / denominator) * x;
  corrections_->u_single.col(rank_) = corrections_->u.col(rank_).cast<float>();
  corrections_->sign(rank_) = sign;
  ++rank_;
  ++updates_since_exact_;
  return true;
}

bool VarianceForm::RankUpdate(const Eigen::Ref<const Eigen::MatrixXd>& x,
                              const Eigen::Ref<const Eigen::MatrixXd>& v_dot_x, double ridge) {
  if (base_ == nullptr) return true;
  const Eigen::Index k = x.cols();
  if (k == 0) return true;
  // S = I + V^T X, symmetric positive definite in exact arithmetic; U = sqrt(lambda) X C^-T.
  Eigen::MatrixXd s = Eigen::MatrixXd::Identity(k, k);
  s += 0.5 * (v_dot_x + v_dot_x.transpose());
  Eigen::LLT<Eigen::MatrixXd> llt(s);
  if (llt.info() != Eigen::Success) return false;
  Eigen::MatrixXd u = std::sqrt(ridge) * x;
  llt.matrixU().solveInPlace<Eigen::OnTheRight>(u);  // U C^T = sqrt(lambda) X
  AddCorrection(u);
  return true;
}

void VarianceForm::AddCorrection(const Eigen::Ref<const Eigen::MatrixXd>& u) {
  if (base_ == nullptr) return;
  const Eigen::Index k = u.cols();
  if (k == 0) return;
  if (k > fold_rank()) {
    // More columns than a buffer holds: straight into B0 with the pending corrections.
    if (rank_ > 0) Fold();
    AddRankUpdateOnRows<Eigen::Upper>(u, 1.0, WritableBase());
    const std::vector<int> rows = NonZeroRows(u);
    BaseChanged(/*structural=*/false, &rows);
    corrections_.reset();
    rank_ = 0;
  } else {
    MakeRoom(static_cast<int>(k));
    corrections_->u.middleCols(rank_, k) = u;
    corrections_->u_single.middleCols(rank_, k) =
        corrections_->u.middleCols(rank_, k).cast<float>();
    corrections_->sign.segment(rank_, k).setOnes();
    rank_ += static_cast<int>(k);
  }
  updates_since_exact_ += k;
}

bool VarianceForm::ExactDue() const {
  return updates_since_exact_ >=
         std::max<int64_t>(kExactEvery, kExactEveryPerPoint * static_cast<int64_t>(size()));
}

void VarianceForm::Fold() {
  Eigen::MatrixXd* base = WritableBase();
  const auto u = corrections_->u.leftCols(rank_);
  const auto sign = corrections_->sign.head(rank_);
  const Eigen::Index positive = (sign.array() > 0.0).count();
  if (positive == rank_) {
    AddRankUpdateOnRows<Eigen::Upper>(u, 1.0, base);
  } else {
    // Downdates (forgotten observations) among them: two symmetric updates, one per sign.
    Eigen::MatrixXd plus(size(), positive), minus(size(), rank_ - positive);
    for (Eigen::Index i = 0, a = 0, b = 0; i < rank_; ++i) {
      if (sign(i) > 0.0) {
        plus.col(a++) = u.col(i);
      } else {
        minus.col(b++) = u.col(i);
      }
    }
    if (positive > 0) AddRankUpdateOnRows<Eigen::Upper>(plus, 1.0, base);
    AddRankUpdateOnRows<Eigen::Upper>(minus, -1.0, base);
  }
  const std::vector<int> rows = NonZeroRows(u);
  BaseChanged(/*structural=*/false, &rows);
  rank_ = 0;
  corrections_.reset();
}

double VarianceForm::SingleStddevError(const Eigen::Ref<const Eigen::MatrixXd>& kz,
                                       const Eigen::Ref<const Eigen::VectorXd>& k_ss) const {
  if (base_ == nullptr || kz.cols() == 0) return 0.0;
  Snapshot s;
  s.base_single = base_single_;
  s.corrections = corrections_;
  s.rank = rank_;
  s.m = size();
  Eigen::VectorXd q_single(kz.cols()), q_double(kz.cols());
  QuadraticForms(s, nullptr, kz, /*single=*/true, q_single);
  QuadraticForms(s, base_.get(), kz, /*single=*/false, q_double);
  double worst = 0.0;
  for (Eigen::Index j = 0; j < kz.cols(); ++j) {
    const double a = std::sqrt(std::max(0.0, k_ss(j) - q_single(j)));
    const double b = std::sqrt(std::max(0.0, k_ss(j) - q_double(j)));
    if (!(k_ss(j) > 0.0)) continue;
    const double error = std::abs(a - b) / std::sqrt(k_ss(j));
    worst = std::isfinite(error) ? std::max(worst, error) : INFINITY;
  }
  return worst;
}

// Format: u8 present; then matrix B0 (symmetric, written in full), u32 rank, u32 fold capacity,
// the rank correction columns, their signs, count updates since the exact rebuild.
void VarianceForm::Save(storage::Encoder* out) const {
  out->PutU8(base_ != nullptr ? 1 : 0);
  if (base_ == nullptr) return;
  // The whole symmetric matrix, column by column, as PutMatrix writes it, from the stored upper
  // triangle: column j is rows 0..j of column j (contiguous), then row j right of the diagonal.
  const Eigen::Index n = base_->rows();
  PutCount(out, n);
  PutCount(out, n);
  out->Reserve(static_cast<size_t>(n * n) * sizeof(double));
  Eigen::VectorXd below(n);
  for (Eigen::Index j = 0; j < n; ++j) {
    out->PutRawDoubles(base_->data() + j * n, static_cast<size_t>(j + 1));
    const Eigen::Index rest = n - j - 1;
    below.head(rest) = base_->row(j).tail(rest).transpose();
    out->PutRawDoubles(below.data(), static_cast<size_t>(rest));
  }
  out->PutFixed32(static_cast<uint32_t>(rank_));
  out->PutFixed32(static_cast<uint32_t>(corrections_ != nullptr ? corrections_->u.cols() : 0));
  if (rank_ > 0) {
    PutMatrix(out, corrections_->u.leftCols(rank_));
    PutVector(out, corrections_->sign.head(rank_));
  }
  PutCount(out, updates_since_exact_);
}

bool VarianceForm::Load(storage::Decoder* in, int size) {
  uint8_t present = 0;
  if (!in->GetU8(&present) || present > 1) return false;
  if (present == 0) {
    if (size != 0) return false;
    Clear();
    return true;
  }
  auto base = std::make_shared<Eigen::MatrixXd>();
  uint32_t rank = 0, capacity = 0;
  if (!GetMatrix(in, base.get()) || base->rows() != size || base->cols() != size || size == 0 ||
      !base->allFinite() || !in->GetFixed32(&rank) || !in->GetFixed32(&capacity) ||
      (capacity != 0 && static_cast<int>(capacity) != FoldRankFor(size)) || rank > capacity) {
    return false;
  }
  std::shared_ptr<Corrections> corrections;
  if (capacity > 0) {
    corrections = std::make_shared<Corrections>();
    corrections->u.resize(size, capacity);
    corrections->u_single.resize(size, capacity);
    corrections->sign.resize(capacity);
  }
  if (rank > 0) {
    Eigen::MatrixXd u;
    Eigen::VectorXd sign;
    if (!GetMatrix(in, &u) || u.rows() != size || u.cols() != rank || !u.allFinite() ||
        !GetVector(in, &sign) || sign.size() != rank ||
        !((sign.array() == 1.0) || (sign.array() == -1.0)).all()) {
      return false;
    }
    corrections->u.leftCols(rank) = u;
    corrections->u_single.leftCols(rank) = u.cast<float>();
    corrections->sign.head(rank) = sign;
  }
  int64_t updates = 0;
  if (!GetCount(in, &updates)) return false;
  base_ = std::move(base);
  BaseChanged();
  corrections_ = std::move(corrections);
  rank_ = static_cast<int>(rank);
  updates_since_exact_ = updates;
  return true;
}

namespace {

// k(Z, points) over the first m basis points, in the thread's workspace, and the mean from it.
Eigen::Map<Eigen::MatrixXd> CrossAndMean(
    const MultiUserKernel& kernel, const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
    const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms,
    const std::vector<int32_t>& basis_users, Eigen::Index m, const Eigen::VectorXd& weights,
    double prior_mean, int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
    Eigen::VectorXd* mean) {
  const Eigen::Index c = points.cols();
  ScoreWorkspace& ws = ThreadWorkspace();
  Eigen::Map<Eigen::MatrixXd> kz(ScoreWorkspace::Reserve(&ws.cross, m * c), m, c);
  Eigen::Map<Eigen::VectorXd> factors(ScoreWorkspace::Reserve(&ws.factors, m), m);
  kernel.CrossForUserInto(basis_x.leftCols(m), basis_squared_norms.head(m), basis_users, user,
                          points, kz, factors);
  mean->noalias() = kz.transpose() * weights;
  if (prior_mean != 0.0) mean->array() += prior_mean;
  return kz;
}

// When the user's factor is zero for most basis points (a kernel that is block diagonal over
// the graph's components, as the Green's function is: a user without edges, or in a small
// component, shares nothing with the others' points), the scores only involve the points where
// it is not: kz is zero on every other row, so the mean and kz^T B kz are exactly those of the
// gathered rows and block. Returns true, with the support in the workspace, when at most half of
// the first m points are in it; false (dense path) otherwise.
bool GatherSupport(const MultiUserKernel& kernel, const std::vector<int32_t>& basis_users,
                   Eigen::Index m, int32_t user) {
  ScoreWorkspace& ws = ThreadWorkspace();
  Eigen::Map<Eigen::VectorXd> factors(ScoreWorkspace::Reserve(&ws.factors, m), m);
  kernel.UserFactorsInto(basis_users, user, factors);
  ws.support.clear();
  for (Eigen::Index i = 0; i < m; ++i) {
    if (factors(i) != 0.0) {
      if (2 * static_cast<Eigen::Index>(ws.support.size() + 1) > m) return false;
      ws.support.push_back(i);
    }
  }
  return true;
}

// k(Z_S, points) over the support S (GatherSupport) in the workspace, and the mean from it.
Eigen::Map<Eigen::MatrixXd> SparseCrossAndMean(
    const MultiUserKernel& kernel, const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
    const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms, const Eigen::VectorXd& weights,
    double prior_mean, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean) {
  ScoreWorkspace& ws = ThreadWorkspace();
  const Eigen::Index s = static_cast<Eigen::Index>(ws.support.size()), c = points.cols(),
                     d = basis_x.rows();
  Eigen::Map<Eigen::MatrixXd> x(ScoreWorkspace::Reserve(&ws.support_x, d * s), d, s);
  Eigen::Map<Eigen::VectorXd> norms(ScoreWorkspace::Reserve(&ws.support_norms, s), s);
  Eigen::Map<Eigen::VectorXd> w(ScoreWorkspace::Reserve(&ws.support_weights, s), s);
  for (Eigen::Index k = 0; k < s; ++k) {
    const Eigen::Index i = ws.support[k];
    x.col(k) = basis_x.col(i);
    norms(k) = basis_squared_norms(i);
    w(k) = weights(i);
    ws.factors(k) = ws.factors(i);  // i >= k: compacts the factors in place
  }
  Eigen::Map<Eigen::MatrixXd> kz(ScoreWorkspace::Reserve(&ws.cross, s * c), s, c);
  if (s == 0) {
    mean->setConstant(prior_mean);
    return kz;
  }
  kernel.arm().CrossInto(x, norms, points, kz);
  kz.array().colwise() *= ws.factors.head(s).array();
  mean->noalias() = kz.transpose() * w;
  if (prior_mean != 0.0) mean->array() += prior_mean;
  return kz;
}

// q_j = kz_j^T B kz_j over the support: B's block on it (from B0's upper triangle, in the
// snapshot's precision, computed in double) and the corrections' rows.
void SparseQuadraticForms(const VarianceForm::Snapshot& form,
                          const Eigen::Ref<const Eigen::MatrixXd>& kz,
                          Eigen::Ref<Eigen::VectorXd> q) {
  ScoreWorkspace& ws = ThreadWorkspace();
  const Eigen::Index s = kz.rows(), c = kz.cols();
  if (s == 0) {
    q.setZero();
    return;
  }
  Eigen::Map<Eigen::MatrixXd> block(ScoreWorkspace::Reserve(&ws.support_base, s * s), s, s);
  for (Eigen::Index b = 0; b < s; ++b) {
    for (Eigen::Index a = 0; a <= b; ++a) {  // support ascending: (S_a, S_b) is upper
      block(a, b) = form.single
                        ? static_cast<double>((*form.base_single)(ws.support[a], ws.support[b]))
                        : (*form.base)(ws.support[a], ws.support[b]);
    }
  }
  Eigen::Map<Eigen::MatrixXd> product(ScoreWorkspace::Reserve(&ws.product, s * c), s, c);
  product.noalias() = block.selfadjointView<Eigen::Upper>() * kz;
  for (Eigen::Index j = 0; j < c; ++j) q(j) = kz.col(j).dot(product.col(j));
  if (form.rank > 0) {
    Eigen::Map<Eigen::MatrixXd> u(ScoreWorkspace::Reserve(&ws.support_u, s * form.rank), s,
                                  form.rank);
    for (Eigen::Index k = 0; k < s; ++k) {
      if (form.single) {
        u.row(k) = form.corrections->u_single.row(ws.support[k]).head(form.rank).cast<double>();
      } else {
        u.row(k) = form.corrections->u.row(ws.support[k]).head(form.rank);
      }
    }
    Eigen::Map<Eigen::MatrixXd> low(ScoreWorkspace::Reserve(&ws.low_rank, form.rank * c), form.rank,
                                    c);
    low.noalias() = u.transpose() * kz;
    for (Eigen::Index j = 0; j < c; ++j) {
      q(j) += form.corrections->sign.head(form.rank).dot(low.col(j).cwiseAbs2());
    }
  }
}

}  // namespace

void MeanWithVarianceForm(const MultiUserKernel& kernel,
                          const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                          const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms,
                          const std::vector<int32_t>& basis_users, Eigen::Index m,
                          const Eigen::VectorXd& weights, double prior_mean, int32_t user,
                          const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean) {
  mean->resize(points.cols());
  if (m == 0) {
    mean->setConstant(prior_mean);
    return;
  }
  if (GatherSupport(kernel, basis_users, m, user)) {
    SparseCrossAndMean(kernel, basis_x, basis_squared_norms, weights, prior_mean, points, mean);
    return;
  }
  CrossAndMean(kernel, basis_x, basis_squared_norms, basis_users, m, weights, prior_mean, user,
               points, mean);
}

void ScoreWithVarianceForm(const MultiUserKernel& kernel,
                           const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                           const Eigen::Ref<const Eigen::VectorXd>& basis_squared_norms,
                           const std::vector<int32_t>& basis_users,
                           const VarianceForm::Snapshot& form, const Eigen::VectorXd& weights,
                           double prior_mean, int32_t user,
                           const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
                           Eigen::VectorXd* stddev) {
  const Eigen::Index c = points.cols();
  const Eigen::Index m = form.size();
  mean->resize(c);
  stddev->resize(c);
  kernel.DiagonalInto(user, points, *stddev);  // the prior variance k_ss, for now
  if (m == 0) {
    mean->setConstant(prior_mean);
    *stddev = stddev->cwiseMax(0.0).cwiseSqrt();
    return;
  }
  Eigen::Map<Eigen::VectorXd> quadratic(ScoreWorkspace::Reserve(&ThreadWorkspace().forms, c), c);
  if (GatherSupport(kernel, basis_users, m, user)) {
    const Eigen::Map<Eigen::MatrixXd> kz =
        SparseCrossAndMean(kernel, basis_x, basis_squared_norms, weights, prior_mean, points, mean);
    SparseQuadraticForms(form, kz, quadratic);
  } else {
    const Eigen::Map<Eigen::MatrixXd> kz =
        CrossAndMean(kernel, basis_x, basis_squared_norms, basis_users, m, weights, prior_mean,
                     user, points, mean);
    QuadraticForms(form, form.base.get(), kz, form.single, quadratic);
  }
  *stddev = (*stddev - quadratic).cwiseMax(0.0).cwiseSqrt();
}

}  // namespace graphbandit
