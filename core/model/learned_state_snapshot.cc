// LearnedState: the snapshot payload's state part (Save, Load) and its encodings.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/model/learned_state.h"

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

absl::Status MalformedSnapshot(absl::string_view what) {
  return absl::DataLossError(absl::StrCat("malformed snapshot: ", what));
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
