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
  const Eigen::Index m = a.cols(), n = b.cols();
  if (m == 0 || n == 0) {
    out->setZero(m, n);
    return;
  }
  absl::flat_hash_map<int32_t, UserKernel::Column> columns;
  for (int32_t u : users_a) {
    if (!columns.contains(u)) columns.emplace(u, users_->ColumnOf(u));
  }
  std::vector<const UserKernel::Column*> row_columns(m);
  for (Eigen::Index i = 0; i < m; ++i) row_columns[i] = &columns.at(users_a[i]);
  // The user factors first, one column per distinct user of b (its columns grouped), so that
  // the arm kernel, the costly part (a product and an exp per entry), is evaluated only where a
  // factor is not zero: users in different components of the graph share nothing, and a pass
  // over the history of users without edges (the growth scan, a fit's spread pass) then costs
  // a few entries per point instead of m.
  absl::flat_hash_map<int32_t, int> group_of;
  std::vector<int32_t> group_user;
  std::vector<int> column_group(static_cast<size_t>(n));
  std::vector<std::vector<Eigen::Index>> group_columns;
  for (Eigen::Index j = 0; j < n; ++j) {
    const auto [it, inserted] =
        group_of.try_emplace(users_b[j], static_cast<int>(group_user.size()));
    if (inserted) {
      group_user.push_back(users_b[j]);
      group_columns.emplace_back();
    }
    column_group[static_cast<size_t>(j)] = it->second;
    group_columns[static_cast<size_t>(it->second)].push_back(j);
  }
  const Eigen::Index groups = static_cast<Eigen::Index>(group_user.size());
  Eigen::MatrixXd factors(m, groups);
  int64_t nonzero_entries = 0;
  for (Eigen::Index g = 0; g < groups; ++g) {
    const int32_t v = group_user[static_cast<size_t>(g)];
    int64_t nonzero = 0;
    for (Eigen::Index i = 0; i < m; ++i) {
      const double own = (eta_ > 0.0 && v != kUnknownUser && users_a[i] == v) ? eta_ : 0.0;
      factors(i, g) = row_columns[i]->At(v) + own;
      if (factors(i, g) != 0.0) ++nonzero;
    }
    nonzero_entries += nonzero * static_cast<int64_t>(group_columns[static_cast<size_t>(g)].size());
  }
  if (2 * nonzero_entries >= static_cast<int64_t>(m) * n) {
    // Dense enough: the whole arm-kernel block in one product.
    arm_.Cross(a, b, out);
    for (Eigen::Index j = 0; j < n; ++j) {
      out->col(j).array() *= factors.col(column_group[static_cast<size_t>(j)]).array();
    }
    return;
  }
  out->setZero(m, n);
  std::vector<Eigen::Index> rows;
  Eigen::MatrixXd a_rows, b_columns, block;
  for (Eigen::Index g = 0; g < groups; ++g) {
    rows.clear();
    for (Eigen::Index i = 0; i < m; ++i) {
      if (factors(i, g) != 0.0) rows.push_back(i);
    }
    if (rows.empty()) continue;
    const std::vector<Eigen::Index>& cols = group_columns[static_cast<size_t>(g)];
    a_rows.resize(a.rows(), static_cast<Eigen::Index>(rows.size()));
    for (size_t r = 0; r < rows.size(); ++r)
      a_rows.col(static_cast<Eigen::Index>(r)) = a.col(rows[r]);
    b_columns.resize(b.rows(), static_cast<Eigen::Index>(cols.size()));
    for (size_t c = 0; c < cols.size(); ++c)
      b_columns.col(static_cast<Eigen::Index>(c)) = b.col(cols[c]);
    arm_.Cross(a_rows, b_columns, &block);
    for (size_t c = 0; c < cols.size(); ++c) {
      for (size_t r = 0; r < rows.size(); ++r) {
        (*out)(rows[r], cols[c]) =
            block(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) * factors(rows[r], g);
      }
    }
  }
}

}  // namespace graphbandit
