// The model's operation log on disk: appending records to the current segment, starting new
// segments, making records durable per the sync policy (fdatasync per acknowledged record, or
// a group-commit syncer thread), and surviving a full disk or an I/O error.
//
// Degraded mode and repair: after a failed write or sync nothing more is appended or reported
// durable (a later record could follow a torn one, and a retried fsync can falsely succeed):
// Append and WaitDurable fail with UNAVAILABLE naming the cause. The log keeps a copy of every
// record appended since the last point known to be on disk (bounded: a sync is forced when the
// copies pass kMaxUnsyncedBytes). A repair thread retries with exponential back-off. After a
// failed write, the records before it are intact: the repair cuts off the partial record and
// syncs. After a failed sync the kernel may have dropped written pages, so nothing after the
// last good sync is trusted: the repair cuts the segment back to it, writes the copies again
// and syncs. Then the log is healthy again, with every record the model applied on disk in
// order. Nothing acknowledged is lost: a record is acknowledged only once a sync that covers it
// succeeded. (If the process ends while a failed sync is unrepaired, the records after the
// last good sync may be lost: none was acknowledged, and a decision among them answers
// UNKNOWN_EVENT after the restart.)
//
// Threads: Append, StartSegment and Close are called by the model with its queue lock held (the
// log order is the order in which sequence numbers are assigned); WaitDurable by request
// threads (or NotifyDurable, which does not wait); the syncer, the acknowledger and the
// repairer are this class's own threads. Lock order: the model's queue lock, then writer_mu_,
// then sync_mu_, then the leaf locks copies_mu_ and error_mu_. An append takes writer_mu_ and
// copies_mu_ only, so it does not wait for another caller's fdatasync, except when the copies kept
// for a repair pass kMaxUnsyncedBytes (it syncs then) or a write fails; while degraded it takes no
// lock but error_mu_. A WaitDurable's fdatasync runs with sync_mu_ released (syncing_ set): whoever
// else syncs, or closes or replaces the segment's descriptor, waits for it first.
#ifndef GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_
#define GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
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
  // Back-pressure bound (Model::max_queued()); 0: half of snapshot_every_records, at least 64.
  int64_t max_queued_operations = 0;
  // Back-pressure by time (Model::HasRoomLocked): rewards and graph edits wait while the oldest
  // acknowledged reward not yet learned is this old; zero: off.
  absl::Duration max_learning_lag = absl::Milliseconds(500);
};

// What an operator is told about the log (ModelStats, health, metrics).
struct LogHealth {
  bool degraded = false;
  // Short, bounded label: disk_full, disk_quota, read_only_filesystem, io_error, log_error.
  std::string reason;
  std::string message;  // the UNAVAILABLE message writes get
  absl::Time since = absl::InfinitePast();
  int64_t degraded_episodes = 0;  // times the log went degraded since the model was opened
  int64_t repair_attempts = 0;    // failed attempts to repair, over all episodes
};

class OperationLog {
 public:
  // Above this many bytes of records not yet known to be on disk, Append syncs first.
  static constexpr size_t kMaxUnsyncedBytes = 4 << 20;
  // The repairer's back-off: the first retry after this, doubling up to kMaxRepairInterval.
  static constexpr absl::Duration kFirstRepairInterval = absl::Milliseconds(100);
  static constexpr absl::Duration kMaxRepairInterval = absl::Seconds(5);

  OperationLog(std::string model_name, Durability durability);
  // Stops the threads; does not sync (Close does). Callbacks still waiting get UNAVAILABLE.
  ~OperationLog();
  OperationLog(const OperationLog&) = delete;
  OperationLog& operator=(const OperationLog&) = delete;

  // Records up to `seq` are durable already (at open, after recovery).
  void MarkSynced(uint64_t seq) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Starts the repairer and, under group commit, the syncer (every-record: the acknowledger).
  void StartThreads() ABSL_LOCKS_EXCLUDED(sync_mu_);
  void StopThreads() ABSL_LOCKS_EXCLUDED(sync_mu_);

