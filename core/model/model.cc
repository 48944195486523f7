#include "core/model/model.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/base/thread_priority.h"
#include "core/graph/edge_list.h"
#include "core/learner/learner_factory.h"
#include "core/model/explanations.h"
#include "core/model/ledger_records.h"
#include "core/policy/decision_step.h"
#include "core/policy/evaluation.h"
#include "core/policy/selection.h"

namespace graphbandit {

constexpr double FreshnessStats::kBounds[];

namespace {

// Cluster mode: the prefix of this opening's record ids (see Model::record_prefix_).
std::string RecordPrefix(const Replication& replication) {
  if (replication.log == nullptr) return "";
  std::random_device device;
  const uint64_t nonce = (static_cast<uint64_t>(device()) << 32) ^ device();
  return absl::StrFormat("%s/%016x/", replication.node_id, nonce);
}

}  // namespace

absl::string_view RewardOutcomeName(RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::kAccepted:
      return "accepted";
    case RewardOutcome::kDuplicate:
      return "duplicate";
    case RewardOutcome::kLate:
      return "late";
    case RewardOutcome::kUnknownEvent:
      return "unknown_event";
  }
  return "unknown";
}

Model::Model(const ModelOptions& options, const Durability& durability,
             std::optional<StateDirectory> dir, RecoveredState recovered, Replication replication)
    : options_(options),
      durability_(durability),
      replication_(std::move(replication)),
      record_prefix_(RecordPrefix(replication_)),
      dir_(std::move(dir)),
      recovery_(std::move(recovered.report)),
      max_queued_(durability.max_queued_operations > 0 ? durability.max_queued_operations
                  : durability.snapshot_every_records > 0
                      ? std::max<int64_t>(durability.snapshot_every_records / 2, 64)
                      : 50'000),
      registry_(recovered.state->registry()),
      ledger_(std::move(recovered.ledger)),
      state_(std::move(recovered.state)),
      fits_(options_, this,
            [this] {
              MutexLock lock(&queue_mu_);
              fit_ready_ = true;
              queue_cv_.SignalAll();
            }),
      snapshots_(dir_.has_value() ? &*dir_ : nullptr, durability.snapshot_every_records) {
  // A user registered by the writer no longer needs the slot reserved for it.
  state_->set_on_user_registered([this](const std::string& id) {
    MutexLock lock(&queue_mu_);
    reserved_users_.erase(id);
  });
  if (dir_.has_value() && !replicated()) {
    log_ = std::make_unique<OperationLog>(options_.name, durability_);
  }
}

Model::~Model() { Shutdown(); }

// ---------------------------------------------------------------------------------------------
// Opening: recover the state, start the log and the threads, apply the configured edge list.

absl::StatusOr<std::unique_ptr<Model>> Model::Open(const ModelOptions& options,
                                                   const std::string& state_dir,
                                                   const Durability& durability,
                                                   const Replication& replication) {
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  if (replication.log != nullptr && replication.node_id.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": cluster mode needs this node's id", options.name));
  }
  if (!options.servable()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": policy %s is one of the papers' baselines, which only "
                        "the simulator runs; a model cannot serve it",
                        options.name, PolicyName(options.policy)));
  }
  std::optional<StateDirectory> dir;
  absl::StatusOr<RecoveredState> recovered;
  if (state_dir.empty()) {
    recovered = NewModelState(options);
  } else {
    absl::StatusOr<StateDirectory> created =
        StateDirectory::Create(absl::StrCat(state_dir, "/", options.name));
    if (!created.ok()) return created.status();
    dir = *std::move(created);
    if (replication.log != nullptr && !dir->Segments().empty()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": %s holds a local log (written by a single node); in cluster mode the "
          "model's log is the shared one. Start in cluster mode with an empty state directory",
          options.name, dir->path()));
    }
    recovered = RecoverModelState(options, *dir);
  }
  if (!recovered.ok()) return recovered.status();
  const uint64_t next_seq = recovered->next_seq;
  if (replication.log != nullptr) {
    // A snapshot from beyond the shared log's end belongs to another (older) shared log.
    absl::StatusOr<uint64_t> last = replication.log->LastSeqWaiting(replication.catch_up_timeout);
    if (!last.ok()) return last.status();
    if (*last < next_seq - 1) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the newest snapshot is at record %d of the shared log, which holds only "
          "%d records: the snapshot belongs to another shared log. Move the state directory "
          "away to start from the shared log alone",
          options.name, next_seq - 1, *last));
    }
  }
  std::unique_ptr<Model> model(
      new Model(options, durability, std::move(dir), *std::move(recovered), replication));
  if (absl::Status s = model->StartLog(next_seq); !s.ok()) return s;
  if (model->recovery_.damaged_bytes > 0 || !model->recovery_.records_lost.empty() ||
      !model->recovery_.records_dropped.empty() || model->recovery_.records_repeated > 0) {
    // Recovery passed over damage (or missing or repeated records) in the middle of the log. A
    // snapshot now means the next start does not read and report them again; a copy of the
    // damaged bytes stays beside the log.
    if (absl::StatusOr<uint64_t> taken = model->TakeSnapshot(); !taken.ok()) {
      LogWarning(absl::StrFormat(
          "model \"%s\": the snapshot after recovering from damage failed: %s; the damage will "
          "be reported again at the next start",
          options.name, taken.status().message()));
    }
  }
  model->StartThreads();
  if (model->replicated()) {
    // Applies what the other nodes logged before the edge list is compared with the graph.
    if (absl::Status s = model->CatchUp(); !s.ok()) return s;
  }
  if (absl::Status s = model->ApplyEdgeListFile(); !s.ok()) return s;
  if (absl::Status s = model->StartApprenticeship(); !s.ok()) return s;
  return model;
}

