#include "core/kernel/arm_kernel.h"

#include <cmath>

namespace graphbandit {

absl::string_view KernelTypeName(KernelType type) {
  switch (type) {
    case KernelType::kRbf:
      return "RBF";
    case KernelType::kMatern32:
      return "MATERN32";
    case KernelType::kMatern52:
      return "MATERN52";
    case KernelType::kLinear:
      return "LINEAR";
  }
  return "UNKNOWN";
}

double ArmKernel::operator()(const Eigen::Ref<const Eigen::VectorXd>& a,
                             const Eigen::Ref<const Eigen::VectorXd>& b) const {
  if (type_ == KernelType::kLinear) return (variance_ + linear_) * a.dot(b) + offset_;
  Eigen::MatrixXd sq(1, 1);
  sq(0, 0) = (a - b).squaredNorm();
  ProfileInPlace(sq);
  return sq(0, 0) + linear_ * a.dot(b) + offset_;
}

double ArmKernel::Diagonal(const Eigen::Ref<const Eigen::VectorXd>& a) const {
  return (type_ == KernelType::kLinear ? variance_ * a.squaredNorm() : variance_) +
         linear_ * a.squaredNorm() + offset_;
}

Eigen::VectorXd ArmKernel::Diagonal(const Eigen::Ref<const Eigen::MatrixXd>& points) const {
  if (type_ == KernelType::kLinear || linear_ != 0.0) {
    const double scale = type_ == KernelType::kLinear ? variance_ + linear_ : linear_;
    const double constant = type_ == KernelType::kLinear ? offset_ : variance_ + offset_;
    return (scale * points.colwise().squaredNorm().transpose()).array() + constant;
  }
  return Eigen::VectorXd::Constant(points.cols(), variance_ + offset_);
}

void ArmKernel::Cross(const Eigen::Ref<const Eigen::MatrixXd>& a,
                      const Eigen::Ref<const Eigen::MatrixXd>& b, Eigen::MatrixXd* out) const {
  out->resize(a.cols(), b.cols());
  if (a.cols() == 0 || b.cols() == 0) return;
  out->noalias() = a.transpose() * b;
  if (type_ == KernelType::kLinear) {
    *out *= variance_ + linear_;
    if (offset_ != 0.0) out->array() += offset_;
    return;
  }
  Eigen::MatrixXd inner;
  if (linear_ != 0.0) inner = *out;
  // |a - b|^2 = |a|^2 + |b|^2 - 2 a.b; clamp the round-off below zero.
  const Eigen::VectorXd na = a.colwise().squaredNorm().transpose();
  const Eigen::RowVectorXd nb = b.colwise().squaredNorm();
  out->array() = ((-2.0 * out->array()).colwise() + na.array()).rowwise() + nb.array();
  *out = out->cwiseMax(0.0);
  ProfileInPlace(*out);
  if (linear_ != 0.0) *out += linear_ * inner;
  if (offset_ != 0.0) out->array() += offset_;
}

void ArmKernel::DiagonalInto(const Eigen::Ref<const Eigen::MatrixXd>& points,
                             Eigen::Ref<Eigen::VectorXd> out) const {
  if (type_ == KernelType::kLinear || linear_ != 0.0) {
    const double scale = type_ == KernelType::kLinear ? variance_ + linear_ : linear_;
    const double constant = type_ == KernelType::kLinear ? offset_ : variance_ + offset_;
    out = (scale * points.colwise().squaredNorm().transpose()).array() + constant;
    return;
  }
  out.setConstant(variance_ + offset_);
}

void ArmKernel::CrossInto(const Eigen::Ref<const Eigen::MatrixXd>& a,
                          const Eigen::Ref<const Eigen::VectorXd>& a_squared_norms,
                          const Eigen::Ref<const Eigen::MatrixXd>& b,
                          Eigen::Ref<Eigen::MatrixXd> out) const {
  if (a.cols() == 0 || b.cols() == 0) return;
  out.noalias() = a.transpose() * b;
  if (type_ == KernelType::kLinear) {
    out *= variance_ + linear_;
    if (offset_ != 0.0) out.array() += offset_;
    return;
  }
  // |a - b|^2 = |a|^2 + |b|^2 - 2 a.b, clamped at zero, column by column (no temporaries).
  for (Eigen::Index j = 0; j < b.cols(); ++j) {
    const double nb = b.col(j).squaredNorm();
    out.col(j) = ((-2.0 * out.col(j).array() + a_squared_norms.array()) + nb).cwiseMax(0.0);
  }
  ProfileInPlace(out);
  // The linear part again from the inputs (Cross keeps a copy of the inner products instead).
  if (linear_ != 0.0) out.noalias() += linear_ * (a.transpose() * b);
  if (offset_ != 0.0) out.array() += offset_;
}

void ArmKernel::ProfileInPlace(Eigen::Ref<Eigen::MatrixXd> sq) const {
  switch (type_) {
    case KernelType::kRbf:
      sq = variance_ * (-0.5 * sq.array()).exp();
      return;
    case KernelType::kMatern32: {
      // Coefficient-wise in place (r is recomputed rather than held in a temporary).
      const double s3 = std::sqrt(3.0);
      sq.array() = variance_ * (1.0 + s3 * sq.array().sqrt()) * (-s3 * sq.array().sqrt()).exp();
      return;
    }
    case KernelType::kMatern52: {
      const double s5 = std::sqrt(5.0);
      sq.array() = variance_ * (1.0 + s5 * sq.array().sqrt() + (5.0 / 3.0) * sq.array()) *
                   (-s5 * sq.array().sqrt()).exp();
      return;
    }
    case KernelType::kLinear:
      return;  // not a stationary profile; handled by the callers
  }
}

}  // namespace graphbandit
