// The model's lifecycle: construction, Open and its steps (recovery, the log, the threads, the
// configured edge list, the starting serving mode), snapshots on request, and shutdown.
#include "core/model/model.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/base/thread_priority.h"
#include "core/graph/edge_list.h"

namespace graphbandit {

constexpr double FreshnessStats::kBounds[];

namespace {

// Cluster mode: the prefix of this opening's record ids (see Model::record_prefix_).
std::string RecordPrefix(const Replication& replication) {
  if (replication.log == nullptr) return "";
  std::random_device device;
  const uint64_t nonce = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%s/%016x/", replication.node_id, nonce);
}

}  // namespace

absl::string_view RewardOutcomeName(RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::kAccepted:
      return "accepted";
    case RewardOutcome::kDuplicate:
      return "duplicate";
    case RewardOutcome::kLate:
      return "late";
    case RewardOutcome::kUnknownEvent:
      return "unknown_event";
  }
  return "unknown";
}

Model::Model(const ModelOptions& options, const Durability& durability,
             std::optional<StateDirectory> dir, RecoveredState recovered, Replication replication)
    : options_(options),
      durability_(durability),
      replication_(std::move(replication)),
      record_prefix_(RecordPrefix(replication_)),
      dir_(std::move(dir)),
      recovery_(std::move(recovered.report)),
      max_queued_(durability.max_queued_operations > 0 ? durability.max_queued_operations
                  : durability.snapshot_every_records > 0
                      ? std::max<int64_t>(durability.snapshot_every_records / 2, 64)
                      : 50'000),
      registry_(recovered.state->registry()),
      ledger_(std::move(recovered.ledger)),
      state_(std::move(recovered.state)),
      fits_(options_, this,
            [this] {
              MutexLock lock(&queue_mu_);
              fit_ready_ = true;
              queue_cv_.SignalAll();
            }),
      snapshots_(dir_.has_value() ? &*dir_ : nullptr, durability.snapshot_every_records) {
  // A user registered by the writer no longer needs the slot reserved for it.
  state_->set_on_user_registered([this](const std::string& id) {
    MutexLock lock(&queue_mu_);
    reserved_users_.erase(id);
  });
  if (dir_.has_value() && !replicated()) {
    log_ = std::make_unique<OperationLog>(options_.name, durability_);
  }
}

Model::~Model() { Shutdown(); }

// ---------------------------------------------------------------------------------------------
// Opening: recover the state, start the log and the threads, apply the configured edge list.

absl::StatusOr<std::unique_ptr<Model>> Model::Open(const ModelOptions& options,
                                                   const std::string& state_dir,
                                                   const Durability& durability,
                                                   const Replication& replication) {
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  if (replication.log != nullptr && replication.node_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": cluster mode needs this node's id", options.name));
  }
  if (!options.servable()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": policy %s is one of the papers' baselines, which only "
                        "the simulator runs; a model cannot serve it",
                        options.name, PolicyName(options.policy)));
  }
  std::optional<StateDirectory> dir;
  absl::StatusOr<RecoveredState> recovered;
  if (state_dir.empty()) {
    recovered = NewModelState(options);
  } else {
    absl::StatusOr<StateDirectory> created =
        StateDirectory::Create(absl::StrCat(state_dir, "/", options.name));
    if (!created.ok()) return created.status();
    dir = *std::move(created);
    if (replication.log != nullptr && !dir->Segments().empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": %s holds a local log (written by a single node); in cluster mode the "
          "model's log is the shared one. Start in cluster mode with an empty state directory",
          options.name, dir->path()));
    }
    recovered = RecoverModelState(options, *dir);
  }
  if (!recovered.ok()) return recovered.status();
  const uint64_t next_seq = recovered->next_seq;
  if (replication.log != nullptr) {
    // A snapshot from beyond the shared log's end belongs to another (older) shared log.
    absl::StatusOr<uint64_t> last = replication.log->LastSeqWaiting(replication.catch_up_timeout);
    if (!last.ok()) return last.status();
    if (*last < next_seq - 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the newest snapshot is at record %d of the shared log, which holds only "
          "%d records: the snapshot belongs to another shared log. Move the state directory "
          "away to start from the shared log alone",
          options.name, next_seq - 1, *last));
    }
  }
  std::unique_ptr<Model> model(
      new Model(options, durability, std::move(dir), *std::move(recovered), replication));
  if (absl::Status s = model->StartLog(next_seq); !s.ok()) return s;
  if (model->recovery_.damaged_bytes > 0 || !model->recovery_.records_lost.empty() ||
      !model->recovery_.records_dropped.empty() || model->recovery_.records_repeated > 0) {
    // Recovery passed over damage (or missing or repeated records) in the middle of the log. A
    // snapshot now means the next start does not read and report them again; a copy of the
    // damaged bytes stays beside the log.
    if (absl::StatusOr<uint64_t> taken = model->TakeSnapshot(); !taken.ok()) {
      LogWarning(absl::StrFormat(
          "model \"%s\": the snapshot after recovering from damage failed: %s; the damage will "
          "be reported again at the next start",
          options.name, taken.status().message()));
    }
  }
  model->StartThreads();
  if (model->replicated()) {
    // Applies what the other nodes logged before the edge list is compared with the graph.
    if (absl::Status s = model->CatchUp(); !s.ok()) return s;
  }
  if (absl::Status s = model->ApplyEdgeListFile(); !s.ok()) return s;
  if (absl::Status s = model->StartApprenticeship(); !s.ok()) return s;
  return model;
}

