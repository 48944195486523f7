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
namespace {

// 11: the off-policy sums with the own policy's (a challenger's or an apprentice's); 10: with
// the apprenticeship (core/policy/apprentice.h); 9: the off-policy sums with their weight
// bounds and reward ranges; 8: with the off-policy sums; 7: with the named features' hashed
// dimensions and frozen scales; 6: hyper-parameters with the community variance; 5: with the
// pending refit; 4: with the staged observations (batches); 3: with the hyper-parameters block; 2:
// without (the configured values apply).
constexpr uint8_t kStateVersion = 11;
constexpr uint8_t kOldestStateVersion = 2;

void PutHyperparameters(const Hyperparameters& h, storage::Encoder* out) {
  out->PutDouble(h.signal_variance);
  out->PutDouble(h.offset_variance);
  out->PutDouble(h.linear_variance);
  out->PutDouble(h.user_variance);
  out->PutDoubles(h.lengthscales.data(), h.lengthscales.size());
  out->PutDouble(h.noise_variance);
  out->PutDouble(h.rho);
  out->PutDouble(h.prior_mean);
  out->PutDouble(h.community_variance);
}

// Snapshots before version 6 have no community variance: 0, the only value then.
bool GetHyperparameters(storage::Decoder* in, uint8_t version, Hyperparameters* h) {
  std::vector<double> lengthscales;
  if (!in->GetDouble(&h->signal_variance) || !in->GetDouble(&h->offset_variance) ||
      !in->GetDouble(&h->linear_variance) || !in->GetDouble(&h->user_variance) ||
      !in->GetDoubles(&lengthscales, 1u << 16) || !in->GetDouble(&h->noise_variance) ||
      !in->GetDouble(&h->rho) || !in->GetDouble(&h->prior_mean)) {
    return false;
  }
  h->community_variance = 0.0;
  if (version >= 6 && !in->GetDouble(&h->community_variance)) return false;
  h->lengthscales = Eigen::Map<const Eigen::VectorXd>(lengthscales.data(), lengthscales.size());
  return true;
}

}  // namespace

absl::Status MalformedSnapshot(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed snapshot: ", what));
}

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

absl::Status LearnedState::CompletePendingRefit() {
  if (!pending_.has_value()) return absl::OkStatus();
  absl::Status status = learner_->CompleteRefit();
  SyncRefit();
  return status;
}

