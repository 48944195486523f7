// Evaluation exploration and the off-policy estimators: the mixture's probabilities against
// how often each candidate is actually chosen, the running sums against the estimators computed
// from scratch, unbiasedness and interval coverage on problems whose truth is known, and the
// codings.
#include "core/policy/evaluation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

namespace graphbandit {
namespace {

ScoredSlate Decided(const Eigen::VectorXd& mean, const Eigen::VectorXd& stddev,
                    const DecisionRule& rule, int k, Rng& rng) {
  ScoredSlate scored;
  scored.mean = mean;
  scored.stddev = stddev;
  scored.slate = SelectSlate(rule.rule, rule.exploration * rule.width, mean, stddev, k, rng);
  return scored;
}

TEST(EvaluationTest, ZeroEpsilonChangesNothingAndDrawsNothing) {
  Eigen::VectorXd mean(3), sd(3);
  mean << 0.1, 0.5, 0.2;
  sd << 0.1, 0.1, 0.1;
  DecisionRule rule;
  Rng rng(1), coin(2);
  ScoredSlate scored = Decided(mean, sd, rule, 1, rng);
  const auto before = scored.slate;
  const auto coin_state = coin.state();
  EXPECT_FALSE(MixUniformShare(0.0, rule, 1, coin, rng, &scored));
  EXPECT_EQ(coin.state(), coin_state);
  ASSERT_EQ(scored.slate.size(), 1u);
  EXPECT_EQ(scored.slate[0].candidate, before[0].candidate);
  EXPECT_EQ(scored.slate[0].probability, before[0].probability);
}

// The probability each decision reports for its arm must be the frequency with which that arm
// is chosen, and the mixture's formula.
TEST(EvaluationTest, ReportedPropensityIsTheMixtureAndMatchesFrequencies) {
  Eigen::VectorXd mean(4), sd(4);
  mean << 0.3, 0.9, 0.1, 0.9;  // candidates 1 and 3 tie for the UCB
  sd.setZero();
  DecisionRule rule;
  const double epsilon = 0.2;
  Rng rng(3), coin(4);
  std::vector<int> chosen(4, 0);
  std::vector<double> reported(4, -1.0);
  int explored = 0;
  const int trials = 200000;
  for (int t = 0; t < trials; ++t) {
    ScoredSlate scored = Decided(mean, sd, rule, 1, rng);
    explored += MixUniformShare(epsilon, rule, 1, coin, rng, &scored) ? 1 : 0;
    const int c = scored.slate[0].candidate;
    ++chosen[c];
    ASSERT_TRUE(scored.slate[0].probability.has_value());
    if (reported[c] < 0.0) reported[c] = *scored.slate[0].probability;
    EXPECT_EQ(*scored.slate[0].probability, reported[c]) << "one candidate, one probability";
  }
  const double expected[4] = {epsilon / 4, (1 - epsilon) * 0.5 + epsilon / 4, epsilon / 4,
                              (1 - epsilon) * 0.5 + epsilon / 4};
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(reported[c], expected[c], 1e-15) << c;
    const double frequency = static_cast<double>(chosen[c]) / trials;
    const double se = std::sqrt(expected[c] * (1 - expected[c]) / trials);
    EXPECT_NEAR(frequency, expected[c], 5 * se) << c;
  }
  EXPECT_NEAR(static_cast<double>(explored) / trials, epsilon,
              5 * std::sqrt(epsilon * (1 - epsilon) / trials));
}

TEST(EvaluationTest, SlateInclusionProbabilitiesMatchFrequencies) {
  Eigen::VectorXd mean(5), sd(5);
  mean << 0.3, 0.9, 0.1, 0.5, 0.0;
  sd << 0.2, 0.1, 0.3, 0.2, 0.5;
  for (SelectionRule r : {SelectionRule::kUcb, SelectionRule::kThompson}) {
    DecisionRule rule;
    rule.rule = r;
    rule.exploration = 1.0;
    const double epsilon = 0.3;
    Rng rng(5), coin(6);
    std::vector<int> included(5, 0);
    std::vector<double> sum_reported(5, 0.0);
    // Thompson slates estimate inclusion by 1,000 draws each: fewer trials.
    const int trials = r == SelectionRule::kUcb ? 40000 : 4000;
    for (int t = 0; t < trials; ++t) {
      ScoredSlate scored = Decided(mean, sd, rule, 2, rng);
      MixUniformShare(epsilon, rule, 2, coin, rng, &scored);
      ASSERT_EQ(scored.slate.size(), 2u);
      ASSERT_NE(scored.slate[0].candidate, scored.slate[1].candidate);
      for (const RankedChoice& choice : scored.slate) {
        ++included[choice.candidate];
        sum_reported[choice.candidate] += *choice.probability;
      }
    }
    for (int c = 0; c < 5; ++c) {
      if (included[c] == 0) continue;
      // Thompson's inclusion is itself a 1,000-draw estimate: compare loosely.
      const double reported = sum_reported[c] / included[c];
      const double frequency = static_cast<double>(included[c]) / trials;
      EXPECT_NEAR(frequency, reported, r == SelectionRule::kUcb ? 0.01 : 0.035)
          << "rule " << static_cast<int>(r) << " candidate " << c;
    }
  }
}

TEST(EvaluationTest, ThompsonSingleArmProbabilitiesMatchFrequencies) {
  Eigen::VectorXd mean(4), sd(4);
  mean << 0.3, 0.5, 0.1, 0.45;
  sd << 0.2, 0.1, 0.3, 0.2;
  DecisionRule rule;
  rule.rule = SelectionRule::kThompson;
  const double epsilon = 0.25;
  Rng rng(12), coin(13);
  std::vector<int> chosen(4, 0);
  std::vector<double> reported(4, -1.0);
  const int trials = 20000;
  for (int t = 0; t < trials; ++t) {
    ScoredSlate scored = Decided(mean, sd, rule, 1, rng);
    MixUniformShare(epsilon, rule, 1, coin, rng, &scored);
    const int c = scored.slate[0].candidate;
    ++chosen[c];
    // The exact (integrated) probability: the same for every decision that shows c.
    if (reported[c] < 0.0) reported[c] = *scored.slate[0].probability;
    ASSERT_NEAR(*scored.slate[0].probability, reported[c], 1e-12);
  }
  double total = 0.0;
  for (int c = 0; c < 4; ++c) {
    const double frequency = static_cast<double>(chosen[c]) / trials;
    EXPECT_NEAR(frequency, reported[c], 5 * std::sqrt(reported[c] / trials)) << c;
    EXPECT_NEAR(reported[c], (1 - epsilon) * ProbabilityOfMaximum(c, mean, sd) + epsilon / 4,
                1e-12);
    total += reported[c];
  }
  EXPECT_NEAR(total, 1.0, 1e-6);
}

TEST(EvaluationTest, SampledParameterPropensitiesAreMixed) {
  ScoredSlate scored;
  scored.mean = Eigen::VectorXd::Zero(4);
  scored.stddev = Eigen::VectorXd::Zero(4);
  scored.propensities = Eigen::VectorXd(4);
  scored.propensities << 0.7, 0.3, 0.0, 0.0;
  scored.slate = {RankedChoice{0, 0.7, 0.7}};
  DecisionRule rule;
  rule.rule = SelectionRule::kSampledParameter;
  Rng rng(1), coin(9);
  // Explored or not, the vector becomes the mixture's and the arm's probability its entry.
  MixUniformShare(0.5, rule, 1, coin, rng, &scored);
  EXPECT_NEAR(scored.propensities.sum(), 1.0, 1e-15);
  EXPECT_NEAR(scored.propensities(2), 0.125, 1e-15);
  EXPECT_NEAR(scored.propensities(0), 0.5 * 0.7 + 0.125, 1e-15);
  EXPECT_EQ(*scored.slate[0].probability, scored.propensities(scored.slate[0].candidate));
  // Drawn often enough, some decisions explore; each reports its arm's mixed probability, and
  // the arms the policy never picks (2 and 3) come only from the share.
  int explored = 0;
  for (int t = 0; t < 200; ++t) {
    ScoredSlate s;
    s.mean = Eigen::VectorXd::Zero(4);
    s.stddev = Eigen::VectorXd::Zero(4);
    s.propensities = Eigen::VectorXd(4);
    s.propensities << 0.7, 0.3, 0.0, 0.0;
    s.slate = {RankedChoice{0, 0.7, 0.7}};
    const bool drawn = MixUniformShare(0.5, rule, 1, coin, rng, &s);
    explored += drawn ? 1 : 0;
    const int c = s.slate[0].candidate;
    EXPECT_EQ(*s.slate[0].probability, s.propensities(c));
    if (!drawn) {
      EXPECT_EQ(c, 0);
    }
  }
  EXPECT_GT(explored, 60);
  EXPECT_LT(explored, 140);
}

TEST(EvaluationTest, FewEffectiveDecisionsGiveNoInterval) {
  Eigen::VectorXd mean(10);
  mean.setZero();
  mean(9) = 1.0;  // greedy: candidate 9
  PolicyEvaluator evaluator;
  // 100 decisions of candidate 0 with probability 0.9, one of candidate 9 with probability 0.01:
  // greedy's weight is 0 but once, so its estimates rest on one decision.
  for (int i = 0; i < 100; ++i)
    evaluator.Add(MakeEvaluationRecord(mean, 0, 0.9, false, 0, true), 0.5);
  evaluator.Add(MakeEvaluationRecord(mean, 9, 0.01, true, 0, true), 1.0);
  const std::vector<PolicyValue> values = evaluator.Values();
  EXPECT_TRUE(values[0].valid);
  EXPECT_TRUE(values[3].valid);  // the baseline, candidate 0, agrees 100 times
  EXPECT_FALSE(values[2].valid);
  EXPECT_NEAR(values[2].effective_sample_size, 1.0, 1e-12);
}

TEST(EvaluationTest, RewardsWithoutARecordCountForTheDeployedPolicyOnly) {
  PolicyEvaluator evaluator;
  for (int r = 1; r <= 9; ++r) evaluator.AddOnPolicy(r);
  EXPECT_FALSE(evaluator.Values()[0].valid);  // 9 < kMinEffectiveSampleSize
  evaluator.AddOnPolicy(10);
  const std::vector<PolicyValue> values = evaluator.Values();
  EXPECT_EQ(values[0].decisions, 10);
  EXPECT_TRUE(values[0].valid);
  EXPECT_DOUBLE_EQ(values[0].ips.estimate, 5.5);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(values[t].decisions, 0);
}

TEST(EvaluationTest, ARewardThatWouldOverflowTheSumsIsLeftOut) {
  Eigen::VectorXd mean(2);
  mean << 0.0, 1.0;
  PolicyEvaluator evaluator;
  evaluator.Add(MakeEvaluationRecord(mean, 0, 0.5, true, -1, true), 1.0);
  PolicyEvaluator before = evaluator;
  evaluator.Add(MakeEvaluationRecord(mean, 0, 0.5, true, -1, true), 1e200);  // its square is inf
  evaluator.AddOnPolicy(1e200);
  EXPECT_TRUE(evaluator == before);
  storage::Encoder out;
  evaluator.Save(&out);
  const std::string bytes = out.Release();
  storage::Decoder in(bytes);
  PolicyEvaluator restored;
  EXPECT_TRUE(restored.Load(&in));
}

TEST(EvaluationTest, RecordTargets) {
  Eigen::VectorXd mean(4);
  mean << 0.2, 0.8, 0.8, 0.4;
  const EvaluationRecord r = MakeEvaluationRecord(mean, 2, 0.25, true, 3, true);
  EXPECT_EQ(r.candidates, 4);
  EXPECT_EQ(r.predicted, 0.8);
  ASSERT_EQ(r.targets.size(), 3u);
  EXPECT_DOUBLE_EQ(r.targets[0].probability, 0.25);
  EXPECT_DOUBLE_EQ(r.targets[0].direct, 0.55);
  EXPECT_DOUBLE_EQ(r.targets[1].probability, 0.5);  // tied with candidate 1
  EXPECT_DOUBLE_EQ(r.targets[1].direct, 0.8);
  EXPECT_EQ(r.targets[2].probability, 0.0);  // the baseline is candidate 3
  EXPECT_EQ(r.targets[2].direct, 0.4);
  const EvaluationRecord first = MakeEvaluationRecord(mean, 0, 0.5, false, -1, true);
  EXPECT_EQ(first.targets[2].probability, 1.0);  // no baseline: the first candidate
  EXPECT_TRUE(MakeEvaluationRecord(mean, 0, 1.0, false, -1, false).targets.empty());
}

// The running sums against the estimators written out from their definitions.
TEST(EvaluationTest, SumsMatchTheEstimatorsComputedFromScratch) {
  Rng rng(11);
  std::vector<EvaluationRecord> records;
  std::vector<double> rewards;
  PolicyEvaluator evaluator;
  for (int i = 0; i < 500; ++i) {
    const int n = 2 + static_cast<int>(rng.UniformInt(5));
    Eigen::VectorXd mean(n);
    for (int j = 0; j < n; ++j) mean(j) = rng.Uniform();
    const int chosen = static_cast<int>(rng.UniformInt(n));
    const double p = 0.1 + 0.9 * rng.Uniform();
    records.push_back(MakeEvaluationRecord(mean, chosen, p, rng.Uniform() < 0.3,
                                           static_cast<int>(rng.UniformInt(n)), true));
    rewards.push_back(rng.Normal());
    evaluator.Add(records.back(), rewards.back());
  }
  const std::vector<PolicyValue> values = evaluator.Values();
  ASSERT_EQ(values.size(), 4u);
  const double n = static_cast<double>(records.size());
  constexpr double kZ = 1.959963984540054;
  // Mean and normal 95% interval of the terms.
  auto normal = [](const std::vector<double>& x) {
    const double m = static_cast<double>(x.size());
    double mean = 0.0, var = 0.0;
    for (double v : x) mean += v / m;
    for (double v : x) var += (v - mean) * (v - mean) / (m - 1);
    const double half = kZ * std::sqrt(var / m);
    return ValueInterval{mean, mean - half, mean + half};
  };
  // SNIPS and its delta-method interval.
  auto snips = [](const std::vector<double>& w, const std::vector<double>& r) {
    double sw = 0.0, swr = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      sw += w[i];
      swr += w[i] * r[i];
    }
    const double v = swr / sw;
    double spread = 0.0;
    for (size_t i = 0; i < w.size(); ++i) spread += w[i] * w[i] * (r[i] - v) * (r[i] - v);
    const double half = kZ * std::sqrt(spread) / sw;
    return ValueInterval{v, v - half, v + half};
  };
  auto expect_near = [](const ValueInterval& got, double estimate, double lower, double upper) {
    EXPECT_NEAR(got.estimate, estimate, 1e-12);
    EXPECT_NEAR(got.lower, lower, 1e-12);
    EXPECT_NEAR(got.upper, upper, 1e-12);
  };
  const double low = *std::min_element(rewards.begin(), rewards.end());
  const double high = *std::max_element(rewards.begin(), rewards.end());
  for (int t = 0; t < 3; ++t) {
    std::vector<double> ips, dr, w;
    double bound = 0.0;  // the largest weight the target could have had
    for (size_t i = 0; i < records.size(); ++i) {
      const auto& target = records[i].targets[t];
      const double weight = target.probability / records[i].propensity;
      w.push_back(weight);
      ips.push_back(weight * rewards[i]);
      dr.push_back(target.direct + weight * (rewards[i] - records[i].predicted));
      const double largest = t == 0 ? 1.0 / records[i].candidates : 1.0;
      bound = std::max(bound, largest / records[i].propensity);
    }
    const PolicyValue& v = values[t + 1];
    EXPECT_EQ(v.decisions, 500);
    EXPECT_TRUE(v.valid);
    expect_near(v.dr, normal(dr).estimate, normal(dr).lower, normal(dr).upper);
    // IPS and SNIPS: each bound with one more decision of weight `bound` and the lowest (for
    // the lower bound) or highest reward.
    std::vector<double> ips_low = ips, ips_high = ips, w_extra = w, r_low = rewards,
                        r_high = rewards;
    ips_low.push_back(std::min(0.0, bound * low));  // the most adverse w r of the extra decision
    ips_high.push_back(std::max(0.0, bound * high));
    w_extra.push_back(bound);
    r_low.push_back(low);
    r_high.push_back(high);
    // (the more cautious of that and the plain interval)
    const ValueInterval plain_ips = normal(ips), plain_snips = snips(w, rewards);
    expect_near(v.ips, plain_ips.estimate, std::min(plain_ips.lower, normal(ips_low).lower),
                std::max(plain_ips.upper, normal(ips_high).upper));
    expect_near(v.snips, plain_snips.estimate,
                std::min(plain_snips.lower, snips(w_extra, r_low).lower),
                std::max(plain_snips.upper, snips(w_extra, r_high).upper));
    EXPECT_LT(v.ips.lower, normal(ips).lower);
    EXPECT_GT(v.ips.upper, normal(ips).upper);
    double sw = 0.0, sw2 = 0.0;
    for (double x : w) {
      sw += x;
      sw2 += x * x;
    }
    EXPECT_NEAR(v.effective_sample_size, sw * sw / sw2, 1e-9);
  }
  // Deployed: weight 1, all three are the mean reward with their plain intervals.
  const ValueInterval mean_reward = normal(rewards);
  const ValueInterval snips_reward = snips(std::vector<double>(rewards.size(), 1.0), rewards);
  expect_near(values[0].ips, mean_reward.estimate, mean_reward.lower, mean_reward.upper);
  expect_near(values[0].dr, mean_reward.estimate, mean_reward.lower, mean_reward.upper);
  expect_near(values[0].snips, mean_reward.estimate, snips_reward.lower, snips_reward.upper);
  EXPECT_NEAR(values[0].effective_sample_size, n, 1e-9);
}

