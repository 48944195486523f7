// The submission side: logging operations and queueing them for the writer, the back-pressure
// that bounds how far the writer may fall behind, and administrative edits waited for until
// they are applied and durable.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/model/model.h"

namespace graphbandit {

absl::StatusOr<uint64_t> Model::AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                             absl::Time acknowledged) {
  if (stopping_) {
    return absl::UnavailableError(absl::StrFormat("model \"%s\" is shutting down", options_.name));
  }
  if (log_ != nullptr) {
    // Degraded inside: after a failed write or sync nothing more is logged until repaired.
    absl::Status status = log_->Append(static_cast<uint8_t>(TypeOf(op)), EncodeOp(op));
    if (!status.ok()) return status;
  }
  const uint64_t seq = next_seq_++;
  const auto observations = static_cast<int32_t>(ObservationsOf(op).size());
  rewards_held_ += observations;
  if (acknowledged != absl::InfinitePast()) unapplied_rewards_.emplace_back(seq, acknowledged);
  const bool deferrable = completion == nullptr && DeferrableLocked(op);
  const bool was_empty = queue_.empty();
  queue_.push_back(Pending{seq, std::move(op), std::move(completion), acknowledged, nullptr,
                           deferrable, absl::Now(), observations});
  if (deferrable) {
    ++deferrable_queued_;
    observations_queued_ += observations;
  }
  // The writer wakes for what it must apply now; for a deferrable operation only when it
  // finds the queue empty (the writer then waits ApplyDelay() from it) or completes a batch.
  if (!deferrable || was_empty || QueueMustRunLocked()) {
    queue_cv_.SignalAll();
  }
  return seq;
}

bool Model::DeferrableLocked(const ModelOp& op) const {
  if (!stages_rewards_ || replicated() || ApplyDelay() <= absl::ZeroDuration()) return false;
  // A decision changes no learned state; a reward is only staged (learned by a LearnOp the
  // writer logs).
  return std::holds_alternative<DecideOp>(op) || std::holds_alternative<RewardOp>(op) ||
         std::holds_alternative<CloseOp>(op) || std::holds_alternative<ObserveOp>(op) ||
         std::holds_alternative<ActivateOp>(op);
}

absl::Duration Model::ApplyDelay() const {
  absl::Duration delay = std::min(options_.max_learn_delay, kMaxApplyDelay);
  if (durability_.max_learning_lag > absl::ZeroDuration()) {
    delay = std::min(delay, durability_.max_learning_lag / 2);
  }
  return delay;
}

bool Model::QueueMustRunLocked() const {
  if (queue_.empty()) return false;
  return static_cast<int64_t>(queue_.size()) > deferrable_queued_ ||
         observations_queued_ + staged_waiting_ >= options_.max_learn_batch ||
         static_cast<int64_t>(next_seq_ - 1 - applied_seq_) >= max_queued_;
}

bool Model::QueueDueLocked(absl::Time now) const {
  return QueueMustRunLocked() || (!queue_.empty() && now >= queue_.front().queued + ApplyDelay());
}

absl::StatusOr<uint64_t> Model::Append(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                       absl::Time acknowledged) {
  MutexLock lock(&queue_mu_);
  return AppendLocked(std::move(op), std::move(completion), acknowledged);
}

uint64_t Model::LastLogged() const {
  MutexLock lock(&queue_mu_);
  return next_seq_ - 1;
}

absl::Status Model::WaitDurable(uint64_t seq, absl::Time deadline) {
  if (log_ == nullptr) return absl::OkStatus();
  return log_->WaitDurable(seq, deadline);
}

bool Model::HasRoomLocked() const {
  if (stopping_ || draining_) return true;
  if (static_cast<int64_t>(next_seq_ - 1 - applied_seq_) >= max_queued_) return false;
  return durability_.max_learning_lag <= absl::ZeroDuration() ||
         LearningLagLocked(absl::Now()) < durability_.max_learning_lag;
}

void Model::PaceDecision(absl::Time deadline) {
  if (durability_.max_learning_lag <= absl::ZeroDuration() || replicated()) return;
  MutexLock lock(&queue_mu_);
  const absl::Time now = absl::Now();
  const auto caught_up = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || draining_ || LearningLagLocked(absl::Now()) < durability_.max_learning_lag;
  };
  if (caught_up()) return;
  absl::Time until = now + durability_.max_learning_lag;
  if (deadline != absl::InfiniteFuture()) until = std::min(until, now + (deadline - now) / 2);
  room_cv_.WaitUntil(&queue_mu_, until, caught_up);
  ++decisions_paced_;
  decision_pacing_ += absl::Now() - now;
}

