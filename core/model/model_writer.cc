// The model's writer thread: applies logged operations to the learned state in log order,
// publishes views, takes snapshots, and lets the fit scheduler decide after each batch.
#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/log.h"
#include "core/model/model.h"

namespace graphbandit {

void Model::WriterLoop() {
  for (;;) {
    // Staged rewards not asked for yet are asked for (a LearnOp logged) once a whole batch
    // waits, or the oldest has waited nystrom.max_learn_delay; until then the writer waits for
    // that moment as well as for records. A LearnOp that could not be logged is tried again
    // 100 ms later.
    absl::Time learn_at = absl::InfiniteFuture();
    // What a graph edit, a fit or another replica's LearnOp learned needs no LearnOp of ours.
    learn_requested_ = std::max(learn_requested_, state_->learned_through());
    if (state_->staged_total() > learn_requested_) {
      learn_at = LearnDueAt();
      if (learn_at <= absl::Now()) {
        learn_at =
            RequestLearning() ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(100);
      }
    }
    // While a snapshot is written in the background the writer looks every few milliseconds
    // whether it is done (the background thread wakes nobody: it takes no lock the writer or
    // the callers wait for), then answers its requests and takes one due or asked for since.
    const bool writing = snapshots_.Started();
    if (writing) learn_at = std::min(learn_at, absl::Now() + absl::Milliseconds(5));
    const int64_t staged_waiting = state_->staged_total() - learn_requested_;
    const bool stages = state_->learner() != nullptr && state_->learner()->LearnsInBatches();
    std::deque<Pending> batch;
    bool snapshot = false;  // one was asked for
    std::shared_ptr<const std::function<void()>> hook;
    {
      MutexLock lock(&queue_mu_);
      staged_waiting_ = staged_waiting;
      stages_rewards_ = stages;
      const auto must_run = [this, writing]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stopping_ || (snapshot_requested_ && !writing) || fit_ready_ ||
               QueueDueLocked(absl::Now());
      };
      // Deferrable operations (Model::DeferrableLocked) wait up to ApplyDelay() from the oldest,
      // so that one wake-up applies the decisions and rewards of several requests.
      for (;;) {
        const bool empty = queue_.empty();
        const absl::Time until =
            empty ? learn_at : std::min(learn_at, queue_.front().queued + ApplyDelay());
        queue_cv_.WaitUntil(&queue_mu_, until, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
          return must_run() || queue_.empty() != empty;
        });
        if (must_run() || absl::Now() >= until) break;
      }
      if (queue_.empty() && stopping_) return;  // everything logged is applied
      // A batch ends with a LearnOp: what it learned is published before the writer goes on
      // (freshness), however long the queue.
      while (!queue_.empty()) {
        const bool learns = std::holds_alternative<LearnOp>(queue_.front().op);
        batch.push_back(PopQueuedLocked());
        if (learns) break;
      }
      snapshot = snapshot_requested_;
      fit_ready_ = false;
      hook = after_apply_hook_;
    }
    ApplyBatch(&batch);
    if (hook != nullptr) (*hook)();
    fits_.AfterBatch(state_.get());
    MarkDecided();
    // One snapshot is written at a time. One due or asked for while the previous is still
    // being written waits for it, and the writer goes on applying meanwhile: on a core
    // saturated by decisions, that write, which takes only idle cycles, may take a while, and
    // learning must not wait for it.
    FinishSnapshot();
    if (snapshots_.Started() || (!snapshot && !snapshots_.Due())) continue;
    StartSnapshot();
    // The snapshot applied what was logged up to its point: decide fits for that too.
    fits_.AfterBatch(state_.get());
    MarkDecided();
  }
}

void Model::StartSnapshot() {
  std::vector<std::shared_ptr<OpCompletion>> waiters;
  {
    MutexLock lock(&queue_mu_);
    snapshot_requested_ = false;
    waiters.swap(snapshot_waiters_);
  }
  absl::StatusOr<PreparedSnapshot> prepared;
  {
    MutexLock ledger(&ledger_mu_);
    prepared = BeginSnapshotLocked();
  }
  prepared = CompleteSnapshotState(std::move(prepared));
  if (!prepared.ok() || !snapshots_.persistent()) {
    AnswerSnapshot(prepared.ok() ? absl::StatusOr<uint64_t>(prepared->seq) : prepared.status(),
                   waiters);
    return;
  }
  snapshot_answering_ = std::move(waiters);
  snapshots_.WriteInBackground(*std::move(prepared));
}

