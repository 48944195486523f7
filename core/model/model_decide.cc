// Decisions: fixing the dimensions with the first request, scoring and choosing a slate (with
// the evaluation share, an apprentice's baseline or a challenger's shadowing), logging it into
// the ledger, and closing the ledger's decisions.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/learner/learner_factory.h"
#include "core/model/explanations.h"
#include "core/model/ledger_records.h"
#include "core/model/model.h"
#include "core/policy/decision_step.h"
#include "core/policy/evaluation.h"
#include "core/policy/selection.h"

namespace graphbandit {

Dimensions Model::CurrentDimensions() const {
  MutexLock lock(&queue_mu_);
  return dims_;
}

absl::Status Model::EnsureDimensions(const FixDimensionsOp& want) {
  if (replicated()) {
    // Whichever node's record fixes them first wins; the caller validates against the result.
    auto done = PublishAndWait(ModelOp(want), absl::Now() + absl::Seconds(10));
    return done.ok() ? absl::OkStatus() : done.status();
  }
  auto completion = std::make_shared<OpCompletion>();
  {
    MutexLock ledger(&ledger_mu_);
    MutexLock lock(&queue_mu_);
    if (dims_.fixed) return absl::OkStatus();  // a concurrent request fixed them; re-validated
    dims_ = Dimensions{true, want.context_dim, want.arm_dim, want.context_slots, want.arm_slots};
    auto seq = AppendLocked(want, completion, absl::InfinitePast());
    if (!seq.ok()) {
      dims_ = Dimensions{};
      return seq.status();
    }
  }
  completion->done.Wait();
  return completion->status;
}

absl::StatusOr<Decision> Model::Decide(const DecisionRequest& request, const std::string& event_id,
                                       const Dimensions& slots, const ShadowOf* shadow) {
  Dimensions dims = CurrentDimensions();
  if (absl::Status s = ValidateDecisionRequest(request, dims, options_); !s.ok()) return s;
  if (!dims.fixed) {
    absl::Status s =
        EnsureDimensions(FixDimensionsOp{static_cast<int>(request.context.size()),
                                         static_cast<int>(request.candidates[0].features.size()),
                                         slots.context_slots, slots.arm_slots});
    if (!s.ok()) return s;
    dims = CurrentDimensions();
    if (dims.context_slots != slots.context_slots || dims.arm_slots != slots.arm_slots) {
      // A concurrent first request fixed them the other way (with or without named features).
      return absl::AbortedError(absl::StrFormat(
          "model \"%s\" was just given %d context and %d arm named-feature inputs by a "
          "concurrent first request; this request was encoded for %d and %d: send it again "
          "(without named features if the "
          "model now has no inputs for them)",
          options_.name, dims.context_slots, dims.arm_slots, slots.context_slots, slots.arm_slots));
    }
    if (s = ValidateDecisionRequest(request, dims, options_); !s.ok()) return s;
  }
  std::shared_ptr<const ModelView> view = View();
  if (view->scorer == nullptr) {  // another request is fixing the dimensions right now
    WaitForWriter();
    view = View();
    if (view->scorer == nullptr) return absl::InternalError("model has no posterior");
  }
  // The decision step the simulator takes too (core/policy/decision_step.h).
  std::vector<const double*> arms(request.candidates.size());
  for (size_t i = 0; i < arms.size(); ++i) arms[i] = request.candidates[i].features.data();
  Eigen::MatrixXd points;
  CandidatePoints(view->scaling, request.context.data(), arms, options_.intercept(), &points);
  const DecisionRule rule =
      RuleOf(DecisionSetupOf(options_), view->exploration_width, view->baseline);
  Rng rng = DecisionStream(event_id, options_.seed);
  ScoredSlate scored;
  const int32_t user = registry_->Find(request.user_id);
  if (absl::Status s = DecideSlate(*view->scorer, user, points, rule, request.slate_size, rng,
                                   /*probabilities=*/true, &scored);
      !s.ok()) {
    return s;
  }
  // The evaluation share (core/policy/evaluation.h), on a stream of its own: without it the
  // decision is exactly the policy's. An apprentice serves the baseline instead, with the same
  // share, and notes what its own rule would have chosen (core/policy/apprentice.h).
  bool explored = false;
  Eigen::VectorXd own_rule;
  // Every candidate's probability under the logging policy (single-arm decisions with the share).
  Eigen::VectorXd every;
  const bool log_every =
      options_.evaluation_epsilon > 0.0 && request.slate_size == 1 && shadow == nullptr;
  if (shadow != nullptr) {
    // A challenger's: the leader's choice, logged with the leader's probabilities; its own
    // policy as it would serve (its rule with its own share) is the target it is judged as.
    const auto n = static_cast<int>(request.candidates.size());
    if (request.slate_size != 1 || shadow->chosen < 0 || shadow->chosen >= n ||
        static_cast<int>(shadow->probabilities.size()) != n || !(shadow->propensity > 0.0) ||
        !(shadow->propensity <= 1.0)) {
      return absl::InternalError(absl::StrFormat(
          "model \"%s\": a shadowed decision needs one arm of %d candidates with every "
          "candidate's logging probability",
          options_.name, n));
    }
    Rng coin = EvaluationCoin(event_id, options_.seed);
    MixUniformShare(options_.evaluation_epsilon, rule, 1, coin, rng, &scored, &own_rule);
    RankedChoice choice;
    choice.candidate = shadow->chosen;
    choice.score = scored.mean(shadow->chosen);
    choice.probability = shadow->propensity;
    scored.slate = {choice};
    explored = shadow->explored;
    // A learner that samples parameters learns from the law the arm was drawn by: the leader's.
    if (scored.propensities.size() > 0) {
      scored.propensities = Eigen::Map<const Eigen::VectorXd>(shadow->probabilities.data(), n);
    }
  } else if (view->apprentice) {
    if (options_.samples_parameters()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\" is an apprentice, which policy %s cannot be (its learner needs the "
          "probabilities of its own draws); switch it with AdminService.SetServingMode(SERVING)",
          options_.name, PolicyName(options_.policy)));
    }
    // What its own rule would have chosen, for the lift (single-arm decisions with the share).
    if (options_.evaluation_epsilon > 0.0 && request.slate_size == 1) {
      Rng unused(0);
      MixUniformShare(0.0, rule, 1, unused, rng, &scored, &own_rule);
    }
    Rng coin = EvaluationCoin(event_id, options_.seed);
    explored = ServeBaseline(options_.evaluation_epsilon, request.baseline, request.slate_size,
                             coin, &scored, log_every ? &every : nullptr);
  } else if (options_.evaluation_epsilon > 0.0) {
    Rng coin = EvaluationCoin(event_id, options_.seed);
    explored = MixUniformShare(options_.evaluation_epsilon, rule, request.slate_size, coin, rng,
                               &scored, log_every ? &every : nullptr);
  }
  const std::vector<RankedChoice>& slate = scored.slate;
  const Eigen::VectorXd& mean = scored.mean;
  const Eigen::VectorXd& stddev = scored.stddev;
  Decision decision;
  decision.event_id = event_id;
  decision.model = options_.name;
  decision.policy = std::string(PolicyName(options_.policy));
  decision.model_version = view->version;
  decision.explored = explored;
  // Only with the share: without it the log and the snapshots stay as they were, and the
  // deployed policy's value comes from its rewards alone.
  if ((options_.evaluation_epsilon > 0.0 || shadow != nullptr) && slate.size() == 1 &&
      slate[0].probability.has_value() && *slate[0].probability > 0.0) {
    EvaluationRecord record = MakeEvaluationRecord(mean, slate[0].candidate, *slate[0].probability,
                                                   explored, request.baseline, true);
    if (own_rule.size() > 0) AddModelTarget(mean, own_rule, slate[0].candidate, &record);
    decision.evaluation = std::make_shared<const EvaluationRecord>(std::move(record));
    // Every candidate, unless that makes the record too large for a log (a cluster's shared
    // log takes records of about a megabyte at most); the evaluation record is kept either way.
    size_t bytes = 0;
    for (const CandidateRef& c : request.candidates) {
      bytes += 24 + c.id.size() + 8 * c.features.size();
    }
    if (every.size() == static_cast<Eigen::Index>(request.candidates.size())) {
      decision.logging_probabilities =
          std::make_shared<const std::vector<double>>(every.begin(), every.end());
    }
    if (every.size() == static_cast<Eigen::Index>(request.candidates.size()) &&
        bytes <= kMaxLoggedCandidateBytes) {
      auto logged = std::make_shared<LoggedCandidates>();
      for (size_t i = 0; i < request.candidates.size(); ++i) {
        logged->ids.emplace_back(request.candidates[i].id);
        logged->features.emplace_back(request.candidates[i].features.begin(),
                                      request.candidates[i].features.end());
        logged->probabilities.push_back(every(static_cast<Eigen::Index>(i)));
        logged->means.push_back(mean(static_cast<Eigen::Index>(i)));
      }
      decision.logged_candidates = std::move(logged);
    }
  }
  for (const RankedChoice& choice : slate) {
    ChosenArm arm;
    arm.candidate_index = choice.candidate;
    arm.arm_id = std::string(request.candidates[choice.candidate].id);
    arm.mean = mean(choice.candidate);
    arm.stddev = stddev(choice.candidate);
    arm.score = choice.score;
    arm.probability = choice.probability;
    decision.arms.push_back(std::move(arm));
  }
  if (request.explain) {
    absl::Status s =
        ExplainArms(*view->scorer, *registry_, user, points, rule.baseline,
                    options_.explain_names_users, options_.name, decision.policy, &decision.arms);
    if (!s.ok()) return s;
  }
  if (request.rank_all) {
    std::vector<bool> chosen(request.candidates.size(), false);
    for (const RankedChoice& choice : slate) chosen[choice.candidate] = true;
    for (int i = 0; i < static_cast<int>(request.candidates.size()); ++i) {
      if (!chosen[i]) decision.others.push_back(i);
    }
    std::stable_sort(decision.others.begin(), decision.others.end(),
                     [&mean](int a, int b) { return mean(a) > mean(b); });
  }
  if (scored.propensities.size() > 0) {
    auto candidates = std::make_shared<DecisionCandidates>();
    for (size_t i = 0; i < request.candidates.size(); ++i) {
      candidates->features.emplace_back(request.candidates[i].features.begin(),
                                        request.candidates[i].features.end());
      candidates->probabilities.push_back(scored.propensities(static_cast<Eigen::Index>(i)));
    }
    decision.candidates = std::move(candidates);
  }
  return decision;
}

