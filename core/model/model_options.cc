#include "core/model/model_options.h"

#include <cmath>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {

absl::string_view PolicyName(PolicyKind policy) {
  switch (policy) {
    case PolicyKind::kEkUcb:
      return "EK_UCB";
    case PolicyKind::kEkTs:
      return "EK_TS";
    case PolicyKind::kGpUcb:
      return "GP_UCB";
    case PolicyKind::kGpTs:
      return "GP_TS";
    case PolicyKind::kLinUcbPerUser:
      return "LINUCB_PER_USER";
    case PolicyKind::kLinUcbPooled:
      return "LINUCB_POOLED";
    case PolicyKind::kGraphUcb:
      return "GRAPH_UCB";
    case PolicyKind::kGobLin:
      return "GOB_LIN";
    case PolicyKind::kBatchedNystromUcb:
      return "BATCHED_NYSTROM_UCB";
    case PolicyKind::kSemiGraphTs:
      return "SEMI_GRAPH_TS";
    case PolicyKind::kSemiTs:
      return "SEMI_TS";
    case PolicyKind::kLinTs:
      return "LIN_TS";
    case PolicyKind::kLkGpUcb:
      return "LK_GP_UCB";
    case PolicyKind::kLkGpTs:
      return "LK_GP_TS";
    case PolicyKind::kRandom:
      return "RANDOM";
    case PolicyKind::kGraphUcbLocal:
      return "GRAPH_UCB_LOCAL";
  }
  return "UNKNOWN";
}

std::string QuoteId(absl::string_view id) {
  return absl::StrCat("\"", absl::CHexEscape(id.substr(0, 64)), id.size() > 64 ? "...\"" : "\"");
}

