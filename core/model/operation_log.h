// The model's operation log on disk: appending records to the current segment, starting new
// segments, making records durable per the sync policy (fdatasync per acknowledged record, or
// a group-commit syncer thread), and fail-stop: after a failed write or sync nothing more is
// appended or reported durable (a later record could follow a torn one, and a retried fsync
// can falsely succeed) until the model is reopened.
//
// Threads: Append, StartSegment and Close are called by the model with its queue lock held (the
// log order is the order in which sequence numbers are assigned); WaitDurable by request
// threads; the syncer is this class's own thread. Lock order: the model's queue lock, then
// writer_mu_, then sync_mu_. `last_logged` (the model's) takes the queue lock, so it is called
// with none of this class's locks held.
#ifndef GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_
#define GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/storage/log_writer.h"

namespace graphbandit {

// How acknowledged data reaches the disk (the same for every model of a server).
struct Durability {
  enum class Sync {
    kEveryRecord,  // a reward's record is fdatasynced before the reward is acknowledged
    kGroupCommit,  // records are fdatasynced every group_commit_interval; rewards wait for it
    kOs,           // no fdatasync: survives a process crash, not a power loss
  };
  // Every-record is the default: concurrent callers share each fdatasync, so under load it
  // batches by itself, and it never waits for a timer (graphbandit-bench --mode=durability).
  Sync sync = Sync::kEveryRecord;
  absl::Duration group_commit_interval = absl::Milliseconds(2);
  // A snapshot (and a new log segment) after this many log records; 0 = only at shutdown.
  int64_t snapshot_every_records = 100'000;
};

class OperationLog {
 public:
  // `last_logged` returns the sequence number of the last record appended so far.
  OperationLog(std::string model_name, Durability durability,
               std::function<uint64_t()> last_logged);
  ~OperationLog();  // stops the syncer; does not sync (Close does)
  OperationLog(const OperationLog&) = delete;
  OperationLog& operator=(const OperationLog&) = delete;

  // Records up to `seq` are durable already (at open, after recovery).
  void MarkSynced(uint64_t seq) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Group commit: starts the syncer thread (no-op under the other policies).
  void StartSyncer() ABSL_LOCKS_EXCLUDED(sync_mu_);
  void StopSyncer() ABSL_LOCKS_EXCLUDED(sync_mu_);

  // Opens the segment at `path` for the records after `last_logged`. The previous segment is
  // synced (fail-stop if that fails: its records may be lost) and closed; if the new one cannot
  // be opened, appends continue to the previous one and the error is returned.
  absl::Status StartSegment(const std::string& path, uint64_t last_logged)
      ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);
  // Appends one record. INVALID_ARGUMENT (nothing written) for a record over the format's size
  // limit; after a failed write, or once the log failed or was closed, UNAVAILABLE.
  absl::Status Append(uint8_t type, absl::string_view payload)
      ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);
  // Waits until record `seq` is durable per the sync policy (group commit: until `deadline`).
  absl::Status WaitDurable(uint64_t seq, absl::Time deadline) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Syncs and closes the segment; records up to `last_logged` are then durable. Later appends
  // fail. Waiters for a group commit get their answer.
  void Close(uint64_t last_logged) ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);

  int64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }

 private:
  // Records a failed write or sync: from then on nothing more is appended or acknowledged.
  void FailLocked(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void SyncerLoop() ABSL_LOCKS_EXCLUDED(sync_mu_);

  const std::string model_name_;
  const Durability durability_;
  const std::function<uint64_t()> last_logged_;

  // Lock order: writer_mu_, then sync_mu_.
  Mutex writer_mu_;
  std::unique_ptr<storage::LogWriter> writer_ ABSL_GUARDED_BY(writer_mu_);  // null once closed

  mutable Mutex sync_mu_;
  CondVar sync_cv_;
  int sync_fd_ ABSL_GUARDED_BY(sync_mu_) = -1;  // the current segment
  uint64_t synced_seq_ ABSL_GUARDED_BY(sync_mu_) = 0;
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);
  bool syncer_stop_ ABSL_GUARDED_BY(sync_mu_) = false;
  std::atomic<bool> failed_{false};  // set with sync_error_, read without the sync lock
  std::atomic<int64_t> syncs_{0};    // fdatasync calls, read by Stats() without waiting

  std::thread syncer_;  // group commit only
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_