absl::StatusOr<Decision> Model::Select(const DecisionRequest& sent, const std::string& event_id,
                                       bool client_event_id, uint64_t fingerprint, absl::Time now,
                                       absl::Time deadline, const ShadowOf* shadow) {
  // A retry: the stored decision, unchanged.
  auto known =
      [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(ledger_mu_) -> std::optional<absl::StatusOr<Decision>> {
    if (!client_event_id) return std::nullopt;
    if (LedgerEntry* entry = ledger_->Find(event_id)) {
      if (entry->fingerprint != fingerprint) {
        return absl::StatusOr<Decision>(absl::AlreadyExistsError(
            absl::StrFormat("event_id %s was already used for a different request on model \"%s\"",
                            QuoteId(event_id), options_.name)));
      }
      Decision stored = entry->decision;
      stored.replayed = true;
      return absl::StatusOr<Decision>(stored);
    }
    if (ledger_->FindClosed(event_id) != nullptr) {
      return absl::StatusOr<Decision>(absl::AlreadyExistsError(
          absl::StrFormat("event_id %s was already used on model \"%s\" and its decision is closed",
                          QuoteId(event_id), options_.name)));
    }
    return std::nullopt;
  };
  {
    MutexLock lock(&ledger_mu_);
    if (auto answer = known()) return *answer;
    if (ledger_->Full() && ledger_->OldestCompleted() == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions); "
          "report rewards or let them expire",
          options_.name, options_.max_decisions));
    }
  }
  // Refused before anything is decided (or the dimensions fixed by a first request).
  if (sent.explain && !options_.explains()) {
    return CannotExplain(options_.name, PolicyName(options_.policy));
  }
  PaceDecision(deadline);
  // Named features become dense input here; from now on only that is used (and logged).
  EncodedRequest encoded;
  Dimensions slots;
  if (absl::Status s = EncodeRequest(sent, &encoded, &slots); !s.ok()) return s;
  const DecisionRequest& request = slots.named_features() ? encoded.request : sent;
  absl::StatusOr<Decision> decision = Decide(request, event_id, slots, shadow);
  if (!decision.ok()) return decision.status();
  RecordDecided(sent, slots);  // only what was decided is counted (and scaled)

  DecideOp op;
  op.event_id = event_id;
  op.fingerprint = fingerprint;
  op.created_micros = ToMicros(now);
  op.user = std::string(request.user_id);
  op.context.assign(request.context.begin(), request.context.end());
  op.model_version = decision->model_version;
  op.candidates = decision->candidates;
  op.deferred = request.defer_activation;
  op.baseline = request.baseline;
  op.explored = decision->explored;
  op.evaluation = decision->evaluation;
  op.logged = std::move(decision->logged_candidates);  // logged, not kept
  for (const ChosenArm& arm : decision->arms) {
    const CandidateRef& candidate = request.candidates[arm.candidate_index];
    DecideOp::Arm logged;
    logged.arm_id = arm.arm_id;
    logged.features.assign(candidate.features.begin(), candidate.features.end());
    logged.candidate_index = arm.candidate_index;
    logged.mean = arm.mean;
    logged.stddev = arm.stddev;
    logged.score = arm.score;
    logged.has_probability = arm.probability.has_value();
    logged.probability = arm.probability.value_or(0.0);
    op.arms.push_back(std::move(logged));
  }
  if (replicated()) return FinishReplicatedSelect(std::move(op), *std::move(decision), deadline);
  // A degraded log (full disk, I/O error) cannot record the decision: it is served anyway,
  // from the last published state, and says so; nothing enters the ledger.
  auto unlogged = [&]() -> absl::StatusOr<Decision> {
    decision->logged = false;
    decisions_.fetch_add(1, std::memory_order_relaxed);
    unlogged_decisions_.fetch_add(1, std::memory_order_relaxed);
    return decision;
  };
  auto log_failed = [this](const absl::Status& status) {
    return status.code() == absl::StatusCode::kUnavailable && log_ != nullptr && log_->degraded();
  };
  MutexLock lock(&ledger_mu_);
  if (auto answer = known()) return *answer;  // a concurrent request with the same id won
  if (log_ != nullptr && log_->degraded()) return unlogged();
  if (ledger_->Full()) {
    LedgerEntry* victim = ledger_->OldestCompleted();
    if (victim == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" already holds %d decisions waiting for rewards (ledger.max_decisions)",
          options_.name, options_.max_decisions));
    }
    if (absl::Status s = CloseLocked(victim, ClosedAs::kCompleted, now); !s.ok()) {
      return log_failed(s) ? unlogged() : s;
    }
  }
  auto entry = EntryOf(op, options_);
  entry->decision = *decision;
  entry->decision.logging_probabilities.reset();                        // answered, not kept
  for (ChosenArm& arm : entry->decision.arms) arm.explanation.reset();  // answered, not kept
  if (auto seq = Append(std::move(op), nullptr, absl::InfinitePast()); !seq.ok()) {
    return log_failed(seq.status()) ? unlogged() : seq.status();
  }
  ledger_->Insert(std::move(entry));
  decisions_.fetch_add(1, std::memory_order_relaxed);
  return decision;
}

