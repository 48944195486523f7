#include "core/decision_ledger.h"

namespace graphbandit {

void DecisionLedger::EraseLocked(LedgerEntry* entry) {
  by_age_.erase(entry->by_age_);
  if (entry->completed_listed_) completed_.erase(entry->by_completion_);
  if (entry->unrewarded > 0) --pending_;
  entries_.erase(entry->event_id);  // destroys the entry
}

void DecisionLedger::ExpireLocked(absl::Time now) {
  while (!by_age_.empty() && by_age_.front()->created + window_ <= now) {
    if (by_age_.front()->unrewarded > 0) ++expired_total_;
    EraseLocked(by_age_.front());
  }
}

bool DecisionLedger::MakeRoomLocked() {
  if (static_cast<int64_t>(entries_.size()) < capacity_) return true;
  if (completed_.empty()) return false;
  EraseLocked(completed_.front());
  return true;
}

DecisionLedger::InsertResult DecisionLedger::Insert(std::unique_ptr<LedgerEntry> entry,
                                                    absl::Time now, LedgerEntry* existing) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  auto it = entries_.find(entry->event_id);
  if (it != entries_.end()) {
    if (existing != nullptr) {
      existing->decision = it->second->decision;
      existing->fingerprint = it->second->fingerprint;
    }
    return InsertResult::kExists;
  }
  if (!MakeRoomLocked()) return InsertResult::kFull;
  LedgerEntry* raw = entry.get();
  raw->unrewarded = static_cast<int>(raw->arms.size());
  raw->by_age_ = by_age_.insert(by_age_.end(), raw);
  ++pending_;
  entries_.emplace(raw->event_id, std::move(entry));
  return InsertResult::kInserted;
}

bool DecisionLedger::Lookup(const std::string& event_id, absl::Time now, Decision* decision,
                            uint64_t* fingerprint) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  auto it = entries_.find(event_id);
  if (it == entries_.end()) return false;
  *decision = it->second->decision;
  *fingerprint = it->second->fingerprint;
  return true;
}

bool DecisionLedger::Contains(const std::string& event_id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  return entries_.contains(event_id);
}

void DecisionLedger::MarkRewarded(LedgerEntry* entry, int index) {
  if (entry->arms[index].rewarded) return;
  entry->arms[index].rewarded = true;
  if (--entry->unrewarded == 0) {
    --pending_;
    entry->by_completion_ = completed_.insert(completed_.end(), entry);
    entry->completed_listed_ = true;
  }
}

void DecisionLedger::UnmarkRewarded(LedgerEntry* entry, int index) {
  if (!entry->arms[index].rewarded) return;
  entry->arms[index].rewarded = false;
  if (entry->unrewarded++ == 0) {
    ++pending_;
    completed_.erase(entry->by_completion_);
    entry->completed_listed_ = false;
  }
}

bool DecisionLedger::HasRoom(absl::Time now) {
  absl::MutexLock lock(&mu_);
  ExpireLocked(now);
  return static_cast<int64_t>(entries_.size()) < capacity_ || !completed_.empty();
}

int64_t DecisionLedger::size() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(entries_.size());
}

int64_t DecisionLedger::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_;
}

int64_t DecisionLedger::expired_total() const {
  absl::MutexLock lock(&mu_);
  return expired_total_;
}

}  // namespace graphbandit
