// A policy as the simulator configures it: which learner (posterior or estimator), with which
// kernels and hyper-parameters, and which selection rule. MakeRunPolicy turns a spec into a live
// learner for one environment, exactly as the server would use it: the same Learner interface
// (core/posterior.h) and the same selection rules (core/selection.h).
#ifndef GRAPHBANDIT_CLIENT_SIM_POLICY_SPEC_H_
#define GRAPHBANDIT_CLIENT_SIM_POLICY_SPEC_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "client/sim/environment.h"
#include "core/arm_kernel.h"
#include "core/batched_nystrom_posterior.h"
#include "core/linear_posterior.h"
#include "core/lk_gp_posterior.h"
#include "core/nystrom_posterior.h"
#include "core/posterior.h"
#include "core/selection.h"
#include "core/user_kernel.h"

namespace graphbandit::sim {

enum class Family {
  kLkGp,     // exact GP (LK-GP-UCB/TS, COOP-KernelUCB, GP-UCB, K-UCB)
  kEk,       // EK-UCB / EK-TS: incremental Nystrom with KORS
  kBatched,  // CBBKB / CBKB: batched Nystrom re-draws
  kLinear,   // LinUCB per user / pooled, GoB.Lin, GraphUCB
};

struct PolicySpec {
  std::string name;
  Family family = Family::kLkGp;
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;

  KernelType arm_kernel = KernelType::kRbf;
  double kernel_variance = 1.0;
  // Length-scale of the arm features; 0 = the median heuristic (median pairwise distance over
  // the environment's pool; 1 when it has none).
  double arm_lengthscale = 0.0;
  double context_lengthscale = 1.0;
  UserKernelOptions user_kernel;
  bool pooled = false;  // every user is served as one user (the graph is ignored)

  LkGpOptions lk;  // the schedule's spectral ratio and horizon are filled in per run
  // EK and batched families: when > 0, lambda (and KORS mu) = clip(this * S_spec, 1e-6, 1e-1),
  // the LK schedule's starting value for the environment's graph, so that a Nystrom policy can
  // run with LK-GP's ridge.
  double ridge_from_lambda_base = 0.0;
  NystromOptions nystrom;
  BatchedNystromOptions batched;
  LinearOptions linear;
};

struct RunPolicy {
  std::unique_ptr<Learner> learner;
  FeatureScaling scaling;
  SelectionRule rule = SelectionRule::kUcb;
  double exploration = 1.0;
  bool pooled = false;
};

// Builds the learner for one run on `env` of `rounds` rounds; `seed` seeds its randomness.
absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed);

// Median pairwise Euclidean distance between the columns (1 for fewer than two columns).
double MedianDistance(const Eigen::MatrixXd& points);

}  // namespace graphbandit::sim

#endif  // GRAPHBANDIT_CLIENT_SIM_POLICY_SPEC_H_
