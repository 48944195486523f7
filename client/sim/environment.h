// The synthetic graph environments of the Laplacian Kernelized Bandit paper (ALGORITHMS.md §1.9):
// n users on a random graph, a pool of M unit-norm items in R^d, each round one uniformly
// random user sees M_t distinct items from the pool, and rewards are f(item, user) plus noise,
// with f drawn from one of three regimes:
//   * kGpDraw: f ~ N(0, G_env (x) K_x) over the whole pool, G_env = (L + rho I)^-p with an RBF
//     K_x (length-scale 1); noise std = noise_scale * range(f);
//   * kRepresenter: f = K_grid alpha with alpha ~ N(0, 1) on every (item, user) pair;
//   * kLinearGob: f(x, u) = x^T theta_u with Theta = (I + eta L)^-1 Theta_0.
// Everything is seeded; a round is a pure function of (seed, round index), so any number of
// concurrent players, or several policies, face exactly the same sequence of users, candidate
// sets and noise.
#ifndef GRAPHBANDIT_CLIENT_SIM_ENVIRONMENT_H_
#define GRAPHBANDIT_CLIENT_SIM_ENVIRONMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::sim {

enum class GraphKind { kErdosRenyi, kRbf, kSbm };
enum class RewardKind { kGpDraw, kRepresenter, kLinearGob };

absl::StatusOr<GraphKind> ParseGraphKind(absl::string_view name);    // "er", "rbf", "sbm"
absl::StatusOr<RewardKind> ParseRewardKind(absl::string_view name);  // "gp", "representer", "linear"

struct EnvironmentOptions {
  int users = 20;
  int pool = 20;        // M
  int candidates = 5;   // M_t, shown per round
  int dim = 10;         // d
  GraphKind graph = GraphKind::kErdosRenyi;
  double er_probability = 0.2;
  double rbf_graph_scale = 0.1;      // rho_L in w_ij = exp(-rho_L |z_i - z_j|^2)
  double rbf_graph_threshold = 0.1;  // edges with smaller weight are dropped
  int sbm_blocks = 4;
  double sbm_p_in = 0.5;
  double sbm_p_out = 0.02;
  RewardKind reward = RewardKind::kGpDraw;
  double rho = 0.01;           // of the environment's user kernel (not the learner's)
  double exponent = 1.0;       // p in (L + rho I)^-p; the paper's appendix writes p = 1/2
  double lengthscale = 1.0;    // of the environment's RBF item kernel
  double noise_scale = 0.01;   // GP draw: noise std as a fraction of range(f)
  double noise_std = 0.1;      // other regimes
  double gob_eta = 1.0;        // Linear-GOB smoothing
  uint64_t seed = 1;
};

struct Round {
  int user = 0;
  std::vector<int> items;      // indices into the pool, distinct
  std::vector<double> noise;   // one draw per shown item
};

class Environment {
 public:
  static absl::StatusOr<Environment> Create(const EnvironmentOptions& options);

  const EnvironmentOptions& options() const { return options_; }
  // Items as columns (d x M), unit norm.
  const Eigen::MatrixXd& items() const { return items_; }
  // Undirected edges (a < b) with weights.
  struct Edge {
    int a, b;
    double weight;
  };
  const std::vector<Edge>& edges() const { return edges_; }
  // The noise-free reward f(item, user), pool x users.
  const Eigen::MatrixXd& means() const { return means_; }
  double noise_std() const { return noise_std_; }

  Round MakeRound(uint64_t index) const;
  // Noisy reward of shown item number `slot` of the round.
  double Reward(const Round& round, int slot) const {
    return means_(round.items[slot], round.user) + round.noise[slot];
  }
  // Best mean among the shown items minus the mean of shown item `slot` (>= 0).
  double Regret(const Round& round, int slot) const;

 private:
  EnvironmentOptions options_;
  Eigen::MatrixXd items_;
  std::vector<Edge> edges_;
  Eigen::MatrixXd means_;
  double noise_std_ = 0.0;
};

// The combinatorial Laplacian of an edge list over n users.
Eigen::MatrixXd DenseLaplacian(int n, const std::vector<Environment::Edge>& edges);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_CLIENT_SIM_ENVIRONMENT_H_