absl::Status Model::StartLog(uint64_t next_seq) {
  {
    MutexLock lock(&queue_mu_);
    next_seq_ = next_seq;
    applied_seq_ = next_seq - 1;
    decided_seq_ = next_seq - 1;
    // Observations the snapshot or the replayed log left staged: their records are at or before
    // the last one applied; the writer asks for their batch first.
    learn_requested_ = state_->learned_through();
    for (int64_t o = state_->learned_through(); o < state_->staged_total(); ++o) {
      // Their records are somewhere before next_seq: seq 1 keeps learned_seq_ (what
      // min_model_version waits for) at 0 until a LearnOp learns them.
      staged_rewards_.push_back(StagedReward{o, 1, absl::InfinitePast(), absl::InfinitePast()});
    }
    learned_seq_ = LearnedThrough(applied_seq_);
    rewards_held_ = state_->history_size();
    dims_ = state_->dimensions();
    if (log_ != nullptr) {
      if (absl::Status s = log_->StartSegment(dir_->SegmentPath(next_seq), next_seq - 1); !s.ok()) {
        return s;
      }
    }
  }
  if (log_ != nullptr) log_->MarkSynced(next_seq - 1);
  Publish(next_seq - 1);
  // After a restart the next fit waits for the rewards to grow as after a fit.
  state_->DeferNextFitAfterRestart();
  return absl::OkStatus();
}

void Model::StartThreads() {
  writer_ = std::thread([this] {
    SetThreadName("gb-writer");
    WriterLoop();
    writer_done_.Notify();
  });
  if (log_ != nullptr) log_->StartThreads();
  if (replicated()) {
    feeder_ = std::thread([this] {
      SetThreadName("gb-feeder");
      FeedLoop();
    });
  }
}

