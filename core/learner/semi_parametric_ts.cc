#include "core/learner/semi_parametric_ts.h"

#include <cmath>
#include <string>

#include "absl/strings/str_format.h"
#include "core/storage/state_coding.h"

namespace graphbandit {
namespace {

constexpr uint8_t kSemiParametricStateVersion = 1;

// mu_hat_j and the Cholesky factor of Gamma_j for one decision (SG eq. 7-8).
struct Sampling {
  Eigen::VectorXd centre;
  Eigen::LLT<Eigen::MatrixXd> gamma;
};

Sampling SamplingFor(int32_t user, const SemiParametricOptions& options,
                     const std::vector<std::shared_ptr<const SemiParametricTs::UserStats>>& users,
                     const std::shared_ptr<const SemiParametricTs::UserStats>& prior,
                     const SemiParametricTs::Neighbours* neighbours) {
  const auto stats_of = [&](int32_t u) -> const SemiParametricTs::UserStats& {
    return u >= 0 && u < static_cast<int32_t>(users.size()) && users[u] != nullptr ? *users[u]
                                                                                   : *prior;
  };
  const SemiParametricTs::UserStats& own = stats_of(user);
  Sampling out;
  out.centre = own.mu_bar;
  Eigen::MatrixXd gamma = own.b;
  const bool graph = options.graph && neighbours != nullptr && user >= 0 &&
                     user < static_cast<int32_t>(neighbours->size()) &&
                     !(*neighbours)[user].empty();
  if (graph) {
    const double lambda = options.lambda;
    Eigen::VectorXd pull = Eigen::VectorXd::Zero(own.mu_bar.size());
    for (const auto& [k, share] : (*neighbours)[user]) {  // share = -l_jk = w_jk / deg_j
      const SemiParametricTs::UserStats& other = stats_of(k);
      pull += share * other.mu_bar;
      gamma += (lambda * lambda * share * share) * other.b_inverse;
    }
    // mu_hat = mu_bar - lambda B^-1 sum l_jk mu_bar_k = mu_bar + lambda B^-1 sum share mu_bar_k.
    out.centre += lambda * (own.b_inverse * pull);
  }
  if (options.code_gamma) gamma.diagonal().array() += options.lambda;
  out.gamma.compute(gamma);
  return out;
}

}  // namespace

absl::Status SemiParametricOptions::Validate() const {
  if (!(lambda > 0.0) || !std::isfinite(lambda)) {
    return absl::InvalidArgumentError("semi-parametric lambda must be positive and finite");
  }
  return absl::OkStatus();
}

class SemiParametricTs::FrozenScorer final : public Scorer {
 public:
  FrozenScorer(SemiParametricOptions options, std::vector<std::shared_ptr<const UserStats>> users,
               std::shared_ptr<const UserStats> prior, std::shared_ptr<const Neighbours> neighbours)
      : options_(options),
        users_(std::move(users)),
        prior_(std::move(prior)),
        neighbours_(std::move(neighbours)) {}

  void Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, Eigen::VectorXd* mean,
             Eigen::VectorXd* stddev) const override {
    const Sampling s = SamplingFor(user, options_, users_, prior_, neighbours_.get());
    *mean = points.transpose() * s.centre;
    const Eigen::MatrixXd whitened = s.gamma.matrixL().solve(points);
    *stddev = whitened.colwise().norm().transpose();
  }

  bool SamplesParameters() const override { return true; }

  void SampleValues(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points, double scale,
                    int draws, Rng& rng, Eigen::MatrixXd* values) const override {
    const Sampling s = SamplingFor(user, options_, users_, prior_, neighbours_.get());
    const Eigen::Index d = s.centre.size();
    Eigen::MatrixXd z(d, draws);
    for (int r = 0; r < draws; ++r) {
      for (Eigen::Index i = 0; i < d; ++i) z(i, r) = rng.Normal();
    }
    // theta = centre + scale L^-T z has covariance scale^2 (L L^T)^-1 = scale^2 Gamma^-1.
    Eigen::MatrixXd theta = s.gamma.matrixU().solve(z);
    theta *= scale;
    theta.colwise() += s.centre;
    *values = theta.transpose() * points;
  }

