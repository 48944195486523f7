#include "core/kernel/multi_user_kernel.h"

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
  arm_.Cross(x, q, out);
  if (out->size() == 0) return;
  Eigen::VectorXd factors = UserFactors(users, user);
  if (eta_ > 0.0 && user != kUnknownUser) {
    for (size_t i = 0; i < users.size(); ++i) {
      if (users[i] == user) factors(i) += eta_;
    }
  }
  *out = factors.asDiagonal() * (*out);
}

void MultiUserKernel::CrossForUserInto(const Eigen::Ref<const Eigen::MatrixXd>& x,
                                       const Eigen::Ref<const Eigen::VectorXd>& x_squared_norms,
                                       const std::vector<int32_t>& users, int32_t user,
                                       const Eigen::Ref<const Eigen::MatrixXd>& q,
                                       Eigen::Ref<Eigen::MatrixXd> out,
                                       Eigen::Ref<Eigen::VectorXd> factors) const {
  arm_.CrossInto(x, x_squared_norms, q, out);
  if (out.size() == 0) return;
  UserFactorsInto(users, user, factors);
  out.array().colwise() *= factors.array();
}

void MultiUserKernel::UserFactorsInto(const std::vector<int32_t>& users, int32_t user,
                                      Eigen::Ref<Eigen::VectorXd> factors) const {
  const UserKernel::Column column = users_->ColumnOf(user);
  const bool own = eta_ > 0.0 && user != kUnknownUser;
  for (Eigen::Index i = 0; i < factors.size(); ++i) {
    factors(i) = column.At(users[i]) + ((own && users[i] == user) ? eta_ : 0.0);
  }
}

Eigen::VectorXd MultiUserKernel::Diagonal(int32_t user,
                                          const Eigen::Ref<const Eigen::MatrixXd>& q) const {
  // A user's own part counts even before it has data (the unknown user included).
  return (users_->ColumnOf(user).Diagonal() + eta_) * arm_.Diagonal(q);
}

void MultiUserKernel::DiagonalInto(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& q,
                                   Eigen::Ref<Eigen::VectorXd> out) const {
  arm_.DiagonalInto(q, out);
  out *= users_->ColumnOf(user).Diagonal() + eta_;
}

void MultiUserKernel::Cross(const Eigen::Ref<const Eigen::MatrixXd>& a,
                            const std::vector<int32_t>& users_a,
                            const Eigen::Ref<const Eigen::MatrixXd>& b, const int32_t* users_b,
                            Eigen::MatrixXd* out) const {
  arm_.Cross(a, b, out);
  absl::flat_hash_map<int32_t, UserKernel::Column> columns;
  for (int32_t u : users_a) {
    if (!columns.contains(u)) columns.emplace(u, users_->ColumnOf(u));
  }
  std::vector<const UserKernel::Column*> row_columns(a.cols());
  for (Eigen::Index i = 0; i < a.cols(); ++i) row_columns[i] = &columns.at(users_a[i]);
  for (Eigen::Index j = 0; j < b.cols(); ++j) {
    for (Eigen::Index i = 0; i < a.cols(); ++i) {
      const double own =
          (eta_ > 0.0 && users_b[j] != kUnknownUser && users_a[i] == users_b[j]) ? eta_ : 0.0;
      (*out)(i, j) *= row_columns[i]->At(users_b[j]) + own;
    }
  }
}

}  // namespace graphbandit
