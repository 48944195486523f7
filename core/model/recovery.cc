#include "core/model/recovery.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/model/ledger_records.h"
#include "core/storage/coding.h"
#include "core/storage/log_reader.h"
#include "core/storage/snapshot_file.h"

namespace graphbandit {
namespace {

// Restores a fresh state from a snapshot payload: the learned state, then the ledger.
absl::Status LoadSnapshotPayload(absl::string_view payload, const ModelOptions& options,
                                 RecoveredState* recovered) {
  storage::Decoder in(payload);
  if (absl::Status s = recovered->state->Load(&in); !s.ok()) return s;
  if (absl::Status s = DecodeLedger(&in, options, recovered->ledger.get()); !s.ok()) return s;
  if (!in.done()) return MalformedSnapshot("trailing bytes");
  return absl::OkStatus();
}

// Step 1: the newest snapshot that verifies and loads; older ones are the fallback. Damaged
// ones are set aside. Leaves `recovered` fresh if none loads.
absl::Status LoadNewestSnapshot(const ModelOptions& options, const StateDirectory& dir,
                                RecoveredState* recovered) {
  auto snapshots = dir.Snapshots();
  for (auto it = snapshots.rbegin(); it != snapshots.rend(); ++it) {
    auto contents = storage::ReadSnapshotFile(it->second);
    absl::Status status = contents.status();
    if (status.ok()) {
      auto candidate = NewModelState(options);
      if (!candidate.ok()) return candidate.status();
      status = LoadSnapshotPayload(contents->payload, options, &*candidate);
      if (!status.ok()) {
        // The file's checksum is good, so this is not damage on disk: a configuration that
        // contradicts the snapshot (another policy, kernel or aggregation) or a format this
        // build does not know. Refuse to start rather than set learned state aside.
        return absl::FailedPreconditionError(absl::StrFormat(
            "model \"%s\": snapshot %s (intact) cannot be restored: %s. Restore the "
            "configuration it was written with, or move the state directory away to start over",
            options.name, it->second, status.message()));
      }
      candidate->report = std::move(recovered->report);
      *recovered = *std::move(candidate);
      recovered->report.snapshot_seq = contents->seq;
      recovered->next_seq = contents->seq + 1;
      return absl::OkStatus();
    }
    recovered->report.damage.push_back(
        absl::StrFormat("%s: %s; %s", it->second, status.message(),
                        StateDirectory::SetAsideReport(it->second, "corrupt")));
  }
  return absl::OkStatus();
}

// Step 2, when no snapshot was loaded: starting from nothing is only right if the log still
// reaches back to the first record (or there is no state at all); otherwise the model would
// silently forget what it learned.
// `had_snapshots`: whether there were snapshots (damaged ones included) before step 1.
absl::Status RequireLogFromStart(const ModelOptions& options, const StateDirectory& dir,
                                 bool had_snapshots, const RecoveryReport& report) {
  auto segments = dir.Segments();
  const bool log_from_start = !segments.empty() && segments.front().first == 1;
  if (!log_from_start && (!segments.empty() || had_snapshots)) {
    return absl::DataLossError(absl::StrFormat(
        "model \"%s\": no snapshot in %s could be read (%s) and the log does not reach back "
        "to record 1; refusing to start with an empty model. Restore a snapshot from backup, "
        "or move the directory away to start over",
        options.name, dir.path(), absl::StrJoin(report.damage, "; ")));
  }
  return absl::OkStatus();
}

// The name of a record kind in reports and metrics.
std::string KindName(uint8_t type) {
  switch (static_cast<OpType>(type)) {
    case OpType::kFixDimensions:
      return "fix_dimensions";
    case OpType::kAddUsers:
      return "add_users";
    case OpType::kSetEdges:
      return "set_edges";
    case OpType::kRemoveEdges:
      return "remove_edges";
    case OpType::kObserve:
      return "observe";
    case OpType::kDecide:
      return "decision";
    case OpType::kReward:
      return "reward";
    case OpType::kClose:
      return "close";
    case OpType::kHyperparameters:
      return "hyperparameters";
    case OpType::kLearn:
      return "learn";
    case OpType::kFeatureScaling:
      return "feature_scaling";
    case OpType::kActivate:
      return "activate";
    case OpType::kServingMode:
      return "serving_mode";
  }
  return "unknown";
}

// Whether what `op` depends on survived: a reward or a close needs its decision open in the
// ledger, and a reward that carries its observation must match that decision (user, context,
// arm and features): an event id can be used again once its old decision has left the ledger's
// tombstones, and a lost decision record must not let a reward attach to the older decision of
// the same id. Live, the model logs rewards and closes only for open decisions, so in an
// undamaged log this always holds.
bool DependenciesHold(const ModelOp& op, DecisionLedger& ledger) {
  if (const auto* reward = std::get_if<RewardOp>(&op)) {
    const LedgerEntry* entry = ledger.Find(reward->event_id);
    if (entry == nullptr || reward->arm < 0 ||
        reward->arm >= static_cast<int>(entry->arms.size())) {
      return false;
    }
    for (const ObserveOp& learned : reward->learn) {
      const LedgerArm& arm = entry->arms[reward->arm];
      if (learned.user != entry->user_id || learned.context != entry->context ||
          learned.arm_id != arm.arm_id || learned.features != arm.features) {
        return false;
      }
    }
    return true;
  }
  if (const auto* close = std::get_if<CloseOp>(&op)) {
    const LedgerEntry* entry = ledger.Find(close->event_id);
    if (entry == nullptr) return false;
    for (const ObserveOp& learned : close->learn) {
      if (learned.user != entry->user_id || learned.context != entry->context) return false;
    }
    return true;
  }
  if (const auto* activate = std::get_if<ActivateOp>(&op)) {
    const LedgerEntry* entry = ledger.Find(activate->event_id);
    if (entry == nullptr || !entry->held()) return false;
    for (const ObserveOp& learned : activate->learn) {
      if (learned.user != entry->user_id || learned.context != entry->context) return false;
      // The held rewards are this decision's, of its own arms, and what the ledger holds for
      // them (the reward records before it set the arms' aggregates).
      const bool held_here =
          learned.event_id == activate->event_id &&
          std::any_of(entry->arms.begin(), entry->arms.end(), [&](const LedgerArm& arm) {
            return arm.arm_id == learned.arm_id && arm.features == learned.features &&
                   arm.reports > 0 && arm.aggregate == learned.reward;
          });
      if (!held_here) return false;
    }
    return true;
  }
  return true;
}

// The feature dimensions an operation was made with (context, arms), if it carries features.
std::optional<FixDimensionsOp> DimensionsOf(const ModelOp& op) {
  auto of = [](const std::vector<double>& context, const std::vector<double>& arm) {
    return FixDimensionsOp{static_cast<int32_t>(context.size()), static_cast<int32_t>(arm.size())};
  };
  if (const auto* decide = std::get_if<DecideOp>(&op)) {
    if (!decide->arms.empty()) return of(decide->context, decide->arms[0].features);
  } else if (const auto* observe = std::get_if<ObserveOp>(&op)) {
    return of(observe->context, observe->features);
  }
  for (const ObserveOp* learned : ObservationsOf(op))
    return of(learned->context, learned->features);
  return std::nullopt;
}

// Step 3: replays the log records after the snapshot, segment by segment, in sequence order.
absl::Status ReplayLog(const ModelOptions& options, const StateDirectory& dir,
                       RecoveredState* recovered) {
  RecoveryReport& report = recovered->report;
  uint64_t& next = recovered->next_seq;
  const uint64_t snapshot_seq = report.snapshot_seq;
  auto segments = dir.Segments();
  // Ranges of sequence numbers [first, last] that damage destroyed (no intact record holds
  // them), and the kinds of the damaged records whose headers still verified.
  std::vector<std::pair<uint64_t, uint64_t>> gaps;
  std::map<uint64_t, uint8_t> damaged_kinds;
  bool lost_any = false;            // records are missing before the one being applied
  bool previous_truncated = false;  // the segment before this one lost its tail to damage
  for (size_t i = 0; i < segments.size(); ++i) {
    // Not a structured binding: the replay lambda below captures these (C++17, clang).
    const uint64_t first = segments[i].first;
    const std::string& path = segments[i].second;
    const uint64_t following = i + 1 < segments.size() ? segments[i + 1].first : UINT64_MAX;
    if (following <= next) continue;  // entirely covered by the snapshot
    if (first > next) {
      if (previous_truncated) {
        // The damaged tail of the segment before held them (even if this one is empty).
        gaps.emplace_back(next, first - 1);
      } else {
        // Not damage: a file is missing (deleted, or not restored from a backup).
        report.records_lost["in_missing_segment"] += static_cast<int64_t>(first - next);
        report.damage.push_back(absl::StrFormat(
            "log records %d to %d are missing (no segment holds them); the records after them "
            "were applied where the decision they refer to survived",
            next, first - 1));
      }
      next = first;
      lost_any = true;
    }
    auto replayed = storage::RecoverLog(
        path, first, [&](uint64_t seq, uint8_t type, absl::string_view payload) {
          if (seq < next) {
            // Covered by the snapshot, or a repeat of a record already applied (only a damaged
            // or hand-edited log holds one): never applied twice, never out of order.
            if (seq > snapshot_seq) ++report.records_repeated;
            return absl::OkStatus();
          }
          if (seq > next) {
            gaps.emplace_back(next, seq - 1);
            lost_any = true;
          }
          next = seq + 1;
          absl::StatusOr<ModelOp> op = DecodeOp(type, payload);
          if (!op.ok()) {
            // The checksums verified, so this is a record this build cannot read, not damage.
            return absl::DataLossError(
                absl::StrFormat("record %d of %s: %s", seq, path, op.status().message()));
          }
          if (!DependenciesHold(*op, *recovered->ledger)) {
            ++report.records_dropped[KindName(type)];
            return absl::OkStatus();
          }
          EdgeEditResult ignored;
          if (lost_any && !recovered->state->dimensions().fixed) {
            // The record that fixed the feature dimensions (the first one) was lost: every
            // later decision and reward was checked against them, so they can be read off one.
            if (std::optional<FixDimensionsOp> fix = DimensionsOf(*op)) {
              if (absl::Status s = recovered->state->Apply(*fix, &ignored); !s.ok()) return s;
              report.damage.push_back(absl::StrFormat(
                  "the record fixing the feature dimensions was lost; record %d restores them "
                  "(context %d, arms %d)",
                  seq, fix->context_dim, fix->arm_dim));
            }
          }
          ApplyToLedger(*op, options, recovered->ledger.get());
          absl::Status applied = recovered->state->Apply(*op, &ignored);
          // An operation that failed when it arrived fails the same way now (and was reported
          // then): a refused graph edit, a reward that could not be learned. After damage, an
          // edit may also fail because the edit it built on was lost.
          if (!applied.ok()) {
            if (std::holds_alternative<FixDimensionsOp>(*op)) return applied;
            ++report.records_refused;
          }
          ++report.records_replayed;
          return absl::OkStatus();
        });
    if (!replayed.ok()) {
      return absl::Status(replayed.status().code(),
                          absl::StrFormat("model \"%s\": recovery failed: %s", options.name,
                                          replayed.status().message()));
    }
    for (const storage::LogDamage& damage : replayed->skipped) {
      report.damaged_bytes += static_cast<int64_t>(damage.length);
      report.damage.push_back(absl::StrFormat(
          "%s: %d damaged bytes at offset %d (%s%s) were passed over; reading resumed at the "
          "next intact record; %s",
          path, damage.length, damage.offset, damage.reason,
          damage.seq.has_value()
              ? absl::StrFormat(", record %d, a %s", *damage.seq, KindName(damage.type))
              : "",
          damage.saved_path.empty()
              ? "no copy kept (too many damaged regions)"
              : absl::StrCat("a copy of the bytes is in ", damage.saved_path)));
      if (damage.seq.has_value()) damaged_kinds.emplace(*damage.seq, damage.type);
    }
    for (const storage::LogDamage& damage : replayed->tail) {
      if (damage.seq.has_value()) damaged_kinds.emplace(*damage.seq, damage.type);
    }
    // A cut tail explains missing records after it only if this segment's records reached the
    // next one expected (a segment the snapshot covers is read when the file after it is gone).
    const uint64_t tail_start = replayed->records > 0 ? replayed->last_seq + 1 : first;
    previous_truncated = replayed->corruption.has_value() && tail_start >= next;
    if (replayed->corruption.has_value()) {
      report.truncated = true;
      report.damage.push_back(
          absl::StrFormat("%s: %s at offset %d; %d bytes after it were moved to %s", path,
                          replayed->corruption->reason, replayed->corruption->offset,
                          replayed->discarded_bytes, replayed->discarded_path));
    }
  }
  // What the gaps held: the kinds of the damaged records whose headers still verified, the
  // rest unknown. (A damaged tail of the last segment leaves no gap: what it held is unknown
  // and, being a torn write at a crash, was never acknowledged.)
  int64_t missing = 0, known = 0;
  for (const auto& [from, to] : gaps) {
    missing += static_cast<int64_t>(to - from + 1);
    for (auto it = damaged_kinds.lower_bound(from); it != damaged_kinds.end() && it->first <= to;
         ++it) {
      ++report.records_lost[KindName(it->second)];
      ++known;
    }
  }
  if (missing > known) report.records_lost["unknown"] += missing - known;
  if (missing > 0) {
    report.damage.push_back(absl::StrFormat(
        "%d log records after the snapshot were lost to damage (%d of them of known kind); "
        "the intact records after them were applied where the decision they refer to survived",
        missing, known));
  }
  if (report.records_repeated > 0) {
    report.damage.push_back(absl::StrFormat(
        "%d log records repeat sequence numbers already applied and were not applied again",
        report.records_repeated));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RecoveredState> NewModelState(const ModelOptions& options) {
  RecoveredState fresh;
  auto state = LearnedState::Create(options);
  if (!state.ok()) return state.status();
  fresh.state = *std::move(state);
  fresh.ledger =
      std::make_unique<DecisionLedger>(options.reward_window, options.max_decisions,
                                       options.effective_max_tombstones(), options.aggregation);
  return fresh;
}

absl::StatusOr<RecoveredState> RecoverModelState(const ModelOptions& options,
                                                 const StateDirectory& dir) {
  const absl::Time start = absl::Now();
  auto recovered = NewModelState(options);
  if (!recovered.ok()) return recovered.status();
  recovered->report.temporary_files_removed =
      static_cast<int64_t>(dir.RemoveTemporaryFiles().size());
  const bool had_snapshots = !dir.Snapshots().empty();
  if (absl::Status s = LoadNewestSnapshot(options, dir, &*recovered); !s.ok()) return s;
  if (recovered->report.snapshot_seq == 0) {
    if (absl::Status s = RequireLogFromStart(options, dir, had_snapshots, recovered->report);
        !s.ok())
      return s;
  }
  if (absl::Status s = ReplayLog(options, dir, &*recovered); !s.ok()) return s;
  recovered->report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return recovered;
}

}  // namespace graphbandit
