// Hyper-parameter fitting (core/fit/hyperparameter_fit.h, core/fit/refit.h): the log marginal likelihood
// against a direct dense computation, its gradient against finite differences, the profiled
// prior mean against its closed form, recovery of known values from GP samples, and refits of
// the learners against learners built directly with the new values.
#include "core/fit/hyperparameter_fit.h"

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/learner/exact_gp_posterior.h"
#include "core/graph/green_function.h"
#include "core/kernel/multi_user_kernel.h"
#include "core/learner/nystrom_posterior.h"
#include "core/fit/refit.h"
#include "core/graph/user_kernel.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;
using testing::RelativeError;

// A small graph: a path 0-1-2-3 and a triangle 4-5-6, user 7 isolated.
UserGraph SmallGraph() {
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

FitData RandomData(int n, int dim, int users, Rng& rng) {
  FitData data;
  data.x = RandomMatrix(dim, n, rng);
  for (int i = 0; i < n; ++i) data.users.push_back(static_cast<int32_t>(rng.UniformInt(users)));
  data.y = RandomMatrix(n, 1, rng).col(0);
  return data;
}

FitSpec GroupedSpec(KernelType kernel, int context_dim, int arm_dim, bool per_dimension) {
  RefitOptions options;
  options.enabled = true;
  options.per_dimension = per_dimension;
  KernelShape shape;
  shape.kernel = kernel;
  shape.context_dim = context_dim;
  shape.arm_dim = arm_dim;
  return MakeFitSpec(options, shape);
}

Hyperparameters Values(int dim, Rng& rng) {
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
  for (KernelType kernel : {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52,
                            KernelType::kLinear}) {
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
    for (KernelType kernel : {KernelType::kRbf, KernelType::kMatern32, KernelType::kMatern52,
                              KernelType::kLinear}) {
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
              << KernelTypeName(kernel) << " parameter " << k << " per_dimension "
              << per_dimension << " n " << n;
        }
      }
    }
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

// Draws rewards from the model itself with known values.
FitData SampleFromModel(const Hyperparameters& truth, const UserGraph& graph, int n, int users,
                        Rng& rng) {
  FitData data;
  data.x = RandomMatrix(static_cast<int>(truth.lengthscales.size()), n, rng);
  for (int i = 0; i < n; ++i) data.users.push_back(static_cast<int32_t>(rng.UniformInt(users)));
  auto green = *GreenFunction::Build(graph, truth.rho);
  Eigen::MatrixXd scaled = data.x;
  scaled.array().colwise() /= truth.lengthscales.array();
  MultiUserKernel k(ArmKernel(KernelType::kRbf, truth.signal_variance, truth.offset_variance),
                    green);
  Eigen::MatrixXd gram;
  k.Cross(scaled, data.users, scaled, data.users.data(), &gram);
  gram.diagonal().array() += 1e-9;
  const Eigen::MatrixXd root = Eigen::LLT<Eigen::MatrixXd>(gram).matrixL();
  data.y = root * RandomMatrix(n, 1, rng).col(0);
  for (int i = 0; i < n; ++i) {
    data.y(i) += truth.prior_mean + std::sqrt(truth.noise_variance) * rng.Normal();
  }
  return data;
}

TEST(FitHyperparameters, RecoversLengthscalesNoiseAndRelevance) {
  Rng rng(21);
  UserGraph graph = SmallGraph();
  Hyperparameters truth;
  truth.signal_variance = 1.5;
  truth.offset_variance = 0.0;
  truth.lengthscales = Eigen::Vector3d(0.6, 1.5, 50.0);  // the third input barely matters
  truth.noise_variance = 0.04;
  truth.rho = 0.5;
  truth.prior_mean = 2.0;
  const FitData data = SampleFromModel(truth, graph, 400, 8, rng);
  Hyperparameters start;
  start.signal_variance = 1.0;
  start.lengthscales = Eigen::Vector3d::Ones();
  start.noise_variance = 0.1;
  start.rho = 0.1;
  const FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 3, true);
  FitUsers users;
  users.graph = &graph;
  auto fit = FitHyperparameters(data, users, start, spec);
  ASSERT_TRUE(fit.ok()) << fit.status();
  const Hyperparameters& h = fit->values;
  EXPECT_NEAR(h.lengthscales(0), 0.6, 0.15) << h.DebugString();
  EXPECT_NEAR(h.lengthscales(1), 1.5, 0.4) << h.DebugString();
  EXPECT_GT(h.lengthscales(2), 5.0) << h.DebugString();  // irrelevant input: long length-scale
  EXPECT_NEAR(h.noise_variance, 0.04, 0.015) << h.DebugString();
  EXPECT_NEAR(h.prior_mean, 2.0, 1.0) << h.DebugString();
  // The fit improves the likelihood over the start and is at least as good as the truth.
  EXPECT_GT(fit->log_likelihood, fit->log_likelihood_start);
  FitSpec plain = spec;
  const double at_truth = *LogMarginalLikelihood(data, users, truth, plain) / 400;
  EXPECT_GE(fit->log_likelihood, at_truth - 1e-3);
}

