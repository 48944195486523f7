// Rewards: joining a report with its decision in the ledger (one lookup, DecisionLedger::
// JoinReward), logging what is accepted, and answering once it is durable.
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/model/ledger_records.h"
#include "core/model/model.h"
#include "core/model/request_validation.h"

namespace graphbandit {
namespace {

// Whether a report reached its decision and was judged (its learning logged). An error from
// JoinAndLogLocked means nothing was logged (but for a multi-arm report whose later records
// failed to log, which no challenger is sent).
bool Joined(const absl::StatusOr<RewardResult>& result) {
  return result.ok() && result->outcome != RewardOutcome::kUnknownEvent;
}

}  // namespace

absl::StatusOr<RewardResult> Model::Reward(const RewardRequest& request, absl::Time now,
                                           absl::Time deadline, bool* joined) {
  if (joined != nullptr) *joined = false;
  if (absl::Status s = ValidateRewardRequest(request, &options_); !s.ok()) return s;
  if (replicated()) return ReplicatedReward(request, now, deadline);
  // A DUPLICATE or LATE answer says "already recorded": it waits until everything logged so far
  // (the original report or close included) is durable, like the first answer did.
  uint64_t wait_for = 0;
  RoomWait wait;
  absl::StatusOr<RewardResult> result = absl::UnknownError("not joined");
  for (;;) {
    if (absl::Status room = WaitForRoom(deadline, &wait, &request.event_id, now); !room.ok()) {
      result = room;
      break;
    }
    MutexLock lock(&ledger_mu_);
    if (!HasRoom()) continue;  // another caller took the room first: wait again
    result = JoinAndLogLocked(request, now, &wait_for);
    if (joined != nullptr) *joined = Joined(result);
    break;
  }
  if (wait.registered) DoneWaiting(request.event_id);
  if (!result.ok()) return result.status();
  if (wait_for > 0) {
    if (absl::Status s = WaitDurable(wait_for, deadline); !s.ok()) return s;
  }
  return result;
}

bool Model::TryRewardWithoutWaiting(const RewardRequest& request, absl::Time now,
                                    RewardCallback* done, bool* joined) {
  if (joined != nullptr) *joined = false;
  if (replicated()) return false;
  if (absl::Status s = ValidateRewardRequest(request, &options_); !s.ok()) {
    std::move (*done)(std::move(s));
    return true;
  }
  uint64_t wait_for = 0;
  absl::StatusOr<RewardResult> result;
  {
    MutexLock lock(&ledger_mu_);
    if (!HasRoom()) return false;  // Reward waits for room (back-pressure)
    result = JoinAndLogLocked(request, now, &wait_for);
  }
  if (joined != nullptr) *joined = Joined(result);
  if (!result.ok() || wait_for == 0 || log_ == nullptr) {
    std::move (*done)(std::move(result));
    return true;
  }
  log_->NotifyDurable(wait_for, [result = *std::move(result),
                                 done = std::move(*done)](absl::Status durable) mutable {
    if (durable.ok()) {
      std::move(done)(std::move(result));
    } else {
      std::move(done)(std::move(durable));
    }
  });
  return true;
}

absl::StatusOr<RewardResult> Model::JoinAndLogLocked(const RewardRequest& request, absl::Time now,
                                                     uint64_t* wait_for) {
  const RewardJoin join = ledger_->JoinReward(request);
  JudgedReport judged = JudgeReport(join, request, options_);
  if (!judged.error.ok()) return judged.error;
  RewardResult& result = judged.result;
  if (join.event == RewardJoin::Event::kUnknown) return result;
  if (join.event != RewardJoin::Event::kOpen) {
    *wait_for = LastLogged();
    // A closed decision taught what it had to when it closed, which is logged by now.
    if (result.outcome == RewardOutcome::kDuplicate) result.model_version = *wait_for;
    return result;
  }
  const LedgerEntry& entry = *join.entry;
  std::vector<RewardOp>& ops = judged.ops;
  const bool learn_now = judged.learn_now;
  size_t logged = 0;
  uint64_t last_seq = 0;
  absl::Status status;
  {
    MutexLock queue(&queue_mu_);
    if (learn_now) status = CheckRewardCapacityLocked(entry, ops.size());
    for (size_t i = 0; status.ok() && i < ops.size(); ++i) {
      auto seq = AppendLocked(std::move(ops[i]), nullptr, learn_now ? now : absl::InfinitePast());
      if (!seq.ok()) {
        status = seq.status();
      } else {
        last_seq = *seq;
        ++logged;
      }
    }
  }
  // The ones logged are accepted even if a later one failed (replay will learn them).
  ledger_->RecordJoined(join, logged);
  if (!status.ok()) return status;
  *wait_for = ops.empty() ? LastLogged() : last_seq;
  // The version that contains the learning: this record's (FIRST learns at once); a duplicate
  // under FIRST was learned by an earlier record, logged by now. Windowed aggregations learn
  // when the window closes: no version yet.
  if (learn_now) {
    result.model_version = last_seq;
  } else if (ops.empty() && options_.aggregation == Aggregation::kFirst && !entry.held()) {
    result.model_version = *wait_for;  // (a held decision's first report is not learned yet)
  }
  return result;
}

absl::StatusOr<ActivationResult> Model::Activate(const std::string& event_id, absl::Time now,
                                                 absl::Time deadline, bool* logged) {
  if (logged != nullptr) *logged = false;
  if (replicated()) return ReplicatedActivate(event_id, now, deadline);
  RoomWait wait;
  ActivationResult result;
  uint64_t wait_for = 0;
  absl::Status status;
  for (;;) {
    // Like a reward, an activation waits for room in the writer's queue, registered as waiting
    // so that the sweeper does not close its decision meanwhile (DoneWaiting below).
    status = WaitForRoom(deadline, &wait, &event_id, now);
    if (!status.ok()) break;
    MutexLock lock(&ledger_mu_);
    if (!HasRoom()) continue;
    JudgedActivation judged = JudgeActivation(*ledger_, event_id, options_);
    if (judged.outcome == ActivationOutcome::kActivated &&
        now > judged.entry->created + options_.reward_window) {
      judged.outcome = ActivationOutcome::kClosed;  // too late, as in cluster mode
    }
    result.outcome = judged.outcome;
    if (judged.outcome != ActivationOutcome::kUnknownEvent) result.model = options_.name;
    if (judged.outcome != ActivationOutcome::kActivated) {
      wait_for = LastLogged();  // what made it so is durable before the answer, as for rewards
      break;
    }
    const bool learns = !judged.op.learn.empty();
    absl::StatusOr<uint64_t> seq;
    {
      MutexLock queue(&queue_mu_);
      if (learns) status = CheckRewardCapacityLocked(*judged.entry, judged.op.learn.size());
      if (status.ok()) {
        seq = AppendLocked(std::move(judged.op), nullptr, learns ? now : absl::InfinitePast());
      }
    }
    if (!status.ok()) break;
    if (!seq.ok()) {
      status = seq.status();
      break;
    }
    ledger_->Activate(judged.entry);
    if (logged != nullptr) *logged = true;
    wait_for = *seq;
    if (learns) result.model_version = *seq;
    break;
  }
  if (wait.registered) DoneWaiting(event_id);
  if (!status.ok()) return status;
  if (wait_for > 0) {
    if (absl::Status s = WaitDurable(wait_for, deadline); !s.ok()) return s;
  }
  return result;
}

absl::Status Model::CheckRewardCapacityLocked(const LedgerEntry& entry, size_t rewards) {
  if (options_.exact() &&
      rewards_held_ + static_cast<int64_t>(rewards) > options_.exact_max_observations) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "model \"%s\" (exact GP) holds %d observations, its limit "
        "(exact_gp.max_observations is %d); use an EK policy for long-running models",
        options_.name, rewards_held_, options_.exact_max_observations));
  }
  if (registry_->Find(entry.user_id) < 0 && !reserved_users_.contains(entry.user_id)) {
    if (!UsersFitLocked(1)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("model \"%s\" has reached its limit of %d users (limits.max_users)",
                          options_.name, options_.max_users));
    }
    reserved_users_.insert(entry.user_id);
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
