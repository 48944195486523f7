// LearnedState: creating a state, applying logged operations (graph edits, rewards, staged
// batches, scaling freezes) and building the view decisions read. Hyper-parameter switches
// and refits are in learned_state_hyperparameters.cc, snapshots in learned_state_snapshot.cc.
#include "core/model/learned_state.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/learner/learner_factory.h"
#include "core/model/named_inputs.h"
#include "core/policy/decision_step.h"
#include "core/policy/selection.h"

namespace graphbandit {

LearnedState::LearnedState(const ModelOptions& options)
    : options_(options),
      hyper_(ConfiguredHyperparameters(options)),
      baseline_(options.effective_baseline_half_life()) {
  kors_mu_factor_ = options.refit.kors_mu_factor;
  next_fit_at_ = NextFitAfter(0, options.refit);
}

absl::StatusOr<std::unique_ptr<LearnedState>> LearnedState::Create(const ModelOptions& options) {
  std::unique_ptr<LearnedState> state(new LearnedState(options));
  auto kernel = BuildUserKernel(state->graph_, options.user_kernel_options());
  if (!kernel.ok()) return kernel.status();
  state->user_kernel_ = *std::move(kernel);
  if (options.arm_dim > 0 || options.features.configured) {
    EdgeEditResult ignored;
    absl::Status s = state->Apply(ConfiguredDimensions(options), &ignored);
    if (!s.ok()) return s;
  }
  return state;
}

int32_t LearnedState::Register(const std::string& id, bool* added) {
  bool fresh = false;
  const int32_t index = registry_->FindOrAdd(id, &fresh);
  if (fresh && on_user_registered_) on_user_registered_(id);
  if (added != nullptr) *added = fresh;
  return index;
}

Dimensions LearnedState::dimensions() const {
  if (learner_ == nullptr) return Dimensions{};
  return Dimensions{true, scaling_.context_dim, scaling_.arm_dim, context_slots_, arm_slots_};
}

void LearnedState::DeferNextFitAfterRestart() {
  // Replay does not know when fits that changed nothing ran, and a restart should not start
  // with a rebuild.
  next_fit_at_ = std::max(next_fit_at_, NextFitAfter(rewards_learned_, options_.refit));
}

absl::Status LearnedState::LearnFromDecision(const ObserveOp& observe, int32_t user) {
  if (observe.candidates == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the reward for event %s cannot be learned: its decision has no selection "
                        "probabilities (it was made by another policy)",
                        QuoteId(observe.event_id)));
  }
  const DecisionCandidates& candidates = *observe.candidates;
  const int n = static_cast<int>(candidates.probabilities.size());
  Eigen::MatrixXd points(scaling_.joint_dim(), n);
  Eigen::VectorXd probabilities(n);
  for (int i = 0; i < n; ++i) {
    if (static_cast<int>(candidates.features[i].size()) != scaling_.arm_dim) {
      return absl::FailedPreconditionError(
          "a logged decision's candidate has another number of features than the model");
    }
    scaling_.Apply(observe.context.data(), candidates.features[i].data(), points.col(i).data());
    probabilities(i) = candidates.probabilities[i];
  }
  return LearnDecision(*learner_, user, points, probabilities, observe.chosen, observe.reward);
}

absl::Status LearnedState::Apply(const ModelOp& op, EdgeEditResult* result) {
  absl::Status status = ApplyOp(op, result);
  SyncRefit();
  return status;
}

