#include "core/linalg/nystrom_math.h"

#include "core/linalg/rank_update.h"

namespace graphbandit {

// The scoring formulas of the header, shared by the live learner and its frozen copies.
void ScoreNystrom(const MultiUserKernel& kernel, double ridge,
                  const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                  const std::vector<int32_t>& basis_users,
                  const Eigen::Ref<const Eigen::MatrixXd>& chol_m,
                  const Eigen::Ref<const Eigen::MatrixXd>& chol_zz, const Eigen::VectorXd& weights,
                  int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                  Eigen::VectorXd* mean, Eigen::VectorXd* stddev, double prior_mean) {
  const Eigen::VectorXd prior = kernel.Diagonal(user, points);
  if (basis_x.cols() == 0) {
    *mean = Eigen::VectorXd::Constant(points.cols(), prior_mean);
    *stddev = prior.cwiseMax(0.0).cwiseSqrt();
    return;
  }
  Eigen::MatrixXd kz;
  kernel.CrossForUser(basis_x, basis_users, user, points, &kz);
  mean->noalias() = kz.transpose() * weights;
  if (prior_mean != 0.0) mean->array() += prior_mean;
  Eigen::MatrixXd projected = kz;
  chol_m.triangularView<Eigen::Lower>().solveInPlace(projected);
  chol_zz.triangularView<Eigen::Lower>().solveInPlace(kz);
  const Eigen::ArrayXd residual =
      (prior.array() - kz.colwise().squaredNorm().transpose().array()).cwiseMax(0.0);
  *stddev =
      (ridge * projected.colwise().squaredNorm().transpose().array() + residual).sqrt().matrix();
}

void AccumulateHistory(const MultiUserKernel& kernel,
                       const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                       const std::vector<int32_t>& basis_users, const HistoryBuffer& history,
                       Eigen::MatrixXd* m_lower, Eigen::VectorXd* gamma, double prior_mean) {
  *gamma = Eigen::VectorXd::Zero(basis_x.cols());
  history.ForEachBlock(kHistoryBlock, [&](const auto& block, const int32_t* block_users,
                                          const double* block_rewards, int64_t len) {
    Eigen::MatrixXd k_bs;
    kernel.Cross(basis_x, basis_users, block, block_users, &k_bs);
    AddRankUpdateOnRows<Eigen::Lower>(k_bs, 1.0, m_lower);
    if (prior_mean == 0.0) {
      gamma->noalias() += k_bs * Eigen::Map<const Eigen::VectorXd>(block_rewards, len);
    } else {
      const Eigen::VectorXd centred =
          Eigen::Map<const Eigen::VectorXd>(block_rewards, len).array() - prior_mean;
      gamma->noalias() += k_bs * centred;
    }
  });
}

}  // namespace graphbandit
