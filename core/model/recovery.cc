#include "core/model/recovery.h"

#include <utility>

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

// Step 3: replays the log records after the snapshot, segment by segment, stopping at damage;
// segments after damage (or after a gap) are set aside.
absl::Status ReplayLog(const ModelOptions& options, const StateDirectory& dir,
                       RecoveredState* recovered) {
  RecoveryReport& report = recovered->report;
  uint64_t& next = recovered->next_seq;
  auto segments = dir.Segments();
  bool stop = false;
  for (size_t i = 0; i < segments.size(); ++i) {
    // Not a structured binding: the replay lambda below captures these (C++17, clang).
    const uint64_t first = segments[i].first;
    const std::string& path = segments[i].second;
    if (stop) {
      report.damage.push_back(absl::StrFormat("%s follows damaged or missing records; %s", path,
                                              StateDirectory::SetAsideReport(path, "orphaned")));
      continue;
    }
    const uint64_t following = i + 1 < segments.size() ? segments[i + 1].first : UINT64_MAX;
    if (following <= next) continue;  // entirely covered by the snapshot
    if (first > next) {
      report.damage.push_back(absl::StrFormat(
          "log records %d to %d are missing (no segment holds them)", next, first - 1));
      stop = true;
      --i;  // set this segment aside too
      continue;
    }
    uint64_t seq = first;
    auto replayed = storage::RecoverLog(path, [&](uint8_t type, absl::string_view payload) {
      const uint64_t this_seq = seq++;
      if (this_seq < next) return absl::OkStatus();
      absl::StatusOr<ModelOp> op = DecodeOp(type, payload);
      if (!op.ok()) {
        return absl::DataLossError(
            absl::StrFormat("record %d of %s: %s", this_seq, path, op.status().message()));
      }
      ApplyToLedger(*op, options, recovered->ledger.get());
      EdgeEditResult ignored;
      absl::Status applied = recovered->state->Apply(*op, &ignored);
      // An operation that failed when it arrived fails the same way now (and was reported
      // then): a refused graph edit, a reward that could not be learned.
      if (!applied.ok()) {
        if (std::holds_alternative<FixDimensionsOp>(*op)) return applied;
        ++report.records_refused;
      }
      ++report.records_replayed;
      next = this_seq + 1;
      return absl::OkStatus();
    });
    if (!replayed.ok()) {
      return absl::Status(replayed.status().code(),
                          absl::StrFormat("model \"%s\": recovery failed: %s", options.name,
                                          replayed.status().message()));
    }
    if (replayed->corruption.has_value()) {
      report.truncated = true;
      report.damage.push_back(
          absl::StrFormat("%s: %s at offset %d; %d bytes after it were moved to %s", path,
                          replayed->corruption->reason, replayed->corruption->offset,
                          replayed->discarded_bytes, replayed->discarded_path));
      stop = true;  // nothing after damage is applied
    }
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
