// Warm start: teaches a model a logged history (sim/logged_history.h) through its own API. Each
// logged decision becomes a decision whose only candidate is the logged arm (so the model cannot
// choose another) with the logged context and user, followed by the logged reward: the model
// learns exactly what it would have learned serving that decision, and its log and snapshots
// hold it as they hold any other decision. The history's graph edges are added first.
//
// Re-running an import on the same model skips what it already imported while the model still
// knows the imported event ids ("warm:" + the logged event id). graphbandit-replay refuses
// models this cannot teach (policies that learn from all of a decision's candidates, rewards
// aggregated over a window) and imports with the evaluation share off.
#ifndef GRAPHBANDIT_SIM_WARM_START_H_
#define GRAPHBANDIT_SIM_WARM_START_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/model/engine.h"
#include "sim/logged_history.h"

namespace graphbandit::replay {

struct WarmStartResult {
  int64_t learned = 0;        // rewards the model accepted
  int64_t already_known = 0;  // events imported before
};

// Fails on a graph edit, decision or reward the model refuses (its status, naming the event).
absl::StatusOr<WarmStartResult> WarmStart(const LoggedHistory& history, Engine& engine,
                                          const std::string& model);

}  // namespace graphbandit::replay

#endif  // GRAPHBANDIT_SIM_WARM_START_H_
