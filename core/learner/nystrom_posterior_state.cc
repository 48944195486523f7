// NystromPosterior: saving and restoring the learned state (snapshots).
#include <algorithm>
#include <string>

#include "core/learner/nystrom_posterior.h"
#include "core/storage/state_coding.h"

namespace graphbandit {

// Payload, version 4: rng, u8 force_accept, counts kors_accepted merged_duplicates
// skipped_dependent skipped_full evicted downdate_failures thinned refits growth_rebuilds
// dropped_pending (the last two since 4), history, columns basis_x, users basis_users, doubles
// basis_weights, cholesky chol_m, cholesky chol_zz, cholesky chol_kors, vector gamma, variance
// form (since 3), double admission guard (since 4), growth scan (since 4: count scanning and,
// when it is not 0, count next, count end, matrix rows, vector gamma), u8 single-precision
// scoring (2: never checked) and count folds since its check (since 5), counts refits_spread
// refits_abandoned and u8 pending refit, then if 1 its doubles ridge kors_mu prior_mean
// user_variance, vector rescale, columns, users, doubles weights, choleskys K_ZZ and KORS, matrix
// M, vector Gamma, counts next end step (since 6). Not stored: the weights
// M^-1 Gamma (recomputed lazily from chol_m and gamma, bit-identically), the duplicate index
// (rebuilt from the dictionary in order), the basis snapshot shared with frozen scorers.
namespace {
// 1: without the thinned and refits counts; 2: without the variance form (rebuilt on load);
// 3: without the growth scan (none under way) and the growth_rebuilds count; 4: without the
// single-precision check (checked again on load); 5: without the spread refit.
constexpr uint8_t kNystromStateVersion = 6;
}  // namespace

void NystromPosterior::SaveState(storage::Encoder* out) const {
  // Tens of megabytes at m = 1,000 (the history, three factors' triangles, the form and,
  // while a refit is pending, its factors and M), encoded straight into the snapshot's buffer.
  PutStateFrameOf(out, LearnerStateTag::kNystrom, kNystromStateVersion,
                  [this](storage::Encoder* into) { EncodeState(into); });
}

void NystromPosterior::EncodeState(storage::Encoder* into) const {
  storage::Encoder& s = *into;
  PutRngState(&s, rng_.state());
  s.PutU8(force_accept_ ? 1 : 0);
  for (int64_t count :
       {stats_.kors_accepted, stats_.merged_duplicates, stats_.skipped_dependent,
        stats_.skipped_full, stats_.evicted, stats_.downdate_failures, stats_.thinned,
        stats_.refits, stats_.growth_rebuilds, stats_.dropped_pending}) {
    PutCount(&s, count);
  }
  PutHistory(&s, history_);
  PutColumns(&s, basis_x_);
  PutUsers(&s, basis_users_);
  PutDoubleVector(&s, basis_weights_);
  PutCholesky(&s, chol_m_);
  PutCholesky(&s, chol_zz_);
  PutCholesky(&s, chol_kors_);
  PutVector(&s, gamma_);
  form_.Save(&s);
  s.PutDouble(admit_guard_);
  PutCount(&s, scan_.count);
  if (scan_.count > 0) {
    PutCount(&s, scan_.next);
    PutCount(&s, scan_.end);
    PutMatrix(&s, scan_.rows);
    PutVector(&s, scan_.gamma);
  }
  // Since 5: whether the form scores in single precision (0 double, 1 single, 2 never checked
  // because this learner's option is off) and the folds since its last check, so that a restored
  // learner scores and checks exactly as this one.
  s.PutU8(!options_.single_precision ? 2 : form_.single() ? 1 : 0);
  PutCount(&s, static_cast<int64_t>(form_.base_version() - checked_base_));
  // Since 6: the spread refits' counts and the pending refit, if any (its kernel is the
  // owner's to restore: ResumeRefit).
  PutCount(&s, stats_.refits_spread);
  PutCount(&s, stats_.refits_abandoned);
  s.PutU8(refit_ != nullptr ? 1 : 0);
  if (refit_ != nullptr) {
    const PendingRefit& r = *refit_;
    s.PutDouble(r.ridge);
    s.PutDouble(r.kors_mu);
    s.PutDouble(r.prior_mean);
    s.PutDouble(r.user_variance);
    PutVector(&s, r.rescale);
    PutColumns(&s, r.x);
    PutUsers(&s, r.users);
    PutDoubleVector(&s, r.weights);
    PutCholesky(&s, r.chol_zz);
    PutCholesky(&s, r.chol_kors);
    PutMatrix(&s, r.m);
    PutVector(&s, r.gamma);
    PutCount(&s, r.next);
    PutCount(&s, r.end);
    PutCount(&s, r.step);
  }
}

absl::Status NystromPosterior::LoadState(storage::Decoder* in) {
  std::string payload;
  uint8_t version = 0;
  if (absl::Status status = GetStateFrame(in, LearnerStateTag::kNystrom, kNystromStateVersion,
                                          &payload, /*oldest=*/1, &version);
      !status.ok()) {
    return status;
  }
  storage::Decoder d(payload);
  const auto malformed = [](absl::string_view what) { return MalformedState("Nystrom", what); };

  // Decoded into locals and committed at the end: on failure the learner is unchanged.
  Rng::State rng_state;
  if (!GetRngState(&d, &rng_state)) return malformed("random state");
  uint8_t force_accept = 0;
  if (!d.GetU8(&force_accept) || force_accept > 1) return malformed("force_accept");
  NystromStats stats;
  for (int64_t* count : {&stats.kors_accepted, &stats.merged_duplicates, &stats.skipped_dependent,
                         &stats.skipped_full, &stats.evicted, &stats.downdate_failures}) {
    if (!GetCount(&d, count)) return malformed("statistics");
  }
  if (version >= 2) {
    for (int64_t* count : {&stats.thinned, &stats.refits}) {
      if (!GetCount(&d, count)) return malformed("statistics");
    }
  }
  if (version >= 4) {
    for (int64_t* count : {&stats.growth_rebuilds, &stats.dropped_pending}) {
      if (!GetCount(&d, count)) return malformed("statistics");
    }
  }
  HistoryBuffer history(dim_, options_.max_history);
  if (!GetHistory(&d, &history)) return malformed("history");
  GrowableColumns basis_x(dim_);
  if (!GetColumns(&d, &basis_x)) return malformed("dictionary points");
  const int64_t m = basis_x.cols();
  // Every dictionary point was an observation, and the dictionary never exceeds its cap.
  const int64_t max_m =
      std::min<int64_t>(std::max(options_.max_dictionary_size, 0), history.total());
  if (m > max_m) return malformed("dictionary larger than its cap or the observations");
  std::vector<int32_t> basis_users;
  if (!GetUsers(&d, m, &basis_users) || static_cast<int64_t>(basis_users.size()) != m) {
    return malformed("dictionary users");
  }
  std::vector<double> basis_weights;
  if (!GetDoubleVector(&d, m, &basis_weights) || static_cast<int64_t>(basis_weights.size()) != m) {
    return malformed("dictionary weights");
  }
  // A factor's storage never exceeds max(8, twice the largest size it ever had).
  const int64_t max_capacity = std::max<int64_t>(8, 2 * max_m);
  CholeskyFactor chol_m, chol_zz, chol_kors;
  // M covers the dictionary but for the points still pending: at most a growth batch, or
  // (version 4) a batch being scanned and fewer than a batch waiting behind it.
  if (!GetCholesky(&d, max_capacity, &chol_m) || chol_m.size() > m ||
      m - chol_m.size() > (version >= 4 ? 2 * kMaxGrowthBatch - 1 : kMaxGrowthBatch)) {
    return malformed("factor of M");
  }
  if (!GetCholesky(&d, max_capacity, &chol_zz) || chol_zz.size() != m) {
    return malformed("factor of K_ZZ");
  }
  if (!GetCholesky(&d, max_capacity, &chol_kors) || chol_kors.size() != m) {
    return malformed("KORS factor");
  }
  Eigen::VectorXd gamma;
  if (!GetVector(&d, &gamma) || gamma.size() != chol_m.size()) return malformed("Gamma");
  VarianceForm form;
  if (version >= 3 && !form.Load(&d, chol_m.size())) return malformed("variance form");
  GrowthScan scan;
  double admit_guard = 0.0;
  if (version >= 4 &&
      (!d.GetDouble(&admit_guard) || !(admit_guard >= 0.0 && admit_guard <= kMaxReadmitGuard))) {
    return malformed("admission guard");
  }
  if (version >= 4) {
    int64_t count = 0;
    if (!GetCount(&d, &count) || count > m - chol_m.size() || count > kMaxGrowthBatch) {
      return malformed("growth scan");
    }
    scan.count = static_cast<int>(count);
    // Points waiting behind the scan: fewer than a batch (the next batch starts the scan).
    if (m - chol_m.size() - scan.count >= kMaxGrowthBatch) return malformed("growth scan");
    if (scan.count > 0) {
      const int64_t width = chol_m.size() + scan.count;
      if (!GetCount(&d, &scan.next) || !GetCount(&d, &scan.end) || scan.next > scan.end ||
          scan.end > history.total() || !GetMatrix(&d, &scan.rows) ||
          scan.rows.rows() != scan.count || scan.rows.cols() != width ||
          !GetVector(&d, &scan.gamma) || scan.gamma.size() != scan.count) {
        return malformed("growth scan");
      }
    }
  }
  uint8_t single = 0;
  int64_t folds_unchecked = 0;
  if (version >= 5 && (!d.GetU8(&single) || single > 2 || !GetCount(&d, &folds_unchecked))) {
    return malformed("single-precision check");
  }
  std::unique_ptr<PendingRefit> refit;
  if (version >= 6) {
    uint8_t pending = 0;
    if (!GetCount(&d, &stats.refits_spread) || !GetCount(&d, &stats.refits_abandoned) ||
        !d.GetU8(&pending) || pending > 1) {
      return malformed("refit statistics");
    }
    if (pending == 1) {
      refit = std::make_unique<PendingRefit>();
      PendingRefit& r = *refit;
      r.x = GrowableColumns(dim_);
      if (!d.GetDouble(&r.ridge) || !d.GetDouble(&r.kors_mu) || !d.GetDouble(&r.prior_mean) ||
          !d.GetDouble(&r.user_variance) || !GetVector(&d, &r.rescale) ||
          (r.rescale.size() != 0 && r.rescale.size() != dim_) || !GetColumns(&d, &r.x) ||
          r.x.cols() > max_m) {
        return malformed("pending refit");
      }
      const int64_t mk = r.x.cols();
      if (!GetUsers(&d, mk, &r.users) || static_cast<int64_t>(r.users.size()) != mk ||
          !GetDoubleVector(&d, mk, &r.weights) || static_cast<int64_t>(r.weights.size()) != mk ||
          !GetCholesky(&d, max_capacity, &r.chol_zz) || r.chol_zz.size() != mk ||
          !GetCholesky(&d, max_capacity, &r.chol_kors) || r.chol_kors.size() != mk ||
          !GetMatrix(&d, &r.m) || r.m.rows() != mk || r.m.cols() != mk ||
          !GetVector(&d, &r.gamma) || r.gamma.size() != mk || !GetCount(&d, &r.next) ||
          !GetCount(&d, &r.end) || !GetCount(&d, &r.step) || r.next > r.end ||
          r.end > history.total() || r.step < kMinRefitScanStep ||
          r.step > std::max(kMinRefitScanStep, (history.total() + kRefitScanObservations - 1) /
                                                   kRefitScanObservations)) {
        return malformed("pending refit");
      }
    }
  }
  if (!d.done()) return malformed("trailing bytes");

  rng_.set_state(rng_state);
  force_accept_ = force_accept != 0;
  stats_ = stats;
  history_ = std::move(history);
  basis_x_ = std::move(basis_x);
  basis_users_ = std::move(basis_users);
  basis_weights_ = std::move(basis_weights);
  RebuildHashIndex();
  chol_m_ = std::move(chol_m);
  chol_zz_ = std::move(chol_zz);
  chol_kors_ = std::move(chol_kors);
  gamma_ = std::move(gamma);
  weights_.resize(0);
  weights_dirty_ = true;
  basis_snapshot_.reset();
  frozen_.reset();
  form_ = std::move(form);
  scan_ = std::move(scan);
  refit_ = std::move(refit);
  last_refit_applied_ = true;
  admit_guard_ = admit_guard;
  if (version < 3) RebuildForm();
  if (version >= 5) {
    form_.set_single(single == 1 && options_.single_precision);
    checked_rebuild_ = form_.rebuild_version();
    checked_base_ = form_.base_version() - static_cast<uint64_t>(folds_unchecked);
    // Saved with the option off and loaded with it on, or due for a check: checked now.
    if ((single == 2 && options_.single_precision) ||
        folds_unchecked >= static_cast<int64_t>(kSingleCheckEvery)) {
      checked_rebuild_ = ~uint64_t{0};
    }
  } else {
    checked_rebuild_ = ~uint64_t{0};
  }
  CheckSinglePrecision();
  return absl::OkStatus();
}

}  // namespace graphbandit