absl::Status Model::StartLog(uint64_t next_seq) {
  {
    MutexLock lock(&queue_mu_);
    next_seq_ = next_seq;
    applied_seq_ = next_seq - 1;
    decided_seq_ = next_seq - 1;
    // Observations the snapshot or the replayed log left staged: their records are at or before
    // the last one applied; the writer asks for their batch first.
    learn_requested_ = state_->learned_through();
    for (int64_t o = state_->learned_through(); o < state_->staged_total(); ++o) {
      // Their records are somewhere before next_seq: seq 1 keeps learned_seq_ (what
      // min_model_version waits for) at 0 until a LearnOp learns them.
      staged_rewards_.push_back(StagedReward{o, 1, absl::InfinitePast(), absl::InfinitePast()});
    }
    learned_seq_ = LearnedThrough(applied_seq_);
    rewards_held_ = state_->history_size();
    dims_ = state_->dimensions();
    if (log_ != nullptr) {
      if (absl::Status s = log_->StartSegment(dir_->SegmentPath(next_seq), next_seq - 1); !s.ok()) {
        return s;
      }
    }
  }
  if (log_ != nullptr) log_->MarkSynced(next_seq - 1);
  Publish(next_seq - 1);
  // After a restart the next fit waits for the rewards to grow as after a fit.
  state_->DeferNextFitAfterRestart();
  return absl::OkStatus();
}

void Model::StartThreads() {
  writer_ = std::thread([this] {
    SetThreadName("gb-writer");
    WriterLoop();
    writer_done_.Notify();
  });
  if (log_ != nullptr) log_->StartThreads();
  if (replicated()) {
    feeder_ = std::thread([this] {
      SetThreadName("gb-feeder");
      FeedLoop();
    });
  }
}

absl::Status Model::ApplyEdgeListFile() {
  if (options_.edge_list_file.empty()) return absl::OkStatus();
  // Applied as one logged edit of the edges that are missing or weighted differently, so an
  // unchanged file adds nothing to the log on restart.
  auto edges = ReadEdgeList(options_.edge_list_file);
  if (!edges.ok()) return edges.status();
  SetEdgesOp changes;
  if (replicated()) {
    // The writer is busy with the other nodes' records: its graph cannot be read here. The
    // whole list is published (one record per start of a node; unchanged edges stay as they are).
    changes.edges = *std::move(edges);
  } else {
    // The writer is idle (nothing is queued yet), so reading its graph here is safe; the
    // queue lock orders this read after its start.
    MutexLock lock(&queue_mu_);
    for (EdgeEdit& edge : *edges) {
      const int32_t a = registry_->Find(edge.user_a);
      const int32_t b = registry_->Find(edge.user_b);
      if (a < 0 || b < 0 || state_->graph().Weight(a, b) != edge.weight) {
        changes.edges.push_back(std::move(edge));
      }
    }
  }
  if (changes.edges.empty()) return absl::OkStatus();
  auto applied = SubmitAndWait(std::move(changes), absl::InfiniteFuture());
  if (!applied.ok()) return applied.status();
  return absl::OkStatus();
}

absl::Status Model::StartApprenticeship() {
  std::shared_ptr<const ModelView> view = View();
  if (view->apprentice && !(options_.evaluation_epsilon > 0.0)) {
    LogWarning(absl::StrFormat(
        "model \"%s\" is an apprentice but has no evaluation share (evaluation.epsilon 0): it "
        "serves the baseline arm and cannot estimate its lift; set evaluation.epsilon, or switch "
        "it with AdminService.SetServingMode(SERVING)",
        options_.name));
  }
  // Only a model that has learned nothing and never switched: the configuration says how a new
  // model starts, and the log says it from then on (a kStart switch after any other is void).
  if (!options_.apprentice_start || view->last_switch.has_value() ||
      view->rewards_learned + view->rewards_staged > 0) {
    return absl::OkStatus();
  }
  ServingModeOp op;
  op.apprentice = true;
  op.reason = ServingSwitch::kStart;
  op.rule = options_.apprentice;
  return SubmitAndWait(op, absl::InfiniteFuture()).status();
}

// ---------------------------------------------------------------------------------------------
// Snapshots on request, shutdown.

absl::StatusOr<uint64_t> Model::Snapshot() {
  auto waiter = std::make_shared<OpCompletion>();
  {
    MutexLock lock(&queue_mu_);
    if (stopping_) return absl::UnavailableError("the model is shutting down");
    snapshot_requested_ = true;
    snapshot_waiters_.push_back(waiter);
    queue_cv_.SignalAll();
  }
  waiter->done.Wait();
  if (!waiter->status.ok()) return waiter->status;
  return waiter->seq;
}

