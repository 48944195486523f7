#include "core/ledger/decision_ledger.h"

#include <algorithm>

namespace graphbandit {

absl::string_view AggregationName(Aggregation aggregation) {
  switch (aggregation) {
    case Aggregation::kFirst:
      return "FIRST";
    case Aggregation::kSum:
      return "SUM";
    case Aggregation::kMax:
      return "MAX";
    case Aggregation::kLast:
      return "LAST";
  }
  return "UNKNOWN";
}

LedgerEntry* DecisionLedger::Find(const std::string& event_id) {
  auto it = entries_.find(event_id);
  return it == entries_.end() ? nullptr : it->second.get();
}

const Tombstone* DecisionLedger::FindClosed(const std::string& event_id) const {
  auto it = tombstones_.find(event_id);
  return it == tombstones_.end() ? nullptr : it->second->get();
}

LedgerEntry* DecisionLedger::Insert(std::unique_ptr<LedgerEntry> entry) {
  LedgerEntry* raw = entry.get();
  raw->unreported = 0;
  for (const LedgerArm& arm : raw->arms) raw->unreported += arm.reports == 0 ? 1 : 0;
  raw->by_age_ = by_age_.insert(by_age_.end(), raw);
  if (raw->unreported > 0) {
    ++pending_;
  } else if (aggregation_ == Aggregation::kFirst && !raw->held()) {  // restored, complete
    raw->by_completion_ = completed_.insert(completed_.end(), raw);
    raw->completed_listed_ = true;
  }
  // A tombstone of the same id (a reused client id after closing) is superseded.
  if (auto t = tombstones_.find(raw->event_id); t != tombstones_.end()) {
    tombstone_order_.erase(t->second);
    tombstones_.erase(t);
  }
  entries_.emplace(raw->event_id, std::move(entry));
  return raw;
}

bool DecisionLedger::Report(LedgerEntry* entry, int index, double reward) {
  LedgerArm& arm = entry->arms[index];
  if (aggregation_ == Aggregation::kFirst && arm.reports > 0) return false;
  if (arm.reports == 0) {
    arm.aggregate = reward;
  } else if (aggregation_ == Aggregation::kSum) {
    arm.aggregate += reward;
  } else if (aggregation_ == Aggregation::kMax) {
    arm.aggregate = std::max(arm.aggregate, reward);
  } else {  // kLast
    arm.aggregate = reward;
  }
  if (arm.reports++ == 0 && --entry->unreported == 0) {
    --pending_;
    if (aggregation_ == Aggregation::kFirst && !entry->held()) {  // may give its slot up early
      entry->by_completion_ = completed_.insert(completed_.end(), entry);
      entry->completed_listed_ = true;
    }
  }
  return true;
}

RewardJoin DecisionLedger::JoinReward(const RewardRequest& request) {
  RewardJoin join;
  LedgerEntry* entry = Find(request.event_id);
  if (entry == nullptr) {
    if (const Tombstone* closed = FindClosed(request.event_id)) {
      join.event = closed->how == ClosedAs::kExpired ? RewardJoin::Event::kExpired
                                                     : RewardJoin::Event::kCompleted;
    }
    return join;
  }
  join.event = RewardJoin::Event::kOpen;
  join.entry = entry;
  std::vector<std::pair<int, double>> slots;  // (arm index, reward)
  if (request.reward.has_value()) {
    if (entry->arms.size() != 1) {
      join.single_reward_for_slate = true;
      return join;
    }
    slots.emplace_back(0, *request.reward);
  } else {
    for (const auto& [arm_id, reward] : request.arm_rewards) {
      int index = -1;
      for (size_t a = 0; a < entry->arms.size(); ++a) {
        if (entry->arms[a].arm_id == arm_id) index = static_cast<int>(a);
      }
      if (index < 0) {
        join.unknown_arm = arm_id;
        return join;
      }
      slots.emplace_back(index, reward);
    }
  }
  const bool first = aggregation_ == Aggregation::kFirst;
  for (const auto& [index, reward] : slots) {
    const bool duplicate = first && (entry->arms[index].reports > 0 ||
                                     std::any_of(join.reports.begin(), join.reports.end(),
                                                 [i = index](const RewardJoin::Report& r) {
                                                   return r.accepted && r.arm == i;
                                                 }));
    // A held (deferred, not activated) decision's first reward is recorded, not learned: its
    // activation learns it.
    join.reports.push_back(
        RewardJoin::Report{index, reward, !duplicate, first && !duplicate && !entry->held()});
  }
  return join;
}

void DecisionLedger::Activate(LedgerEntry* entry) {
  if (!entry->held()) return;
  entry->activated = true;
  if (aggregation_ == Aggregation::kFirst && entry->unreported == 0 && !entry->completed_listed_) {
    entry->by_completion_ = completed_.insert(completed_.end(), entry);
    entry->completed_listed_ = true;
  }
}

void DecisionLedger::RestoreDeferral(LedgerEntry* entry, bool activated) {
  entry->deferred = true;
  entry->activated = activated;
  if (entry->held() && entry->completed_listed_) {
    completed_.erase(entry->by_completion_);
    entry->completed_listed_ = false;
  }
}

void DecisionLedger::RecordJoined(const RewardJoin& join, size_t count) {
  for (const RewardJoin::Report& report : join.reports) {
    if (count == 0) return;
    if (!report.accepted) continue;
    Report(join.entry, report.arm, report.reward);
    --count;
  }
}

std::vector<LedgerEntry*> DecisionLedger::Due(absl::Time now, absl::Duration disorder) const {
  std::vector<LedgerEntry*> due;
  for (LedgerEntry* entry : by_age_) {
    if (entry->created + window_ <= now) {
      due.push_back(entry);
    } else if (entry->created + window_ > now + disorder) {
      break;  // by_age_ is in creation order, up to `disorder`
    }
  }
  return due;
}

LedgerEntry* DecisionLedger::FirstCompletedByAge() const {
  if (aggregation_ != Aggregation::kFirst) return nullptr;
  for (LedgerEntry* entry : by_age_) {
    if (entry->unreported == 0 && !entry->held()) return entry;
  }
  return nullptr;
}

void DecisionLedger::Close(LedgerEntry* entry, ClosedAs how, absl::Time when) {
  by_age_.erase(entry->by_age_);
  if (entry->completed_listed_) completed_.erase(entry->by_completion_);
  if (entry->unreported > 0) {
    --pending_;
    if (how == ClosedAs::kExpired) ++expired_total_;
  }
  const std::string event_id = entry->event_id;
  entries_.erase(event_id);  // destroys the entry, unless a capture still holds it
  RestoreTombstone(Tombstone{event_id, how, when});
}

void DecisionLedger::RestoreTombstone(Tombstone tombstone) {
  if (auto t = tombstones_.find(tombstone.event_id); t != tombstones_.end()) {
    tombstone_order_.erase(t->second);
    tombstones_.erase(t);
  }
  if (tombstone_capacity_ <= 0) return;
  tombstone_order_.push_back(std::make_shared<const Tombstone>(std::move(tombstone)));
  tombstones_[tombstone_order_.back()->event_id] = std::prev(tombstone_order_.end());
  while (static_cast<int64_t>(tombstone_order_.size()) > tombstone_capacity_) {
    tombstones_.erase(tombstone_order_.front()->event_id);
    tombstone_order_.pop_front();
  }
}

LedgerCapture DecisionLedger::Capture() const {
  LedgerCapture capture;
  capture.aggregation = aggregation_;
  capture.expired_total = expired_total_;
  capture.entries.reserve(entries_.size());
  capture.arm_rewards.reserve(entries_.size());
  for (const LedgerEntry* entry : by_age_) {
    capture.entries.push_back(entry->shared_from_this());
    capture.activated.push_back(entry->activated);
    for (const LedgerArm& arm : entry->arms) {
      capture.arm_rewards.push_back(LedgerCapture::ArmRewards{arm.reports, arm.aggregate});
    }
  }
  capture.tombstones.assign(tombstone_order_.begin(), tombstone_order_.end());
  return capture;
}

}  // namespace graphbandit
