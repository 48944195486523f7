// The one learner factory (core/learner/learner_factory.h) builds every policy kind, served or
// a paper's baseline, from a model's options, and the options it reads reach the learner.
#include "core/learner/learner_factory.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/graph/user_kernel.h"
#include "core/learner/lk_gp_posterior.h"
#include "core/learner/random_choice.h"

namespace graphbandit {
namespace {

constexpr PolicyKind kEveryKind[] = {
    PolicyKind::kEkUcb,         PolicyKind::kEkTs,          PolicyKind::kGpUcb,
    PolicyKind::kGpTs,          PolicyKind::kLinUcbPerUser, PolicyKind::kLinUcbPooled,
    PolicyKind::kGraphUcb,      PolicyKind::kGobLin,        PolicyKind::kBatchedNystromUcb,
    PolicyKind::kLkGpUcb,       PolicyKind::kLkGpTs,        PolicyKind::kRandom,
    PolicyKind::kSemiGraphTs,   PolicyKind::kSemiTs,        PolicyKind::kLinTs,
    PolicyKind::kGraphUcbLocal,
};

struct OneUser {
  UserGraph graph;
  std::shared_ptr<const UserKernel> kernel;
  explicit OneUser(double rho) {
    graph.EnsureUsers(1);
    UserKernelOptions options;
    options.rho = rho;
    kernel = *BuildUserKernel(graph, options);
  }
};

TEST(LearnerFactoryTest, BuildsEveryKindAndEachLearnsOrKnowinglyDoesNot) {
  for (PolicyKind kind : kEveryKind) {
    SCOPED_TRACE(std::string(PolicyName(kind)));
    ModelOptions options;
    options.policy = kind;
    const OneUser users(options.rho);
    auto learner = MakeLearner(options, /*dim=*/2, users.graph, users.kernel);
    ASSERT_TRUE(learner.ok()) << learner.status();
    Eigen::MatrixXd points(2, 2);
    points << 0.1, 0.9, -0.3, 0.4;
    const bool centred = kind == PolicyKind::kSemiGraphTs || kind == PolicyKind::kSemiTs;
    EXPECT_EQ((*learner)->LearnsFromDecisions(), centred);
    if (centred) {
      // Learns only from a whole decision: a lone point is refused.
      EXPECT_EQ((*learner)->Observe(0, points.col(0), 1.0).code(),
                absl::StatusCode::kFailedPrecondition);
      ASSERT_TRUE((*learner)->ObserveDecision(0, points, Eigen::Vector2d(0.5, 0.5), 0, 1.0).ok());
    } else {
      ASSERT_TRUE((*learner)->Observe(0, points.col(0), 1.0).ok());
    }
    EXPECT_EQ((*learner)->history_size(), 1);
    Eigen::VectorXd mean, stddev;
    (*learner)->Score(0, points, &mean, &stddev);
    ASSERT_EQ(mean.size(), 2);
    EXPECT_TRUE(mean.allFinite() && stddev.allFinite());
    if (kind == PolicyKind::kRandom) {
      // Knows nothing: every candidate ties, so the selection rule picks uniformly.
      EXPECT_EQ(mean, Eigen::VectorXd::Zero(2));
      EXPECT_EQ(stddev, Eigen::VectorXd::Zero(2));
      EXPECT_NE(dynamic_cast<RandomChoice*>(learner->get()), nullptr);
    } else if (centred) {
      // Centred learning learns differences: the rewarded candidate now ranks first.
      EXPECT_GT(mean(0), mean(1));
    } else if (kind != PolicyKind::kBatchedNystromUcb) {
      // Learned the reward of 1 at the observed point (the batched baseline is frozen until
      // its first re-draw).
      EXPECT_GT(mean(0), 0.05);
    }
    EXPECT_EQ(dynamic_cast<LkGpPosterior*>(learner->get()) != nullptr,
              kind == PolicyKind::kLkGpUcb || kind == PolicyKind::kLkGpTs);
  }
}

// One observation y at x for one user: the exact posterior mean there is k / (k + lambda) y
// with k = K_uu k(x, x) = variance / rho. GP_UCB reads lambda from options.ridge, LK-GP from
// research.lk.ridge.
TEST(LearnerFactoryTest, TheRidgeOfEachExactKindIsTheOneItsOptionsName) {
  const double rho = 0.5, variance = 2.0, y = 3.0;
  const double k = variance / rho;
  for (PolicyKind kind : {PolicyKind::kGpUcb, PolicyKind::kLkGpUcb}) {
    for (double ridge : {0.1, 4.0}) {
      SCOPED_TRACE(std::string(PolicyName(kind)) + " ridge " + std::to_string(ridge));
      ModelOptions options;
      options.policy = kind;
      options.rho = rho;
      options.kernel_variance = variance;
      if (kind == PolicyKind::kGpUcb) {
        options.ridge = ridge;
      } else {
        options.research.lk.ridge = ridge;
        options.ridge = 1000.0;  // not LK-GP's
      }
      const OneUser users(rho);
      auto learner = MakeLearner(options, 1, users.graph, users.kernel);
      ASSERT_TRUE(learner.ok()) << learner.status();
      const Eigen::VectorXd x = Eigen::VectorXd::Constant(1, 0.25);
      ASSERT_TRUE((*learner)->Observe(0, x, y).ok());
      Eigen::VectorXd mean, stddev;
      (*learner)->Score(0, x, &mean, &stddev);
      EXPECT_NEAR(mean(0), k / (k + ridge) * y, 1e-9);
      // Posterior variance k - k^2 / (k + lambda) = k lambda / (k + lambda).
      EXPECT_NEAR(stddev(0), std::sqrt(k * ridge / (k + ridge)), 1e-9);
    }
  }
}

// The configuration's decision settings reach the rule the model and the simulator decide by,
// and only the EK policies with mu following the noise coarsen a full dictionary.
TEST(LearnerFactoryTest, TheOptionsFixTheDecisionSetupAndWhenADictionaryCoarsens) {
  ModelOptions options;
  options.policy = PolicyKind::kEkTs;
  options.exploration = 0.3;
  options.exploration_width = ExplorationWidth::kAmm;
  options.index_schedule.arm_count = 17.0;
  options.propensity_rule = PropensityRule::kOwnDraw;
  options.propensity_draws = 9;
  const DecisionSetup setup = DecisionSetupOf(options);
  EXPECT_EQ(setup.rule, SelectionRule::kThompson);
  EXPECT_EQ(setup.exploration, 0.3);
  EXPECT_EQ(setup.width, ExplorationWidth::kAmm);
  EXPECT_EQ(setup.index_schedule.arm_count, 17.0);
  EXPECT_EQ(setup.propensity, PropensityRule::kOwnDraw);
  EXPECT_EQ(setup.propensity_draws, 9);
  options.policy = PolicyKind::kEkUcb;
  EXPECT_EQ(DecisionSetupOf(options).rule, SelectionRule::kUcb);

  options.max_dictionary_size = 300;
  options.coarsen_full_dictionary = true;
  options.kors_mu = 0.0;
  EXPECT_EQ(CoarseningCap(options), 300);
  options.kors_mu = 0.5;  // a fixed mu stays fixed
  EXPECT_EQ(CoarseningCap(options), 0);
  options.kors_mu = 0.0;
  options.coarsen_full_dictionary = false;
  EXPECT_EQ(CoarseningCap(options), 0);
  options.coarsen_full_dictionary = true;
  options.policy = PolicyKind::kGpUcb;  // no dictionary
  EXPECT_EQ(CoarseningCap(options), 0);
}

}  // namespace
}  // namespace graphbandit
