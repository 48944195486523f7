// Cluster mode (Replication in model.h): publishing this node's requests to the shared log,
// reading the shared log into the writer's queue, and applying its records
// (core/model/replicated_records.h).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/log.h"
#include "core/model/ledger_records.h"
#include "core/model/model.h"

namespace graphbandit {
namespace {

bool OutcomeUnknown(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

// How long the feeder waits for a record before it looks at its stop flag again.
constexpr absl::Duration kFeedPoll = absl::Milliseconds(200);
// How long an append is retried while its outcome is unknown (well within the deduplication
// window of the shared log).
constexpr absl::Duration kMaxAppendRetrying = absl::Seconds(30);

}  // namespace

absl::StatusOr<uint64_t> Model::PublishOnly(const ReplicatedRecord& record, absl::Time deadline,
                                            std::shared_ptr<OpCompletion> completion,
                                            std::string* id_out) {
  // Registered even when no one waits on it, so that the writer knows it as this node's own.
  if (completion == nullptr) completion = std::make_shared<OpCompletion>();
  const std::string id = absl::StrCat(record_prefix_, records_published_.fetch_add(1) + 1);
  if (id_out != nullptr) *id_out = id;
  {
    MutexLock lock(&queue_mu_);
    if (stopping_ || feed_stop_) {
      return absl::UnavailableError(
          absl::StrFormat("model \"%s\" is shutting down on this node", options_.name));
    }
    awaiting_[id] = std::move(completion);
  }
  const std::string message = EncodeReplicated(record);
  absl::StatusOr<uint64_t> seq;
  absl::Duration backoff = absl::Milliseconds(20);
  // Retried within the shared log's deduplication window (JetStream's default is 2 minutes),
  // so that a record stored by an attempt whose answer was lost is not stored again.
  const absl::Time last_try = std::min(deadline, absl::Now() + kMaxAppendRetrying);
  for (;;) {
    seq = replication_.log->Append(message, id);
    if (seq.ok() || !OutcomeUnknown(seq.status()) || absl::Now() + backoff >= last_try) break;
    {
      MutexLock lock(&queue_mu_);
      if (stopping_ || feed_stop_) break;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(500));
  }
  if (seq.ok()) return seq;
  {
    MutexLock lock(&queue_mu_);
    awaiting_.erase(id);
  }
  // The record may still be stored (an unknown outcome): every node applies it then, and a
  // client's retry with the same event id is answered from it.
  return absl::Status(
      OutcomeUnknown(seq.status()) ? absl::StatusCode::kUnavailable : seq.status().code(),
      absl::StrFormat("model \"%s\": the shared log did not take the record: %s", options_.name,
                      seq.status().message()));
}

absl::StatusOr<std::shared_ptr<Model::OpCompletion>> Model::PublishAndWait(
    const ReplicatedRecord& record, absl::Time deadline) {
  auto completion = std::make_shared<OpCompletion>();
  std::string id;
  absl::StatusOr<uint64_t> seq = PublishOnly(record, deadline, completion, &id);
  if (!seq.ok()) return seq.status();
  if (!completion->done.WaitUntil(deadline)) {
    {
      MutexLock lock(&queue_mu_);
      awaiting_.erase(id);
    }
    return absl::DeadlineExceededError(absl::StrFormat(
        "model \"%s\": record %d is in the shared log but this node had not applied it by the "
        "deadline (it is at %d); it will be applied, and a retry with the same event id is safe",
        options_.name, *seq, View()->version));
  }
  completion->seq = *seq;
  return completion;
}

absl::StatusOr<Decision> Model::FinishReplicatedSelect(DecideOp op, Decision decision,
                                                       absl::Time deadline) {
  auto done = PublishAndWait(ModelOp(std::move(op)), deadline);
  if (!done.ok()) return done.status();
  if (!(*done)->status.ok()) return (*done)->status;
  const Resolution& resolution = (*done)->resolution;
  if (!resolution.status.ok()) return resolution.status;
  decisions_.fetch_add(1, std::memory_order_relaxed);
  // A client's retry that reached another node first: the decision that node made.
  if (resolution.decision.has_value() && resolution.decision->replayed) return *resolution.decision;
  return decision;
}

absl::StatusOr<RewardResult> Model::ReplicatedReward(const RewardRequest& request, absl::Time now,
                                                     absl::Time deadline) {
  ReportOp op;
  op.request = request;
  op.request.model.clear();
  op.received_micros = ToMicros(now);
  auto done = PublishAndWait(std::move(op), deadline);
  if (!done.ok()) return done.status();
  if (!(*done)->status.ok()) return (*done)->status;
  const Resolution& resolution = (*done)->resolution;
  if (!resolution.status.ok()) return resolution.status;
  RewardResult result = resolution.reward;
  // The version that has learned it: this record's under FIRST; a duplicate's learning (FIRST,
  // or a closed decision's) is in an earlier record, applied by now. Windowed aggregations learn
  // when the decision closes.
  if (resolution.learned_now || result.outcome == RewardOutcome::kDuplicate) {
    result.model_version = (*done)->seq;
  }
  return result;
}

absl::StatusOr<ActivationResult> Model::ReplicatedActivate(const std::string& event_id,
                                                           absl::Time now, absl::Time deadline) {
  auto done = PublishAndWait(ActivationRequestOp{event_id, ToMicros(now)}, deadline);
  if (!done.ok()) return done.status();
  if (!(*done)->status.ok()) return (*done)->status;
  const Resolution& resolution = (*done)->resolution;
  if (!resolution.status.ok()) return resolution.status;
  ActivationResult result;
  result.outcome = resolution.activation;
  if (result.outcome != ActivationOutcome::kUnknownEvent) result.model = options_.name;
  if (resolution.learned_now) result.model_version = (*done)->seq;
  return result;
}

int Model::ReplicatedExpireDue(absl::Time now) {
  const absl::Time cutoff = now - replication_.expiry_grace;
  {
    MutexLock lock(&ledger_mu_);
    if (ledger_->Due(cutoff, kExpiryDisorder).empty()) return 0;
  }
  // Every node's sweeper may publish one; the first applied closes what is due, the others find
  // nothing left.
  auto done = PublishAndWait(ExpireOp{ToMicros(cutoff)}, absl::Now() + absl::Seconds(5));
  if (!done.ok()) {
    LogWarning(absl::StrFormat("model \"%s\": expiry not published: %s", options_.name,
                               done.status().message()));
    return 0;
  }
  return static_cast<int>((*done)->resolution.ops.size());
}

void Model::FeedLoop() {
  std::unique_ptr<SharedLog::Reader> reader;
  absl::Duration backoff = absl::Milliseconds(50);
  bool warned = false;
  for (;;) {
    uint64_t next = 0;
    {
      MutexLock lock(&queue_mu_);
      // Back-pressure: the shared log waits while the writer is max_queued() behind.
      room_cv_.Wait(&queue_mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return feed_stop_ || static_cast<int64_t>(next_seq_ - 1 - applied_seq_) < max_queued_;
      });
      if (feed_stop_) return;
      next = next_seq_;
    }
    absl::StatusOr<SharedLog::Record> record = absl::UnavailableError("no reader");
    if (reader == nullptr) {
      absl::StatusOr<std::unique_ptr<SharedLog::Reader>> opened = replication_.log->Read(next);
      if (opened.ok()) {
        reader = *std::move(opened);
      } else {
        record = opened.status();
      }
    }
    if (reader != nullptr) {
      record = reader->Next(kFeedPoll);
      if (!record.ok() && record.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
    }
    if (!record.ok() && absl::IsDataLoss(record.status())) {
      // The shared log no longer holds the records this node needs next (removed by a limit, or
      // the stream was replaced): applying what follows would diverge from the other nodes.
      LogWarning(absl::StrFormat("model \"%s\": stopped applying the shared log: %s", options_.name,
                                 record.status().message()));
      MutexLock lock(&queue_mu_);
      feed_error_ = record.status();
      queue_cv_.SignalAll();
      return;
    }
    if (!record.ok()) {
      if (!warned) {
        LogWarning(
            absl::StrFormat("model \"%s\": reading the shared log from record %d: %s; "
                            "retrying",
                            options_.name, next, record.status().message()));
        warned = true;
      }
      reader.reset();
      MutexLock lock(&queue_mu_);
      queue_cv_.WaitFor(&queue_mu_, backoff,
                        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return feed_stop_; });
      backoff = std::min(backoff * 2, absl::Seconds(2));
      continue;
    }
    warned = false;
    backoff = absl::Milliseconds(50);
    if (record->seq < next) continue;  // read again after a new reader was opened
    absl::StatusOr<ReplicatedRecord> decoded = DecodeReplicated(record->payload);
    std::shared_ptr<const ReplicatedRecord> replicated;
    if (decoded.ok()) {
      replicated = std::make_shared<const ReplicatedRecord>(*std::move(decoded));
    } else {
      // Written by a newer build, or damaged: every replica of this build skips it alike.
      records_unreadable_.fetch_add(1, std::memory_order_relaxed);
      LogWarning(
          absl::StrFormat("model \"%s\": record %d of the shared log cannot be read and "
                          "is skipped: %s",
                          options_.name, record->seq, decoded.status().message()));
      // In its place, an expiry before any decision: it changes nothing, and the positions of
      // the shared log and the model's versions stay the same.
      replicated = std::make_shared<const ReplicatedRecord>(ExpireOp{INT64_MIN});
    }
    const bool learns = std::holds_alternative<ReportOp>(*replicated) ||
                        std::holds_alternative<ActivationRequestOp>(*replicated);
    MutexLock lock(&queue_mu_);
    std::shared_ptr<OpCompletion> completion;
    if (auto it = awaiting_.find(record->id); it != awaiting_.end()) {
      completion = std::move(it->second);
      awaiting_.erase(it);
    }
    queue_.push_back(Pending{record->seq, ModelOp(), std::move(completion),
                             learns ? absl::Now() : absl::InfinitePast(), std::move(replicated)});
    next_seq_ = record->seq + 1;
    shared_log_seq_.store(record->seq, std::memory_order_relaxed);
    queue_cv_.SignalAll();
  }
}

void Model::StopFeeding() {
  if (!replicated()) return;
  absl::flat_hash_map<std::string, std::shared_ptr<OpCompletion>> awaiting;
  {
    MutexLock lock(&queue_mu_);
    feed_stop_ = true;
    awaiting.swap(awaiting_);
    queue_cv_.SignalAll();
    room_cv_.SignalAll();
  }
  if (feeder_.joinable()) feeder_.join();
  // Records of this node not applied here any more: their callers get UNAVAILABLE (the records
  // may be in the shared log; the other nodes apply them, and a retry finds them).
  for (auto& [id, completion] : awaiting) {
    completion->status = absl::UnavailableError(
        absl::StrFormat("model \"%s\" is shutting down on this node", options_.name));
    completion->done.Notify();
  }
}

absl::Status Model::CatchUp() {
  const absl::Time deadline = absl::Now() + replication_.catch_up_timeout;
  absl::StatusOr<uint64_t> last = replication_.log->LastSeqWaiting(replication_.catch_up_timeout);
  if (!last.ok()) return last.status();
  MutexLock lock(&queue_mu_);
  queue_cv_.WaitUntil(&queue_mu_, deadline, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return applied_seq_ >= *last || stopping_ || feed_stop_ || !feed_error_.ok();
  });
  if (!feed_error_.ok()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("model \"%s\": the shared log cannot be applied from record %d: %s",
                        options_.name, next_seq_, feed_error_.message()));
  }
  if (applied_seq_ < *last) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "model \"%s\": applied the shared log up to record %d of %d within %s", options_.name,
        applied_seq_, *last, absl::FormatDuration(replication_.catch_up_timeout)));
  }
  return absl::OkStatus();
}