void LearnedState::SyncRefit() {
  if (!pending_.has_value() || learner_->RefitPending()) return;
  PendingSwitch pending = *std::move(pending_);
  pending_.reset();
  if (!learner_->LastRefitApplied()) {
    LogWarning(absl::StrFormat(
        "model \"%s\": fitted hyper-parameters not applied (the rebuild under them was not "
        "numerically positive definite); keeping %s",
        options_.name, hyper_.DebugString()));
    return;
  }
  // Staged points were scaled with the old length-scales: rescaled as the learner's history
  // was, so that they join it as the ones scaled with the new values.
  const Eigen::VectorXd& rescale = pending.prepared.refit.rescale;
  if (rescale.size() > 0) {
    for (Staged& staged : staged_) staged.point.head(rescale.size()).array() *= rescale.array();
  }
  scaling_ = std::move(pending.prepared.scaling);
  user_kernel_ = std::move(pending.prepared.user_kernel);
  hyper_ = std::move(pending.values);
  kors_mu_factor_ = pending.kors_mu_factor;
  ++learner_changes_;
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

absl::Status LearnedState::ApplyHyperparameters(const HyperparametersOp& op) {
  // The configuration always wins: a value it fixes now replaces the logged one (the log may
  // have been written under another configuration).
  if (absl::Status s = SwitchHyperparameters(WithConfiguredValues(op.values), op.kors_mu_factor);
      !s.ok()) {
    return s;
  }
  if (op.reason == HyperparametersOp::Reason::kDictionaryFull) {
    ++coarsenings_;
    return absl::OkStatus();
  }
  ++fits_applied_;
  last_fit_rewards_ = op.fitted_at;
  last_fit_points_ = op.points;
  last_fit_log_likelihood_ = op.log_likelihood;
  next_fit_at_ = std::max(next_fit_at_, NextFitAfter(op.fitted_at, options_.refit));
  return absl::OkStatus();
}

absl::Status LearnedState::SwitchHyperparameters(const Hyperparameters& values,
                                                 double kors_mu_factor) {
  if (learner_ == nullptr || !learner_->SupportsRefit()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": hyper-parameters for a model whose policy has none to fit", options_.name));
  }
  ++learner_changes_;
  if (absl::Status s = CompletePendingRefit(); !s.ok()) return s;
  auto prepared = PrepareHyperparameters(values, CurrentShape(), kors_mu_factor, graph_, scaling_,
                                         user_kernel_);
  if (!prepared.ok()) {
    return absl::InternalError(
        absl::StrFormat("model \"%s\": fitted hyper-parameters not applied (%s); keeping %s",
                        options_.name, prepared.status().message(), hyper_.DebugString()));
  }
  // The rebuild can only fail on a numerical breakdown; keep the learner's state to fall back.
  storage::Encoder backup;
  learner_->SaveState(&backup);
  prepared->refit.may_spread = true;
  absl::Status status = learner_->Refit(prepared->refit);
  if (!status.ok()) {
    auto restored = NewLearner();
    if (restored.ok()) {
      const std::string bytes = backup.Release();
      storage::Decoder in(bytes);
      if ((*restored)->LoadState(&in).ok()) learner_ = *std::move(restored);
    }
    return absl::InternalError(
        absl::StrFormat("model \"%s\": fitted hyper-parameters not applied (%s); keeping %s",
                        options_.name, status.message(), hyper_.DebugString()));
  }
  pending_ = PendingSwitch{values, kors_mu_factor, *std::move(prepared)};
  SyncRefit();  // at once unless the learner spreads the rebuild
  return absl::OkStatus();
}

Hyperparameters LearnedState::WithConfiguredValues(Hyperparameters h) const {
  const bool fits = options_.refits_hyperparameters();
  const RefitOptions& r = options_.refit;
  if (!fits || !r.fit_signal_variance) h.signal_variance = options_.kernel_variance;
  if (!fits || !r.fit_offset_variance) h.offset_variance = 0.0;
  if (!fits || !r.fit_linear_variance || options_.kernel == KernelType::kLinear) {
    h.linear_variance = 0.0;
  }
  if (!fits || !r.fit_user_variance) h.user_variance = 0.0;
  if (!fits || !r.fit_noise_variance) h.noise_variance = options_.ridge;
  if (!fits || !r.fit_rho) h.rho = options_.rho;
  if (!fits || !MakeFitSpec(r, CurrentShape()).fit_community_variance) h.community_variance = 0.0;
  if (!fits || !r.fit_prior_mean) h.prior_mean = options_.prior_mean;
  for (Eigen::Index d = 0; d < h.lengthscales.size(); ++d) {
    const bool context = d < scaling_.context_dim;
    if (!fits || !(context ? r.fit_context_lengthscale : r.fit_arm_lengthscale)) {
      h.lengthscales(d) = context ? options_.context_lengthscale : options_.arm_lengthscale;
    }
  }
  return h;
}

absl::StatusOr<std::unique_ptr<Learner>> LearnedState::NewLearner() const {
  return MakeLearner(options_, scaling_.joint_dim() + (options_.intercept() ? 1 : 0), graph_,
                     user_kernel_, &hyper_, kors_mu_factor_);
}

UserKernelOptions LearnedState::CurrentUserKernelOptions() const {
  UserKernelOptions o = options_.user_kernel_options();
  o.rho = hyper_.rho;
  o.community_variance = hyper_.community_variance;
  return o;
}

