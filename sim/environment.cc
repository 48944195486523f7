#include "sim/environment.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "core/base/random.h"

namespace graphbandit::sim {

Rng StreamRng(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t s = seed ^ (stream * 0x9E3779B97F4A7C15ULL);
  SplitMix64(s);
  return Rng(s ^ (index * 0xD1B54A32D192ED03ULL));
}

namespace {

// Independent streams, so that changing one part (say the graph) leaves the others unchanged.
enum Stream : uint64_t {
  kItems = 1,
  kGraph = 2,
  kRewards = 3,
  kRounds = 4,
  kSwitchedRewards = 5,
  kEkPriorRound = 6
};
// Our EK environments' reward function comes from here (the authors' instance is pinned).
constexpr uint64_t kEkInstanceSeed = 123;

// Symmetric matrix function through the eigendecomposition: V f(Lambda) V^T.
template <typename F>
Eigen::MatrixXd SymmetricFunction(const Eigen::MatrixXd& a, F f) {
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(a);
  Eigen::VectorXd values = eig.eigenvalues();
  for (Eigen::Index i = 0; i < values.size(); ++i) values(i) = f(std::max(values(i), 0.0));
  return eig.eigenvectors() * values.asDiagonal() * eig.eigenvectors().transpose();
}

}  // namespace

absl::StatusOr<GraphKind> ParseGraphKind(absl::string_view name) {
  if (name == "er") return GraphKind::kErdosRenyi;
  if (name == "rbf") return GraphKind::kRbf;
  if (name == "sbm") return GraphKind::kSbm;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown graph \"%s\" (expected er, rbf or sbm)", name));
}

absl::StatusOr<RewardKind> ParseRewardKind(absl::string_view name) {
  if (name == "gp") return RewardKind::kGpDraw;
  if (name == "representer") return RewardKind::kRepresenter;
  if (name == "linear") return RewardKind::kLinearGob;
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown reward model \"%s\" (expected gp, representer or linear)", name));
}

Eigen::MatrixXd DenseLaplacian(int n, const std::vector<Edge>& edges) {
  Eigen::MatrixXd l = Eigen::MatrixXd::Zero(n, n);
  for (const auto& e : edges) {
    l(e.a, e.b) -= e.weight;
    l(e.b, e.a) -= e.weight;
    l(e.a, e.a) += e.weight;
    l(e.b, e.b) += e.weight;
  }
  return l;
}