absl::Status LearnedState::ApplyOp(const ModelOp& op, EdgeEditResult* result) {
  struct Undo {
    int32_t a, b;
    double weight;  // 0: there was no edge
  };
  std::vector<Undo> undo;  // graph edits, to revert if the new graph cannot be served
  if (const auto* scaling = std::get_if<FeatureScalingOp>(&op)) {
    ApplyScaling(*scaling);  // the learner is not involved
    return absl::OkStatus();
  }
  if (const auto* mode = std::get_if<ServingModeOp>(&op)) {
    const bool changed = apprenticeship_.Set(mode->apprentice, mode->reason, mode->rule);
    result->changed = changed ? 1 : 0;
    result->unchanged = changed ? 0 : 1;
    return absl::OkStatus();
  }
  if (!std::holds_alternative<DecideOp>(op)) ++learner_changes_;
  if (const auto* learn = std::get_if<LearnOp>(&op)) {
    return LearnStaged(
        std::min(staged(), std::max<int64_t>(0, learn->through - learned_through())));
  }
  // What changes the learner otherwise learns the staged observations first, as a batch: at the
  // same point of the log live and in replay.
  if (!staged_.empty() &&
      (std::holds_alternative<HyperparametersOp>(op) || std::holds_alternative<SetEdgesOp>(op) ||
       std::holds_alternative<RemoveEdgesOp>(op))) {
    if (absl::Status s = LearnStaged(staged()); !s.ok()) {
      LogWarning(absl::StrFormat("model \"%s\": staged rewards not learned: %s", options_.name,
                                 s.message()));
    }
  }
  // A graph edit or another refit starts from the values a pending refit switches to.
  if (std::holds_alternative<HyperparametersOp>(op) || std::holds_alternative<SetEdgesOp>(op) ||
      std::holds_alternative<RemoveEdgesOp>(op)) {
    if (absl::Status s = CompletePendingRefit(); !s.ok()) {
      LogWarning(absl::StrFormat("model \"%s\": pending refit not completed: %s", options_.name,
                                 s.message()));
    }
  }
  if (const auto* fix = std::get_if<FixDimensionsOp>(&op)) {
    if (learner_ != nullptr) {
      if (fix->context_dim == scaling_.context_dim && fix->arm_dim == scaling_.arm_dim &&
          fix->context_slots == context_slots_ && fix->arm_slots == arm_slots_) {
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the log fixes dimensions (context %d, arms %d; named-feature inputs "
          "%d, %d) but the model has (context %d, arms %d; named-feature inputs %d, %d)",
          options_.name, fix->context_dim, fix->arm_dim, fix->context_slots, fix->arm_slots,
          scaling_.context_dim, scaling_.arm_dim, context_slots_, arm_slots_));
    }
    if (fix->context_slots < 0 || fix->arm_slots < 0 || fix->context_slots > fix->context_dim ||
        fix->arm_slots > fix->arm_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": named-feature inputs (%d, %d) outside the dimensions (%d, %d)",
          options_.name, fix->context_slots, fix->arm_slots, fix->context_dim, fix->arm_dim));
    }
    context_slots_ = fix->context_slots;
    arm_slots_ = fix->arm_slots;
    scaling_ = FeatureScaling{fix->context_dim, fix->arm_dim, options_.context_lengthscale,
                              options_.arm_lengthscale, Eigen::VectorXd()};
    if (hyper_.lengthscales.size() == scaling_.joint_dim()) {
      scaling_.per_dimension = hyper_.lengthscales;  // restored from a snapshot
    } else {
      hyper_.lengthscales = scaling_.lengthscales();
    }
    auto learner = NewLearner();
    if (!learner.ok()) return learner.status();
    learner_ = *std::move(learner);
    return absl::OkStatus();
  } else if (const auto* hyper = std::get_if<HyperparametersOp>(&op)) {
    return ApplyHyperparameters(*hyper);
  } else if (const auto* add = std::get_if<AddUsersOp>(&op)) {
    for (const std::string& user : add->users) {
      bool added = false;
      Register(user, &added);
      if (added) {
        ++result->users_added;
      } else {
        ++result->unchanged;
      }
    }
  } else if (const auto* set = std::get_if<SetEdgesOp>(&op)) {
    for (const EdgeEdit& edge : set->edges) {
      bool added_a = false, added_b = false;
      const int32_t a = Register(edge.user_a, &added_a);
      const int32_t b = Register(edge.user_b, &added_b);
      result->users_added += (added_a ? 1 : 0) + (added_b ? 1 : 0);
      const double old_weight = graph_.Weight(a, b);
      if (old_weight == 0.0) {
        ++result->changed;
      } else {
        ++result->unchanged;
      }
      if (old_weight != edge.weight) {
        undo.push_back({a, b, old_weight});
        graph_.SetEdge(a, b, edge.weight);
      }
    }
  } else if (const auto* remove = std::get_if<RemoveEdgesOp>(&op)) {
    for (const auto& [user_a, user_b] : remove->pairs) {
      const int32_t a = registry_->Find(user_a), b = registry_->Find(user_b);
      const double old_weight = graph_.Weight(a, b);
      if (graph_.RemoveEdge(a, b)) {
        ++result->changed;
        undo.push_back({a, b, old_weight});
      } else {
        ++result->unchanged;
      }
    }
  } else {
    // Rewards learned now (a reward with the FIRST rule, a closing decision, an observation).
    absl::Status status;
    for (const ObserveOp* observe : ObservationsOf(op)) {
      // Every reward counts in the estimates, learned or refused by the learner: it is what
      // the decision earned. Off-policy targets need the decision's record.
      if (std::isfinite(observe->reward)) {
        if (observe->evaluation != nullptr) {
          evaluator_.Add(*observe->evaluation, observe->reward);
          apprenticeship_.Add(*observe->evaluation, observe->reward);
        } else {
          evaluator_.AddOnPolicy(observe->reward);
        }
      }
      if (learner_ == nullptr) {
        status =
            absl::FailedPreconditionError("a reward was logged before the dimensions were fixed");
        continue;
      }
      if (static_cast<int>(observe->context.size()) != scaling_.context_dim ||
          static_cast<int>(observe->features.size()) != scaling_.arm_dim) {
        status = absl::FailedPreconditionError(absl::StrFormat(
            "a logged reward has %d context and %d arm values; the model expects %d and %d",
            observe->context.size(), observe->features.size(), scaling_.context_dim,
            scaling_.arm_dim));
        continue;
      }
      const int32_t user = Register(observe->user);
      absl::Status learned;
      if (learner_->LearnsFromDecisions()) {
        learned = LearnFromDecision(*observe, user);
      } else {
        Eigen::VectorXd point(scaling_.joint_dim() + (options_.intercept() ? 1 : 0));
        scaling_.Apply(observe->context.data(), observe->features.data(), point.data());
        if (options_.intercept()) point(point.size() - 1) = 1.0;
        if (learner_->LearnsInBatches()) {
          if (absl::Status s = CheckObservation(user, point, observe->reward, point.size());
              !s.ok()) {
            status = s;
            continue;
          }
          staged_.push_back(Staged{user, std::move(point), observe->reward});
          ++staged_total_;
          continue;  // learned by a LearnOp (counted then)
        }
        // The learning step the simulator takes too (core/policy/decision_step.h): a drifting
        // baseline is taken out before learning.
        learned = LearnReward(*learner_, baseline_, user, point, observe->reward);
      }
      if (learned.ok()) {
        ++rewards_learned_;
        recent_.Add(observe->reward);
      } else {
        status = learned;
      }
    }
    return status;
  }
  graph_.EnsureUsers(registry_->size());
  if (!undo.empty()) {
    // Every graph edit rebuilds at once, so that the sequence of rebuilds (and hence the state)
    // depends on the log alone, not on how the writer batched operations. A graph the user
    // kernel or the learner cannot serve is refused as a whole and the model keeps the
    // previous graph; replaying the log refuses it again the same way.
    auto kernel = BuildUserKernel(graph_, CurrentUserKernelOptions());
    absl::Status status = kernel.status();
    if (status.ok() && learner_ != nullptr) status = learner_->SetGraph(graph_, *kernel);
    if (!status.ok()) {
      for (auto it = undo.rbegin(); it != undo.rend(); ++it) {
        if (it->weight == 0.0) {
          graph_.RemoveEdge(it->a, it->b);
        } else {
          graph_.SetEdge(it->a, it->b, it->weight);
        }
      }
      if (learner_ != nullptr) learner_->SetGraph(graph_, user_kernel_).IgnoreError();
      return absl::FailedPreconditionError(absl::StrCat(
          "model \"", options_.name, "\" cannot use the edited graph: ", status.message()));
    }
    user_kernel_ = *std::move(kernel);
    components_ = graph_.CountComponents();
    users_at_rebuild_ = graph_.num_users();
  }
  result->edges = graph_.num_edges();
  return absl::OkStatus();
}

