#include "core/model/engine.h"

#include <algorithm>
#include <random>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/random.h"
#include "core/base/thread_priority.h"
#include "core/model/request_validation.h"
#include "core/storage/coding.h"

namespace graphbandit {

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
  // Named features, only when there are some: a dense request's fingerprint stays what it was
  // (fingerprints are logged, and compared when a decision is retried after a restart).
  if (HasNamedFeatures(request)) {
    auto put = [&encoder](absl::Span<const FeatureNamespace> namespaces) {
      encoder.PutVarint64(namespaces.size());
      for (const FeatureNamespace& ns : namespaces) {
        encoder.PutString(ns.name);
        encoder.PutVarint64(ns.features.size());
        for (const NamedFeature& feature : ns.features) {
          encoder.PutString(feature.name);
          encoder.PutU8(static_cast<uint8_t>(feature.value.type));
          switch (feature.value.type) {
            case FeatureValue::Type::kNumber:
              encoder.PutDouble(feature.value.number);
              break;
            case FeatureValue::Type::kString:
              encoder.PutString(feature.value.text);
              break;
            case FeatureValue::Type::kStrings:
              encoder.PutVarint64(feature.value.texts.size());
              for (absl::string_view text : feature.value.texts) encoder.PutString(text);
              break;
          }
        }
      }
    };
    put(request.context_features);
    for (const CandidateRef& candidate : request.candidates) put(candidate.named_features);
  }
  // Likewise only when set: a deferred decision. (The baseline is not part of the request's
  // identity: the REST API derives it from the actions, and its retries after an upgrade must
  // still match decisions stored before the baseline was recorded.)
  if (request.defer_activation) encoder.PutU8(1);
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
  // Challengers (core/model/shadow_feed.h): each shadows a model that serves and logs every
  // candidate's probability.
  for (const ModelOptions& model : options.models) {
    if (model.shadow_of.empty()) continue;
    if (absl::Status s = ValidateModelOptions(model); !s.ok()) return s;
    auto leader = std::find_if(options.models.begin(), options.models.end(),
                               [&](const ModelOptions& m) { return m.name == model.shadow_of; });
    if (leader == options.models.end() && model.shadow_of == engine->default_model_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": shadow_of names \"%s\", the default model, which is not declared "
          "(created with default settings, its evaluation.epsilon is 0): declare it with "
          "evaluation.epsilon above 0",
          model.name, model.shadow_of));
    }
    if (leader == options.models.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\": shadow_of names \"%s\", which this server does not host",
                          model.name, model.shadow_of));
    }
    if (options.shared_log) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": challengers (shadow_of) are not available in cluster mode: a reward may "
          "reach the shared log from another node before the decision this node has yet to "
          "shadow",
          model.name));
    }
    if (model.name == engine->default_model_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\" is the default model and a challenger (shadow_of); a challenger never "
          "serves: make another model the default",
          model.name));
    }
    for (int p = 0; p < kEvaluatedPolicies; ++p) {
      if (model.name == EvaluatedPolicyName(static_cast<EvaluatedPolicy>(p))) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "model \"%s\": a challenger is reported by its name beside the policies deployed, "
            "uniform, greedy and baseline; give it another name",
            model.name));
      }
    }
    if (!leader->shadow_of.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": shadow_of names \"%s\", itself a challenger; a challenger shadows a "
          "model that serves",
          model.name, model.shadow_of));
    }
    if (!(leader->evaluation_epsilon > 0.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": shadow_of names \"%s\", whose evaluation.epsilon is 0; a challenger is "
          "judged on the leader's decisions logged with every candidate's probability, which "
          "needs the leader's evaluation share above 0",
          model.name, model.shadow_of));
    }
  }
  if (!has_default) {
    ModelOptions defaults;
    defaults.name = engine->default_model_;
    options.models.push_back(defaults);
  }
  Replication replication;
  if (options.shared_log) {
    const bool valid_id = !options.node_id.empty() && options.node_id.size() <= 64 &&
                          std::all_of(options.node_id.begin(), options.node_id.end(), [](char c) {
                            return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
                                   c == '_' || c == '-';
                          });
    if (!valid_id) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "node id %s: cluster mode needs a node id of 1 to 64 letters, digits, '.', '_' or '-'",
          QuoteId(options.node_id)));
    }
    engine->event_id_prefix_ = absl::StrCat(options.node_id, "-");
    replication.node_id = options.node_id;
    replication.expiry_grace = options.expiry_grace;
  }
  for (const ModelOptions& model_options : options.models) {
    if (options.shared_log) {
      absl::StatusOr<std::shared_ptr<SharedLog>> log = options.shared_log(model_options);
      if (!log.ok()) return log.status();
      replication.log = *std::move(log);
    }
    auto model = Model::Open(model_options, options.state_dir, options.durability, replication);
    if (!model.ok()) return model.status();
    engine->models_.emplace(model_options.name, *std::move(model));
  }
  for (const ModelOptions& m : options.models) {
    if (m.shadow_of.empty()) continue;
    auto feed = std::make_shared<ShadowFeed>(engine->models_.at(m.name).get());
    engine->challengers_[m.shadow_of].push_back(feed);
    engine->feeds_.push_back(std::move(feed));
  }
  if (options.run_sweeper) {
    // Expiry runs a few times per shortest window, between 5 ms and 1 s apart.
    absl::Duration shortest = absl::InfiniteDuration();
    for (const ModelOptions& m : options.models) shortest = std::min(shortest, m.reward_window);
    const absl::Duration period = std::clamp(shortest / 4, absl::Milliseconds(5), absl::Seconds(1));
    engine->sweeper_ = std::thread([e = engine.get(), period] {
      SetThreadName("gb-expiry");
      e->SweeperLoop(period);
    });
  }
  return engine;
}