void Model::FinishSnapshot() {
  std::optional<absl::StatusOr<uint64_t>> taken = snapshots_.TakeResult();
  if (!taken.has_value()) return;
  AnswerSnapshot(*taken, snapshot_answering_);
  snapshot_answering_.clear();
}

void Model::AnswerSnapshot(const absl::StatusOr<uint64_t>& taken,
                           const std::vector<std::shared_ptr<OpCompletion>>& waiters) {
  if (!taken.ok()) {
    LogWarning(absl::StrFormat("model \"%s\": snapshot failed: %s", options_.name,
                               taken.status().message()));
  }
  for (const auto& waiter : waiters) {
    waiter->status = taken.status();
    waiter->seq = taken.ok() ? *taken : 0;
    waiter->done.Notify();
  }
}

void Model::ApplyBatch(std::deque<Pending>* batch) {
  if (batch->empty()) return;
  absl::Duration learning = absl::ZeroDuration();  // spent in LearnOps
  int64_t learned = 0;                             // rewards they learned
  for (Pending& pending : *batch) {
    const int64_t staged_before = state_->staged_total();
    EdgeEditResult result;
    absl::Status status;
    if (pending.replicated != nullptr) {
      status = ApplyReplicated(pending, &result);
    } else {
      const bool learns = std::holds_alternative<LearnOp>(pending.op);
      const absl::Time started = learns ? absl::Now() : absl::InfinitePast();
      const int64_t learned_before = state_->rewards_learned();
      status = state_->Apply(pending.op, &result);
      if (learns) {
        learning += absl::Now() - started;
        learned += state_->rewards_learned() - learned_before;
      }
      if (std::holds_alternative<HyperparametersOp>(pending.op)) fits_.HyperparametersApplied();
      if (!status.ok()) {
        LogWarning(absl::StrFormat("model \"%s\": operation %d not applied: %s", options_.name,
                                   pending.seq, status.message()));
      }
    }
    if (pending.completion != nullptr) {
      pending.completion->status = status;
      pending.completion->result = result;
    }
    if (state_->staged_total() > staged_before) {
      // Staged rewards count towards freshness when a LearnOp learns them (below), not now.
      NoteStaged(staged_before, pending.seq, pending.acknowledged, pending.queued);
      pending.acknowledged = absl::InfinitePast();
    }
  }
  Publish(batch->back().seq);
  const absl::Time published = absl::Now();
  {
    MutexLock lock(&stats_mu_);
    const auto count = [&](absl::Time acknowledged) ABSL_EXCLUSIVE_LOCKS_REQUIRED(stats_mu_) {
      if (acknowledged == absl::InfinitePast()) return;
      const double seconds = absl::ToDoubleSeconds(published - acknowledged);
      ++freshness_.count;
      freshness_.sum += seconds;
      for (int b = 0; b < FreshnessStats::kBuckets; ++b) {
        if (seconds <= FreshnessStats::kBounds[b]) ++freshness_.buckets[b];
      }
    };
    for (const Pending& pending : *batch) count(pending.acknowledged);
    // Staged rewards that a LearnOp of this batch learned.
    while (!staged_rewards_.empty() &&
           staged_rewards_.front().ordinal < state_->learned_through()) {
      count(staged_rewards_.front().acknowledged);
      staged_rewards_.pop_front();
    }
  }
  snapshots_.CountApplied(static_cast<int64_t>(batch->size()));
  {
    MutexLock lock(&queue_mu_);
    applied_seq_ = batch->back().seq;
    learned_seq_ = LearnedThrough(applied_seq_);
    while (!unapplied_rewards_.empty() && unapplied_rewards_.front().first <= applied_seq_) {
      unapplied_rewards_.pop_front();
    }
    staged_unlearned_ = state_->staged();
    if (learned > 0) {
      // Decayed sums, so that one slow batch (a refit's switch) weighs by its rewards, not as
      // a sample of its own.
      learn_seconds_ = 0.9 * learn_seconds_ + absl::ToDoubleSeconds(learning);
      learn_count_ = 0.9 * learn_count_ + static_cast<double>(learned);
      learn_cost_ = absl::Seconds(learn_seconds_ / learn_count_);
    }
    oldest_staged_acknowledged_ = absl::InfiniteFuture();
    if (!staged_rewards_.empty()) {
      const StagedReward& oldest = staged_rewards_.front();
      oldest_staged_acknowledged_ =
          oldest.acknowledged != absl::InfinitePast() ? oldest.acknowledged : oldest.staged_at;
    }
    queue_cv_.SignalAll();
    room_cv_.SignalAll();
  }
  for (Pending& pending : *batch) {
    if (pending.completion != nullptr) pending.completion->done.Notify();
  }
  batch->clear();
}