absl::Status LearnedState::LearnStaged(int64_t count) {
  absl::Status status;
  std::vector<int32_t> users;
  std::vector<Eigen::VectorXd> points;
  std::vector<double> rewards;
  while (count > 0) {
    // A fixed chunk, not the configured batch: what replay learns must not depend on the
    // configuration (the writer's LearnOps hold at most max_learn_batch rewards each).
    const int n = static_cast<int>(std::min<int64_t>(count, kMaxLearnBatchLimit));
    users.clear();
    points.clear();
    rewards.clear();
    for (int i = 0; i < n; ++i) {
      Staged& s = staged_.front();
      users.push_back(s.user);
      points.push_back(std::move(s.point));
      rewards.push_back(s.reward);
      staged_.pop_front();
    }
    count -= n;
    absl::Status learned = LearnRewards(*learner_, baseline_, users, points, rewards);
    // A refit the chunk ended switches now: the chunks after it are rescaled with the rest.
    SyncRefit();
    if (learned.ok()) {
      rewards_learned_ += n;
      for (double reward : rewards) recent_.Add(reward);
    } else if (status.ok()) {
      status = learned;
    }
  }
  return status;
}

void LearnedState::ApplyScaling(const FeatureScalingOp& op) {
  // Copied on write: published views keep the tables they were built with.
  auto context = std::make_shared<NumericScaling>(*context_scaling_);
  auto arm = std::make_shared<NumericScaling>(*arm_scaling_);
  for (const FeatureScalingOp::Entry& e : op.entries) {
    // A freeze from fewer values than the one in use is stale (appended late, or by another
    // node that saw less): ignored, alike live and in replay.
    NumericScaling& table = e.context ? *context : *arm;
    auto [it, fresh] = table.emplace(e.key, e.scale);
    if (!fresh && e.scale.count > it->second.count) it->second = e.scale;
  }
  context_scaling_ = std::move(context);
  arm_scaling_ = std::move(arm);
}

