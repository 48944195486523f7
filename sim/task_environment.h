// Tasks unlike the ones the papers (and the bundled load generator) use, for checking that the
// default model works where nobody tuned it: the `robustness` preset.
//
// Each round one user arrives (uniformly, or Zipf-distributed so that most users are cold) and
// sees `candidates` fresh items with `dim` features drawn from N(0, feature_scale^2) (volatile
// arms: no item repeats). The noise-free reward of item x for user u in round t is
//
//   f(x, u, t) = sum_k V[u, k] tanh(w_k . z + c_k)   (non-linear part, shared by similar users;
//                                                      with block_units, w and c are drawn for
//                                                      each SBM block: unrelated functions)
//              + theta_u . z                         (per-user linear part)
//              + b_u                                 (per-user intercept)
//              + A sin(2 pi t / P)                   (drifting baseline, the same for every item)
//
// with z = [context, x[:relevant] / feature_scale]: only the first `relevant` features matter
// (the rest are irrelevant), and the reward does not depend on the feature scale, only the
// learner's inputs do. Similarity follows the graph: on a stochastic block model V[u] and the
// linear task's shared weights are those of u's block; on an Erdos-Renyi graph they are smoothed
// over the graph, (I + L)^-1 times independent draws. The non-linear part and the shared linear
// part are normalised to unit standard deviation over the item distribution. Regret is
// pseudo-regret (noise-free best shown item minus the chosen one); the baseline and the
// intercepts cancel in it, so they only test how well a learner copes with them.
#ifndef GRAPHBANDIT_SIM_TASK_ENVIRONMENT_H_
#define GRAPHBANDIT_SIM_TASK_ENVIRONMENT_H_

#include <Eigen/Dense>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sim/environment.h"

namespace graphbandit::sim {

struct TaskOptions {
  std::string label = "task";
  int users = 30;
  GraphKind graph = GraphKind::kSbm;  // kSbm or kErdosRenyi
  int blocks = 3;                     // SBM
  double p_in = 0.3;                  // SBM edge probability within a block
  double p_out = 0.01;                // SBM edge probability across blocks
  double er_probability = 0.1;        // Erdos-Renyi
  int candidates = 20;
  int dim = 8;
  int relevant = 0;     // features the reward depends on (0 = all)
  int context_dim = 0;  // a context vector N(0, I) per round, seen by the non-linear part
  double feature_scale = 1.0;
  bool nonlinear = true;     // false: the shared part is linear
  int hidden = 8;            // tanh units of the non-linear part
  bool block_units = false;  // SBM: each block draws its own units (else all share them)
  double user_linear = 0.2;  // std of the per-user linear part
  double intercept = 0.0;    // std of the per-user intercepts
  double noise_std = 0.3;
  double zipf = 0.0;  // user arrivals: 0 uniform, s > 0 Zipf with exponent s
  double drift_amplitude = 0.0;
  int64_t drift_period = 1000;
  uint64_t seed = 1;
};

class TaskEnvironment final : public SimEnvironment {
 public:
  static absl::StatusOr<TaskEnvironment> Create(const TaskOptions& options);

  std::string name() const override { return options_.label; }
  int users() const override { return options_.users; }
  const std::vector<Edge>& edges() const override { return edges_; }
  int context_dim() const override { return options_.context_dim; }
  int arm_dim() const override { return options_.dim; }
  Round MakeRound(uint64_t index) const override;

  const TaskOptions& options() const { return options_; }
  // Noise-free reward of raw features x for user u with context c in round t.
  double Mean(const Eigen::VectorXd& context, const Eigen::VectorXd& x, int user,
              uint64_t round) const;

 private:
  double Shared(const Eigen::VectorXd& z, int user) const;
  // Which set of units user u's non-linear part uses.
  int UnitsOf(int user) const { return w_.size() == 1 ? 0 : user % options_.blocks; }

  TaskOptions options_;
  std::vector<Edge> edges_;
  std::vector<double> arrival_cdf_;  // cumulative user arrival probabilities
  std::vector<Eigen::MatrixXd> w_;   // per set of units: (context + relevant) x hidden
  std::vector<Eigen::VectorXd> c_;   // per set of units: hidden
  Eigen::MatrixXd v_;                // users x hidden (non-linear) or users x inputs (linear)
  Eigen::MatrixXd theta_;            // users x inputs: per-user linear part
  Eigen::VectorXd intercepts_;       // users
};

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_TASK_ENVIRONMENT_H_