TEST(FitHyperparameters, HonoursFixedParameters) {
  Rng rng(23);
  UserGraph graph = SmallGraph();
  Hyperparameters truth;
  truth.signal_variance = 1.0;
  truth.lengthscales = Eigen::Vector2d(0.7, 0.7);
  truth.noise_variance = 0.05;
  truth.rho = 0.3;
  const FitData data = SampleFromModel(truth, graph, 150, 8, rng);
  Hyperparameters start = truth;
  start.signal_variance = 3.0;
  start.noise_variance = 0.5;
  start.rho = 2.0;
  FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 2, false);
  spec.fit_signal_variance = false;
  spec.fit_rho = false;
  spec.fit_offset_variance = false;
  spec.fit_prior_mean = false;
  FitUsers users;
  users.graph = &graph;
  auto fit = FitHyperparameters(data, users, start, spec);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->values.signal_variance, 3.0);
  EXPECT_EQ(fit->values.rho, 2.0);
  EXPECT_EQ(fit->values.offset_variance, 0.0);
  EXPECT_EQ(fit->values.prior_mean, 0.0);
  EXPECT_NE(fit->values.noise_variance, 0.5);  // free: moved
  EXPECT_EQ(fit->values.lengthscales(0), fit->values.lengthscales(1));  // one shared group
}

