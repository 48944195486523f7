// The decision ledger's side of the log and of snapshots: a logged decision as a ledger entry,
// the observations a reward or a closing decision teaches, replaying the ledger part of logged
// operations, and the ledger's encoding at the end of a snapshot payload (the format is fixed:
// existing snapshots must still load). Pure functions; the caller holds the ledger's lock, except
// for EncodeLedger.
#ifndef GRAPHBANDIT_CORE_MODEL_LEDGER_RECORDS_H_
#define GRAPHBANDIT_CORE_MODEL_LEDGER_RECORDS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/ledger/decision.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"
#include "core/storage/coding.h"

namespace graphbandit {

int64_t ToMicros(absl::Time t);  // Unix microseconds, as logged

// The decision a logged DecideOp returned, and the ledger entry it made.
Decision DecisionOf(const DecideOp& op, const ModelOptions& options);
std::unique_ptr<LedgerEntry> EntryOf(const DecideOp& op, const ModelOptions& options);

// The observation of `reward` for arm `arm` of a decision.
ObserveOp ObservationOf(const LedgerEntry& entry, int arm, double reward);
// The observations that closing `entry` teaches: aggregates (SUM / MAX / LAST; FIRST learned
// them as they arrived) and the configured default reward of arms without a report. Nothing for
// a deferred decision that was never activated.
std::vector<ObserveOp> ClosingObservations(const LedgerEntry& entry, const ModelOptions& options);

// What a reward report joined with the ledger (DecisionLedger::JoinReward) amounts to, before
// anything is logged. Pure: the same join gives the same judgement on every replica. The report's
// own values were checked before the join (ValidateRewardRequest).
struct JudgedReport {
  // INVALID_ARGUMENT when the report does not fit its open decision (a single reward for a
  // slate, an arm the decision did not return): nothing is recorded then.
  absl::Status error;
  // The answer: outcome and each arm's outcome (model_version is the caller's to set, from
  // where the records land). An unknown event's answer names no model.
  RewardResult result;
  // The accepted reports as records, in request order; under FIRST each carries its
  // observation (learned as soon as it is applied), and learn_now is set.
  std::vector<RewardOp> ops;
  bool learn_now = false;
};
JudgedReport JudgeReport(const RewardJoin& join, const RewardRequest& request,
                         const ModelOptions& options);

// What activating `event_id` amounts to against `ledger` (which it does not change): the
// outcome, and for kActivated the record to log (its `learn`: the held FIRST rewards).
struct JudgedActivation {
  ActivationOutcome outcome = ActivationOutcome::kUnknownEvent;
  ActivateOp op;
  LedgerEntry* entry = nullptr;  // kActivated: valid while the ledger is unchanged
};
JudgedActivation JudgeActivation(DecisionLedger& ledger, const std::string& event_id,
                                 const ModelOptions& options);

// The ledger part of a logged operation, for recovery (live, it happened at submission).
void ApplyToLedger(const ModelOp& op, const ModelOptions& options, DecisionLedger* ledger);

// The ledger section of a snapshot payload: open decisions oldest first, then tombstones, then
// (when any open decision has them) the decisions' candidates, then (when any is deferred or
// has a baseline) the decisions' flags, then (when any was explored or has an evaluation
// record) their evaluation part. It is the payload's last section.
// Encodes a capture (DecisionLedger::Capture), so it needs no ledger lock.
std::string EncodeLedger(const LedgerCapture& ledger);
// Restores an empty ledger from that section (FAILED_PRECONDITION if it was written with another
// aggregation rule; DATA_LOSS if malformed). Leaves `in` after the section.
absl::Status DecodeLedger(storage::Decoder* in, const ModelOptions& options,
                          DecisionLedger* ledger);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_LEDGER_RECORDS_H_
