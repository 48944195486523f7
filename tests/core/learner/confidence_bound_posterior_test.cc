// The confidence bounds of the tighter-bounds paper (core/learner/confidence_bound_posterior.h)
// against their definitions computed densely, and the paper's exact identities: the AMM radius
// at a = sigma^2 / c has the closed form of MM Lemma C.2, AMM is strictly tighter than AY-GP-UCB
// and IGP-UCB with the matching parameters (MM Thm 6.3), and DMM is never looser than AMM.
#include "core/learner/confidence_bound_posterior.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/base/random.h"
#include "core/graph/user_graph.h"

namespace graphbandit {
namespace {

std::shared_ptr<const UserKernel> OneUser() {
  UserGraph graph;
  graph.EnsureUsers(1);
  UserKernelOptions options;
  options.kind = UserKernelKind::kIdentity;
  return *BuildUserKernel(graph, options);
}

struct Data {
  Eigen::MatrixXd x;  // 2 x t
  Eigen::VectorXd y;
  Eigen::MatrixXd probe;
};

Data MakeData(int t, uint64_t seed) {
  Rng rng(seed);
  Data d;
  d.x.resize(2, t);
  d.y.resize(t);
  for (int i = 0; i < t; ++i) {
    d.x(0, i) = rng.Uniform() * 2;
    d.x(1, i) = rng.Uniform() * 2;
    d.y(i) = std::sin(3 * d.x(0, i)) + 0.1 * rng.Normal();
  }
  d.probe.resize(2, 7);
  for (int i = 0; i < 7; ++i) {
    d.probe(0, i) = rng.Uniform() * 2;
    d.probe(1, i) = rng.Uniform() * 2;
  }
  return d;
}

ConfidenceBoundPosterior Fed(const ConfidenceBoundOptions& options, const Data& d) {
  ConfidenceBoundPosterior learner(2, ArmKernel(KernelType::kMatern52, 1.0), OneUser(), options);
  for (Eigen::Index i = 0; i < d.x.cols(); ++i) {
    EXPECT_TRUE(learner.Observe(0, d.x.col(i), d.y(i)).ok());
  }
  return learner;
}

Eigen::VectorXd Upper(const ConfidenceBoundPosterior& learner, const Eigen::MatrixXd& probe) {
  Eigen::VectorXd mean, width;
  learner.Score(0, probe, &mean, &width);
  return mean + width;
}

TEST(ConfidenceBoundTest, AmmIsItsDefinitionComputedDensely) {
  const Data d = MakeData(30, 1);
  ConfidenceBoundOptions o;
  o.bound = ConfidenceBound::kAmm;
  o.noise_std = 0.3;
  o.norm_bound = 2.0;
  o.mixture = 0.5;
  const ConfidenceBoundPosterior learner = Fed(o, d);
  const ArmKernel k(KernelType::kMatern52, 1.0);
  Eigen::MatrixXd gram, cross;
  k.Cross(d.x, d.x, &gram);
  k.Cross(d.probe, d.x, &cross);
  const double sigma2 = o.noise_std * o.noise_std, a = sigma2 / o.mixture;
  const Eigen::MatrixXd inverse = (gram + a * Eigen::MatrixXd::Identity(30, 30)).inverse();
  const double log_det = std::log((Eigen::MatrixXd::Identity(30, 30) + gram / a).determinant());
  const double quad = d.y.dot(inverse * d.y);
  const double r2 = a * quad + sigma2 * log_det + 2 * sigma2 * std::log(1 / o.delta);
  const double rt2 = r2 + a * o.norm_bound * o.norm_bound - a * quad;
  // MM Lemma C.2: at a = sigma^2 / c the quadratic terms cancel.
  EXPECT_NEAR(rt2,
              sigma2 * log_det + sigma2 * o.norm_bound * o.norm_bound / o.mixture +
                  2 * sigma2 * std::log(1 / o.delta),
              1e-9);
  const Eigen::VectorXd upper = Upper(learner, d.probe);
  for (int i = 0; i < d.probe.cols(); ++i) {
    const double mu = cross.row(i).dot(inverse * d.y);
    const double rho = std::sqrt(1.0 - cross.row(i).dot(inverse * cross.row(i).transpose()));
    EXPECT_NEAR(upper(i), mu + std::sqrt(rt2 / a) * rho, 1e-8) << i;
    // docs/algorithms.md §3.5's simplified width.
    EXPECT_NEAR(upper(i),
                mu + std::sqrt(o.mixture * log_det + 2 * o.mixture * std::log(1 / o.delta) +
                               o.norm_bound * o.norm_bound) *
                         rho,
                1e-8);
  }
}

TEST(ConfidenceBoundTest, AmmIsTighterThanAyAndIgpWithMatchingParameters) {
  for (uint64_t seed : {1, 2, 3}) {
    const Data d = MakeData(25, seed);
    ConfidenceBoundOptions ay;
    ay.bound = ConfidenceBound::kAyGpUcb;
    ay.noise_std = 0.2;
    ay.norm_bound = 3.0;
    ay.mixture = 0.4;  // lambda = sigma^2 / c = 0.1
    ConfidenceBoundOptions amm = ay;
    amm.bound = ConfidenceBound::kAmm;  // c = sigma^2 / lambda, a = lambda
    const Eigen::VectorXd amm_upper = Upper(Fed(amm, d), d.probe);
    EXPECT_TRUE((amm_upper.array() < Upper(Fed(ay, d), d.probe).array()).all()) << seed;

    ConfidenceBoundOptions igp = ay;
    igp.bound = ConfidenceBound::kIgpUcb;
    igp.igp_eta = 0.05;
    ConfidenceBoundOptions amm_igp = amm;
    amm_igp.mixture = amm.noise_std * amm.noise_std / (1.0 + igp.igp_eta);  // a = 1 + eta
    EXPECT_TRUE(
        (Upper(Fed(amm_igp, d), d.probe).array() < Upper(Fed(igp, d), d.probe).array()).all())
        << seed;

    ConfidenceBoundOptions dmm = amm;
    dmm.bound = ConfidenceBound::kDmm;
    EXPECT_TRUE((Upper(Fed(dmm, d), d.probe).array() <= amm_upper.array() + 1e-12).all()) << seed;
  }
}

TEST(ConfidenceBoundTest, BeforeAnyDataTheBoundIsThePrior) {
  ConfidenceBoundOptions o;
  o.bound = ConfidenceBound::kAmm;
  o.norm_bound = 10;
  ConfidenceBoundPosterior learner(2, ArmKernel(KernelType::kRbf, 1.0), OneUser(), o);
  Eigen::VectorXd mean, width;
  learner.Score(0, Eigen::Vector2d(0.3, 0.4), &mean, &width);
  EXPECT_EQ(mean(0), 0.0);
  // docs/algorithms.md §3.7, round 1: sqrt(2 c log(1/delta) + B^2) sqrt(k(x, x)).
  EXPECT_NEAR(width(0), std::sqrt(2 * std::log(100.0) + 100.0), 1e-12);
}

TEST(ConfidenceBoundTest, FrozenScorerAndSnapshotAgreeWithTheLearner) {
  const Data d = MakeData(20, 4);
  ConfidenceBoundOptions o;
  o.bound = ConfidenceBound::kDmm;
  const ConfidenceBoundPosterior learner = Fed(o, d);
  Eigen::VectorXd m1, w1, m2, w2, m3, w3;
  learner.Score(0, d.probe, &m1, &w1);
  learner.Freeze()->Score(0, d.probe, &m2, &w2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(w1, w2);
  storage::Encoder out;
  learner.SaveState(&out);
  ConfidenceBoundPosterior restored(2, ArmKernel(KernelType::kMatern52, 1.0), OneUser(), o);
  storage::Decoder in(out.data());
  ASSERT_TRUE(restored.LoadState(&in).ok());
  restored.Score(0, d.probe, &m3, &w3);
  EXPECT_EQ(m1, m3);
  EXPECT_EQ(w1, w3);
}

TEST(ConfidenceBoundTest, OptionsAreChecked) {
  ConfidenceBoundOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.delta = 1.0;
  EXPECT_FALSE(o.Validate().ok());
  o.delta = 0.01;
  o.norm_bound = 0.0;
  EXPECT_FALSE(o.Validate().ok());
  o.norm_bound = 1.0;
  o.bound = ConfidenceBound::kTuned;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace graphbandit
