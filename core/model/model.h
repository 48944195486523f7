// One named model: its user graph, its posterior, its decision ledger, its log and snapshots.
//
// Concurrency (the TensorFlow-Serving pattern of building a new state beside the serving one and
// publishing it in one step):
//  * Every state change — a decision entering the ledger, a reward, a decision closing, a graph
//    edit, fixing the dimensions — is appended to the model's log while the ledger lock is held,
//    so the log order is the order in which the ledger changed. Learning and graph edits are
//    then applied by a single writer thread in log order; it publishes an immutable ModelView.
//  * Decisions read the current ModelView and never wait for the writer (except the very first
//    decision of a model whose dimensions are not fixed yet).
//  * Applying operations is deterministic (the only randomness, KORS coin flips, comes from a
//    seeded stream kept in snapshots; sums over graph neighbours run in index order), so a
//    snapshot plus the log after it rebuilds a bit-identical state. The model version is the
//    sequence number of the last applied operation.
//
// Durability: a reward is acknowledged once its record is in the log and, per the sync policy,
// on disk (fdatasync per acknowledged record, or group commit). Snapshots are taken by the
// writer at a point where the ledger, the graph and the posterior are all at the same sequence
// number, written atomically, and the log starts a new segment there. Recovery loads the newest
// snapshot whose checksum verifies (falling back to the previous one) and replays the segments
// after it; damage is reported, the damaged bytes set aside, and nothing after damage is
// applied. An intact snapshot that cannot be restored, or a log that cannot be replayed from a
// snapshot or from its first record, stops the start instead of losing learned state. After a
// failed write or sync the model acknowledges nothing more (fail-stop) until restarted.
#ifndef GRAPHBANDIT_CORE_MODEL_MODEL_H_
#define GRAPHBANDIT_CORE_MODEL_MODEL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/baseline_tracker.h"
#include "core/ledger/decision.h"
#include "core/ledger/decision_ledger.h"
#include "core/fit/fit_worker.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"
#include "core/learner/posterior.h"
#include "core/storage/log_writer.h"
#include "core/base/sync.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"

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

// The kernel hyper-parameters a published state uses (kernel policies with fixed dimensions).
struct HyperparameterView {
  Hyperparameters values;
  double kors_mu = 0.0;  // EK policies
  int64_t fits_applied = 0;
  int64_t coarsenings = 0;  // full-dictionary rebuilds with a coarser KORS mu (core/fit/refit.h)
  int64_t last_fit_rewards = 0;
  int32_t last_fit_points = 0;
  double last_fit_log_likelihood = 0.0;
};

// What decisions read: immutable once published.
struct ModelView {
  uint64_t version = 0;
  std::shared_ptr<const Scorer> scorer;  // null until the dimensions are fixed
  FeatureScaling scaling;                // valid when dimensions_fixed
  int context_dim = 0;
  int arm_dim = 0;
  bool dimensions_fixed = false;
  int64_t rewards_learned = 0;
  int64_t history_size = 0;
  int64_t dictionary_size = 0;
  int64_t dictionary_points_refused = 0;  // at the cap (core/learner/posterior.h)
  int64_t edges = 0;
  int64_t graph_components = 0;
  int64_t graph_users = 0;
  // Multiplies `exploration` in the selection rule (1: the posterior standard deviation).
  double exploration_width = 1.0;
  // The drifting baseline added to every mean (core/learner/baseline_tracker.h; 0 when off).
  double baseline = 0.0;
  std::optional<HyperparameterView> hyperparameters;  // kernel policies, dimensions fixed
};

struct AddUsersResult {
  int added = 0;
  int already_present = 0;
  int64_t users = 0;
};

struct EdgeEditResult {
  int changed = 0;    // edges added (AddEdges) or removed (RemoveEdges)
  int unchanged = 0;  // AddEdges: existing edges re-weighted; RemoveEdges: pairs with no edge
  int users_added = 0;
  int64_t edges = 0;  // total after the edit
};

// Seconds from acknowledging a reward to publishing a state that has learned it.
struct FreshnessStats {
  static constexpr int kBuckets = 16;
  static constexpr double kBounds[kBuckets] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                               0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                               1.0,    2.5,     5.0,    10.0};
  int64_t count = 0;
  double sum = 0.0;
  int64_t buckets[kBuckets] = {};  // cumulative: observations <= kBounds[i]
};