// Logged by an epsilon-greedy policy on a problem whose expected rewards are known, the
// estimates of the other policies land on their true values.
TEST(EvaluationTest, EstimatesAreUnbiasedOnAKnownProblem) {
  const int k = 5;
  const double epsilon = 0.3;
  Rng rng(21);
  PolicyEvaluator evaluator;
  double truth[4] = {0, 0, 0, 0};
  const int decisions = 20000;
  for (int i = 0; i < decisions; ++i) {
    Eigen::VectorXd mu(k), predicted(k);
    for (int j = 0; j < k; ++j) {
      mu(j) = rng.Uniform();
      predicted(j) = mu(j) + 0.3 * rng.Normal();  // an imperfect reward model
    }
    int greedy = 0;
    predicted.maxCoeff(&greedy);
    const bool explore = rng.Uniform() < epsilon;
    const int chosen = explore ? static_cast<int>(rng.UniformInt(k)) : greedy;
    const double p = (chosen == greedy ? 1 - epsilon : 0.0) + epsilon / k;
    const EvaluationRecord record = MakeEvaluationRecord(predicted, chosen, p, explore, 1, true);
    const double reward = mu(chosen) + 0.5 * rng.Normal();
    evaluator.Add(record, reward);
    truth[0] += ((1 - epsilon) * mu(greedy) + epsilon * mu.mean()) / decisions;
    truth[1] += mu.mean() / decisions;
    truth[2] += mu(greedy) / decisions;
    truth[3] += mu(1) / decisions;
  }
  const std::vector<PolicyValue> values = evaluator.Values();
  for (int t = 0; t < 4; ++t) {
    for (const ValueInterval* v : {&values[t].ips, &values[t].snips, &values[t].dr}) {
      const double half = v->upper - v->estimate;
      EXPECT_GT(half, 0.0);
      EXPECT_NEAR(v->estimate, truth[t], 3 * half / 1.96) << EvaluatedPolicyName(values[t].policy);
    }
  }
  EXPECT_GT(evaluator.explored(), 0.25 * decisions);
}

