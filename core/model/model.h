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
// snapshot or from its first record, stops the start instead of losing learned state.
//
// A full disk or an I/O error makes the model degraded (operation_log.h): decisions are still
// made from the last published state but not logged (Decision::logged is false, and their
// rewards are UNKNOWN_EVENT), every change is refused with UNAVAILABLE naming the cause, and
// the log repairs itself with back-off once writing works again; nothing acknowledged is lost.
//
// The parts, one concept each (core/model/):
//   request_validation.h  checks of decision requests and graph edits
//   learned_state.h       the deterministic state machine the writer and recovery drive
//   ledger_records.h      the ledger's side of the log and of snapshots
//   operation_log.h       the log on disk: appends, segments, durability, degraded mode and
//                         its repair
//   snapshots.h           snapshot scheduling, writing and bookkeeping
//   fit_scheduler.h       when hyper-parameters are fitted and what a finished fit logs
//   state_directory.h     the files in a model's state directory
//   recovery.h            rebuilding the state at start from snapshots and the log
//   model.h (this file)   the facade: Open, snapshots on request and shutdown (model.cc),
//                         logging and back-pressure (model_submit.cc), decisions and their
//                         closing (model_decide.cc), named features (model_features.cc),
//                         rewards (model_rewards.cc), graph administration (model_admin.cc),
//                         views, statistics and waits (model_stats.cc), the writer thread
//                         (model_writer.cc)
//
// Threads:
//  * Request threads (gRPC handlers, the engine's sweeper): Select, Reward, Knows, ExpireDue,
//    graph administration, View, Stats, the waits. They change the ledger and append to the log
//    under the ledger lock, and read the learned state only through published views (and the
//    thread-safe user registry).
//  * The writer (WriterLoop): owns the learned state (state_), the fit scheduler's flags and
//    the snapshot counter; applies queued operations in log order, publishes views, takes
//    snapshots, and decides fits. It takes the ledger lock only to copy the ledger for a
//    snapshot and to log fitted hyper-parameters. Before it starts (Open) and after it stopped
//    (Shutdown), the thread in Open or Shutdown owns what it owns.
//  * The syncer (OperationLog, group commit only): fdatasyncs the log on a timer.
//  * The fit worker (core/fit/fit_worker.h): runs a fit on a copy of the data; it wakes the
//    writer (fit_ready_, under queue_mu_), which picks the outcome up.
//  * Cluster mode (Replication; model_replicated.cc): request threads do not change the ledger
//    but publish to the shared log and wait for their record's completion (awaiting_, under
//    queue_mu_); the feeder reads the shared log into queue_; the writer changes the ledger
//    (under ledger_mu_) as it applies each record, and completes the waiting request.
//
// Locks, in lock order (a thread holding one may take only those after it):
//   ledger_mu_  the ledger; the log tail only moves under it, so log order = ledger order.
//   queue_mu_   the queue of logged operations and the sequence numbers, the request-side
//               dimensions, user reservations, shutdown and snapshot requests, fits in flight.
//   OperationLog's writer_mu_, then sync_mu_ (core/model/operation_log.h).
// Leaf locks (nothing is taken while holding them): view_mu_ (the published view), stats_mu_
// (freshness), the snapshot writer's and fit scheduler's stats locks, the user registry's lock.
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
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/base/sync.h"
#include "core/graph/user_graph.h"
#include "core/ledger/decision.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/fit_scheduler.h"
#include "core/model/learned_state.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"
#include "core/model/model_view.h"
#include "core/model/named_inputs.h"
#include "core/model/operation_log.h"
#include "core/model/recovery.h"
#include "core/model/replicated_records.h"
#include "core/model/request_validation.h"
#include "core/model/shared_log.h"
#include "core/model/snapshots.h"
#include "core/model/state_directory.h"

