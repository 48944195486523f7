#include "core/linalg/cholesky_factor.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace graphbandit {

void CholeskyFactor::Reserve(int n) {
  if (n <= storage_.rows()) return;
  const int capacity = std::max<int>(n, std::max<Eigen::Index>(8, 2 * storage_.rows()));
  Eigen::MatrixXd grown = Eigen::MatrixXd::Zero(capacity, capacity);
  grown.topLeftCorner(size_, size_) = storage_.topLeftCorner(size_, size_);
  storage_.swap(grown);
}

absl::Status CholeskyFactor::Reset(const Eigen::Ref<const Eigen::MatrixXd>& a) {
  const int n = static_cast<int>(a.rows());
  // The factor's non-zeros stay inside the components of A's pattern (elimination never fills
  // across them), so the components found here are the factor's, or coarser.
  DisjointSets components(n);
  components.JoinLowerPattern(a);
  std::vector<std::vector<int>> groups = components.Groups();
  if (BlocksPay(groups, n)) {
    std::vector<Eigen::MatrixXd> factors;
    factors.reserve(groups.size());
    for (const std::vector<int>& g : groups) {
      Eigen::LLT<Eigen::MatrixXd> llt(GatherLowerBlock(a, g));
      if (llt.info() != Eigen::Success) {
        return absl::FailedPreconditionError("matrix is not numerically positive definite");
      }
      factors.push_back(llt.matrixL());
    }
    Reserve(n);  // keeps the live block, so that a failed allocation leaves the factor as it was
    Changed();
    size_ = n;
    storage_.topLeftCorner(n, n).setZero();
    for (size_t b = 0; b < groups.size(); ++b) {
      const std::vector<int>& g = groups[b];
      for (size_t c = 0; c < g.size(); ++c) {
        for (size_t r = c; r < g.size(); ++r) storage_(g[r], g[c]) = factors[b](r, c);
      }
    }
  } else {
    Eigen::LLT<Eigen::MatrixXd> llt(a);
    if (llt.info() != Eigen::Success) {
      return absl::FailedPreconditionError("matrix is not numerically positive definite");
    }
    Reserve(n);
    Changed();
    size_ = n;
    storage_.topLeftCorner(size_, size_) = llt.matrixL();
  }
  components_ = std::move(components);
  components_valid_ = true;
  return absl::OkStatus();
}

absl::Status CholeskyFactor::Restore(Eigen::MatrixXd storage, int size) {
  if (storage.rows() != storage.cols() || size < 0 || size > storage.rows()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot restore a factor of size %d in %d x %d storage", size,
                        storage.rows(), storage.cols()));
  }
  storage.topLeftCorner(size, size).triangularView<Eigen::StrictlyUpper>().setZero();
  storage_.swap(storage);
  size_ = size;
  Changed();
  return absl::OkStatus();
}

absl::Status CholeskyFactor::Append(const Eigen::Ref<const Eigen::VectorXd>& b, double c,
                                    double min_pivot_sq) {
  Eigen::VectorXd l = b;
  ForwardSolveInPlace(l);
  return AppendSolved(l, c, min_pivot_sq);
}

absl::Status CholeskyFactor::AppendSolved(const Eigen::Ref<const Eigen::VectorXd>& l, double c,
                                          double min_pivot_sq) {
  if (l.size() != size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a solved row of %d entries for a factor of size %d", l.size(), size_));
  }
  const double pivot_sq = c - l.squaredNorm();
  if (!(pivot_sq > min_pivot_sq)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Schur complement %.3g is not above %.3g: the new row is (numerically) dependent", pivot_sq,
        min_pivot_sq));
  }
  const bool components = ComponentsKnown();
  Changed();
  Reserve(size_ + 1);
  storage_.row(size_).head(size_) = l.transpose();
  storage_.col(size_).head(size_).setZero();
  storage_(size_, size_) = std::sqrt(pivot_sq);
  ++size_;
  if (components) {  // the new row joins the components its non-zeros reach
    components_valid_ = true;
    components_.Add();
    for (int i = 0; i + 1 < size_; ++i) {
      if (l(i) != 0.0) components_.Join(i, size_ - 1);
    }
  }
  return absl::OkStatus();
}