absl::Status Model::ApplyEdgeListFile() {
  if (options_.edge_list_file.empty()) return absl::OkStatus();
  // Applied as one logged edit of the edges that are missing or weighted differently, so an
  // unchanged file adds nothing to the log on restart.
  auto edges = ReadEdgeList(options_.edge_list_file);
  if (!edges.ok()) return edges.status();
  SetEdgesOp changes;
  if (replicated()) {
    // The writer is busy with the other nodes' records: its graph cannot be read here. The
    // whole list is published (one record per start of a node; unchanged edges stay as they are).
    changes.edges = *std::move(edges);
  } else {
    // The writer is idle (nothing is queued yet), so reading its graph here is safe; the
    // queue lock orders this read after its start.
    MutexLock lock(&queue_mu_);
    for (EdgeEdit& edge : *edges) {
      const int32_t a = registry_->Find(edge.user_a);
      const int32_t b = registry_->Find(edge.user_b);
      if (a < 0 || b < 0 || state_->graph().Weight(a, b) != edge.weight) {
        changes.edges.push_back(std::move(edge));
      }
    }
  }
  if (changes.edges.empty()) return absl::OkStatus();
  auto applied = SubmitAndWait(std::move(changes), absl::InfiniteFuture());
  if (!applied.ok()) return applied.status();
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Logging operations.

absl::StatusOr<uint64_t> Model::AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                             absl::Time acknowledged) {
  if (stopping_) {
    return absl::UnavailableError(absl::StrFormat("model \"%s\" is shutting down", options_.name));
  }
  if (log_ != nullptr) {
    // Degraded inside: after a failed write or sync nothing more is logged until repaired.
    absl::Status status = log_->Append(static_cast<uint8_t>(TypeOf(op)), EncodeOp(op));
    if (!status.ok()) return status;
  }
  const uint64_t seq = next_seq_++;
  const auto observations = static_cast<int32_t>(ObservationsOf(op).size());
  rewards_held_ += observations;
  if (acknowledged != absl::InfinitePast()) unapplied_rewards_.emplace_back(seq, acknowledged);
  const bool deferrable = completion == nullptr && DeferrableLocked(op);
  const bool was_empty = queue_.empty();
  queue_.push_back(Pending{seq, std::move(op), std::move(completion), acknowledged, nullptr,
                           deferrable, absl::Now(), observations});
  if (deferrable) {
    ++deferrable_queued_;
    observations_queued_ += observations;
  }
  // The writer wakes for what it must apply now; for a deferrable operation only when it
  // finds the queue empty (the writer then waits ApplyDelay() from it) or completes a batch.
  if (!deferrable || was_empty || QueueMustRunLocked()) {
    queue_cv_.SignalAll();
  }
  return seq;
}

bool Model::DeferrableLocked(const ModelOp& op) const {
  if (!stages_rewards_ || replicated() || ApplyDelay() <= absl::ZeroDuration()) return false;
  // A decision changes no learned state; a reward is only staged (learned by a LearnOp the
  // writer logs).
  return std::holds_alternative<DecideOp>(op) || std::holds_alternative<RewardOp>(op) ||
         std::holds_alternative<CloseOp>(op) || std::holds_alternative<ObserveOp>(op) ||
         std::holds_alternative<ActivateOp>(op);
}

absl::Duration Model::ApplyDelay() const {
  absl::Duration delay = std::min(options_.max_learn_delay, kMaxApplyDelay);
  if (durability_.max_learning_lag > absl::ZeroDuration()) {
    delay = std::min(delay, durability_.max_learning_lag / 2);
  }
  return delay;
}

bool Model::QueueMustRunLocked() const {
  if (queue_.empty()) return false;
  return static_cast<int64_t>(queue_.size()) > deferrable_queued_ ||
         observations_queued_ + staged_waiting_ >= options_.max_learn_batch ||
         static_cast<int64_t>(next_seq_ - 1 - applied_seq_) >= max_queued_;
}

bool Model::QueueDueLocked(absl::Time now) const {
  return QueueMustRunLocked() || (!queue_.empty() && now >= queue_.front().queued + ApplyDelay());
}

absl::StatusOr<uint64_t> Model::Append(ModelOp op, std::shared_ptr<OpCompletion> completion,
                                       absl::Time acknowledged) {
  MutexLock lock(&queue_mu_);
  return AppendLocked(std::move(op), std::move(completion), acknowledged);
}

uint64_t Model::LastLogged() const {
  MutexLock lock(&queue_mu_);
  return next_seq_ - 1;
}

absl::Status Model::WaitDurable(uint64_t seq, absl::Time deadline) {
  if (log_ == nullptr) return absl::OkStatus();
  return log_->WaitDurable(seq, deadline);
}

bool Model::HasRoomLocked() const {
  if (stopping_ || draining_) return true;
  if (static_cast<int64_t>(next_seq_ - 1 - applied_seq_) >= max_queued_) return false;
  return durability_.max_learning_lag <= absl::ZeroDuration() ||
         LearningLagLocked(absl::Now()) < durability_.max_learning_lag;
}

void Model::PaceDecision(absl::Time deadline) {
  if (durability_.max_learning_lag <= absl::ZeroDuration() || replicated()) return;
  MutexLock lock(&queue_mu_);
  const absl::Time now = absl::Now();
  const auto caught_up = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stopping_ || draining_ || LearningLagLocked(absl::Now()) < durability_.max_learning_lag;
  };
  if (caught_up()) return;
  absl::Time until = now + durability_.max_learning_lag;
  if (deadline != absl::InfiniteFuture()) until = std::min(until, now + (deadline - now) / 2);
  room_cv_.WaitUntil(&queue_mu_, until, caught_up);
  ++decisions_paced_;
  decision_pacing_ += absl::Now() - now;
}