namespace graphbandit {

// Cluster mode: the model is served by several nodes that share one log (core/model/shared_log.h;
// a NATS JetStream stream in the server). Every node publishes what its requests ask for to the
// shared log and applies the whole log in order (core/model/replicated_records.h), so every
// replica learns the same things in the same order; decisions and rewards are answered once this
// node has applied their records. The state directory then holds snapshots only (at positions of
// the shared log), and a restart reads the shared log from its newest snapshot on.
struct Replication {
  std::shared_ptr<SharedLog> log;  // null: a single node with its own log (the default)
  std::string node_id;             // this node's name, unique in the cluster
  // A decision closes this long after its reward window ended, so that a report received
  // within the window has normally reached the shared log before the decision closes (a
  // report received in time but published later than this is LATE).
  absl::Duration expiry_grace = absl::Seconds(2);
  // How long Open may take to apply the shared log up to its end.
  absl::Duration catch_up_timeout = absl::Minutes(10);
};

struct AddUsersResult {
  int added = 0;
  int already_present = 0;
  int64_t users = 0;
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
  // Back-pressure (Model::max_queued()): rewards and graph edits that waited for the writer to
  // catch up, and those whose deadline passed first (RESOURCE_EXHAUSTED, nothing recorded).
  int64_t writes_delayed = 0;
  int64_t writes_refused_behind = 0;
  // Decisions that waited for the writer because learning was durability.max_learning_lag
  // behind (each then served either way), and how long they waited in all.
  int64_t decisions_paced = 0;
  double decision_pacing_seconds = 0.0;
  int64_t snapshots_written = 0;
  int64_t log_syncs = 0;           // fdatasync calls on the log since the model was opened
  LogHealth log;                   // degraded or not, and why
  int64_t unlogged_decisions = 0;  // decisions served while the log was degraded
  RecoveryReport recovery;         // of the last start
  uint64_t last_snapshot_seq = 0;
  absl::Time last_snapshot_time;  // InfinitePast before the first
  FreshnessStats freshness;
  // Cluster mode: the position of the last record read from the shared log (view.version is
  // the last applied: the difference is this node's apply lag), and records that this build
  // could not read and skipped.
  bool replicated = false;
  uint64_t shared_log_seq = 0;
  int64_t records_unreadable = 0;
  // Hyper-parameter fits run on the helper thread, by outcome: applied (logged and applied),
  // unchanged (no value moved by more than min_change, or the likelihood gained less than
  // min_gain_per_parameter nats per fitted parameter), skipped (nothing to fit, e.g. every
  // reward equal), failed.
  int64_t fits_applied = 0;
  int64_t fits_unchanged = 0;
  int64_t fits_skipped = 0;
  int64_t fits_failed = 0;
  double fit_seconds = 0.0;  // summed over finished fits
  // Fits started and not yet logged or dropped (briefly 2 while one that landed waits to be
  // applied and the next starts): a model with none in flight and nothing queued has settled;
  // a fit in flight may still change it.
  int fits_in_flight = 0;
  FitOutcome last_fit = FitOutcome::kNone;  // since the model was opened
  // Whether the model is learning (core/model/learning_health.h).
  LearningHealth learning;
};

class Model : private FitScheduler::Host {
 public:
  // Recovers the model from `state_dir`/<name> (nothing is persisted if state_dir is empty),
  // applies the configured edge list, and starts the writer (and the syncer).
  // Cluster mode (`replication.log` set): see Replication; Open then also reads the shared log
  // up to its end before it returns.
  static absl::StatusOr<std::unique_ptr<Model>> Open(const ModelOptions& options,
                                                     const std::string& state_dir,
                                                     const Durability& durability = {},
                                                     const Replication& replication = {});
  ~Model();

  const ModelOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  const RecoveryReport& recovery() const { return recovery_; }
  // Back-pressure: a reward or graph edit waits (within its deadline) while this many logged
  // operations wait for the writer. Half the snapshot cadence (at least 64; 50,000 without
  // scheduled snapshots), so that what a crash leaves to replay stays near the cadence even
  // when learning is slower than the arrivals: a snapshot is due after `snapshot_every_records`
  // applied records, and at most this many more are logged but not yet in it.
  int64_t max_queued() const { return max_queued_; }
  // Whether the writer's queue is below max_queued() (the expiry sweep waits otherwise).
  bool HasRoom() const ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Whether the log cannot be written now (a full disk, an I/O error): cheap, lock-free.
  bool LogDegraded() const { return log_ != nullptr && log_->degraded(); }
  // For tests: one attempt to repair a degraded log now (the model's repairer retries by
  // itself, with back-off, and does not go through here). OK when the log is healthy afterwards.
  absl::Status RepairLog() { return log_ != nullptr ? log_->Repair() : absl::OkStatus(); }