Engine::~Engine() {
  if (Shutdown()) return;
  // A model's writer outlived the shutdown deadline and still uses its model: leak those
  // models rather than destroy them under it (the process is about to exit).
  for (const std::string& name : busy_models_) {
    static_cast<void>(models_.find(name)->second.release());
  }
}

void Engine::BeginShutdown() {
  for (auto& [name, model] : models_) model->BeginShutdown();
}

bool Engine::Shutdown(absl::Time deadline) {
  std::call_once(shutdown_once_, [this, deadline] {
    {
      MutexLock lock(&sweeper_mu_);
      sweeper_stop_ = true;
      sweeper_cv_.SignalAll();
    }
    if (sweeper_.joinable()) sweeper_.join();
    // Every model is told first, so that they stop in parallel and no call waits for room
    // any more (a challenger's feed may be in one).
    for (auto& [name, model] : models_) model->BeginShutdown();
    // Challengers take what their leaders were sent while the deadline allows, before the
    // models stop.
    for (auto& feed : feeds_) feed->RequestStop(deadline);
    for (auto& feed : feeds_) feed->Stop(deadline);
    // Each model then gets what is left of the deadline, and at least a moment (an idle writer
    // stops at once).
    for (auto& [name, model] : models_) {
      if (!model->Shutdown(std::max(deadline, absl::Now() + absl::Milliseconds(200)))) {
        stopped_cleanly_ = false;
        busy_models_.push_back(name);
      }
    }
  });
  return stopped_cleanly_;
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

std::vector<const ShadowFeed*> Engine::Challengers(absl::string_view leader) const {
  std::vector<const ShadowFeed*> out;
  if (auto it = challengers_.find(leader); it != challengers_.end()) {
    for (const auto& feed : it->second) out.push_back(feed.get());
  }
  return out;
}

std::vector<std::shared_ptr<ShadowFeed>> Engine::FeedsOf(const Model& leader) const {
  auto it = challengers_.find(leader.name());
  return it == challengers_.end() ? std::vector<std::shared_ptr<ShadowFeed>>{} : it->second;
}

void Engine::DrainChallengers() {
  for (auto& feed : feeds_) feed->Drain();
}

absl::Status Engine::RefuseChallenger(const Model& model, absl::string_view call) {
  return absl::FailedPreconditionError(absl::StrFormat(
      "model \"%s\" is a challenger of \"%s\" (shadow_of): it never serves and learns only what "
      "its leader is sent; send %s to \"%s\"",
      model.name(), model.options().shadow_of, call, model.options().shadow_of));
}

std::vector<std::string> Engine::ModelNames() const {
  std::vector<std::string> names;
  for (const auto& [name, model] : models_) names.push_back(name);
  return names;
}

absl::StatusOr<Decision> Engine::SelectArm(const DecisionRequest& request, absl::Time deadline) {
  return SelectArmAt(request, absl::Now(), deadline);
}

absl::StatusOr<RewardResult> Engine::ReportReward(const RewardRequest& request,
                                                  absl::Time deadline) {
  return ReportRewardAt(request, absl::Now(), deadline);
}

absl::StatusOr<Decision> Engine::SelectArmAt(const DecisionRequest& request, absl::Time now,
                                             absl::Time deadline) {
  absl::StatusOr<Model*> found = FindModel(request.model);
  if (!found.ok()) return found.status();
  if (now >= deadline)
    return absl::DeadlineExceededError("the call's deadline passed before it started");
  Model* model = *found;
  if (!model->options().shadow_of.empty()) return RefuseChallenger(*model, "SelectArm");
  if (request.min_model_version > 0) {
    if (absl::Status s = model->WaitForVersion(request.min_model_version, deadline); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<Decision> decision;
  if (!request.event_id.empty()) {
    if (absl::Status s = CheckEventId(request.event_id); !s.ok()) return s;
    decision = model->Select(request, std::string(request.event_id), /*client_event_id=*/true,
                             RequestFingerprint(request), now, deadline);
  } else {
    // In cluster mode the node id keeps the ids of different nodes apart.
    decision = model->Select(request, absl::StrCat(event_id_prefix_, NewEventId()),
                             /*client_event_id=*/false, 0, now, deadline);
  }
  if (!decision.ok()) return decision;
  for (const auto& feed : FeedsOf(*model)) feed->Decided(request, *decision, now);
  decision->logging_probabilities.reset();  // for the challengers only
  return decision;
}

absl::StatusOr<ActivationResult> Engine::Activate(absl::string_view model_name,
                                                  const std::string& event_id,
                                                  absl::Time deadline) {
  return ActivateAt(model_name, event_id, absl::Now(), deadline);
}

absl::StatusOr<ActivationResult> Engine::ActivateAt(absl::string_view model_name,
                                                    const std::string& event_id, absl::Time now,
                                                    absl::Time deadline) {
  absl::StatusOr<Model*> model = FindModel(model_name);
  if (!model.ok()) return model.status();
  // The same rule as a reward's event id: a malformed one is the caller's error, not an
  // unknown event.
  if (absl::Status s = CheckEventId(event_id); !s.ok()) return s;
  if (!(*model)->options().shadow_of.empty()) return RefuseChallenger(**model, "Activate");
  // An activation the leader logged reaches its challengers, whatever its answer (a wait for
  // durability that ran out still learns it, now or at the next start's replay).
  bool logged = false;
  absl::StatusOr<ActivationResult> result = (*model)->Activate(event_id, now, deadline, &logged);
  if (logged) {
    for (const auto& feed : FeedsOf(**model)) feed->Activated(event_id, now);
  }
  return result;
}

absl::StatusOr<RewardResult> Engine::ReportRewardAt(const RewardRequest& request, absl::Time now,
                                                    absl::Time deadline) {
  absl::StatusOr<Model*> owner = RewardOwner(request, now, deadline);
  if (!owner.ok()) return owner.status();
  if (*owner == nullptr) return RewardResult{};  // unknown event
  // A report that reached the leader's decision reaches its challengers, whatever the answer
  // (as the activation above); each judges it against its own copy of the decision.
  bool joined = false;
  absl::StatusOr<RewardResult> result = (*owner)->Reward(request, now, deadline, &joined);
  if (joined) {
    for (const auto& feed : FeedsOf(**owner)) feed->Rewarded(request, now);
  }
  return result;
}

bool Engine::TryReportRewardWithoutWaiting(const RewardRequest& request, absl::Time deadline,
                                           Model::RewardCallback* done) {
  const absl::Time now = absl::Now();
  absl::StatusOr<Model*> owner = RewardOwner(request, now, deadline);
  if (!owner.ok() || *owner == nullptr) {
    std::move (*done)(owner.ok() ? absl::StatusOr<RewardResult>(RewardResult{}) : owner.status());
    return true;
  }
  std::vector<std::shared_ptr<ShadowFeed>> feeds = FeedsOf(**owner);
  if (feeds.empty()) return (*owner)->TryRewardWithoutWaiting(request, now, done);
  // The challengers are told before the caller is answered (as in ReportRewardAt): a client's
  // next call for the event, once answered, cannot overtake the forwarded report. The model
  // sets `*joined` before it runs the callback.
  auto joined = std::make_shared<bool>(false);
  auto inner = std::make_shared<Model::RewardCallback>(std::move(*done));
  Model::RewardCallback told = [feeds, request, now, joined,
                                inner](absl::StatusOr<RewardResult> result) mutable {
    if (*joined) {
      for (const auto& feed : feeds) feed->Rewarded(request, now);
    }
    std::move (*inner)(std::move(result));
  };
  if ((*owner)->TryRewardWithoutWaiting(request, now, &told, joined.get())) return true;
  *done = std::move(*inner);  // refused (it has to wait): the caller gets its callback back
  return false;
}

absl::StatusOr<Model*> Engine::RewardOwner(const RewardRequest& request, absl::Time now,
                                           absl::Time deadline) {
  // The event id routes the report, so it is checked first; the rest of the report is checked
  // by the model that owns it (Model::Reward, ValidateRewardRequest), against its own bound.
  if (absl::Status s = CheckEventId(request.event_id); !s.ok()) return s;
  if (now >= deadline)
    return absl::DeadlineExceededError("the call's deadline passed before it started");

  // Which model made the decision?
  // The models a reward can be for: not the challengers, which hold their leaders' event ids.
  std::vector<Model*> serving;
  for (const auto& [name, model] : models_) {
    if (model->options().shadow_of.empty()) serving.push_back(model.get());
  }
  Model* owner = nullptr;
  if (!request.model.empty()) {
    absl::StatusOr<Model*> model = FindModel(request.model);
    if (!model.ok()) return model.status();
    owner = *model;
    if (!owner->options().shadow_of.empty()) return RefuseChallenger(*owner, "ReportReward");
  } else if (!event_id_prefix_.empty() && serving.size() > 1) {
    // Cluster mode: this node may not have applied the decision yet, so it cannot tell which
    // model made it.
    return absl::InvalidArgumentError(absl::StrFormat(
        "this node hosts %d models in cluster mode: set model to name the one that made "
        "event_id %s",
        serving.size(), QuoteId(request.event_id)));
  } else if (serving.size() == 1) {
    owner = serving.front();  // its ledger answers for an unknown event too
  } else {
    // Several models: which one holds the event (the reward itself is then joined once).
    std::vector<Model*> owners;
    for (Model* model : serving) {
      if (model->Knows(request.event_id)) owners.push_back(model);
    }
    if (owners.size() > 1) {
      std::vector<std::string> names;
      for (Model* m : owners) names.push_back(m->name());
      return absl::InvalidArgumentError(
          absl::StrFormat("event_id %s exists in models %s; set model to say which one",
                          QuoteId(request.event_id), absl::StrJoin(names, ", ")));
    }
    if (owners.empty()) {
      // An unknown event: the report is still checked (no model's bound applies), so that a
      // malformed one is refused whichever node or model it reaches.
      if (absl::Status s = ValidateRewardRequest(request, nullptr); !s.ok()) return s;
      return nullptr;
    }
    owner = owners.front();
  }
  return owner;
}

int Engine::ExpireDue(absl::Time now) {
  int closed = 0;
  for (auto& [name, model] : models_) closed += model->ExpireDue(now);
  return closed;
}

void Engine::SweeperLoop(absl::Duration period) {
  MutexLock lock(&sweeper_mu_);
  while (!sweeper_stop_) {
    sweeper_cv_.WaitFor(&sweeper_mu_, period,
                        [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return sweeper_stop_; });
    if (sweeper_stop_) break;
    sweeper_mu_.Unlock();
    const absl::Time now = absl::Now();
    for (auto& [name, model] : models_) {
      // Closes teach too: like rewards, they wait while the model's writer is behind.
      if (model->HasRoom()) model->ExpireDue(now);
    }
    sweeper_mu_.Lock();
  }
}

}  // namespace graphbandit
