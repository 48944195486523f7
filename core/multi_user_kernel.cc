#include "core/multi_user_kernel.h"

#include "absl/container/flat_hash_map.h"

namespace graphbandit {

Eigen::VectorXd MultiUserKernel::UserFactors(const std::vector<int32_t>& users,
                                             int32_t user) const {
  const UserKernel::Column column = users_->ColumnOf(user);
  Eigen::VectorXd factors(users.size());
  for (size_t i = 0; i < users.size(); ++i) factors(i) = column.At(users[i]);
  return factors;
}

void MultiUserKernel::CrossForUser(const Eigen::Ref<const Eigen::MatrixXd>& x,
                                   const std::vector<int32_t>& users, int32_t user,
                                   const Eigen::Ref<const Eigen::MatrixXd>& q,
                                   Eigen::MatrixXd* out) const {
  Eigen::MatrixXd trend;
  arm_.Cross(x, q, out, own_trend() ? &trend : nullptr);
  if (out->size() == 0) return;
  *out = UserFactors(users, user).asDiagonal() * (*out);
  if (own_trend() && user != kUnknownUser) {
    for (size_t i = 0; i < users.size(); ++i) {
      if (users[i] == user) out->row(i) += eta_ * trend.row(i);
    }
  }
}

Eigen::VectorXd MultiUserKernel::Diagonal(int32_t user,
                                          const Eigen::Ref<const Eigen::MatrixXd>& q) const {
  Eigen::VectorXd d = users_->ColumnOf(user).Diagonal() * arm_.Diagonal(q);
  if (own_trend()) d += eta_ * arm_.TrendDiagonal(q);  // a user's own trend, even before data
  return d;
}

void MultiUserKernel::Cross(const Eigen::Ref<const Eigen::MatrixXd>& a,
                            const std::vector<int32_t>& users_a,
                            const Eigen::Ref<const Eigen::MatrixXd>& b, const int32_t* users_b,
                            Eigen::MatrixXd* out) const {
  Eigen::MatrixXd trend;
  arm_.Cross(a, b, out, own_trend() ? &trend : nullptr);
  absl::flat_hash_map<int32_t, UserKernel::Column> columns;
  for (int32_t u : users_a) {
    if (!columns.contains(u)) columns.emplace(u, users_->ColumnOf(u));
  }
  std::vector<const UserKernel::Column*> row_columns(a.cols());
  for (Eigen::Index i = 0; i < a.cols(); ++i) row_columns[i] = &columns.at(users_a[i]);
  for (Eigen::Index j = 0; j < b.cols(); ++j) {
    for (Eigen::Index i = 0; i < a.cols(); ++i) (*out)(i, j) *= row_columns[i]->At(users_b[j]);
  }
  if (own_trend()) {
    for (Eigen::Index j = 0; j < b.cols(); ++j) {
      if (users_b[j] == kUnknownUser) continue;
      for (Eigen::Index i = 0; i < a.cols(); ++i) {
        if (users_a[i] == users_b[j]) (*out)(i, j) += eta_ * trend(i, j);
      }
    }
  }
}

}  // namespace graphbandit