// A target that agrees with the logging policy on most decisions and departs from it on a few,
// where only the uniform share can log its arm (weight K / epsilon = 50): about one such
// decision per run. The plain normal interval of IPS misses the truth in far more than 5% of
// runs (a run that has seen none of those decisions has a low estimate and a small variance);
// with the extra decision of the largest weight, IPS and SNIPS cover it in at least 90%, and DR
// does with a reward model that is right where the target departs.
TEST(EvaluationTest, IntervalsCoverATargetWhoseLargeWeightsAreRare) {
  const int k = 10, decisions = 1000, runs = 200;
  const double epsilon = 0.2;
  Rng rng(5);
  int covered[3] = {0, 0, 0}, plain_ips_covered = 0;
  for (int run = 0; run < runs; ++run) {
    PolicyEvaluator evaluator;
    std::vector<double> terms;
    double truth = 0.0;
    for (int i = 0; i < decisions; ++i) {
      // The logging rule plays candidate 0, which pays 1 on average. The target (greedy: the
      // largest prediction) plays 0 too, but on 5% of decisions candidate 1, which then pays 2.
      const bool departs = rng.Uniform() < 0.05;
      Eigen::VectorXd predicted = Eigen::VectorXd::Zero(k);
      predicted(0) = 1.0;
      if (departs) predicted(1) = 2.0;
      const bool explore = rng.Uniform() < epsilon;
      const int chosen = explore ? static_cast<int>(rng.UniformInt(k)) : 0;
      const double p = (chosen == 0 ? 1 - epsilon : 0.0) + epsilon / k;
      const double mean = chosen == 0 ? 1.0 : (chosen == 1 && departs ? 2.0 : 0.0);
      const double reward = mean + 0.5 * rng.Normal();
      evaluator.Add(MakeEvaluationRecord(predicted, chosen, p, explore, -1, true), reward);
      const int target = departs ? 1 : 0;
      terms.push_back((chosen == target ? 1.0 / p : 0.0) * reward);
      truth += (departs ? 2.0 : 1.0) / decisions;
    }
    const PolicyValue greedy = evaluator.Values()[2];
    ASSERT_TRUE(greedy.valid);
    int e = 0;
    for (const ValueInterval* v : {&greedy.ips, &greedy.snips, &greedy.dr}) {
      covered[e++] += v->lower <= truth && truth <= v->upper;
    }
    double mean = 0.0, var = 0.0;
    for (double x : terms) mean += x / decisions;
    for (double x : terms) var += (x - mean) * (x - mean) / (decisions - 1);
    const double half = 1.959963984540054 * std::sqrt(var / decisions);
    EXPECT_NEAR(greedy.ips.estimate, mean, 1e-9);
    plain_ips_covered += mean - half <= truth && truth <= mean + half;
  }
  for (int e = 0; e < 3; ++e) EXPECT_GE(covered[e], 0.9 * runs) << e;
  EXPECT_LT(plain_ips_covered, 0.85 * runs);  // what the extra decision mends
}