KernelShape LearnedState::CurrentShape() const {
  KernelShape shape;
  shape.kernel = options_.kernel;
  shape.user_kernel = CurrentUserKernelOptions();
  shape.context_dim = scaling_.context_dim;
  shape.arm_dim = scaling_.arm_dim;
  shape.fixed_kors_mu = options_.kors_mu;
  return shape;
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

namespace {

void PutScaling(const NumericScaling& scaling, storage::Encoder* out) {
  std::vector<uint64_t> keys;
  keys.reserve(scaling.size());
  for (const auto& [key, scale] : scaling) keys.push_back(key);
  std::sort(keys.begin(), keys.end());  // the same bytes for the same table
  out->PutVarint64(keys.size());
  for (uint64_t key : keys) {
    const NumericScale& scale = scaling.at(key);
    out->PutFixed64(key);
    out->PutDouble(scale.center);
    out->PutDouble(scale.spread);
    out->PutVarint64(static_cast<uint64_t>(scale.count));
  }
}

bool GetScaling(storage::Decoder* in, NumericScaling* scaling) {
  uint64_t n = 0;
  if (!in->GetVarint64(&n) || n > in->remaining()) return false;
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t key = 0, count = 0;
    NumericScale scale;
    if (!in->GetFixed64(&key) || !in->GetDouble(&scale.center) || !in->GetDouble(&scale.spread) ||
        !in->GetVarint64(&count) || count == 0 || count > (uint64_t{1} << 62) ||
        !std::isfinite(scale.center) || !std::isfinite(scale.spread) || !(scale.spread > 0.0)) {
      return false;
    }
    scale.count = static_cast<int64_t>(count);
    if (!scaling->emplace(key, scale).second) return false;
  }
  return true;
}

}  // namespace

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
    if (options_.exploration_width != ExplorationWidth::kStddev) {
      WidthInputs inputs;
      inputs.schedule = options_.index_schedule;
      inputs.rewards_learned = rewards_learned_;
      if (options_.exploration_width == ExplorationWidth::kAmm) {
        inputs.information_gain = learner_->InformationGain();
        inputs.mean_norm_squared = learner_->MeanNormSquared();
      }
      view->exploration_width = ExplorationWidthFor(options_.exploration_width, inputs);
    }
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

std::string LearnedState::Save(uint64_t seq, std::string buffer) const {
  storage::Encoder out(std::move(buffer));
  out.PutU8(kStateVersion);
  out.PutFixed64(seq);
  out.PutU8(learner_ != nullptr ? 1 : 0);
  out.PutVarint64(static_cast<uint32_t>(scaling_.context_dim));
  out.PutVarint64(static_cast<uint32_t>(scaling_.arm_dim));
  out.PutVarint64(static_cast<uint64_t>(rewards_learned_));
  const int32_t users = registry_->size();
  out.PutVarint64(static_cast<uint64_t>(users));
  for (int32_t u = 0; u < users; ++u) out.PutString(registry_->Id(u));
  out.PutVarint64(static_cast<uint64_t>(graph_.num_edges()));
  for (int32_t u = 0; u < graph_.num_users(); ++u) {
    for (const auto& [v, w] : graph_.SortedNeighbours(u)) {
      if (v <= u) continue;
      out.PutVarint64(static_cast<uint64_t>(u));
      out.PutVarint64(static_cast<uint64_t>(v));
      out.PutDouble(w);
    }
  }
  // The user kernel was built over the graph's users at the last edit; users registered since
  // (by rewards) are outside it until the next edit. Restoring must build the same kernel.
  out.PutVarint64(static_cast<uint64_t>(users_at_rebuild_));
  // The hyper-parameters in use (version 3), before the learner that was built with them.
  PutHyperparameters(hyper_, &out);
  out.PutDouble(kors_mu_factor_);
  out.PutVarint64(static_cast<uint64_t>(next_fit_at_));
  out.PutVarint64(static_cast<uint64_t>(fits_applied_));
  out.PutVarint64(static_cast<uint64_t>(last_fit_rewards_));
  out.PutVarint64(static_cast<uint32_t>(last_fit_points_));
  out.PutDouble(last_fit_log_likelihood_);
  out.PutDouble(baseline_.value());
  out.PutVarint64(static_cast<uint64_t>(coarsenings_));
  // Version 5: the refit the learner spreads, if one is pending (its values; the rest is
  // derived from them and the state above, as when it started).
  out.PutU8(pending_.has_value() ? 1 : 0);
  if (pending_.has_value()) {
    PutHyperparameters(pending_->values, &out);
    out.PutDouble(pending_->kors_mu_factor);
  }
  if (learner_ != nullptr) learner_->SaveState(&out);
  // Version 4: the staged observations (batches) and how many were staged in all.
  out.PutVarint64(static_cast<uint64_t>(staged_total_));
  out.PutVarint64(staged_.size());
  for (const Staged& staged : staged_) {
    out.PutVarint64(static_cast<uint32_t>(staged.user));
    out.PutDoubles(staged.point.data(), staged.point.size());
    out.PutDouble(staged.reward);
  }
  // Version 7: how many of the dimensions are named features' hashed inputs, and the frozen
  // scales of their numbers.
  out.PutVarint64(static_cast<uint32_t>(context_slots_));
  out.PutVarint64(static_cast<uint32_t>(arm_slots_));
  PutScaling(*context_scaling_, &out);
  PutScaling(*arm_scaling_, &out);
  // Version 8: the off-policy estimates' sums (version 9: with their weight bounds and
  // reward ranges).
  evaluator_.Save(&out);
  apprenticeship_.Save(&out);  // version 10
  return out.Release();        // the ledger follows (core/model/ledger_records.h)
}

