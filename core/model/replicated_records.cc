#include "core/model/replicated_records.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/model/ledger_records.h"
#include "core/model/request_validation.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

// Far above anything the server accepts (limits.max_candidates bounds a report's arms).
constexpr uint64_t kMaxArmRewards = uint64_t{1} << 20;

absl::Status Malformed(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed replicated record: ", what));
}

void PutReport(storage::Encoder* out, const ReportOp& op) {
  out->PutString(op.request.event_id);
  out->PutFixed64(static_cast<uint64_t>(op.received_micros));
  out->PutU8(op.request.reward.has_value() ? 1 : 0);
  if (op.request.reward.has_value()) out->PutDouble(*op.request.reward);
  out->PutVarint64(op.request.arm_rewards.size());
  for (const auto& [arm_id, reward] : op.request.arm_rewards) {
    out->PutString(arm_id);
    out->PutDouble(reward);
  }
}

bool GetReport(storage::Decoder* in, ReportOp* op) {
  uint64_t received = 0, arms = 0;
  uint8_t has_reward = 0;
  if (!in->GetString(&op->request.event_id) || !in->GetFixed64(&received) ||
      !in->GetU8(&has_reward) || has_reward > 1) {
    return false;
  }
  op->received_micros = static_cast<int64_t>(received);
  if (has_reward == 1) {
    double reward = 0.0;
    if (!in->GetDouble(&reward)) return false;
    op->request.reward = reward;
  }
  if (!in->GetVarint64(&arms) || arms > kMaxArmRewards) return false;
  for (uint64_t i = 0; i < arms; ++i) {
    std::string arm_id;
    double reward = 0.0;
    if (!in->GetString(&arm_id) || !in->GetDouble(&reward)) return false;
    op->request.arm_rewards.emplace_back(std::move(arm_id), reward);
  }
  return true;
}

// How a decision due to close closes: with FIRST and every arm reported it is complete (a
// repeat is a duplicate, not late); otherwise its window ended (the single node's sweeper).
ClosedAs ClosingKind(const LedgerEntry& entry, const ModelOptions& options) {
  return options.aggregation == Aggregation::kFirst && entry.unreported == 0 ? ClosedAs::kCompleted
                                                                             : ClosedAs::kExpired;
}

CloseOp CloseOf(const LedgerEntry& entry, ClosedAs how, int64_t closed_micros,
                const ModelOptions& options) {
  CloseOp op;
  op.event_id = entry.event_id;
  op.how = static_cast<uint8_t>(how);
  op.closed_micros = closed_micros;
  op.learn = ClosingObservations(entry, options);
  return op;
}

Resolution ResolveDecision(const DecideOp& op, const ModelOptions& options,
                           DecisionLedger& ledger) {
  Resolution out;
  if (const LedgerEntry* entry = ledger.Find(op.event_id)) {
    if (entry->fingerprint != op.fingerprint || op.fingerprint == 0) {
      // A generated event id (fingerprint 0) is unique to its node; two records with it can
      // only be a node's own retry of the publish, which the stream stores once. So a repeat
      // with fingerprint 0 is another request reusing the id.
      out.status = absl::AlreadyExistsError(
          absl::StrFormat("event_id %s was already used for a different request on model \"%s\"",
                          QuoteId(op.event_id), options.name));
      return out;
    }
    Decision stored = entry->decision;
    stored.replayed = true;
    out.decision = std::move(stored);
    return out;
  }
  if (ledger.FindClosed(op.event_id) != nullptr) {
    out.status = absl::AlreadyExistsError(
        absl::StrFormat("event_id %s was already used on model \"%s\" and its decision is closed",
                        QuoteId(op.event_id), options.name));
    return out;
  }
  if (ledger.Full()) {
    const LedgerEntry* victim = ledger.FirstCompletedByAge();
    if (victim == nullptr) {
      out.status = absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions); "
          "report rewards or let them expire",
          options.name, options.max_decisions));
      return out;
    }
    out.ops.emplace_back(CloseOf(*victim, ClosedAs::kCompleted, op.created_micros, options));
  }
  out.decision = DecisionOf(op, options);
  out.ops.emplace_back(op);
  return out;
}

Resolution ResolveReport(const ReportOp& op, const ModelOptions& options, DecisionLedger& ledger,
                         const RewardCapacity& capacity) {
  Resolution out;
  // The submitting node checked the report with its options; this replica checks it with its own
  // (and so judges a report logged under another bound, or by an older version, as it did then).
  if (absl::Status s = ValidateRewardRequest(op.request, &options); !s.ok()) {
    out.status = std::move(s);
    return out;
  }
  const RewardJoin join = ledger.JoinReward(op.request);
  if (join.event == RewardJoin::Event::kOpen &&
      absl::FromUnixMicros(op.received_micros) > join.entry->created + options.reward_window) {
    // Received after the window: judged as if the decision had closed at the window's end.
    RewardJoin closed;
    closed.event = ClosingKind(*join.entry, options) == ClosedAs::kExpired
                       ? RewardJoin::Event::kExpired
                       : RewardJoin::Event::kCompleted;
    out.reward = JudgeReport(closed, op.request, options).result;
    return out;
  }
  JudgedReport judged = JudgeReport(join, op.request, options);
  if (!judged.error.ok()) {
    out.status = std::move(judged.error);
    return out;
  }
  if (judged.learn_now && capacity) {
    if (absl::Status s = capacity(*join.entry, judged.ops.size()); !s.ok()) {
      out.status = std::move(s);
      return out;
    }
  }
  out.reward = std::move(judged.result);
  out.learned_now = judged.learn_now;
  for (RewardOp& reward : judged.ops) out.ops.emplace_back(std::move(reward));
  return out;
}

