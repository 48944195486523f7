// The exact GP posterior (docs/algorithms.md §0.4 and §1.6, the exact phase of LK-GP-UCB/TS):
//   mean(s) = k_t(s)^T (K_t + lambda I)^-1 y,  variance(s) = K(s,s) - k_t(s)^T (K_t + lambda I)^-1
//   k_t(s)
// kept as a Cholesky factor of K_t + lambda I that grows by one bordered row per observation
// (O(t^2)); decisions cost O(candidates * t^2). Meant for small problems and as the oracle the
// Nyström posterior is tested against.
#ifndef GRAPHBANDIT_CORE_LEARNER_EXACT_GP_POSTERIOR_H_
#define GRAPHBANDIT_CORE_LEARNER_EXACT_GP_POSTERIOR_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/kernel/multi_user_kernel.h"
#include "core/learner/posterior.h"
#include "core/linalg/cholesky_factor.h"
#include "core/linalg/growable_columns.h"

namespace graphbandit {

class ExactGpPosterior final : public Learner {
 public:
  // prior_mean: constant prior mean of the rewards (the posterior models reward - prior_mean).
  ExactGpPosterior(int dim, const ArmKernel& arm, std::shared_ptr<const UserKernel> users,
                   double ridge, double prior_mean = 0.0, double user_variance = 0.0);

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override;
  absl::Status Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                       double reward) override;
  absl::Status SetGraph(const UserGraph& graph, std::shared_ptr<const UserKernel> users) override;
  std::shared_ptr<const Scorer> Freeze() const override;
  // A refit rescales the stored points, switches kernel, ridge and prior mean, and refactors
  // K_t + lambda I from the history (O(t^3)). kors_mu is not used.
  double InformationGain() const override { return log_det_gain_; }
  // alpha^T K alpha = alpha^T (y - m0) - lambda |alpha|^2.
  double MeanNormSquared() const override;
  bool SupportsRefit() const override { return true; }
  FitData SpreadObservations(int64_t max) const override;
  absl::Status Refit(const LearnerRefit& refit) override;
  void SaveState(storage::Encoder* out) const override;
  absl::Status LoadState(storage::Decoder* in) override;

  int64_t history_size() const override { return history_x_.cols(); }
  int64_t dictionary_size() const override { return 0; }

  // log det(I + K_t / lambda), the information gain gamma_t of docs/algorithms.md §1.3 (by the P4
  // recursion).
  double LogDetGain() const { return log_det_gain_; }

  double ridge() const { return ridge_; }
  double prior_mean() const { return prior_mean_; }
  // Changes lambda and refactors K_t + lambda I from the history (O(t^3)).
  absl::Status SetRidge(double ridge);

  // The state, for LK-GP's switch to its grid phase (lk_gp_posterior.h).
  const MultiUserKernel& kernel() const { return kernel_; }
  auto history_points() const { return history_x_.view(); }
  const std::vector<int32_t>& history_users() const { return history_users_; }
  const std::vector<double>& history_rewards() const { return history_rewards_; }
  const CholeskyFactor& factor() const { return chol_; }  // of K_t + lambda I
  const Eigen::VectorXd& alpha() const { return Alpha(); }

 private:
  class FrozenScorer;
  const Eigen::VectorXd& Alpha() const;  // (K_t + lambda I)^-1 y, cached
  absl::Status Refactor();               // K_t + lambda I and the gain from the history

  int dim_;
  MultiUserKernel kernel_;
  double ridge_;
  double prior_mean_;
  GrowableColumns history_x_;
  std::vector<int32_t> history_users_;
  std::vector<double> history_rewards_;
  CholeskyFactor chol_;  // K_t + lambda I
  double log_det_gain_ = 0.0;
  mutable Eigen::VectorXd alpha_;
  mutable bool alpha_dirty_ = true;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_EXACT_GP_POSTERIOR_H_