void CholeskyFactor::Sweep(Eigen::VectorXd& v, bool downdate) {
  // Givens-style sweep down the columns (the classic LINPACK dchud / dchdd recurrences).
  KeepComponentsThrough(v);
  for (int k = 0; k < size_; ++k) {
    const double lkk = storage_(k, k);
    const double r = downdate ? std::sqrt((lkk - v(k)) * (lkk + v(k))) : std::hypot(lkk, v(k));
    const double c = r / lkk;
    const double s = v(k) / lkk;
    storage_(k, k) = r;
    const int tail = size_ - k - 1;
    if (tail == 0) break;
    auto column = storage_.col(k).segment(k + 1, tail);
    auto rest = v.segment(k + 1, tail);
    if (downdate) {
      column = (column - s * rest) / c;
    } else {
      column = (column + s * rest) / c;
    }
    rest = c * rest - s * column;
  }
}

void CholeskyFactor::RankOneUpdate(Eigen::VectorXd v) { Sweep(v, /*downdate=*/false); }

void CholeskyFactor::RankUpdate(const Eigen::Ref<const Eigen::MatrixXd>& v, Reflected* reflected) {
  const int n = size_;
  const int k = static_cast<int>(v.cols());
  if (n > 0 && k > 0) KeepComponentsThrough(v);  // (nothing changes otherwise)
  if (k == 1 && reflected == nullptr) {
    if (n > 0) RankOneUpdate(v.col(0));
    return;
  }
  RankUpdateLower(storage_.topLeftCorner(n, n), v, reflected);
}

