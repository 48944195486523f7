#include "core/policy/evaluation.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "core/policy/selection.h"

namespace graphbandit {

absl::string_view EvaluatedPolicyName(EvaluatedPolicy policy) {
  switch (policy) {
    case EvaluatedPolicy::kDeployed:
      return "deployed";
    case EvaluatedPolicy::kUniform:
      return "uniform";
    case EvaluatedPolicy::kGreedy:
      return "greedy";
    case EvaluatedPolicy::kBaseline:
      return "baseline";
  }
  return "unknown";
}

bool EvaluationRecord::operator==(const EvaluationRecord& o) const {
  if (candidates != o.candidates || propensity != o.propensity || predicted != o.predicted ||
      explored != o.explored || targets.size() != o.targets.size()) {
    return false;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    if (targets[i].probability != o.targets[i].probability ||
        targets[i].direct != o.targets[i].direct) {
      return false;
    }
  }
  return true;
}

namespace {

// P(candidate c is in the slate the rule alone would choose), for every rule DecideSlate runs.
class RuleInclusion {
 public:
  RuleInclusion(const DecisionRule& rule, const ScoredSlate& scored, int slate_size, Rng& rng)
      : rule_(rule), scored_(scored), k_(slate_size), rng_(rng) {
    spread_ = (rule.exploration * rule.width) * scored.stddev;
    random_ = rule.rule == SelectionRule::kThompson && (spread_.array() > 0.0).any();
  }

  double operator()(int c) {
    if (rule_.rule == SelectionRule::kSampledParameter) return scored_.propensities(c);
    const Eigen::VectorXd& mean = scored_.mean;
    if (!random_) {
      // SelectSlate's UCB: a deterministic top-k with a uniform tie-break.
      if (!top_k_.has_value()) top_k_.emplace(mean + spread_, k_);
      return (*top_k_)(c);
    }
    if (k_ == 1) return ProbabilityOfMaximum(c, mean, spread_);
    // A Thompson slate, estimated as SelectSlate estimates it for its own choices.
    if (!hits_.has_value()) hits_ = ThompsonSlateInclusion(mean, spread_, k_, rng_);
    return (*hits_)(c);
  }

  double Index(int c) const { return scored_.mean(c) + spread_(c); }

