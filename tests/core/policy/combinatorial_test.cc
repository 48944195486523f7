// Combinatorial semi-bandits: the index schedules against their defining identities, the
// rectified weight against numerical integration, and both oracles against brute force.
#include "core/policy/combinatorial.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "core/policy/selection.h"

namespace graphbandit {
namespace {

TEST(CombinatorialTest, NormalQuantileInvertsTheCdf) {
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-13);
  EXPECT_NEAR(NormalQuantile(0.5), 0.0, 1e-15);
  EXPECT_NEAR(NormalQuantile(0.001), -3.090232306167813, 1e-12);
  for (double p : {1e-300, 1e-100, 1e-20, 1e-8, 0.01, 0.02425, 0.3, 0.5, 0.7, 0.97575, 0.999}) {
    const double x = NormalQuantile(p);
    EXPECT_NEAR(NormalCdf(x) / p, 1.0, 1e-10) << "p = " << p;
    // Symmetry.
    if (p >= 1e-16) {
      EXPECT_NEAR(NormalQuantile(1.0 - p), -x, 1e-8 * std::max(1.0, std::abs(x)));
    }
  }
  EXPECT_EQ(NormalQuantile(0.0), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(NormalQuantile(1.0), std::numeric_limits<double>::infinity());
}

TEST(CombinatorialTest, GpUcbBetaIsTheoremOnesSchedule) {
  // 2 log(|A| t^2 / sqrt(2 pi)).
  EXPECT_NEAR(GpUcbBeta(100.0, 10.0), 2.0 * std::log(100.0 * 100.0 / std::sqrt(2.0 * M_PI)), 1e-12);
  EXPECT_EQ(GpUcbBeta(1.0, 1.0), 0.0);  // log(1 / sqrt(2 pi)) < 0 is clamped
  IndexSchedule s;
  s.arm_count = 50.0;
  EXPECT_NEAR(IndexWidth(IndexRule::kUcb, s, 7.0), std::sqrt(GpUcbBeta(50.0, 7.0)), 1e-14);
}

TEST(CombinatorialTest, BayesUcbWidthIsTheUpperQuantileOfEta) {
  IndexSchedule s;
  s.arm_count = 100.0;
  s.omega = 1.0;
  s.xi = 1.0;
  const double eta = std::sqrt(2.0 * M_PI) / (2.0 * 100.0 * 10.0);
  EXPECT_NEAR(BayesUcbEta(s, 10.0), eta, 1e-15);
  const double width = IndexWidth(IndexRule::kBayesUcb, s, 10.0);
  // The index mean + width * stddev is the (1 - eta) quantile: P(Z > width) = eta, which is
  // the identity beta_t = 2 erfinv(1 - 2 eta_t)^2 of CGP §2.4 with width = sqrt(beta_t).
  EXPECT_NEAR(1.0 - NormalCdf(width), eta, 1e-14);
  // General omega, xi.
  s.omega = 2.0;
  s.xi = 3.0;
  EXPECT_NEAR(BayesUcbEta(s, 4.0), 2.0 * M_PI / (2.0 * 1e4 * 64.0), 1e-15);
  // The 1/t level of Algorithm 2.
  s.inverse_t_level = true;
  EXPECT_DOUBLE_EQ(BayesUcbEta(s, 8.0), 0.125);
  // The clamp: |A| = 1, t = 1 gives sqrt(2 pi) / 2 > 1/2 by the formula.
  IndexSchedule tiny;
  tiny.arm_count = 1.0;
  EXPECT_EQ(BayesUcbEta(tiny, 1.0), 0.5);
  EXPECT_EQ(IndexWidth(IndexRule::kBayesUcb, tiny, 1.0), 0.0);
  // Large |A| t stays finite (eta is clamped at 1e-300, not rounded to 0).
  tiny.arm_count = 1e300;
  tiny.xi = 5.0;
  EXPECT_TRUE(std::isfinite(IndexWidth(IndexRule::kBayesUcb, tiny, 1e9)));
  EXPECT_GT(IndexWidth(IndexRule::kBayesUcb, tiny, 1e9), 37.0);
}

TEST(CombinatorialTest, RectifiedNormalMeanMatchesIntegration) {
  for (double mean : {-3.0, -0.4, 0.0, 0.25, 2.0}) {
    for (double s : {0.1, 0.5, 1.7}) {
      // Trapezoid rule of max(0, x) N(x; mean, s^2) over mean +- 12 s.
      const int n = 200000;
      const double lo = mean - 12.0 * s, hi = mean + 12.0 * s, h = (hi - lo) / n;
      double sum = 0.0;
      for (int i = 0; i <= n; ++i) {
        const double x = lo + i * h;
        const double z = (x - mean) / s;
        const double f = std::max(0.0, x) * std::exp(-0.5 * z * z) / (s * std::sqrt(2.0 * M_PI));
        sum += (i == 0 || i == n ? 0.5 : 1.0) * f;
      }
      EXPECT_NEAR(RectifiedNormalMean(mean, s), sum * h, 1e-8) << mean << " " << s;
      EXPECT_GE(RectifiedNormalMean(mean, s), std::max(0.0, mean));  // Jensen
    }
  }
  EXPECT_EQ(RectifiedNormalMean(-1.0, 0.0), 0.0);
  EXPECT_EQ(RectifiedNormalMean(2.5, 0.0), 2.5);
}

TEST(CombinatorialTest, IndicesAreOptimisticOnTheRightSide) {
  Eigen::VectorXd mean(3), sd(3);
  mean << 1.0, 2.0, 3.0;
  sd << 0.5, 0.0, 2.0;
  Rng rng(3);
  const Eigen::VectorXd up = BaseArmIndices(IndexRule::kUcb, 2.0, mean, sd, false, rng);
  const Eigen::VectorXd down = BaseArmIndices(IndexRule::kBayesUcb, 2.0, mean, sd, true, rng);
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(up(i), mean(i) + 2.0 * sd(i));
    EXPECT_DOUBLE_EQ(down(i), mean(i) - 2.0 * sd(i));
  }
  // Thompson: independent N(mean, sd^2) draws.
  Eigen::VectorXd sum = Eigen::VectorXd::Zero(3), sum2 = Eigen::VectorXd::Zero(3);
  const int draws = 20000;
  for (int k = 0; k < draws; ++k) {
    const Eigen::VectorXd x = BaseArmIndices(IndexRule::kThompson, 0.0, mean, sd, false, rng);
    sum += x;
    sum2 += x.cwiseProduct(x);
  }
  for (int i = 0; i < 3; ++i) {
    const double m = sum(i) / draws;
    EXPECT_NEAR(m, mean(i), 5.0 * sd(i) / std::sqrt(draws) + 1e-12);
    EXPECT_NEAR(std::sqrt(sum2(i) / draws - m * m), sd(i), 0.05 * sd(i) + 1e-6);
  }
}

TEST(CombinatorialTest, TopKIsTheSlateWithTheLargestSum) {
  Rng rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng.UniformInt(8));
    const int k = 1 + static_cast<int>(rng.UniformInt(static_cast<uint64_t>(n)));
    Eigen::VectorXd index(n);
    for (int i = 0; i < n; ++i) index(i) = std::round(4.0 * rng.Normal());  // ties happen
    auto chosen = TopKOracle(k).Select(index, rng);
    ASSERT_TRUE(chosen.ok());
    ASSERT_EQ(static_cast<int>(chosen->size()), k);
    double sum = 0.0;
    std::set<int> distinct(chosen->begin(), chosen->end());
    EXPECT_EQ(static_cast<int>(distinct.size()), k);
    for (size_t j = 0; j < chosen->size(); ++j) {
      sum += index((*chosen)[j]);
      if (j > 0) {
        EXPECT_GE(index((*chosen)[j - 1]), index((*chosen)[j]));
      }
    }
    // Brute force over every subset of size k.
    double best = -std::numeric_limits<double>::infinity();
    for (int mask = 0; mask < (1 << n); ++mask) {
      if (__builtin_popcount(static_cast<unsigned>(mask)) != k) continue;
      double s = 0.0;
      for (int i = 0; i < n; ++i) {
        if (mask & (1 << i)) s += index(i);
      }
      best = std::max(best, s);
    }
    EXPECT_DOUBLE_EQ(sum, best);
  }
  Eigen::VectorXd three(3);
  three << 1.0, 2.0, 3.0;
  EXPECT_EQ(TopKOracle(4).Select(three, rng).status().code(), absl::StatusCode::kInvalidArgument);
  three(1) = std::nan("");
  EXPECT_EQ(TopKOracle(1).Select(three, rng).status().code(), absl::StatusCode::kInvalidArgument);
}