absl::Duration Model::LearningLagLocked(absl::Time now) const {
  if (replicated()) return absl::ZeroDuration();  // the shared log's own bounds apply
  // A degraded log cannot take the LearnOps that would learn the staged rewards; writes fail
  // anyway, and decisions are served from the last state without waiting.
  if (log_ != nullptr && log_->degraded()) return absl::ZeroDuration();
  absl::Time oldest = oldest_staged_acknowledged_;
  if (!unapplied_rewards_.empty()) oldest = std::min(oldest, unapplied_rewards_.front().second);
  // How long the oldest has waited, plus what the writer needs for those waiting now: a reward
  // admitted now waits about that long.
  const int64_t backlog = static_cast<int64_t>(unapplied_rewards_.size()) + staged_unlearned_;
  const absl::Duration ahead = learn_cost_ * backlog;
  return oldest == absl::InfiniteFuture() ? ahead : std::max(now - oldest, ahead);
}

bool Model::HasRoom() const {
  MutexLock lock(&queue_mu_);
  return HasRoomLocked();
}

absl::Status Model::WaitForRoom(absl::Time deadline, RoomWait* wait, const std::string* event_id,
                                absl::Time arrival) {
  MutexLock lock(&queue_mu_);
  if (HasRoomLocked()) return absl::OkStatus();
  if (!wait->delayed) {
    wait->delayed = true;
    ++writes_delayed_;
  }
  if (event_id != nullptr && !wait->registered) {
    wait->registered = true;  // DoneWaiting removes it
    WaitingReward& waiting = waiting_rewards_[*event_id];
    ++waiting.callers;
    waiting.arrival = std::min(waiting.arrival, arrival);
  }
  room_cv_.WaitUntil(&queue_mu_, deadline,
                     [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return HasRoomLocked(); });
  // Room that appears only as the deadline passes is too late: the caller could not finish.
  if (HasRoomLocked() && absl::Now() < deadline) return absl::OkStatus();
  ++writes_refused_behind_;
  const int64_t behind = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
  if (behind < max_queued_) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "model \"%s\" is %d ms behind in learning the rewards it acknowledged (the bound is "
        "durability.max_learning_lag_ms = %d) and the deadline passed before it caught up; "
        "nothing was recorded, retry later",
        options_.name, absl::ToInt64Milliseconds(LearningLagLocked(absl::Now())),
        absl::ToInt64Milliseconds(durability_.max_learning_lag)));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "model \"%s\" is %d operations behind in learning (the bound is %d, half of "
      "durability.snapshot_every_records) and the deadline passed before it caught up; nothing "
      "was recorded, retry later",
      options_.name, next_seq_ - 1 - applied_seq_, max_queued_));
}

void Model::DoneWaiting(const std::string& event_id) {
  MutexLock lock(&queue_mu_);
  auto it = waiting_rewards_.find(event_id);
  if (it != waiting_rewards_.end() && --it->second.callers == 0) waiting_rewards_.erase(it);
}

absl::StatusOr<EdgeEditResult> Model::SubmitAndWait(ModelOp op, absl::Time deadline,
                                                    const std::vector<std::string>& reserved) {
  if (replicated()) {
    auto done = PublishAndWait(ModelOp(std::move(op)), deadline);
    ReleaseUsers(reserved);  // registered by now if the edit was applied
    if (!done.ok()) return done.status();
    if (!(*done)->status.ok()) return (*done)->status;
    return (*done)->result;
  }
  auto completion = std::make_shared<OpCompletion>();
  uint64_t seq = 0;
  RoomWait wait;
  for (;;) {
    if (absl::Status s = WaitForRoom(deadline, &wait); !s.ok()) {
      ReleaseUsers(reserved);
      return s;
    }
    MutexLock ledger(&ledger_mu_);  // the log tail only moves under the ledger lock
    if (!HasRoom()) continue;       // another caller took the room first: wait again
    auto appended = Append(std::move(op), completion, absl::InfinitePast());
    if (!appended.ok()) {
      ReleaseUsers(reserved);
      return appended.status();
    }
    seq = *appended;
    break;
  }
  if (!completion->done.WaitUntil(deadline)) {
    return absl::DeadlineExceededError("the deadline passed before the edit was applied");
  }
  if (!completion->status.ok()) return completion->status;
  if (absl::Status s = WaitDurable(seq, deadline); !s.ok()) return s;
  return completion->result;
}

