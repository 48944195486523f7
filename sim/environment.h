// The synthetic graph environments of the Laplacian Kernelized Bandit paper (docs/algorithms.md
// §1.9): n users on a random graph, a pool of M unit-norm items in R^d, each round one uniformly
// random user sees M_t distinct items from the pool, and rewards are f(item, user) plus noise,
// with f drawn from one of three regimes:
//   * kGpDraw: f ~ N(0, G_env (x) K_x) over the whole pool, G_env = (L + rho I)^-p with an RBF
//     K_x (length-scale 1); noise std = noise_scale * range(f);
//   * kRepresenter: f = K_grid alpha with alpha ~ N(0, 1) on every (item, user) pair;
//   * kLinearGob: f(x, u) = x^T theta_u with Theta = (I + eta L)^-1 Theta_0.
// The contextual single-user environments of the Efficient Kernel UCB paper (§4.9) are here too:
// Bump, Chessboard and Step Diagonal.
//
// Everything is seeded; a round is a pure function of (seed, round index), so any number of
// concurrent players, or several policies, face exactly the same sequence of users, candidate
// sets and noise. Regret is pseudo-regret: the best shown arm's mean minus the chosen arm's.
#ifndef GRAPHBANDIT_SIM_ENVIRONMENT_H_
#define GRAPHBANDIT_SIM_ENVIRONMENT_H_

#include <Eigen/Dense>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/random.h"
#include "core/kernel/arm_kernel.h"

namespace graphbandit::sim {

// An independent random stream per (seed, stream number, index): environments draw each part
// (graph, parameters, round `index`) from its own, so that changing one leaves the others alone.
Rng StreamRng(uint64_t seed, uint64_t stream, uint64_t index = 0);

enum class GraphKind { kErdosRenyi, kRbf, kSbm };
enum class RewardKind { kGpDraw, kRepresenter, kLinearGob };

absl::StatusOr<GraphKind> ParseGraphKind(absl::string_view name);  // "er", "rbf", "sbm"
absl::StatusOr<RewardKind> ParseRewardKind(
    absl::string_view name);  // "gp", "representer", "linear"

struct EnvironmentOptions {
  int users = 20;
  int pool = 20;       // M
  int candidates = 5;  // M_t, shown per round
  int dim = 10;        // d
  GraphKind graph = GraphKind::kErdosRenyi;
  double er_probability = 0.2;
  double rbf_graph_scale = 0.1;      // rho_L in w_ij = exp(-rho_L |z_i - z_j|^2)
  double rbf_graph_threshold = 0.1;  // edges with smaller weight are dropped
  int sbm_blocks = 4;
  double sbm_p_in = 0.5;
  double sbm_p_out = 0.02;
  RewardKind reward = RewardKind::kGpDraw;
  double rho = 0.01;          // of the environment's user kernel (not the learner's)
  double exponent = 1.0;      // p in (L + rho I)^-p; the paper's appendix writes p = 1/2
  double lengthscale = 1.0;   // of the environment's RBF item kernel
  double noise_scale = 0.01;  // GP draw: noise std as a fraction of range(f)
  double noise_std = 0.1;     // other regimes
  double gob_eta = 1.0;       // Linear-GOB smoothing
  // Multiplies every reward mean and the noise (the policies' priors and ridges stay): the LK
  // paper does not state its rewards' absolute scale, which sets how much a fixed ridge and
  // exploration explore.
  double reward_scale = 1.0;
  // Drift: from this round on, rewards follow a second, independent draw of the same regime
  // (0 = never). Used to show what forgetting buys.
  int64_t switch_round = 0;
  uint64_t seed = 1;
};

struct Edge {
  int a, b;  // a < b
  double weight;
};

struct Round {
  int user = 0;
  Eigen::VectorXd context;  // empty when the environment has no context
  Eigen::MatrixXd arms;     // raw features of the shown arms, one column each
  std::vector<int> items;   // pool index of each shown arm (finite-pool environments)
  Eigen::VectorXd means;    // noise-free reward of each shown arm
  Eigen::VectorXd noise;    // the noise that comes with each shown arm
  // A baseline common to every arm of the round (drifting rewards, SG paper): in the rewards,
  // not in the regret (it does not change which arm is best).
  double offset = 0.0;
};

// The kernel an environment's rewards are drawn from, for policies that are told it (the
// tighter-bounds paper gives its algorithms the true kernel).
struct TrueKernel {
  KernelType type = KernelType::kRbf;
  double lengthscale = 1.0;
};

class SimEnvironment {
 public:
  virtual ~SimEnvironment() = default;
  virtual std::string name() const = 0;
  virtual int users() const = 0;
  virtual const std::vector<Edge>& edges() const = 0;
  virtual int context_dim() const = 0;
  virtual int arm_dim() const = 0;
  // The finite set arms are drawn from (arm_dim x M), or null when arms vary with the context.
  virtual const Eigen::MatrixXd* pool() const { return nullptr; }
  virtual Round MakeRound(uint64_t index) const = 0;
  // A round the policy plays and learns before the first scored round, outside the regret and
  // the timings (an experiment's initial pull); usually none.
  virtual std::optional<Round> PriorRound() const { return std::nullopt; }
  virtual std::optional<TrueKernel> true_kernel() const { return std::nullopt; }