// A random directed road network on `nodes` junctions, returned as its line graph.
std::vector<std::vector<int>> RandomLineGraph(int nodes, double p, Rng& rng) {
  std::vector<std::pair<int, int>> segments;
  for (int u = 0; u < nodes; ++u) {
    for (int v = 0; v < nodes; ++v) {
      if (u != v && rng.Uniform() < p) segments.emplace_back(u, v);
    }
  }
  std::vector<std::vector<int>> successors(segments.size());
  for (size_t a = 0; a < segments.size(); ++a) {
    for (size_t b = 0; b < segments.size(); ++b) {
      if (segments[a].second == segments[b].first && segments[b].second != segments[a].first) {
        successors[a].push_back(static_cast<int>(b));  // no U-turns
      }
    }
  }
  return successors;
}

// The least cost of a simple route (no segment twice) by depth-first enumeration.
double BruteForceCost(const std::vector<std::vector<int>>& successors, int source, int goal,
                      const Eigen::VectorXd& cost) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<char> used(successors.size(), 0);
  std::function<void(int, double)> visit = [&](int e, double sum) {
    if (e == goal) {
      best = std::min(best, sum);
      return;
    }
    used[e] = 1;
    for (int next : successors[e]) {
      if (!used[next]) visit(next, sum + cost(next));
    }
    used[e] = 0;
  };
  visit(source, cost(source));
  return best;
}

