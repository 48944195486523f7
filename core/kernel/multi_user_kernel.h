// The Laplacian multi-user kernel K((s,u),(s',u')) = G[u,u'] * k_x(s,s') (LK eq. 2), evaluated
// block-wise: arm-kernel blocks come from one matrix product, user factors from cached columns
// of the user kernel (e.g. the Green's function). With a user variance eta > 0, each user also
// has a function of its own, independent of the graph:
//   K((s,u),(s',u')) = (G[u,u'] + eta [u = u']) k_x(s,s'),
// i.e. the user kernel G + eta I: what the graph shares plus each user's own deviation.
#ifndef GRAPHBANDIT_CORE_KERNEL_MULTI_USER_KERNEL_H_
#define GRAPHBANDIT_CORE_KERNEL_MULTI_USER_KERNEL_H_

#include <Eigen/Dense>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"

namespace graphbandit {

class MultiUserKernel {
 public:
  MultiUserKernel(ArmKernel arm, std::shared_ptr<const UserKernel> users,
                  double user_variance = 0.0)
      : arm_(arm), users_(std::move(users)), eta_(user_variance) {}

  const ArmKernel& arm() const { return arm_; }
  const std::shared_ptr<const UserKernel>& users() const { return users_; }
  void set_users(std::shared_ptr<const UserKernel> users) { users_ = std::move(users); }
  double user_variance() const { return eta_; }

  // G[users[i], user] for every i.
  Eigen::VectorXd UserFactors(const std::vector<int32_t>& users, int32_t user) const;

  // out(i, j) = K((x_i, users[i]), (q_j, user)).
  void CrossForUser(const Eigen::Ref<const Eigen::MatrixXd>& x, const std::vector<int32_t>& users,
                    int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& q,
                    Eigen::MatrixXd* out) const;

  // The same into `out` (x.cols() x q.cols(), already sized), with |x_i|^2 given and
  // `factors` (x.cols()) as workspace for the user factors: allocates nothing.
  void CrossForUserInto(const Eigen::Ref<const Eigen::MatrixXd>& x,
                        const Eigen::Ref<const Eigen::VectorXd>& x_squared_norms,
                        const std::vector<int32_t>& users, int32_t user,
                        const Eigen::Ref<const Eigen::MatrixXd>& q, Eigen::Ref<Eigen::MatrixXd> out,
                        Eigen::Ref<Eigen::VectorXd> factors) const;

  // factors(i) = G[users[i], user] (+ the user's own variance when users[i] == user), for i <
  // factors.size(): the user factors of CrossForUserInto, allocating nothing.
  void UserFactorsInto(const std::vector<int32_t>& users, int32_t user,
                       Eigen::Ref<Eigen::VectorXd> factors) const;

  // K((q_j, user), (q_j, user)) for every column j.
  Eigen::VectorXd Diagonal(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& q) const;
  void DiagonalInto(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& q,
                    Eigen::Ref<Eigen::VectorXd> out) const;

  // out(i, j) = K((a_i, users_a[i]), (b_j, users_b[j])). Fetches one user-kernel column per
  // distinct user of `a`. The user factors come first; when fewer than half of them are
  // non-zero (users in different graph components share nothing), the arm kernel is evaluated
  // only where a factor is not zero, and the other entries are exactly zero.
  void Cross(const Eigen::Ref<const Eigen::MatrixXd>& a, const std::vector<int32_t>& users_a,
             const Eigen::Ref<const Eigen::MatrixXd>& b, const int32_t* users_b,
             Eigen::MatrixXd* out) const;

  // The non-zero blocks of that matrix, for callers that can use them without the m x n
  // whole (a pass over the history, whose points each meet a few dictionary points when users
  // share little): one block per distinct user of `b`, over the rows whose factor is not zero
  // and the columns of that user, both ascending; block(r, c) is the entry at (rows[r],
  // cols[c]) as Cross computes it. Every other entry is exactly zero.
  struct CrossBlock {
    std::vector<Eigen::Index> rows;
    std::vector<Eigen::Index> cols;
    Eigen::MatrixXd block;
  };
  // Returns false, and leaves `blocks` empty, when at least half the entries are non-zero:
  // then Cross's one product is the cheaper form, and it is computed into `dense` (unless
  // null), with the user factors fetched once for both.
  bool CrossBlocks(const Eigen::Ref<const Eigen::MatrixXd>& a, const std::vector<int32_t>& users_a,
                   const Eigen::Ref<const Eigen::MatrixXd>& b, const int32_t* users_b,
                   std::vector<CrossBlock>* blocks, Eigen::MatrixXd* dense = nullptr) const;

 private:
  ArmKernel arm_;
  std::shared_ptr<const UserKernel> users_;
  double eta_ = 0.0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_KERNEL_MULTI_USER_KERNEL_H_