// ---------------------------------------------------------------------------------------------
// Decisions.

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
  DecisionRule rule;
  rule.rule = SelectionRuleFor(options_);
  rule.exploration = options_.exploration;
  rule.width = view->exploration_width;
  rule.baseline = view->baseline;
  rule.propensity = options_.propensity_rule;
  rule.propensity_draws = options_.propensity_draws;
  Rng rng(StableHash(event_id, options_.seed));
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
    Rng coin(StableHash(event_id, options_.seed ^ kEvaluationStream));
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
    Rng coin(StableHash(event_id, options_.seed ^ kEvaluationStream));
    explored = ServeBaseline(options_.evaluation_epsilon, request.baseline, request.slate_size,
                             coin, &scored, log_every ? &every : nullptr);
  } else if (options_.evaluation_epsilon > 0.0) {
    Rng coin(StableHash(event_id, options_.seed ^ kEvaluationStream));
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

// ---------------------------------------------------------------------------------------------
// Graph administration.

absl::StatusOr<AddUsersResult> Model::AddUsers(absl::Span<const std::string> users,
                                               absl::Time deadline) {
  if (absl::Status s = ValidateUsers(users, options_); !s.ok()) return s;
  std::vector<std::string> reserved;
  if (!ReserveUsers(std::vector<std::string>(users.begin(), users.end()), &reserved)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adding these users would exceed model \"%s\"'s limit of %d (limits.max_users)",
        options_.name, options_.max_users));
  }
  auto applied = SubmitAndWait(AddUsersOp{std::vector<std::string>(users.begin(), users.end())},
                               deadline, reserved);
  if (!applied.ok()) return applied.status();
  AddUsersResult result;
  result.added = applied->users_added;
  result.already_present = static_cast<int>(users.size()) - result.added;
  result.users = registry_->size();
  return result;
}

bool Model::ReserveUsers(const std::vector<std::string>& ids, std::vector<std::string>* fresh) {
  MutexLock lock(&queue_mu_);
  absl::flat_hash_set<std::string> unseen;
  for (const std::string& id : ids) {
    if (registry_->Find(id) < 0 && !reserved_users_.contains(id)) unseen.insert(id);
  }
  if (!UsersFitLocked(static_cast<int64_t>(unseen.size()))) return false;
  for (const std::string& id : unseen) {
    reserved_users_.insert(id);
    fresh->push_back(id);
  }
  return true;
}

bool Model::UsersFitLocked(int64_t more) const {
  if (registry_->size() + static_cast<int64_t>(reserved_users_.size()) + more <=
      options_.max_users) {
    return true;
  }
  // The reserved ids not registered yet, counted before the registry's size is read: an id the
  // writer registers in between is then counted twice (a refusal that a retry resolves), never
  // not at all.
  int64_t pending = 0;
  for (const std::string& id : reserved_users_) pending += registry_->Find(id) < 0 ? 1 : 0;
  return registry_->size() + pending + more <= options_.max_users;
}

void Model::ReleaseUsers(const std::vector<std::string>& ids) {
  if (ids.empty()) return;
  MutexLock lock(&queue_mu_);
  for (const std::string& id : ids) reserved_users_.erase(id);
}

absl::StatusOr<EdgeEditResult> Model::AddEdges(std::vector<EdgeEdit> edges, absl::Time deadline) {
  absl::StatusOr<std::vector<std::string>> ids = ValidateEdges(edges, options_);
  if (!ids.ok()) return ids.status();
  std::vector<std::string> reserved;
  if (!ReserveUsers(*ids, &reserved)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "these edges would take model \"%s\" past its limit of %d users (limits.max_users)",
        options_.name, options_.max_users));
  }
  return SubmitAndWait(SetEdgesOp{std::move(edges)}, deadline, reserved);
}

absl::StatusOr<EdgeEditResult> Model::RemoveEdges(
    std::vector<std::pair<std::string, std::string>> pairs, absl::Time deadline) {
  if (absl::Status s = ValidateEdgePairs(pairs, options_); !s.ok()) return s;
  return SubmitAndWait(RemoveEdgesOp{std::move(pairs)}, deadline);
}

