#include "core/graph/green_function.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace graphbandit {

absl::StatusOr<std::shared_ptr<const GreenFunction>> GreenFunction::Build(
    const UserGraph& graph, double rho, size_t cache_bytes,
    std::shared_ptr<const SpectralEmbedding> community, double community_variance) {
  if (!(rho > 0.0)) {
    return absl::InvalidArgumentError(absl::StrFormat("rho must be > 0, got %g", rho));
  }
  if (!(community_variance >= 0.0) || !std::isfinite(community_variance)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("community variance must be finite and >= 0, got %g", community_variance));
  }
  std::shared_ptr<GreenFunction> green(new GreenFunction());
  green->rho_ = rho;
  const int32_t n = graph.num_users();
  green->compact_of_user_.assign(n, -1);
  for (int32_t u = 0; u < n; ++u) {
    if (graph.HasEdges(u)) {
      green->compact_of_user_[u] = static_cast<int32_t>(green->users_of_compact_.size());
      green->users_of_compact_.push_back(u);
    }
  }
  const int32_t nc = green->factorised_users();
  if (nc > 0) {
    std::vector<Eigen::Triplet<double>> triplets;
    for (int32_t c = 0; c < nc; ++c) {
      const int32_t u = green->users_of_compact_[c];
      double degree = 0.0;
      for (const auto& [v, w] : graph.SortedNeighbours(u)) {
        degree += w;
        const int32_t cv = green->compact_of_user_[v];
        if (cv > c) triplets.emplace_back(cv, c, -w);  // lower triangle only
      }
      triplets.emplace_back(c, c, degree + rho);
    }
    Eigen::SparseMatrix<double> laplacian(nc, nc);
    laplacian.setFromTriplets(triplets.begin(), triplets.end());
    green->solver_.compute(laplacian);
    if (green->solver_.info() != Eigen::Success) {
      return absl::InternalError("sparse factorisation of L + rho I failed");
    }
  }
  if (community != nullptr && community_variance > 0.0) {
    // Embedded users have edges, so each has a compact index.
    green->compact_of_row_.assign(community->embedded_users(), -1);
    int32_t mapped = 0;
    for (int32_t u = 0; u < n; ++u) {
      const int32_t r = community->RowOf(u);
      if (r < 0) continue;
      if (green->compact_of_user_[u] < 0 || green->compact_of_row_[r] >= 0) {
        return absl::InvalidArgumentError("the spectral embedding is not of this graph");
      }
      green->compact_of_row_[r] = green->compact_of_user_[u];
      ++mapped;
    }
    if (mapped != community->embedded_users()) {
      return absl::InvalidArgumentError("the spectral embedding is not of this graph");
    }
    green->community_ = std::move(community);
    green->community_variance_ = community_variance;
  }
  green->cache_capacity_ =
      std::max<size_t>(16, cache_bytes / (sizeof(double) * std::max<int32_t>(nc, 1)));
  return std::shared_ptr<const GreenFunction>(std::move(green));
}

std::shared_ptr<const Eigen::VectorXd> GreenFunction::SolveColumn(int32_t c) const {
  {
    MutexLock lock(&cache_mu_);
    auto it = cache_.find(c);
    if (it != cache_.end()) {
      recency_.splice(recency_.begin(), recency_, it->second.recency);
      return it->second.values;
    }
  }
  // Solve outside the lock: concurrent misses on the same column may both solve; the results
  // are identical, so whichever is inserted first is kept.
  Eigen::VectorXd unit = Eigen::VectorXd::Zero(factorised_users());
  unit(c) = 1.0;
  auto solved = std::make_shared<Eigen::VectorXd>(solver_.solve(unit));
  if (community_variance_ > 0.0) {
    // + w S[:, u]: S(u, u) = 1 for every user; between embedded users, their similarity.
    const int32_t u = users_of_compact_[c];
    if (community_->RowOf(u) >= 0) {
      Eigen::VectorXd similarity;
      community_->SimilarityColumn(u, &similarity);
      for (Eigen::Index r = 0; r < similarity.size(); ++r) {
        (*solved)(compact_of_row_[r]) += community_variance_ * similarity(r);
      }
    } else {
      (*solved)(c) += community_variance_;
    }
  }
  std::shared_ptr<const Eigen::VectorXd> values = std::move(solved);
  MutexLock lock(&cache_mu_);
  auto [it, inserted] = cache_.try_emplace(c);
  if (!inserted) return it->second.values;
  recency_.push_front(c);
  it->second = CacheEntry{values, recency_.begin()};
  while (cache_.size() > cache_capacity_) {
    cache_.erase(recency_.back());
    recency_.pop_back();
  }
  return values;
}

UserKernel::Column GreenFunction::ColumnOf(int32_t u) const {
  const int32_t c =
      (u >= 0 && u < static_cast<int32_t>(compact_of_user_.size())) ? compact_of_user_[u] : -1;
  if (c < 0) {  // no edges: G[u, u] = 1 / rho (+ w), 0 elsewhere
    const double diagonal = 1.0 / rho_ + community_variance_;
    return MakeColumn(u, diagonal, diagonal, 0.0, nullptr, nullptr);
  }
  std::shared_ptr<const Eigen::VectorXd> values = SolveColumn(c);
  const double diagonal = (*values)(c);
  return MakeColumn(u, diagonal, diagonal, 0.0, &compact_of_user_, std::move(values));
}

}  // namespace graphbandit
