// Refits of the learners (Learner::Refit, core/fit/refit.h) against learners built directly
// with the new values; batched dictionary growth and the dictionary cap.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <functional>
#include <memory>

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

using fit_test::SmallGraph;
using testing::RandomMatrix;
using testing::RelativeError;

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
  for (const Learner* learner :
       {static_cast<const Learner*>(&nystrom), static_cast<const Learner*>(&exact)}) {
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

// A batch's pass over the history spread across later rewards (spread_growth_scan) ends in the
// same regression as the whole pass at once and as point-by-point growth: with every
// observation retained, the rows of M sum the same terms, in another order.
TEST(BatchedGrowth, SpreadScanEqualsTheWholePassOnceFlushed) {
  Rng rng(53);
  const UserGraph graph = SmallGraph();
  auto users = *GreenFunction::Build(graph, 0.2);
  NystromOptions immediate;
  immediate.ridge = immediate.kors_mu = 0.05;
  immediate.max_dictionary_size = 150;
  NystromOptions spread = immediate;
  spread.growth_batch_divisor = 4;
  spread.spread_growth_scan = true;
  spread.growth_scan_step = 4;  // passes that last many observations
  NystromPosterior a(3, ArmKernel(KernelType::kRbf, 1.0), users, immediate);
  NystromPosterior c(3, ArmKernel(KernelType::kRbf, 1.0), users, spread);
  // Saved in the middle of a late scan, a copy continues bit-identically.
  NystromPosterior copy(3, ArmKernel(KernelType::kRbf, 1.0), users, spread);
  bool copied = false;
  const Eigen::MatrixXd x = RandomMatrix(3, 600, rng);
  int most_scanning = 0;
  int64_t most_remaining = 0;
  int64_t most_pending = 0;
  for (int i = 0; i < 600; ++i) {
    if (!copied && i >= 150 && c.scanning() > 0 && c.scan_remaining() > 0) {
      storage::Encoder saved;
      c.SaveState(&saved);
      const std::string bytes = saved.Release();
      storage::Decoder in(bytes);
      ASSERT_TRUE(copy.LoadState(&in).ok());
      copied = true;
    }
    const int32_t u = static_cast<int32_t>(i % 8);
    const double y = std::sin(x(0, i)) + 0.1 * rng.Normal();
    ASSERT_TRUE(a.Observe(u, x.col(i), y).ok());
    ASSERT_TRUE(c.Observe(u, x.col(i), y).ok());
    if (copied) {
      ASSERT_TRUE(copy.Observe(u, x.col(i), y).ok());
    }
    ASSERT_EQ(a.dictionary_size(), c.dictionary_size());
    most_scanning = std::max(most_scanning, c.scanning());
    most_remaining = std::max(most_remaining, c.scan_remaining());
    most_pending = std::max<int64_t>(most_pending, c.dictionary_size() - c.regression_size());
    ASSERT_LE(c.dictionary_size() - c.regression_size(), 2 * kMaxGrowthBatch);
  }
  // Scans were under way across several observations, with points waiting behind them.
  EXPECT_GT(most_scanning, 1);
  EXPECT_GT(most_remaining, 4 * spread.growth_scan_step);
  EXPECT_GT(most_pending, most_scanning);
  EXPECT_EQ(a.dictionary_points(), c.dictionary_points());
  ASSERT_TRUE(copied);
  const Eigen::MatrixXd q = RandomMatrix(3, 6, rng);
  {
    Eigen::VectorXd m1, s1, m2, s2;
    copy.Score(2, q, &m1, &s1);
    c.Score(2, q, &m2, &s2);
    EXPECT_EQ(m1, m2);
    EXPECT_EQ(s1, s2);
  }
  ASSERT_TRUE(c.FlushPendingDictionary().ok());
  EXPECT_EQ(c.regression_size(), c.dictionary_size());
  EXPECT_EQ(c.scanning(), 0);
  for (int32_t user : {0, 4, 7, kUnknownUser}) {
    Eigen::VectorXd ma, sa, mc, sc;
    a.Score(user, q, &ma, &sa);
    c.Score(user, q, &mc, &sc);
    EXPECT_LT(RelativeError(mc, ma), 1e-8) << "user " << user;
    EXPECT_LT(RelativeError(sc, sa), 1e-8) << "user " << user;
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
  // Only a full dictionary with a cap is rebuilt, and never beyond the coarsest factor.
  EXPECT_EQ(CoarseningFactorFor(299, 300, 4.0), 0.0);
  EXPECT_EQ(CoarseningFactorFor(300, 300, 4.0), 8.0);
  EXPECT_EQ(CoarseningFactorFor(5000, 0, 1.0), 0.0);
  EXPECT_EQ(CoarseningFactorFor(300, 300, kMaxKorsMuFactor), 0.0);
}

}  // namespace
}  // namespace graphbandit