absl::Status LearnedState::Load(storage::Decoder* in_ptr) {
  storage::Decoder& in = *in_ptr;
  ++learner_changes_;
  const auto bad = MalformedSnapshot;
  // Dimensions the configuration fixed (before the snapshot is read), to compare with its own.
  const bool configured_dims = learner_ != nullptr;
  const int32_t configured_slots[2] = {context_slots_, arm_slots_};
  uint8_t version = 0, has_learner = 0;
  uint64_t seq = 0, context_dim = 0, arm_dim = 0, learned = 0, users = 0, edges = 0;
  if (!in.GetU8(&version) || version < kOldestStateVersion || version > kStateVersion) {
    return bad(absl::StrFormat("format version %d (this build reads %d to %d)", version,
                               kOldestStateVersion, kStateVersion));
  }
  if (!in.GetFixed64(&seq) || !in.GetU8(&has_learner) || has_learner > 1 ||
      !in.GetVarint64(&context_dim) || !in.GetVarint64(&arm_dim) || !in.GetVarint64(&learned) ||
      !in.GetVarint64(&users) || users > in.remaining() || context_dim > INT32_MAX ||
      arm_dim > INT32_MAX) {
    return bad("header");
  }
  for (uint64_t u = 0; u < users; ++u) {
    std::string id;
    if (!in.GetString(&id)) return bad("users");
    bool added = false;
    if (registry_->FindOrAdd(id, &added) != static_cast<int32_t>(u) || !added)
      return bad("user ids");
  }
  if (!in.GetVarint64(&edges) || edges > in.remaining()) return bad("edge count");
  for (uint64_t e = 0; e < edges; ++e) {
    uint64_t a = 0, b = 0;
    double w = 0.0;
    if (!in.GetVarint64(&a) || !in.GetVarint64(&b) || !in.GetDouble(&w) || a >= users ||
        b >= users || a >= b || !(w > 0.0) || !std::isfinite(w)) {
      return bad("edges");
    }
    graph_.SetEdge(static_cast<int32_t>(a), static_cast<int32_t>(b), w);
  }
  uint64_t rebuild_users = 0;
  if (!in.GetVarint64(&rebuild_users) || rebuild_users > users) return bad("kernel users");
  bool rebuild_learner = false;
  std::optional<PendingSwitch> pending;  // set once the learner is restored
  if (version >= 3) {
    Hyperparameters h;
    double factor = 0.0, log_likelihood = 0.0, baseline = 0.0;
    uint64_t coarsenings = 0;
    uint64_t next_fit = 0, fits = 0, last_rewards = 0, last_points = 0;
    if (!GetHyperparameters(&in, version, &h) || !in.GetDouble(&factor) ||
        !in.GetVarint64(&next_fit) || !in.GetVarint64(&fits) || !in.GetVarint64(&last_rewards) ||
        !in.GetVarint64(&last_points) || !in.GetDouble(&log_likelihood) ||
        !in.GetDouble(&baseline) || !std::isfinite(baseline) || !in.GetVarint64(&coarsenings) ||
        !(factor > 0.0 && factor <= kMaxKorsMuFactor) || next_fit > INT64_MAX || fits > INT64_MAX ||
        coarsenings > INT64_MAX || last_rewards > INT64_MAX || last_points > INT32_MAX) {
      return bad("hyper-parameters");
    }
    if (!h.InRange()) return bad("hyper-parameters out of range");
    if (version >= 5) {
      uint8_t has_pending = 0;
      if (!in.GetU8(&has_pending) || has_pending > 1) return bad("pending refit");
      if (has_pending == 1) {
        PendingSwitch p;
        if (!GetHyperparameters(&in, version, &p.values) || !p.values.InRange() ||
            !in.GetDouble(&p.kors_mu_factor) ||
            !(p.kors_mu_factor > 0.0 && p.kors_mu_factor <= kMaxKorsMuFactor)) {
          return bad("pending refit");
        }
        pending = std::move(p);
      }
    }
    hyper_ = std::move(h);
    kors_mu_factor_ = factor;
    next_fit_at_ = static_cast<int64_t>(next_fit);
    fits_applied_ = static_cast<int64_t>(fits);
    last_fit_rewards_ = static_cast<int64_t>(last_rewards);
    last_fit_points_ = static_cast<int32_t>(last_points);
    last_fit_log_likelihood_ = log_likelihood;
    baseline_.set_value(baseline);
    coarsenings_ = static_cast<int64_t>(coarsenings);
    if (learner_ != nullptr) {
      // Dimensions fixed by the configuration: the fresh learner must use these values.
      if (hyper_.lengthscales.size() != scaling_.joint_dim()) return bad("length-scale count");
      scaling_.per_dimension = hyper_.lengthscales;
      rebuild_learner = true;
    }
  }
  // As live: the graph and the kernel cover the users known at the last edit.
  graph_.EnsureUsers(static_cast<int32_t>(rebuild_users));
  auto kernel = BuildUserKernel(graph_, CurrentUserKernelOptions());
  if (!kernel.ok()) {
    // The configured user kernel cannot serve this graph: a configuration change, not damage.
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": the configured user kernel cannot serve the snapshot's graph: %s",
        options_.name, kernel.status().message()));
  }
  user_kernel_ = *std::move(kernel);
  components_ = graph_.CountComponents();
  users_at_rebuild_ = graph_.num_users();
  if (rebuild_learner) {
    auto rebuilt = NewLearner();
    if (!rebuilt.ok()) return rebuilt.status();
    learner_ = *std::move(rebuilt);
  }
  if (has_learner == 1) {
    if (learner_ != nullptr && (scaling_.context_dim != static_cast<int>(context_dim) ||
                                scaling_.arm_dim != static_cast<int>(arm_dim))) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the snapshot has dimensions (context %d, arms %d) but the configuration "
          "says (context %d, arms %d)",
          options_.name, context_dim, arm_dim, scaling_.context_dim, scaling_.arm_dim));
    }
    if (learner_ == nullptr) {
      EdgeEditResult ignored;
      absl::Status s =
          Apply(FixDimensionsOp{static_cast<int32_t>(context_dim), static_cast<int32_t>(arm_dim)},
                &ignored);
      if (!s.ok()) return s;
    } else if (absl::Status s = learner_->SetGraph(graph_, user_kernel_); !s.ok()) {
      return bad(s.message());
    }
    if (absl::Status s = learner_->LoadState(&in); !s.ok()) return s;
    if (learner_->RefitPending() != pending.has_value()) return bad("pending refit");
    if (pending.has_value()) {
      // Derived as when the refit started: from the values then in use and the same graph.
      auto prepared = PrepareHyperparameters(
          pending->values, CurrentShape(), pending->kors_mu_factor, graph_, scaling_, user_kernel_);
      if (!prepared.ok()) return bad(prepared.status().message());
      prepared->refit.may_spread = true;
      if (absl::Status s = learner_->ResumeRefit(prepared->refit); !s.ok()) return s;
      pending->prepared = *std::move(prepared);
      pending_ = std::move(pending);
    }
  } else if (pending.has_value()) {
    return bad("pending refit without a learner");
  } else if (learner_ != nullptr) {
    // Dimensions fixed by the configuration, nothing learned yet: the learner sees the graph.
    if (absl::Status s = learner_->SetGraph(graph_, user_kernel_); !s.ok()) return bad(s.message());
  }
  rewards_learned_ = static_cast<int64_t>(learned);
  if (version >= 4) {
    uint64_t total = 0, count = 0;
    if (!in.GetVarint64(&total) || total > INT64_MAX || !in.GetVarint64(&count) || count > total ||
        count > in.remaining() || (count > 0 && learner_ == nullptr)) {
      return bad("staged observations");
    }
    const int64_t dim =
        learner_ != nullptr ? scaling_.joint_dim() + (options_.intercept() ? 1 : 0) : 0;
    for (uint64_t i = 0; i < count; ++i) {
      uint64_t user = 0;
      std::vector<double> point;
      double reward = 0.0;
      if (!in.GetVarint64(&user) || user >= static_cast<uint64_t>(registry_->size()) ||
          !in.GetDoubles(&point, 1u << 20) || static_cast<int64_t>(point.size()) != dim ||
          !in.GetDouble(&reward) || !std::isfinite(reward)) {
        return bad("staged observation");
      }
      staged_.push_back(Staged{static_cast<int32_t>(user),
                               Eigen::Map<const Eigen::VectorXd>(point.data(), dim), reward});
    }
    staged_total_ = static_cast<int64_t>(total);
  }
  if (version >= 7) {
    uint64_t slots[2] = {0, 0};
    if (!in.GetVarint64(&slots[0]) || !in.GetVarint64(&slots[1]) ||
        (has_learner == 0 && slots[0] + slots[1] > 0) || slots[0] > context_dim ||
        slots[1] > arm_dim) {
      return bad("named-feature inputs");
    }
    if (configured_dims && has_learner == 1 &&
        (static_cast<int32_t>(slots[0]) != configured_slots[0] ||
         static_cast<int32_t>(slots[1]) != configured_slots[1])) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the snapshot has %d context and %d arm named-feature inputs but the "
          "configuration says %d and %d (features.context_slots, features.arm_slots)",
          options_.name, slots[0], slots[1], configured_slots[0], configured_slots[1]));
    }
    if (has_learner == 1) {
      context_slots_ = static_cast<int32_t>(slots[0]);
      arm_slots_ = static_cast<int32_t>(slots[1]);
    }
    auto context = std::make_shared<NumericScaling>();
    auto arm = std::make_shared<NumericScaling>();
    if (!GetScaling(&in, context.get()) || !GetScaling(&in, arm.get())) {
      return bad("numeric feature scales");
    }
    context_scaling_ = std::move(context);
    arm_scaling_ = std::move(arm);
  } else if (configured_dims && has_learner == 1 && configured_slots[0] + configured_slots[1] > 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\": the snapshot predates named features but the configuration gives the "
        "model named-feature inputs (features)",
        options_.name));
  }
  if (version >= 8 && !evaluator_.Load(&in, /*with_bounds=*/version >= 9)) {
    return bad("off-policy estimates");
  }
  // Before version 10 there was no apprentice mode: such a model serves itself.
  if (version >= 10 && !apprenticeship_.Load(&in)) return bad("apprenticeship");
  if (learner_ != nullptr && learner_->SupportsRefit() && version >= 3) {
    // Values the configuration fixes win over the snapshot's (the configuration may have
    // changed since): rebuild with them, as a logged fit would.
    const Hyperparameters configured = WithConfiguredValues(hyper_);
    if (!(configured == hyper_)) {
      LogWarning(
          absl::StrFormat("model \"%s\": the configuration fixes hyper-parameters the "
                          "snapshot had otherwise (%s); rebuilding with %s",
                          options_.name, hyper_.DebugString(), configured.DebugString()));
      // Staged points are scaled with the old values: learned first, as before any switch.
      if (absl::Status s = LearnStaged(staged()); !s.ok()) return s;
      if (absl::Status s = SwitchHyperparameters(configured, kors_mu_factor_); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
