#include "sim/navigation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"

namespace graphbandit::sim {
namespace {

// Streams of the network's and the run's random numbers (StreamRng).
constexpr uint64_t kNetworkStream = 1;
constexpr uint64_t kTruthStream = 2;
constexpr uint64_t kNoiseStream = 3;
constexpr int kTruthAttempts = 20;

double Matern52(double r) {
  const double s = std::sqrt(5.0) * r;
  return (1.0 + s + s * s / 3.0) * std::exp(-s);
}

// Matern-5/2 Gram matrix of the rows of `x` with one length-scale.
Eigen::MatrixXd Matern52Gram(const Eigen::MatrixXd& x, double lengthscale) {
  const Eigen::Index n = x.rows();
  Eigen::MatrixXd k(n, n);
  for (Eigen::Index i = 0; i < n; ++i) {
    for (Eigen::Index j = i; j < n; ++j) {
      k(i, j) = k(j, i) = Matern52((x.row(i) - x.row(j)).norm() / lengthscale);
    }
  }
  return k;
}

bool Connected(int nodes, const std::vector<std::pair<int, int>>& streets,
               const std::vector<char>& kept) {
  std::vector<std::vector<int>> adjacent(nodes);
  for (size_t s = 0; s < streets.size(); ++s) {
    if (!kept[s]) continue;
    adjacent[streets[s].first].push_back(streets[s].second);
    adjacent[streets[s].second].push_back(streets[s].first);
  }
  std::vector<char> seen(nodes, 0);
  std::vector<int> stack = {0};
  seen[0] = 1;
  int count = 1;
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    for (int v : adjacent[u]) {
      if (!seen[v]) {
        seen[v] = 1;
        ++count;
        stack.push_back(v);
      }
    }
  }
  return count == nodes;
}

}  // namespace

double DeterministicEnergy(const VehicleModel& v, double length, double speed, double alpha) {
  const double mechanical = v.mass * v.gravity * length * std::sin(alpha) +
                            v.mass * v.gravity * v.rolling * length * std::cos(alpha) +
                            0.5 * v.drag * v.front_area * v.air_density * length * speed * speed;
  // Traction draws more than the wheels need; braking recovers less than they give.
  const double electric =
      mechanical > 0.0 ? mechanical / v.eta_traction : mechanical * v.eta_recuperation;
  return electric / 3600.0;  // J -> Wh
}

Eigen::MatrixXd LineGraphMaternKernel(const std::vector<std::vector<int>>& successors,
                                      const Eigen::VectorXd& lengths, double nu, double kappa) {
  const int n = static_cast<int>(successors.size());
  const double mean_length = lengths.mean();
  // Incidence Laplacian B B^T of the weighted line graph, one turn at a time.
  Eigen::MatrixXd laplacian = Eigen::MatrixXd::Zero(n, n);
  for (int a = 0; a < n; ++a) {
    const double w = mean_length / lengths(a);
    for (int b : successors[a]) {
      laplacian(a, a) += w * w;
      laplacian(b, b) += w * w;
      laplacian(a, b) -= w * w;
      laplacian(b, a) -= w * w;
    }
  }
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eigen(laplacian);
  Eigen::VectorXd spectrum(n);
  for (int i = 0; i < n; ++i) {
    spectrum(i) = std::pow(2.0 * nu / (kappa * kappa) + std::max(eigen.eigenvalues()(i), 0.0), -nu);
  }
  Eigen::MatrixXd k =
      eigen.eigenvectors() * spectrum.asDiagonal() * eigen.eigenvectors().transpose();
  k /= k.diagonal().mean();
  return 0.5 * (k + k.transpose());
}