  double Reward(const Round& round, int slot) const {
    return round.offset + round.means(slot) + round.noise(slot);
  }
  double Regret(const Round& round, int slot) const {
    return round.means.maxCoeff() - round.means(slot);
  }
};

class Environment final : public SimEnvironment {
 public:
  static absl::StatusOr<Environment> Create(const EnvironmentOptions& options);

  const EnvironmentOptions& options() const { return options_; }
  std::string name() const override;
  int users() const override { return options_.users; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return options_.dim; }
  const Eigen::MatrixXd* pool() const override { return &items_; }
  Round MakeRound(uint64_t index) const override;

  // Items as columns (d x M), unit norm.
  const Eigen::MatrixXd& items() const { return items_; }
  // The noise-free reward f(item, user), pool x users.
  const Eigen::MatrixXd& means() const { return means_; }
  double noise_std() const { return noise_std_; }

 private:
  EnvironmentOptions options_;
  Eigen::MatrixXd items_;
  std::vector<Edge> edges_;
  Eigen::MatrixXd means_;
  Eigen::MatrixXd switched_means_;  // after options_.switch_round
  double noise_std_ = 0.0;
};

// EK paper environments (docs/algorithms.md §4.9, exactly as the authors' code where the paper is
// silent): one user; a context x ~ U[0,1]^p per round; the actions are 10 fixed anchors drawn
// without replacement from {0, 0.01, ..., 0.99} (arm features: the anchor value); noise
// N(0, 0.1^2). The reward function's parameters are the same for every run; `seed` drives the
// contexts and the noise.
//
// By default the parameters come from our own generator with seed 123. With `fixed_instance`
// (Bump only) they are the EK authors' instance, the values their public code draws with NumPy's
// RandomState(123) (anchors, a*, x*, w*; see EkAuthorsBumpInstance), and every run starts, as
// their agent does, with one pull of anchor 0.82 in a context of the run's own: the pull is
// learned but not scored (PriorRound).
enum class EkKind { kBump, kChessboard, kStepDiagonal };

// The EK authors' Bump instance (their NumPy RandomState(123) draws), pinned by a unit test.
struct EkBumpInstance {
  std::vector<double> anchors;
  double best_anchor = 0.0;
  Eigen::VectorXd x_star, w_star;
  int first_pull = 0;  // the anchor index of their agent's first pull
};
const EkBumpInstance& EkAuthorsBumpInstance();

class EkEnvironment final : public SimEnvironment {
 public:
  EkEnvironment(EkKind kind, uint64_t seed, bool fixed_instance = false);
  std::string name() const override;
  int users() const override { return 1; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return kind_ == EkKind::kBump ? 5 : 1; }
  int arm_dim() const override { return 1; }
  Round MakeRound(uint64_t index) const override;
  std::optional<Round> PriorRound() const override;
  // The noise-free reward of anchor value a in context x.
  double Mean(const Eigen::VectorXd& x, double a) const;

 private:
  EkKind kind_;
  uint64_t seed_;
  bool fixed_instance_;
  std::vector<double> anchors_;
  std::vector<Edge> edges_;
  // Bump parameters.
  double best_anchor_ = 0.0;
  Eigen::VectorXd x_star_, w_star_;
};

// The combinatorial Laplacian of an edge list over n users.
Eigen::MatrixXd DenseLaplacian(int n, const std::vector<Edge>& edges);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_ENVIRONMENT_H_
