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
  Eigen::LLT<Eigen::MatrixXd> llt(a);
  if (llt.info() != Eigen::Success) {
    return absl::FailedPreconditionError("matrix is not numerically positive definite");
  }
  size_ = 0;
  Reserve(static_cast<int>(a.rows()));
  size_ = static_cast<int>(a.rows());
  storage_.topLeftCorner(size_, size_) = llt.matrixL();
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
  return absl::OkStatus();
}

absl::Status CholeskyFactor::Append(const Eigen::Ref<const Eigen::VectorXd>& b, double c,
                                    double min_pivot_sq) {
  Eigen::VectorXd l = b;
  ForwardSolveInPlace(l);
  const double pivot_sq = c - l.squaredNorm();
  if (!(pivot_sq > min_pivot_sq)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "Schur complement %.3g is not above %.3g: the new row is (numerically) dependent", pivot_sq,
        min_pivot_sq));
  }
  Reserve(size_ + 1);
  storage_.row(size_).head(size_) = l.transpose();
  storage_.col(size_).head(size_).setZero();
  storage_(size_, size_) = std::sqrt(pivot_sq);
  ++size_;
  return absl::OkStatus();
}

void CholeskyFactor::Sweep(Eigen::VectorXd& v, bool downdate) {
  // Givens-style sweep down the columns (the classic LINPACK dchud / dchdd recurrences).
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