  // SelectArm: a retry of a known client event id returns the stored decision; otherwise the
  // model decides (randomness seeded by the model seed and the event id) and records the
  // decision. `fingerprint` identifies the request (0 when the event id is generated). In
  // cluster mode the decision is answered once its record is applied here (by `deadline`).
  //
  // With `shadow` (a challenger, core/model/shadow_feed.h) the decision is not this model's:
  // it scores the candidates and logs the leader's choice with the leader's probability, its
  // own policy's probability of that choice (EvaluationRecord::kModelTarget) and the
  // off-policy targets from its own means.
  struct ShadowOf {
    int chosen = 0;           // the candidate the leader chose
    double propensity = 1.0;  // its probability under the leader's logging policy
    bool explored = false;    // drawn by the leader's uniform share
    // Every candidate's probability under the leader's logging policy (LoggedCandidates).
    std::vector<double> probabilities;
  };
  absl::StatusOr<Decision> Select(const DecisionRequest& request, const std::string& event_id,
                                  bool client_event_id, uint64_t fingerprint, absl::Time now,
                                  absl::Time deadline = absl::InfiniteFuture(),
                                  const ShadowOf* shadow = nullptr);

  // ReportReward for an event of this model. Returns once the accepted rewards are logged and
  // durable per the sync policy (or fails with DEADLINE_EXCEEDED at `deadline`; the reward may
  // still become durable: a retry then answers DUPLICATE). `*joined` (when given) says whether
  // the report reached the event's decision in the ledger, whatever the answer: then it was
  // judged, and what it taught is logged (or the next start replays it), even if the answer is
  // an error from the wait for durability. (Always false in cluster mode, which has no
  // challengers.)
  absl::StatusOr<RewardResult> Reward(const RewardRequest& request, absl::Time now,
                                      absl::Time deadline, bool* joined = nullptr);
  // Reward without blocking, for a caller on a thread that must not wait (a gRPC callback
  // thread). When the model can take the reward at once (its own log, room in the writer's
  // queue), it joins and logs it as Reward does and returns true; `*done` (moved from) then
  // gets Reward's answer once the record is durable, from the log's acknowledger, or here when
  // no sync is needed. Otherwise (Reward would wait for room, or the log is the cluster's) it
  // returns false having done nothing, and the caller calls Reward on a thread that may wait.
  // `*joined` as for Reward, set before this returns (`*done` may run later).
  using RewardCallback = absl::AnyInvocable<void(absl::StatusOr<RewardResult>) &&>;
  bool TryRewardWithoutWaiting(const RewardRequest& request, absl::Time now, RewardCallback* done,
                               bool* joined = nullptr);

  // Activates a deferred decision (DecisionRequest.defer_activation): the rewards it held are
  // learned now, and later ones as they arrive. Returns once that is logged and durable, like
  // Reward. Activating a decision that was not deferred, or twice, changes nothing. `*logged`
  // (when given) says whether this call logged the activation, whatever the answer.
  absl::StatusOr<ActivationResult> Activate(const std::string& event_id, absl::Time now,
                                            absl::Time deadline, bool* logged = nullptr);

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
  // Switches the model between apprentice mode and serving itself (core/policy/apprentice.h);
  // logged, and returns after it is applied and durable. `changed` is 1 when the mode changed.
  // FAILED_PRECONDITION when the model cannot be an apprentice (no evaluation share, or a
  // policy that samples whole parameter vectors).
  absl::StatusOr<EdgeEditResult> SetServingMode(bool apprentice,
                                                absl::Time deadline = absl::InfiniteFuture());

  std::shared_ptr<const ModelView> View() const ABSL_LOCKS_EXCLUDED(view_mu_);
  ModelStats Stats() const;
  // Runs `visit` with the catalogs of the named features seen since the server started (null
  // for a side without named-feature inputs), under their lock.
  void VisitFeatureCatalogs(
      absl::FunctionRef<void(const FeatureCatalog* context, const FeatureCatalog* arm)> visit) const
      ABSL_LOCKS_EXCLUDED(features_mu_);

