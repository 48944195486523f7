#include "client/sim/policy_spec.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/random.h"

namespace graphbandit::sim {

double MedianDistance(const Eigen::MatrixXd& points) {
  std::vector<double> distances;
  for (Eigen::Index a = 0; a < points.cols(); ++a) {
    for (Eigen::Index b = a + 1; b < points.cols(); ++b) {
      distances.push_back((points.col(a) - points.col(b)).norm());
    }
  }
  if (distances.empty()) return 1.0;
  std::nth_element(distances.begin(), distances.begin() + distances.size() / 2, distances.end());
  const double median = distances[distances.size() / 2];
  return median > 0.0 ? median : 1.0;
}

absl::StatusOr<RunPolicy> MakeRunPolicy(const PolicySpec& spec, const SimEnvironment& env,
                                        int64_t rounds, uint64_t seed) {
  RunPolicy run;
  run.rule = spec.rule;
  run.exploration = spec.exploration;
  run.pooled = spec.pooled;
  const Eigen::MatrixXd* pool = env.pool();
  run.scaling.context_dim = env.context_dim();
  run.scaling.arm_dim = env.arm_dim();
  run.scaling.context_lengthscale = spec.context_lengthscale;
  run.scaling.arm_lengthscale = spec.arm_lengthscale > 0.0
                                    ? spec.arm_lengthscale
                                    : (pool != nullptr ? MedianDistance(*pool) : 1.0);
  const int dim = run.scaling.joint_dim();

  UserGraph graph;
  graph.EnsureUsers(spec.pooled ? 1 : env.users());
  if (!spec.pooled) {
    for (const Edge& edge : env.edges()) graph.SetEdge(edge.a, edge.b, edge.weight);
  }
  auto kernel = BuildUserKernel(graph, spec.user_kernel);
  if (!kernel.ok()) return kernel.status();
  const ArmKernel arm(spec.arm_kernel, spec.kernel_variance);
  // The learner's own randomness (KORS coins, re-draws): per seed, independent of the
  // environment's, the same for every policy.
  uint64_t mix = seed ^ 0xC0FFEE123456789ULL;
  const uint64_t learner_seed = SplitMix64(mix);

  // S_spec comes from the environment's graph even for policies that ignore it: LK's schedule
  // is the same for every GP-style method.
  auto spectral_ratio = [&env] {
    UserGraph env_graph;
    env_graph.EnsureUsers(env.users());
    for (const Edge& edge : env.edges()) env_graph.SetEdge(edge.a, edge.b, edge.weight);
    return SpectralRatio(env_graph);
  };
  double scheduled_ridge = 0.0;
  if (spec.ridge_from_lambda_base > 0.0) {
    scheduled_ridge = std::clamp(spec.ridge_from_lambda_base * spectral_ratio(), spec.lk.lambda_min,
                                 spec.lk.lambda_max);
  }
  switch (spec.family) {
    case Family::kLkGp: {
      LkGpOptions options = spec.lk;
      if (options.schedule) {
        options.spectral_ratio = spectral_ratio();
        options.horizon = rounds;
      }
      auto learner = std::make_unique<LkGpPosterior>(dim, arm, *kernel, options);
      if (options.grid && pool != nullptr) {
        Eigen::MatrixXd points(dim, pool->cols());
        const Eigen::VectorXd no_context = Eigen::VectorXd::Zero(env.context_dim());
        for (Eigen::Index j = 0; j < pool->cols(); ++j) {
          run.scaling.Apply(no_context.data(), pool->col(j).data(), points.col(j).data());
        }
        absl::Status status = learner->SetPool(points, spec.pooled ? 1 : env.users());
        if (!status.ok()) return status;
      }
      run.learner = std::move(learner);
      break;
    }
    case Family::kEk: {
      NystromOptions options = spec.nystrom;
      options.seed = learner_seed;
      if (scheduled_ridge > 0.0) options.ridge = options.kors_mu = scheduled_ridge;
      run.learner = std::make_unique<NystromPosterior>(dim, arm, *kernel, options);
      break;
    }
    case Family::kBatched: {
      BatchedNystromOptions options = spec.batched;
      options.seed = learner_seed;
      if (scheduled_ridge > 0.0) options.ridge = scheduled_ridge;
      run.learner = std::make_unique<BatchedNystromPosterior>(dim, arm, *kernel, options);
      break;
    }
    case Family::kLinear: {
      auto learner = std::make_unique<LinearUcbPosterior>(dim, spec.linear);
      absl::Status status = learner->SetGraph(graph, *kernel);
      if (!status.ok()) return status;
      run.learner = std::move(learner);
      break;
    }
  }
  return run;
}

}  // namespace graphbandit::sim
