// The log marginal likelihood of a hyper-parameter fit (core/fit/marginal_likelihood.h, through
// LogMarginalLikelihood of core/fit/hyperparameter_fit.h): against a direct dense computation,
// its gradient against finite differences, the profiled prior mean against its closed form, and
// translation invariance of the stationary kernels.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>

#include "core/fit/hyperparameter_fit.h"
#include "core/fit/refit.h"
#include "core/graph/green_function.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/multi_user_kernel.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "tests/core/fit/fit_test_util.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using fit_test::GroupedSpec;
using fit_test::RandomData;
using fit_test::SmallGraph;
using fit_test::Values;

// log N(y; m0 1, K + lambda I) computed densely with the library's kernels.
double DirectLogLikelihood(const FitData& data, const UserKernel& users, const Hyperparameters& h,
                           KernelType kernel, double mean) {
  Eigen::MatrixXd scaled = data.x;
  scaled.array().colwise() /= h.lengthscales.array();
  auto shared = std::shared_ptr<const UserKernel>(&users, [](const UserKernel*) {});
  MultiUserKernel k(ArmKernel(kernel, h.signal_variance, h.offset_variance,
                              kernel == KernelType::kLinear ? 0.0 : h.linear_variance),
                    shared, h.user_variance);
  Eigen::MatrixXd gram;
  k.Cross(scaled, data.users, scaled, data.users.data(), &gram);
  gram.diagonal().array() += h.noise_variance;
  Eigen::LLT<Eigen::MatrixXd> llt(gram);
  const Eigen::VectorXd r = data.y.array() - mean;
  const double n = static_cast<double>(data.y.size());
  return -0.5 * r.dot(llt.solve(r)) -
         Eigen::MatrixXd(llt.matrixL()).diagonal().array().log().sum() -
         0.5 * n * std::log(2.0 * M_PI);
}

TEST(LogMarginalLikelihood, MatchesDenseComputationForEveryKernel) {
  Rng rng(3);
  const UserGraph graph = SmallGraph();
  for (KernelType kernel :
       {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52, KernelType::kLinear}) {
    const FitData data = RandomData(40, 3, 8, rng);
    Hyperparameters h = Values(3, rng);
    if (kernel == KernelType::kLinear) h.linear_variance = 0.0;  // not a separate part there
    FitSpec spec = GroupedSpec(kernel, 1, 2, true);
    spec.fit_prior_mean = false;
    FitUsers users;
    users.graph = &graph;
    const double ours = *LogMarginalLikelihood(data, users, h, spec);
    auto green = *GreenFunction::Build(graph, h.rho);
    const double direct = DirectLogLikelihood(data, *green, h, kernel, h.prior_mean);
    EXPECT_NEAR(ours, direct, 1e-9 * std::abs(direct)) << KernelTypeName(kernel);

    // The same with the user kernel given instead of the graph.
    FitUsers fixed;
    fixed.fixed = green;
    spec.fit_rho = false;
    EXPECT_NEAR(*LogMarginalLikelihood(data, fixed, h, spec), direct, 1e-9 * std::abs(direct));
  }
}

TEST(LogMarginalLikelihood, ProfiledMeanIsTheGlsEstimateAndMaximises) {
  Rng rng(5);
  const UserGraph graph = SmallGraph();
  FitData data = RandomData(30, 2, 8, rng);
  data.y.array() += 3.0;
  const Hyperparameters h = Values(2, rng);
  FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 2, true);
  FitUsers users;
  users.graph = &graph;
  double mean = 0.0;
  const double profiled = *LogMarginalLikelihood(data, users, h, spec, nullptr, &mean);
  // Closed form: 1^T A^-1 y / 1^T A^-1 1.
  auto green = *GreenFunction::Build(graph, h.rho);
  Eigen::MatrixXd scaled = data.x;
  scaled.array().colwise() /= h.lengthscales.array();
  MultiUserKernel k(
      ArmKernel(KernelType::kRbf, h.signal_variance, h.offset_variance, h.linear_variance), green,
      h.user_variance);
  Eigen::MatrixXd gram;
  k.Cross(scaled, data.users, scaled, data.users.data(), &gram);
  gram.diagonal().array() += h.noise_variance;
  Eigen::LLT<Eigen::MatrixXd> llt(gram);
  const Eigen::VectorXd ones_solved = llt.solve(Eigen::VectorXd::Ones(30));
  EXPECT_NEAR(mean, ones_solved.dot(data.y) / ones_solved.sum(), 1e-10);
  EXPECT_NEAR(profiled, DirectLogLikelihood(data, *green, h, KernelType::kRbf, mean), 1e-9);
  for (double shift : {-0.1, 0.1}) {
    EXPECT_LT(DirectLogLikelihood(data, *green, h, KernelType::kRbf, mean + shift), profiled);
  }
}

