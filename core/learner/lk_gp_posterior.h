// LK-GP: the exact GP posterior of the Laplacian Kernelized Bandit paper as its authors run it
// (docs/algorithms.md §1.6, LK appendix F.4-F.5), for any user kernel (COOP-KernelUCB's agent
// kernels included) and any arm kernel:
//  * exact phase: a Cholesky factor of K_t + lambda I grown by one bordered row per reward;
//  * grid phase: when candidates come from a known finite pool D, from t* = min(1500,
//    floor(n^(1/3)) |D|) on, the posterior mean and covariance over every (item, user) pair
//    P = D x U are updated by the rank-one recursion P5: with d = lambda + Q[p,p], q = Q[:,p],
//    m += q (y - m[p]) / d, Q -= q q^T / d (O(|P|^2) per reward, O(1) per candidate);
//  * lambda schedule: lambda_t = clip(lambda_base * S_spec * T / (T + t), 1e-6, 1e-1) with
//    S_spec = lambda_2(L) / lambda_max(L), re-evaluated at t = 200, 400, 800, ... and applied
//    (refactoring from the history) only when it moved by more than 20%.
// Both phases compute the same posterior; the grid is only a faster recursion for small pools.
// In the grid phase every scored point must belong to the pool (others score NaN).
#ifndef GRAPHBANDIT_CORE_LEARNER_LK_GP_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_LK_GP_POSTERIOR_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/kernel/multi_user_kernel.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/lk_gp_options.h"
#include "core/learner/posterior.h"
#include "core/linalg/growable_columns.h"

namespace graphbandit {

// lambda_2(L) / lambda_max(L) of the graph's Laplacian, with lambda_2 read as the smallest
// eigenvalue above 1e-10 * lambda_max (docs/algorithms.md §1.10 item 11: ER graphs are often
// disconnected, and a literal lambda_2 = 0 would pin the schedule at its floor). 0 without edges.
double SpectralRatio(const UserGraph& graph);

class LkGpPosterior final : public Learner {
 public:
  LkGpPosterior(int dim, const ArmKernel& arm, std::shared_ptr<const UserKernel> users,
                const LkGpOptions& options);

  // Declares that candidates come from `pool` (points as columns) and users from 0..users-1,
  // which enables the grid phase (when options.grid).
  absl::Status SetPool(const Eigen::MatrixXd& pool, int32_t users);

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> users) override;
  std::shared_ptr<const Scorer> Freeze() const override;

  int64_t history_size() const override { return history_x_.cols(); }
  int64_t dictionary_size() const override { return 0; }

  double ridge() const { return ridge_; }
  bool in_grid_phase() const { return grid_active_; }
  // t*, or -1 when there is no pool.
  int64_t switch_point() const { return switch_point_; }
  int rebuilds() const { return rebuilds_; }

 private:
  class GridScorer;
  double ScheduledRidge(int64_t t) const;
  // Rebuilds the exact posterior from the history (and the grid from it when active).
  absl::Status Rebuild();
  absl::Status StartGrid();
  int PoolIndex(const Eigen::Ref<const Eigen::VectorXd>& point) const;

  int dim_;
  MultiUserKernel kernel_;
  LkGpOptions options_;
  double ridge_;
  int rebuilds_ = 0;
  int64_t next_epoch_;

  GrowableColumns history_x_;
  std::vector<int32_t> history_users_;
  std::vector<double> history_rewards_;
  std::unique_ptr<ExactGpPosterior> exact_;  // null in the grid phase

  // Grid phase over P = pool x users, index p = item * users + user.
  std::shared_ptr<const Eigen::MatrixXd> pool_;
  std::shared_ptr<const absl::flat_hash_map<uint64_t, std::vector<int>>> pool_index_;
  int32_t pool_users_ = 0;
  int64_t switch_point_ = -1;
  bool grid_active_ = false;
  Eigen::VectorXd grid_mean_;
  Eigen::MatrixXd grid_cov_;  // lower triangle maintained
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_LK_GP_POSTERIOR_H_
