#include "sim/task_environment.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/base/random.h"

namespace graphbandit::sim {
namespace {

enum Stream : uint64_t { kGraph = 11, kFunction = 12, kArrivals = 13, kRounds = 14 };

Eigen::MatrixXd Normals(Rng& rng, int rows, int cols, double scale = 1.0) {
  Eigen::MatrixXd z(rows, cols);
  for (int j = 0; j < cols; ++j) {
    for (int i = 0; i < rows; ++i) z(i, j) = scale * rng.Normal();
  }
  return z;
}

}  // namespace

absl::StatusOr<TaskEnvironment> TaskEnvironment::Create(const TaskOptions& options) {
  if (options.users < 1 || options.candidates < 2 || options.dim < 1 || options.hidden < 1 ||
      options.relevant < 0 || options.relevant > options.dim || options.context_dim < 0 ||
      options.blocks < 1 || !(options.feature_scale > 0.0) || !(options.noise_std >= 0.0) ||
      options.drift_period < 1 ||
      (options.graph != GraphKind::kSbm && options.graph != GraphKind::kErdosRenyi) ||
      (options.block_units && options.graph != GraphKind::kSbm)) {
    return absl::InvalidArgumentError(
        "task needs users >= 1, candidates >= 2, 0 <= relevant <= dim, hidden >= 1, blocks >= 1, "
        "feature_scale > 0, noise_std >= 0, drift_period >= 1 and an SBM or ER graph (SBM for "
        "block_units)");
  }
  TaskEnvironment env;
  env.options_ = options;
  const int n = options.users;
  const int inputs = options.context_dim + (options.relevant > 0 ? options.relevant : options.dim);

  Rng graph_rng = StreamRng(options.seed, kGraph);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const double p = options.graph == GraphKind::kErdosRenyi    ? options.er_probability
                       : a % options.blocks == b % options.blocks ? options.p_in
                                                                  : options.p_out;
      if (graph_rng.Uniform() < p) env.edges_.push_back({a, b, 1.0});
    }
  }

  // Per-user rows that are either shared by the user's block (SBM) or smoothed over the graph
  // (ER): (I + L)^-1 times independent rows.
  Rng f_rng = StreamRng(options.seed, kFunction);
  auto similar_rows = [&](int cols) {
    if (options.graph == GraphKind::kSbm) {
      const Eigen::MatrixXd blocks = Normals(f_rng, options.blocks, cols);
      Eigen::MatrixXd rows(n, cols);
      for (int u = 0; u < n; ++u) rows.row(u) = blocks.row(u % options.blocks);
      return rows;
    }
    const Eigen::MatrixXd independent = Normals(f_rng, n, cols);
    const Eigen::MatrixXd l = DenseLaplacian(n, env.edges_);
    return Eigen::MatrixXd((Eigen::MatrixXd::Identity(n, n) + l).ldlt().solve(independent));
  };

  // A fixed sample of inputs to normalise the shared part to unit standard deviation per user.
  Rng sample_rng = StreamRng(options.seed, kFunction, 1);
  const Eigen::MatrixXd sample = Normals(sample_rng, inputs, 4000);
  auto normalise_rows = [&](Eigen::MatrixXd* rows, const Eigen::MatrixXd& features) {
    for (int u = 0; u < n; ++u) {
      Eigen::VectorXd values = features.transpose() * rows->row(u).transpose();
      const double mean = values.mean();
      const double sd = std::sqrt((values.array() - mean).square().mean());
      if (sd > 0.0) rows->row(u) /= sd;
    }
  };
  if (options.nonlinear) {
    // tanh units whose pre-activations have variance about 2: clearly non-linear.
    const int sets = options.block_units ? options.blocks : 1;
    for (int s = 0; s < sets; ++s) {
      env.w_.push_back(Normals(f_rng, inputs, options.hidden, std::sqrt(2.0 / inputs)));
      env.c_.push_back(Normals(f_rng, options.hidden, 1, 0.5).col(0));
    }
    env.v_ = similar_rows(options.hidden);
    for (int s = 0; s < sets; ++s) {
      Eigen::MatrixXd hidden = env.w_[s].transpose() * sample;  // hidden x samples
      hidden.colwise() += env.c_[s];
      hidden = hidden.array().tanh().matrix();
      // Normalise the rows of the users whose units these are.
      Eigen::MatrixXd rows = env.v_;
      normalise_rows(&rows, hidden);
      for (int u = 0; u < n; ++u) {
        if (env.UnitsOf(u) == s) env.v_.row(u) = rows.row(u);
      }
    }
  } else {
    env.v_ = similar_rows(inputs);
    normalise_rows(&env.v_, sample);
  }
  env.theta_ = Normals(f_rng, n, inputs, options.user_linear / std::sqrt(inputs));
  env.intercepts_ = Normals(f_rng, n, 1, options.intercept).col(0);

  // Arrivals: uniform, or Zipf over a random order of the users.
  Rng arrival_rng = StreamRng(options.seed, kArrivals);
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (int i = n - 1; i > 0; --i) std::swap(order[i], order[arrival_rng.UniformInt(i + 1)]);
  std::vector<double> weight(n);
  for (int rank = 0; rank < n; ++rank) {
    weight[order[rank]] = options.zipf > 0.0 ? std::pow(rank + 1.0, -options.zipf) : 1.0;
  }
  const double total = std::accumulate(weight.begin(), weight.end(), 0.0);
  double cumulative = 0.0;
  for (int u = 0; u < n; ++u) {
    cumulative += weight[u] / total;
    env.arrival_cdf_.push_back(cumulative);
  }
  env.arrival_cdf_.back() = 1.0;
  return env;
}

double TaskEnvironment::Shared(const Eigen::VectorXd& z, int user) const {
  if (!options_.nonlinear) return v_.row(user).dot(z);
  const int s = UnitsOf(user);
  double value = 0.0;
  for (int k = 0; k < options_.hidden; ++k) {
    value += v_(user, k) * std::tanh(w_[s].col(k).dot(z) + c_[s](k));
  }
  return value;
}

double TaskEnvironment::Mean(const Eigen::VectorXd& context, const Eigen::VectorXd& x, int user,
                             uint64_t round) const {
  const int relevant = options_.relevant > 0 ? options_.relevant : options_.dim;
  Eigen::VectorXd z(options_.context_dim + relevant);
  z.head(options_.context_dim) = context;
  z.tail(relevant) = x.head(relevant) / options_.feature_scale;
  double value = Shared(z, user) + theta_.row(user).dot(z) + intercepts_(user);
  if (options_.drift_amplitude != 0.0) {
    value += options_.drift_amplitude * std::sin(2.0 * M_PI * static_cast<double>(round) /
                                                 static_cast<double>(options_.drift_period));
  }
  return value;
}

Round TaskEnvironment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(options_.seed, kRounds, index);
  Round round;
  const double u = rng.Uniform();
  round.user = static_cast<int>(std::lower_bound(arrival_cdf_.begin(), arrival_cdf_.end(), u) -
                                arrival_cdf_.begin());
  round.user = std::min(round.user, options_.users - 1);
  round.context = Normals(rng, options_.context_dim, 1).col(0);
  round.arms = Normals(rng, options_.dim, options_.candidates, options_.feature_scale);
  round.means.resize(options_.candidates);
  round.noise.resize(options_.candidates);
  for (int k = 0; k < options_.candidates; ++k) {
    round.means(k) = Mean(round.context, round.arms.col(k), round.user, index);
    round.noise(k) = options_.noise_std * rng.Normal();
  }
  return round;
}

}  // namespace graphbandit::sim