 private:
  SemiParametricOptions options_;
  std::vector<std::shared_ptr<const UserStats>> users_;
  std::shared_ptr<const UserStats> prior_;
  std::shared_ptr<const Neighbours> neighbours_;
};

SemiParametricTs::SemiParametricTs(int dim, const SemiParametricOptions& options)
    : dim_(dim), options_(options), prior_(Fresh()) {}

SemiParametricTs::~SemiParametricTs() = default;

std::shared_ptr<const SemiParametricTs::UserStats> SemiParametricTs::Fresh() const {
  auto stats = std::make_shared<UserStats>();
  stats->b = options_.lambda * Eigen::MatrixXd::Identity(dim_, dim_);
  stats->y = Eigen::VectorXd::Zero(dim_);
  stats->b_inverse = Eigen::MatrixXd::Identity(dim_, dim_) / options_.lambda;
  stats->mu_bar = Eigen::VectorXd::Zero(dim_);
  return stats;
}

void SemiParametricTs::Score(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                             Eigen::VectorXd* mean, Eigen::VectorXd* stddev) const {
  FrozenScorer(options_, users_, prior_, neighbours_).Score(user, points, mean, stddev);
}

void SemiParametricTs::SampleValues(int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
                                    double scale, int draws, Rng& rng,
                                    Eigen::MatrixXd* values) const {
  FrozenScorer(options_, users_, prior_, neighbours_)
      .SampleValues(user, points, scale, draws, rng, values);
}

absl::Status SemiParametricTs::Update(int32_t user, const Eigen::MatrixXd& db,
                                      const Eigen::VectorXd& dy) {
  if (user >= static_cast<int32_t>(users_.size())) users_.resize(user + 1);
  const UserStats& old = users_[user] != nullptr ? *users_[user] : *prior_;
  auto next = std::make_shared<UserStats>();
  next->b = old.b + db;
  next->y = old.y + dy;
  Eigen::LLT<Eigen::MatrixXd> factor(next->b);
  if (factor.info() != Eigen::Success) {
    return absl::InternalError("the semi-parametric precision matrix lost positive definiteness");
  }
  next->b_inverse = factor.solve(Eigen::MatrixXd::Identity(dim_, dim_));
  next->mu_bar = factor.solve(next->y);
  next->observations = old.observations + 1;
  users_[user] = std::move(next);
  ++observations_;
  return absl::OkStatus();
}

absl::Status SemiParametricTs::Observe(int32_t user, const Eigen::Ref<const Eigen::VectorXd>& point,
                                       double reward) {
  if (options_.centred) {
    return absl::FailedPreconditionError(
        "a semi-parametric policy learns from whole decisions (the candidates and their "
        "selection probabilities), not from a single point");
  }
  if (absl::Status s = CheckObservation(user, point, reward, dim_); !s.ok()) return s;
  return Update(user, point * point.transpose(), reward * point);
}

