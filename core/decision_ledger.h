// Decisions waiting for their rewards, keyed by event id.
//
// A decision stays for the model's reward window. After its last arm is rewarded it is kept
// (until the window ends) so that a repeated reward is recognised as a duplicate and a retried
// SelectArm returns the same decision; under memory pressure such completed decisions are the
// first to go. When every slot holds a decision still waiting for a reward, inserting fails.
// Expiry is lazy: it happens on every insert and lookup, oldest first, in O(1) per decision.
#ifndef GRAPHBANDIT_CORE_DECISION_LEDGER_H_
#define GRAPHBANDIT_CORE_DECISION_LEDGER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/decision.h"

namespace graphbandit {

struct LedgerArm {
  std::string arm_id;
  std::vector<double> features;  // raw, as the caller sent them
  bool rewarded = false;
};

struct LedgerEntry {
  std::string event_id;
  uint64_t fingerprint = 0;  // of the request, to tell a retry from a reused id
  absl::Time created;
  std::string user_id;
  std::vector<double> context;
  std::vector<LedgerArm> arms;
  int unrewarded = 0;
  Decision decision;

 private:
  friend class DecisionLedger;
  std::list<LedgerEntry*>::iterator by_age_;
  std::list<LedgerEntry*>::iterator by_completion_;
  bool completed_listed_ = false;
};

class DecisionLedger {
 public:
  DecisionLedger(absl::Duration window, int64_t capacity) : window_(window), capacity_(capacity) {}

  enum class InsertResult { kInserted, kExists, kFull };
  // Inserts `entry` unless its event id is present (then *existing gets a copy of the stored
  // entry's decision and fingerprint). kFull when no slot can be freed.
  InsertResult Insert(std::unique_ptr<LedgerEntry> entry, absl::Time now,
                      LedgerEntry* existing = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Copies the stored decision and fingerprint for `event_id`; false if unknown.
  bool Lookup(const std::string& event_id, absl::Time now, Decision* decision,
              uint64_t* fingerprint) ABSL_LOCKS_EXCLUDED(mu_);

  // Whether `event_id` is known (and not expired).
  bool Contains(const std::string& event_id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // Runs f(entry) under the ledger's lock, with nullptr for an unknown (or expired) event.
  // f may mark arms rewarded through MarkRewarded. Returns what f returns.
  template <typename F>
  auto WithEntry(const std::string& event_id, absl::Time now, F&& f) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ExpireLocked(now);
    auto it = entries_.find(event_id);
    return f(it == entries_.end() ? nullptr : it->second.get());
  }
  // Marks arm `index` of `entry` rewarded. REQUIRES: called from inside WithEntry's f.
  void MarkRewarded(LedgerEntry* entry, int index) ABSL_NO_THREAD_SAFETY_ANALYSIS;
  // Undoes MarkRewarded (used when learning the reward failed). REQUIRES: inside WithEntry.
  void UnmarkRewarded(LedgerEntry* entry, int index) ABSL_NO_THREAD_SAFETY_ANALYSIS;

  // Whether an insert would currently succeed (after expiring old decisions).
  bool HasRoom(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t size() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t pending() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t expired_total() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void ExpireLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(LedgerEntry* entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MakeRoomLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const absl::Duration window_;
  const int64_t capacity_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<LedgerEntry>> entries_ ABSL_GUARDED_BY(mu_);
  std::list<LedgerEntry*> by_age_ ABSL_GUARDED_BY(mu_);         // oldest first
  std::list<LedgerEntry*> completed_ ABSL_GUARDED_BY(mu_);      // first completed first
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t expired_total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_DECISION_LEDGER_H_
