// The kernel-bandit tasks of the tighter-confidence-bounds paper (MM; docs/algorithms.md §3.9): a
// reward function f*(x) = b sum_i w_i k(x, z_i) over 20 points z_i ~ U[0,1]^d with w ~ N(0, I),
// scaled so that its RKHS norm is exactly B (b = B / sqrt(w^T K_zz w)); each round 100 actions
// drawn uniformly from [0,1]^d, and rewards f*(x) + N(0, sigma^2). The kernel is the RBF
// exp(-r^2 / (2 l^2)) or a Matern kernel of length-scale l. One user, no context; every seed
// draws a new function. The policies of the paper are told the kernel (true_kernel()).
#ifndef GRAPHBANDIT_SIM_MM_ENVIRONMENT_H_
#define GRAPHBANDIT_SIM_MM_ENVIRONMENT_H_

#include <Eigen/Dense>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kernel/arm_kernel.h"
#include "sim/environment.h"

namespace graphbandit::sim {

struct MmOptions {
  KernelType kernel = KernelType::kRbf;
  double lengthscale = 0.5;
  int dim = 3;
  int actions = 100;
  int inducing = 20;
  double norm = 10.0;  // B
  double noise_std = 0.1;
  uint64_t seed = 1;
};

class MmEnvironment final : public SimEnvironment {
 public:
  static absl::StatusOr<MmEnvironment> Create(const MmOptions& options);
  std::string name() const override;
  int users() const override { return 1; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return options_.dim; }
  Round MakeRound(uint64_t index) const override;
  std::optional<TrueKernel> true_kernel() const override;

  double Value(const Eigen::Ref<const Eigen::VectorXd>& x) const;  // f*(x)
  // ||f*||_H, computed from the weights (equals options.norm up to rounding).
  double RkhsNorm() const;

 private:
  MmOptions options_;
  std::vector<Edge> edges_;
  Eigen::MatrixXd z_;        // dim x inducing, divided by the length-scale
  Eigen::VectorXd weights_;  // b w
};

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_MM_ENVIRONMENT_H_