bool IsValidModelName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace {

absl::Status ValidateFeatureOptions(const ModelOptions& o) {
  const ModelOptions::FeatureOptions& f = o.features;
  auto bad = [&o](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrFormat("model \"%s\": features.%s", o.name, what));
  };
  constexpr int kMaxSlots = ModelOptions::FeatureOptions::kMaxSlots;
  if (f.context_slots < 0 || f.context_slots > kMaxSlots || f.arm_slots < 0 ||
      f.arm_slots > kMaxSlots) {
    return bad(absl::StrFormat("context_slots and arm_slots must be within 0..%d", kMaxSlots));
  }
  const FeatureLimits& l = f.limits;
  if (l.max_namespaces < 1 || l.max_namespaces > 4096) {
    return bad("limits.max_namespaces must be within 1..4096");
  }
  if (l.max_values < 1 || l.max_values > 65536) {
    return bad("limits.max_values must be within 1..65536");
  }
  if (l.max_name_bytes < 1 || l.max_name_bytes > 4096) {
    return bad("limits.max_name_bytes must be within 1..4096");
  }
  if (l.max_value_bytes < 1 || l.max_value_bytes > 65536) {
    return bad("limits.max_value_bytes must be within 1..65536");
  }
  if (f.max_listed_features < 1 || f.max_listed_features > 1'000'000) {
    return bad("max_listed_features must be within 1..1000000");
  }
  if (f.configured) {
    if (o.arm_dim + f.arm_slots == 0) {
      return bad("arm_slots is 0 and arm_feature_dim is 0: candidates would have no input");
    }
    if (int64_t{o.context_dim} + f.context_slots > o.max_feature_dim ||
        int64_t{o.arm_dim} + f.arm_slots > o.max_feature_dim) {
      return bad(absl::StrFormat(
          "the dense dimensions and the slots together exceed limits.max_feature_dim (%d)",
          o.max_feature_dim));
    }
  }
  for (size_t i = 0; i < f.declared.size(); ++i) {
    const ModelOptions::DeclaredFeature& d = f.declared[i];
    if (!f.configured) return bad("declared needs a features block");
    if ((d.context ? f.context_slots : f.arm_slots) == 0) {
      return bad(absl::StrFormat("declared[%d] is on a side with 0 slots", i));
    }
    if (d.name.empty() || static_cast<int>(d.name.size()) > l.max_name_bytes ||
        static_cast<int>(d.name_space.size()) > l.max_name_bytes) {
      return bad(
          absl::StrFormat("declared[%d] needs a name of 1..%d bytes and a namespace of at most %d",
                          i, l.max_name_bytes, l.max_name_bytes));
    }
    for (size_t j = 0; j < i; ++j) {
      const ModelOptions::DeclaredFeature& e = f.declared[j];
      if (e.context == d.context && e.name_space == d.name_space && e.name == d.name) {
        return bad(absl::StrFormat("declared[%d] repeats declared[%d] (%s, %s)", i, j,
                                   QuotedName(d.name_space), QuotedName(d.name)));
      }
    }
  }
  if (f.declared_only && f.declared.empty()) {
    return bad("declared_only needs at least one declared feature");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelOptions(const ModelOptions& o) {
  auto positive = [&o](double value, absl::string_view field) -> absl::Status {
    if (std::isfinite(value) && value > 0.0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": %s must be a finite number > 0, got %g", o.name, field, value));
  };
  if (!IsValidModelName(o.name)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model name \"%s\" must be 1..64 characters from [A-Za-z0-9_.-]", o.name));
  }
  for (auto [value, field] :
       {std::pair<double, absl::string_view>{o.kernel_variance, "arm_kernel.variance"},
        {o.arm_lengthscale, "arm_kernel.arm_lengthscale"},
        {o.context_lengthscale, "arm_kernel.context_lengthscale"},
        {o.rho, "graph.rho"},
        {o.ridge, "ridge"},
        {o.refit.kors_mu_factor, "hyperparameters.kors_mu_factor"},
        {o.effective_kors_mu(), "nystrom.kors_mu"},
        {o.kors_epsilon, "nystrom.kors_epsilon"},
        {o.kors_gamma, "nystrom.kors_gamma"},
        {o.reward_bound, "limits.reward_bound"},
        {o.heat_tau, "graph.heat_tau"},
        {o.linear_lambda, "linear.lambda"},
        {o.batched_threshold, "batched.threshold"},
        {o.batched_oversampling, "batched.oversampling"}}) {
    if (absl::Status s = positive(value, field); !s.ok()) return s;
  }
  if (o.refit.enabled) {
    if (absl::Status s = o.refit.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\": hyperparameters: %s", o.name, s.message()));
    }
  }
  // Below one reward the tracker would absorb each reward's whole prediction error.
  if (!std::isfinite(o.baseline_half_life) ||
      !(o.baseline_half_life == 0.0 || o.baseline_half_life >= 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": baseline_half_life must be 0 (off) or a finite number >= 1 (rewards), "
        "got %g",
        o.name, o.baseline_half_life));
  }
  if (!(o.evaluation_epsilon >= 0.0 && o.evaluation_epsilon < 1.0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": evaluation.epsilon must be in [0, 1) (a share of decisions), got %g", o.name,
        o.evaluation_epsilon));
  }
  if (o.apprentice_start) {
    if (!(o.evaluation_epsilon > 0.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": apprentice.start needs evaluation.epsilon > 0: the lift over the "
          "baseline is estimated from the decisions that share draws uniformly",
          o.name));
    }
    if (o.samples_parameters()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": apprentice mode is not available with policy %s, whose learner learns "
          "from the probabilities its own draws chose arms with",
          o.name, PolicyName(o.policy)));
    }
  }
  if (!o.shadow_of.empty()) {
    if (!IsValidModelName(o.shadow_of) || o.shadow_of == o.name) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\": shadow_of must name another model of this server, got %s",
                          o.name, QuoteId(o.shadow_of)));
    }
    if (o.apprentice_start) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": a challenger (shadow_of) never serves, so it cannot start as an "
          "apprentice (apprentice.start)",
          o.name));
    }
  }
  if (!std::isfinite(o.apprentice.margin) || o.apprentice.min_decisions < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": apprentice.margin must be finite and apprentice.min_decisions at least 2 "
        "(got %g and %d)",
        o.name, o.apprentice.margin, o.apprentice.min_decisions));
  }
  if (o.exploration_width == ExplorationWidth::kGpUcbTheorem ||
      o.exploration_width == ExplorationWidth::kBayesUcb) {
    const char* width =
        o.exploration_width == ExplorationWidth::kGpUcbTheorem ? "GP_UCB_THEOREM" : "BAYES_UCB";
    if (o.samples_parameters() || o.policy == PolicyKind::kRandom) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": exploration_width %s needs a policy with a posterior standard "
          "deviation; %s has none",
          o.name, width, PolicyName(o.policy)));
    }
    if (o.thompson()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": exploration_width %s is a UCB index; %s samples (for GP-TS use "
          "exploration 1 with exploration_width STDDEV)",
          o.name, width, PolicyName(o.policy)));
    }
    if (o.confidence.bound != ConfidenceBound::kTuned) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": exploration_width %s cannot scale confidence_bound %s (the bound "
          "sets its own width)",
          o.name, width, ConfidenceBoundName(o.confidence.bound)));
    }
  }
  {
    const IndexSchedule& s = o.index_schedule;
    if (!(std::isfinite(s.arm_count) && s.arm_count >= 1.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": index_schedule.arm_count must be a finite number >= 1, got %g", o.name,
          s.arm_count));
    }
    if (!(std::isfinite(s.omega) && s.omega > 0.0) || !(std::isfinite(s.xi) && s.xi > 0.0)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": index_schedule.omega and xi must be finite and > 0, got %g and %g", o.name,
          s.omega, s.xi));
    }
  }
  if (!std::isfinite(o.prior_mean)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": prior_mean must be finite", o.name));
  }
  if (o.prior_mean != 0.0 && !o.kernel_policy()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": prior_mean is a kernel policy's (EK_UCB, EK_TS, GP_UCB, GP_TS), not %s's",
        o.name, PolicyName(o.policy)));
  }
  if (o.prior_mean != 0.0 && o.confidence.bound != ConfidenceBound::kTuned) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": prior_mean cannot be combined with confidence_bound %s (the bounds are "
        "for a zero-mean reward function)",
        o.name, ConfidenceBoundName(o.confidence.bound)));
  }
  if (o.exploration_width == ExplorationWidth::kAmm && !o.kernel_policy()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": exploration_width AMM needs a kernel policy (EK_UCB, EK_TS, GP_UCB, "
        "GP_TS); %s has no information gain to grow it",
        o.name, PolicyName(o.policy)));
  }
  if (o.propensity_draws > 100'000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": semi_parametric.propensity_draws must be at most 100000, got %d", o.name,
        o.propensity_draws));
  }
  if (o.samples_parameters() && o.aggregation != Aggregation::kFirst) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": %s learns each decision's one reward as it arrives: it needs "
        "ledger.aggregation FIRST",
        o.name, PolicyName(o.policy)));
  }
  if (o.confidence.bound != ConfidenceBound::kTuned) {
    if (o.policy != PolicyKind::kGpUcb) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": confidence_bound %s needs policy GP_UCB (the bounds are exact-GP "
          "bounds), not %s",
          o.name, ConfidenceBoundName(o.confidence.bound), PolicyName(o.policy)));
    }
    if (absl::Status s = o.confidence.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrFormat("model \"%s\": %s", o.name, s.message()));
    }
  }
  if (!std::isfinite(o.exploration) || o.exploration < 0.0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": exploration must be a finite number >= 0, got %g", o.name, o.exploration));
  }
  auto at_least_one = [&o](int64_t value, absl::string_view field) -> absl::Status {
    if (value >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": %s must be >= 1, got %d", o.name, field, value));
  };
  for (auto [value, field] :
       {std::pair<int64_t, absl::string_view>{o.max_dictionary_size, "nystrom.max_dictionary_size"},
        {o.exact_max_observations, "exact_gp.max_observations"},
        {o.max_candidates, "limits.max_candidates"},
        {o.max_learn_batch, "nystrom.max_learn_batch"},
        {o.max_feature_dim, "limits.max_feature_dim"},
        {o.max_users, "limits.max_users"},
        {o.max_graph_edits_per_call, "limits.max_graph_edits_per_call"},
        {o.max_decisions, "ledger.max_decisions"},
        {o.spectral_dims, "graph.spectral_dims"},
        {o.propensity_draws, "semi_parametric.propensity_draws"}}) {
    if (absl::Status s = at_least_one(value, field); !s.ok()) return s;
  }
  if (o.community_dims < 0 || o.community_dims > kMaxCommunityDims) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "graph.community_dims must be in 0..%d, got %d", kMaxCommunityDims, o.community_dims));
  }
  if (o.default_reward.has_value() &&
      (!std::isfinite(*o.default_reward) || std::abs(*o.default_reward) > o.reward_bound)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": ledger.default_reward must be finite and within limits.reward_bound",
        o.name));
  }
  if (o.exact() && (o.aggregation != Aggregation::kFirst || o.default_reward.has_value())) {
    // Their capacity (exact_gp.max_observations) is checked when a reward arrives; rewards
    // learned when a window closes would bypass it.
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": GP_UCB / GP_TS learn only with ledger.aggregation FIRST and no "
        "ledger.default_reward (use an EK policy for those)",
        o.name));
  }
  if (o.max_tombstones < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": ledger.max_tombstones must be >= 0", o.name));
  }
  if (o.max_learn_batch > kMaxLearnBatchLimit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": nystrom.max_learn_batch must be at most %d, got %d", o.name,
                        kMaxLearnBatchLimit, o.max_learn_batch));
  }
  if (o.max_history < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": nystrom.max_history must be >= 0", o.name));
  }
  if (o.max_learn_delay < absl::ZeroDuration() || o.max_learn_delay > absl::Minutes(1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": nystrom.max_learn_delay_ms must be 0..60000 (at most one minute), got %d",
        o.name, absl::ToInt64Milliseconds(o.max_learn_delay)));
  }
  if (o.reward_window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model \"%s\": ledger.reward_window_seconds must be >= 1", o.name));
  }
  if (absl::Status s = ValidateFeatureOptions(o); !s.ok()) return s;
  if (o.arm_dim == 0 && o.context_dim != 0 && !o.features.configured) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": context_dim is set but arm_feature_dim is 0; set both, or neither to let "
        "the first request fix them",
        o.name));
  }
  if (o.arm_dim < 0 || o.context_dim < 0 || o.arm_dim > o.max_feature_dim ||
      o.context_dim > o.max_feature_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": feature dimensions must be within 0..limits.max_feature_dim (%d)", o.name,
        o.max_feature_dim));
  }
  return absl::OkStatus();
}

}  // namespace graphbandit