  // Opens the segment at `path` for the records after `last_logged`. The previous segment is
  // synced (the log turns degraded if that fails, and the new file is removed) and closed; if
  // the new one cannot be opened, appends continue to the previous one and the error is
  // returned. While degraded, segments are not started.
  absl::Status StartSegment(const std::string& path, uint64_t last_logged)
      ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);
  // Appends one record. INVALID_ARGUMENT (nothing written) for a record over the format's size
  // limit; after a failed write, while degraded, or once closed, UNAVAILABLE.
  absl::Status Append(uint8_t type, absl::string_view payload)
      ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);
  // Waits until record `seq` is durable per the sync policy (group commit: until `deadline`).
  absl::Status WaitDurable(uint64_t seq, absl::Time deadline) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // WaitDurable without waiting, for a caller on a thread that must not block (a gRPC
  // callback): `done` gets WaitDurable's answer (without a deadline: the client's own applies)
  // once a sync covers record `seq`, or once the log fails or closes. It runs here when that is
  // so already, else on the log's own thread: the acknowledger (every-record policy), which
  // fdatasyncs whenever a record is waited for and answers every record that sync covered, or
  // the syncer (group commit). `done` must not call into this log.
  using DurableCallback = absl::AnyInvocable<void(absl::Status) &&>;
  void NotifyDurable(uint64_t seq, DurableCallback done) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Syncs and closes the segment (repairing it first if degraded); records up to
  // `last_logged` are then durable. Later appends fail. Waiters for a group commit get their
  // answer.
  void Close(uint64_t last_logged) ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);

  int64_t syncs() const { return syncs_.load(std::memory_order_relaxed); }
  bool degraded() const { return failed_.load(std::memory_order_relaxed); }
  LogHealth Health() const ABSL_LOCKS_EXCLUDED(sync_mu_);

  // One repair attempt now (the repairer's step; tests call it to avoid waiting). OK when the
  // log is healthy afterwards.
  absl::Status Repair() ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);

 private:
  // A record appended after the last point known to be on disk.
  struct Unsynced {
    uint64_t seq;
    uint8_t type;
    std::string payload;
    uint64_t end;  // the segment's size after it
  };

  // Records a failed write or sync (`what`, errno `err`): from then on nothing more is
  // appended or acknowledged until Repair succeeds. `tail_intact`: a write failed, so the
  // complete records before it can be kept; false after a failed sync.
  void FailLocked(const std::string& what, int err, bool tail_intact)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // The error appends get while degraded (no lock but error_mu_).
  absl::Status DegradedError() const ABSL_LOCKS_EXCLUDED(error_mu_);
  // After a sync that covered the records up to `seq`.
  void SyncedLocked(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // fdatasync of the current segment (with the test hook); the errno, or 0.
  int SyncFdLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // The same, with sync_mu_ released during the fdatasync (syncing_ set meanwhile), so that
  // callers whose records it covers are not queued on the mutex behind it: on a shared mutex
  // that does not queue fairly, one caller could wait out many other callers' syncs.
  int SyncOutsideLock() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // Waits until no SyncOutsideLock is running (before closing or replacing the descriptor).
  void AwaitNoSyncLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  absl::Status RepairLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_, sync_mu_);
  void SyncerLoop() ABSL_LOCKS_EXCLUDED(sync_mu_);
  void AcknowledgerLoop() ABSL_LOCKS_EXCLUDED(sync_mu_);
  void CloseLocked(uint64_t last_logged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(writer_mu_, sync_mu_);
  // Callbacks paired with their answers.
  using Answers = std::vector<std::pair<DurableCallback, absl::Status>>;
  // Moves out of pending_ the callbacks that have their answer (`all`: every one, with
  // `status` for those not covered by a sync), paired with it.
  Answers TakeAnsweredLocked(bool all, absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  // Calls them, with sync_mu_ released meanwhile.
  void AnswerOutsideLock(Answers answered) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void RepairLoop() ABSL_LOCKS_EXCLUDED(writer_mu_, sync_mu_);

  const std::string model_name_;
  const Durability durability_;

  // Lock order: writer_mu_, then sync_mu_.
  Mutex writer_mu_;
  std::unique_ptr<storage::LogWriter> writer_ ABSL_GUARDED_BY(writer_mu_);  // null once closed
  std::string path_ ABSL_GUARDED_BY(writer_mu_);                            // the current segment's
  uint64_t appended_seq_ ABSL_GUARDED_BY(writer_mu_) = 0;
  // appended_seq_, stored once its record is written: a sync started after reading it covers
  // every record up to it. Read under sync_mu_ alone (which cannot take writer_mu_).
  std::atomic<uint64_t> written_seq_{0};
  bool closed_ ABSL_GUARDED_BY(writer_mu_) = false;

  mutable Mutex sync_mu_;
  CondVar sync_cv_;
  // The repairer's own: signalled when the log fails and at stop, not by every sync (sync_cv_
  // wakes every waiter at each fdatasync, which the repairer has no use for).
  CondVar repair_cv_;
  int sync_fd_ ABSL_GUARDED_BY(sync_mu_) = -1;  // the current segment
  uint64_t synced_seq_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(sync_mu_) = false;  // a SyncOutsideLock is running

  mutable Mutex copies_mu_;                               // leaf
  uint64_t synced_size_ ABSL_GUARDED_BY(copies_mu_) = 0;  // the segment's size at synced_seq_
  std::deque<Unsynced> unsynced_ ABSL_GUARDED_BY(copies_mu_);
  size_t unsynced_bytes_ ABSL_GUARDED_BY(copies_mu_) = 0;
  bool tail_intact_ ABSL_GUARDED_BY(copies_mu_) = true;  // see FailLocked

  mutable Mutex error_mu_;                                  // leaf
  absl::Status degraded_error_ ABSL_GUARDED_BY(error_mu_);  // a copy of sync_error_
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);       // the degraded cause (OK: healthy)
  std::string reason_ ABSL_GUARDED_BY(sync_mu_);
  absl::Time degraded_since_ ABSL_GUARDED_BY(sync_mu_) = absl::InfinitePast();
  int64_t degraded_episodes_ ABSL_GUARDED_BY(sync_mu_) = 0;
  int64_t repair_attempts_ ABSL_GUARDED_BY(sync_mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(sync_mu_) = false;
  std::atomic<bool> failed_{false};  // set with sync_error_, read without the sync lock
  std::atomic<int64_t> syncs_{0};    // fdatasync calls, read by Stats() without waiting
  // NotifyDurable's callbacks not answered yet, and the acknowledger's wake-up (a new one, a
  // sync's end, a failure, the stop). Once answered_all_ (Close, the destructor), a callback
  // is answered where it is registered.
  struct PendingDurable {
    uint64_t seq;
    DurableCallback done;
  };
  std::vector<PendingDurable> pending_ ABSL_GUARDED_BY(sync_mu_);
  CondVar acknowledger_cv_;
  bool answered_all_ ABSL_GUARDED_BY(sync_mu_) = false;

  std::thread syncer_;        // group commit only
  std::thread acknowledger_;  // every-record only
  std::thread repairer_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_OPERATION_LOG_H_