// ---------------------------------------------------------------------------------------------
// Closing decisions.

absl::Status Model::CloseLocked(LedgerEntry* entry, ClosedAs how, absl::Time now) {
  CloseOp op;
  op.event_id = entry->event_id;
  op.how = static_cast<uint8_t>(how);
  op.closed_micros = ToMicros(now);
  op.learn = ClosingObservations(*entry, options_);
  const absl::Time acknowledged = op.learn.empty() ? absl::InfinitePast() : now;
  auto seq = Append(std::move(op), nullptr, acknowledged);
  if (!seq.ok()) return seq.status();
  ledger_->Close(entry, how, now);
  return absl::OkStatus();
}

bool Model::Knows(const std::string& event_id) {
  MutexLock lock(&ledger_mu_);
  return ledger_->Find(event_id) != nullptr || ledger_->FindClosed(event_id) != nullptr;
}

int Model::ExpireDue(absl::Time now) {
  if (replicated()) return ReplicatedExpireDue(now);
  // A degraded log cannot record closes: retried at a later sweep, without holding the ledger
  // lock (which decisions need) behind a repair's I/O.
  if (LogDegraded()) return 0;
  MutexLock lock(&ledger_mu_);
  absl::flat_hash_map<std::string, WaitingReward> waiting;  // held back by back-pressure
  {
    MutexLock queue(&queue_mu_);
    waiting = waiting_rewards_;
  }
  int closed = 0;
  for (LedgerEntry* entry : ledger_->Due(now)) {
    // A reward for it arrived within its window and waits for the writer: a later sweep
    // closes it, after the reward has been joined.
    if (auto it = waiting.find(entry->event_id);
        it != waiting.end() && it->second.arrival < entry->created + options_.reward_window) {
      continue;
    }
    // With FIRST, a decision whose every arm has its reward is complete: a repeat is a
    // duplicate, not late. Otherwise the window decides (SUM/MAX/LAST accept reports until it).
    const ClosedAs how = options_.aggregation == Aggregation::kFirst && entry->unreported == 0
                             ? ClosedAs::kCompleted
                             : ClosedAs::kExpired;
    absl::Status status = CloseLocked(entry, how, now);
    if (status.code() == absl::StatusCode::kInvalidArgument) {
      // This close cannot be logged (too large): close it without learning, rather than let
      // it hold every later decision in the ledger.
      LogWarning(absl::StrFormat("model \"%s\": decision %s closed without learning: %s",
                                 options_.name, QuoteId(entry->event_id), status.message()));
      CloseOp bare;
      bare.event_id = entry->event_id;
      bare.how = static_cast<uint8_t>(how);
      bare.closed_micros = ToMicros(now);
      if (!Append(std::move(bare), nullptr, absl::InfinitePast()).ok()) break;
      ledger_->Close(entry, how, now);
      ++closed;
      continue;
    }
    if (!status.ok()) break;  // shutting down, or the log is degraded (retried next sweep)
    ++closed;
  }
  return closed;
}

}  // namespace graphbandit
