// Recovery of a model at start: the newest snapshot whose checksum verifies (falling back to
// older ones), then the log segments after it, replayed in order up to the first damage. Damage
// is reported and the damaged bytes set aside; nothing after damage is applied. An intact
// snapshot that cannot be restored (the configuration contradicts it), or a state directory
// whose log does not reach back to record 1 when no snapshot loads, stops the start instead of
// losing learned state. Runs before the model's threads start; touches nothing shared.
#ifndef GRAPHBANDIT_CORE_MODEL_RECOVERY_H_
#define GRAPHBANDIT_CORE_MODEL_RECOVERY_H_

#include <cstdint>
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
  bool truncated = false;
  std::vector<std::string> damage;
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
