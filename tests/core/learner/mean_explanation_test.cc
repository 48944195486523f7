// Explanations of the kernel posteriors' means (core/learner/mean_explanation.h): the parts
// against the representer sum written out with a dense solve, the identity shared + own +
// neighbours = mean, and what the graph implies (an isolated user hears nobody; a user without
// data hears only others).
#include "core/learner/mean_explanation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/graph/green_function.h"
#include "core/learner/exact_gp_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "tests/test_util.h"

namespace graphbandit {
namespace {

using testing::RandomMatrix;

constexpr int kDim = 3;
constexpr int kUsers = 8;
constexpr double kRho = 0.4;
constexpr double kRidge = 0.3;
constexpr double kPriorMean = 0.25;
constexpr int kNoData = 5;    // in the connected core, never observed
constexpr int kIsolated = 6;  // no edges, observed

struct Problem {
  ArmKernel arm{KernelType::kRbf, 1.1};
  UserGraph graph;
  std::shared_ptr<const UserKernel> green;
  Eigen::MatrixXd x;
  std::vector<int32_t> users;
  Eigen::VectorXd y;
};

// Users 0..5 connected (a path and a chord), 6 and 7 isolated; user 5 has no observations.
Problem MakeProblem(int t, uint64_t seed) {
  Problem p;
  Rng rng(seed);
  p.graph.EnsureUsers(kUsers);
  for (int u = 0; u + 1 < 6; ++u) p.graph.SetEdge(u, u + 1, 1.0 + 0.4 * u);
  p.graph.SetEdge(0, 3, 0.6);
  p.green = *GreenFunction::Build(p.graph, kRho);
  p.x = RandomMatrix(kDim, t, rng);
  for (int i = 0; i < t; ++i) {
    int32_t u = static_cast<int32_t>(rng.UniformInt(kUsers - 1));
    if (u >= kNoData) ++u;
    p.users.push_back(u);
  }
  p.y = RandomMatrix(t, 1, rng).col(0).array() + 0.5;
  return p;
}

// The representer sum of the exact GP written out: alpha = (K + lambda I)^-1 (y - m0) with K
// built entry by entry, and each term K(s, z_j) alpha_j assigned to its user.
struct Naive {
  double own = 0.0, neighbours = 0.0;
  Eigen::VectorXd terms;
};
Naive NaiveParts(const Problem& p, double eta, int32_t user, const Eigen::VectorXd& q) {
  const MultiUserKernel kernel(p.arm, p.green, eta);
  const int t = static_cast<int>(p.x.cols());
  auto k = [&](int32_t a, const Eigen::VectorXd& xa, int32_t b, const Eigen::VectorXd& xb) {
    if (a < 0 || b < 0) return 0.0;
    const double g = p.green->ColumnOf(a).At(b) + (a == b ? eta : 0.0);
    return g * p.arm(xa, xb);
  };
  Eigen::MatrixXd gram(t, t);
  for (int i = 0; i < t; ++i) {
    for (int j = 0; j < t; ++j) gram(i, j) = k(p.users[i], p.x.col(i), p.users[j], p.x.col(j));
  }
  gram.diagonal().array() += kRidge;
  const Eigen::VectorXd alpha = gram.fullPivLu().solve((p.y.array() - kPriorMean).matrix());
  Naive out;
  out.terms.resize(t);
  for (int j = 0; j < t; ++j) {
    out.terms(j) = k(user, q, p.users[j], p.x.col(j)) * alpha(j);
    (p.users[j] == user ? out.own : out.neighbours) += out.terms(j);
  }
  return out;
}

void ExpectAddsUp(const Scorer& scorer, int32_t user, const Eigen::VectorXd& q) {
  MeanExplanation parts;
  ASSERT_TRUE(scorer.ExplainMean(user, q, kUsers + 1, &parts));  // every user listed
  Eigen::VectorXd mean, stddev;
  scorer.Score(user, q, &mean, &stddev);
  EXPECT_NEAR(parts.shared + parts.own + parts.neighbours, mean(0), 1e-9) << "user " << user;
  // The users' sums are the parts, and the lists are ordered by weight.
  double users_own = 0.0, users_others = 0.0;
  for (const MeanExplanation::User& u : parts.top_users) {
    (u.user == user ? users_own : users_others) += u.contribution;
  }
  EXPECT_NEAR(users_own, parts.own, 1e-12);
  EXPECT_NEAR(users_others, parts.neighbours, 1e-12);
  for (size_t i = 1; i < parts.top_points.size(); ++i) {
    EXPECT_GE(std::abs(parts.top_points[i - 1].contribution),
              std::abs(parts.top_points[i].contribution));
  }
  for (size_t i = 1; i < parts.top_users.size(); ++i) {
    EXPECT_GE(std::abs(parts.top_users[i - 1].contribution),
              std::abs(parts.top_users[i].contribution));
  }
}

TEST(MeanExplanationTest, ExactGpPartsMatchTheRepresenterSumWrittenOut) {
  const Problem p = MakeProblem(70, 3);
  for (double eta : {0.0, 0.5}) {
    ExactGpPosterior gp(kDim, p.arm, p.green, kRidge, kPriorMean, eta);
    for (int i = 0; i < p.x.cols(); ++i)
      ASSERT_TRUE(gp.Observe(p.users[i], p.x.col(i), p.y(i)).ok());
    const std::shared_ptr<const Scorer> frozen = gp.Freeze();
    Rng rng(11);
    for (int32_t user : {0, 2, kNoData, kIsolated, 7, kUnknownUser}) {
      const Eigen::VectorXd q = RandomMatrix(kDim, 1, rng).col(0);
      MeanExplanation parts;
      ASSERT_TRUE(frozen->ExplainMean(user, q, 4, &parts));
      const Naive naive = NaiveParts(p, eta, user, q);
      EXPECT_NEAR(parts.own, naive.own, 1e-9) << "user " << user << " eta " << eta;
      EXPECT_NEAR(parts.neighbours, naive.neighbours, 1e-9) << "user " << user << " eta " << eta;
      ASSERT_LE(parts.top_points.size(), 4u);
      for (const MeanExplanation::Point& point : parts.top_points) {
        EXPECT_NEAR(point.contribution, naive.terms(point.index), 1e-9);
        EXPECT_EQ(point.user, p.users[static_cast<size_t>(point.index)]);
      }
      // The four largest terms, as the dense sum ranks them.
      std::vector<double> sorted(naive.terms.data(), naive.terms.data() + naive.terms.size());
      std::sort(sorted.begin(), sorted.end(),
                [](double a, double b) { return std::abs(a) > std::abs(b); });
      for (size_t i = 0; i < parts.top_points.size(); ++i) {
        EXPECT_NEAR(std::abs(parts.top_points[i].contribution), std::abs(sorted[i]), 1e-9);
      }
      ExpectAddsUp(*frozen, user, q);
    }
  }
}

TEST(MeanExplanationTest, WhatTheGraphImplies) {
  const Problem p = MakeProblem(80, 5);
  ExactGpPosterior gp(kDim, p.arm, p.green, kRidge, kPriorMean, 0.0);
  for (int i = 0; i < p.x.cols(); ++i) ASSERT_TRUE(gp.Observe(p.users[i], p.x.col(i), p.y(i)).ok());
  const Eigen::VectorXd q = p.x.col(0);
  MeanExplanation parts;
  // A user without data: all from the neighbours, and the nearest of them weighs most.
  ASSERT_TRUE(gp.Freeze()->ExplainMean(kNoData, q, 5, &parts));
  EXPECT_EQ(parts.own, 0.0);
  EXPECT_NE(parts.neighbours, 0.0);
  for (const MeanExplanation::User& u : parts.top_users) {
    EXPECT_LT(u.user, 6) << "only the connected core reaches user 5";
  }
  // An isolated user: only its own rewards.
  ASSERT_TRUE(gp.Freeze()->ExplainMean(kIsolated, q, 5, &parts));
  EXPECT_EQ(parts.neighbours, 0.0);
  EXPECT_NE(parts.own, 0.0);
  ASSERT_EQ(parts.top_users.size(), 1u);
  EXPECT_EQ(parts.top_users[0].user, kIsolated);
  // The unknown user: the prior alone.
  ASSERT_TRUE(gp.Freeze()->ExplainMean(kUnknownUser, q, 5, &parts));
  EXPECT_EQ(parts.own + parts.neighbours, 0.0);
  EXPECT_TRUE(parts.top_points.empty());
}

TEST(MeanExplanationTest, NystromPartsAddUpAndEqualTheExactGpsWithAFullDictionary) {
  const Problem p = MakeProblem(90, 7);
  // A dictionary grown by KORS (fewer points than observations): the identity.
  NystromOptions kors;
  kors.ridge = kRidge;
  kors.kors_mu = kRidge;
  kors.prior_mean = kPriorMean;
  kors.max_dictionary_size = 30;
  NystromPosterior small(kDim, p.arm, p.green, kors, 0.3);
  // Every point in the dictionary: the same representer sum as the exact GP.
  NystromOptions full = kors;
  full.kors_gamma = 1e12;
  full.max_dictionary_size = 1 << 20;
  NystromPosterior nystrom(kDim, p.arm, p.green, full, 0.3);
  ExactGpPosterior gp(kDim, p.arm, p.green, kRidge, kPriorMean, 0.3);
  for (int i = 0; i < p.x.cols(); ++i) {
    ASSERT_TRUE(small.Observe(p.users[i], p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(nystrom.Observe(p.users[i], p.x.col(i), p.y(i)).ok());
    ASSERT_TRUE(gp.Observe(p.users[i], p.x.col(i), p.y(i)).ok());
  }
  ASSERT_GT(small.dictionary_size(), 1);
  ASSERT_LT(small.dictionary_size(), p.x.cols()) << "KORS kept only some points";
  ASSERT_EQ(nystrom.dictionary_size(), p.x.cols());
  Rng rng(13);
  for (int32_t user : {0, 3, kNoData, kIsolated, 7, kUnknownUser}) {
    const Eigen::VectorXd q = RandomMatrix(kDim, 1, rng).col(0);
    ExpectAddsUp(*small.Freeze(), user, q);
    ExpectAddsUp(*nystrom.Freeze(), user, q);
    MeanExplanation a, b;
    ASSERT_TRUE(nystrom.Freeze()->ExplainMean(user, q, 3, &a));
    ASSERT_TRUE(gp.Freeze()->ExplainMean(user, q, 3, &b));
    EXPECT_NEAR(a.own, b.own, 1e-6) << "user " << user;
    EXPECT_NEAR(a.neighbours, b.neighbours, 1e-6) << "user " << user;
  }
}

}  // namespace
}  // namespace graphbandit
