// A model's snapshots: when one is due (every Durability::snapshot_every_records applied
// records, on request, at shutdown), writing the file atomically into the state directory and
// keeping the two newest (with the log segments needed to replay from the older one), and the
// counters Stats reports.
//
// A snapshot is taken in three steps (Model): (1) under the ledger lock, note the last logged
// sequence number, capture the ledger (LedgerCapture: pointer copies) and start a new log
// segment; (2) on the writer, without that lock, apply what was logged up to that number and
// serialize the learned state; (3) serialize the captured ledger after it and write the file
// (SnapshotWriter::Write). Decisions wait only for step 1. The writer runs step 3 on a
// background thread (WriteInBackground) under Linux's SCHED_IDLE policy, so that on a saturated
// core the encoding, the checksum and the write take only cycles that decisions and learning
// leave; it does not start the next snapshot before that one is written, and answers the
// requests for it when it finds the write done.
//
// Threads: the applied-record count is the writer's (CountApplied, Due, Unsaved, Taken), as are
// WriteInBackground, TakeResult and TakeBuffer (Shutdown's, after the writer stopped); Write
// runs on the writer at open and at shutdown; Writing, WaitForBackground and stats() on any thread
// (mu_ is a leaf lock).
#ifndef GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_
#define GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>

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
  std::string payload;   // step 2: the learned state (step 3 writes the ledger after it)
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
  ~SnapshotWriter() {
    if (background_.joinable()) background_.join();
  }
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  bool persistent() const { return dir_ != nullptr; }

  // Writer: `n` more records applied since the last snapshot.
  void CountApplied(int64_t n) { applied_since_ += n; }
  // Writer: whether enough records were applied for a scheduled snapshot.
  bool Due() const { return every_records_ > 0 && applied_since_ >= every_records_; }
  // Whether anything was applied since the last snapshot (a final one is worth writing).
  bool Unsaved() const { return applied_since_ > 0; }
  // Writer, step 2: the records applied so far are in the snapshot being taken.
  void Taken() { applied_since_ = 0; }

  // Step 3: writes the snapshot file atomically, the captured ledger after the state, and
  // removes files no longer needed. If writing fails, the previous snapshot and every log
  // segment since it are still there. Returns the snapshot's sequence number.
  absl::StatusOr<uint64_t> Write(PreparedSnapshot prepared) ABSL_LOCKS_EXCLUDED(mu_);

  // Step 3 on a background thread (SCHED_IDLE, or nice 19 where that is refused). One at a
  // time: REQUIRES no background write, or its result taken (TakeResult). The thread takes no
  // lock (the write is counted in the stats when its result is taken), so that a thread the
  // scheduler keeps waiting while a core is busy holds nobody up.
  void WriteInBackground(PreparedSnapshot prepared) ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a background write is still running (any thread).
  bool Writing() const { return writing_.load(std::memory_order_acquire); }
  // Whether a background write was started and its result not yet taken (its owner only).
  bool Started() const { return background_.joinable(); }
  // The result of a finished background write, once, after joining its thread; nullopt while
  // it runs or when there is none. Its owner only.
  std::optional<absl::StatusOr<uint64_t>> TakeResult();
  // Waits until no background write is running or `deadline` passes; returns whether none is
  // (any thread; it polls: for tests and shutdowns, not for a hot path).
  bool WaitForBackground(absl::Time deadline = absl::InfiniteFuture()) const;
  // Tests only: the background thread runs `hook` before it writes (null removes it).
  void SetBeforeWriteHookForTesting(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(mu_);

  // The memory of the last written snapshot's state part, for the next snapshot to encode into
  // (LearnedState::Save); empty before the first and while one is being written. Its owner
  // only, like Write and TakeResult (the writer; at open and at shutdown, the thread that
  // opens or stops the model). Keeping it between snapshots holds the largest state encoded so
  // far resident (27-37 MB at a dictionary of 1,000: PERFORMANCE.md), which a snapshot needs
  // at its peak anyway; encoding into fresh memory instead costs a page fault per 4 KiB.
  std::string TakeBuffer() { return std::move(buffer_); }

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Write without the stats (the background thread's part), and the stats' part. WriteFile
  // leaves the state part's memory in `*keep`, whether or not the write succeeded (a model
  // in memory only has none).
  absl::StatusOr<uint64_t> WriteFile(PreparedSnapshot prepared, std::string* keep) const;
  void CountWritten(uint64_t seq) ABSL_LOCKS_EXCLUDED(mu_);

  const StateDirectory* const dir_;
  const int64_t every_records_;
  int64_t applied_since_ = 0;  // writer-owned: records applied since the last snapshot
  // The background write: its thread and result are the owner's (the writer's, then
  // Shutdown's), except that the thread sets `result_` before it clears `writing_`.
  std::thread background_;
  absl::StatusOr<uint64_t> result_;
  std::string written_buffer_;  // the background write's `keep`; moved to buffer_ by TakeResult
  std::string buffer_;          // its owner's (TakeBuffer)
  std::atomic<bool> writing_{false};

  mutable Mutex mu_;
  std::function<void()> before_write_hook_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_SNAPSHOTS_H_
