#include "core/engine.h"

#include <cmath>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/random.h"
#include "core/storage/coding.h"

namespace graphbandit {
namespace {

absl::Status CheckEventId(absl::string_view id) {
  if (id.empty() || id.size() > kMaxEventIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "event_id must be 1..%d printable ASCII characters, got %d bytes", kMaxEventIdBytes,
        id.size()));
  }
  for (char c : id) {
    if (c < 0x20 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("event_id %s contains a byte outside printable ASCII", QuoteId(id)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::string_view RewardOutcomeName(RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::kAccepted:
      return "accepted";
    case RewardOutcome::kDuplicate:
      return "duplicate";
    case RewardOutcome::kUnknownEvent:
      return "unknown_event";
  }
  return "unknown";
}

uint64_t RequestFingerprint(const DecisionRequest& request) {
  storage::Encoder encoder;
  encoder.PutString(request.user_id);
  encoder.PutDoubles(request.context.data(), request.context.size());
  encoder.PutVarint64(request.candidates.size());
  for (const CandidateRef& candidate : request.candidates) {
    encoder.PutString(candidate.id);
    encoder.PutDoubles(candidate.features.data(), candidate.features.size());
  }
  encoder.PutVarint64(static_cast<uint64_t>(request.slate_size));
  return StableHash(encoder.data());
}

std::string NewEventId() {
  thread_local Rng rng([] {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) ^ device();
  }());
  return absl::StrFormat("%016x%016x", rng.NextU64(), rng.NextU64());
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Open(EngineOptions options) {
  std::unique_ptr<Engine> engine(new Engine());
  engine->default_model_ = options.default_model.empty() ? "default" : options.default_model;
  bool has_default = false;
  absl::flat_hash_set<std::string> names;
  for (const ModelOptions& model : options.models) {
    if (!names.insert(model.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\" is declared twice", model.name));
    }
    has_default |= model.name == engine->default_model_;
  }
  if (!has_default) {
    ModelOptions defaults;
    defaults.name = engine->default_model_;
    options.models.push_back(defaults);
  }
  for (const ModelOptions& model_options : options.models) {
    auto model = Model::Open(model_options, options.state_dir);
    if (!model.ok()) return model.status();
    engine->models_.emplace(model_options.name, *std::move(model));
  }
  return engine;
}

Engine::~Engine() { Shutdown(); }

void Engine::Shutdown() {
  for (auto& [name, model] : models_) model->Shutdown();
}

absl::StatusOr<Model*> Engine::FindModel(absl::string_view name) const {
  if (name.empty()) name = default_model_;
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrFormat("unknown model %s; this server hosts: %s",
                                               QuoteId(name), absl::StrJoin(ModelNames(), ", ")));
  }
  return it->second.get();
}

std::vector<std::string> Engine::ModelNames() const {
  std::vector<std::string> names;
  for (const auto& [name, model] : models_) names.push_back(name);
  return names;
}

absl::StatusOr<Decision> Engine::SelectArm(const DecisionRequest& request) {
  absl::StatusOr<Model*> found = FindModel(request.model);
  if (!found.ok()) return found.status();
  Model* model = *found;
  const absl::Time now = absl::Now();
  std::string event_id;
  uint64_t fingerprint = 0;
  if (!request.event_id.empty()) {
    if (absl::Status s = CheckEventId(request.event_id); !s.ok()) return s;
    event_id = std::string(request.event_id);
    fingerprint = RequestFingerprint(request);
    Decision stored;
    uint64_t stored_fingerprint = 0;
    if (model->ledger().Lookup(event_id, now, &stored, &stored_fingerprint)) {
      if (stored_fingerprint != fingerprint) {
        return absl::AlreadyExistsError(absl::StrFormat(
            "event_id %s was already used for a different request on model \"%s\"",
            QuoteId(event_id), model->name()));
      }
      stored.replayed = true;
      return stored;
    }
  } else {
    event_id = NewEventId();
  }
  if (!model->ledger().HasRoom(now)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions); "
        "report rewards or let them expire",
        model->name(), model->options().max_decisions));
  }
  absl::StatusOr<Decision> decision = model->Decide(request, event_id);
  if (!decision.ok()) return decision.status();

  auto entry = std::make_unique<LedgerEntry>();
  entry->event_id = event_id;
  entry->fingerprint = fingerprint;
  entry->created = now;
  entry->user_id = std::string(request.user_id);
  entry->context.assign(request.context.begin(), request.context.end());
  for (const ChosenArm& arm : decision->arms) {
    const CandidateRef& candidate = request.candidates[arm.candidate_index];
    entry->arms.push_back(LedgerArm{arm.arm_id,
                                    std::vector<double>(candidate.features.begin(),
                                                        candidate.features.end()),
                                    false});
  }
  entry->decision = *decision;
  LedgerEntry existing;
  switch (model->ledger().Insert(std::move(entry), now, &existing)) {
    case DecisionLedger::InsertResult::kInserted:
      model->CountDecision();
      return decision;
    case DecisionLedger::InsertResult::kExists:  // a concurrent request with the same id won
      if (existing.fingerprint != fingerprint) {
        return absl::AlreadyExistsError(absl::StrFormat(
            "event_id %s was already used for a different request on model \"%s\"",
            QuoteId(event_id), model->name()));
      }
      existing.decision.replayed = true;
      return existing.decision;
    case DecisionLedger::InsertResult::kFull:
      break;
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions)",
      model->name(), model->options().max_decisions));
}

