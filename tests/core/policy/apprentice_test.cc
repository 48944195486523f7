// Apprentice mode's parts: the normal quantile against known values, the baseline slate's
// probabilities against how often each candidate is served, the lift against its terms written
// out, the checkpoint rule's false-switch rate at a lift exactly at the margin (against the
// naive rule that looks after every reward), and the coding.
#include "core/policy/apprentice.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/base/random.h"

namespace graphbandit {
namespace {

TEST(ApprenticeTest, NormalQuantileMatchesKnownValues) {
  EXPECT_NEAR(NormalUpperQuantile(0.025), 1.959963984540054, 1e-12);
  EXPECT_NEAR(NormalUpperQuantile(0.05), 1.6448536269514722, 1e-12);
  EXPECT_NEAR(NormalUpperQuantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(NormalUpperQuantile(0.975), -1.959963984540054, 1e-12);
  // Python 3's statistics.NormalDist().inv_cdf(1 - 0.05 / 1024).
  EXPECT_NEAR(NormalUpperQuantile(0.05 / 1024), 3.896342532608548, 1e-9);
}

// With probability epsilon the slate is uniform, else it is the baseline then the others in
// request order; the probability given with each arm is how often that arm is served.
TEST(ApprenticeTest, BaselineSlateProbabilitiesAreFrequencies) {
  const double epsilon = 0.25;
  Eigen::VectorXd mean(4);
  mean << 0.3, 0.1, 0.9, 0.4;
  Rng coin(7);
  std::vector<int> served(4, 0);
  int explored = 0;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) {
    ScoredSlate scored;
    scored.mean = mean;
    explored += ServeBaseline(epsilon, /*baseline=*/2, /*slate_size=*/1, coin, &scored) ? 1 : 0;
    ASSERT_EQ(scored.slate.size(), 1u);
    const RankedChoice& choice = scored.slate[0];
    ++served[choice.candidate];
    EXPECT_EQ(choice.score, mean(choice.candidate));
    EXPECT_NEAR(*choice.probability, choice.candidate == 2 ? 0.75 + 0.25 / 4 : 0.25 / 4, 1e-15);
  }
  EXPECT_NEAR(static_cast<double>(explored) / draws, epsilon, 0.01);
  for (int c = 0; c < 4; ++c) {
    const double p = c == 2 ? 0.75 + 0.25 / 4 : 0.25 / 4;
    EXPECT_NEAR(static_cast<double>(served[c]) / draws, p, 4 * std::sqrt(p * (1 - p) / draws)) << c;
  }
  // A slate of two: the baseline (candidate 1) first, then candidate 0.
  ScoredSlate scored;
  scored.mean = mean;
  Rng never(1);
  EXPECT_FALSE(ServeBaseline(0.0, 1, 2, never, &scored));
  ASSERT_EQ(scored.slate.size(), 2u);
  EXPECT_EQ(scored.slate[0].candidate, 1);
  EXPECT_EQ(scored.slate[1].candidate, 0);
  EXPECT_EQ(*scored.slate[1].probability, 1.0);
}

EvaluationRecord Record(double propensity, double predicted, double baseline_p,
                        double baseline_direct, double model_p, double model_direct) {
  EvaluationRecord record;
  record.candidates = 3;
  record.propensity = propensity;
  record.predicted = predicted;
  record.targets.resize(EvaluationRecord::kModelTarget + 1);
  record.targets[EvaluationRecord::kBaselineTarget] = {baseline_p, baseline_direct};
  record.targets[EvaluationRecord::kModelTarget] = {model_p, model_direct};
  return record;
}

Apprenticeship Started(const ApprenticeRule& rule) {
  Apprenticeship apprenticeship;
  EXPECT_FALSE(apprenticeship.apprentice());
  EXPECT_TRUE(apprenticeship.Set(true, ServingSwitch::kStart, rule));
  return apprenticeship;
}

TEST(ApprenticeTest, LiftIsThePairedDoublyRobustDifference) {
  ApprenticeRule rule;
  rule.min_decisions = 1000;  // no checkpoint here
  Apprenticeship apprenticeship = Started(rule);
  // Decision 1: the logged arm is the baseline's (p = 0.8), the model would have chosen
  // another, predicted 0.7. Decision 2: the logged arm is the model's (p = 0.1).
  const EvaluationRecord one = Record(0.8, 0.2, 1.0, 0.2, 0.0, 0.7);
  const EvaluationRecord two = Record(0.1, 0.6, 0.0, 0.25, 1.0, 0.6);
  EXPECT_FALSE(apprenticeship.Add(one, 0.3));
  EXPECT_FALSE(apprenticeship.Add(two, 0.9));
  const double d1 = 0.7 - (0.2 + 1.0 / 0.8 * (0.3 - 0.2));
  const double d2 = (0.6 + 1.0 / 0.1 * (0.9 - 0.6)) - 0.25;
  const double mean = (d1 + d2) / 2;
  const double sd = std::sqrt(((d1 - mean) * (d1 - mean) + (d2 - mean) * (d2 - mean)) / 1.0);
  const LiftEstimate lift = apprenticeship.Lift();
  EXPECT_EQ(lift.decisions, 2);
  ASSERT_TRUE(lift.valid);
  EXPECT_NEAR(lift.lift.estimate, mean, 1e-12);
  EXPECT_NEAR(lift.lift.lower, mean - 1.959963984540054 * sd / std::sqrt(2.0), 1e-12);
  EXPECT_NEAR(lift.lift.upper, mean + 1.959963984540054 * sd / std::sqrt(2.0), 1e-12);
  EXPECT_EQ(lift.next_check, 1000);
  // A record without the model's target (a model serving itself logged it) adds nothing.
  EvaluationRecord plain = one;
  plain.targets.pop_back();
  EXPECT_FALSE(apprenticeship.Add(plain, 0.3));
  EXPECT_EQ(apprenticeship.Lift().decisions, 2);
}

// A record whose lift term is exactly `term` (model.direct - baseline.direct: its reward, 0,
// is predicted exactly), logged where the model's policy would have chosen the logged arm with
// probability `model_p`.
EvaluationRecord Term(double term, double model_p = 1.0) {
  return Record(0.5, 0.0, 0.0, 0.0, model_p, term);
}

// Draws `n` lift terms around `lift` and returns when the rule switched (0: never).
int64_t SwitchesAt(Rng& rng, double lift, int64_t n, const ApprenticeRule& rule) {
  Apprenticeship apprenticeship = Started(rule);
  for (int64_t i = 1; i <= n; ++i) {
    if (apprenticeship.Add(Term(lift + rng.Normal()), 0.0)) return i;
  }
  return 0;
}

// At a true lift equal to the margin the checkpoint rule switches in at most about 5% of runs,
// over any number of looks; switching the first time the plain 95% lower bound clears the
// margin after any reward does so far more often.
TEST(ApprenticeTest, CheckpointsKeepTheFalseSwitchRateAtFivePercent) {
  ApprenticeRule rule;
  rule.margin = 0.1;
  rule.min_decisions = 50;
  Rng rng(11);
  const int runs = 1000;
  int switched = 0, naive = 0;
  for (int run = 0; run < runs; ++run) {
    const int64_t at = SwitchesAt(rng, rule.margin, 50 << 6, rule);
    if (at != 0) {
      ++switched;
      // Only at checkpoints.
      EXPECT_EQ(at % 50, 0);
      EXPECT_EQ((at / 50) & (at / 50 - 1), 0) << at;
    }
    // The naive rule on the same kind of draws.
    double sum = 0, sum2 = 0;
    for (int i = 1; i <= (50 << 6); ++i) {
      const double term = rule.margin + rng.Normal();
      sum += term;
      sum2 += term * term;
      if (i < 2) continue;
      const double mean = sum / i, var = (sum2 - i * mean * mean) / (i - 1);
      if (mean - 1.959963984540054 * std::sqrt(var / i) > rule.margin) {
        ++naive;
        break;
      }
    }
  }
  // Binomial(1000, 0.05) has standard deviation ~6.9: 5% + 3 sd.
  EXPECT_LE(switched, 70) << switched;  // 41 with these seeds
  EXPECT_GE(naive, 200) << naive;       // 420 with these seeds
  // And a real lift is found at the first checkpoint it shows at.
  EXPECT_EQ(SwitchesAt(rng, rule.margin + 1.0, 50 << 6, rule), 50);
}

// Until the model's own choices have been logged often enough (an effective sample size of
// 10 for its target), a checkpoint waits: a lift that rests on predictions alone is not
// trusted.
TEST(ApprenticeTest, ACheckpointWaitsForTheModelsOwnChoicesToBeLogged) {
  ApprenticeRule rule;
  rule.min_decisions = 20;
  Apprenticeship apprenticeship = Started(rule);
  // 40 decisions whose logged arm the model would never have chosen: a large, sure lift, on
  // predictions only.
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(apprenticeship.Add(Term(1.0, 0.0), 0.0)) << i;
  EXPECT_TRUE(apprenticeship.apprentice());
  EXPECT_EQ(apprenticeship.Lift().next_check, 20);  // not spent
  // Then ten where it would have: the tenth brings the effective sample size to 10.
  for (int i = 0; i < 9; ++i) EXPECT_FALSE(apprenticeship.Add(Term(1.0), 0.0)) << i;
  EXPECT_TRUE(apprenticeship.Add(Term(1.0), 0.0));
  EXPECT_EQ(apprenticeship.last_switch()->decisions, 50);
}

TEST(ApprenticeTest, SwitchStopsTheLiftAndAdminSwitchesBackWithAFreshCount) {
  ApprenticeRule rule;
  rule.min_decisions = 10;
  Apprenticeship apprenticeship = Started(rule);
  EXPECT_EQ(apprenticeship.last_switch()->reason, ServingSwitch::kStart);
  Rng rng(3);
  int64_t at = 0;
  for (int i = 1; i <= 100 && at == 0; ++i) {
    if (apprenticeship.Add(Term(1.0 + 0.1 * rng.Normal()), 0.0)) at = i;
  }
  EXPECT_EQ(at, 10);
  EXPECT_FALSE(apprenticeship.apprentice());
  ASSERT_TRUE(apprenticeship.last_switch().has_value());
  EXPECT_EQ(apprenticeship.last_switch()->reason, ServingSwitch::kLift);
  EXPECT_EQ(apprenticeship.last_switch()->decisions, 10);
  EXPECT_GT(apprenticeship.last_switch()->lower, 0.5);
  // Serving: terms are no longer added, and a start switch after any other is void.
  EXPECT_FALSE(apprenticeship.Add(Term(1.0), 0.0));
  EXPECT_EQ(apprenticeship.Lift().decisions, 10);
  EXPECT_FALSE(apprenticeship.Set(true, ServingSwitch::kStart, rule));
  EXPECT_FALSE(apprenticeship.apprentice());
  EXPECT_FALSE(apprenticeship.Set(false, ServingSwitch::kAdmin, rule));
  // An admin switch back starts a new count, by the rule it brings.
  ApprenticeRule stricter = rule;
  stricter.min_decisions = 30;
  stricter.margin = 0.5;
  EXPECT_TRUE(apprenticeship.Set(true, ServingSwitch::kAdmin, stricter));
  EXPECT_TRUE(apprenticeship.apprentice());
  EXPECT_EQ(apprenticeship.last_switch()->reason, ServingSwitch::kAdmin);
  EXPECT_TRUE(apprenticeship.last_switch()->apprentice);
  EXPECT_EQ(apprenticeship.Lift().decisions, 0);
  EXPECT_EQ(apprenticeship.Lift().next_check, 30);
  EXPECT_EQ(apprenticeship.rule().margin, 0.5);
}

TEST(ApprenticeTest, CodingRoundTripsAndRefusesDamage) {
  ApprenticeRule rule;
  rule.min_decisions = 4;
  rule.margin = 0.25;
  for (bool started : {false, true}) {
    Apprenticeship apprenticeship;
    if (started) apprenticeship = Started(rule);
    Rng rng(5);
    for (int i = 0; i < 9; ++i) apprenticeship.Add(Term(rng.Normal()), 0.0);
    storage::Encoder out;
    apprenticeship.Save(&out);
    const std::string bytes = out.Release();
    storage::Decoder in(bytes);
    Apprenticeship back;
    ASSERT_TRUE(back.Load(&in));
    EXPECT_TRUE(in.done());
    EXPECT_TRUE(back == apprenticeship);
    EXPECT_EQ(back.last_switch().has_value(), started);
    EXPECT_EQ(back.rule().margin, apprenticeship.rule().margin);
    // Every truncation is refused.
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      storage::Decoder short_in(absl::string_view(bytes).substr(0, cut));
      Apprenticeship damaged;
      EXPECT_FALSE(damaged.Load(&short_in)) << cut;
    }
  }
}

}  // namespace
}  // namespace graphbandit