TEST(FitHyperparameters, RefusesWhatCannotBeFitted) {
  Rng rng(29);
  UserGraph graph = SmallGraph();
  FitUsers users;
  users.graph = &graph;
  const FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 2, true);
  Hyperparameters start = Values(2, rng);
  FitData constant = RandomData(20, 2, 8, rng);
  constant.y.setConstant(1.0);
  EXPECT_EQ(FitHyperparameters(constant, users, start, spec).status().code(),
            absl::StatusCode::kFailedPrecondition);
  FitData one_input = RandomData(20, 2, 8, rng);
  for (int i = 0; i < 20; ++i) one_input.x.col(i) = one_input.x.col(0);
  EXPECT_EQ(FitHyperparameters(one_input, users, start, spec).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // ... also when the stored copies differ by the round-off of a length-scale round trip.
  for (int i = 0; i < 20; ++i) one_input.x.col(i) = (one_input.x.col(0) / 0.3) * 0.3;
  one_input.x(0, 7) *= 1.0 + 1e-15;
  EXPECT_EQ(FitHyperparameters(one_input, users, start, spec).status().code(),
            absl::StatusCode::kFailedPrecondition);
  FitData mismatched = RandomData(20, 2, 8, rng);
  mismatched.users.pop_back();
  EXPECT_EQ(FitHyperparameters(mismatched, users, start, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  FitData non_finite = RandomData(20, 2, 8, rng);
  non_finite.y(3) = NAN;
  EXPECT_EQ(FitHyperparameters(non_finite, users, start, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  Hyperparameters bad = start;
  bad.noise_variance = -1.0;
  EXPECT_EQ(FitHyperparameters(RandomData(20, 2, 8, rng), users, bad, spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::atomic<bool> cancel{true};
  FitSpec cancelled = spec;
  cancelled.cancel = &cancel;
  EXPECT_EQ(FitHyperparameters(RandomData(50, 2, 8, rng), users, start, cancelled).status().code(),
            absl::StatusCode::kCancelled);
}

// A bandit repeats the arm it prefers: most observations share one value in an arm dimension,
// and after the length-scale round trip of stored points (scaled, then multiplied back) those
// values differ by round-off only. The fit's bounds must still be those of the dimension's
// real spread (they once followed the median pairwise distance, i.e. the round-off, and put the
// length-scale near 1e-14).
TEST(FitHyperparameters, RepeatedArmValuesDoNotCollapseALengthscale) {
  Rng rng(27);
  UserGraph graph = SmallGraph();
  Hyperparameters truth;
  truth.signal_variance = 1.0;
  truth.lengthscales = Eigen::Vector2d(1.0, 0.5);
  truth.noise_variance = 0.01;
  truth.rho = 0.5;
  FitData data = SampleFromModel(truth, graph, 300, 8, rng);
  // 80% of the observations at the preferred arm value 0.3 (up to round-off), redrawn from the
  // same model.
  for (int i = 0; i < 300; ++i) {
    if (i % 5 != 0) data.x(1, i) = 0.3 * (1.0 + 1e-15 * rng.Normal());
  }
  FitData resampled = data;
  {
    auto green = *GreenFunction::Build(graph, truth.rho);
    MultiUserKernel k(ArmKernel(KernelType::kRbf, truth.signal_variance), green);
    Eigen::MatrixXd scaled = data.x;
    scaled.array().colwise() /= truth.lengthscales.array();
    Eigen::MatrixXd gram;
    k.Cross(scaled, data.users, scaled, data.users.data(), &gram);
    gram.diagonal().array() += 1e-9;
    const Eigen::MatrixXd root = Eigen::LLT<Eigen::MatrixXd>(gram).matrixL();
    resampled.y = root * RandomMatrix(300, 1, rng).col(0);
    for (int i = 0; i < 300; ++i) resampled.y(i) += std::sqrt(truth.noise_variance) * rng.Normal();
  }
  Hyperparameters start = truth;
  start.lengthscales = Eigen::Vector2d::Ones();
  FitUsers users;
  users.graph = &graph;
  auto fit = FitHyperparameters(resampled, users, start,
                                GroupedSpec(KernelType::kRbf, 0, 2, /*per_dimension=*/true));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_GT(fit->values.lengthscales(1), 0.15) << fit->values.DebugString();
  EXPECT_LT(fit->values.lengthscales(1), 1.5) << fit->values.DebugString();
}

TEST(SpreadIndices, AllWhenFewElseEvenlyFromOldestToNewest) {
  EXPECT_EQ(SpreadIndices(0, 5), std::vector<int64_t>{});
  EXPECT_EQ(SpreadIndices(3, 5), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(SpreadIndices(5, 5), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(SpreadIndices(10, 1), std::vector<int64_t>{9});
  EXPECT_EQ(SpreadIndices(9, 3), (std::vector<int64_t>{0, 4, 8}));
  for (int64_t t : {7, 100, 1001, 123457}) {
    for (int64_t max : {2, 6, 400}) {
      if (max >= t) continue;
      const std::vector<int64_t> idx = SpreadIndices(t, max);
      ASSERT_EQ(static_cast<int64_t>(idx.size()), max);
      EXPECT_EQ(idx.front(), 0);
      EXPECT_EQ(idx.back(), t - 1);
      int64_t smallest_gap = t, largest_gap = 0;
      for (size_t i = 1; i < idx.size(); ++i) {
        smallest_gap = std::min(smallest_gap, idx[i] - idx[i - 1]);
        largest_gap = std::max(largest_gap, idx[i] - idx[i - 1]);
      }
      EXPECT_GE(smallest_gap, 1);
      EXPECT_LE(largest_gap - smallest_gap, 1) << t << " " << max;  // evenly spread
    }
  }
}

TEST(RefitSchedule, GrowsGeometricallyWithACap) {
  RefitOptions o;
  o.first_fit = 32;
  o.growth = 1.5;
  o.max_interval = 1000;
  EXPECT_EQ(NextFitAfter(0, o), 32);
  EXPECT_EQ(NextFitAfter(31, o), 32);
  EXPECT_EQ(NextFitAfter(32, o), 48);
  EXPECT_EQ(NextFitAfter(100, o), 150);
  EXPECT_EQ(NextFitAfter(10000, o), 11000);
  EXPECT_TRUE(o.Validate().ok());
  o.growth = 1.0;
  EXPECT_FALSE(o.Validate().ok());
}

TEST(RefitSchedule, FitsMustImproveTheLikelihoodByANatPerParameter) {
  RefitOptions options;
  FitResult fit;
  fit.points = 400;
  fit.free_parameters = 10;
  fit.log_likelihood_start = -1.0;
  fit.log_likelihood = -1.0 + 9.0 / 400;  // 9 nats: what chance could give 10 parameters
  EXPECT_FALSE(FitImproves(fit, options));
  fit.log_likelihood = -1.0 + 11.0 / 400;
  EXPECT_TRUE(FitImproves(fit, options));
  options.min_gain_per_parameter = 0.0;
  fit.log_likelihood = fit.log_likelihood_start;
  EXPECT_TRUE(FitImproves(fit, options));
  // Start values whose likelihood could not be evaluated are always replaced.
  options.min_gain_per_parameter = 1.0;
  fit.log_likelihood_start = -INFINITY;
  EXPECT_TRUE(FitImproves(fit, options));
  options.min_gain_per_parameter = -1.0;
  EXPECT_FALSE(options.Validate().ok());
}

// A fit that starts from the values that generated the data finds nothing worth a rebuild;
// one that starts far from them does.
TEST(FitHyperparameters, GainOverTheTruthIsSmallOverAWrongStartLarge) {
  Rng rng(33);
  UserGraph graph = SmallGraph();
  Hyperparameters truth;
  truth.signal_variance = 1.0;
  truth.lengthscales = Eigen::Vector2d(0.7, 1.2);
  truth.noise_variance = 0.05;
  truth.rho = 0.5;
  const FitData data = SampleFromModel(truth, graph, 300, 8, rng);
  const FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 2, true);
  FitUsers users;
  users.graph = &graph;
  RefitOptions options;
  auto from_truth = FitHyperparameters(data, users, truth, spec);
  ASSERT_TRUE(from_truth.ok()) << from_truth.status();
  EXPECT_FALSE(FitImproves(*from_truth, options))
      << (from_truth->log_likelihood - from_truth->log_likelihood_start) * 300 << " nats, "
      << from_truth->free_parameters << " parameters";
  Hyperparameters wrong = truth;
  wrong.lengthscales = Eigen::Vector2d(5.0, 5.0);
  wrong.noise_variance = 1.0;
  auto from_wrong = FitHyperparameters(data, users, wrong, spec);
  ASSERT_TRUE(from_wrong.ok()) << from_wrong.status();
  EXPECT_TRUE(FitImproves(*from_wrong, options));
}

// The gate compares with the values in use as they are: a prior mean far from the data is worth
// replacing even when everything else is right.
TEST(FitHyperparameters, AStalePriorMeanIsWorthARefit) {
  Rng rng(35);
  UserGraph graph = SmallGraph();
  Hyperparameters truth;
  truth.signal_variance = 1.0;
  truth.lengthscales = Eigen::Vector2d(0.7, 1.2);
  truth.noise_variance = 0.05;
  truth.rho = 0.5;
  FitData data = SampleFromModel(truth, graph, 300, 8, rng);
  data.y.array() += 3.0;  // the rewards' level moved; the values in use still say 0
  FitSpec spec = GroupedSpec(KernelType::kRbf, 0, 2, true);
  ASSERT_TRUE(spec.fit_prior_mean);
  FitUsers users;
  users.graph = &graph;
  auto fit = FitHyperparameters(data, users, truth, spec);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->values.prior_mean, 3.0, 1.0);
  EXPECT_TRUE(FitImproves(*fit, RefitOptions()))
      << (fit->log_likelihood - fit->log_likelihood_start) * 300 << " nats";
}

TEST(RefitSchedule, FixedNamesFollowWhatFitsDo) {
  using ::testing::ElementsAre;
  RefitOptions options;
  options.enabled = true;
  KernelShape shape;
  shape.context_dim = 1;
  shape.arm_dim = 2;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ::testing::IsEmpty());
  EXPECT_EQ(FixedHyperparameterNames(options, false, shape).size(), 9u);
  options.fit_noise_variance = false;
  options.fit_context_lengthscale = false;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("context_lengthscale", "noise_variance"));
  // The shape fixes more: rho without the Green's function; with the linear kernel its linear
  // part, and a shared arm length-scale (it only rescales the variance).
  options = RefitOptions();
  options.enabled = true;
  options.per_dimension = false;
  shape.kernel = KernelType::kLinear;
  shape.user_kernel.kind = UserKernelKind::kHeat;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "context_lengthscale", "arm_lengthscale", "rho"));
  options.per_dimension = true;  // relative relevance per dimension is fitted
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ElementsAre("linear_variance", "rho"));
  // Before the first request fixes the dimensions, the same answers.
  shape.context_dim = shape.arm_dim = 0;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ElementsAre("linear_variance", "rho"));
  options.per_dimension = false;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "context_lengthscale", "arm_lengthscale", "rho"));
}