void CholeskyFactor::RankUpdateLower(Eigen::Ref<Eigen::MatrixXd> storage,
                                     const Eigen::Ref<const Eigen::MatrixXd>& v,
                                     Reflected* reflected) {
  const int n = static_cast<int>(storage.rows());
  const int k = static_cast<int>(v.cols());
  if (reflected != nullptr) {
    // The last k rows of Q, [0 I] H_0 H_1 ..., built panel by panel as the reflections are
    // found: a panel's columns of q21 are zero until its own reflections, which set them to
    // -(F Y_V) T diag(u0) and take F (the rows' part over V's columns, q22 at the end) to
    // F - (F Y_V) T Y_V^T.
    reflected->q21.setZero(k, n);
    reflected->q22.setIdentity(k, k);
  }
  if (n == 0 || k == 0) return;
  // [L V] Q = [L' 0] for an orthogonal Q, so that L' L'^T = L L^T + V V^T. Step j reflects the
  // row [L(j,j), V(j,:)] onto [r, 0...] (r > 0) with H_j = I - tau_j u_j u_j^T acting on column
  // j of L and the columns of V only; rows above j are zero in both, so later steps keep them
  // zero. The reflections of a panel of b columns are applied to the rows below it at once, in
  // the compact WY form H_0 ... H_{b-1} = I - Y T Y^T (LAPACK's dlarft): Y's column t holds
  // u_t, which is u0_t at panel column t and the row vector y_t over the columns of V, and T is
  // b x b upper triangular. For the rows below, Z = [L(rows, panel) V(rows, :)] becomes
  // Z - (Z Y) T Y^T, where Z Y = L(rows, panel) diag(u0) + V(rows, :) Y_V: three products.
  // Inside a panel V's rows are worked on transposed (k x b, one contiguous column per row), so
  // that the panel's own reflections run on contiguous vectors of length k.
  Eigen::MatrixXd w = v;  // V as the reflections transform it
  Eigen::MatrixXd yv, gram, t_factor, zy, zyt;
  Eigen::VectorXd u0, taus, dots;
  for (int j0 = 0; j0 < n; j0 += kRankPanel) {
    const int b = std::min(kRankPanel, n - j0);
    u0.resize(b);
    taus.resize(b);
    auto panel_l = storage.block(j0, j0, b, b);
    // The panel's rows of V, transposed; the reflections fold them into L's diagonal, so that
    // they end as zeros in V, and what stays in yv are the reflectors' parts over V's columns.
    yv = w.middleRows(j0, b).transpose();
    w.middleRows(j0, b).setZero();
    for (int t = 0; t < b; ++t) {
      auto y = yv.col(t);
      const double tail = y.squaredNorm();
      const double a0 = panel_l(t, t);
      // Nothing to fold, or a row of V below round-off beside L(t,t) (|V(t,:)| <= eps L(t,t)):
      // H_t = I, and the row is dropped. Dropping it changes A + V V^T by at most eps L(t,t)
      // |V(i,:)| per entry, within the update's own rounding. Folding it would divide by
      // `tail`, which for a kernel column's far entries can be subnormal: 2 / tail overflows
      // and the factor turns to inf and NaN (kNegligibleFold).
      if (!(tail > kNegligibleFold * a0 * a0)) {
        u0(t) = 0.0;
        taus(t) = 0.0;
        y.setZero();
        continue;
      }
      const double r = std::sqrt(a0 * a0 + tail);
      // u = [a0 - r, V(t,:)], with a0 - r written without cancellation.
      u0(t) = -tail / (a0 + r);
      taus(t) = 2.0 / (u0(t) * u0(t) + tail);
      // The panel's rows t+1..b-1: z <- z - tau (z u) u^T.
      const int below = b - t - 1;
      if (below > 0) {
        auto later = yv.rightCols(below);
        dots.noalias() = later.transpose() * y;
        dots += panel_l.col(t).tail(below) * u0(t);
        dots *= taus(t);
        panel_l.col(t).tail(below) -= u0(t) * dots;
        later.noalias() -= y * dots.transpose();
      }
      panel_l(t, t) = r;
    }
    const int rest = n - j0 - b;
    if (rest == 0 && reflected == nullptr) break;
    // T: T(t,t) = tau_t, T(0:t, t) = -tau_t T(0:t, 0:t) (Y(:, 0:t)^T u_t); the panel parts of
    // distinct reflectors never overlap, so Y^T u_t is Y_V^T y_t, read off one Gram matrix.
    gram.noalias() = yv.transpose() * yv;
    t_factor.setZero(b, b);
    for (int t = 0; t < b; ++t) {
      if (t > 0) {
        t_factor.col(t).head(t).noalias() =
            t_factor.topLeftCorner(t, t).triangularView<Eigen::Upper>() * gram.col(t).head(t);
        t_factor.col(t).head(t) *= -taus(t);
      }
      t_factor(t, t) = taus(t);
    }
    if (reflected != nullptr) {
      Eigen::MatrixXd& f = reflected->q22;
      zy.noalias() = f * yv;
      zyt.noalias() = zy * t_factor.triangularView<Eigen::Upper>();
      reflected->q21.middleCols(j0, b).noalias() = -(zyt * u0.asDiagonal());
      f.noalias() -= zyt * yv.transpose();
      if (rest == 0) break;
    }
    auto rows_l = storage.block(j0 + b, j0, rest, b);
    auto rows_v = w.bottomRows(rest);
    zy.noalias() = rows_v * yv;
    zy += rows_l * u0.asDiagonal();
    zyt.noalias() = zy * t_factor.triangularView<Eigen::Upper>();
    rows_l -= zyt * u0.asDiagonal();
    rows_v.noalias() -= zyt * yv.transpose();
  }
}

bool CholeskyFactor::ComponentsKnown() const {
  return components_valid_ && components_.size() == size_;
}