absl::StatusOr<EdgeEditResult> Model::SetServingMode(bool apprentice, absl::Time deadline) {
  if (apprentice && !options_.shadow_of.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" is a challenger of \"%s\" (shadow_of): it never serves, so it cannot be "
        "an apprentice",
        options_.name, options_.shadow_of));
  }
  if (apprentice && !(options_.evaluation_epsilon > 0.0)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be an apprentice without evaluation.epsilon > 0: its lift over the "
        "baseline is estimated from the decisions that share draws uniformly",
        options_.name));
  }
  if (apprentice && options_.samples_parameters()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" cannot be an apprentice: policy %s learns from the probabilities its own "
        "draws chose arms with",
        options_.name, PolicyName(options_.policy)));
  }
  ServingModeOp op;
  op.apprentice = apprentice;
  op.reason = ServingSwitch::kAdmin;
  op.rule = options_.apprentice;
  return SubmitAndWait(op, deadline);
}

absl::Status Model::StartApprenticeship() {
  std::shared_ptr<const ModelView> view = View();
  if (view->apprentice && !(options_.evaluation_epsilon > 0.0)) {
    LogWarning(absl::StrFormat(
        "model \"%s\" is an apprentice but has no evaluation share (evaluation.epsilon 0): it "
        "serves the baseline arm and cannot estimate its lift; set evaluation.epsilon, or switch "
        "it with AdminService.SetServingMode(SERVING)",
        options_.name));
  }
  // Only a model that has learned nothing and never switched: the configuration says how a new
  // model starts, and the log says it from then on (a kStart switch after any other is void).
  if (!options_.apprentice_start || view->last_switch.has_value() ||
      view->rewards_learned + view->rewards_staged > 0) {
    return absl::OkStatus();
  }
  ServingModeOp op;
  op.apprentice = true;
  op.reason = ServingSwitch::kStart;
  op.rule = options_.apprentice;
  return SubmitAndWait(op, absl::InfiniteFuture()).status();
}

// ---------------------------------------------------------------------------------------------
// Views, statistics, waiting, snapshots on request, shutdown.

std::shared_ptr<const ModelView> Model::View() const {
  MutexLock lock(&view_mu_);
  return view_;
}

ModelStats Model::Stats() const {
  ModelStats stats;
  stats.view = *View();
  stats.users = registry_->size();
  stats.decisions = decisions_.load(std::memory_order_relaxed);
  {
    MutexLock lock(&ledger_mu_);
    stats.pending_decisions = ledger_->pending();
    stats.ledger_size = ledger_->size();
    stats.expired_decisions = ledger_->expired_total();
  }
  {
    MutexLock lock(&queue_mu_);
    // Logged but not yet published (a batch the writer is applying is no longer in queue_).
    stats.queued_operations = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
    stats.writes_delayed = writes_delayed_;
    stats.writes_refused_behind = writes_refused_behind_;
    stats.decisions_paced = decisions_paced_;
    stats.decision_pacing_seconds = absl::ToDoubleSeconds(decision_pacing_);
    stats.fits_in_flight = fits_in_flight_;
  }
  stats.log_syncs = log_ != nullptr ? log_->syncs() : 0;
  if (log_ != nullptr) stats.log = log_->Health();
  stats.unlogged_decisions = unlogged_decisions_.load(std::memory_order_relaxed);
  stats.replicated = replicated();
  stats.shared_log_seq = shared_log_seq_.load(std::memory_order_relaxed);
  stats.records_unreadable = records_unreadable_.load(std::memory_order_relaxed);
  stats.recovery = recovery_;
  const SnapshotWriter::Stats snapshots = snapshots_.stats();
  stats.snapshots_written = snapshots.written;
  stats.last_snapshot_seq = snapshots.last_seq;
  stats.last_snapshot_time = snapshots.last_time;
  {
    MutexLock lock(&stats_mu_);
    stats.freshness = freshness_;
  }
  stats.fits_applied =
      stats.view.hyperparameters.has_value() ? stats.view.hyperparameters->fits_applied : 0;
  const FitScheduler::Stats fits = fits_.stats();
  stats.fits_unchanged = fits.unchanged;
  stats.fits_skipped = fits.skipped;
  stats.fits_failed = fits.failed;
  stats.fit_seconds = fits.seconds;
  stats.last_fit = fits.last;
  LearningInputs learning;
  learning.queued_operations = stats.queued_operations;
  learning.max_queued = max_queued();
  if (stats.view.hyperparameters.has_value()) {
    learning.signal_to_noise = stats.view.hyperparameters->signal_to_noise;
  }
  if (options_.policy == PolicyKind::kEkUcb || options_.policy == PolicyKind::kEkTs) {
    learning.max_dictionary_size = options_.max_dictionary_size;  // the Nystrom policies
  }
  learning.dictionary_size = stats.view.dictionary_size;
  learning.last_fit = fits.last;
  learning.last_fit_error = fits.last_error;
  learning.recent_reward = stats.view.recent_reward;
  learning.recent_weight = stats.view.recent_weight;
  learning.policy_values = stats.view.policy_values;
  learning.apprentice = stats.view.apprentice;
  stats.learning = AssessLearning(learning);
  return stats;
}