TEST(RefitSchedule, ValidationNamesTheFieldAndTheValue) {
  RefitOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.growth = 1e300;  // would overflow the schedule's integer arithmetic
  EXPECT_THAT(std::string(options.Validate().message()), ::testing::HasSubstr("growth must lie in (1, 100], got 1e+300"));
  options = RefitOptions();
  options.max_points = 5000;
  EXPECT_THAT(std::string(options.Validate().message()), ::testing::HasSubstr("max_points must lie in 2..2000"));
  options = RefitOptions();
  options.max_evaluations = 0;
  EXPECT_THAT(std::string(options.Validate().message()), ::testing::HasSubstr("max_evaluations must lie in 1..10000, got 0"));
  // The schedule itself stays in range for any valid growth.
  options = RefitOptions();
  options.growth = 100.0;
  options.max_interval = 4000;
  EXPECT_EQ(NextFitAfter(int64_t{1} << 60, options), (int64_t{1} << 60) + 4000);
}

TEST(RefitSchedule, MaterialChange) {
  Hyperparameters a;
  a.lengthscales = Eigen::Vector2d(1.0, 2.0);
  Hyperparameters b = a;
  EXPECT_FALSE(MateriallyDifferent(a, b, 0.05));
  b.lengthscales(1) = 2.05;  // 2.5%
  EXPECT_FALSE(MateriallyDifferent(a, b, 0.05));
  b.lengthscales(1) = 2.5;
  EXPECT_TRUE(MateriallyDifferent(a, b, 0.05));
  b = a;
  b.prior_mean = 0.5 * std::sqrt(a.noise_variance);
  EXPECT_TRUE(MateriallyDifferent(a, b, 0.05));
}