// With rewards of 0 and 1 (the extra decision's IPS term is then 0 for the lower bound, which
// one more term can move up), the bounds are still never narrower than the plain ones.
TEST(EvaluationTest, BoundsAreNeverNarrowerThanThePlainOnes) {
  Rng rng(9);
  Eigen::VectorXd mean = Eigen::VectorXd::Zero(5);
  mean(2) = 1.0;  // greedy and baseline: candidate 2
  PolicyEvaluator evaluator;
  std::vector<double> ips;
  for (int i = 0; i < 400; ++i) {
    const int chosen = static_cast<int>(rng.UniformInt(5));
    const double p = chosen == 2 ? 0.1 : 0.225;
    const double reward = rng.Uniform() < 0.3 ? 1.0 : 0.0;
    evaluator.Add(MakeEvaluationRecord(mean, chosen, p, true, 2, true), reward);
    ips.push_back(chosen == 2 ? reward / p : 0.0);
  }
  double m = 0.0, var = 0.0;
  for (double x : ips) m += x / ips.size();
  for (double x : ips) var += (x - m) * (x - m) / (ips.size() - 1);
  const double half = 1.959963984540054 * std::sqrt(var / ips.size());
  const PolicyValue baseline = evaluator.Values()[3];
  ASSERT_TRUE(baseline.valid);
  EXPECT_NEAR(baseline.ips.estimate, m, 1e-12);
  EXPECT_LE(baseline.ips.lower, m - half + 1e-12);
  EXPECT_GT(baseline.ips.upper, m + half);  // 1 / 0.1 * 1 is above every term's mean
  for (const PolicyValue& v : evaluator.Values()) {
    if (!v.valid) continue;
    for (const ValueInterval* i : {&v.ips, &v.snips, &v.dr}) {
      EXPECT_LE(i->lower, i->estimate);
      EXPECT_GE(i->upper, i->estimate);
    }
  }
}

