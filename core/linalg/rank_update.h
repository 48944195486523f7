// A symmetric rank-r update of one triangle of a matrix that touches only the rows the update
// touches. Learning from users in their own graph components produces updates whose columns
// are zero outside those users' dictionary points (see cholesky_factor.h, Separates); the
// scoring form's folds (variance_form.cc), the spread refit's pass over the history
// (nystrom_posterior_refit.cc) and the rebuild from the history (nystrom_math.cc) then pay for the
// blocks the columns share instead of O(n^2 r).
#ifndef GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_
#define GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_

#include <Eigen/Dense>

namespace graphbandit {

// The `UpLo` (Eigen::Lower or Eigen::Upper) triangle of *m += sign u u^T; the other triangle
// is not touched. Three ways to the same sum, by what they cost:
//  - the columns of u fall into groups by the rows where they are non-zero (users in
//    different graph components give columns on disjoint rows): each group's rank update on
//    its own rows, gathered and added back, when that costs less than half of the next way;
//  - where at most half of u's rows are non-zero, the update on the block of those rows;
//  - otherwise Eigen's rank update of the whole triangle.
// Entries whose rows and column no column of u touches are left as they are. Returns the way
// taken (kNone when u is zero), which callers may ignore.
enum class RankUpdateWay { kNone, kGroups, kRows, kWhole };
template <unsigned int UpLo>
RankUpdateWay AddRankUpdateOnRows(const Eigen::Ref<const Eigen::MatrixXd>& u, double sign,
                                  Eigen::MatrixXd* m);

extern template RankUpdateWay AddRankUpdateOnRows<Eigen::Lower>(
    const Eigen::Ref<const Eigen::MatrixXd>&, double, Eigen::MatrixXd*);
extern template RankUpdateWay AddRankUpdateOnRows<Eigen::Upper>(
    const Eigen::Ref<const Eigen::MatrixXd>&, double, Eigen::MatrixXd*);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_