// ---- Refits of the learners ------------------------------------------------------------------

struct Problem {
  Eigen::MatrixXd raw;  // raw inputs
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

Problem RandomProblem(int n, int dim, int users, Rng& rng) {
  Problem p;
  p.raw = RandomMatrix(dim, n, rng);
  for (int i = 0; i < n; ++i) p.users.push_back(static_cast<int32_t>(rng.UniformInt(users)));
  p.y = RandomMatrix(n, 1, rng).col(0).array() + 1.0;
  return p;
}

Eigen::MatrixXd Scaled(const Eigen::MatrixXd& raw, const Eigen::VectorXd& lengthscales) {
  Eigen::MatrixXd s = raw;
  s.array().colwise() /= lengthscales.array();
  return s;
}

// A Nystrom learner whose dictionary holds every observation equals the exact GP; after a refit
// both must equal learners built directly with the new values on the rescaled points.
TEST(LearnerRefit, NystromWithFullDictionaryMatchesExactGpBuiltWithTheNewValues) {
  Rng rng(31);
  const UserGraph graph = SmallGraph();
  const Problem p = RandomProblem(60, 3, 8, rng);
  const Eigen::VectorXd old_l = Eigen::Vector3d(1.0, 1.0, 1.0);
  auto old_users = *GreenFunction::Build(graph, 0.1);
  NystromOptions options;
  options.ridge = options.kors_mu = 0.1;
  options.kors_gamma = 1e12;  // every point joins, and every refit keeps it
  NystromPosterior nystrom(3, ArmKernel(KernelType::kRbf, 1.0), old_users, options);
  ExactGpPosterior exact(3, ArmKernel(KernelType::kRbf, 1.0), old_users, 0.1);
  const Eigen::MatrixXd old_points = Scaled(p.raw, old_l);
  for (int i = 0; i < 60; ++i) {
    nystrom.set_force_accept(true);
    ASSERT_TRUE(nystrom.Observe(p.users[i], old_points.col(i), p.y(i)).ok());
    ASSERT_TRUE(exact.Observe(p.users[i], old_points.col(i), p.y(i)).ok());
  }
  ASSERT_EQ(nystrom.dictionary_size(), 60);

  Hyperparameters h;
  h.signal_variance = 0.6;
  h.offset_variance = 0.3;
  h.lengthscales = Eigen::Vector3d(0.7, 2.0, 1.3);
  h.noise_variance = 0.25;
  h.rho = 0.6;
  h.prior_mean = 0.8;
  h.linear_variance = 0.2;
  h.user_variance = 0.4;
  KernelShape shape;
  shape.kernel = KernelType::kRbf;
  shape.user_kernel.rho = 0.1;
  shape.arm_dim = 3;
  FeatureScaling scaling_n{0, 3, 1.0, 1.0, Eigen::VectorXd()};
  FeatureScaling scaling_e = scaling_n;
  std::shared_ptr<const UserKernel> users_n = old_users, users_e = old_users;
  ASSERT_TRUE(ApplyHyperparameters(h, shape, 1.0, graph, &scaling_n, &users_n, &nystrom).ok());
  ASSERT_TRUE(ApplyHyperparameters(h, shape, 1.0, graph, &scaling_e, &users_e, &exact).ok());
  EXPECT_EQ(nystrom.dictionary_size(), 60);
  EXPECT_EQ(scaling_n.lengthscales(), h.lengthscales);

  // Reference: an exact GP built from scratch with the new values on newly scaled points.
  auto new_users = *GreenFunction::Build(graph, h.rho);
  ExactGpPosterior reference(
      3, ArmKernel(KernelType::kRbf, h.signal_variance, h.offset_variance, h.linear_variance),
      new_users, h.noise_variance, h.prior_mean, h.user_variance);
  const Eigen::MatrixXd new_points = Scaled(p.raw, h.lengthscales);
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(reference.Observe(p.users[i], new_points.col(i), p.y(i)).ok());
  }
  const Eigen::MatrixXd queries = Scaled(RandomMatrix(3, 7, rng), h.lengthscales);
  for (int32_t user : {0, 3, 5, 7, kUnknownUser}) {
    Eigen::VectorXd m_ref, s_ref, m_n, s_n, m_e, s_e;
    reference.Score(user, queries, &m_ref, &s_ref);
    nystrom.Score(user, queries, &m_n, &s_n);
    exact.Score(user, queries, &m_e, &s_e);
    EXPECT_LT(RelativeError(m_e, m_ref), 1e-9) << "user " << user;
    EXPECT_LT(RelativeError(s_e, s_ref), 1e-9) << "user " << user;
    EXPECT_LT(RelativeError(m_n, m_ref), 1e-7) << "user " << user;
    EXPECT_LT(RelativeError(s_n, s_ref), 1e-7) << "user " << user;
  }
  // The frozen copies agree with the live learner.
  Eigen::VectorXd m_f, s_f, m_n, s_n;
  nystrom.Freeze()->Score(2, queries, &m_f, &s_f);
  nystrom.Score(2, queries, &m_n, &s_n);
  EXPECT_EQ(m_f, m_n);
  EXPECT_EQ(s_f, s_n);
}