// A version-8 snapshot's sums (without weight bounds and reward ranges) still load.
TEST(EvaluationTest, SumsWithoutBoundsLoad) {
  storage::Encoder old;
  old.PutVarint64(0);                   // explored
  old.PutVarint64(kEvaluatedPolicies);  // targets
  for (int p = 0; p < kEvaluatedPolicies; ++p) {
    old.PutVarint64(20);
    // sum w r, its square, DR's sum and square, sum w, w^2, w^2 r, w^2 r^2: 20 rewards of 0.5
    // with weight 1.
    for (double x : {10.0, 5.0, 10.0, 5.0, 20.0, 20.0, 10.0, 5.0}) old.PutDouble(x);
  }
  const std::string bytes = old.Release();
  storage::Decoder strict(bytes);
  PolicyEvaluator evaluator;
  EXPECT_FALSE(evaluator.Load(&strict));  // the current coding wants the bounds
  storage::Decoder in(bytes);
  ASSERT_TRUE(evaluator.Load(&in, /*with_bounds=*/false));
  EXPECT_TRUE(in.done());
  const std::vector<PolicyValue> values = evaluator.Values();
  ASSERT_TRUE(values[2].valid);
  EXPECT_DOUBLE_EQ(values[2].ips.estimate, 0.5);
  EXPECT_DOUBLE_EQ(values[2].snips.estimate, 0.5);
  // Every reward was 0.5: no spread, and no extra decision until a decision sets the bounds.
  EXPECT_DOUBLE_EQ(values[2].ips.lower, 0.5);
  EXPECT_DOUBLE_EQ(values[2].snips.upper, 0.5);
}