void Model::BeginShutdown() {
  // A fit could not land any more: it stops now (it ends by itself; Shutdown waits for it last).
  fits_.RequestStop();
  MutexLock lock(&queue_mu_);
  draining_ = true;
  queue_cv_.SignalAll();
  room_cv_.SignalAll();
}

bool Model::Shutdown(absl::Time deadline) {
  {
    MutexLock lock(&queue_mu_);
    if (stopped_) return true;
  }
  // A fit in progress is cancelled: its result would not be applied any more. It ends at its
  // next check, by itself, while the writer finishes; it is waited for last, so that a long
  // likelihood evaluation does not take the writer's and the final snapshot's time.
  fits_.RequestStop();
  StopFeeding();  // cluster mode: nothing more is read from the shared log
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
    queue_cv_.SignalAll();
    room_cv_.SignalAll();
  }
  if (writer_.joinable() && !writer_done_.WaitForNotificationWithDeadline(deadline)) {
    // The writer is still applying: make what was logged durable and leave it to the next
    // start's replay, instead of holding the shutdown for as long as the writer needs.
    int64_t unapplied = 0;
    {
      MutexLock lock(&queue_mu_);
      unapplied = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
    }
    LogWarning(absl::StrFormat(
        "model \"%s\": the writer is still busy at the shutdown deadline; %d logged records "
        "not yet applied will be replayed at the next start (no final snapshot)",
        options_.name, unapplied));
    if (log_ != nullptr) log_->StopThreads();
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);
    stopped_ = true;
    writer_.detach();  // and the snapshot it may be writing
    return false;
  }
  if (writer_.joinable()) writer_.join();
  {
    // Snapshot requests the writer did not get to.
    std::vector<std::shared_ptr<OpCompletion>> waiters;
    {
      MutexLock lock(&queue_mu_);
      waiters.swap(snapshot_waiters_);
    }
    for (auto& waiter : waiters) {
      waiter->status = absl::UnavailableError("the model is shutting down");
      waiter->done.Notify();
    }
  }
  if (!snapshots_.WaitForBackground(deadline)) {
    // A snapshot the writer started is still being written (it gets only idle cycles): it is
    // left to finish, the log is synced and closed, and there is no final snapshot.
    LogWarning(absl::StrFormat(
        "model \"%s\": a snapshot is still being written at the shutdown deadline; the next "
        "start replays the log after the newest one written (no final snapshot)",
        options_.name));
    AnswerSnapshot(absl::UnavailableError("the model is shutting down"), snapshot_answering_);
    snapshot_answering_.clear();
    if (log_ != nullptr) log_->StopThreads();
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);
    stopped_ = true;
    return false;
  }
  FinishSnapshot();  // answers the requests of the one the writer started
  if (!replicated() && state_->staged() > 0) {
    // The writer has applied everything but a batch still staged: learn it before the final
    // snapshot (a LearnOp in the log, as the writer would have logged).
    absl::StatusOr<uint64_t> seq;
    {
      MutexLock ledger(&ledger_mu_);
      MutexLock lock(&queue_mu_);
      stopping_ = false;
      seq = AppendLocked(ModelOp(LearnOp{state_->staged_total()}), nullptr, absl::InfinitePast());
      stopping_ = true;
    }
    if (seq.ok()) ApplyUpTo(*seq);
  }
  {
    // The writer has applied everything; a final snapshot if anything changed since the last.
    MutexLock ledger(&ledger_mu_);
    if (dir_.has_value() && snapshots_.Unsaved()) {
      {
        MutexLock lock(&queue_mu_);
        stopping_ = false;  // let the snapshot's segment rotation through
      }
      absl::StatusOr<PreparedSnapshot> prepared = CompleteSnapshotState(BeginSnapshotLocked());
      absl::StatusOr<uint64_t> taken =
          prepared.ok() ? snapshots_.Write(*std::move(prepared)) : prepared.status();
      if (!taken.ok()) {
        LogWarning(absl::StrFormat("model \"%s\": final snapshot failed: %s", options_.name,
                                   taken.status().message()));
      }
      MutexLock lock(&queue_mu_);
      stopping_ = true;
      queue_cv_.SignalAll();  // waiters (WaitForFits, WaitForWriter) see stopping_ again
      room_cv_.SignalAll();
    }
  }
  if (log_ != nullptr) log_->StopThreads();
  {
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);  // syncs what was logged; appends end here
    stopped_ = true;
  }
  // Everything is durable; a fit still in a likelihood evaluation at the deadline is left to
  // end by itself, and the model must then not be destroyed under it (false).
  if (!fits_.Stop(deadline)) {
    LogWarning(absl::StrFormat(
        "model \"%s\": a hyper-parameter fit is still in a likelihood evaluation at the shutdown "
        "deadline; it is abandoned (the log is closed and the final snapshot written)",
        options_.name));
    return false;
  }
  return true;
}

}  // namespace graphbandit
