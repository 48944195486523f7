#include "core/learner/lk_gp_posterior.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/graph/user_kernel.h"

namespace graphbandit {
namespace {

uint64_t PointHash(const Eigen::Ref<const Eigen::VectorXd>& point) {
  uint64_t h = 0x243F6A8885A308D3ULL;
  for (Eigen::Index i = 0; i < point.size(); ++i) {
    uint64_t bits;
    const double value = point(i) == 0.0 ? 0.0 : point(i);
    std::memcpy(&bits, &value, sizeof bits);
    h ^= bits + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
  }
  return h;
}

}  // namespace

double SpectralRatio(const UserGraph& graph) {
  if (graph.num_edges() == 0) return 0.0;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(DenseLaplacian(graph), Eigen::EigenvaluesOnly);
  const Eigen::VectorXd& values = eig.eigenvalues();
  const double largest = values.maxCoeff();
  for (Eigen::Index i = 0; i < values.size(); ++i) {
    if (values(i) > 1e-10 * largest) return values(i) / largest;
  }
  return 0.0;
}

// Scores from the grid: a lookup per candidate.
class LkGpPosterior::GridScorer final : public Scorer {
 public:
  GridScorer(MultiUserKernel kernel, std::shared_ptr<const Eigen::MatrixXd> pool,
             std::shared_ptr<const absl::flat_hash_map<uint64_t, std::vector<int>>> index,
             int32_t users, Eigen::VectorXd mean, Eigen::VectorXd variance)
      : kernel_(std::move(kernel)),
        pool_(std::move(pool)),
        index_(std::move(index)),
        users_(users),
        mean_(std::move(mean)),
        variance_(std::move(variance)) {}

  static int Find(const Eigen::MatrixXd& pool,
                  const absl::flat_hash_map<uint64_t, std::vector<int>>& index,
                  const Eigen::Ref<const Eigen::VectorXd>& point) {
    auto it = index.find(PointHash(point));
    if (it == index.end()) return -1;
    for (int j : it->second) {
      if (pool.col(j) == point) return j;
    }
    return -1;
  }

  static void ScoreGrid(const MultiUserKernel& kernel, const Eigen::MatrixXd& pool,
                        const absl::flat_hash_map<uint64_t, std::vector<int>>& index, int32_t users,
                        const Eigen::VectorXd& mean, const Eigen::VectorXd& variance, int32_t user,
                        const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* out_mean,
                        Eigen::VectorXd* out_sd) {
    const Eigen::Index n = points.cols();
    out_mean->resize(n);
    out_sd->resize(n);
    const bool inside = user >= 0 && user < users;
    const Eigen::VectorXd prior = inside ? Eigen::VectorXd() : kernel.Diagonal(user, points);
    for (Eigen::Index c = 0; c < n; ++c) {
      if (!inside) {  // a user outside the grid has no data: the prior
        (*out_mean)(c) = 0.0;
        (*out_sd)(c) = std::sqrt(std::max(prior(c), 0.0));
        continue;
      }
      const int j = Find(pool, index, points.col(c));
      if (j < 0) {
        (*out_mean)(c) = NAN;
        (*out_sd)(c) = NAN;
        continue;
      }
      const int64_t p = static_cast<int64_t>(j) * users + user;
      (*out_mean)(c) = mean(p);
      (*out_sd)(c) = std::sqrt(std::max(variance(p), 0.0));
    }
  }

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    ScoreGrid(kernel_, *pool_, *index_, users_, mean_, variance_, user, points, mean, stddev);
  }

 private:
  MultiUserKernel kernel_;
  std::shared_ptr<const Eigen::MatrixXd> pool_;
  std::shared_ptr<const absl::flat_hash_map<uint64_t, std::vector<int>>> index_;
  int32_t users_;
  Eigen::VectorXd mean_;
  Eigen::VectorXd variance_;
};

LkGpPosterior::LkGpPosterior(int dim, const ArmKernel& arm, std::shared_ptr<const UserKernel> users,
                             const LkGpOptions& options)
    : dim_(dim),
      kernel_(arm, std::move(users)),
      options_(options),
      next_epoch_(options.first_epoch),
      history_x_(dim) {
  ridge_ = options_.schedule ? ScheduledRidge(0) : options_.ridge;
  exact_ = std::make_unique<ExactGpPosterior>(dim_, kernel_.arm(), kernel_.users(), ridge_);
}

double LkGpPosterior::ScheduledRidge(int64_t t) const {
  const double horizon = static_cast<double>(options_.horizon);
  const double value =
      options_.lambda_base * options_.spectral_ratio * horizon / (horizon + static_cast<double>(t));
  return std::clamp(value, options_.lambda_min, options_.lambda_max);
}

absl::Status LkGpPosterior::SetPool(const Eigen::MatrixXd& pool, int32_t users) {
  if (pool.rows() != dim_ || pool.cols() == 0 || users < 1) {
    return absl::InvalidArgumentError("LK-GP pool: wrong dimension, no items or no users");
  }
  auto index = std::make_shared<absl::flat_hash_map<uint64_t, std::vector<int>>>();
  for (int j = 0; j < pool.cols(); ++j) {
    if (GridScorer::Find(pool, *index, pool.col(j)) >= 0) {
      return absl::InvalidArgumentError(absl::StrFormat("LK-GP pool: item %d is a duplicate", j));
    }
    (*index)[PointHash(pool.col(j))].push_back(j);
  }
  pool_ = std::make_shared<const Eigen::MatrixXd>(pool);
  pool_index_ = std::move(index);
  pool_users_ = users;
  // t* = min(1500, floor(n^(1/3)) |D|); the epsilon keeps perfect cubes exact.
  const int64_t root =
      static_cast<int64_t>(std::floor(std::cbrt(static_cast<double>(users)) + 1e-9));
  switch_point_ = std::min<int64_t>(options_.switch_cap, root * pool.cols());
  if (options_.grid && !grid_active_ && history_size() >= switch_point_) return StartGrid();
  return absl::OkStatus();
}