Model::Pending Model::PopQueuedLocked() {
  Pending pending = std::move(queue_.front());
  queue_.pop_front();
  if (pending.deferrable) {
    --deferrable_queued_;
    observations_queued_ -= pending.observations;
  }
  return pending;
}

void Model::ApplyUpTo(uint64_t seq) {
  for (;;) {
    std::deque<Pending> batch;
    {
      MutexLock lock(&queue_mu_);
      while (!queue_.empty() && queue_.front().seq <= seq) batch.push_back(PopQueuedLocked());
    }
    if (batch.empty()) return;
    ApplyBatch(&batch);
  }
}

void Model::Publish(uint64_t version) {
  std::shared_ptr<const ModelView> view = state_->BuildView(version);
  std::shared_ptr<const ModelView> before;
  {
    MutexLock lock(&view_mu_);
    before = std::exchange(view_, view);
  }
  // A switch between apprentice and serving is told once, when it is published.
  if (before != nullptr && view->last_switch.has_value() &&
      !(view->last_switch == before->last_switch)) {
    const SwitchRecord& last = *view->last_switch;
    switch (last.reason) {
      case ServingSwitch::kLift:
        LogWarning(absl::StrFormat(
            "model \"%s\": the apprentice serves itself from here on: after %d rewarded "
            "decisions its estimated lift over the baseline is %.6g, lower bound %.6g > margin "
            "%.6g",
            options_.name, last.decisions, last.lift, last.lower, before->apprentice_rule.margin));
        break;
      case ServingSwitch::kAdmin:
        LogWarning(absl::StrFormat(
            "model \"%s\": an admin call switched it to %s", options_.name,
            last.apprentice ? "apprentice mode (serving the baseline arm)" : "serving itself"));
        break;
      case ServingSwitch::kStart:
        LogWarning(
            absl::StrFormat("model \"%s\" starts as an apprentice: it serves the baseline "
                            "arm until its lift over it is shown",
                            options_.name));
        break;
    }
  }
}

void Model::MarkDecided() {
  MutexLock lock(&queue_mu_);
  decided_seq_ = applied_seq_;
  queue_cv_.SignalAll();
}

absl::StatusOr<PreparedSnapshot> Model::BeginSnapshotLocked() {
  PreparedSnapshot prepared;
  {
    MutexLock lock(&queue_mu_);
    // Cluster mode: the writer itself changes the ledger, and takes snapshots (or the model is
    // opening or stopped), so the ledger is at what it applied; records read from the shared
    // log and still queued come after the snapshot.
    prepared.seq = replicated() ? applied_seq_ : next_seq_ - 1;
  }
  if (!dir_.has_value()) return prepared;
  prepared.ledger = ledger_->Capture();
  if (log_ == nullptr) return prepared;
  MutexLock lock(&queue_mu_);
  if (absl::Status s = log_->StartSegment(dir_->SegmentPath(prepared.seq + 1), prepared.seq);
      !s.ok()) {
    return s;
  }
  return prepared;
}

absl::StatusOr<PreparedSnapshot> Model::CompleteSnapshotState(
    absl::StatusOr<PreparedSnapshot> prepared) {
  if (!prepared.ok()) return prepared;
  // The writer applies what was logged up to the snapshot's sequence number (and nothing
  // after it), so the graph and the learner are at the same point as the ledger copy.
  ApplyUpTo(prepared->seq);
  snapshots_.Taken();  // the records up to here are in this snapshot
  // The learned state, into the previous snapshot's buffer (a fresh one would cost a page fault
  // per 4 KiB here); step 3 writes the ledger as captured in step 1 after it.
  if (dir_.has_value()) prepared->payload = state_->Save(prepared->seq, snapshots_.TakeBuffer());
  return prepared;
}