TEST(LogMarginalLikelihood, GradientMatchesFiniteDifferences) {
  Rng rng(11);
  const UserGraph graph = SmallGraph();
  // 150 observations: past the 64-column blocks of the inverse the gradient is built from.
  for (const int n : {35, 150}) {
    for (KernelType kernel :
         {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52, KernelType::kLinear}) {
      for (bool per_dimension : {true, false}) {
        const FitData data = RandomData(n, 3, 8, rng);
        const Hyperparameters h = Values(3, rng);
        // Shared groups need equal length-scales within a group to be a point of the family.
        Hyperparameters at = h;
        const FitSpec spec = GroupedSpec(kernel, 1, 2, per_dimension);
        if (!per_dimension) at.lengthscales(2) = at.lengthscales(1);
        FitUsers users;
        users.graph = &graph;
        Eigen::VectorXd gradient;
        ASSERT_TRUE(LogMarginalLikelihood(data, users, at, spec, &gradient).ok());
        // Finite differences in log space over the free parameters, in the documented order.
        std::vector<std::function<void(Hyperparameters*, double)>> moves;
        moves.push_back([](Hyperparameters* p, double e) { p->signal_variance *= std::exp(e); });
        moves.push_back([](Hyperparameters* p, double e) { p->offset_variance *= std::exp(e); });
        if (kernel != KernelType::kLinear) {
          moves.push_back([](Hyperparameters* p, double e) { p->linear_variance *= std::exp(e); });
        }
        for (int g = 0; g < spec.groups(); ++g) {
          if (!spec.fit_lengthscale[g]) continue;
          moves.push_back([g, &spec](Hyperparameters* p, double e) {
            for (size_t d = 0; d < spec.lengthscale_group.size(); ++d) {
              if (spec.lengthscale_group[d] == g) p->lengthscales(d) *= std::exp(e);
            }
          });
        }
        moves.push_back([](Hyperparameters* p, double e) { p->noise_variance *= std::exp(e); });
        moves.push_back([](Hyperparameters* p, double e) { p->rho *= std::exp(e); });
        moves.push_back([](Hyperparameters* p, double e) { p->user_variance *= std::exp(e); });
        ASSERT_EQ(static_cast<size_t>(gradient.size()), moves.size());
        for (size_t k = 0; k < moves.size(); ++k) {
          const double e = 1e-5;
          Hyperparameters plus = at, minus = at;
          moves[k](&plus, e);
          moves[k](&minus, -e);
          const double numeric = (*LogMarginalLikelihood(data, users, plus, spec) -
                                  *LogMarginalLikelihood(data, users, minus, spec)) /
                                 (2 * e);
          EXPECT_NEAR(gradient(k), numeric, 1e-5 * std::max(1.0, std::abs(numeric)))
              << KernelTypeName(kernel) << " parameter " << k << " per_dimension " << per_dimension
              << " n " << n;
        }
      }
    }
  }
}

