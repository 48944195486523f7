#include "core/policy/apprentice.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace graphbandit {

namespace {

constexpr double kZ95 = 1.959963984540054;  // the standard normal's 97.5% quantile
constexpr double kSwitchLevel = 0.05;       // summed over every checkpoint
constexpr int32_t kMaxCheckpoints = 60;

// min_decisions * 2^j, saturating.
int64_t Checkpoint(int64_t min_decisions, int32_t j) {
  const int64_t base = std::max<int64_t>(2, min_decisions);
  if (j >= 62 || base > (std::numeric_limits<int64_t>::max() >> j)) {
    return std::numeric_limits<int64_t>::max();
  }
  return base << j;
}

}  // namespace

bool SwitchRecord::operator==(const SwitchRecord& o) const {
  return reason == o.reason && apprentice == o.apprentice && decisions == o.decisions &&
         lift == o.lift && lower == o.lower;
}

double NormalUpperQuantile(double alpha) {
  // P(Z > z) = erfc(z / sqrt 2) / 2 decreases in z: bisection to double precision.
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (0.5 * std::erfc(mid / std::sqrt(2.0)) > alpha) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return 0.5 * (lo + hi);
}

bool Apprenticeship::Add(const EvaluationRecord& record, double reward) {
  if (!apprentice_ || record.targets.size() <= EvaluationRecord::kModelTarget ||
      !std::isfinite(reward)) {
    return false;
  }
  const auto residual = reward - record.predicted;
  const EvaluationRecord::Target& model = record.targets[EvaluationRecord::kModelTarget];
  const EvaluationRecord::Target& baseline = record.targets[EvaluationRecord::kBaselineTarget];
  const double weight = model.probability / record.propensity;
  const double term = (model.direct + weight * residual) -
                      (baseline.direct + baseline.probability / record.propensity * residual);
  if (!std::isfinite(term) || !std::isfinite(sum2_ + term * term) ||
      !std::isfinite(w2_ + weight * weight)) {
    return false;
  }
  ++n_;
  sum_ += term;
  sum2_ += term * term;
  w_ += weight;
  w2_ += weight * weight;
  if (checkpoints_ >= kMaxCheckpoints || n_ < Checkpoint(rule_.min_decisions, checkpoints_)) {
    return false;
  }
  // A checkpoint, once the model's own choices have been logged often enough to be judged.
  if (!(w2_ > 0.0) || w_ * w_ / w2_ < kMinEffectiveSampleSize) return false;
  const double level = kSwitchLevel / std::ldexp(1.0, checkpoints_ + 1);
  const double count = static_cast<double>(n_);
  const double mean = sum_ / count;
  const double variance = std::max(0.0, (sum2_ - count * mean * mean) / (count - 1.0));
  const double lower = mean - NormalUpperQuantile(level) * std::sqrt(variance / count);
  ++checkpoints_;
  if (!(lower > rule_.margin)) return false;
  apprentice_ = false;
  last_ = SwitchRecord{ServingSwitch::kLift, false, n_, mean, lower};
  return true;
}

bool Apprenticeship::Set(bool apprentice, ServingSwitch reason, const ApprenticeRule& rule) {
  if (reason == ServingSwitch::kStart && last_.has_value()) return false;
  if (apprentice == apprentice_) return false;
  const LiftEstimate lift = Lift();
  last_ = SwitchRecord{reason, apprentice, n_, lift.valid ? lift.lift.estimate : 0.0,
                       lift.valid ? lift.lift.lower : 0.0};
  apprentice_ = apprentice;
  if (apprentice) {
    // Proving itself again, from now on and by this rule: the policy in service since is not
    // the one the old sums measured.
    rule_ = rule;
    n_ = 0;
    sum_ = sum2_ = w_ = w2_ = 0.0;
    checkpoints_ = 0;
  }
  return true;
}

LiftEstimate Apprenticeship::Lift() const {
  LiftEstimate out;
  out.decisions = n_;
  out.next_check =
      checkpoints_ >= kMaxCheckpoints ? 0 : Checkpoint(rule_.min_decisions, checkpoints_);
  if (n_ < 2) return out;
  out.valid = true;
  const double count = static_cast<double>(n_);
  const double mean = sum_ / count;
  const double variance = std::max(0.0, (sum2_ - count * mean * mean) / (count - 1.0));
  const double half = kZ95 * std::sqrt(variance / count);
  out.lift = {mean, mean - half, mean + half};
  return out;
}

void Apprenticeship::Save(storage::Encoder* out) const {
  out->PutU8((apprentice_ ? 1 : 0) | (last_.has_value() ? 2 : 0));
  out->PutDouble(rule_.margin);
  out->PutVarint64(static_cast<uint64_t>(rule_.min_decisions));
  out->PutVarint64(static_cast<uint64_t>(n_));
  for (double x : {sum_, sum2_, w_, w2_}) out->PutDouble(x);
  out->PutVarint64(static_cast<uint32_t>(checkpoints_));
  if (last_.has_value()) {
    out->PutU8(static_cast<uint8_t>(last_->reason));
    out->PutU8(last_->apprentice ? 1 : 0);
    out->PutVarint64(static_cast<uint64_t>(last_->decisions));
    out->PutDouble(last_->lift);
    out->PutDouble(last_->lower);
  }
}

bool Apprenticeship::Load(storage::Decoder* in) {
  uint8_t flags = 0;
  uint64_t n = 0, checkpoints = 0, min_decisions = 0;
  if (!in->GetU8(&flags) || flags > 3 || !in->GetDouble(&rule_.margin) ||
      !std::isfinite(rule_.margin) || !in->GetVarint64(&min_decisions) || min_decisions < 2 ||
      min_decisions > INT64_MAX || !in->GetVarint64(&n) || n > INT64_MAX) {
    return false;
  }
  for (double* x : {&sum_, &sum2_, &w_, &w2_}) {
    if (!in->GetDouble(x) || !std::isfinite(*x)) return false;
  }
  if (sum2_ < 0.0 || w_ < 0.0 || w2_ < 0.0 || !in->GetVarint64(&checkpoints) ||
      checkpoints > kMaxCheckpoints) {
    return false;
  }
  apprentice_ = (flags & 1) != 0;
  rule_.min_decisions = static_cast<int64_t>(min_decisions);
  n_ = static_cast<int64_t>(n);
  checkpoints_ = static_cast<int32_t>(checkpoints);
  last_.reset();
  if ((flags & 2) != 0) {
    uint8_t reason = 0, to_apprentice = 0;
    uint64_t decisions = 0;
    SwitchRecord record;
    if (!in->GetU8(&reason) || reason > static_cast<uint8_t>(ServingSwitch::kStart) ||
        !in->GetU8(&to_apprentice) || to_apprentice > 1 || !in->GetVarint64(&decisions) ||
        decisions > INT64_MAX || !in->GetDouble(&record.lift) || !in->GetDouble(&record.lower)) {
      return false;
    }
    record.reason = static_cast<ServingSwitch>(reason);
    record.apprentice = to_apprentice == 1;
    record.decisions = static_cast<int64_t>(decisions);
    last_ = record;
  }
  return true;
}

bool Apprenticeship::operator==(const Apprenticeship& o) const {
  return apprentice_ == o.apprentice_ && rule_.margin == o.rule_.margin &&
         rule_.min_decisions == o.rule_.min_decisions && n_ == o.n_ && sum_ == o.sum_ &&
         sum2_ == o.sum2_ && w_ == o.w_ && w2_ == o.w2_ && checkpoints_ == o.checkpoints_ &&
         last_ == o.last_;
}

}  // namespace graphbandit