struct ModelStats {
  ModelView view;
  int64_t users = 0;
  int64_t decisions = 0;
  int64_t pending_decisions = 0;
  int64_t ledger_size = 0;
  int64_t expired_decisions = 0;
  int64_t queued_operations = 0;
  int64_t snapshots_written = 0;
  int64_t log_syncs = 0;  // fdatasync calls on the log since the model was opened
  uint64_t last_snapshot_seq = 0;
  absl::Time last_snapshot_time;  // InfinitePast before the first
  FreshnessStats freshness;
  // Hyper-parameter fits run on the helper thread, by outcome: applied (logged and applied),
  // unchanged (no value moved by more than min_change, or the likelihood gained less than
  // min_gain_per_parameter nats per fitted parameter), skipped (nothing to fit, e.g. every
  // reward equal), failed.
  int64_t fits_applied = 0;
  int64_t fits_unchanged = 0;
  int64_t fits_skipped = 0;
  int64_t fits_failed = 0;
  double fit_seconds = 0.0;  // summed over finished fits
};

// What recovery found (reported at start; damage is also in `damage`).
struct RecoveryReport {
  uint64_t snapshot_seq = 0;      // 0: started from the log alone
  int64_t records_replayed = 0;
  int64_t records_refused = 0;    // logged operations that failed again as when they arrived
  bool truncated = false;
  std::vector<std::string> damage;
};

class Model {
 public:
  // Recovers the model from `state_dir`/<name> (nothing is persisted if state_dir is empty),
  // applies the configured edge list, and starts the writer (and the syncer).
  static absl::StatusOr<std::unique_ptr<Model>> Open(const ModelOptions& options,
                                                     const std::string& state_dir,
                                                     const Durability& durability = {});
  ~Model();

  const ModelOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  const RecoveryReport& recovery() const { return recovery_; }

  // SelectArm: a retry of a known client event id returns the stored decision; otherwise the
  // model decides (randomness seeded by the model seed and the event id) and records the
  // decision. `fingerprint` identifies the request (0 when the event id is generated).
  absl::StatusOr<Decision> Select(const DecisionRequest& request, const std::string& event_id,
                                  bool client_event_id, uint64_t fingerprint, absl::Time now);

  // ReportReward for an event of this model. Returns once the accepted rewards are logged and
  // durable per the sync policy (or fails with DEADLINE_EXCEEDED at `deadline`; the reward may
  // still become durable: a retry then answers DUPLICATE).
  absl::StatusOr<RewardResult> Reward(const RewardRequest& request, absl::Time now,
                                      absl::Time deadline);

  // Whether the event id is open or recently closed here.
  bool Knows(const std::string& event_id) ABSL_LOCKS_EXCLUDED(ledger_mu_);

  // Closes the decisions whose reward window ended by `now` (learning aggregates and default
  // rewards). Returns how many were closed.
  int ExpireDue(absl::Time now) ABSL_LOCKS_EXCLUDED(ledger_mu_);

