// Hyper-parameter fitting (core/fit/hyperparameter_fit.h, core/fit/refit.h): recovery of known
// values from GP samples, fixed parameters, what cannot be fitted, the subset of observations a
// fit uses, and the refit schedule and its gate.
#include "core/fit/hyperparameter_fit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>

#include "absl/strings/str_format.h"
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
using testing::RandomMatrix;

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
  EXPECT_NE(fit->values.noise_variance, 0.5);                           // free: moved
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
  // Too few observations per free parameter: refused until there are enough.
  FitSpec demanding = spec;
  demanding.min_points_per_parameter = 10;
  FitData some = RandomData(60, 2, 8, rng);
  absl::StatusOr<FitResult> early = FitHyperparameters(some, users, start, demanding);
  ASSERT_EQ(early.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(early.status().message()),
              ::testing::HasSubstr("60 observations are too few"));
  demanding.max_points = 60;  // what the fit is given at most: enough
  EXPECT_TRUE(FitHyperparameters(some, users, start, demanding).ok());
  demanding.max_points = 0;
  const absl::StatusOr<FitResult> plain = FitHyperparameters(some, users, start, spec);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_GT(10 * plain->free_parameters, 60) << "the test needs a refusal at 60";
  demanding.min_points_per_parameter = 60 / plain->free_parameters;
  EXPECT_TRUE(FitHyperparameters(some, users, start, demanding).ok());
  std::atomic<bool> cancel{true};
  FitSpec cancelled = spec;
  cancelled.cancel = &cancel;
  EXPECT_EQ(FitHyperparameters(RandomData(50, 2, 8, rng), users, start, cancelled).status().code(),
            absl::StatusCode::kCancelled);
}

// With too few observations for a length-scale per dimension but enough for one per input kind
// (context, arm features), a fit uses the latter instead of waiting; with too few even for that,
// it is refused.
TEST(FitHyperparameters, FallsBackToOneLengthscalePerKindWhenTooFewForEach) {
  Rng rng(17);
  UserGraph graph = SmallGraph();
  FitUsers users;
  users.graph = &graph;
  constexpr int kContext = 1, kArm = 4, kDim = kContext + kArm;
  FitSpec spec = GroupedSpec(KernelType::kRbf, kContext, kArm, /*per_dimension=*/true);
  ASSERT_EQ(spec.groups(), kDim);
  ASSERT_EQ(spec.coarse_lengthscale_group, (std::vector<int>{0, 1, 1, 1, 1}));
  // One length-scale for the context and one for the arm features, as a model starts.
  Hyperparameters start = Values(kDim, rng);
  start.lengthscales.tail(kArm).setConstant(1.3);
  const FitData data = RandomData(200, kDim, 8, rng);
  // The number of free parameters of each parameterisation, from fits with no minimum.
  const absl::StatusOr<FitResult> fine = FitHyperparameters(data, users, start, spec);
  ASSERT_TRUE(fine.ok()) << fine.status();
  FitSpec grouped_only = GroupedSpec(KernelType::kRbf, kContext, kArm, /*per_dimension=*/false);
  EXPECT_TRUE(grouped_only.coarse_lengthscale_group.empty());
  const absl::StatusOr<FitResult> coarse = FitHyperparameters(data, users, start, grouped_only);
  ASSERT_TRUE(coarse.ok()) << coarse.status();
  ASSERT_EQ(fine->free_parameters - coarse->free_parameters, kDim - 2);

  spec.min_points_per_parameter = 10;
  auto first = [&data](int n) {
    FitData d;
    d.x = data.x.leftCols(n);
    d.users.assign(data.users.begin(), data.users.begin() + n);
    d.y = data.y.head(n);
    return d;
  };
  // Enough for each dimension: one length-scale per dimension.
  const int per_dimension = 10 * fine->free_parameters;
  absl::StatusOr<FitResult> enough = FitHyperparameters(first(per_dimension), users, start, spec);
  ASSERT_TRUE(enough.ok()) << enough.status();
  EXPECT_EQ(enough->free_parameters, fine->free_parameters);
  // One short of that: one length-scale for the context, one shared by the arm features.
  const absl::StatusOr<FitResult> fewer =
      FitHyperparameters(first(per_dimension - 1), users, start, spec);
  ASSERT_TRUE(fewer.ok()) << fewer.status();
  EXPECT_EQ(fewer->free_parameters, coarse->free_parameters);
  ASSERT_EQ(fewer->values.lengthscales.size(), kDim);
  for (int d = kContext + 1; d < kDim; ++d) {
    EXPECT_EQ(fewer->values.lengthscales(d), fewer->values.lengthscales(kContext)) << d;
  }
  EXPECT_TRUE(fewer->values.InRange(kDim));
  // Values in use that one length-scale per kind cannot represent (an earlier per-dimension
  // fit) are not coarsened: the fit waits for enough observations for them.
  Hyperparameters per_dimension_start = start;
  per_dimension_start.lengthscales(kDim - 1) = 2.0;
  EXPECT_EQ(FitHyperparameters(first(per_dimension - 1), users, per_dimension_start, spec)
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // Too few even for that: refused, naming the coarser count.
  const int per_kind = 10 * coarse->free_parameters;
  EXPECT_TRUE(FitHyperparameters(first(per_kind), users, start, spec).ok());
  const absl::StatusOr<FitResult> refused =
      FitHyperparameters(first(per_kind - 1), users, start, spec);
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr(absl::StrFormat("too few to fit %d parameters (%d needed)",
                                                   coarse->free_parameters, per_kind)));
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
  shape.user_kernel.community_dims = 8;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ::testing::IsEmpty());
  EXPECT_EQ(FixedHyperparameterNames(options, false, shape).size(), 10u);
  options.fit_noise_variance = false;
  options.fit_context_lengthscale = false;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("context_lengthscale", "noise_variance"));
  // No community part: its variance stays 0.
  options = RefitOptions();
  options.enabled = true;
  shape.user_kernel.community_dims = 0;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ElementsAre("community_variance"));
  options.fit_community_variance = false;
  shape.user_kernel.community_dims = 8;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape), ElementsAre("community_variance"));
  // The shape fixes more: rho and the community part without the Green's function; with the
  // linear kernel its linear part, and a shared arm length-scale (it only rescales the
  // variance).
  options = RefitOptions();
  options.enabled = true;
  options.per_dimension = false;
  shape.kernel = KernelType::kLinear;
  shape.user_kernel.kind = UserKernelKind::kHeat;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "context_lengthscale", "arm_lengthscale", "rho",
                          "community_variance"));
  options.per_dimension = true;  // relative relevance per dimension is fitted
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "rho", "community_variance"));
  // Before the first request fixes the dimensions, the same answers.
  shape.context_dim = shape.arm_dim = 0;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "rho", "community_variance"));
  options.per_dimension = false;
  EXPECT_THAT(FixedHyperparameterNames(options, true, shape),
              ElementsAre("linear_variance", "context_lengthscale", "arm_lengthscale", "rho",
                          "community_variance"));
}