absl::StatusOr<std::unique_ptr<NavigationEnvironment>> NavigationEnvironment::Create(
    const NavigationOptions& options, uint64_t seed) {
  if (options.rows < 2 || options.cols < 2 ||
      static_cast<int64_t>(options.rows) * options.cols > 400) {
    return absl::InvalidArgumentError(
        absl::StrFormat("navigation: rows and cols must be >= 2 with rows * cols <= 400, got "
                        "%d x %d",
                        options.rows, options.cols));
  }
  if (!std::isfinite(options.prior_lengthscale) || !(options.prior_lengthscale > 0.0) ||
      !std::isfinite(options.spacing) || !(options.spacing > 0.0) ||
      !std::isfinite(options.relief) || !(options.relief >= 0.0) ||
      !(options.drop_probability >= 0.0) || !(options.drop_probability < 1.0)) {
    return absl::InvalidArgumentError(
        "navigation: prior_lengthscale and spacing must be finite and > 0, relief finite and "
        ">= 0, drop_probability in [0, 1)");
  }
  std::unique_ptr<NavigationEnvironment> env(new NavigationEnvironment());
  env->seed_ = seed;
  Rng rng = StreamRng(options.network_seed, kNetworkStream);
  const int rows = options.rows, cols = options.cols, nodes = rows * cols;
  // Junctions and terrain.
  Eigen::MatrixXd position(nodes, 2);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      position(r * cols + c, 0) = (c + 0.5 * (rng.Uniform() - 0.5)) * options.spacing;
      position(r * cols + c, 1) = (r + 0.5 * (rng.Uniform() - 0.5)) * options.spacing;
    }
  }
  const double extent = std::max(rows, cols) * options.spacing;
  struct Hill {
    double x, y, width, height;
  };
  std::vector<Hill> hills(5);
  for (Hill& h : hills) {
    h.x = rng.Uniform() * cols * options.spacing;
    h.y = rng.Uniform() * rows * options.spacing;
    h.width = (0.15 + 0.2 * rng.Uniform()) * extent;
    h.height = (2.0 * rng.Uniform() - 1.0) * options.relief;
  }
  Eigen::VectorXd elevation = Eigen::VectorXd::Zero(nodes);
  for (int u = 0; u < nodes; ++u) {
    for (const Hill& h : hills) {
      const double dx = position(u, 0) - h.x, dy = position(u, 1) - h.y;
      elevation(u) += h.height * std::exp(-(dx * dx + dy * dy) / (2.0 * h.width * h.width));
    }
  }
  // Streets between grid neighbours, some removed while the network stays connected.
  std::vector<std::pair<int, int>> streets;
  std::vector<double> speed_limit;  // m/s
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const int u = r * cols + c;
      for (int dir = 0; dir < 2; ++dir) {
        const bool horizontal = dir == 0;
        if (horizontal ? c + 1 >= cols : r + 1 >= rows) continue;
        streets.emplace_back(u, horizontal ? u + 1 : u + cols);
        const bool arterial = horizontal ? r % 3 == 0 : c % 3 == 0;
        const double kmh = arterial ? 70.0 : (rng.Uniform() < 0.6 ? 50.0 : 30.0);
        speed_limit.push_back(kmh / 3.6);
      }
    }
  }
  std::vector<char> kept(streets.size(), 1);
  for (size_t s = 0; s < streets.size(); ++s) {
    if (rng.Uniform() >= options.drop_probability) continue;
    kept[s] = 0;
    if (!Connected(nodes, streets, kept)) kept[s] = 1;
  }
  // Directed segments with their contexts.
  std::vector<std::pair<int, int>> segment;  // (from, to)
  std::vector<double> length, speed, incline;
  for (size_t s = 0; s < streets.size(); ++s) {
    if (!kept[s]) continue;
    for (int way = 0; way < 2; ++way) {
      const int u = way == 0 ? streets[s].first : streets[s].second;
      const int v = way == 0 ? streets[s].second : streets[s].first;
      const double flat = (position.row(v) - position.row(u)).norm();
      const double rise = elevation(v) - elevation(u);
      segment.emplace_back(u, v);
      length.push_back(std::hypot(flat, rise));
      speed.push_back(speed_limit[s]);
      incline.push_back(std::atan2(rise, flat));
    }
  }
  const int n = static_cast<int>(segment.size());
  env->successors_.assign(n, {});
  std::vector<std::vector<int>> leaving(nodes);
  for (int e = 0; e < n; ++e) leaving[segment[e].first].push_back(e);
  for (int e = 0; e < n; ++e) {
    for (int next : leaving[segment[e].second]) {
      if (segment[next].second != segment[e].first) env->successors_[e].push_back(next);
    }
    if (env->successors_[e].empty()) env->successors_[e] = leaving[segment[e].second];  // dead end
  }
  env->source_ = leaving[0].front();
  env->goal_ = -1;
  for (int e = 0; e < n && env->goal_ < 0; ++e) {
    if (segment[e].second == nodes - 1) env->goal_ = e;
  }
  // Contexts, prior mean and kernels.
  env->contexts_.resize(n, 3);
  Eigen::VectorXd lengths(n);
  const VehicleModel vehicle;
  env->prior_mean_.resize(n);
  for (int e = 0; e < n; ++e) {
    env->contexts_(e, 0) = length[e];
    env->contexts_(e, 1) = speed[e];
    env->contexts_(e, 2) = incline[e];
    lengths(e) = length[e];
    env->prior_mean_(e) = DeterministicEnergy(vehicle, length[e], speed[e], incline[e]);
  }
  Eigen::MatrixXd standard = env->contexts_;
  for (int j = 0; j < 3; ++j) {
    Eigen::VectorXd column = standard.col(j);
    column.array() -= column.mean();
    const double sd = std::sqrt(column.squaredNorm() / n);
    standard.col(j) = sd > 0.0 ? Eigen::VectorXd(column / sd) : column;
  }
  const double det_variance =
      (env->prior_mean_.array() - env->prior_mean_.mean()).square().sum() / n;
  const double signal = 0.25 * 0.25 * det_variance;
  env->noise_variance_ = 0.1 * 0.1 * det_variance;
  const Eigen::MatrixXd graph = LineGraphMaternKernel(env->successors_, lengths, 2.0, 1.0);
  auto kernel = [&](double lengthscale) -> Eigen::MatrixXd {
    const Eigen::MatrixXd features = Matern52Gram(standard, lengthscale);
    return signal * (0.5 * graph.cwiseProduct(features) + 0.5 * features);
  };
  const Eigen::MatrixXd truth_kernel = kernel(1.0);
  env->prior_covariance_ =
      options.prior_lengthscale == 1.0 ? truth_kernel : kernel(options.prior_lengthscale);
  // The truth: a draw from GP(E_det, k) whose cheapest route exists.
  Eigen::MatrixXd jittered = truth_kernel;
  jittered.diagonal().array() += 1e-9 * signal;
  Eigen::LLT<Eigen::MatrixXd> chol(jittered);
  if (chol.info() != Eigen::Success) {
    return absl::InternalError("navigation: the kernel matrix is not positive definite");
  }
  for (int attempt = 0; attempt < kTruthAttempts; ++attempt) {
    Rng draw = StreamRng(seed, kTruthStream, static_cast<uint64_t>(attempt));
    Eigen::VectorXd z(n);
    for (int e = 0; e < n; ++e) z(e) = draw.Normal();
    env->truth_ = env->prior_mean_ + chol.matrixL() * z;
    auto best = CheapestRouteAnyCosts(env->successors_, env->source_, env->goal_, env->truth_);
    if (best.ok()) {
      env->best_energy_ = 0.0;
      for (int e : *best) env->best_energy_ += env->truth_(e);
      return env;
    }
  }
  return absl::InternalError(absl::StrFormat(
      "navigation: %d draws of the truth all had a cycle of negative energy", kTruthAttempts));
}

