#include "core/model/ledger_records.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/model/learned_state.h"

namespace graphbandit {

int64_t ToMicros(absl::Time t) { return absl::ToUnixMicros(t); }

Decision DecisionOf(const DecideOp& op, const ModelOptions& options) {
  Decision d;
  d.event_id = op.event_id;
  d.model = options.name;
  d.policy = std::string(PolicyName(options.policy));
  d.model_version = op.model_version;
  d.candidates = op.candidates;
  d.explored = op.explored;
  d.evaluation = op.evaluation;
  for (const DecideOp::Arm& arm : op.arms) {
    ChosenArm c;
    c.candidate_index = arm.candidate_index;
    c.arm_id = arm.arm_id;
    c.mean = arm.mean;
    c.stddev = arm.stddev;
    c.score = arm.score;
    if (arm.has_probability) c.probability = arm.probability;
    d.arms.push_back(std::move(c));
  }
  return d;
}

std::unique_ptr<LedgerEntry> EntryOf(const DecideOp& op, const ModelOptions& options) {
  auto entry = std::make_unique<LedgerEntry>();
  entry->event_id = op.event_id;
  entry->fingerprint = op.fingerprint;
  entry->created = absl::FromUnixMicros(op.created_micros);
  entry->user_id = op.user;
  entry->context = op.context;
  for (const DecideOp::Arm& arm : op.arms)
    entry->arms.push_back(LedgerArm{arm.arm_id, arm.features, 0, 0.0});
  entry->decision = DecisionOf(op, options);
  entry->deferred = op.deferred;
  entry->baseline = op.baseline;
  return entry;
}

ObserveOp ObservationOf(const LedgerEntry& entry, int arm, double reward) {
  ObserveOp op;
  op.event_id = entry.event_id;
  op.arm_id = entry.arms[arm].arm_id;
  op.user = entry.user_id;
  op.context = entry.context;
  op.features = entry.arms[arm].features;
  op.reward = reward;
  if (entry.decision.candidates != nullptr) {
    op.candidates = entry.decision.candidates;
    op.chosen = entry.decision.arms[arm].candidate_index;
  }
  op.evaluation = entry.decision.evaluation;
  return op;
}

std::vector<ObserveOp> ClosingObservations(const LedgerEntry& entry, const ModelOptions& options) {
  std::vector<ObserveOp> learn;
  // A deferred decision never activated teaches nothing (Personalizer's deferActivation): the
  // application did not show its choice.
  if (entry.held()) return learn;
  for (size_t a = 0; a < entry.arms.size(); ++a) {
    const LedgerArm& arm = entry.arms[a];
    if (arm.reports > 0) {
      // FIRST learned it when it arrived; the other rules learn their aggregate now.
      if (options.aggregation != Aggregation::kFirst) {
        learn.push_back(ObservationOf(entry, static_cast<int>(a), arm.aggregate));
      }
    } else if (options.default_reward.has_value()) {
      learn.push_back(ObservationOf(entry, static_cast<int>(a), *options.default_reward));
    }
  }
  return learn;
}

JudgedReport JudgeReport(const RewardJoin& join, const RewardRequest& request,
                         const ModelOptions& options) {
  JudgedReport judged;
  RewardResult& result = judged.result;
  if (join.event == RewardJoin::Event::kUnknown) return judged;
  result.model = options.name;
  if (join.event != RewardJoin::Event::kOpen) {
    // Closed: by its window (late), or complete and evicted (a repeat is a duplicate).
    result.outcome = join.event == RewardJoin::Event::kExpired ? RewardOutcome::kLate
                                                               : RewardOutcome::kDuplicate;
    if (request.reward.has_value()) result.arm_outcomes.emplace_back("", result.outcome);
    for (const auto& [arm_id, reward] : request.arm_rewards) {
      result.arm_outcomes.emplace_back(arm_id, result.outcome);
    }
    return judged;
  }
  const LedgerEntry& entry = *join.entry;
  if (join.single_reward_for_slate) {
    judged.error = absl::InvalidArgumentError(
        absl::StrFormat("event_id %s returned %d arms; report each arm's reward in arm_rewards",
                        QuoteId(request.event_id), entry.arms.size()));
    return judged;
  }
  if (!join.unknown_arm.empty()) {
    std::vector<std::string> returned;
    for (const LedgerArm& arm : entry.arms) returned.push_back(QuoteId(arm.arm_id));
    judged.error = absl::InvalidArgumentError(absl::StrFormat(
        "arm %s was not returned by event_id %s (it returned %s)", QuoteId(join.unknown_arm),
        QuoteId(request.event_id), absl::StrJoin(returned, ", ")));
    return judged;
  }
  for (const RewardJoin::Report& report : join.reports) {
    result.arm_outcomes.emplace_back(
        entry.arms[report.arm].arm_id,
        report.accepted ? RewardOutcome::kAccepted : RewardOutcome::kDuplicate);
    if (!report.accepted) continue;
    RewardOp op{entry.event_id, report.arm, report.reward, {}};
    if (report.learn_now) {
      op.learn.push_back(ObservationOf(entry, report.arm, report.reward));
      judged.learn_now = true;
    }
    judged.ops.push_back(std::move(op));
  }
  result.outcome = judged.ops.empty() ? RewardOutcome::kDuplicate : RewardOutcome::kAccepted;
  return judged;
}

JudgedActivation JudgeActivation(DecisionLedger& ledger, const std::string& event_id,
                                 const ModelOptions& options) {
  JudgedActivation judged;
  LedgerEntry* entry = ledger.Find(event_id);
  if (entry == nullptr) {
    judged.outcome = ledger.FindClosed(event_id) != nullptr ? ActivationOutcome::kClosed
                                                            : ActivationOutcome::kUnknownEvent;
    return judged;
  }
  if (!entry->held()) {
    judged.outcome = ActivationOutcome::kAlreadyActive;
    return judged;
  }
  judged.outcome = ActivationOutcome::kActivated;
  judged.entry = entry;
  judged.op.event_id = event_id;
  if (options.aggregation == Aggregation::kFirst) {  // the others learn at the close
    for (size_t a = 0; a < entry->arms.size(); ++a) {
      if (entry->arms[a].reports > 0) {
        judged.op.learn.push_back(
            ObservationOf(*entry, static_cast<int>(a), entry->arms[a].aggregate));
      }
    }
  }
  return judged;
}

void ApplyToLedger(const ModelOp& op, const ModelOptions& options, DecisionLedger* ledger) {
  if (const auto* decide = std::get_if<DecideOp>(&op)) {
    if (ledger->Find(decide->event_id) != nullptr) return;
    if (ledger->Full()) {  // cannot happen: live, a CloseOp made room first
      if (LedgerEntry* victim = ledger->OldestCompleted()) {
        ledger->Close(victim, ClosedAs::kCompleted, absl::FromUnixMicros(decide->created_micros));
      } else {
        return;
      }
    }
    ledger->Insert(EntryOf(*decide, options));
  } else if (const auto* reward = std::get_if<RewardOp>(&op)) {
    LedgerEntry* entry = ledger->Find(reward->event_id);
    if (entry != nullptr && reward->arm >= 0 &&
        reward->arm < static_cast<int>(entry->arms.size())) {
      ledger->Report(entry, reward->arm, reward->reward);
    }
  } else if (const auto* close = std::get_if<CloseOp>(&op)) {
    if (LedgerEntry* entry = ledger->Find(close->event_id)) {
      ledger->Close(entry, static_cast<ClosedAs>(close->how),
                    absl::FromUnixMicros(close->closed_micros));
    }
  } else if (const auto* activate = std::get_if<ActivateOp>(&op)) {
    if (LedgerEntry* entry = ledger->Find(activate->event_id)) ledger->Activate(entry);
  }
}

std::string EncodeLedger(const LedgerCapture& ledger) {
  // An upper bound of the size (every varint counted at its longest, 10 bytes), so that the
  // buffer is allocated once: a ledger of a million decisions encodes to a few hundred
  // megabytes.
  constexpr size_t kVarint = 10;
  size_t bound = 1 + 4 * kVarint + ledger.tombstones.size() * (kVarint + 1 + 8);
  for (const auto& t : ledger.tombstones) bound += t->event_id.size();
  bound += 2 * kVarint;  // the counts of the candidates and flags sections
  for (const auto& e : ledger.entries) {
    bound += 5 * kVarint + 16 + e->event_id.size() + e->user_id.size() + 8 * e->context.size();
    bound += 2 * kVarint + 1 + e->event_id.size();  // its flags
    for (const LedgerArm& arm : e->arms) {
      bound += 5 * kVarint + 5 * 8 + 1 + arm.arm_id.size() + 8 * arm.features.size();
    }
    if (e->decision.explored || e->decision.evaluation != nullptr) {
      bound += kVarint + 2 + kVarint + 8 * 2 + 1 + kVarint;
      if (e->decision.evaluation != nullptr) bound += 16 * e->decision.evaluation->targets.size();
    }
    if (e->decision.candidates != nullptr) {
      bound += 2 * kVarint + e->event_id.size();
      for (const std::vector<double>& features : e->decision.candidates->features) {
        bound += kVarint + 8 * features.size() + 8;
      }
    }
  }
  storage::Encoder out;
  out.Reserve(bound);
  // Open decisions oldest first, then tombstones oldest first.
  out.PutU8(static_cast<uint8_t>(ledger.aggregation));
  out.PutVarint64(static_cast<uint64_t>(ledger.expired_total));
  out.PutVarint64(static_cast<uint64_t>(ledger.entries.size()));
  size_t rewards = 0;  // index into ledger.arm_rewards
  for (const auto& entry : ledger.entries) {
    const LedgerEntry& e = *entry;
    out.PutString(e.event_id);
    out.PutFixed64(e.fingerprint);
    out.PutFixed64(static_cast<uint64_t>(ToMicros(e.created)));
    out.PutString(e.user_id);
    out.PutDoubles(e.context.data(), e.context.size());
    out.PutVarint64(e.decision.model_version);
    out.PutVarint64(e.arms.size());
    for (size_t a = 0; a < e.arms.size(); ++a) {
      const LedgerArm& arm = e.arms[a];
      const ChosenArm& chosen = e.decision.arms[a];
      // The reward state as captured: the live entry's may have changed since.
      const LedgerCapture::ArmRewards& state = ledger.arm_rewards[rewards++];
      out.PutString(arm.arm_id);
      out.PutDoubles(arm.features.data(), arm.features.size());
      out.PutVarint64(static_cast<uint64_t>(state.reports));
      out.PutDouble(state.aggregate);
      out.PutVarint64(static_cast<uint32_t>(chosen.candidate_index));
      out.PutDouble(chosen.mean);
      out.PutDouble(chosen.stddev);
      out.PutDouble(chosen.score);
      out.PutU8(chosen.probability.has_value() ? 1 : 0);
      out.PutDouble(chosen.probability.value_or(0.0));
    }
  }
  out.PutVarint64(static_cast<uint64_t>(ledger.tombstones.size()));
  for (const auto& t : ledger.tombstones) {
    out.PutString(t->event_id);
    out.PutU8(static_cast<uint8_t>(t->how));
    out.PutFixed64(static_cast<uint64_t>(ToMicros(t->closed)));
  }
  // The candidates of decisions whose policy learns from all of them (absent before they
  // existed, and when no such decision is open).
  int64_t with_candidates = 0;
  for (const auto& e : ledger.entries) {
    if (e->decision.candidates != nullptr) ++with_candidates;
  }
  // Then, when any open decision is deferred or has a baseline, those decisions' flags (the
  // candidates' count is written, 0 included, so that this section can follow).
  int64_t with_flags = 0;
  for (const auto& e : ledger.entries) {
    if (e->deferred || e->baseline >= 0) ++with_flags;
  }
  // Then, when any open decision was explored or has an evaluation record, those decisions'
  // evaluation part, each named by its position among the open decisions (the candidates' and
  // the flags' counts are written, 0 included, so that this section can follow).
  int64_t with_evaluation = 0;
  for (const auto& e : ledger.entries) {
    if (e->decision.explored || e->decision.evaluation != nullptr) ++with_evaluation;
  }
  if (with_candidates > 0 || with_flags > 0 || with_evaluation > 0) {
    out.PutVarint64(static_cast<uint64_t>(with_candidates));
    for (const auto& e : ledger.entries) {
      if (e->decision.candidates == nullptr) continue;
      out.PutString(e->event_id);
      PutCandidates(&out, *e->decision.candidates);
    }
  }
  if (with_flags > 0 || with_evaluation > 0) {
    out.PutVarint64(static_cast<uint64_t>(with_flags));
    for (size_t i = 0; i < ledger.entries.size(); ++i) {
      const LedgerEntry& e = *ledger.entries[i];
      if (!e.deferred && e.baseline < 0) continue;
      out.PutString(e.event_id);
      out.PutU8(static_cast<uint8_t>((e.deferred ? 1 : 0) | (ledger.activated[i] ? 2 : 0)));
      out.PutVarint64(static_cast<uint64_t>(e.baseline + 1));
    }
  }
  if (with_evaluation > 0) {
    out.PutVarint64(static_cast<uint64_t>(with_evaluation));
    for (size_t i = 0; i < ledger.entries.size(); ++i) {
      const Decision& d = ledger.entries[i]->decision;
      if (!d.explored && d.evaluation == nullptr) continue;
      out.PutVarint64(i);
      out.PutU8(d.explored ? 1 : 0);
      out.PutU8(d.evaluation != nullptr ? 1 : 0);
      if (d.evaluation != nullptr) PutEvaluationRecord(&out, *d.evaluation);
    }
  }
  return out.Release();
}

absl::Status DecodeLedger(storage::Decoder* in_ptr, const ModelOptions& options,
                          DecisionLedger* ledger) {
  storage::Decoder& in = *in_ptr;
  const auto bad = MalformedSnapshot;
  uint8_t aggregation = 0;
  uint64_t expired = 0, count = 0;
  if (!in.GetU8(&aggregation) || aggregation != static_cast<uint8_t>(options.aggregation)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": the snapshot was taken with another ledger.aggregation", options.name));
  }
  if (!in.GetVarint64(&expired) || !in.GetVarint64(&count) || count > in.remaining()) {
    return bad("ledger");
  }
  ledger->set_expired_total(static_cast<int64_t>(expired));
  std::vector<LedgerEntry*> restored;  // the open decisions, oldest first
  for (uint64_t i = 0; i < count; ++i) {
    DecideOp op;
    uint64_t created = 0, version = 0, arms = 0;
    if (!in.GetString(&op.event_id) || !in.GetFixed64(&op.fingerprint) ||
        !in.GetFixed64(&created) || !in.GetString(&op.user) ||
        !in.GetDoubles(&op.context, 1u << 24) || !in.GetVarint64(&version) ||
        !in.GetVarint64(&arms) || arms > in.remaining()) {
      return bad("ledger entry");
    }
    op.created_micros = static_cast<int64_t>(created);
    op.model_version = version;
    std::vector<std::pair<uint64_t, double>> reports(arms);
    op.arms.resize(arms);
    for (uint64_t a = 0; a < arms; ++a) {
      DecideOp::Arm& arm = op.arms[a];
      uint64_t index = 0;
      uint8_t has_probability = 0;
      if (!in.GetString(&arm.arm_id) || !in.GetDoubles(&arm.features, 1u << 24) ||
          !in.GetVarint64(&reports[a].first) || !in.GetDouble(&reports[a].second) ||
          !in.GetVarint64(&index) || index > INT32_MAX || !in.GetDouble(&arm.mean) ||
          !in.GetDouble(&arm.stddev) || !in.GetDouble(&arm.score) || !in.GetU8(&has_probability) ||
          has_probability > 1 || !in.GetDouble(&arm.probability)) {
        return bad("ledger arm");
      }
      arm.candidate_index = static_cast<int32_t>(index);
      arm.has_probability = has_probability == 1;
    }
    auto entry = EntryOf(op, options);
    for (uint64_t a = 0; a < arms; ++a) {
      entry->arms[a].reports = static_cast<int>(std::min<uint64_t>(reports[a].first, INT32_MAX));
      entry->arms[a].aggregate = reports[a].second;
    }
    if (ledger->Find(op.event_id) != nullptr || ledger->Full()) return bad("ledger entries");
    restored.push_back(ledger->Insert(std::move(entry)));
  }
  if (!in.GetVarint64(&count) || count > in.remaining()) return bad("tombstones");
  for (uint64_t i = 0; i < count; ++i) {
    Tombstone t;
    uint8_t how = 0;
    uint64_t closed = 0;
    if (!in.GetString(&t.event_id) || !in.GetU8(&how) || how < 1 || how > 2 ||
        !in.GetFixed64(&closed)) {
      return bad("tombstone");
    }
    t.how = static_cast<ClosedAs>(how);
    t.closed = absl::FromUnixMicros(static_cast<int64_t>(closed));
    ledger->RestoreTombstone(std::move(t));
  }
  if (!in.done()) {
    if (!in.GetVarint64(&count) || count > in.remaining()) return bad("decision candidates");
    for (uint64_t i = 0; i < count; ++i) {
      std::string event_id;
      std::shared_ptr<const DecisionCandidates> candidates;
      if (!in.GetString(&event_id) || !GetCandidates(&in, &candidates)) {
        return bad("decision candidates");
      }
      LedgerEntry* entry = ledger->Find(event_id);
      if (entry == nullptr || entry->decision.candidates != nullptr) {
        return bad("decision candidates");
      }
      for (const ChosenArm& arm : entry->decision.arms) {
        if (arm.candidate_index < 0 ||
            arm.candidate_index >= static_cast<int>(candidates->probabilities.size())) {
          return bad("decision candidates");
        }
      }
      entry->decision.candidates = std::move(candidates);
    }
  }
  if (!in.done()) {
    // 0 when only the evaluation section follows.
    if (!in.GetVarint64(&count) || count > in.remaining()) return bad("decision flags");
    for (uint64_t i = 0; i < count; ++i) {
      std::string event_id;
      uint8_t flags = 0;
      uint64_t baseline = 0;
      if (!in.GetString(&event_id) || !in.GetU8(&flags) || flags > 3 || flags == 2 ||
          !in.GetVarint64(&baseline) || baseline > static_cast<uint64_t>(INT32_MAX)) {
        return bad("decision flags");
      }
      LedgerEntry* entry = ledger->Find(event_id);
      if (entry == nullptr || entry->deferred || entry->baseline >= 0) {
        return bad("decision flags");
      }
      entry->baseline = static_cast<int>(baseline) - 1;
      if (flags & 1) ledger->RestoreDeferral(entry, (flags & 2) != 0);
    }
  }
  if (!in.done()) {
    if (!in.GetVarint64(&count) || count == 0 || count > restored.size()) {
      return bad("decision evaluation");
    }
    uint64_t previous = 0;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t index = 0;
      uint8_t explored = 0, has_record = 0;
      if (!in.GetVarint64(&index) || index >= restored.size() || (i > 0 && index <= previous) ||
          !in.GetU8(&explored) || explored > 1 || !in.GetU8(&has_record) || has_record > 1 ||
          (explored == 0 && has_record == 0)) {
        return bad("decision evaluation");
      }
      previous = index;
      Decision& decision = restored[index]->decision;
      decision.explored = explored == 1;
      if (has_record == 1) {
        auto record = std::make_shared<EvaluationRecord>();
        if (!GetEvaluationRecord(&in, record.get()) || decision.arms.size() != 1) {
          return bad("decision evaluation");
        }
        decision.evaluation = std::move(record);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