TEST(RefitSchedule, ValidationNamesTheFieldAndTheValue) {
  RefitOptions options;
  EXPECT_TRUE(options.Validate().ok());
  options.growth = 1e300;  // would overflow the schedule's integer arithmetic
  EXPECT_THAT(std::string(options.Validate().message()),
              ::testing::HasSubstr("growth must lie in (1, 100], got 1e+300"));
  options = RefitOptions();
  options.max_points = 5000;
  EXPECT_THAT(std::string(options.Validate().message()),
              ::testing::HasSubstr("max_points must lie in 2..2000"));
  options = RefitOptions();
  options.max_evaluations = 0;
  EXPECT_THAT(std::string(options.Validate().message()),
              ::testing::HasSubstr("max_evaluations must lie in 1..10000, got 0"));
  for (double share : {0.0, -0.5, 1.5, std::nan("")}) {
    options = RefitOptions();
    options.cpu_share = share;
    EXPECT_THAT(std::string(options.Validate().message()),
                ::testing::HasSubstr("fit_cpu_share must lie in (0, 1]"));
  }
  options = RefitOptions();
  options.cpu_share = 1e-3;
  EXPECT_TRUE(options.Validate().ok());
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

// A fit replaces the values in use only when it both improves the likelihood enough and moves
// the values materially (the judgement the model and the simulator share).
TEST(RefitSchedule, AFitIsAppliedOnlyWhenItImprovesAndMoves) {
  RefitOptions options;
  Hyperparameters in_use;
  in_use.lengthscales = Eigen::Vector2d(1.0, 2.0);
  FitResult fit;
  fit.values = in_use;
  fit.values.lengthscales(1) = 3.0;
  fit.points = 100;
  fit.free_parameters = 4;
  fit.log_likelihood_start = -1.0;
  // A gain of 100 * 0.1 = 10 nats over 4 parameters.
  fit.log_likelihood = -0.9;
  ASSERT_TRUE(FitImproves(fit, options));
  EXPECT_TRUE(FitWorthApplying(fit, in_use, options));
  // The same gain for values that hardly moved.
  FitResult still = fit;
  still.values = in_use;
  EXPECT_FALSE(FitWorthApplying(still, in_use, options));
  // Values that moved, for a gain below 1 nat per parameter (0.03 * 100 = 3 < 4).
  FitResult flat = fit;
  flat.log_likelihood = -0.97;
  EXPECT_FALSE(FitWorthApplying(flat, in_use, options));
}

}  // namespace
}  // namespace graphbandit