TEST(EvaluationTest, CodingsRoundTripAndRefuseMalformedInput) {
  Eigen::VectorXd mean(3);
  mean << 0.1, 0.2, 0.3;
  const EvaluationRecord record = MakeEvaluationRecord(mean, 1, 0.4, true, 2, true);
  storage::Encoder out;
  PutEvaluationRecord(&out, record);
  const std::string bytes = out.Release();
  storage::Decoder in(bytes);
  EvaluationRecord back;
  ASSERT_TRUE(GetEvaluationRecord(&in, &back));
  EXPECT_TRUE(in.done());
  EXPECT_TRUE(back == record);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    storage::Decoder part(absl::string_view(bytes).substr(0, cut));
    EvaluationRecord r;
    EXPECT_FALSE(GetEvaluationRecord(&part, &r)) << cut;
  }
  EvaluationRecord bad = record;
  bad.propensity = 0.0;
  storage::Encoder bad_out;
  PutEvaluationRecord(&bad_out, bad);
  const std::string bad_bytes = bad_out.Release();
  storage::Decoder bad_in(bad_bytes);
  EXPECT_FALSE(GetEvaluationRecord(&bad_in, &bad));

  PolicyEvaluator evaluator;
  evaluator.Add(record, 0.7);
  evaluator.Add(MakeEvaluationRecord(mean, 0, 1.0, false, -1, false), 0.1);
  storage::Encoder saved;
  evaluator.Save(&saved);
  const std::string state = saved.Release();
  storage::Decoder load(state);
  PolicyEvaluator restored;
  ASSERT_TRUE(restored.Load(&load));
  EXPECT_TRUE(load.done());
  EXPECT_TRUE(restored == evaluator);
  storage::Decoder truncated(absl::string_view(state).substr(0, state.size() - 1));
  PolicyEvaluator partial;
  EXPECT_FALSE(partial.Load(&truncated));
}

