// The projected (Nystrom) ridge regression shared by EK-UCB's incremental state
// (nystrom_posterior.h) and the batched baseline (batched_nystrom_posterior.h). With dictionary
// Z, history S (rewards Y), kz = K_Z(s), k_ss = K(s, s):
//   mean(s)     = kz^T M^-1 Gamma,      M = K_ZS K_SZ + lambda K_ZZ,  Gamma = K_ZS Y
//   variance(s) = lambda kz^T M^-1 kz + (k_ss - kz^T K_ZZ^-1 kz)
// (EK Prop. 4.2 times lambda: the GP-posterior variance with noise variance lambda).
#ifndef GRAPHBANDIT_CORE_LINALG_NYSTROM_MATH_H_
#define GRAPHBANDIT_CORE_LINALG_NYSTROM_MATH_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/kernel/multi_user_kernel.h"
#include "core/learner/history_buffer.h"

namespace graphbandit {

// History is processed in blocks of this many points.
inline constexpr int kHistoryBlock = 2048;

// Mean and standard deviation at `points` (all for `user`) from the lower Cholesky factors of
// M and K_ZZ and the weights M^-1 Gamma, where Gamma = K_ZS (Y - prior_mean): the mean is
// prior_mean + kz^T weights.
void ScoreNystrom(const MultiUserKernel& kernel, double ridge,
                  const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                  const std::vector<int32_t>& basis_users,
                  const Eigen::Ref<const Eigen::MatrixXd>& chol_m,
                  const Eigen::Ref<const Eigen::MatrixXd>& chol_zz, const Eigen::VectorXd& weights,
                  int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                  Eigen::VectorXd* mean, Eigen::VectorXd* stddev, double prior_mean = 0.0);

// Adds K_ZS K_SZ to the lower triangle of *m_lower and sets *gamma = K_ZS (Y - prior_mean),
// over `history`.
void AccumulateHistory(const MultiUserKernel& kernel,
                       const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                       const std::vector<int32_t>& basis_users, const HistoryBuffer& history,
                       Eigen::MatrixXd* m_lower, Eigen::VectorXd* gamma, double prior_mean = 0.0);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_NYSTROM_MATH_H_