  // Read-your-writes: waits until the published state's version is at least `version`.
  // Errors: INVALID_ARGUMENT for a version beyond anything logged, DEADLINE_EXCEEDED when
  // `deadline` passes first (naming the version reached), UNAVAILABLE when shutting down.
  absl::Status WaitForVersion(uint64_t version, absl::Time deadline) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Blocks until every operation logged before the call has been applied and published.
  void WaitForWriter() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Blocks until no hyper-parameter fit is running or waiting to be logged, and what was
  // logged is applied (for tests and tools that need a quiescent model; fits start only as
  // rewards arrive).
  void WaitForFits() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Tests only: the writer runs `hook` after applying each batch and before deciding whether a
  // fit is due (widens that window, which WaitForFits must cover). Null removes it.
  void SetAfterApplyHookForTesting(std::function<void()> hook) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Tests only: fits started from now on run `hook` after each likelihood evaluation, on the
  // fit thread (e.g. to hold one there). Null removes it.
  void SetFitEvaluationHookForTesting(std::function<void()> hook) {
    fits_.SetEvaluationHookForTesting(std::move(hook));
  }
  // Takes a snapshot now (and starts a new log segment); returns its sequence number once the
  // file is written.
  absl::StatusOr<uint64_t> Snapshot() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Waits until no snapshot is being written in the background (for tests that copy the state
  // directory while the writer is held).
  void WaitForSnapshotWrite() const { snapshots_.WaitForBackground(); }
  // Tests only: the background thread that writes a snapshot runs `hook` first (null removes it).
  void SetSnapshotWriteHookForTesting(std::function<void()> hook) {
    snapshots_.SetBeforeWriteHookForTesting(std::move(hook));
  }
  // Applies everything logged, writes a final snapshot, syncs and closes the log, stops threads.
  // Bounded by `deadline`: if the writer has not applied everything by then (a long re-draw or
  // rebuild), or a snapshot is still being written in the background, the log is synced and
  // closed without the final snapshot and the writer (or the snapshot's thread) is left
  // running (false is returned): what was logged but not applied is replayed at the next
  // start, and the process should exit without destroying the model (std::_Exit). False too
  // (after the final snapshot) when a cancelled fit is still in a likelihood evaluation.
  bool Shutdown(absl::Time deadline = absl::InfiniteFuture()) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // First step of a shutdown, while RPCs drain: calls waiting for a model version (which may
  // be far behind a busy writer) end with UNAVAILABLE instead of holding the drain, and a
  // hyper-parameter fit in progress is cancelled (Shutdown waits for it last).
  void BeginShutdown() ABSL_LOCKS_EXCLUDED(queue_mu_);

  // The longest a decision or a staged reward waits for the writer to wake (Model::ApplyDelay).
  static constexpr absl::Duration kMaxApplyDelay = absl::Milliseconds(5);

 private:
  // Someone waiting for a queued operation (or a snapshot) to be done.
  struct OpCompletion {
    Notification done;
    absl::Status status;
    EdgeEditResult result;
    uint64_t seq = 0;       // snapshots: the snapshot's sequence number
    Resolution resolution;  // cluster mode: what the record amounted to when applied
  };
  struct Pending {
    uint64_t seq;
    ModelOp op;
    std::shared_ptr<OpCompletion> completion;  // null unless someone waits for the result
    absl::Time acknowledged;                   // InfinitePast unless the op learns rewards
    // Cluster mode: the record read from the shared log (`op` is unused then).
    std::shared_ptr<const ReplicatedRecord> replicated;
    // Whether the writer may leave it queued for a while (DeferrableLocked), when it was logged
    // (InfinitePast for records read from the shared log), and the observations it stages.
    bool deferrable = false;
    absl::Time queued = absl::InfinitePast();
    int32_t observations = 0;
  };

  Model(const ModelOptions& options, const Durability& durability,
        std::optional<StateDirectory> dir, RecoveredState recovered, Replication replication);

  // ---- Open's steps (model.cc) ----
  // Sequence numbers, the first log segment, the first published view.
  absl::Status StartLog(uint64_t next_seq);
  void StartThreads();
  // The configured edge list, as one logged edit of the edges missing or weighted differently.
  absl::Status ApplyEdgeListFile();
  // Logs the switch that makes a new model an apprentice (ModelOptions::apprentice_start), and
  // warns about an apprentice that cannot estimate its lift.
  absl::Status StartApprenticeship();

  // ---- submission side (model_submit.cc, model_decide.cc, model_features.cc,
  //      model_rewards.cc, model_admin.cc) ----
  Dimensions CurrentDimensions() const ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::Status EnsureDimensions(const FixDimensionsOp& want)
      ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // A request with named features (or for a model with named-feature inputs), checked and
  // turned into dense input (core/model/named_inputs.h); `slots` receives the named-feature
  // inputs the model has or, while its dimensions are not fixed, will get from this request.
  absl::Status EncodeRequest(const DecisionRequest& request, EncodedRequest* encoded,
                             Dimensions* slots) ABSL_LOCKS_EXCLUDED(features_mu_, queue_mu_);
  absl::StatusOr<Decision> Decide(const DecisionRequest& request, const std::string& event_id,
                                  const Dimensions& slots, const ShadowOf* shadow);
  // A decision was made for `sent`: its named features go into the catalogs, and the scales of
  // its numbers are frozen afresh where due (CollectScaleFreezes).
  void RecordDecided(const DecisionRequest& sent, const Dimensions& slots)
      ABSL_LOCKS_EXCLUDED(features_mu_, ledger_mu_, queue_mu_);
  // The side's catalog, created (with the declared schema) when missing; null without slots.
  FeatureCatalog* CatalogLocked(bool context, int slots)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(features_mu_);
  // Logs new frozen scales of named numbers; not awaited (decisions use them once applied).
  void LogFeatureScaling(FeatureScalingOp op) ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // Logs and queues one operation (the log tail only moves under the ledger lock).
  absl::StatusOr<uint64_t> AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                        absl::Time acknowledged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_, queue_mu_);
  absl::StatusOr<uint64_t> Append(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                  absl::Time acknowledged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  uint64_t LastLogged() const ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Whether the writer may leave `op` queued for up to ApplyDelay() rather than wake for it:
  // the learner learns in batches (EK policies; other learners learn each reward when its
  // record is applied, and nothing is deferred), and applying `op` changes nothing a caller
  // can see at once (a decision, or a reward the learner only stages until a LearnOp), so the
  // writer applies such operations in groups, one wake-up per group instead of one per
  // operation. No one waits for it, and the model is not replicated.
  bool DeferrableLocked(const ModelOp& op) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // How long a deferrable operation may wait for the writer: within max_learn_delay (and half
  // the learning-lag bound), so that a reward is still learned within them, and at most
  // kMaxApplyDelay; zero: none waits.
  absl::Duration ApplyDelay() const;
  // The writer has queued work that cannot wait: an operation that is not deferrable, a full
  // batch of rewards, or a queue at the back-pressure bound.
  bool QueueMustRunLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // The same, or a deferrable operation that has waited ApplyDelay() by `now`.
  bool QueueDueLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Takes the queue's front, keeping the counts of deferrable operations.
  Pending PopQueuedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Waits until `seq` is durable per the sync policy.
  absl::Status WaitDurable(uint64_t seq, absl::Time deadline);
  // Submits an administrative operation (after back-pressure) and waits until it is applied and
  // durable. `reserved`: user slots ReserveUsers took for it, released if it is not logged.
  absl::StatusOr<EdgeEditResult> SubmitAndWait(ModelOp op, absl::Time deadline,
                                               const std::vector<std::string>& reserved = {})
      ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // Closes an entry now, logging it.
  absl::Status CloseLocked(LedgerEntry* entry, ClosedAs how, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  // Reward's answer under the ledger lock: joins the report with its decision (one lookup),
  // logs the accepted reports and records them. *wait_for: the record to wait for.
  absl::StatusOr<RewardResult> JoinAndLogLocked(const RewardRequest& request, absl::Time now,
                                                uint64_t* wait_for)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_);
  // Capacity checks before accepted FIRST rewards are logged: the exact GP's size, the user
  // table (reserving the user's slot).
  absl::Status CheckRewardCapacityLocked(const LedgerEntry& entry, size_t rewards)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Reserves user-table slots for the ids not registered yet (so that concurrent edits cannot
  // together exceed max_users). Returns false when the limit refuses them.
  // Reserves user slots for `ids` (false if they would exceed max_users); `fresh` receives the
  // ids newly reserved, to be released with ReleaseUsers if the edit is not logged.
  bool ReserveUsers(const std::vector<std::string>& ids, std::vector<std::string>* fresh)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Whether `more` users beyond the registered and reserved ones fit under max_users. A user the
  // writer has just registered stays reserved until its callback releases the slot: counted
  // twice there, so a refusal is checked again counting such users once.
  bool UsersFitLocked(int64_t more) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  void ReleaseUsers(const std::vector<std::string>& ids) ABSL_LOCKS_EXCLUDED(queue_mu_);

  // ---- cluster mode (model_replicated.cc) ----
  bool replicated() const { return replication_.log != nullptr; }
  // Appends `record` to the shared log (retrying with the same record id while the outcome is
  // unknown) and waits until this node has applied it. The completion's resolution says what it
  // amounted to. UNAVAILABLE when the shared log did not take it, DEADLINE_EXCEEDED when it was
  // not applied here by `deadline` (it still will be).
  absl::StatusOr<std::shared_ptr<OpCompletion>> PublishAndWait(const ReplicatedRecord& record,
                                                               absl::Time deadline)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  // The append alone: registers `completion` (a fresh one if null) under the record's id, which
  // it returns in `id`, so that the writer knows the record as this node's own.
  absl::StatusOr<uint64_t> PublishOnly(const ReplicatedRecord& record, absl::Time deadline,
                                       std::shared_ptr<OpCompletion> completion = nullptr,
                                       std::string* id = nullptr) ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::StatusOr<Decision> FinishReplicatedSelect(DecideOp op, Decision decision,
                                                  absl::Time deadline);
  absl::StatusOr<RewardResult> ReplicatedReward(const RewardRequest& request, absl::Time now,
                                                absl::Time deadline);
  absl::StatusOr<ActivationResult> ReplicatedActivate(const std::string& event_id, absl::Time now,
                                                      absl::Time deadline);
  int ReplicatedExpireDue(absl::Time now) ABSL_LOCKS_EXCLUDED(ledger_mu_);
  // Reads the shared log into the writer's queue (the feeder thread).
  void FeedLoop() ABSL_LOCKS_EXCLUDED(queue_mu_);
  void StopFeeding() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Waits until everything in the shared log when called is applied here.
  absl::Status CatchUp();
  // The writer's step for one record of the shared log: resolve it against the ledger, apply
  // the result to the ledger and the learned state, fill in the waiter's completion.
  absl::Status ApplyReplicated(const Pending& pending, EdgeEditResult* result)
      ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // Whether a hyper-parameter record repeats what another node's record already applied (each
  // replica runs the same fit when it is due, and publishes the outcome).
  bool HyperparametersStale(const HyperparametersOp& op) const;

  // ---- the writer thread (model_writer.cc) ----
  void WriterLoop() ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  void ApplyBatch(std::deque<Pending>* batch) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Applies the queued operations with sequence numbers up to `seq`.
  void ApplyUpTo(uint64_t seq) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Back-pressure before a reward or graph edit is logged (see max_queued()). WaitForRoom
  // returns OK once the writer's queue is below the bound (or the model is shutting down), and
  // RESOURCE_EXHAUSTED if `deadline` passes first. The caller then takes the ledger lock (under
  // which every append happens) and appends only if HasRoom() still holds, else waits again:
  // so the bound holds for rewards and edits however many callers wait. A reward passes its
  // event id and arrival time: while it waits, the expiry sweep leaves that decision open if the
  // reward arrived within the decision's window, so waiting does not make an on-time reward
  // LATE. A caller whose `wait` ends up registered calls DoneWaiting(event_id) once joined.
  struct RoomWait {
    bool delayed = false;     // counted in writes_delayed
    bool registered = false;  // in waiting_rewards_
  };
  absl::Status WaitForRoom(absl::Time deadline, RoomWait* wait,
                           const std::string* event_id = nullptr,
                           absl::Time arrival = absl::InfinitePast())
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  bool HasRoomLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // When learning is durability.max_learning_lag behind, a decision waits for the writer to
  // catch up, at most that long and at most half its remaining time, and is then served either
  // way: callers in a closed loop slow to the rate the model learns, instead of the rewards'
  // freshness growing with the queue (or the rewards being refused).
  void PaceDecision(absl::Time deadline) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // The learning lag the back-pressure bounds: how long ago the oldest acknowledged reward not
  // yet learned was acknowledged, or, if longer, the writer's time for all those waiting.
  absl::Duration LearningLagLocked(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  void DoneWaiting(const std::string& event_id) ABSL_LOCKS_EXCLUDED(queue_mu_);
  void Publish(uint64_t version) ABSL_LOCKS_EXCLUDED(view_mu_);
  void MarkDecided() ABSL_LOCKS_EXCLUDED(queue_mu_);  // decided_seq_ = applied_seq_
  // A snapshot's steps (core/model/snapshots.h); step 3 is SnapshotWriter::Write.
  // StartSnapshot (the writer) runs steps 1 and 2 and hands step 3 to the background thread;
  // FinishSnapshot (the writer, then Shutdown) answers the requests it took once it is done.
  void StartSnapshot() ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  void FinishSnapshot();
  void AnswerSnapshot(const absl::StatusOr<uint64_t>& taken,
                      const std::vector<std::shared_ptr<OpCompletion>>& waiters);
  absl::StatusOr<PreparedSnapshot> BeginSnapshotLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::StatusOr<PreparedSnapshot> CompleteSnapshotState(absl::StatusOr<PreparedSnapshot> prepared)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::StatusOr<uint64_t> TakeSnapshot() ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // Batches (core/model/learned_state.h): logs a LearnOp for the observations the state staged
  // beyond those a LearnOp of this node already asked for (single node: appended to the log;
  // cluster mode: published to the shared log). False when it could not be logged now (a
  // degraded log, a shutdown, the shared log unreachable): the writer tries again.
  bool RequestLearning() ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  bool RequestLearningBatch() ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  // Everything through `target` learned, or applied while the local log is degraded (no LearnOp
  // can be logged until it is repaired): what WaitForWriter and WaitForFits wait for.
  bool LearnedOrBlocked(uint64_t target) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // When the staged rewards not asked for yet are due for their LearnOp: at once
  // (InfinitePast) when a whole batch waits, else nystrom.max_learn_delay after the oldest's
  // record was logged (or staged, for records read from the shared log or restored).
  absl::Time LearnDueAt() const;
  // After the writer applied a record that staged observations: remembers their record, its
  // acknowledgement and when it was logged (`logged`, InfinitePast if unknown: then now), for
  // the freshness measured when they are learned, for learned_seq_ and for LearnDueAt.
  void NoteStaged(int64_t from, uint64_t seq, absl::Time acknowledged, absl::Time logged);
  // The records before the oldest staged observation's (all of them when nothing is staged).
  uint64_t LearnedThrough(uint64_t applied) const;
  // FitScheduler::Host.
  absl::Status LogHyperparameters(HyperparametersOp op) override
      ABSL_LOCKS_EXCLUDED(ledger_mu_, queue_mu_);
  void AddFitsInFlight(int delta) override ABSL_LOCKS_EXCLUDED(queue_mu_);

  const ModelOptions options_;
  const Durability durability_;
  const Replication replication_;
  // Cluster mode: record ids are this prefix (node id and a random value per opening, so that a
  // restarted node never repeats an id the shared log still remembers) and a counter.
  const std::string record_prefix_;
  std::atomic<uint64_t> records_published_{0};
  std::atomic<uint64_t> shared_log_seq_{0};
  std::atomic<int64_t> records_unreadable_{0};
  std::thread feeder_;
  const std::optional<StateDirectory> dir_;  // empty: in memory only
  RecoveryReport recovery_;                  // set by Open
  const int64_t max_queued_;
  int64_t writes_delayed_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int64_t writes_refused_behind_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int64_t decisions_paced_ ABSL_GUARDED_BY(queue_mu_) = 0;
  absl::Duration decision_pacing_ ABSL_GUARDED_BY(queue_mu_);
  // Acknowledged rewards logged and not yet applied (record, acknowledgement), oldest first,
  // and the acknowledgement of the oldest staged one the writer has not learned yet
  // (InfiniteFuture: none): the learning lag back-pressure reads (LearningLagLocked).
  std::deque<std::pair<uint64_t, absl::Time>> unapplied_rewards_ ABSL_GUARDED_BY(queue_mu_);
  absl::Time oldest_staged_acknowledged_ ABSL_GUARDED_BY(queue_mu_) = absl::InfiniteFuture();
  // Rewards staged and not learned yet, and the writer's recent time per learned reward (its
  // LearnOps' wall time over the rewards they learned, smoothed; zero before the first).
  int64_t staged_unlearned_ ABSL_GUARDED_BY(queue_mu_) = 0;
  absl::Duration learn_cost_ ABSL_GUARDED_BY(queue_mu_) = absl::ZeroDuration();
  double learn_seconds_ ABSL_GUARDED_BY(queue_mu_) = 0.0;  // decayed sums behind learn_cost_
  double learn_count_ ABSL_GUARDED_BY(queue_mu_) = 0.0;
  // Rewards in WaitForRoom (or just past it) by event id: how many callers wait, and the
  // earliest arrival among them.
  struct WaitingReward {
    int callers = 0;
    absl::Time arrival = absl::InfiniteFuture();
  };
  absl::flat_hash_map<std::string, WaitingReward> waiting_rewards_ ABSL_GUARDED_BY(queue_mu_);
  // Signalled when the writer has applied a batch (room may have appeared) and at shutdown;
  // only WaitForRoom and PaceDecision wait on it, so appends do not wake the waiting callers.
  CondVar room_cv_;
  std::atomic<int64_t> decisions_{0};
  std::atomic<int64_t> unlogged_decisions_{0};
  // Shared with the learned state (which registers users); thread-safe.
  const std::shared_ptr<UserRegistry> registry_;
  // Null when in memory only. Set before the threads start; thread-safe (operation_log.h).
  std::unique_ptr<OperationLog> log_;

  mutable Mutex ledger_mu_;
  const std::unique_ptr<DecisionLedger> ledger_ ABSL_PT_GUARDED_BY(ledger_mu_);

  // Owned by the writer thread (by Open before it starts, by Shutdown after it stopped).
  std::unique_ptr<LearnedState> state_;
  // Batches: each staged observation's ordinal, record and acknowledgement (InfinitePast for
  // those restored at start), oldest first; and the staged total the last LearnOp this node
  // logged asked for.
  struct StagedReward {
    int64_t ordinal;
    uint64_t seq;
    absl::Time acknowledged;
    absl::Time staged_at;  // when its record was logged (or, if unknown, staged)
  };
  std::deque<StagedReward> staged_rewards_;
  int64_t learn_requested_ = 0;
  FitScheduler fits_;         // its stats are thread-safe
  SnapshotWriter snapshots_;  // its stats are thread-safe
  // Writer-owned: the requests the snapshot being written in the background answers.
  std::vector<std::shared_ptr<OpCompletion>> snapshot_answering_;

  mutable Mutex queue_mu_;
  CondVar queue_cv_;
  std::deque<Pending> queue_ ABSL_GUARDED_BY(queue_mu_);
  // Of queue_: the deferrable operations, and the observations they stage.
  int64_t deferrable_queued_ ABSL_GUARDED_BY(queue_mu_) = 0;
  int64_t observations_queued_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Set by the writer: whether the learner stages rewards (LearnsInBatches), and how many
  // staged rewards no LearnOp asked for yet when it last looked.
  bool stages_rewards_ ABSL_GUARDED_BY(queue_mu_) = false;
  int64_t staged_waiting_ ABSL_GUARDED_BY(queue_mu_) = 0;
  uint64_t next_seq_ ABSL_GUARDED_BY(queue_mu_) = 1;
  uint64_t applied_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Every reward of the records up to here is learned and published (applied_seq_ less the
  // records whose rewards wait in a batch): what WaitForVersion and WaitForWriter wait for.
  uint64_t learned_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Applied and past the fit decisions (FitScheduler::AfterBatch); WaitForFits waits on it.
  uint64_t decided_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  std::shared_ptr<const std::function<void()>> after_apply_hook_ ABSL_GUARDED_BY(queue_mu_);
  int64_t rewards_held_ ABSL_GUARDED_BY(queue_mu_) = 0;
  Dimensions dims_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool snapshot_requested_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool draining_ ABSL_GUARDED_BY(queue_mu_) = false;   // BeginShutdown: waits for versions end
  bool fit_ready_ ABSL_GUARDED_BY(queue_mu_) = false;  // the fit worker has an outcome waiting
  int fits_in_flight_ ABSL_GUARDED_BY(queue_mu_) = 0;  // started and not yet logged or dropped
  std::vector<std::shared_ptr<OpCompletion>> snapshot_waiters_ ABSL_GUARDED_BY(queue_mu_);
  // Cluster mode: this node's records on their way through the shared log, by record id.
  absl::flat_hash_map<std::string, std::shared_ptr<OpCompletion>> awaiting_
      ABSL_GUARDED_BY(queue_mu_);
  bool feed_stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  // The feeder stopped for good: the shared log no longer holds the next record (DATA_LOSS).
  absl::Status feed_error_ ABSL_GUARDED_BY(queue_mu_);
  // Users a pending operation will register (counted against max_users before they exist).
  absl::flat_hash_set<std::string> reserved_users_ ABSL_GUARDED_BY(queue_mu_);

  mutable Mutex view_mu_;
  std::shared_ptr<const ModelView> view_ ABSL_GUARDED_BY(view_mu_);

  mutable Mutex stats_mu_;
  FreshnessStats freshness_ ABSL_GUARDED_BY(stats_mu_);

  // What the model's named features looked like since the server started, per side; created
  // once the side's slot count is known (not persisted: counted afresh after a restart).
  mutable Mutex features_mu_;
  std::optional<FeatureCatalog> context_catalog_ ABSL_GUARDED_BY(features_mu_);
  std::optional<FeatureCatalog> arm_catalog_ ABSL_GUARDED_BY(features_mu_);
  // Per side, the count at which each number's scale was last considered for a freeze
  // (CollectScaleFreezes).
  absl::flat_hash_map<uint64_t, int64_t> context_scales_considered_ ABSL_GUARDED_BY(features_mu_);
  absl::flat_hash_map<uint64_t, int64_t> arm_scales_considered_ ABSL_GUARDED_BY(features_mu_);

  std::thread writer_;
  absl::Notification writer_done_;  // WriterLoop returned
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_MODEL_H_
