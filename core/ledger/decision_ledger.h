// Decisions waiting for their rewards, keyed by event id, and the event ids of recently closed
// decisions (tombstones), so that a reward after a decision's window is told apart as LATE.
//
// Rewards for one arm are combined by an aggregation rule: FIRST keeps the first report (later
// ones are duplicates and the reward is learned at once), SUM / MAX / LAST combine every report
// and the result is learned when the decision closes. A decision closes when its reward window
// ends (then arms without a report may learn a configured default reward), or — FIRST only —
// once every arm has its reward and the slot is needed for a new decision.
//
// Not thread-safe: the model holds its ledger lock around every call, together with the log
// append that records the change, so that replaying the log rebuilds the same ledger.
#ifndef GRAPHBANDIT_CORE_LEDGER_DECISION_LEDGER_H_
#define GRAPHBANDIT_CORE_LEDGER_DECISION_LEDGER_H_

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/ledger/decision.h"

namespace graphbandit {

enum class Aggregation { kFirst, kSum, kMax, kLast };
absl::string_view AggregationName(Aggregation aggregation);

struct LedgerArm {
  std::string arm_id;
  std::vector<double> features;  // raw, as the caller sent them
  int reports = 0;               // rewards accepted for this arm
  double aggregate = 0.0;        // the combined reward (meaningful when reports > 0)
};

// Once inserted, only the ledger changes an entry, and only its reward state (each arm's
// reports and aggregate, `unreported`) and its bookkeeping; what the decision was never
// changes (restoring a snapshot sets `decision.candidates` after Insert, before any capture
// can exist), so a snapshot can share the entry instead of copying it (LedgerCapture).
struct LedgerEntry : std::enable_shared_from_this<LedgerEntry> {
  std::string event_id;
  uint64_t fingerprint = 0;  // of the request, to tell a retry from a reused id
  absl::Time created;
  std::string user_id;
  std::vector<double> context;
  std::vector<LedgerArm> arms;
  int unreported = 0;  // arms without a report yet
  Decision decision;
  // DecisionRequest.defer_activation and .baseline, as logged. While deferred and not activated,
  // the entry's rewards are held: recorded, not learned, and the entry does not count as
  // completed (its slot is not given up early).
  bool deferred = false;
  int baseline = -1;
  bool activated = false;  // changes (DecisionLedger::Activate); captured like the rewards
  bool held() const { return deferred && !activated; }

 private:
  friend class DecisionLedger;
  std::list<LedgerEntry*>::iterator by_age_;
  std::list<LedgerEntry*>::iterator by_completion_;
  bool completed_listed_ = false;
};

enum class ClosedAs : uint8_t {
  kCompleted = 1,  // every arm had its reward (FIRST): a repeated reward is a duplicate
  kExpired = 2,    // the reward window ended: a reward now is late
};

struct Tombstone {
  std::string event_id;
  ClosedAs how = ClosedAs::kExpired;
  absl::Time closed;
};

// A reward report joined with the decision it names (DecisionLedger::JoinReward): what the
// event is and, for an open decision, which reports are accepted and which are duplicates.
// Each accepted report is to be logged; with FIRST it is also learned at once (learn_now),
// with the other rules when the decision closes. Nothing in the ledger changes until the
// accepted reports are recorded (RecordJoined), after they are logged.
struct RewardJoin {
  enum class Event {
    kUnknown,    // neither open nor recently closed
    kOpen,       // waiting for rewards: `entry` and `reports` are set
    kCompleted,  // closed with every arm reported (FIRST): a repeat is a duplicate
    kExpired,    // closed by its reward window: a reward now is late
  };
  struct Report {
    int arm = 0;  // index in the decision
    double reward = 0.0;
    bool accepted = false;  // false: a duplicate (FIRST: the arm has its reward already)
    // Accepted under FIRST: learned as soon as it is logged (a held decision's: on activation).
    bool learn_now = false;
  };
  Event event = Event::kUnknown;
  LedgerEntry* entry = nullptr;  // kOpen: valid while the ledger is unchanged
  std::vector<Report> reports;   // kOpen: in request order (empty on a mismatch)
  // kOpen, when the report does not fit the decision (no report is joined then):
  bool single_reward_for_slate = false;  // `reward` given for a decision of several arms
  std::string unknown_arm;               // non-empty: an arm id the decision did not return
};

// A consistent copy of a ledger for a snapshot. Taking it (DecisionLedger::Capture, under the
// ledger lock) copies no string and no feature vector: the entries and tombstones are shared,
// and only what can still change, each arm's reward state, is copied. Encoding it
// (EncodeLedger) then needs no lock, however many decisions the ledger holds.
struct LedgerCapture {
  struct ArmRewards {
    int reports = 0;
    double aggregate = 0.0;
  };
  Aggregation aggregation = Aggregation::kFirst;
  int64_t expired_total = 0;
  std::vector<std::shared_ptr<const LedgerEntry>> entries;  // open decisions, oldest first
  std::vector<ArmRewards> arm_rewards;  // the entries' arms in order, as they were at capture
  std::vector<bool> activated;          // per entry, as at capture
  std::vector<std::shared_ptr<const Tombstone>> tombstones;  // oldest first
};

class DecisionLedger {
 public:
  DecisionLedger(absl::Duration window, int64_t capacity, int64_t tombstone_capacity,
                 Aggregation aggregation)
      : window_(window),
        capacity_(capacity),
        tombstone_capacity_(tombstone_capacity),
        aggregation_(aggregation) {}

