#include "core/learner/mean_explanation.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"

namespace graphbandit {

namespace {

// Larger |value| first, then the smaller key: a deterministic order.
template <typename T, typename Key>
void KeepLargest(std::vector<T>* items, int top, Key key) {
  auto before = [&key](const T& a, const T& b) {
    const double x = std::abs(a.contribution), y = std::abs(b.contribution);
    if (x != y) return x > y;
    return key(a) < key(b);
  };
  const size_t keep = std::min(items->size(), static_cast<size_t>(std::max(top, 0)));
  std::partial_sort(items->begin(), items->begin() + static_cast<std::ptrdiff_t>(keep),
                    items->end(), before);
  items->resize(keep);
}

}  // namespace

MeanExplanation ExplainRepresenterMean(const MultiUserKernel& kernel,
                                       const Eigen::Ref<const Eigen::MatrixXd>& basis_x,
                                       const std::vector<int32_t>& basis_users,
                                       const Eigen::Ref<const Eigen::VectorXd>& weights,
                                       double prior_mean, int32_t user,
                                       const Eigen::Ref<const Eigen::VectorXd>& point, int top) {
  MeanExplanation out;
  out.shared = prior_mean;
  const Eigen::Index m = weights.size();
  if (m == 0) return out;
  Eigen::VectorXd factors(m);
  kernel.UserFactorsInto(basis_users, user, factors);
  Eigen::MatrixXd similarity;
  kernel.arm().Cross(basis_x.leftCols(m), point, &similarity);
  std::vector<MeanExplanation::Point> points;
  absl::flat_hash_map<int32_t, MeanExplanation::User> users;
  for (Eigen::Index j = 0; j < m; ++j) {
    if (factors(j) == 0.0) continue;  // another graph component: nothing reaches u
    const double term = factors(j) * similarity(j, 0) * weights(j);
    const int32_t owner = basis_users[static_cast<size_t>(j)];
    (owner == user ? out.own : out.neighbours) += term;
    MeanExplanation::User& sum = users[owner];
    sum.user = owner;
    sum.user_factor = factors(j);
    ++sum.points;
    sum.contribution += term;
    if (term != 0.0) points.push_back({j, owner, factors(j), similarity(j, 0), term});
  }
  KeepLargest(&points, top, [](const MeanExplanation::Point& p) { return p.index; });
  out.top_points = std::move(points);
  out.top_users.reserve(users.size());
  for (auto& [id, sum] : users) {
    if (sum.contribution != 0.0) out.top_users.push_back(sum);
  }
  KeepLargest(&out.top_users, top, [](const MeanExplanation::User& u) { return u.user; });
  return out;
}

}  // namespace graphbandit