// A refit's prior mean is the prediction where nothing was learned, also after learning
// elsewhere.
TEST(LearnerRefit, PriorMeanShiftsTheUnlearnedPrediction) {
  Rng rng(37);
  auto users = std::make_shared<ConstantUserKernel>(1.0, 0.0);
  NystromOptions options;
  NystromPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), users, options);
  const Eigen::MatrixXd far = Eigen::MatrixXd::Constant(2, 1, 100.0);
  Eigen::VectorXd mean, stddev;
  learner.Score(0, far, &mean, &stddev);
  EXPECT_EQ(mean(0), 0.0);
  LearnerRefit refit;
  refit.arm = ArmKernel(KernelType::kRbf, 1.0);
  refit.users = users;
  refit.ridge = 0.1;
  refit.kors_mu = 0.1;
  refit.prior_mean = 4.5;
  ASSERT_TRUE(learner.Refit(refit).ok());
  learner.Score(0, far, &mean, &stddev);
  EXPECT_DOUBLE_EQ(mean(0), 4.5);
  // A far point keeps the prior mean after learning elsewhere.
  ASSERT_TRUE(learner.Observe(0, Eigen::Vector2d(0.0, 0.0), 10.0).ok());
  learner.Score(0, far, &mean, &stddev);
  EXPECT_NEAR(mean(0), 4.5, 1e-12);
}