absl::Status SemiParametricTs::ObserveDecision(
    int32_t user, const Eigen::Ref<const Eigen::MatrixXd>& points,
    const Eigen::Ref<const Eigen::VectorXd>& probabilities, int chosen, double reward) {
  const Eigen::Index n = points.cols();
  if (n == 0 || chosen < 0 || chosen >= n) {
    return absl::InvalidArgumentError("the chosen candidate is not one of the decision's");
  }
  if (absl::Status s = CheckObservation(user, points.col(chosen), reward, dim_); !s.ok()) return s;
  if (!options_.centred) return Observe(user, points.col(chosen), reward);
  if (probabilities.size() != n || !probabilities.allFinite() ||
      (probabilities.array() < 0).any() || std::abs(probabilities.sum() - 1.0) > 1e-6) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a decision's selection probabilities must be %d non-negative values summing to 1", n));
  }
  if (!points.allFinite()) {
    return absl::InvalidArgumentError("observation contains a non-finite value");
  }
  // SG eq. 6: centre on the policy's own expectation of the chosen point.
  const Eigen::VectorXd mean_point = points * probabilities;
  const Eigen::VectorXd x = points.col(chosen) - mean_point;
  const Eigen::MatrixXd centred = points.colwise() - mean_point;
  Eigen::MatrixXd db = x * x.transpose();
  db.noalias() += centred * probabilities.asDiagonal() * centred.transpose();
  return Update(user, db, 2.0 * reward * x);
}

absl::Status SemiParametricTs::SetGraph(const UserGraph& graph,
                                        std::shared_ptr<const UserKernel> /*kernel*/) {
  auto neighbours = std::make_shared<Neighbours>(graph.num_users());
  for (int32_t u = 0; u < graph.num_users(); ++u) {
    const double degree = graph.Degree(u);
    if (!(degree > 0.0)) continue;
    for (const auto& [k, w] : graph.SortedNeighbours(u)) {
      if (k != u) (*neighbours)[u].emplace_back(k, w / degree);
    }
  }
  neighbours_ = std::move(neighbours);
  return absl::OkStatus();
}

std::shared_ptr<const Scorer> SemiParametricTs::Freeze() const {
  return std::make_shared<FrozenScorer>(options_, users_, prior_, neighbours_);
}

void SemiParametricTs::SaveState(storage::Encoder* out) const {
  storage::Encoder s;
  PutCount(&s, observations_);
  PutCount(&s, static_cast<int64_t>(users_.size()));
  for (const auto& stats : users_) {
    s.PutU8(stats != nullptr ? 1 : 0);
    if (stats == nullptr) continue;
    PutMatrix(&s, stats->b);
    PutVector(&s, stats->y);
    PutCount(&s, stats->observations);
  }
  PutStateFrame(out, LearnerStateTag::kSemiParametric, kSemiParametricStateVersion, s.data());
}

absl::Status SemiParametricTs::LoadState(storage::Decoder* in) {
  std::string payload;
  if (absl::Status status = GetStateFrame(in, LearnerStateTag::kSemiParametric,
                                          kSemiParametricStateVersion, &payload);
      !status.ok()) {
    return status;
  }
  storage::Decoder s(payload);
  const auto bad = [](absl::string_view what) { return MalformedState("semi_parametric", what); };
  int64_t observations = 0, count = 0;
  if (!GetCount(&s, &observations) || !GetCount(&s, &count, s.remaining())) return bad("header");
  std::vector<std::shared_ptr<const UserStats>> users(count);
  for (auto& slot : users) {
    uint8_t present = 0;
    if (!s.GetU8(&present) || present > 1) return bad("user");
    if (present == 0) continue;
    auto stats = std::make_shared<UserStats>();
    if (!GetMatrix(&s, &stats->b) || !GetVector(&s, &stats->y) ||
        !GetCount(&s, &stats->observations) || stats->b.rows() != dim_ || stats->b.cols() != dim_ ||
        stats->y.size() != dim_) {
      return bad("user statistics");
    }
    Eigen::LLT<Eigen::MatrixXd> factor(stats->b);
    if (factor.info() != Eigen::Success) return bad("a precision matrix is not positive definite");
    stats->b_inverse = factor.solve(Eigen::MatrixXd::Identity(dim_, dim_));
    stats->mu_bar = factor.solve(stats->y);
    slot = std::move(stats);
  }
  if (!s.done()) return bad("trailing bytes");
  users_ = std::move(users);
  observations_ = observations;
  return absl::OkStatus();
}

}  // namespace graphbandit
