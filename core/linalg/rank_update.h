// A symmetric rank-r update of one triangle of a matrix that touches only the rows the update
// touches. Learning from users in their own graph components produces updates whose columns
// are zero outside those users' dictionary points (see cholesky_factor.h, Separates); the
// scoring form's folds (variance_form.cc) and the spread refit's pass over the history
// (nystrom_posterior.cc) then pay O(s^2 r) instead of O(n^2 r).
#ifndef GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_
#define GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_

#include <Eigen/Dense>
#include <vector>

namespace graphbandit {

// The `UpLo` (Eigen::Lower or Eigen::Upper) triangle of *m += sign u u^T. Where more than half
// of u's rows are non-zero, Eigen's rank update of the whole triangle; otherwise the same sum
// on the block of those rows, gathered, updated and added back (the other entries unchanged).
template <unsigned int UpLo>
void AddRankUpdateOnRows(const Eigen::Ref<const Eigen::MatrixXd>& u, double sign,
                         Eigen::MatrixXd* m) {
  static_assert(UpLo == Eigen::Lower || UpLo == Eigen::Upper);
  std::vector<Eigen::Index> rows;
  for (Eigen::Index i = 0; i < u.rows(); ++i) {
    if ((u.row(i).array() != 0.0).any()) rows.push_back(i);
  }
  if (2 * static_cast<Eigen::Index>(rows.size()) > u.rows()) {
    m->selfadjointView<UpLo>().rankUpdate(u, sign);
    return;
  }
  const auto s = static_cast<Eigen::Index>(rows.size());
  Eigen::MatrixXd gathered(s, u.cols());
  for (Eigen::Index r = 0; r < s; ++r) gathered.row(r) = u.row(rows[r]);
  Eigen::MatrixXd block = Eigen::MatrixXd::Zero(s, s);
  block.selfadjointView<UpLo>().rankUpdate(gathered, sign);
  for (Eigen::Index c = 0; c < s; ++c) {
    const Eigen::Index first = UpLo == Eigen::Lower ? c : 0;
    const Eigen::Index last = UpLo == Eigen::Lower ? s - 1 : c;
    for (Eigen::Index r = first; r <= last; ++r) (*m)(rows[r], rows[c]) += block(r, c);
  }
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LINALG_RANK_UPDATE_H_
