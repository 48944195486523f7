// A policy as the simulator configures it: which learner (posterior or estimator), with which
// kernels and hyper-parameters, and which selection rule. MakeRunPolicy turns a spec into a live
// learner for one environment, exactly as the server would use it: the same Learner interface
// (core/learner/posterior.h) and the same selection rules (core/policy/selection.h).
#ifndef GRAPHBANDIT_SIM_POLICY_SPEC_H_
#define GRAPHBANDIT_SIM_POLICY_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/fit/refit.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/baseline_tracker.h"
#include "core/learner/batched_nystrom_posterior.h"
#include "core/learner/linear_posterior.h"
#include "core/learner/lk_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "core/learner/posterior.h"
#include "core/model/model_options.h"
#include "core/policy/selection.h"
#include "sim/environment.h"

namespace graphbandit::sim {

enum class Family {
  kLkGp,     // exact GP (LK-GP-UCB/TS, COOP-KernelUCB, GP-UCB, K-UCB)
  kEk,       // EK-UCB / EK-TS: incremental Nystrom with KORS
  kBatched,  // CBBKB / CBKB: batched Nystrom re-draws
  kLinear,   // LinUCB per user / pooled, GoB.Lin, GraphUCB
  kRandom,   // uniformly random choice (a learner that knows nothing: every candidate ties)
  // A policy exactly as a model serves it: `served` is the model's configuration; the learner
  // comes from the model's factory (core/learner/learner_factory.h), the scaling, selection
  // rule, exploration, baseline and hyper-parameter fits from the same options, and each
  // decision draws from the model's per-decision stream (DecisionSeed). The run's seed becomes
  // the model's seed. tests/sim/served_policy_test.cc checks that a model makes the same choices.
  kServed,
};

struct PolicySpec {
  std::string name;
  Family family = Family::kLkGp;
  ModelOptions served;  // Family::kServed only; every other field below is ignored then
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;
  ExplorationWidth width = ExplorationWidth::kStddev;
  // Drifting-baseline tracking as the server does it (core/learner/baseline_tracker.h); 0: off.
  double baseline_half_life = 0.0;

  KernelType arm_kernel = KernelType::kRbf;
  double kernel_variance = 1.0;
  // Length-scale of the arm features; 0 = the median heuristic (median pairwise distance over
  // the environment's pool; 1 when it has none).
  double arm_lengthscale = 0.0;
  double context_lengthscale = 1.0;
  UserKernelOptions user_kernel;
  bool pooled = false;  // every user is served as one user (the graph is ignored)
  // Linear family: append a constant feature 1 to every point, so that each model has an
  // intercept (per user for LinUCB per user).
  bool intercept = false;

  LkGpOptions lk;  // the schedule's spectral ratio and horizon are filled in per run
  // EK and batched families: when > 0, lambda (and KORS mu) = clip(this * S_spec, 1e-6, 1e-1),
  // the LK schedule's starting value for the environment's graph, so that a Nystrom policy can
  // run with LK-GP's ridge.
  double ridge_from_lambda_base = 0.0;
  NystromOptions nystrom;
  BatchedNystromOptions batched;
  LinearOptions linear;
  // EK family: hyper-parameter refits, inline at the points the server would fit them.
  RefitOptions refit;
  // EK family: rebuild a full dictionary with a coarser KORS mu (core/fit/refit.h).
  bool coarsen_when_full = false;
  // EK family with refits: KORS mu stays nystrom.kors_mu through refits (the server's
  // configured nystrom.kors_mu); false: it follows the fitted noise variance.
  bool fixed_kors_mu = false;
};

// Refits inline (the server fits on a helper thread and applies the result at a logged point
// of its log; the simulator applies it at the observation that made it due).
class InlineRefitter {
 public:
  // max_dictionary_size > 0: a Nystrom learner's full dictionary is rebuilt with a coarser
  // KORS mu, as the server does (core/fit/refit.h).
  InlineRefitter(const RefitOptions& options, const KernelShape& shape,
                 const Hyperparameters& initial, std::shared_ptr<const UserGraph> graph,
                 std::shared_ptr<const UserKernel> user_kernel, int max_dictionary_size = 0);
  // After each learned reward: fits and applies when due.
  absl::Status AfterObservation(Learner* learner, FeatureScaling* scaling);

 private:
  RefitOptions options_;
  KernelShape shape_;
  FitSpec spec_;
  Hyperparameters values_;
  std::shared_ptr<const UserGraph> graph_;
  std::shared_ptr<const UserKernel> user_kernel_;
  int max_dictionary_size_ = 0;
  double kors_mu_factor_ = 1.0;
  int64_t learned_ = 0;
  int64_t next_fit_ = 0;
};

struct RunPolicy {
  std::unique_ptr<Learner> learner;
  FeatureScaling scaling;
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;
  ExplorationWidth width = ExplorationWidth::kStddev;
  bool pooled = false;
  bool intercept = false;                    // points get a trailing constant 1
  std::unique_ptr<InlineRefitter> refitter;  // null: no refits
  BaselineTracker baseline;
  // Served policies: the model's seed, which seeds each decision's stream (DecisionSeed).
  std::optional<uint64_t> model_seed;
};

// The event id the simulator gives round `t` (what a test sends to a model to replay a run).
std::string SimEventId(int64_t t);

// Builds the learner for one run on `env` of `rounds` rounds; `seed` seeds its randomness.
absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed);

// Median pairwise Euclidean distance between the columns (1 for fewer than two columns).
double MedianDistance(const Eigen::MatrixXd& points);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_SIM_POLICY_SPEC_H_
