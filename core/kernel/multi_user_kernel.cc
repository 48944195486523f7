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

namespace {

// The user factors of a cross matrix, grouped by the distinct users of b (in order of first
// appearance): factors(i, g) = G[users_a[i], group g's user] (+ eta on the user's own points).
struct CrossFactors {
  Eigen::MatrixXd factors;  // m x groups
  std::vector<int> column_group;
  std::vector<std::vector<Eigen::Index>> group_columns;
  int64_t nonzero_entries = 0;  // of the m x n matrix
};

CrossFactors GroupCrossFactors(const UserKernel& user_kernel, double eta,
                               const std::vector<int32_t>& users_a, Eigen::Index n,
                               const int32_t* users_b) {
  const auto m = static_cast<Eigen::Index>(users_a.size());
  absl::flat_hash_map<int32_t, UserKernel::Column> columns;
  for (int32_t u : users_a) {
    if (!columns.contains(u)) columns.emplace(u, user_kernel.ColumnOf(u));
  }
  std::vector<const UserKernel::Column*> row_columns(m);
  for (Eigen::Index i = 0; i < m; ++i) row_columns[i] = &columns.at(users_a[i]);
  CrossFactors f;
  absl::flat_hash_map<int32_t, int> group_of;
  std::vector<int32_t> group_user;
  f.column_group.resize(static_cast<size_t>(n));
  for (Eigen::Index j = 0; j < n; ++j) {
    const auto [it, inserted] =
        group_of.try_emplace(users_b[j], static_cast<int>(group_user.size()));
    if (inserted) {
      group_user.push_back(users_b[j]);
      f.group_columns.emplace_back();
    }
    f.column_group[static_cast<size_t>(j)] = it->second;
    f.group_columns[static_cast<size_t>(it->second)].push_back(j);
  }
  const auto groups = static_cast<Eigen::Index>(group_user.size());
  f.factors.resize(m, groups);
  for (Eigen::Index g = 0; g < groups; ++g) {
    const int32_t v = group_user[static_cast<size_t>(g)];
    int64_t nonzero = 0;
    for (Eigen::Index i = 0; i < m; ++i) {
      const double own = (eta > 0.0 && v != kUnknownUser && users_a[i] == v) ? eta : 0.0;
      f.factors(i, g) = row_columns[i]->At(v) + own;
      if (f.factors(i, g) != 0.0) ++nonzero;
    }
    f.nonzero_entries +=
        nonzero * static_cast<int64_t>(f.group_columns[static_cast<size_t>(g)].size());
  }
  return f;
}

// Whether fewer than half the entries are non-zero: then the arm kernel is evaluated only
// where a factor is not zero (CrossBlocks' form).
bool Sparse(const CrossFactors& f, Eigen::Index m, Eigen::Index n) {
  return 2 * f.nonzero_entries < static_cast<int64_t>(m) * n;
}

// Cross's one product, each column scaled by its user's factors.
void FillDense(const ArmKernel& arm, const CrossFactors& f,
               const Eigen::Ref<const Eigen::MatrixXd>& a,
               const Eigen::Ref<const Eigen::MatrixXd>& b, Eigen::MatrixXd* out) {
  arm.Cross(a, b, out);
  for (Eigen::Index j = 0; j < b.cols(); ++j) {
    out->col(j).array() *= f.factors.col(f.column_group[static_cast<size_t>(j)]).array();
  }
}

void FillBlocks(const ArmKernel& arm, const CrossFactors& f,
                const Eigen::Ref<const Eigen::MatrixXd>& a,
                const Eigen::Ref<const Eigen::MatrixXd>& b,
                std::vector<MultiUserKernel::CrossBlock>* blocks) {
  Eigen::MatrixXd a_rows, b_columns;
  for (size_t g = 0; g < f.group_columns.size(); ++g) {
    MultiUserKernel::CrossBlock block;
    const auto gi = static_cast<Eigen::Index>(g);
    for (Eigen::Index i = 0; i < a.cols(); ++i) {
      if (f.factors(i, gi) != 0.0) block.rows.push_back(i);
    }
    if (block.rows.empty()) continue;
    block.cols = f.group_columns[g];
    const auto rows = static_cast<Eigen::Index>(block.rows.size());
    const auto cols = static_cast<Eigen::Index>(block.cols.size());
    a_rows.resize(a.rows(), rows);
    for (Eigen::Index r = 0; r < rows; ++r) a_rows.col(r) = a.col(block.rows[r]);
    b_columns.resize(b.rows(), cols);
    for (Eigen::Index c = 0; c < cols; ++c) b_columns.col(c) = b.col(block.cols[c]);
    arm.Cross(a_rows, b_columns, &block.block);
    for (Eigen::Index r = 0; r < rows; ++r) block.block.row(r) *= f.factors(block.rows[r], gi);
    blocks->push_back(std::move(block));
  }
}

}  // namespace

void MultiUserKernel::Cross(const Eigen::Ref<const Eigen::MatrixXd>& a,
                            const std::vector<int32_t>& users_a,
                            const Eigen::Ref<const Eigen::MatrixXd>& b, const int32_t* users_b,
                            Eigen::MatrixXd* out) const {
  const Eigen::Index m = a.cols(), n = b.cols();
  if (m == 0 || n == 0) {
    out->setZero(m, n);
    return;
  }
  // The user factors first, one column per distinct user of b (its columns grouped), so that
  // the arm kernel, the costly part (a product and an exp per entry), is evaluated only where a
  // factor is not zero: users in different components of the graph share nothing, and a pass
  // over the history of users without edges (the growth scan, a fit's spread pass) then costs
  // a few entries per point instead of m.
  const CrossFactors f = GroupCrossFactors(*users_, eta_, users_a, n, users_b);
  if (!Sparse(f, m, n)) {
    FillDense(arm_, f, a, b, out);  // dense enough: the whole arm-kernel block in one product
    return;
  }
  std::vector<CrossBlock> blocks;
  FillBlocks(arm_, f, a, b, &blocks);
  out->setZero(m, n);
  for (const CrossBlock& block : blocks) {
    for (size_t c = 0; c < block.cols.size(); ++c) {
      for (size_t r = 0; r < block.rows.size(); ++r) {
        (*out)(block.rows[r], block.cols[c]) =
            block.block(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c));
      }
    }
  }
}

bool MultiUserKernel::CrossBlocks(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                  const std::vector<int32_t>& users_a,
                                  const Eigen::Ref<const Eigen::MatrixXd>& b,
                                  const int32_t* users_b, std::vector<CrossBlock>* blocks,
                                  Eigen::MatrixXd* dense) const {
  blocks->clear();
  const Eigen::Index m = a.cols(), n = b.cols();
  if (m == 0 || n == 0) return true;
  const CrossFactors f = GroupCrossFactors(*users_, eta_, users_a, n, users_b);
  if (!Sparse(f, m, n)) {
    if (dense != nullptr) FillDense(arm_, f, a, b, dense);
    return false;
  }
  FillBlocks(arm_, f, a, b, blocks);
  return true;
}

}  // namespace graphbandit