std::shared_ptr<ModelView> LearnedState::BuildView(uint64_t version) const {
  auto view = std::make_shared<ModelView>();
  view->version = version;
  view->context_scaling = context_scaling_;
  view->arm_scaling = arm_scaling_;
  if (learner_ != nullptr) {
    if (published_scorer_ == nullptr || published_changes_ != learner_changes_) {
      published_scorer_ = learner_->Freeze();
      published_changes_ = learner_changes_;
    }
    view->scorer = published_scorer_;
    view->scaling = scaling_;
    view->context_dim = scaling_.context_dim;
    view->arm_dim = scaling_.arm_dim;
    view->context_slots = context_slots_;
    view->arm_slots = arm_slots_;
    view->dimensions_fixed = true;
    view->history_size = learner_->history_size();
    view->dictionary_size = learner_->dictionary_size();
    view->dictionary_points_refused = learner_->dictionary_points_refused();
    if (options_.kernel_policy()) {
      HyperparameterView h;
      h.values = hyper_;
      h.kors_mu = learner_->kors_mu();  // what the learner uses, not what the rule says
      h.fits_applied = fits_applied_;
      h.last_fit_rewards = last_fit_rewards_;
      h.last_fit_points = last_fit_points_;
      h.last_fit_log_likelihood = last_fit_log_likelihood_;
      h.coarsenings = coarsenings_;
      // Recomputed only when the values or the user kernel change, or the users grew by a
      // tenth (a sum over sampled users' columns of the user kernel).
      const int32_t users = registry_->size();
      const bool grown = users > 0 && (snr_users_ <= 0 || 10 * (users - snr_users_) > snr_users_);
      if (snr_kernel_.lock() != user_kernel_ || !(snr_values_ == hyper_) || grown) {
        snr_ = SignalToNoise(hyper_, *user_kernel_, users);
        snr_kernel_ = user_kernel_;
        snr_users_ = users;
        snr_values_ = hyper_;
      }
      h.signal_to_noise = snr_;
      view->hyperparameters = std::move(h);
    }
    view->exploration_width =
        ExplorationWidthOf(DecisionSetupOf(options_), *learner_, rewards_learned_);
  }
  view->rewards_learned = rewards_learned_;
  view->rewards_staged = staged();
  view->baseline = baseline_.value();
  view->recent_reward = recent_.mean();
  view->recent_weight = recent_.weight();
  view->policy_values = evaluator_.Values();
  view->own_value = evaluator_.OwnValue();
  view->decisions_explored = evaluator_.explored();
  view->apprentice = apprenticeship_.apprentice();
  view->apprentice_rule = apprenticeship_.rule();
  view->lift = apprenticeship_.Lift();
  view->last_switch = apprenticeship_.last_switch();
  view->edges = graph_.num_edges();
  view->graph_users = registry_->size();
  // Users registered since the last rebuild have no edges: each is a component of its own.
  view->graph_components = components_ + (view->graph_users - users_at_rebuild_);
  return view;
}

}  // namespace graphbandit