absl::StatusOr<Environment> Environment::Create(const EnvironmentOptions& options) {
  if (options.users < 1 || options.pool < 1 || options.dim < 1 || options.candidates < 1 ||
      options.candidates > options.pool) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "environment needs users >= 1, dim >= 1 and 1 <= candidates (%d) <= pool (%d)",
        options.candidates, options.pool));
  }
  if (!(options.rho > 0.0) || !(options.lengthscale > 0.0)) {
    return absl::InvalidArgumentError("environment rho and lengthscale must be > 0");
  }
  Environment env;
  env.options_ = options;
  const int n = options.users, m = options.pool, d = options.dim;

  Rng item_rng = StreamRng(options.seed, kItems);
  env.items_.resize(d, m);
  for (int j = 0; j < m; ++j) {
    for (int i = 0; i < d; ++i) env.items_(i, j) = item_rng.Normal();
    env.items_.col(j).normalize();
  }

  Rng graph_rng = StreamRng(options.seed, kGraph);
  switch (options.graph) {
    case GraphKind::kErdosRenyi:
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          if (graph_rng.Uniform() < options.er_probability) env.edges_.push_back({a, b, 1.0});
        }
      }
      break;
    case GraphKind::kRbf: {
      Eigen::MatrixXd z(4, n);
      for (int u = 0; u < n; ++u) {
        for (int i = 0; i < 4; ++i) z(i, u) = graph_rng.Normal();
      }
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          const double w = std::exp(-options.rbf_graph_scale * (z.col(a) - z.col(b)).squaredNorm());
          if (w >= options.rbf_graph_threshold) env.edges_.push_back({a, b, w});
        }
      }
      break;
    }
    case GraphKind::kSbm:
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          const bool same = a % options.sbm_blocks == b % options.sbm_blocks;
          if (graph_rng.Uniform() < (same ? options.sbm_p_in : options.sbm_p_out)) {
            env.edges_.push_back({a, b, 1.0});
          }
        }
      }
      break;
  }
  const Eigen::MatrixXd laplacian = DenseLaplacian(n, env.edges_);

  Eigen::MatrixXd item_kernel(m, m);
  for (int a = 0; a < m; ++a) {
    for (int b = 0; b < m; ++b) {
      item_kernel(a, b) = std::exp(-(env.items_.col(a) - env.items_.col(b)).squaredNorm() /
                                   (2.0 * options.lengthscale * options.lengthscale));
    }
  }
  const Eigen::MatrixXd regularised = laplacian + options.rho * Eigen::MatrixXd::Identity(n, n);
  // One draw of the reward function from `stream`.
  auto draw = [&](uint64_t stream, double* noise_std) {
    Rng reward_rng = StreamRng(options.seed, stream);
    auto standard_normal = [&reward_rng](int rows, int cols) {
      Eigen::MatrixXd z(rows, cols);
      for (int j = 0; j < cols; ++j) {
        for (int i = 0; i < rows; ++i) z(i, j) = reward_rng.Normal();
      }
      return z;
    };
    Eigen::MatrixXd means;
    switch (options.reward) {
      case RewardKind::kGpDraw: {
        // F = K_x^{1/2} Z (G_env^{1/2})^T has covariance G_env (x) K_x over (item, user).
        const Eigen::MatrixXd green_root = SymmetricFunction(
            regularised, [p = options.exponent](double v) { return std::pow(v, -0.5 * p); });
        const Eigen::MatrixXd item_root =
            SymmetricFunction(item_kernel, [](double v) { return std::sqrt(v); });
        means = item_root * standard_normal(m, n) * green_root;
        *noise_std = options.noise_scale * (means.maxCoeff() - means.minCoeff());
        break;
      }
      case RewardKind::kRepresenter: {
        const Eigen::MatrixXd green = SymmetricFunction(
            regularised, [p = options.exponent](double v) { return std::pow(v, -p); });
        means = item_kernel * standard_normal(m, n) * green;
        *noise_std = options.noise_std;
        break;
      }
      case RewardKind::kLinearGob: {
        const Eigen::MatrixXd theta0 = standard_normal(n, d);
        const Eigen::MatrixXd theta =
            (Eigen::MatrixXd::Identity(n, n) + options.gob_eta * laplacian).ldlt().solve(theta0);
        means = env.items_.transpose() * theta.transpose();
        *noise_std = options.noise_std;
        break;
      }
    }
    // Scaling rewards scales their noise too (the signal-to-noise ratio stays).
    *noise_std *= options.reward_scale;
    return Eigen::MatrixXd(options.reward_scale * means);
  };
  env.means_ = draw(kRewards, &env.noise_std_);
  if (options.switch_round > 0) {
    double unused = 0.0;
    env.switched_means_ = draw(kSwitchedRewards, &unused);
  }
  return env;
}

std::string Environment::name() const {
  const char* reward = options_.reward == RewardKind::kGpDraw        ? "GP-draw"
                       : options_.reward == RewardKind::kRepresenter ? "representer"
                                                                     : "Linear-GOB";
  const char* graph = options_.graph == GraphKind::kErdosRenyi ? "ER"
                      : options_.graph == GraphKind::kRbf      ? "RBF"
                                                               : "SBM";
  return absl::StrFormat("%s %s M=%d d=%d n=%d", reward, graph, options_.pool, options_.dim,
                         options_.users);
}

Round Environment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(options_.seed, kRounds, index);
  Round round;
  round.user = static_cast<int>(rng.UniformInt(options_.users));
  std::vector<int> pool(options_.pool);
  std::iota(pool.begin(), pool.end(), 0);
  round.arms.resize(options_.dim, options_.candidates);
  round.means.resize(options_.candidates);
  round.noise.resize(options_.candidates);
  for (int k = 0; k < options_.candidates; ++k) {  // partial Fisher-Yates: distinct items
    std::swap(pool[k], pool[k + rng.UniformInt(options_.pool - k)]);
    round.items.push_back(pool[k]);
    round.arms.col(k) = items_.col(pool[k]);
    const bool switched =
        options_.switch_round > 0 && static_cast<int64_t>(index) >= options_.switch_round;
    round.means(k) = (switched ? switched_means_ : means_)(pool[k], round.user);
    round.noise(k) = noise_std_ * rng.Normal();
  }
  return round;
}