void Model::SetAfterApplyHookForTesting(std::function<void()> hook) {
  MutexLock lock(&queue_mu_);
  after_apply_hook_ =
      hook ? std::make_shared<const std::function<void()>>(std::move(hook)) : nullptr;
}

void Model::WaitForFits() {
  MutexLock lock(&queue_mu_);
  for (;;) {
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return fits_in_flight_ == 0 || stopping_ || draining_;
    });
    // Not only applied: every reward logged so far learned (its batch's LearnOp applied), and
    // the writer must also have decided, after that, whether a fit is due (AfterBatch), or a fit
    // about to start would be missed here.
    const uint64_t target = next_seq_ - 1;
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return LearnedOrBlocked(target) || (stopping_ && queue_.empty());
    });
    const uint64_t applied = applied_seq_;
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return decided_seq_ >= applied || (stopping_ && queue_.empty());
    });
    // A shutdown cancels the fits (BeginShutdown): the one in flight never lands.
    if (fits_in_flight_ == 0 || stopping_ || draining_) return;
  }
}

absl::Status Model::WaitForVersion(uint64_t version, absl::Time deadline) {
  // Cluster mode: a version from another node may be ahead of what this one has read yet; only
  // one beyond the shared log's end is refused.
  uint64_t shared_last = 0;
  if (replicated() && version > LastLogged()) {
    absl::StatusOr<uint64_t> last = replication_.log->LastSeq();
    if (!last.ok()) return last.status();
    shared_last = *last;
  }
  MutexLock lock(&queue_mu_);
  const uint64_t logged = std::max(next_seq_ - 1, shared_last);
  if (version > logged) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_model_version %d is ahead of everything model \"%s\" has recorded (version %d); "
        "use a model_version returned by ReportReward",
        version, options_.name, logged));
  }
  // A reward's version is its record's: wait until its batch is learned too (learned_seq_).
  queue_cv_.WaitUntil(&queue_mu_, deadline, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return LearnedOrBlocked(version) || stopping_ || draining_;
  });
  if (LearnedOrBlocked(version)) return absl::OkStatus();
  if (stopping_ || draining_) return absl::UnavailableError("the model is shutting down");
  return absl::DeadlineExceededError(
      absl::StrFormat("the deadline passed before model \"%s\" published version %d (it is at %d)",
                      options_.name, version, learned_seq_));
}

void Model::WaitForWriter() {
  MutexLock lock(&queue_mu_);
  const uint64_t target = next_seq_ - 1;
  queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return LearnedOrBlocked(target) || (stopping_ && queue_.empty());
  });
}

bool Model::LearnedOrBlocked(uint64_t target) const {
  // While the local log refuses writes no LearnOp can be logged: the staged rewards (durable in
  // the log) wait for its repair, and the waits settle for everything being applied.
  return learned_seq_ >= target || (LogDegraded() && applied_seq_ >= target);
}

absl::StatusOr<uint64_t> Model::Snapshot() {
  auto waiter = std::make_shared<OpCompletion>();
  {
    MutexLock lock(&queue_mu_);
    if (stopping_) return absl::UnavailableError("the model is shutting down");
    snapshot_requested_ = true;
    snapshot_waiters_.push_back(waiter);
    queue_cv_.SignalAll();
  }
  waiter->done.Wait();
  if (!waiter->status.ok()) return waiter->status;
  return waiter->seq;
}

void Model::BeginShutdown() {
  // A fit could not land any more: it stops now (it ends by itself; Shutdown waits for it last).
  fits_.RequestStop();
  MutexLock lock(&queue_mu_);
  draining_ = true;
  queue_cv_.SignalAll();
  room_cv_.SignalAll();
}

