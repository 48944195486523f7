// The arm kernel k_x over scaled joint inputs s = [context / l_c, features / l_x].
//
// Inputs are scaled once when a request arrives (see FeatureScaling), so every kernel here has
// unit length-scale: stationary kernels are functions of r = |s - s'| (docs/algorithms.md §0.2),
// the linear kernel is <s, s'>. Points are stored as the columns of a d x n matrix.
//
// k(s, s') = variance * profile(s, s') + linear * <s, s'> + offset. The linear part and the
// offset (a constant kernel), both 0 unless fitted, let the multi-user kernel G[u,u'] k(s,s')
// carry per-user linear trends and intercepts that are shared along the graph like the rest of
// the function (a stationary kernel alone needs many dictionary points for a linear trend).
#ifndef GRAPHBANDIT_CORE_KERNEL_ARM_KERNEL_H_
#define GRAPHBANDIT_CORE_KERNEL_ARM_KERNEL_H_

#include <Eigen/Dense>
#include <string>

#include "absl/strings/string_view.h"

namespace graphbandit {

enum class KernelType { kRbf, kMatern32, kMatern52, kLinear };

absl::string_view KernelTypeName(KernelType type);

class ArmKernel {
 public:
  ArmKernel(KernelType type, double variance, double offset = 0.0, double linear = 0.0)
      : type_(type), variance_(variance), offset_(offset), linear_(linear) {}

  KernelType type() const { return type_; }
  double variance() const { return variance_; }
  double offset() const { return offset_; }
  double linear() const { return linear_; }

  // k(a, b) for two points.
  double operator()(const Eigen::Ref<const Eigen::VectorXd>& a,
                    const Eigen::Ref<const Eigen::VectorXd>& b) const;

  // k(a, a): variance for stationary kernels, variance * |a|^2 for the linear kernel.
  double Diagonal(const Eigen::Ref<const Eigen::VectorXd>& a) const;
  // Diagonal of every column.
  Eigen::VectorXd Diagonal(const Eigen::Ref<const Eigen::MatrixXd>& points) const;
  // The same into `out` (points.cols() values), allocating nothing.
  void DiagonalInto(const Eigen::Ref<const Eigen::MatrixXd>& points,
                    Eigen::Ref<Eigen::VectorXd> out) const;

  // out(i, j) = k(a.col(i), b.col(j)), computed through one matrix product.
  void Cross(const Eigen::Ref<const Eigen::MatrixXd>& a, const Eigen::Ref<const Eigen::MatrixXd>& b,
             Eigen::MatrixXd* out) const;
  // The same into `out` (a.cols() x b.cols(), already sized), with |a_i|^2 given: the scoring
  // path's form, which allocates nothing (the decisions' hot path, core/linalg/variance_form.h).
  void CrossInto(const Eigen::Ref<const Eigen::MatrixXd>& a,
                 const Eigen::Ref<const Eigen::VectorXd>& a_squared_norms,
                 const Eigen::Ref<const Eigen::MatrixXd>& b, Eigen::Ref<Eigen::MatrixXd> out) const;

 private:
  // Applies the stationary profile to squared distances, in place.
  void ProfileInPlace(Eigen::Ref<Eigen::MatrixXd> squared_distance) const;

  KernelType type_;
  double variance_;
  double offset_;
  double linear_;
};

// Divides the context and arm parts of a joint input by their length-scales: one for the
// context and one for the arm features, or (once fitted per dimension) one per dimension.
struct FeatureScaling {
  int context_dim = 0;
  int arm_dim = 0;
  double context_lengthscale = 1.0;
  double arm_lengthscale = 1.0;
  // When non-empty (joint_dim() values), the length-scale of each joint dimension; it replaces
  // the two shared ones.
  Eigen::VectorXd per_dimension;

  int joint_dim() const { return context_dim + arm_dim; }

  // The length-scale of joint dimension i.
  double lengthscale(int i) const {
    if (per_dimension.size() == joint_dim()) return per_dimension(i);
    return i < context_dim ? context_lengthscale : arm_lengthscale;
  }
  // Every joint dimension's length-scale.
  Eigen::VectorXd lengthscales() const {
    Eigen::VectorXd l(joint_dim());
    for (int i = 0; i < joint_dim(); ++i) l(i) = lengthscale(i);
    return l;
  }

  // Writes [context / l_c, arm / l_x] into out (length joint_dim()).
  void Apply(const double* context, const double* arm, double* out) const {
    if (per_dimension.size() == joint_dim()) {
      for (int i = 0; i < context_dim; ++i) out[i] = context[i] / per_dimension(i);
      for (int i = 0; i < arm_dim; ++i) {
        out[context_dim + i] = arm[i] / per_dimension(context_dim + i);
      }
      return;
    }
    for (int i = 0; i < context_dim; ++i) out[i] = context[i] / context_lengthscale;
    for (int i = 0; i < arm_dim; ++i) out[context_dim + i] = arm[i] / arm_lengthscale;
  }
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_KERNEL_ARM_KERNEL_H_
