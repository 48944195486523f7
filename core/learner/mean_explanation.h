// A posterior mean split by where it comes from, for SelectArmRequest.explain.
//
// The kernel learners' mean is a representer sum: at the point s = (x, u),
//
//   mean(s) = m0 + sum_j K(s, z_j) w_j,   K(s, z_j) = (G[u, u_j] + eta [u = u_j]) k(x, x_j),
//
// over representer points z_j = (x_j, u_j) with weights w_j: the Nystrom dictionary with
// w = M^-1 Gamma (EK-UCB's projected regression, core/learner/nystrom_posterior.h), or every
// retained observation with alpha = (K + lambda I)^-1 (y - m0) for the exact GP. Each z_j is a
// past rewarded decision of user u_j, so each term belongs to a user: the terms of u's own points,
// those of other users' points (which reach u through the user kernel G, the graph), and m0,
// which every user shares. The three parts add up to the mean exactly in exact arithmetic, and
// to within rounding of the O(m) sums in floating point. This is a split by representer point,
// not by reward: each weight w_j mixes every observation's reward, and which user's points a
// Nystrom dictionary holds depends on its KORS draws (a user with rewards but no dictionary
// point of their own has own = 0: their rewards reach the mean through others' points).
#ifndef GRAPHBANDIT_CORE_LEARNER_MEAN_EXPLANATION_H_
#define GRAPHBANDIT_CORE_LEARNER_MEAN_EXPLANATION_H_

#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "core/kernel/multi_user_kernel.h"

namespace graphbandit {

struct MeanExplanation {
  double shared = 0.0;      // the prior mean m0
  double own = 0.0;         // terms of the user's own points
  double neighbours = 0.0;  // terms of other users' points, through the user kernel
  // One representer point (a past decision the state keeps) and what it adds to the mean.
  struct Point {
    int64_t index = 0;         // its position among the representer points
    int32_t user = 0;          // its user (a registered index)
    double user_factor = 0.0;  // G[u, u_j] (+ eta for the user's own points)
    double similarity = 0.0;   // k(x, x_j): how alike the two decisions' features are
    double contribution = 0.0;
  };
  // A user and the sum of its points' terms.
  struct User {
    int32_t user = 0;
    double user_factor = 0.0;
    int64_t points = 0;
    double contribution = 0.0;
  };
  // The points and users whose terms are largest in absolute value, largest first (ties by
  // index), at most `top` of each; terms that are exactly zero are left out.
  std::vector<Point> top_points;
  std::vector<User> top_users;
};

// Explains mean(point, user) = prior_mean + sum_j K((point, user), z_j) weights_j over the first
// weights.size() columns of basis_x (and users). `user` may be kUnknownUser (its factors are
// the user kernel's column for it: zero for the Green's function, so that the mean is the
// prior's). REQUIRES basis_x.cols() >= weights.size() <= users.size().
MeanExplanation ExplainRepresenterMean(const MultiUserKernel& kernel,
                                       const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                                       const std::vector<int32_t>& basis_users,
                                       const Eigen::Ref<const Eigen::VectorXd>& weights,
                                       double prior_mean, int32_t user,
                                       const Eigen::Ref<const Eigen::VectorXd>& point, int top);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEARNER_MEAN_EXPLANATION_H_