  absl::Duration window() const { return window_; }
  Aggregation aggregation() const { return aggregation_; }

  LedgerEntry* Find(const std::string& event_id);
  const Tombstone* FindClosed(const std::string& event_id) const;

  // Whether a decision can be inserted without closing one first.
  bool Full() const { return static_cast<int64_t>(entries_.size()) >= capacity_; }
  // The completed decision (FIRST only) to close to make room, or null when every slot holds a
  // decision still waiting for a reward.
  LedgerEntry* OldestCompleted() const { return completed_.empty() ? nullptr : completed_.front(); }
  // The completed decision (FIRST only) that comes first in the ledger's age order, or null.
  // Unlike OldestCompleted's order (first completed first), this one survives a snapshot, so
  // replicas restarted from one choose the same (cluster mode). O(entries ahead of it).
  LedgerEntry* FirstCompletedByAge() const;
  // Inserts (REQUIRES !Full() and an unknown event id); returns the stored entry.
  LedgerEntry* Insert(std::unique_ptr<LedgerEntry> entry);

  // Records a reward for arm `index`: with FIRST, only the arm's first report is accepted.
  // Returns whether it was accepted.
  bool Report(LedgerEntry* entry, int index, double reward);

  // Activates a deferred entry: it may now count as completed (FIRST, every arm reported).
  void Activate(LedgerEntry* entry);
  // Restoring a snapshot: marks an inserted entry as deferred (activated or not).
  void RestoreDeferral(LedgerEntry* entry, bool activated);

  // The one lookup of a reward report: joins it with its open or closed decision.
  RewardJoin JoinReward(const RewardRequest& request);
  // Records the first `count` accepted reports of `join` (those that were logged). REQUIRES
  // the ledger unchanged since the join.
  void RecordJoined(const RewardJoin& join, size_t count);

  // Decisions whose window has ended by `now`, oldest first.
  // `disorder`: entries may be up to this much out of creation order (cluster mode: the ledger
  // is in the shared log's order, which publishing delays and clock skew perturb), so the scan
  // goes on past an entry that is not due while it was created before now - window + disorder.
  std::vector<LedgerEntry*> Due(absl::Time now,
                                absl::Duration disorder = absl::ZeroDuration()) const;

  // Removes the entry and keeps a tombstone for it.
  void Close(LedgerEntry* entry, ClosedAs how, absl::Time when);

  int64_t size() const { return static_cast<int64_t>(entries_.size()); }
  int64_t pending() const { return pending_; }
  int64_t tombstones() const { return static_cast<int64_t>(tombstones_.size()); }
  int64_t expired_total() const { return expired_total_; }

  // For snapshots: O(size) pointer copies, see LedgerCapture.
  LedgerCapture Capture() const;
  void set_expired_total(int64_t n) { expired_total_ = n; }
  // Appends a tombstone (snapshot restore; Close uses it too), evicting the oldest beyond the cap.
  void RestoreTombstone(Tombstone tombstone);

 private:
  const absl::Duration window_;
  const int64_t capacity_;
  const int64_t tombstone_capacity_;
  const Aggregation aggregation_;
  // Shared so that a capture keeps a closed entry alive until it is encoded.
  absl::flat_hash_map<std::string, std::shared_ptr<LedgerEntry>> entries_;
  std::list<LedgerEntry*> by_age_;     // oldest first
  std::list<LedgerEntry*> completed_;  // first completed first (FIRST aggregation only)
  int64_t pending_ = 0;                // entries with an arm still unreported
  int64_t expired_total_ = 0;          // closed by their window with an arm unreported
  std::list<std::shared_ptr<const Tombstone>> tombstone_order_;
  absl::flat_hash_map<std::string, std::list<std::shared_ptr<const Tombstone>>::iterator>
      tombstones_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_LEDGER_DECISION_LEDGER_H_