 private:
  const DecisionRule& rule_;
  const ScoredSlate& scored_;
  const int k_;
  Rng& rng_;
  Eigen::VectorXd spread_;
  bool random_ = false;
  std::optional<TopKInclusion> top_k_;
  std::optional<Eigen::VectorXd> hits_;
};

}  // namespace

bool MixUniformShare(double epsilon, const DecisionRule& rule, int slate_size, Rng& coin,
                     Rng& rule_rng, ScoredSlate* scored, Eigen::VectorXd* every) {
  const int n = static_cast<int>(scored->mean.size());
  const double share = epsilon * static_cast<double>(slate_size) / static_cast<double>(n);
  RuleInclusion inclusion(rule, *scored, slate_size, rule_rng);
  if (every != nullptr) {
    // Before the coin, so that the rule's stream is used the same way whatever it shows.
    every->resize(n);
    for (int c = 0; c < n; ++c) {
      (*every)(c) = std::min(1.0, (1.0 - std::max(epsilon, 0.0)) * inclusion(c) + share);
    }
  }
  if (!(epsilon > 0.0)) return false;
  const bool explore = coin.Uniform() < epsilon;
  if (explore) {
    // slate_size distinct candidates, uniformly, in random order (a partial Fisher-Yates).
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::vector<RankedChoice> slate(slate_size);
    for (int r = 0; r < slate_size; ++r) {
      const int pick = r + static_cast<int>(coin.UniformInt(static_cast<uint64_t>(n - r)));
      std::swap(order[r], order[pick]);
      slate[r].candidate = order[r];
      slate[r].score = inclusion.Index(order[r]);
      slate[r].probability = inclusion(order[r]);
    }
    scored->slate = std::move(slate);
  }
  for (RankedChoice& choice : scored->slate) {
    const double rule_probability =
        choice.probability.has_value() ? *choice.probability : inclusion(choice.candidate);
    choice.probability = std::min(1.0, (1.0 - epsilon) * rule_probability + share);
  }
  if (scored->propensities.size() > 0) {
    scored->propensities =
        ((1.0 - epsilon) * scored->propensities.array() + share).min(1.0).matrix();
  }
  return explore;
}

EvaluationRecord MakeEvaluationRecord(const Eigen::VectorXd& mean, int chosen, double propensity,
                                      bool explored, int baseline, bool off_policy) {
  EvaluationRecord record;
  const auto n = static_cast<int>(mean.size());
  record.candidates = n;
  record.propensity = propensity;
  record.predicted = mean(chosen);
  record.explored = explored;
  if (!off_policy) return record;
  record.targets.resize(kOffPolicyTargets);
  // Uniform.
  record.targets[0] = {1.0 / n, mean.mean()};
  // Greedy: the largest mean, exact ties sharing the choice.
  const double best = mean.maxCoeff();
  const auto ties = static_cast<double>((mean.array() == best).count());
  record.targets[1] = {mean(chosen) == best ? 1.0 / ties : 0.0, best};
  // Baseline.
  const int b = baseline >= 0 && baseline < n ? baseline : 0;
  record.targets[2] = {chosen == b ? 1.0 : 0.0, mean(b)};
  return record;
}

void AddModelTarget(const Eigen::VectorXd& mean, const Eigen::VectorXd& rule, int chosen,
                    EvaluationRecord* record) {
  record->targets.push_back({std::clamp(rule(chosen), 0.0, 1.0), rule.dot(mean)});
}

bool ServeBaseline(double epsilon, int baseline, int slate_size, Rng& coin, ScoredSlate* scored,
                   Eigen::VectorXd* every) {
  const int n = static_cast<int>(scored->mean.size());
  const int b = baseline >= 0 && baseline < n ? baseline : 0;
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::rotate(order.begin(), order.begin() + b, order.begin() + b + 1);  // b first, then the rest
  std::vector<bool> in_baseline(n, false);
  for (int r = 0; r < slate_size; ++r) in_baseline[order[r]] = true;
  const bool explore = epsilon > 0.0 && coin.Uniform() < epsilon;
  if (explore) {
    std::iota(order.begin(), order.end(), 0);
    for (int r = 0; r < slate_size; ++r) {
      const int pick = r + static_cast<int>(coin.UniformInt(static_cast<uint64_t>(n - r)));
      std::swap(order[r], order[pick]);
    }
  }
  const double share = epsilon * static_cast<double>(slate_size) / static_cast<double>(n);
  if (every != nullptr) {
    every->resize(n);
    for (int c = 0; c < n; ++c) {
      (*every)(c) = std::min(1.0, (1.0 - epsilon) * (in_baseline[c] ? 1.0 : 0.0) + share);
    }
  }
  std::vector<RankedChoice> slate(slate_size);
  for (int r = 0; r < slate_size; ++r) {
    const int c = order[r];
    slate[r].candidate = c;
    slate[r].score = scored->mean(c);
    slate[r].probability = std::min(1.0, (1.0 - epsilon) * (in_baseline[c] ? 1.0 : 0.0) + share);
  }
  scored->slate = std::move(slate);
  return explore;
}

void EstimatorSums::Add(double weight, double reward, double dr_term, double bound) {
  reward_min = n == 0 ? reward : std::min(reward_min, reward);
  reward_max = n == 0 ? reward : std::max(reward_max, reward);
  weight_bound = std::max(weight_bound, bound);
  ++n;
  const double wr = weight * reward;
  ips += wr;
  ips2 += wr * wr;
  dr += dr_term;
  dr2 += dr_term * dr_term;
  w += weight;
  w2 += weight * weight;
  w2r += weight * wr;
  w2r2 += wr * wr;
}

namespace {

constexpr double kZ95 = 1.959963984540054;  // the standard normal's 97.5% quantile

double Square(double x) { return x * x; }

// Mean and 95% interval of n terms from their sum and sum of squares.
ValueInterval MeanInterval(int64_t n, double sum, double sum2) {
  const double count = static_cast<double>(n);
  const double mean = sum / count;
  const double variance = std::max(0.0, (sum2 - count * mean * mean) / (count - 1.0));
  const double half = kZ95 * std::sqrt(variance / count);
  return {mean, mean - half, mean + half};
}

}  // namespace

PolicyValue EstimatorSums::Value(EvaluatedPolicy policy) const {
  PolicyValue value;
  value.policy = policy;
  value.decisions = n;
  value.effective_sample_size = w2 > 0.0 ? w * w / w2 : 0.0;
  value.valid = n >= 2 && w > 0.0 && value.effective_sample_size >= kMinEffectiveSampleSize;
  if (!value.valid) return value;
  value.dr = MeanInterval(n, dr, dr2);
  // IPS and SNIPS: each bound with one extra decision of weight up to `weight_bound` and the
  // most adverse reward seen (see the header). Its IPS term is the most adverse of w r over
  // those: at most every term for the lower bound, at least every term for the upper. A weight
  // bound of 0 (sums loaded from a version-8 snapshot, not yet added to) adds nothing.
  // Either bound is the plain one where that is the more cautious (one more term can narrow
  // an interval: it changes the divisor and the spread too).
  const double wb = weight_bound;
  const bool extra = wb > 0.0;
  const double low = extra ? std::min(0.0, wb * reward_min) : 0.0;
  const double high = extra ? std::max(0.0, wb * reward_max) : 0.0;
  const int64_t m = extra ? n + 1 : n;
  value.ips = MeanInterval(n, ips, ips2);
  value.ips.lower = std::min(value.ips.lower, MeanInterval(m, ips + low, ips2 + Square(low)).lower);
  value.ips.upper =
      std::max(value.ips.upper, MeanInterval(m, ips + high, ips2 + Square(high)).upper);
  // SNIPS = sum w r / sum w; by the delta method its variance is
  // sum w^2 (r - SNIPS)^2 / (sum w)^2.
  auto snips = [&](double extra_w, double extra_r) {
    const double sw = w + extra_w;
    const double v = (ips + extra_w * extra_r) / sw;
    const double spread =
        std::max(0.0, w2r2 - 2.0 * v * w2r + v * v * w2 + Square(extra_w * (extra_r - v)));
    return ValueInterval{v, v - kZ95 * std::sqrt(spread) / sw, v + kZ95 * std::sqrt(spread) / sw};
  };
  value.snips = snips(0.0, 0.0);
  value.snips.lower = std::min(value.snips.lower, snips(wb, reward_min).lower);
  value.snips.upper = std::max(value.snips.upper, snips(wb, reward_max).upper);
  return value;
}

namespace {

bool AllFinite(const EstimatorSums& s) {
  // The bounds' extra decision too: its term and the square of its term.
  const double extra = s.weight_bound * std::max(std::abs(s.reward_min), std::abs(s.reward_max));
  for (double x : {s.ips, s.ips2, s.dr, s.dr2, s.w, s.w2, s.w2r, s.w2r2, extra * extra}) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

}  // namespace

void PolicyEvaluator::Add(const EvaluationRecord& record, double reward) {
  std::array<EstimatorSums, kEvaluatorTargets> next = sums_;
  next[0].Add(1.0, reward, reward, 0.0);  // its estimate is the plain mean
  // The off-policy targets, then the own policy (kModelTarget) where the record has it.
  for (size_t t = 0; t < record.targets.size() && t + 1 < kEvaluatorTargets; ++t) {
    const EvaluationRecord::Target& target = record.targets[t];
    const double weight = target.probability / record.propensity;
    // The target's largest probability on this decision: 1 / K for uniform; at most 1 for the
    // others (greedy and baseline are deterministic, the own policy may be).
    const double largest = t + 1 == static_cast<size_t>(EvaluatedPolicy::kUniform)
                               ? 1.0 / static_cast<double>(record.candidates)
                               : 1.0;
    next[t + 1].Add(weight, reward, target.direct + weight * (reward - record.predicted),
                    largest / record.propensity);
  }
  for (const EstimatorSums& s : next) {
    if (!AllFinite(s)) return;
  }
  sums_ = next;
  if (record.explored) ++explored_;
}

void PolicyEvaluator::AddOnPolicy(double reward) {
  EstimatorSums next = sums_[0];
  next.Add(1.0, reward, reward, 0.0);
  if (AllFinite(next)) sums_[0] = next;
}

std::vector<PolicyValue> PolicyEvaluator::Values() const {
  std::vector<PolicyValue> out;
  for (int p = 0; p < kEvaluatedPolicies; ++p) {
    out.push_back(sums_[p].Value(static_cast<EvaluatedPolicy>(p)));
  }
  return out;
}

std::optional<PolicyValue> PolicyEvaluator::OwnValue() const {
  const EstimatorSums& own = sums_[kEvaluatedPolicies];
  if (own.n == 0) return std::nullopt;
  return own.Value(EvaluatedPolicy::kDeployed);
}

void PolicyEvaluator::Save(storage::Encoder* out) const {
  out->PutVarint64(static_cast<uint64_t>(explored_));
  out->PutVarint64(kEvaluatorTargets);
  for (const EstimatorSums& s : sums_) {
    out->PutVarint64(static_cast<uint64_t>(s.n));
    for (double x : {s.ips, s.ips2, s.dr, s.dr2, s.w, s.w2, s.w2r, s.w2r2, s.weight_bound,
                     s.reward_min, s.reward_max}) {
      out->PutDouble(x);
    }
  }
}

bool PolicyEvaluator::Load(storage::Decoder* in, bool with_bounds) {
  uint64_t explored = 0, count = 0;
  if (!in->GetVarint64(&explored) || explored > INT64_MAX || !in->GetVarint64(&count) ||
      (count != kEvaluatedPolicies && count != kEvaluatorTargets)) {
    return false;
  }
  sums_ = {};
  for (size_t p = 0; p < count; ++p) {
    EstimatorSums& s = sums_[p];
    uint64_t n = 0;
    if (!in->GetVarint64(&n) || n > INT64_MAX) return false;
    s.n = static_cast<int64_t>(n);
    for (double* x : {&s.ips, &s.ips2, &s.dr, &s.dr2, &s.w, &s.w2, &s.w2r, &s.w2r2}) {
      if (!in->GetDouble(x) || !std::isfinite(*x)) return false;
    }
    if (with_bounds) {
      for (double* x : {&s.weight_bound, &s.reward_min, &s.reward_max}) {
        if (!in->GetDouble(x) || !std::isfinite(*x)) return false;
      }
      if (s.weight_bound < 0.0 || s.reward_min > s.reward_max) return false;
    } else {
      // Unknown: no extra decision until the decisions that follow set them; the reward
      // range starts at the mean reward. (So after such a load the IPS and SNIPS bounds are
      // not what a replay of the whole log would give; the estimates are.)
      s.weight_bound = 0.0;
      s.reward_min = s.reward_max = s.w > 0.0 ? s.ips / s.w : 0.0;
    }
  }
  explored_ = static_cast<int64_t>(explored);
  return true;
}

bool PolicyEvaluator::operator==(const PolicyEvaluator& o) const {
  if (explored_ != o.explored_) return false;
  for (int p = 0; p < kEvaluatorTargets; ++p) {
    const EstimatorSums &a = sums_[p], &b = o.sums_[p];
    if (a.n != b.n || a.ips != b.ips || a.ips2 != b.ips2 || a.dr != b.dr || a.dr2 != b.dr2 ||
        a.w != b.w || a.w2 != b.w2 || a.w2r != b.w2r || a.w2r2 != b.w2r2 ||
        a.weight_bound != b.weight_bound || a.reward_min != b.reward_min ||
        a.reward_max != b.reward_max) {
      return false;
    }
  }
  return true;
}

void PutEvaluationRecord(storage::Encoder* out, const EvaluationRecord& record) {
  out->PutVarint64(static_cast<uint32_t>(record.candidates));
  out->PutDouble(record.propensity);
  out->PutDouble(record.predicted);
  out->PutU8(record.explored ? 1 : 0);
  out->PutVarint64(record.targets.size());
  for (const EvaluationRecord::Target& t : record.targets) {
    out->PutDouble(t.probability);
    out->PutDouble(t.direct);
  }
}

bool GetEvaluationRecord(storage::Decoder* in, EvaluationRecord* record) {
  uint64_t candidates = 0, targets = 0;
  uint8_t explored = 0;
  if (!in->GetVarint64(&candidates) || candidates < 1 || candidates > INT32_MAX ||
      !in->GetDouble(&record->propensity) || !(record->propensity > 0.0) ||
      !(record->propensity <= 1.0) || !in->GetDouble(&record->predicted) ||
      !std::isfinite(record->predicted) || !in->GetU8(&explored) || explored > 1 ||
      !in->GetVarint64(&targets) ||
      (targets != 0 && targets != kOffPolicyTargets && targets != kOffPolicyTargets + 1)) {
    return false;
  }
  record->candidates = static_cast<int32_t>(candidates);
  record->explored = explored == 1;
  record->targets.resize(targets);
  for (EvaluationRecord::Target& t : record->targets) {
    if (!in->GetDouble(&t.probability) || !(t.probability >= 0.0) || !(t.probability <= 1.0) ||
        !in->GetDouble(&t.direct) || !std::isfinite(t.direct)) {
      return false;
    }
  }
  return true;
}

}  // namespace graphbandit