Resolution ResolveActivation(const ActivationRequestOp& op, const ModelOptions& options,
                             DecisionLedger& ledger, const RewardCapacity& capacity) {
  Resolution out;
  JudgedActivation judged = JudgeActivation(ledger, op.event_id, options);
  if (judged.outcome == ActivationOutcome::kActivated &&
      absl::FromUnixMicros(op.received_micros) > judged.entry->created + options.reward_window) {
    out.activation = ActivationOutcome::kClosed;  // as if the window had closed it
    return out;
  }
  if (judged.outcome == ActivationOutcome::kActivated && !judged.op.learn.empty() && capacity) {
    if (absl::Status s = capacity(*judged.entry, judged.op.learn.size()); !s.ok()) {
      out.status = std::move(s);
      return out;
    }
  }
  out.activation = judged.outcome;
  if (judged.outcome == ActivationOutcome::kActivated) {
    out.learned_now = !judged.op.learn.empty();
    out.ops.emplace_back(std::move(judged.op));
  }
  return out;
}

Resolution ResolveExpiry(const ExpireOp& op, const ModelOptions& options,
                         const DecisionLedger& ledger) {
  Resolution out;
  for (const LedgerEntry* entry :
       ledger.Due(absl::FromUnixMicros(op.cutoff_micros), kExpiryDisorder)) {
    out.ops.emplace_back(CloseOf(*entry, ClosingKind(*entry, options), op.cutoff_micros, options));
  }
  return out;
}

}  // namespace

std::string EncodeReplicated(const ReplicatedRecord& record) {
  storage::Encoder out;
  if (const auto* op = std::get_if<ModelOp>(&record)) {
    out.PutU8(static_cast<uint8_t>(TypeOf(*op)));
    std::string message = out.Release();
    message += EncodeOp(*op);
    return message;
  }
  if (const auto* report = std::get_if<ReportOp>(&record)) {
    out.PutU8(static_cast<uint8_t>(ReplicatedType::kReport));
    PutReport(&out, *report);
  } else if (const auto* activation = std::get_if<ActivationRequestOp>(&record)) {
    out.PutU8(static_cast<uint8_t>(ReplicatedType::kActivation));
    out.PutString(activation->event_id);
    out.PutFixed64(static_cast<uint64_t>(activation->received_micros));
  } else {
    out.PutU8(static_cast<uint8_t>(ReplicatedType::kExpire));
    out.PutFixed64(static_cast<uint64_t>(std::get<ExpireOp>(record).cutoff_micros));
  }
  return out.Release();
}

absl::StatusOr<ReplicatedRecord> DecodeReplicated(absl::string_view message) {
  if (message.empty()) return Malformed("empty");
  const uint8_t type = static_cast<uint8_t>(message[0]);
  storage::Decoder in(message.substr(1));
  if (type == static_cast<uint8_t>(ReplicatedType::kReport)) {
    ReportOp report;
    if (!GetReport(&in, &report) || !in.done()) return Malformed("reward report");
    return ReplicatedRecord(std::move(report));
  }
  if (type == static_cast<uint8_t>(ReplicatedType::kExpire)) {
    uint64_t cutoff = 0;
    if (!in.GetFixed64(&cutoff) || !in.done()) return Malformed("expiry");
    return ReplicatedRecord(ExpireOp{static_cast<int64_t>(cutoff)});
  }
  if (type == static_cast<uint8_t>(ReplicatedType::kActivation)) {
    ActivationRequestOp activation;
    uint64_t received = 0;
    if (!in.GetString(&activation.event_id) || !in.GetFixed64(&received) || !in.done()) {
      return Malformed("activation");
    }
    activation.received_micros = static_cast<int64_t>(received);
    return ReplicatedRecord(std::move(activation));
  }
  absl::StatusOr<ModelOp> op = DecodeOp(type, message.substr(1));
  if (!op.ok()) return op.status();
  return ReplicatedRecord(*std::move(op));
}

Resolution Resolve(const ReplicatedRecord& record, const ModelOptions& options,
                   DecisionLedger& ledger, const RewardCapacity& capacity) {
  if (const auto* report = std::get_if<ReportOp>(&record)) {
    return ResolveReport(*report, options, ledger, capacity);
  }
  if (const auto* expire = std::get_if<ExpireOp>(&record)) {
    return ResolveExpiry(*expire, options, ledger);
  }
  if (const auto* activation = std::get_if<ActivationRequestOp>(&record)) {
    return ResolveActivation(*activation, options, ledger, capacity);
  }
  const ModelOp& op = std::get<ModelOp>(record);
  if (const auto* decide = std::get_if<DecideOp>(&op)) {
    return ResolveDecision(*decide, options, ledger);
  }
  Resolution out;
  out.ops.push_back(op);
  return out;
}

}  // namespace graphbandit