bool Model::HyperparametersStale(const HyperparametersOp& op) const {
  if (op.reason == HyperparametersOp::Reason::kDictionaryFull) {
    return op.kors_mu_factor <= state_->kors_mu_factor();  // coarsenings only grow it
  }
  return op.fitted_at <= state_->last_fit_rewards() && state_->last_fit_rewards() > 0;
}

absl::Status Model::ApplyReplicated(const Pending& pending, EdgeEditResult* result) {
  const ReplicatedRecord& record = *pending.replicated;
  const bool own = pending.completion != nullptr;
  if (const auto* op = std::get_if<ModelOp>(&record)) {
    if (const auto* fitted = std::get_if<HyperparametersOp>(op)) {
      // This node's own fit record releases its scheduler, whether it applies or not.
      if (own) fits_.HyperparametersApplied();
      if (HyperparametersStale(*fitted)) return absl::OkStatus();
    }
  }
  Resolution resolution;
  {
    MutexLock ledger(&ledger_mu_);
    resolution =
        Resolve(record, options_, *ledger_, [this](const LedgerEntry& entry, size_t rewards) {
          if (options_.exact() && state_->history_size() + static_cast<int64_t>(rewards) >
                                      options_.exact_max_observations) {
            return absl::ResourceExhaustedError(absl::StrFormat(
                "model \"%s\" (exact GP) holds %d observations, its limit "
                "(exact_gp.max_observations is %d); use an EK policy for long-running models",
                options_.name, state_->history_size(), options_.exact_max_observations));
          }
          if (registry_->Find(entry.user_id) < 0 && registry_->size() >= options_.max_users) {
            return absl::ResourceExhaustedError(
                absl::StrFormat("model \"%s\" has reached its limit of %d users (limits.max_users)",
                                options_.name, options_.max_users));
          }
          return absl::OkStatus();
        });
    for (const ModelOp& op : resolution.ops) ApplyToLedger(op, options_, ledger_.get());
  }
  absl::Status status = resolution.status;
  for (const ModelOp& op : resolution.ops) {
    absl::Status applied = state_->Apply(op, result);
    if (!applied.ok()) {
      // Deterministic: every replica fails it alike (a refused graph edit, say).
      LogWarning(absl::StrFormat("model \"%s\": record %d not applied: %s", options_.name,
                                 pending.seq, applied.message()));
      if (status.ok()) status = applied;
    } else if (std::holds_alternative<FixDimensionsOp>(op)) {
      MutexLock lock(&queue_mu_);
      dims_ = state_->dimensions();
    }
  }
  if (own) pending.completion->resolution = std::move(resolution);
  return status;
}

}  // namespace graphbandit