TEST(LearnerRefit, ThinningKeepsTheDictionaryConsistentAndStateRoundTrips) {
  Rng rng(41);
  const UserGraph graph = SmallGraph();
  auto users = *GreenFunction::Build(graph, 0.1);
  NystromOptions options;
  options.ridge = options.kors_mu = 0.01;
  NystromPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), users, options);
  const Eigen::MatrixXd x = RandomMatrix(2, 300, rng);
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(learner.Observe(static_cast<int32_t>(i % 8), x.col(i), rng.Normal()).ok());
  }
  const int64_t before = learner.dictionary_size();
  // Much smoother and noisier: most of the dictionary is redundant under the new values.
  LearnerRefit refit;
  refit.arm = ArmKernel(KernelType::kRbf, 1.0);
  refit.users = users;
  refit.ridge = 1.0;
  refit.kors_mu = 1.0;
  refit.rescale = Eigen::Vector2d(0.2, 0.2);  // length-scales five times longer
  ASSERT_TRUE(learner.Refit(refit).ok());
  EXPECT_LT(learner.dictionary_size(), before / 2);
  EXPECT_GT(learner.stats().thinned, 0);
  EXPECT_EQ(learner.stats().refits, 1);
  // The thinned state round-trips through a snapshot, and both copies keep learning alike.
  storage::Encoder saved;
  learner.SaveState(&saved);
  NystromPosterior restored(2, ArmKernel(KernelType::kRbf, 1.0), users, [&] {
    NystromOptions o = options;
    o.ridge = o.kors_mu = 1.0;
    return o;
  }());
  const std::string bytes = saved.Release();
  storage::Decoder in(bytes);
  ASSERT_TRUE(restored.LoadState(&in).ok());
  const Eigen::MatrixXd q = RandomMatrix(2, 5, rng) * 0.2;
  Eigen::VectorXd m1, s1, m2, s2;
  learner.Score(3, q, &m1, &s1);
  restored.Score(3, q, &m2, &s2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(s1, s2);
  // Both keep learning identically.
  ASSERT_TRUE(learner.Observe(1, q.col(0), 0.5).ok());
  ASSERT_TRUE(restored.Observe(1, q.col(0), 0.5).ok());
  learner.Score(3, q, &m1, &s1);
  restored.Score(3, q, &m2, &s2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(s1, s2);
}

// A KORS mu fixed by the configuration stays through refits; otherwise mu follows the fitted
// noise variance (times the coarsening factor).
TEST(LearnerRefit, AConfiguredKorsMuIsKeptThroughRefits) {
  EXPECT_EQ(KorsMu(0.05, 2.0, 0.3), 0.05);
  EXPECT_EQ(KorsMu(0.0, 2.0, 0.3), 0.6);
  const UserGraph graph = SmallGraph();
  Hyperparameters h;
  h.lengthscales = Eigen::Vector2d(1.5, 0.5);
  h.noise_variance = 0.3;
  h.rho = 0.2;
  for (const double configured : {0.05, 0.0}) {
    NystromOptions options;
    options.ridge = 0.1;
    options.kors_mu = configured > 0.0 ? configured : 0.1;
    auto users = *GreenFunction::Build(graph, 0.1);
    NystromPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), users, options);
    Rng rng(53);
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(learner.Observe(i % 8, RandomMatrix(2, 1, rng).col(0), rng.Normal()).ok());
    }
    KernelShape shape;
    shape.arm_dim = 2;
    shape.fixed_kors_mu = configured;
    FeatureScaling scaling{0, 2, 1.0, 1.0, Eigen::VectorXd()};
    std::shared_ptr<const UserKernel> kernel = users;
    ASSERT_TRUE(ApplyHyperparameters(h, shape, 2.0, graph, &scaling, &kernel, &learner).ok());
    EXPECT_EQ(learner.options().ridge, 0.3);
    EXPECT_EQ(learner.options().kors_mu, configured > 0.0 ? configured : 0.6);
  }
}

// What a fit sees of a learner: observations from the oldest to the newest, as stored.
TEST(LearnerRefit, SpreadObservationsCoverTheWholeHistory) {
  Rng rng(43);
  const UserGraph graph = SmallGraph();
  auto users = *GreenFunction::Build(graph, 0.1);
  NystromOptions options;
  NystromPosterior nystrom(2, ArmKernel(KernelType::kRbf, 1.0), users, options);
  ExactGpPosterior exact(2, ArmKernel(KernelType::kRbf, 1.0), users, 0.1);
  const Eigen::MatrixXd x = RandomMatrix(2, 50, rng);
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(nystrom.Observe(i % 8, x.col(i), i).ok());
    ASSERT_TRUE(exact.Observe(i % 8, x.col(i), i).ok());
  }
  for (const Learner* learner : {static_cast<const Learner*>(&nystrom),
                                 static_cast<const Learner*>(&exact)}) {
    const FitData data = learner->SpreadObservations(8);
    const std::vector<int64_t> idx = SpreadIndices(50, 8);
    ASSERT_EQ(data.y.size(), 8);
    for (int k = 0; k < 8; ++k) {
      EXPECT_EQ(data.y(k), static_cast<double>(idx[k]));  // the reward was the index
      EXPECT_EQ(data.users[k], idx[k] % 8);
      EXPECT_EQ(data.x.col(k), x.col(idx[k]));
    }
    EXPECT_EQ(learner->SpreadObservations(1000).y.size(), 50);
  }
}

