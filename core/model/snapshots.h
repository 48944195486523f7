// A model's snapshots: when one is due (every Durability::snapshot_every_records applied
// records, on request, at shutdown), writing the file atomically into the state directory and
// keeping the two newest (with the log segments needed to replay from the older one), and the
// counters Stats reports.
//
// A snapshot is taken by the writer in three steps (Model): (1) under the ledger lock, note the
// last logged sequence number, capture the ledger (LedgerCapture: pointer copies) and start a
// new log segment; (2) without it, apply what was logged up to that number and serialize the
// learned state and the captured ledger; (3) write the file (SnapshotWriter::Write). Decisions
// wait only for step 1.
//
// Threads: the applied-record count is the writer's (CountApplied, Due, Unsaved, Taken); Write
// runs on the writer (or at shutdown, after it stopped); stats() on any thread (stats_mu_ is a
// leaf lock).
#ifndef GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_
#define GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/state_directory.h"

namespace graphbandit {

// A snapshot between its steps.
struct PreparedSnapshot {
  uint64_t seq = 0;
  LedgerCapture ledger;  // step 1
  std::string payload;   // step 2: the learned state, then the ledger
};

class SnapshotWriter {
 public:
  struct Stats {
    int64_t written = 0;
    uint64_t last_seq = 0;
    absl::Time last_time = absl::InfinitePast();  // InfinitePast before the first
  };

  // `dir` null: the model is in memory only (snapshots are not written). `every_records` 0:
  // only at shutdown and on request.
  SnapshotWriter(const StateDirectory* dir, int64_t every_records)
      : dir_(dir), every_records_(every_records) {}

  bool persistent() const { return dir_ != nullptr; }

  // Writer: `n` more records applied since the last snapshot.
  void CountApplied(int64_t n) { applied_since_ += n; }
  // Writer: whether enough records were applied for a scheduled snapshot.
  bool Due() const { return every_records_ > 0 && applied_since_ >= every_records_; }
  // Whether anything was applied since the last snapshot (a final one is worth writing).
  bool Unsaved() const { return applied_since_ > 0; }
  // Writer, step 2: the records applied so far are in the snapshot being taken.
  void Taken() { applied_since_ = 0; }

  // Step 3: writes the snapshot file atomically and removes files no longer needed. If writing
  // fails, the previous snapshot and every log segment since it are still there. Returns the
  // snapshot's sequence number.
  absl::StatusOr<uint64_t> Write(const PreparedSnapshot& prepared) ABSL_LOCKS_EXCLUDED(stats_mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);

 private:
  const StateDirectory* const dir_;
  const int64_t every_records_;
  int64_t applied_since_ = 0;  // writer-owned: records applied since the last snapshot

  mutable Mutex stats_mu_;
  Stats stats_ ABSL_GUARDED_BY(stats_mu_);
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_