int LkGpPosterior::PoolIndex(const Eigen::Ref<const Eigen::VectorXd>& point) const {
  return pool_ == nullptr ? -1 : GridScorer::Find(*pool_, *pool_index_, point);
}

absl::Status LkGpPosterior::StartGrid() {
  const int items = static_cast<int>(pool_->cols());
  const int64_t size = static_cast<int64_t>(items) * pool_users_;
  Eigen::MatrixXd grid_x(dim_, size);
  std::vector<int32_t> grid_users(size);
  for (int j = 0; j < items; ++j) {
    for (int32_t u = 0; u < pool_users_; ++u) {
      grid_x.col(static_cast<int64_t>(j) * pool_users_ + u) = pool_->col(j);
      grid_users[static_cast<int64_t>(j) * pool_users_ + u] = u;
    }
  }
  // Initialise from the exact posterior: m = K_PS alpha, Q = K_PP - W^T W, W = C^-1 K_SP.
  kernel_.Cross(grid_x, grid_users, grid_x, grid_users.data(), &grid_cov_);
  grid_mean_ = Eigen::VectorXd::Zero(size);
  if (history_size() > 0) {
    Eigen::MatrixXd k_sp;
    kernel_.Cross(exact_->history_points(), exact_->history_users(), grid_x, grid_users.data(),
                  &k_sp);
    grid_mean_.noalias() = k_sp.transpose() * exact_->alpha();
    exact_->factor().ForwardSolveInPlace(k_sp);
    grid_cov_.selfadjointView<Eigen::Lower>().rankUpdate(k_sp.transpose(), -1.0);
  }
  grid_active_ = true;
  exact_.reset();  // the grid carries the posterior from now on
  return absl::OkStatus();
}

absl::Status LkGpPosterior::Rebuild() {
  ++rebuilds_;
  exact_ = std::make_unique<ExactGpPosterior>(dim_, kernel_.arm(), kernel_.users(), ridge_);
  for (int64_t i = 0; i < history_size(); ++i) {
    absl::Status status =
        exact_->Observe(history_users_[i], history_x_.col(i), history_rewards_[i]);
    if (!status.ok()) return status;
  }
  if (grid_active_) return StartGrid();
  return absl::OkStatus();
}

void LkGpPosterior::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                          Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  if (!grid_active_) {
    exact_->Score(user, points, mean, stddev);
    return;
  }
  GridScorer::ScoreGrid(kernel_, *pool_, *pool_index_, pool_users_, grid_mean_,
                        grid_cov_.diagonal(), user, points, mean, stddev);
}

absl::Status LkGpPosterior::Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                    double reward) {
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  if (grid_active_) {
    const int j = PoolIndex(point);
    if (j < 0 || user >= pool_users_) {
      return absl::InvalidArgumentError("LK-GP grid phase: the observation is outside the pool");
    }
    // P5 on the lower triangle: q = Q[:, p], d = lambda + Q[p, p].
    const int64_t p = static_cast<int64_t>(j) * pool_users_ + user;
    const int64_t size = grid_cov_.rows();
    Eigen::VectorXd q(size);
    q.head(p) = grid_cov_.row(p).head(p).transpose();
    q.tail(size - p) = grid_cov_.col(p).tail(size - p);
    const double d = ridge_ + q(p);
    grid_mean_ += q * ((reward - grid_mean_(p)) / d);
    grid_cov_.selfadjointView<Eigen::Lower>().rankUpdate(q, -1.0 / d);
  } else {
    absl::Status status = exact_->Observe(user, point, reward);
    if (!status.ok()) return status;
  }
  history_x_.Append(point);
  history_users_.push_back(user);
  history_rewards_.push_back(reward);

  const int64_t t = history_size();
  if (options_.grid && pool_ != nullptr && !grid_active_ && t >= switch_point_) {
    absl::Status status = StartGrid();
    if (!status.ok()) return status;
  }
  if (options_.schedule && t >= next_epoch_) {
    while (t >= next_epoch_) next_epoch_ *= 2;
    const double scheduled = ScheduledRidge(t);
    if (std::abs(scheduled - ridge_) > options_.rebuild_threshold * ridge_) {
      ridge_ = scheduled;
      return Rebuild();
    }
  }
  return absl::OkStatus();
}

absl::Status LkGpPosterior::SetGraph(const UserGraph& /*graph*/,
                                     std::shared_ptr<const UserKernel> users) {
  kernel_.set_users(std::move(users));
  return Rebuild();
}

std::shared_ptr<const Scorer> LkGpPosterior::Freeze() const {
  if (!grid_active_) return exact_->Freeze();
  return std::make_shared<GridScorer>(kernel_, pool_, pool_index_, pool_users_, grid_mean_,
                                      grid_cov_.diagonal());
}

}  // namespace graphbandit