absl::Duration Model::LearningLagLocked(absl::Time now) const {
  if (replicated()) return absl::ZeroDuration();  // the shared log's own bounds apply
  // A degraded log cannot take the LearnOps that would learn the staged rewards; writes fail
  // anyway, and decisions are served from the last state without waiting.
  if (log_ != nullptr && log_->degraded()) return absl::ZeroDuration();
  absl::Time oldest = oldest_staged_acknowledged_;
  if (!unapplied_rewards_.empty()) oldest = std::min(oldest, unapplied_rewards_.front().second);
  // How long the oldest has waited, plus what the writer needs for those waiting now: a reward
  // admitted now waits about that long.
  const int64_t backlog = static_cast<int64_t>(unapplied_rewards_.size()) + staged_unlearned_;
  const absl::Duration ahead = learn_cost_ * backlog;
  return oldest == absl::InfiniteFuture() ? ahead : std::max(now - oldest, ahead);
}

bool Model::HasRoom() const {
  MutexLock lock(&queue_mu_);
  return HasRoomLocked();
}

absl::Status Model::WaitForRoom(absl::Time deadline, RoomWait* wait, const std::string* event_id,
                                absl::Time arrival) {
  MutexLock lock(&queue_mu_);
  if (HasRoomLocked()) return absl::OkStatus();
  if (!wait->delayed) {
    wait->delayed = true;
    ++writes_delayed_;
  }
  if (event_id != nullptr && !wait->registered) {
    wait->registered = true;  // DoneWaiting removes it
    WaitingReward& waiting = waiting_rewards_[*event_id];
    ++waiting.callers;
    waiting.arrival = std::min(waiting.arrival, arrival);
  }
  room_cv_.WaitUntil(&queue_mu_, deadline,
                     [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return HasRoomLocked(); });
  // Room that appears only as the deadline passes is too late: the caller could not finish.
  if (HasRoomLocked() && absl::Now() < deadline) return absl::OkStatus();
  ++writes_refused_behind_;
  const int64_t behind = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
  if (behind < max_queued_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "model \"%s\" is %d ms behind in learning the rewards it acknowledged (the bound is "
        "durability.max_learning_lag_ms = %d) and the deadline passed before it caught up; "
        "nothing was recorded, retry later",
        options_.name, absl::ToInt64Milliseconds(LearningLagLocked(absl::Now())),
        absl::ToInt64Milliseconds(durability_.max_learning_lag)));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "model \"%s\" is %d operations behind in learning (the bound is %d, half of "
      "durability.snapshot_every_records) and the deadline passed before it caught up; nothing "
      "was recorded, retry later",
      options_.name, next_seq_ - 1 - applied_seq_, max_queued_));
}

void Model::DoneWaiting(const std::string& event_id) {
  MutexLock lock(&queue_mu_);
  auto it = waiting_rewards_.find(event_id);
  if (it != waiting_rewards_.end() && --it->second.callers == 0) waiting_rewards_.erase(it);
}

absl::StatusOr<EdgeEditResult> Model::SubmitAndWait(ModelOp op, absl::Time deadline,
                                                    const std::vector<std::string>& reserved) {
  if (replicated()) {
    auto done = PublishAndWait(ModelOp(std::move(op)), deadline);
    ReleaseUsers(reserved);  // registered by now if the edit was applied
    if (!done.ok()) return done.status();
    if (!(*done)->status.ok()) return (*done)->status;
    return (*done)->result;
  }
  auto completion = std::make_shared<OpCompletion>();
  uint64_t seq = 0;
  RoomWait wait;
  for (;;) {
    if (absl::Status s = WaitForRoom(deadline, &wait); !s.ok()) {
      ReleaseUsers(reserved);
      return s;
    }
    MutexLock ledger(&ledger_mu_);  // the log tail only moves under the ledger lock
    if (!HasRoom()) continue;       // another caller took the room first: wait again
    auto appended = Append(std::move(op), completion, absl::InfinitePast());
    if (!appended.ok()) {
      ReleaseUsers(reserved);
      return appended.status();
    }
    seq = *appended;
    break;
  }
  if (!completion->done.WaitUntil(deadline)) {
    return absl::DeadlineExceededError("the deadline passed before the edit was applied");
  }
  if (!completion->status.ok()) return completion->status;
  if (absl::Status s = WaitDurable(seq, deadline); !s.ok()) return s;
  return completion->result;
}

}  // namespace graphbandit
