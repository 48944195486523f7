// The synthetic environment of the SemiGraphTS paper (SG; docs/algorithms.md §5.8), as the authors'
// code builds it: n users on an Erdos-Renyi graph drawn once from a fixed seed (the same graph
// for every run), preferences Theta = (I + gamma L_rw)^-1 Theta_0 with Theta_0 ~ N(0, 1) and each
// row scaled to unit norm, so that neighbours prefer similar things (gamma sets how much); each
// round a uniformly random user sees N arms in R^d whose features are block-sparse (arm i is
// nonzero only in its own block of d/N coordinates, drawn uniformly from the unit ball), and the
// reward of arm i is nu(t) + b_i^T mu_j + N(0, noise^2). Non-stationary: nu(t) = -max_i
// b_i^T mu_j, so the best arm always pays 0 on average and the baseline moves with every
// candidate set; stationary: nu = 0. Regret leaves nu out.
#ifndef GRAPHBANDIT_SIM_SG_ENVIRONMENT_H_
#define GRAPHBANDIT_SIM_SG_ENVIRONMENT_H_

#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/environment.h"

namespace graphbandit::sim {

struct SgOptions {
  int users = 30;
  int arms = 10;  // N, shown every round
  int dim = 40;   // d, a multiple of arms
  double er_probability = 0.4;
  double gamma = 5.0;
  double noise_std = 0.1;
  bool non_stationary = true;
  uint64_t graph_seed = 1234;  // the graph is the same for every run
  uint64_t seed = 1;           // preferences, users, arms and noise
};

class SgEnvironment final : public SimEnvironment {
 public:
  static absl::StatusOr<SgEnvironment> Create(const SgOptions& options);

  std::string name() const override;
  int users() const override { return options_.users; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return options_.dim; }
  Round MakeRound(uint64_t index) const override;

  // Users' preferences, one unit-norm row each.
  const Eigen::MatrixXd& preferences() const { return theta_; }

 private:
  SgOptions options_;
  std::vector<Edge> edges_;
  Eigen::MatrixXd theta_;
};

// I - D^-1 W of an edge list over n users (rows of isolated users: e_u^T).
Eigen::MatrixXd RandomWalkLaplacian(int n, const std::vector<Edge>& edges);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_SG_ENVIRONMENT_H_