  // Graph administration; each returns after the edit is applied, published and durable.
  absl::StatusOr<AddUsersResult> AddUsers(absl::Span<const std::string> users,
                                          absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<EdgeEditResult> AddEdges(std::vector<EdgeEdit> edges,
                                          absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<EdgeEditResult> RemoveEdges(std::vector<std::pair<std::string, std::string>> pairs,
                                             absl::Time deadline = absl::InfiniteFuture());

  std::shared_ptr<const ModelView> View() const ABSL_LOCKS_EXCLUDED(view_mu_);
  ModelStats Stats() const;

  // Blocks until every operation logged before the call has been applied and published.
  void WaitForWriter() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Blocks until no hyper-parameter fit is running or waiting to be logged, and what was
  // logged is applied (for tests and tools that need a quiescent model; fits start only as
  // rewards arrive).
  void WaitForFits() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Tests only: the writer runs `hook` after applying each batch and before deciding whether a
  // fit is due (widens that window, which WaitForFits must cover). Null removes it.
  void SetAfterApplyHookForTesting(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Takes a snapshot now (and starts a new log segment); returns its sequence number.
  absl::StatusOr<uint64_t> Snapshot() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Applies everything logged, writes a final snapshot, syncs and closes the log, stops threads.
  void Shutdown() ABSL_LOCKS_EXCLUDED(queue_mu_);

 private:
  struct OpCompletion;
  struct Pending {
    uint64_t seq;
    ModelOp op;
    std::shared_ptr<OpCompletion> completion;  // null unless someone waits for the result
    absl::Time acknowledged;                   // InfinitePast unless the op learns rewards
  };
  struct Dimensions {
    bool fixed = false;
    int context_dim = 0;
    int arm_dim = 0;
  };

  Model(const ModelOptions& options, const Durability& durability);

  // ---- state changes (writer side; also used by recovery before the writer starts) ----
  absl::Status Apply(const ModelOp& op, EdgeEditResult* result);
  absl::Status ApplyHyperparameters(const HyperparametersOp& op);
  // Rebuilds the learner, scaling and user kernel with `values` (no bookkeeping of fits).
  absl::Status SwitchHyperparameters(const Hyperparameters& values, double kors_mu_factor);
  // `h` with every value the configuration fixes set to the configured value.
  Hyperparameters WithConfiguredValues(Hyperparameters h) const;
  // The learner for the current dimensions, graph and hyper-parameters.
  absl::StatusOr<std::unique_ptr<Learner>> NewLearner() const;
  // The user kernel's options with the current (possibly fitted) rho.
  UserKernelOptions CurrentUserKernelOptions() const;
  KernelShape CurrentShape() const;
  // Writer, after each batch: picks up a finished fit (logging it when its values changed) and
  // starts the next one when it is due.
  void AfterBatch();
  void MarkDecided() ABSL_LOCKS_EXCLUDED(queue_mu_);  // decided_seq_ = applied_seq_
  // AfterBatch's decisions: coarsen a full dictionary, log a finished fit, start a due one.
  void DecideFits();
  // Logs a hyper-parameter record (ledger lock held); false if it could not be logged.
  bool QueueHyperparameters(HyperparametersOp op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  void StartFit();
  void FinishFit(FitWorker::Outcome outcome);
  // The ledger part of an operation, for recovery (live, it happened at submission).
  void ApplyToLedger(const ModelOp& op);
  void Publish(uint64_t version);
  void WriterLoop();
  void SyncerLoop();
  // Applies the queued operations with sequence numbers up to `seq` (writer only).
  void ApplyUpTo(uint64_t seq);
  void ApplyBatch(std::deque<Pending>* batch);
  // A snapshot in three steps, by the writer: (1) under the ledger lock, note the last logged
  // sequence number, copy the ledger and start a new log segment; (2) without it, apply what
  // was logged up to that number and serialize the graph and the learner; (3) write the file
  // atomically. Decisions wait only for step 1.
  struct PreparedSnapshot {
    uint64_t seq = 0;
    std::string ledger;   // step 1
    std::string payload;  // step 2
  };
  absl::StatusOr<PreparedSnapshot> BeginSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  absl::StatusOr<PreparedSnapshot> CompleteSnapshotState(absl::StatusOr<PreparedSnapshot> prepared);
  absl::StatusOr<uint64_t> FinishSnapshot(absl::StatusOr<PreparedSnapshot> prepared);
  std::string SaveState(uint64_t seq, absl::string_view ledger) const;
  std::string SaveLedger() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  absl::Status LoadState(absl::string_view payload);

  // ---- submission side ----
  absl::Status ValidateRequest(const DecisionRequest& request, const Dimensions& dims) const;
  absl::Status EnsureDimensions(int context_dim, int arm_dim);
  Dimensions CurrentDimensions() const ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::StatusOr<Decision> Decide(const DecisionRequest& request, const std::string& event_id);
  // Logs and queues one operation. REQUIRES queue_mu_ (and, for everything but recovery-time
  // appends, ledger_mu_: the log tail only moves under the ledger lock).
  absl::StatusOr<uint64_t> AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                        absl::Time acknowledged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  absl::StatusOr<uint64_t> Append(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                  absl::Time acknowledged) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Waits until `seq` is durable per the sync policy.
  absl::Status WaitDurable(uint64_t seq, absl::Time deadline) ABSL_LOCKS_EXCLUDED(sync_mu_);
  // Submits an administrative operation and waits until it is applied and durable.
  absl::StatusOr<EdgeEditResult> SubmitAndWait(ModelOp op, absl::Time deadline);
  // The observations that closing `entry` teaches (aggregates, default rewards).
  std::vector<ObserveOp> ClosingObservations(const LedgerEntry& entry) const;
  ObserveOp Observation(const LedgerEntry& entry, int arm, double reward) const;
  // Closes an entry now, logging it. REQUIRES ledger_mu_.
  absl::Status CloseLocked(LedgerEntry* entry, ClosedAs how, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  absl::Status StartSegment(uint64_t first_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Records a failed write or sync: from then on nothing more is appended or acknowledged.
  void FailLogLocked(const std::string& what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sync_mu_);
  void RemoveOldFiles(uint64_t keep_from_snapshot);
  // Reserves user-table slots for the ids not registered yet (so that concurrent edits cannot
  // together exceed max_users). Returns the reserved ids, or {""} when the limit refuses them.
  std::vector<std::string> ReserveUsers(const std::vector<std::string>& ids)
      ABSL_LOCKS_EXCLUDED(queue_mu_);

  ModelOptions options_;
  Durability durability_;
  std::string dir_;  // empty: in memory only
  RecoveryReport recovery_;
  std::atomic<int64_t> decisions_{0};
  std::shared_ptr<UserRegistry> registry_ = std::make_shared<UserRegistry>();

  // The ledger and the tail of the log. Lock order: ledger_mu_, then queue_mu_, then sync_mu_.
  mutable Mutex ledger_mu_;
  DecisionLedger ledger_ ABSL_GUARDED_BY(ledger_mu_);

  // Owned by the writer (or by Open before the writer starts).
  UserGraph graph_;
  std::shared_ptr<const UserKernel> user_kernel_;
  std::unique_ptr<Learner> learner_;
  FeatureScaling scaling_;
  int64_t rewards_learned_ = 0;
  int64_t components_ = 0;
  int64_t users_at_rebuild_ = 0;
  uint64_t applied_for_snapshot_ = 0;  // records applied since the last snapshot
  // Hyper-parameters in use (from the configuration until a logged fit changes them).
  Hyperparameters hyper_;
  double kors_mu_factor_ = 1.0;
  int64_t next_fit_at_ = 0;  // rewards learned at which the next fit is due
  // A hyper-parameter record this writer logged is not applied yet: no fit is finished or
  // started, and no coarsening decided, against values that are about to change.
  bool hyperparameters_queued_ = false;
  // ... and that record holds one of fits_in_flight_ until the writer has decided, with the
  // values it sets, whether a fit is due (AfterBatch).
  bool hyperparameters_queued_hold_ = false;
  int64_t fits_applied_ = 0;
  int64_t coarsenings_ = 0;  // full-dictionary rebuilds with a coarser KORS mu
  int64_t last_fit_rewards_ = 0;
  int32_t last_fit_points_ = 0;
  double last_fit_log_likelihood_ = 0.0;
  BaselineTracker baseline_;
  std::unique_ptr<FitWorker> fitter_;  // null unless the model fits hyper-parameters

  mutable Mutex queue_mu_;
  CondVar queue_cv_;
  std::unique_ptr<storage::LogWriter> log_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(queue_mu_) = 1;
  uint64_t applied_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Applied and past AfterBatch (fit decisions taken); WaitForFits waits on it.
  uint64_t decided_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  std::shared_ptr<const std::function<void()>> after_apply_hook_ ABSL_GUARDED_BY(queue_mu_);
  int64_t rewards_held_ ABSL_GUARDED_BY(queue_mu_) = 0;
  Dimensions dims_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool snapshot_requested_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool fit_ready_ ABSL_GUARDED_BY(queue_mu_) = false;  // the fitter has an outcome waiting
  int fits_in_flight_ ABSL_GUARDED_BY(queue_mu_) = 0;  // started and not yet logged or dropped
  std::vector<std::shared_ptr<OpCompletion>> snapshot_waiters_ ABSL_GUARDED_BY(queue_mu_);
  // Users a pending operation will register (counted against max_users before they exist).
  absl::flat_hash_set<std::string> reserved_users_ ABSL_GUARDED_BY(queue_mu_);

  mutable Mutex sync_mu_;
  CondVar sync_cv_;
  int sync_fd_ ABSL_GUARDED_BY(sync_mu_) = -1;  // the current segment
  uint64_t synced_seq_ ABSL_GUARDED_BY(sync_mu_) = 0;
  std::atomic<int64_t> log_syncs_{0};  // read by Stats() without waiting for a sync
  std::atomic<bool> log_failed_{false};  // set with sync_error_, read without the sync lock
  absl::Status sync_error_ ABSL_GUARDED_BY(sync_mu_);
  bool syncer_stop_ ABSL_GUARDED_BY(sync_mu_) = false;

  mutable Mutex view_mu_;
  std::shared_ptr<const ModelView> view_ ABSL_GUARDED_BY(view_mu_);

  mutable Mutex stats_mu_;
  FreshnessStats freshness_ ABSL_GUARDED_BY(stats_mu_);
  int64_t snapshots_written_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t last_snapshot_seq_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t fits_unchanged_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t fits_skipped_ ABSL_GUARDED_BY(stats_mu_) = 0;
  int64_t fits_failed_ ABSL_GUARDED_BY(stats_mu_) = 0;
  double fit_seconds_ ABSL_GUARDED_BY(stats_mu_) = 0.0;
  absl::Time last_snapshot_time_ ABSL_GUARDED_BY(stats_mu_) = absl::InfinitePast();

  std::thread writer_;
  std::thread syncer_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_MODEL_H_