void CholeskyFactor::KeepComponentsThrough(const Eigen::Ref<const Eigen::MatrixXd>& v) {
  // The factor of A + V V^T (or A - v v^T) has its non-zeros within the components of A's
  // pattern joined by each column's non-zero rows: join those instead of finding them again.
  const bool components = ComponentsKnown();
  Changed();
  if (!components) return;
  components_valid_ = true;
  for (Eigen::Index c = 0; c < v.cols(); ++c) {
    if (components_.AllOne()) return;  // all one already
    int first = -1;
    for (int i = 0; i < size_; ++i) {
      if (v(i, c) == 0.0) continue;
      if (first < 0) {
        first = i;
      } else {
        components_.Join(first, i);
      }
    }
  }
}

void CholeskyFactor::FindComponents() {
  components_.Reset(size_);
  components_.JoinLowerPattern(matrix());
  components_valid_ = true;
}

bool CholeskyFactor::Separates(const std::vector<int>& support) {
  // The support separates exactly when it is a union of whole components: no non-zero of L
  // links it to the rest.
  if (!ComponentsKnown()) FindComponents();
  std::vector<int> roots;
  roots.reserve(support.size());
  for (size_t a = 0; a < support.size(); ++a) {
    // A support is sorted, distinct and inside the factor; anything else cannot be proved
    // separate this way (a repeated row would be counted twice).
    if (support[a] < 0 || support[a] >= size_ || (a > 0 && support[a] <= support[a - 1])) {
      return false;
    }
    roots.push_back(components_.Find(support[a]));
  }
  std::sort(roots.begin(), roots.end());
  for (size_t a = 0; a < roots.size();) {
    size_t b = a;
    while (b < roots.size() && roots[b] == roots[a]) ++b;
    if (static_cast<int>(b - a) != components_.SetSize(roots[a])) return false;
    a = b;
  }
  return true;
}

Eigen::MatrixXd CholeskyFactor::GatherLower(const std::vector<int>& support) const {
  return GatherLowerBlock(matrix(), support);
}

void CholeskyFactor::ScatterLower(const std::vector<int>& support,
                                  const Eigen::Ref<const Eigen::MatrixXd>& block) {
  const bool components = ComponentsKnown();
  Changed();
  const Eigen::Index s = static_cast<Eigen::Index>(support.size());
  for (Eigen::Index c = 0; c < s; ++c) {
    for (Eigen::Index r = c; r < s; ++r) storage_(support[r], support[c]) = block(r, c);
  }
  if (components) {  // only the block changed: its non-zeros join their rows' components
    components_valid_ = true;
    for (Eigen::Index c = 0; c < s; ++c) {
      for (Eigen::Index r = c + 1; r < s; ++r) {
        if (block(r, c) != 0.0) components_.Join(support[r], support[c]);
      }
    }
  }
}

absl::Status CholeskyFactor::RankOneDowndate(Eigen::VectorXd v) {
  // Check feasibility first so that a failed downdate leaves the factor untouched:
  // A - v v^T is positive definite iff |L^-1 v| < 1.
  Eigen::VectorXd p = v;
  ForwardSolveInPlace(p);
  if (!(p.squaredNorm() < 1.0 - 1e-12)) {
    return absl::FailedPreconditionError("rank-one downdate would lose positive definiteness");
  }
  Sweep(v, /*downdate=*/true);
  return absl::OkStatus();
}

const Eigen::MatrixXf& CholeskyFactor::SingleLower() {
  if (single_ == nullptr) {
    auto single = std::make_shared<Eigen::MatrixXf>(size_, size_);
    single->triangularView<Eigen::Lower>() = matrix().cast<float>();
    single->triangularView<Eigen::StrictlyUpper>().setZero();
    single_ = std::move(single);
  }
  return *single_;
}

Eigen::VectorXd CholeskyFactor::Solve(const Eigen::Ref<const Eigen::VectorXd>& b) const {
  Eigen::VectorXd x = b;
  lower().solveInPlace(x);
  matrix().transpose().triangularView<Eigen::Upper>().solveInPlace(x);
  return x;
}

double CholeskyFactor::LogDeterminant() const {
  return 2.0 * matrix().diagonal().array().log().sum();
}

}  // namespace graphbandit
