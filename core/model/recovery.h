// Recovery of a model at start: the newest snapshot whose checksum verifies (falling back to
// older ones), then the log segments after it, replayed in sequence order. Damaged records are
// reported, counted and their bytes copied aside; the intact records after them are applied when
// what they depend on survived: a reward or a decision's close whose decision record was lost is
// dropped (and counted), never applied to anything else; a record is never applied twice or out
// of order (the sequence numbers in the records say which are missing or repeated). An intact
// snapshot that cannot be restored (the configuration contradicts it), or a state directory
// whose log does not reach back to record 1 when no snapshot loads, stops the start instead of
// losing learned state. Runs before the model's threads start; touches nothing shared.
#ifndef GRAPHBANDIT_CORE_MODEL_RECOVERY_H_
#define GRAPHBANDIT_CORE_MODEL_RECOVERY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/learned_state.h"
#include "core/model/model_options.h"
#include "core/model/state_directory.h"

namespace graphbandit {

// What recovery found (reported at start; damage is also in `damage`).
struct RecoveryReport {
  uint64_t snapshot_seq = 0;  // 0: started from the log alone
  int64_t records_replayed = 0;
  int64_t records_refused = 0;  // logged operations that failed again as when they arrived
  // A damaged tail was cut off. The tail of the last segment is what a crash during a write
  // leaves: its records are not counted below. A damaged tail of an earlier segment is: the
  // next segment's first sequence number says how many records it held.
  bool truncated = false;
  std::vector<std::string> damage;
  // Records destroyed by damage in the middle of the log, by kind ("decision", "reward",
  // "close", ...; "unknown" when the damage hit the record's header; "in_missing_segment" for
  // records of a segment file that is not there). Exact: the sequence numbers on both sides of
  // the damage say how many are missing.
  std::map<std::string, int64_t> records_lost;
  // Intact records not applied, by kind, because a record they depend on was lost (a reward or
  // a close whose decision is not in the ledger, or is another decision of the same id).
  std::map<std::string, int64_t> records_dropped;
  // Intact records whose sequence number was applied already (not applied again).
  int64_t records_repeated = 0;
  int64_t damaged_bytes = 0;  // bytes of damage in the middle of the log (left in place)
  // Temporary snapshot files left by a process killed while writing one, removed at start.
  int64_t temporary_files_removed = 0;
  double seconds = 0.0;  // wall time of the whole recovery
};

// A model's state as recovered: what it learned, its ledger, and where its log continues.
struct RecoveredState {
  std::unique_ptr<LearnedState> state;
  std::unique_ptr<DecisionLedger> ledger;
  uint64_t next_seq = 1;  // the sequence number of the next record to log
  RecoveryReport report;
};

// A model with nothing learned yet (the configured dimensions fixed).
absl::StatusOr<RecoveredState> NewModelState(const ModelOptions& options);

// Recovers the model's state from `dir` (see the top of this file).
absl::StatusOr<RecoveredState> RecoverModelState(const ModelOptions& options,
                                                 const StateDirectory& dir);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_RECOVERY_H_