const EkBumpInstance& EkAuthorsBumpInstance() {
  static const EkBumpInstance* instance = [] {
    auto* bump = new EkBumpInstance;
    bump->anchors = {0.08, 0.70, 0.82, 0.28, 0.63, 0.00, 0.05, 0.50, 0.81, 0.04};
    bump->best_anchor = 0.81;
    bump->x_star.resize(5);
    bump->x_star << 0.10854, 0.51165, 0.90977, 0.21838, 0.36310;
    bump->w_star.resize(5);
    bump->w_star << 0.70995, 0.42278, -0.21411, -0.53740, -0.23965;
    bump->first_pull = 2;  // anchor 0.82
    return bump;
  }();
  return *instance;
}

EkEnvironment::EkEnvironment(EkKind kind, uint64_t seed, bool fixed_instance)
    : kind_(kind), seed_(seed), fixed_instance_(fixed_instance && kind == EkKind::kBump) {
  if (fixed_instance_) {
    const EkBumpInstance& authors = EkAuthorsBumpInstance();
    anchors_ = authors.anchors;
    best_anchor_ = authors.best_anchor;
    x_star_ = authors.x_star;
    w_star_ = authors.w_star;
    return;
  }
  Rng params(kEkInstanceSeed);  // the reward function is the same for every run
  std::vector<int> grid(100);
  std::iota(grid.begin(), grid.end(), 0);
  for (int k = 0; k < 10; ++k) {
    std::swap(grid[k], grid[k + params.UniformInt(100 - k)]);
    anchors_.push_back(grid[k] / 100.0);
  }
  best_anchor_ = anchors_[params.UniformInt(anchors_.size())];
  x_star_.resize(5);
  w_star_.resize(5);
  for (int i = 0; i < 5; ++i) x_star_(i) = params.Uniform();
  for (int i = 0; i < 5; ++i) w_star_(i) = 2.0 * params.Uniform() - 1.0;
}

std::string EkEnvironment::name() const {
  switch (kind_) {
    case EkKind::kBump:
      return "Bump";
    case EkKind::kChessboard:
      return "Chessboard";
    case EkKind::kStepDiagonal:
      return "Step Diagonal";
  }
  return "EK";
}

double EkEnvironment::Mean(const Eigen::VectorXd& x, double a) const {
  switch (kind_) {
    case EkKind::kBump:
      return std::max(0.0, 1.0 - std::abs(a - best_anchor_) - w_star_.dot(x - x_star_));
    case EkKind::kChessboard: {
      // 4 x 4 cells of width 0.25 over (context, action); the authors' layout.
      const int cx = std::min(3, static_cast<int>(x(0) / 0.25));
      const int ca = std::min(3, static_cast<int>(a / 0.25));
      if ((cx == 1 && ca == 0) || (cx == 1 && ca == 2) || (cx == 3 && ca == 2)) return 1.0;
      if ((cx == 0 && ca == 1) || (cx == 2 && ca == 1) || (cx == 2 && ca == 3)) return 0.5;
      return 0.0;
    }
    case EkKind::kStepDiagonal:
      if (std::abs(x(0) - (a + 0.15)) < 0.1) return 1.0;
      if (std::abs(x(0) - (a - 0.15)) < 0.1) return 0.5;
      return 0.0;
  }
  return 0.0;
}

Round EkEnvironment::MakeRound(uint64_t index) const {
  Rng rng = StreamRng(seed_, kRounds, index);
  Round round;
  round.user = 0;
  round.context.resize(context_dim());
  for (int i = 0; i < context_dim(); ++i) round.context(i) = rng.Uniform();
  const int n = static_cast<int>(anchors_.size());
  round.arms.resize(1, n);
  round.means.resize(n);
  round.noise.resize(n);
  for (int k = 0; k < n; ++k) {
    round.arms(0, k) = anchors_[k];
    round.means(k) = Mean(round.context, anchors_[k]);
    round.noise(k) = 0.1 * rng.Normal();
  }
  return round;
}

std::optional<Round> EkEnvironment::PriorRound() const {
  if (!fixed_instance_) return std::nullopt;
  // The authors' agent pulls one anchor before its first decision, in a context of the run.
  Rng rng = StreamRng(seed_, kEkPriorRound, 0);
  Round round;
  round.context.resize(context_dim());
  for (int i = 0; i < context_dim(); ++i) round.context(i) = rng.Uniform();
  const double anchor = anchors_[EkAuthorsBumpInstance().first_pull];
  round.arms.resize(1, 1);
  round.arms(0, 0) = anchor;
  round.means.resize(1);
  round.means(0) = Mean(round.context, anchor);
  round.noise.resize(1);
  round.noise(0) = 0.1 * rng.Normal();
  return round;
}

}  // namespace graphbandit::sim
