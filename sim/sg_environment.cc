#include "sim/sg_environment.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace graphbandit::sim {
namespace {

enum Stream : uint64_t { kGraph = 21, kPreferences = 22, kRounds = 23 };

}  // namespace

Eigen::MatrixXd RandomWalkLaplacian(int n, const std::vector<Edge>& edges) {
  Eigen::MatrixXd w = Eigen::MatrixXd::Zero(n, n);
  for (const Edge& e : edges) w(e.a, e.b) = w(e.b, e.a) = e.weight;
  Eigen::MatrixXd l = Eigen::MatrixXd::Identity(n, n);
  for (int u = 0; u < n; ++u) {
    const double degree = w.row(u).sum();
    if (degree > 0.0) l.row(u) -= w.row(u) / degree;
  }
  return l;
}

absl::StatusOr<SgEnvironment> SgEnvironment::Create(const SgOptions& options) {
  if (options.users < 1 || options.arms < 1 || options.dim < options.arms ||
      options.dim % options.arms != 0) {
    return absl::InvalidArgumentError(
        "the SG environment needs users >= 1, arms >= 1 and a dimension that is a multiple of "
        "the number of arms");
  }
  if (!(options.er_probability >= 0.0 && options.er_probability <= 1.0) ||
      !(options.gamma >= 0.0) || !(options.noise_std >= 0.0)) {
    return absl::InvalidArgumentError(
        "the SG environment needs p in [0, 1], gamma >= 0, noise >= 0");
  }
  SgEnvironment env;
  env.options_ = options;
  Rng graph_rng = StreamRng(options.graph_seed, kGraph);
  for (int a = 0; a < options.users; ++a) {
    for (int b = a + 1; b < options.users; ++b) {
      if (graph_rng.Uniform() < options.er_probability) env.edges_.push_back({a, b, 1.0});
    }
  }
  Rng rng = StreamRng(options.seed, kPreferences);
  Eigen::MatrixXd theta0(options.users, options.dim);
  for (int u = 0; u < options.users; ++u) {
    for (int i = 0; i < options.dim; ++i) theta0(u, i) = rng.Normal();
  }
  const Eigen::MatrixXd smoother = Eigen::MatrixXd::Identity(options.users, options.users) +
                                   options.gamma * RandomWalkLaplacian(options.users, env.edges_);
  env.theta_ = smoother.partialPivLu().solve(theta0);
  for (int u = 0; u < options.users; ++u) {
    const double norm = env.theta_.row(u).norm();
    if (norm > 0.0) env.theta_.row(u) /= norm;
  }
  return env;
}

std::string SgEnvironment::name() const {
  return absl::StrFormat("SG %s n=%d N=%d d=%d gamma=%g",
                         options_.non_stationary ? "non-stationary" : "stationary", options_.users,
                         options_.arms, options_.dim, options_.gamma);
}

Round SgEnvironment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(options_.seed, kRounds, index);
  Round round;
  round.user = static_cast<int>(rng.UniformInt(options_.users));
  const int n = options_.arms, block = options_.dim / options_.arms;
  round.arms = Eigen::MatrixXd::Zero(options_.dim, n);
  for (int k = 0; k < n; ++k) {
    // Uniform in the unit ball: a uniform direction, radius u^(1/block).
    Eigen::VectorXd z(block);
    for (int i = 0; i < block; ++i) z(i) = rng.Normal();
    const double norm = z.norm();
    const double radius = std::pow(rng.Uniform(), 1.0 / block);
    if (norm > 0.0) round.arms.block(k * block, k, block, 1) = radius * z / norm;
  }
  round.means = round.arms.transpose() * theta_.row(round.user).transpose();
  round.noise.resize(n);
  for (int k = 0; k < n; ++k) round.noise(k) = options_.noise_std * rng.Normal();
  round.offset = options_.non_stationary ? -round.means.maxCoeff() : 0.0;
  return round;
}

}  // namespace graphbandit::sim