// With a community part (G + w S): the likelihood against the dense computation with the
// library's user kernel G + w S, and the gradient, w's last, against finite differences.
TEST(LogMarginalLikelihood, CommunityPartMatchesDenseAndItsGradient) {
  Rng rng(13);
  const UserGraph graph = SmallGraph();  // largest component 0-1-2-3: embedded in 2 dimensions
  for (const int n : {35, 150}) {
    const FitData data = RandomData(n, 3, 8, rng);
    Hyperparameters h = Values(3, rng);
    h.community_variance = 0.45;
    FitSpec spec = GroupedSpec(KernelType::kRbf, 1, 2, true);
    spec.community_dims = 2;
    spec.fit_community_variance = true;
    FitUsers users;
    users.graph = &graph;
    double mean = 0.0;
    Eigen::VectorXd gradient;
    const double ours = *LogMarginalLikelihood(data, users, h, spec, &gradient, &mean);
    UserKernelOptions options;
    options.rho = h.rho;
    options.community_dims = 2;
    options.community_variance = h.community_variance;
    auto kernel = *BuildUserKernel(graph, options);
    ASSERT_NE(kernel->Entry(0, 3), (*GreenFunction::Build(graph, h.rho))->Entry(0, 3));
    const double direct = DirectLogLikelihood(data, *kernel, h, KernelType::kRbf, mean);
    EXPECT_NEAR(ours, direct, 1e-9 * std::abs(direct));
    // Free parameters: s2, b2, c2, l_0..l_2, lambda, rho, eta, w.
    ASSERT_EQ(gradient.size(), 10);
    const double e = 1e-5;
    Hyperparameters plus = h, minus = h;
    plus.community_variance *= std::exp(e);
    minus.community_variance *= std::exp(-e);
    const double numeric = (*LogMarginalLikelihood(data, users, plus, spec) -
                            *LogMarginalLikelihood(data, users, minus, spec)) /
                           (2 * e);
    EXPECT_NEAR(gradient(9), numeric, 1e-5 * std::max(1.0, std::abs(numeric))) << "n " << n;
    plus = h;
    minus = h;
    plus.rho *= std::exp(e);
    minus.rho *= std::exp(-e);
    const double numeric_rho = (*LogMarginalLikelihood(data, users, plus, spec) -
                                *LogMarginalLikelihood(data, users, minus, spec)) /
                               (2 * e);
    EXPECT_NEAR(gradient(7), numeric_rho, 1e-5 * std::max(1.0, std::abs(numeric_rho)));
    // Without the community part w has no effect.
    spec.community_dims = 0;
    spec.fit_community_variance = false;
    Hyperparameters without = h;
    without.community_variance = 0.0;
    EXPECT_EQ(*LogMarginalLikelihood(data, users, h, spec),
              *LogMarginalLikelihood(data, users, without, spec));
  }
}

// Stationary kernels depend on differences only: moving every input far from the origin leaves
// the likelihood and its gradient unchanged (distances are computed from centred inputs).
TEST(LogMarginalLikelihood, StationaryKernelsAreTranslationInvariant) {
  Rng rng(13);
  const UserGraph graph = SmallGraph();
  const FitData data = RandomData(120, 3, 8, rng);
  FitData moved = data;
  moved.x.array() += 1e4;
  Hyperparameters h = Values(3, rng);
  h.linear_variance = 0.0;  // the linear part is not translation invariant
  FitUsers users;
  users.graph = &graph;
  for (KernelType kernel : {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52}) {
    const FitSpec spec = GroupedSpec(kernel, 0, 3, true);
    Eigen::VectorXd g0, g1;
    const double l0 = *LogMarginalLikelihood(data, users, h, spec, &g0);
    const double l1 = *LogMarginalLikelihood(moved, users, h, spec, &g1);
    EXPECT_NEAR(l1, l0, 1e-9 * std::abs(l0)) << KernelTypeName(kernel);
    // Every component but the linear part's (index 2), which sees the moved inputs.
    for (Eigen::Index k = 0; k < g0.size(); ++k) {
      if (k == 2) continue;
      EXPECT_NEAR(g1(k), g0(k), 1e-7 * std::max(1.0, std::abs(g0(k)))) << k;
    }
  }
}

}  // namespace
}  // namespace graphbandit