bool Model::Shutdown(absl::Time deadline) {
  {
    MutexLock lock(&queue_mu_);
    if (stopped_) return true;
  }
  // A fit in progress is cancelled: its result would not be applied any more. It ends at its
  // next check, by itself, while the writer finishes; it is waited for last, so that a long
  // likelihood evaluation does not take the writer's and the final snapshot's time.
  fits_.RequestStop();
  StopFeeding();  // cluster mode: nothing more is read from the shared log
  {
    MutexLock lock(&queue_mu_);
    stopping_ = true;
    queue_cv_.SignalAll();
    room_cv_.SignalAll();
  }
  if (writer_.joinable() && !writer_done_.WaitForNotificationWithDeadline(deadline)) {
    // The writer is still applying: make what was logged durable and leave it to the next
    // start's replay, instead of holding the shutdown for as long as the writer needs.
    int64_t unapplied = 0;
    {
      MutexLock lock(&queue_mu_);
      unapplied = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
    }
    LogWarning(absl::StrFormat(
        "model \"%s\": the writer is still busy at the shutdown deadline; %d logged records "
        "not yet applied will be replayed at the next start (no final snapshot)",
        options_.name, unapplied));
    if (log_ != nullptr) log_->StopThreads();
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);
    stopped_ = true;
    writer_.detach();  // and the snapshot it may be writing
    return false;
  }
  if (writer_.joinable()) writer_.join();
  {
    // Snapshot requests the writer did not get to.
    std::vector<std::shared_ptr<OpCompletion>> waiters;
    {
      MutexLock lock(&queue_mu_);
      waiters.swap(snapshot_waiters_);
    }
    for (auto& waiter : waiters) {
      waiter->status = absl::UnavailableError("the model is shutting down");
      waiter->done.Notify();
    }
  }
  if (!snapshots_.WaitForBackground(deadline)) {
    // A snapshot the writer started is still being written (it gets only idle cycles): it is
    // left to finish, the log is synced and closed, and there is no final snapshot.
    LogWarning(absl::StrFormat(
        "model \"%s\": a snapshot is still being written at the shutdown deadline; the next "
        "start replays the log after the newest one written (no final snapshot)",
        options_.name));
    AnswerSnapshot(absl::UnavailableError("the model is shutting down"), snapshot_answering_);
    snapshot_answering_.clear();
    if (log_ != nullptr) log_->StopThreads();
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);
    stopped_ = true;
    return false;
  }
  FinishSnapshot();  // answers the requests of the one the writer started
  if (!replicated() && state_->staged() > 0) {
    // The writer has applied everything but a batch still staged: learn it before the final
    // snapshot (a LearnOp in the log, as the writer would have logged).
    absl::StatusOr<uint64_t> seq;
    {
      MutexLock ledger(&ledger_mu_);
      MutexLock lock(&queue_mu_);
      stopping_ = false;
      seq = AppendLocked(ModelOp(LearnOp{state_->staged_total()}), nullptr, absl::InfinitePast());
      stopping_ = true;
    }
    if (seq.ok()) ApplyUpTo(*seq);
  }
  {
    // The writer has applied everything; a final snapshot if anything changed since the last.
    MutexLock ledger(&ledger_mu_);
    if (dir_.has_value() && snapshots_.Unsaved()) {
      {
        MutexLock lock(&queue_mu_);
        stopping_ = false;  // let the snapshot's segment rotation through
      }
      absl::StatusOr<PreparedSnapshot> prepared = CompleteSnapshotState(BeginSnapshotLocked());
      absl::StatusOr<uint64_t> taken =
          prepared.ok() ? snapshots_.Write(*std::move(prepared)) : prepared.status();
      if (!taken.ok()) {
        LogWarning(absl::StrFormat("model \"%s\": final snapshot failed: %s", options_.name,
                                   taken.status().message()));
      }
      MutexLock lock(&queue_mu_);
      stopping_ = true;
      queue_cv_.SignalAll();  // waiters (WaitForFits, WaitForWriter) see stopping_ again
      room_cv_.SignalAll();
    }
  }
  if (log_ != nullptr) log_->StopThreads();
  {
    MutexLock lock(&queue_mu_);
    if (log_ != nullptr) log_->Close(next_seq_ - 1);  // syncs what was logged; appends end here
    stopped_ = true;
  }
  // Everything is durable; a fit still in a likelihood evaluation at the deadline is left to
  // end by itself, and the model must then not be destroyed under it (false).
  if (!fits_.Stop(deadline)) {
    LogWarning(absl::StrFormat(
        "model \"%s\": a hyper-parameter fit is still in a likelihood evaluation at the shutdown "
        "deadline; it is abandoned (the log is closed and the final snapshot written)",
        options_.name));
    return false;
  }
  return true;
}

}  // namespace graphbandit