absl::StatusOr<RewardResult> Engine::ReportReward(const RewardRequest& request) {
  if (request.event_id.empty()) return absl::InvalidArgumentError("event_id must not be empty");
  if (request.event_id.size() > kMaxEventIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("event_id is %d bytes long; the limit is %d", request.event_id.size(),
                        kMaxEventIdBytes));
  }
  if (request.reward.has_value() == !request.arm_rewards.empty()) {
    return absl::InvalidArgumentError(
        request.reward.has_value()
            ? "set either reward or arm_rewards, not both"
            : "no reward given: set reward (single-arm decisions) or arm_rewards");
  }
  if (request.reward.has_value() && !std::isfinite(*request.reward)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("reward is %s", std::isnan(*request.reward) ? "NaN" : "infinite"));
  }
  absl::flat_hash_set<absl::string_view> reported;
  for (size_t i = 0; i < request.arm_rewards.size(); ++i) {
    const auto& [arm_id, reward] = request.arm_rewards[i];
    if (arm_id.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("arm_rewards[%d].arm_id must not be empty", i));
    }
    if (!std::isfinite(reward)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "arm_rewards[%d].reward is %s", i, std::isnan(reward) ? "NaN" : "infinite"));
    }
    if (!reported.insert(arm_id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("arm %s is reported twice in arm_rewards", QuoteId(arm_id)));
    }
  }

  // Which model made the decision?
  std::vector<Model*> owners;
  const absl::Time now = absl::Now();
  if (!request.model.empty()) {
    absl::StatusOr<Model*> model = FindModel(request.model);
    if (!model.ok()) return model.status();
    owners.push_back(*model);
  } else {
    for (const auto& [name, model] : models_) {
      if (model->ledger().Contains(request.event_id, now)) owners.push_back(model.get());
    }
    if (owners.size() > 1) {
      std::vector<std::string> names;
      for (Model* m : owners) names.push_back(m->name());
      return absl::InvalidArgumentError(absl::StrFormat(
          "event_id %s exists in models %s; set model to say which one",
          QuoteId(request.event_id), absl::StrJoin(names, ", ")));
    }
    if (owners.empty()) return RewardResult{};  // unknown event
  }
  Model* model = owners.front();
  return model->ledger().WithEntry(
      request.event_id, now, [&](LedgerEntry* entry) -> absl::StatusOr<RewardResult> {
        RewardResult result;
        if (entry == nullptr) return result;  // unknown (or just expired)
        result.model = model->name();
        std::vector<std::pair<int, double>> slots;  // (arm index, reward)
        if (request.reward.has_value()) {
          if (entry->arms.size() != 1) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "event_id %s returned %d arms; report each arm's reward in arm_rewards",
                QuoteId(request.event_id), entry->arms.size()));
          }
          slots.emplace_back(0, *request.reward);
        } else {
          for (const auto& [arm_id, reward] : request.arm_rewards) {
            int index = -1;
            for (size_t a = 0; a < entry->arms.size(); ++a) {
              if (entry->arms[a].arm_id == arm_id) index = static_cast<int>(a);
            }
            if (index < 0) {
              std::vector<std::string> returned;
              for (const LedgerArm& arm : entry->arms) returned.push_back(QuoteId(arm.arm_id));
              return absl::InvalidArgumentError(absl::StrFormat(
                  "arm %s was not returned by event_id %s (it returned %s)", QuoteId(arm_id),
                  QuoteId(request.event_id), absl::StrJoin(returned, ", ")));
            }
            slots.emplace_back(index, reward);
          }
        }
        const double bound = model->options().reward_bound;
        for (const auto& [index, reward] : slots) {
          if (std::abs(reward) > bound) {
            return absl::InvalidArgumentError(absl::StrFormat(
                "reward %g for arm %s is outside [-%g, %g] (model \"%s\" limits.reward_bound)",
                reward, QuoteId(entry->arms[index].arm_id), bound, bound, model->name()));
          }
        }
        std::vector<ObserveOp> observations;
        std::vector<int> marked;
        for (const auto& [index, reward] : slots) {
          LedgerArm& arm = entry->arms[index];
          if (arm.rewarded) {
            result.arm_outcomes.emplace_back(arm.arm_id, RewardOutcome::kDuplicate);
            continue;
          }
          result.arm_outcomes.emplace_back(arm.arm_id, RewardOutcome::kAccepted);
          observations.push_back(ObserveOp{entry->event_id, arm.arm_id, entry->user_id,
                                           entry->context, arm.features, reward});
          model->ledger().MarkRewarded(entry, index);
          marked.push_back(index);
        }
        if (!observations.empty()) {
          if (absl::Status status = model->Learn(std::move(observations)); !status.ok()) {
            for (int index : marked) model->ledger().UnmarkRewarded(entry, index);
            return status;
          }
        }
        result.outcome = marked.empty() ? RewardOutcome::kDuplicate : RewardOutcome::kAccepted;
        return result;
      });
}

}  // namespace graphbandit