// The own policy (kModelTarget: an apprentice's or a challenger's) is estimated from the
// decisions that carry it, and only from those; its sums survive the coding.
TEST(EvaluationTest, OwnPolicyValueComesFromTheRecordsThatCarryIt) {
  Rng rng(23);
  PolicyEvaluator evaluator;
  EXPECT_FALSE(evaluator.OwnValue().has_value());
  std::vector<double> ips, dr, w;
  for (int i = 0; i < 400; ++i) {
    const int n = 2 + static_cast<int>(rng.UniformInt(4));
    Eigen::VectorXd mean(n), rule(n);
    for (int j = 0; j < n; ++j) {
      mean(j) = rng.Uniform();
      rule(j) = rng.Uniform();
    }
    rule /= rule.sum();
    const int chosen = static_cast<int>(rng.UniformInt(n));
    const double p = 0.2 + 0.8 * rng.Uniform();
    const double reward = rng.Normal();
    EvaluationRecord record = MakeEvaluationRecord(mean, chosen, p, false, -1, true);
    if (i % 2 == 0) {
      AddModelTarget(mean, rule, chosen, &record);
      w.push_back(rule(chosen) / p);
      ips.push_back(w.back() * reward);
      dr.push_back(rule.dot(mean) + w.back() * (reward - mean(chosen)));
    }
    evaluator.Add(record, reward);
  }
  const std::optional<PolicyValue> own = evaluator.OwnValue();
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->decisions, 200);
  EXPECT_EQ(evaluator.Values()[0].decisions, 400);
  double mean_ips = 0.0, mean_dr = 0.0, sw = 0.0, sw2 = 0.0;
  for (size_t i = 0; i < ips.size(); ++i) {
    mean_ips += ips[i] / ips.size();
    mean_dr += dr[i] / dr.size();
    sw += w[i];
    sw2 += w[i] * w[i];
  }
  EXPECT_NEAR(own->ips.estimate, mean_ips, 1e-12);
  EXPECT_NEAR(own->dr.estimate, mean_dr, 1e-12);
  EXPECT_NEAR(own->effective_sample_size, sw * sw / sw2, 1e-9);

  storage::Encoder saved;
  evaluator.Save(&saved);
  const std::string state = saved.Release();
  storage::Decoder load(state);
  PolicyEvaluator restored;
  ASSERT_TRUE(restored.Load(&load));
  EXPECT_TRUE(load.done());
  EXPECT_TRUE(restored == evaluator);
  EXPECT_EQ(restored.OwnValue()->dr.upper, own->dr.upper);

  // State version 10 coded four sums (with their bounds): it loads, with no own value.
  storage::Encoder old;
  old.PutVarint64(3);                   // explored
  old.PutVarint64(kEvaluatedPolicies);  // targets
  for (int p = 0; p < kEvaluatedPolicies; ++p) {
    old.PutVarint64(20);
    for (double x : {10.0, 5.0, 10.0, 5.0, 20.0, 20.0, 10.0, 5.0, 1.0, 0.5, 0.5}) old.PutDouble(x);
  }
  const std::string old_bytes = old.Release();
  storage::Decoder old_in(old_bytes);
  ASSERT_TRUE(restored.Load(&old_in));
  EXPECT_TRUE(old_in.done());
  EXPECT_FALSE(restored.OwnValue().has_value());
  EXPECT_EQ(restored.Values()[2].decisions, 20);
}

}  // namespace
}  // namespace graphbandit
