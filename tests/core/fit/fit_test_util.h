// Shared by the tests of core/fit/ (marginal_likelihood_test.cc, hyperparameter_fit_test.cc,
// learner_refit_test.cc): a small user graph, random fit data, grouped fit specs and random
// hyper-parameter values.
#ifndef GRAPHBANDIT_TESTS_CORE_FIT_FIT_TEST_UTIL_H_
#define GRAPHBANDIT_TESTS_CORE_FIT_FIT_TEST_UTIL_H_

#include <Eigen/Dense>
#include <cstdint>

#include "core/fit/hyperparameter_fit.h"
#include "core/graph/user_graph.h"
#include "core/kernel/arm_kernel.h"
#include "tests/test_util.h"

namespace graphbandit::fit_test {

using testing::RandomMatrix;

// A small graph: a path 0-1-2-3 and a triangle 4-5-6, user 7 isolated.
inline UserGraph SmallGraph() {
  UserGraph g;
  g.EnsureUsers(8);
  g.SetEdge(0, 1, 1.0);
  g.SetEdge(1, 2, 0.5);
  g.SetEdge(2, 3, 2.0);
  g.SetEdge(4, 5, 1.0);
  g.SetEdge(5, 6, 1.0);
  g.SetEdge(4, 6, 1.5);
  return g;
}

inline FitData RandomData(int n, int dim, int users, Rng& rng) {
  FitData data;
  data.x = RandomMatrix(dim, n, rng);
  for (int i = 0; i < n; ++i) data.users.push_back(static_cast<int32_t>(rng.UniformInt(users)));
  data.y = RandomMatrix(n, 1, rng).col(0);
  return data;
}

inline FitSpec GroupedSpec(KernelType kernel, int context_dim, int arm_dim, bool per_dimension) {
  RefitOptions options;
  options.enabled = true;
  options.per_dimension = per_dimension;
  // These tests check the fit itself, on any number of points; the minimum per parameter is
  // tested on its own (RefusesWhatCannotBeFitted).
  options.min_points_per_parameter = 0;
  KernelShape shape;
  shape.kernel = kernel;
  shape.context_dim = context_dim;
  shape.arm_dim = arm_dim;
  return MakeFitSpec(options, shape);
}

inline Hyperparameters Values(int dim, Rng& rng) {
  Hyperparameters h;
  h.signal_variance = 0.7;
  h.offset_variance = 0.2;
  h.linear_variance = 0.15;
  h.user_variance = 0.35;
  h.lengthscales.resize(dim);
  for (int d = 0; d < dim; ++d) h.lengthscales(d) = 0.8 + rng.Uniform();
  h.noise_variance = 0.3;
  h.rho = 0.4;
  h.prior_mean = 0.25;
  return h;
}

}  // namespace graphbandit::fit_test

#endif  // GRAPHBANDIT_TESTS_CORE_FIT_FIT_TEST_UTIL_H_
