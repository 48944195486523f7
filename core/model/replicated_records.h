// The records of a replicated model (cluster mode: the model's log is a stream that several
// nodes append to and every replica applies in stream order), and how a replica turns each
// record into the model's ordinary operations (model_ops.h) when it applies it.
//
// A single node changes its ledger when a request arrives, under its ledger lock, and logs the
// change. A replica cannot: another node may be changing the same decision at the same moment.
// So a node publishes what a request asks for, and what it amounts to is decided when the record
// is applied, against the ledger as the records before it in the stream left it — the same on
// every replica. The resulting operations are applied with the code recovery uses
// (ApplyToLedger, LearnedState::Apply), so every replica reaches the same state, and a replica
// restarted from its snapshot at stream position s reaches it as well by applying the records
// after s.
//
//  * A decision (DecideOp) is published by the node that made it, which answers SelectArm once
//    the record is applied (so a reward for it, sent anywhere afterwards, follows it in the
//    stream). Applied: entered into the ledger, after closing the oldest completed decision if
//    the ledger is full, as the single node does. An event id already open with the same request
//    fingerprint (a client's retry that reached another node first) is not entered again: the
//    retry gets the stored decision. An id open for another request, or whose decision closed,
//    is refused with ALREADY_EXISTS; a full ledger with nothing completed, with
//    RESOURCE_EXHAUSTED.
//  * A reward report (ReportOp) carries the request and the time its node received it. Applied:
//    joined with the ledger and judged exactly as the single node does (JudgeReport). A report
//    received after its decision's reward window is judged as if the decision had closed at the
//    window's end (LATE, or under FIRST with every arm reported DUPLICATE), even when the record
//    that closes it has not been applied yet: the answer does not depend on how the expiry and
//    the report interleave in the stream. A report applied before any decision of its event id
//    is UNKNOWN_EVENT: decisions are answered only once applied, so a report can only precede
//    its decision if the client invented the event id. A report retried against another node is
//    published twice; the second is judged against a ledger that holds the first, so it is a
//    DUPLICATE (FIRST) or, as on one node, one more report to combine (SUM / MAX / LAST).
//  * An expiry (ExpireOp) carries a cut-off time, which its node chose: the decisions whose
//    window ended by then close, in ledger order, teaching what they teach on a single node.
//    Whichever nodes publish expiries and however often, each decision closes once. The ledger
//    is in stream order, which may differ from creation order by publishing delays and clock
//    skew: the scan tolerates kExpiryDisorder of it.
//  * An activation (ActivationRequestOp) of a deferred decision carries the event id and the
//    time its node received it. Applied: judged against the ledger as on a single node
//    (JudgeActivation); one received after the decision's window finds it closed, however the
//    expiry and the activation interleave. The first activation applied learns the held rewards;
//    a repeat, from any node, finds the decision active already.
//  * A full ledger makes room by closing the completed decision (FIRST) that comes first in
//    ledger order: an order a snapshot keeps, so that a restarted replica chooses the same.
//  * The other records (graph edits, fixed dimensions, fitted hyper-parameters) are published as
//    the ordinary operations and applied unchanged.
#ifndef GRAPHBANDIT_CORE_MODEL_REPLICATED_RECORDS_H_
#define GRAPHBANDIT_CORE_MODEL_REPLICATED_RECORDS_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/ledger/decision.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"

namespace graphbandit {

// A reward report as a node received it.
struct ReportOp {
  RewardRequest request;        // `model` is not recorded (the stream is the model's)
  int64_t received_micros = 0;  // Unix time at the receiving node
};

// Closes the decisions whose reward window ended by `cutoff_micros` (Unix time).
struct ExpireOp {
  int64_t cutoff_micros = 0;
};

// Activates a deferred decision (Personalizer's activate), as a node received it.
struct ActivationRequestOp {
  std::string event_id;
  int64_t received_micros = 0;  // Unix time at the receiving node
};

using ReplicatedRecord = std::variant<ModelOp, ReportOp, ExpireOp, ActivationRequestOp>;

// The record types of the stream beyond the ordinary operations (OpType); never reuse a number.
enum class ReplicatedType : uint8_t {
  kReport = 32,
  kExpire = 33,
  kActivation = 34,
};

// One stream message: the record type, then the record's encoding (model_ops.h for the ordinary
// operations). Decoding fails with DATA_LOSS on an unknown type or malformed bytes.
std::string EncodeReplicated(const ReplicatedRecord& record);
absl::StatusOr<ReplicatedRecord> DecodeReplicated(absl::string_view message);

// What applying one record amounts to.
struct Resolution {
  // The operations to apply, in order (ApplyToLedger, then LearnedState::Apply, for each). Empty
  // when the record changes nothing (a duplicate, a refused request, an expiry with nothing due).
  std::vector<ModelOp> ops;
  // The requester's error (nothing is applied then): INVALID_ARGUMENT, ALREADY_EXISTS,
  // RESOURCE_EXHAUSTED, with the single node's messages.
  absl::Status status;
  // ReportOp: the answer; its model_version is left for the caller, who knows the stream
  // position (the record's own, when `learned_now`).
  RewardResult reward;
  bool learned_now = false;  // FIRST: an accepted report (or activation) learned by this record
  // ActivationRequestOp: what it amounted to.
  ActivationOutcome activation = ActivationOutcome::kUnknownEvent;
  // DecideOp: the decision the requester gets (the stored one, marked replayed, for a retry).
  std::optional<Decision> decision;
};

// How far out of creation order an expiry looks for due decisions (see the top of the file).
inline constexpr absl::Duration kExpiryDisorder = absl::Minutes(1);

// Checks that need the learned state, at the point of the stream where a reward would be
// learned: the exact GP's size and the user table (limits.max_users). OK or RESOURCE_EXHAUSTED.
using RewardCapacity = std::function<absl::Status(const LedgerEntry& entry, size_t rewards)>;

// Decides what `record` amounts to against `ledger` (which it does not change). Deterministic:
// the same record against the same ledger (and capacity answers) resolves the same way.
Resolution Resolve(const ReplicatedRecord& record, const ModelOptions& options,
                   DecisionLedger& ledger, const RewardCapacity& capacity);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_REPLICATED_RECORDS_H_