absl::StatusOr<uint64_t> Model::TakeSnapshot() {
  // At open, before the threads start. Only the ledger is captured under the ledger lock
  // (decisions and rewards wait that long: a pointer copy per decision and per tombstone,
  // LedgerCapture); learning up to the snapshot point, encoding and writing happen without it.
  absl::StatusOr<PreparedSnapshot> prepared;
  {
    MutexLock ledger(&ledger_mu_);
    prepared = BeginSnapshotLocked();
  }
  prepared = CompleteSnapshotState(std::move(prepared));
  if (!prepared.ok()) return prepared.status();
  return snapshots_.Write(*std::move(prepared));
}

void Model::NoteStaged(int64_t from, uint64_t seq, absl::Time acknowledged, absl::Time logged) {
  const absl::Time at = logged != absl::InfinitePast() ? logged : absl::Now();
  for (int64_t ordinal = from; ordinal < state_->staged_total(); ++ordinal) {
    staged_rewards_.push_back(StagedReward{ordinal, seq, acknowledged, at});
  }
}

absl::Time Model::LearnDueAt() const {
  if (state_->staged_total() - learn_requested_ >= options_.max_learn_batch ||
      options_.max_learn_delay <= absl::ZeroDuration()) {
    return absl::InfinitePast();
  }
  // The oldest staged reward no LearnOp of this node asked for yet; within half the learning-lag
  // bound whatever max_learn_delay says, so that a quiet model never holds callers back.
  absl::Duration delay = options_.max_learn_delay;
  if (durability_.max_learning_lag > absl::ZeroDuration()) {
    delay = std::min(delay, durability_.max_learning_lag / 2);
  }
  // staged_at is when the record was logged: the writer may have applied it up to
  // ApplyDelay() later (Model::DeferrableLocked), and that wait counts too.
  for (const StagedReward& staged : staged_rewards_) {
    if (staged.ordinal >= learn_requested_) return staged.staged_at + delay;
  }
  return absl::InfinitePast();  // restored at start (no entry): at once
}

uint64_t Model::LearnedThrough(uint64_t applied) const {
  // Entries the state learned already are dropped after each batch; the front may lag by one
  // batch only while ApplyBatch runs.
  for (const StagedReward& staged : staged_rewards_) {
    if (staged.ordinal >= state_->learned_through()) return std::min(applied, staged.seq - 1);
  }
  return applied;
}

bool Model::RequestLearning() {
  // One LearnOp per batch of at most max_learn_batch rewards (each is learned as one batch).
  while (state_->staged_total() > learn_requested_) {
    if (!RequestLearningBatch()) return false;
  }
  return true;
}

bool Model::RequestLearningBatch() {
  LearnOp op;
  op.through = std::min(state_->staged_total(),
                        learn_requested_ + static_cast<int64_t>(options_.max_learn_batch));
  if (replicated()) {
    // Every replica asks for its batches; the first LearnOp in the stream learns them, the
    // others find nothing left below their `through` (or a few later arrivals).
    absl::StatusOr<uint64_t> seq = PublishOnly(ModelOp(op), absl::Now() + absl::Seconds(5));
    if (!seq.ok()) return false;
  } else {
    MutexLock ledger(&ledger_mu_);
    MutexLock lock(&queue_mu_);
    if (!AppendLocked(ModelOp(op), nullptr, absl::InfinitePast()).ok()) {
      queue_cv_.SignalAll();  // waits that settle for a degraded log look again
      return false;
    }
  }
  learn_requested_ = op.through;
  return true;
}

absl::Status Model::LogHyperparameters(HyperparametersOp op) {
  if (replicated()) {
    // Every replica decides the same fits at the same points; the first record applied wins
    // (HyperparametersStale drops the others). Not awaited: the writer calls this.
    absl::StatusOr<uint64_t> seq =
        PublishOnly(ModelOp(std::move(op)), absl::Now() + absl::Seconds(5));
    if (!seq.ok()) return seq.status();
    MutexLock lock(&queue_mu_);
    ++fits_in_flight_;
    return absl::OkStatus();
  }
  MutexLock ledger(&ledger_mu_);
  MutexLock lock(&queue_mu_);
  absl::StatusOr<uint64_t> seq = AppendLocked(std::move(op), nullptr, absl::InfinitePast());
  if (!seq.ok()) {
    if (stopping_) return absl::CancelledError("the model is shutting down");
    return seq.status();
  }
  ++fits_in_flight_;  // with the append: WaitForFits sees the record or the fit in flight
  return absl::OkStatus();
}

void Model::AddFitsInFlight(int delta) {
  MutexLock lock(&queue_mu_);
  fits_in_flight_ += delta;
  queue_cv_.SignalAll();
}

}  // namespace graphbandit