// Batched growth computes the same regression as growing point by point: the same KORS draws,
// the same dictionary, and after a flush the same posterior (up to round-off).
TEST(BatchedGrowth, EqualsPointByPointGrowthOnceFlushed) {
  Rng rng(47);
  const UserGraph graph = SmallGraph();
  auto users = *GreenFunction::Build(graph, 0.2);
  NystromOptions immediate;
  immediate.ridge = immediate.kors_mu = 0.05;
  NystromOptions batched = immediate;
  batched.growth_batch_divisor = 4;  // large batches, to exercise the deferral
  NystromPosterior a(3, ArmKernel(KernelType::kRbf, 1.0), users, immediate);
  NystromPosterior b(3, ArmKernel(KernelType::kRbf, 1.0), users, batched);
  const Eigen::MatrixXd x = RandomMatrix(3, 600, rng);
  int64_t deferred = 0;
  for (int i = 0; i < 600; ++i) {
    const int32_t u = static_cast<int32_t>(i % 8);
    const double y = std::sin(x(0, i)) + 0.1 * rng.Normal();
    ASSERT_TRUE(a.Observe(u, x.col(i), y).ok());
    ASSERT_TRUE(b.Observe(u, x.col(i), y).ok());
    ASSERT_EQ(a.dictionary_size(), b.dictionary_size());
    deferred = std::max<int64_t>(deferred, b.dictionary_size() - b.regression_size());
  }
  EXPECT_GT(deferred, 1);  // points were pending
  EXPECT_EQ(a.dictionary_points(), b.dictionary_points());
  // A state with pending points round-trips and keeps learning identically.
  {
    NystromPosterior copy(3, ArmKernel(KernelType::kRbf, 1.0), users, batched);
    storage::Encoder saved;
    b.SaveState(&saved);
    const std::string bytes = saved.Release();
    storage::Decoder in(bytes);
    ASSERT_TRUE(copy.LoadState(&in).ok());
    EXPECT_EQ(copy.regression_size(), b.regression_size());
    const Eigen::MatrixXd extra = RandomMatrix(3, 40, rng);
    for (int i = 0; i < 40; ++i) {
      ASSERT_TRUE(a.Observe(1, extra.col(i), 0.3).ok());
      ASSERT_TRUE(b.Observe(1, extra.col(i), 0.3).ok());
      ASSERT_TRUE(copy.Observe(1, extra.col(i), 0.3).ok());
    }
    Eigen::VectorXd m1, s1, m2, s2;
    copy.Score(2, extra, &m1, &s1);
    b.Score(2, extra, &m2, &s2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(s1, s2);
  }
  ASSERT_TRUE(b.FlushPendingDictionary().ok());
  EXPECT_EQ(b.regression_size(), b.dictionary_size());
  const Eigen::MatrixXd q = RandomMatrix(3, 6, rng);
  for (int32_t user : {0, 4, 7, kUnknownUser}) {
    Eigen::VectorXd ma, sa, mb, sb;
    a.Score(user, q, &ma, &sa);
    b.Score(user, q, &mb, &sb);
    EXPECT_LT(RelativeError(mb, ma), 1e-8) << "user " << user;
    EXPECT_LT(RelativeError(sb, sa), 1e-8) << "user " << user;
  }
}

// At its cap the dictionary stops growing, observations are still learned through their
// projection, and a rebuild with a coarser KORS mu (what a model does when its dictionary is
// full) frees room.
TEST(DictionaryCap, FullDictionaryKeepsLearningAndACoarserMuFreesRoom) {
  Rng rng(43);
  auto users = std::make_shared<ConstantUserKernel>(1.0, 0.0);
  NystromOptions options;
  options.ridge = options.kors_mu = 0.01;
  options.max_dictionary_size = 15;
  NystromPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), users, options);
  const Eigen::MatrixXd x = 3.0 * RandomMatrix(2, 400, rng);
  for (int i = 0; i < 400; ++i) {
    ASSERT_TRUE(learner.Observe(0, x.col(i), std::sin(x(0, i))).ok());
    ASSERT_LE(learner.dictionary_size(), 15);
  }
  EXPECT_EQ(learner.dictionary_size(), 15);
  EXPECT_GT(learner.stats().skipped_full, 0);
  // Learning goes on at the cap: repeated rewards at a dictionary point move its mean there.
  const Eigen::VectorXd z = learner.dictionary_points().col(3);
  Eigen::VectorXd before, after, sd;
  learner.Score(0, z, &before, &sd);
  for (int i = 0; i < 50; ++i) ASSERT_TRUE(learner.Observe(0, z, 5.0).ok());
  learner.Score(0, z, &after, &sd);
  EXPECT_GT(after(0), before(0) + 1.0);
  EXPECT_EQ(learner.dictionary_size(), 15);
  // Coarser mu: fewer points kept, room to grow again.
  LearnerRefit coarser;
  coarser.arm = ArmKernel(KernelType::kRbf, 1.0);
  coarser.users = users;
  coarser.ridge = 0.01;
  coarser.kors_mu = 0.01 * 64;
  coarser.prior_mean = 0.0;
  ASSERT_TRUE(learner.Refit(coarser).ok());
  EXPECT_LT(learner.dictionary_size(), 15);
  EXPECT_EQ(CoarserKorsMuFactor(1.0), 2.0);
  EXPECT_EQ(CoarserKorsMuFactor(kMaxKorsMuFactor), 0.0);
}

}  // namespace
}  // namespace graphbandit
