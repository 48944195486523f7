// Evaluation exploration and the off-policy estimators: the mixture's probabilities against
// how often each candidate is actually chosen, the running sums against the estimators computed
// from scratch, unbiasedness on a problem whose truth is known, and the codings.
#include "core/policy/evaluation.h"

#include <gtest/gtest.h>

#include <cmath>

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
  for (int t = 0; t < 3; ++t) {
    std::vector<double> ips, dr, w;
    for (size_t i = 0; i < records.size(); ++i) {
      const auto& target = records[i].targets[t];
      const double weight = target.probability / records[i].propensity;
      w.push_back(weight);
      ips.push_back(weight * rewards[i]);
      dr.push_back(target.direct + weight * (rewards[i] - records[i].predicted));
    }
    auto check = [&](const std::vector<double>& x, const ValueInterval& got) {
      double mean = 0.0, var = 0.0;
      for (double v : x) mean += v / n;
      for (double v : x) var += (v - mean) * (v - mean) / (n - 1);
      const double half = 1.959963984540054 * std::sqrt(var / n);
      EXPECT_NEAR(got.estimate, mean, 1e-12);
      EXPECT_NEAR(got.lower, mean - half, 1e-12);
      EXPECT_NEAR(got.upper, mean + half, 1e-12);
    };
    const PolicyValue& v = values[t + 1];
    EXPECT_EQ(v.decisions, 500);
    EXPECT_TRUE(v.valid);
    check(ips, v.ips);
    check(dr, v.dr);
    double sw = 0.0, swr = 0.0, sw2 = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      sw += w[i];
      swr += w[i] * rewards[i];
      sw2 += w[i] * w[i];
    }
    const double snips = swr / sw;
    double spread = 0.0;
    for (size_t i = 0; i < w.size(); ++i) {
      spread += w[i] * w[i] * (rewards[i] - snips) * (rewards[i] - snips);
    }
    EXPECT_NEAR(v.snips.estimate, snips, 1e-12);
    EXPECT_NEAR(v.snips.upper - v.snips.estimate, 1.959963984540054 * std::sqrt(spread) / sw,
                1e-12);
    EXPECT_NEAR(v.effective_sample_size, sw * sw / sw2, 1e-9);
  }
  // Deployed: weight 1, all three are the mean reward.
  double mean_reward = 0.0;
  for (double r : rewards) mean_reward += r / n;
  EXPECT_NEAR(values[0].ips.estimate, mean_reward, 1e-12);
  EXPECT_NEAR(values[0].snips.estimate, mean_reward, 1e-12);
  EXPECT_NEAR(values[0].dr.estimate, mean_reward, 1e-12);
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

}  // namespace
}  // namespace graphbandit