double RouteCost(const std::vector<std::vector<int>>& successors, const std::vector<int>& route,
                 const Eigen::VectorXd& cost) {
  double sum = 0.0;
  for (size_t j = 0; j < route.size(); ++j) {
    sum += cost(route[j]);
    if (j > 0) {
      const auto& next = successors[route[j - 1]];
      EXPECT_NE(std::find(next.begin(), next.end(), route[j]), next.end())
          << "turn " << route[j - 1] << " -> " << route[j] << " is not allowed";
    }
  }
  return sum;
}

TEST(CombinatorialTest, ShortestPathMatchesBruteForce) {
  Rng rng(11);
  int compared = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const auto successors = RandomLineGraph(5, 0.5, rng);
    const int n = static_cast<int>(successors.size());
    if (n < 2) continue;
    const int source = static_cast<int>(rng.UniformInt(static_cast<uint64_t>(n)));
    const int goal = static_cast<int>(rng.UniformInt(static_cast<uint64_t>(n)));
    Eigen::VectorXd cost(n);
    for (int e = 0; e < n; ++e) cost(e) = rng.Uniform() * 3.0;
    const double expected = BruteForceCost(successors, source, goal, cost);
    auto route = ShortestPathOracle(successors, source, goal).Select(cost, rng);
    if (!std::isfinite(expected)) {
      EXPECT_EQ(route.status().code(), absl::StatusCode::kFailedPrecondition);
      continue;
    }
    ASSERT_TRUE(route.ok()) << route.status();
    EXPECT_EQ(route->front(), source);
    EXPECT_EQ(route->back(), goal);
    EXPECT_NEAR(RouteCost(successors, *route, cost), expected, 1e-12);
    // Bellman-Ford (used for true costs that may be negative) agrees.
    auto any = CheapestRouteAnyCosts(successors, source, goal, cost);
    ASSERT_TRUE(any.ok()) << any.status();
    EXPECT_NEAR(RouteCost(successors, *any, cost), expected, 1e-12);
    ++compared;
  }
  EXPECT_GT(compared, 20);
}

TEST(CombinatorialTest, NegativeCostsAreRefusedOrDetected) {
  // Two segments forming a loop 0 -> 1 -> 0 (a two-way street counts as a turn here), and a
  // goal 2 reachable from 1.
  const std::vector<std::vector<int>> successors = {{1}, {0, 2}, {}};
  Eigen::VectorXd cost(3);
  cost << 1.0, -2.0, 1.0;
  Rng rng(1);
  EXPECT_EQ(ShortestPathOracle(successors, 0, 2).Select(cost, rng).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheapestRouteAnyCosts(successors, 0, 2, cost).status().code(),
            absl::StatusCode::kFailedPrecondition);  // the loop costs -1 per lap
  cost << 3.0, -2.0, 1.0;                            // the loop now costs +1: route 0, 1, 2
  auto route = CheapestRouteAnyCosts(successors, 0, 2, cost);
  ASSERT_TRUE(route.ok());
  EXPECT_EQ(*route, (std::vector<int>{0, 1, 2}));
  cost << 1.0, 1.0, 1.0;
  EXPECT_EQ(ShortestPathOracle(successors, 2, 0).Select(cost, rng).status().code(),
            absl::StatusCode::kFailedPrecondition);  // nothing leaves segment 2
}

}  // namespace
}  // namespace graphbandit