double NavigationEnvironment::Observe(uint64_t round, int e) const {
  Rng noise = StreamRng(seed_, kNoiseStream, round * 1'000'003ULL + static_cast<uint64_t>(e));
  return truth_(e) + std::sqrt(noise_variance_) * noise.Normal();
}

RouteRun RunRoutes(const NavigationEnvironment& env, const RoutePolicy& policy, int64_t rounds,
                   int sample_points, uint64_t rng_seed, std::atomic<int64_t>* steps_done) {
  RouteRun out;
  const int n = env.segments();
  Eigen::VectorXd mean = env.prior_mean();
  Eigen::MatrixXd covariance;  // exact GP
  Eigen::VectorXd variance;    // per-segment Bayesian inference
  if (policy.independent) {
    variance = env.prior_covariance().diagonal();
  } else {
    covariance = env.prior_covariance();
  }
  IndexSchedule schedule = policy.schedule;
  schedule.arm_count = n;
  const double noise_variance = env.noise_variance();
  const double noise_sd = std::sqrt(noise_variance);
  const ShortestPathOracle oracle(env.successors(), env.source(), env.goal());
  uint64_t mix = rng_seed * 0x9E3779B97F4A7C15ULL ^ 0x0C6F1A7E5EEDULL;
  Rng rng(SplitMix64(mix));
  std::set<std::vector<int>> routes;
  Eigen::VectorXd stddev(n), weight(n), column(n);
  double cumulative = 0.0, seconds = 0.0;
  int next_sample = 1;
  sample_points = static_cast<int>(std::min<int64_t>(std::max(sample_points, 1), rounds));
  for (int64_t t = 0; t < rounds; ++t) {
    const auto start = std::chrono::steady_clock::now();
    for (int e = 0; e < n; ++e) {
      stddev(e) = std::sqrt(std::max(policy.independent ? variance(e) : covariance(e, e), 0.0));
    }
    const double width =
        policy.exploration * IndexWidth(policy.rule, schedule, static_cast<double>(t + 1));
    const Eigen::VectorXd optimistic =
        BaseArmIndices(policy.rule, width, mean, stddev, /*minimise=*/true, rng);
    for (int e = 0; e < n; ++e) {
      weight(e) =
          RectifiedNormalMean(optimistic(e), policy.rectify_with_posterior ? stddev(e) : noise_sd);
    }
    auto route = oracle.Select(weight, rng);
    if (!route.ok()) {
      out.error = absl::StrFormat("round %d: %s", t, route.status().message());
      return out;
    }
    double energy = 0.0;
    for (int e : *route) {
      energy += env.true_energy()(e);
      const double y = env.Observe(static_cast<uint64_t>(t), e);
      if (policy.independent) {
        // Conjugate Gaussian update with known noise (docs/algorithms.md §2.8).
        const double posterior = 1.0 / (1.0 / variance(e) + 1.0 / noise_variance);
        mean(e) = posterior * (mean(e) / variance(e) + y / noise_variance);
        variance(e) = posterior;
      } else {
        // One observation of segment e: a rank-one update of the GP posterior (docs/algorithms.md
        // §2.3).
        column = covariance.col(e);
        const double denominator = column(e) + noise_variance;
        mean += column * ((y - mean(e)) / denominator);
        covariance.noalias() -= column * (column.transpose() / denominator);
      }
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    routes.insert(*route);
    cumulative += energy - env.best_route_energy();
    while (next_sample <= sample_points &&
           static_cast<int64_t>(
               std::ceil(static_cast<double>(next_sample) * rounds / sample_points)) == t + 1) {
      out.steps.push_back(t + 1);
      out.cumulative_regret.push_back(cumulative);
      out.distinct_routes.push_back(static_cast<double>(routes.size()));
      ++next_sample;
    }
    if (steps_done != nullptr) steps_done->fetch_add(1, std::memory_order_relaxed);
  }
  out.seconds_per_step = seconds / static_cast<double>(std::max<int64_t>(rounds, 1));
  return out;
}

}  // namespace graphbandit::sim
