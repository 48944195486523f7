#include "proto/model_config.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "proto/enum_table.h"
#include "proto/model_enums.h"

namespace graphbandit::config {
namespace {

template <typename T>
T Or(T value, T fallback) {
  return value != T{} ? value : fallback;
}

// The features block; its values are range-checked by ValidateModelOptions.
absl::Status ReadFeatures(const v1::ModelConfig& c, ModelOptions* o) {
  const ModelOptions::FeatureOptions d;
  ModelOptions::FeatureOptions& f = o->features;
  if (!c.has_features()) return absl::OkStatus();
  const v1::FeatureConfig& p = c.features();
  f.configured = true;
  auto clamp = [](uint32_t v) { return static_cast<int>(std::min<uint32_t>(v, 1u << 30)); };
  f.context_slots = p.has_context_slots() ? clamp(p.context_slots()) : d.context_slots;
  f.arm_slots = p.has_arm_slots() ? clamp(p.arm_slots()) : d.arm_slots;
  f.declared_only = p.declared_only();
  f.limits.max_namespaces =
      clamp(Or(p.limits().max_namespaces(), static_cast<uint32_t>(d.limits.max_namespaces)));
  f.limits.max_values =
      clamp(Or(p.limits().max_values(), static_cast<uint32_t>(d.limits.max_values)));
  f.limits.max_name_bytes =
      clamp(Or(p.limits().max_name_bytes(), static_cast<uint32_t>(d.limits.max_name_bytes)));
  f.limits.max_value_bytes =
      clamp(Or(p.limits().max_value_bytes(), static_cast<uint32_t>(d.limits.max_value_bytes)));
  f.max_listed_features =
      clamp(Or(p.max_listed_features(), static_cast<uint32_t>(d.max_listed_features)));
  for (int i = 0; i < p.declared_size(); ++i) {
    const v1::DeclaredFeature& in = p.declared(i);
    ModelOptions::DeclaredFeature out;
    out.name_space = in.namespace_();
    out.name = in.name();
    if (in.side() == v1::DeclaredFeature::SIDE_UNSPECIFIED ||
        in.kind() == v1::FEATURE_KIND_UNSPECIFIED) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "features.declared[%d] needs a side (CONTEXT or ARM) and a kind (NUMERIC or "
          "CATEGORICAL)",
          i));
    }
    const std::string field = absl::StrFormat("features.declared[%d]", i);
    for (const absl::Status& s :
         {FromProto(kFeatureSides, in.side(), true, field + ".side", &out.context),
          FromProto(kFeatureKinds, in.kind(), FeatureKind::kNumeric, field + ".kind", &out.kind)}) {
      if (!s.ok()) return s;
    }
    f.declared.push_back(std::move(out));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelOptions> ToModelOptions(const v1::ModelConfig& c) {
  const ModelOptions d;  // defaults
  ModelOptions o;
  o.name = c.name();
  for (const absl::Status& status : {
           FromProto(kPolicies, c.policy(), PolicyKind::kEkUcb, "policy", &o.policy),
           FromProto(kArmKernels, c.arm_kernel().type(), KernelType::kRbf, "arm_kernel.type",
                     &o.kernel),
           FromProto(kUserKernels, c.graph().user_kernel(), UserKernelKind::kLaplacianInverse,
                     "graph.user_kernel", &o.user_kernel),
           FromProto(kExplorationWidths, c.exploration_width(), d.exploration_width,
                     "exploration_width", &o.exploration_width),
           FromProto(kAggregations, c.ledger().aggregation(), Aggregation::kFirst,
                     "ledger.aggregation", &o.aggregation),
           FromProto(kBounds, c.confidence_bound().bound(), ConfidenceBound::kTuned,
                     "confidence_bound.bound", &o.confidence.bound),
           FromProto(kPropensityRules, c.semi_parametric().propensity_rule(),
                     PropensityRule::kMultinomial, "semi_parametric.propensity_rule",
                     &o.propensity_rule),
       }) {
    if (!status.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\": %s", o.name, status.message()));
    }
  }
  o.kernel_variance = Or(c.arm_kernel().variance(), d.kernel_variance);
  o.arm_lengthscale = Or(c.arm_kernel().arm_lengthscale(), d.arm_lengthscale);
  o.context_lengthscale = Or(c.arm_kernel().context_lengthscale(), d.context_lengthscale);
  o.rho = Or(c.graph().rho(), d.rho);
  // Hyper-parameters: fitted unless set (a value set in the configuration is held fixed).
  const v1::HyperparameterConfig& h = c.hyperparameters();
  o.refit.enabled = h.has_fit() ? h.fit() : d.refit.enabled;
  o.refit.fit_signal_variance = c.arm_kernel().variance() == 0.0;
  o.refit.fit_arm_lengthscale = c.arm_kernel().arm_lengthscale() == 0.0;
  o.refit.fit_context_lengthscale = c.arm_kernel().context_lengthscale() == 0.0;
  o.refit.fit_rho = c.graph().rho() == 0.0;
  o.refit.fit_noise_variance = c.ridge() == 0.0;
  o.refit.fit_offset_variance = h.has_fit_offset() ? h.fit_offset() : d.refit.fit_offset_variance;
  o.refit.fit_prior_mean = h.has_fit_mean() ? h.fit_mean() : d.refit.fit_prior_mean;
  o.refit.fit_linear_variance = h.has_fit_linear() ? h.fit_linear() : d.refit.fit_linear_variance;
  o.refit.fit_user_variance =
      h.has_fit_user_variance() ? h.fit_user_variance() : d.refit.fit_user_variance;
  o.refit.fit_community_variance =
      h.has_fit_community_variance() ? h.fit_community_variance() : d.refit.fit_community_variance;
  o.refit.per_dimension = h.has_per_dimension() ? h.per_dimension() : d.refit.per_dimension;
  o.refit.first_fit =
      static_cast<int64_t>(Or<uint32_t>(h.first_fit(), static_cast<uint32_t>(d.refit.first_fit)));
  o.refit.growth = Or(h.growth(), d.refit.growth);
  o.refit.max_interval = static_cast<int64_t>(
      Or<uint32_t>(h.max_interval(), static_cast<uint32_t>(d.refit.max_interval)));
  o.refit.max_points =
      static_cast<int>(Or<uint32_t>(h.max_points(), static_cast<uint32_t>(d.refit.max_points)));
  o.refit.max_evaluations = static_cast<int>(
      Or<uint32_t>(h.max_evaluations(), static_cast<uint32_t>(d.refit.max_evaluations)));
  o.refit.min_change = h.has_min_change() ? h.min_change() : d.refit.min_change;
  o.refit.min_gain_per_parameter =
      h.has_min_gain_per_parameter() ? h.min_gain_per_parameter() : d.refit.min_gain_per_parameter;
  o.refit.kors_mu_factor = h.has_kors_mu_factor() ? h.kors_mu_factor() : d.refit.kors_mu_factor;
  o.refit.min_seconds_between = h.has_min_seconds_between_fits() ? h.min_seconds_between_fits()
                                                                 : kServedMinSecondsBetweenFits;
  o.refit.cpu_share = h.has_fit_cpu_share() ? h.fit_cpu_share() : kServedFitCpuShare;
  o.edge_list_file = c.graph().edge_list_file();
  o.heat_tau = Or(c.graph().heat_tau(), d.heat_tau);
  o.spectral_dims = static_cast<int>(Or<uint32_t>(c.graph().spectral_dims(), d.spectral_dims));
  o.community_dims =
      c.graph().has_community_dims()
          ? static_cast<int>(std::min<uint32_t>(c.graph().community_dims(), INT32_MAX))
          : d.community_dims;
  o.linear_lambda = Or(c.linear().lambda(), d.linear_lambda);
  o.linear_intercept = c.linear().has_intercept() ? c.linear().intercept() : d.linear_intercept;
  o.confidence.noise_std = Or(c.confidence_bound().noise_std(), 0.1);
  o.confidence.norm_bound = Or(c.confidence_bound().norm_bound(), 1.0);
  o.confidence.delta = Or(c.confidence_bound().delta(), 0.01);
  o.confidence.mixture = Or(c.confidence_bound().mixture(), 1.0);
  o.confidence.igp_eta = Or(c.confidence_bound().igp_eta(), 0.01);
  o.propensity_draws =
      static_cast<int>(std::min<uint32_t>(Or<uint32_t>(c.semi_parametric().propensity_draws(),
                                                       static_cast<uint32_t>(d.propensity_draws)),
                                          uint32_t{1} << 30));
  o.batched_threshold = Or(c.batched().threshold(), d.batched_threshold);
  o.batched_oversampling = Or(c.batched().oversampling(), d.batched_oversampling);
  o.ridge = Or(c.ridge(), d.ridge);
  o.exploration = c.has_exploration() ? c.exploration() : d.exploration;
  o.index_schedule.arm_count = Or(c.index_schedule().arm_count(), d.index_schedule.arm_count);
  o.index_schedule.omega =
      c.index_schedule().has_omega() ? c.index_schedule().omega() : d.index_schedule.omega;
  o.index_schedule.xi = c.index_schedule().has_xi() ? c.index_schedule().xi() : d.index_schedule.xi;
  o.index_schedule.inverse_t_level = c.index_schedule().inverse_t_level();
  o.prior_mean = c.has_prior_mean() ? c.prior_mean() : d.prior_mean;
  o.baseline_half_life = c.has_baseline_half_life() ? c.baseline_half_life() : d.baseline_half_life;
  o.evaluation_epsilon = c.evaluation().epsilon();
  o.explain_names_users = c.evaluation().explain_names_users();
  o.apprentice_start = c.apprentice().start();
  o.shadow_of = c.shadow_of();
  o.apprentice.margin = c.apprentice().margin();
  o.apprentice.min_decisions = c.apprentice().has_min_decisions()
                                   ? static_cast<int64_t>(c.apprentice().min_decisions())
                                   : d.apprentice.min_decisions;
  o.kors_mu = c.nystrom().kors_mu();  // 0 means "the ridge"
  o.kors_epsilon = Or(c.nystrom().kors_epsilon(), d.kors_epsilon);
  o.kors_gamma = Or(c.nystrom().kors_gamma(), d.kors_gamma);
  o.max_dictionary_size =
      static_cast<int>(Or<uint32_t>(c.nystrom().max_dictionary_size(), d.max_dictionary_size));
  o.max_history = static_cast<int64_t>(c.nystrom().max_history());
  o.forget_evicted = c.nystrom().forget_evicted();
  o.coarsen_full_dictionary = c.nystrom().coarsen_when_full();
  o.max_learn_batch = static_cast<int>(std::min<uint32_t>(
      Or<uint32_t>(c.nystrom().max_learn_batch(), static_cast<uint32_t>(d.max_learn_batch)),
      uint32_t{1} << 30));
  o.single_precision_scoring = !c.nystrom().double_precision_scoring();
  o.max_learn_delay = c.nystrom().max_learn_delay_ms() > 0
                          ? absl::Milliseconds(c.nystrom().max_learn_delay_ms())
                      : c.nystrom().max_learn_delay_ms() < 0 ? absl::ZeroDuration()
                                                             : d.max_learn_delay;
  o.exact_max_observations =
      static_cast<int>(Or<uint32_t>(c.exact_gp().max_observations(), d.exact_max_observations));
  o.context_dim = static_cast<int>(c.context_dim());
  o.arm_dim = static_cast<int>(c.arm_feature_dim());
  o.seed = Or<uint64_t>(c.seed(), d.seed);
  o.max_candidates = static_cast<int>(Or<uint32_t>(c.limits().max_candidates(), d.max_candidates));
  o.max_feature_dim =
      static_cast<int>(Or<uint32_t>(c.limits().max_feature_dim(), d.max_feature_dim));
  o.max_users = static_cast<int64_t>(Or<uint64_t>(c.limits().max_users(), d.max_users));
  o.reward_bound = Or(c.limits().reward_bound(), d.reward_bound);
  o.max_graph_edits_per_call = static_cast<int>(
      Or<uint32_t>(c.limits().max_graph_edits_per_call(), d.max_graph_edits_per_call));
  o.reward_window = c.ledger().reward_window_seconds() > 0
                        ? absl::Seconds(c.ledger().reward_window_seconds())
                        : d.reward_window;
  o.max_decisions = static_cast<int64_t>(
      Or<uint32_t>(c.ledger().max_decisions(), static_cast<uint32_t>(d.max_decisions)));
  if (c.ledger().has_default_reward()) o.default_reward = c.ledger().default_reward();
  o.max_tombstones = static_cast<int64_t>(c.ledger().max_tombstones());
  if (absl::Status s = ReadFeatures(c, &o); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat("model \"%s\": %s", o.name, s.message()));
  }
  if (absl::Status s = ValidateModelOptions(o); !s.ok()) return s;
  return o;
}

v1::ModelConfig ToModelConfig(const ModelOptions& o) {
  v1::ModelConfig c;
  c.set_name(o.name);
  c.set_policy(ToProto(kPolicies, o.policy));
  auto* kernel = c.mutable_arm_kernel();
  kernel->set_type(ToProto(kArmKernels, o.kernel));
  // Fitted values are left unset (0), so that this configuration, fed back, fits them again;
  // DescribeModel shows the values in use in ModelDescription.hyperparameters.
  const bool fits = o.refits_hyperparameters();
  if (!fits || !o.refit.fit_signal_variance) kernel->set_variance(o.kernel_variance);
  if (!fits || !o.refit.fit_arm_lengthscale) kernel->set_arm_lengthscale(o.arm_lengthscale);
  if (!fits || !o.refit.fit_context_lengthscale) {
    kernel->set_context_lengthscale(o.context_lengthscale);
  }
  if (!fits || !o.refit.fit_rho) c.mutable_graph()->set_rho(o.rho);
  {
    v1::HyperparameterConfig* h = c.mutable_hyperparameters();
    h->set_fit(o.refit.enabled);
    h->set_per_dimension(o.refit.per_dimension);
    h->set_fit_offset(o.refit.fit_offset_variance);
    h->set_fit_mean(o.refit.fit_prior_mean);
    h->set_fit_linear(o.refit.fit_linear_variance);
    h->set_fit_user_variance(o.refit.fit_user_variance);
    h->set_fit_community_variance(o.refit.fit_community_variance);
    h->set_first_fit(static_cast<uint32_t>(o.refit.first_fit));
    h->set_growth(o.refit.growth);
    h->set_max_interval(static_cast<uint32_t>(o.refit.max_interval));
    h->set_max_points(static_cast<uint32_t>(o.refit.max_points));
    h->set_max_evaluations(static_cast<uint32_t>(o.refit.max_evaluations));
    h->set_min_change(o.refit.min_change);
    h->set_min_gain_per_parameter(o.refit.min_gain_per_parameter);
    h->set_kors_mu_factor(o.refit.kors_mu_factor);
    h->set_min_seconds_between_fits(o.refit.min_seconds_between);
    h->set_fit_cpu_share(o.refit.cpu_share);
  }
  c.mutable_graph()->set_edge_list_file(o.edge_list_file);
  c.mutable_graph()->set_user_kernel(ToProto(kUserKernels, o.user_kernel));
  c.mutable_graph()->set_heat_tau(o.heat_tau);
  c.mutable_graph()->set_spectral_dims(o.spectral_dims);
  c.mutable_graph()->set_community_dims(static_cast<uint32_t>(o.community_dims));
  c.mutable_nystrom()->set_max_history(o.max_history);
  c.mutable_nystrom()->set_forget_evicted(o.forget_evicted);
  c.mutable_nystrom()->set_coarsen_when_full(o.coarsen_full_dictionary);
  c.mutable_nystrom()->set_max_learn_batch(static_cast<uint32_t>(o.max_learn_batch));
  c.mutable_nystrom()->set_double_precision_scoring(!o.single_precision_scoring);
  c.mutable_nystrom()->set_max_learn_delay_ms(
      o.max_learn_delay > absl::ZeroDuration()
          ? static_cast<int32_t>(
                std::min<int64_t>(absl::ToInt64Milliseconds(o.max_learn_delay), INT32_MAX))
          : -1);
  c.mutable_linear()->set_lambda(o.linear_lambda);
  c.mutable_linear()->set_intercept(o.linear_intercept);
  {
    v1::ConfidenceBoundConfig* b = c.mutable_confidence_bound();
    b->set_bound(ToProto(kBounds, o.confidence.bound));
    b->set_noise_std(o.confidence.noise_std);
    b->set_norm_bound(o.confidence.norm_bound);
    b->set_delta(o.confidence.delta);
    b->set_mixture(o.confidence.mixture);
    b->set_igp_eta(o.confidence.igp_eta);
  }
  c.mutable_semi_parametric()->set_propensity_rule(ToProto(kPropensityRules, o.propensity_rule));
  c.mutable_semi_parametric()->set_propensity_draws(static_cast<uint32_t>(o.propensity_draws));
  c.mutable_batched()->set_threshold(o.batched_threshold);
  c.mutable_batched()->set_oversampling(o.batched_oversampling);
  if (!fits || !o.refit.fit_noise_variance) c.set_ridge(o.ridge);
  c.set_exploration(o.exploration);
  c.set_baseline_half_life(o.baseline_half_life);
  c.mutable_evaluation()->set_epsilon(o.evaluation_epsilon);
  c.mutable_evaluation()->set_explain_names_users(o.explain_names_users);
  c.mutable_apprentice()->set_start(o.apprentice_start);
  c.set_shadow_of(o.shadow_of);
  c.mutable_apprentice()->set_margin(o.apprentice.margin);
  c.mutable_apprentice()->set_min_decisions(
      static_cast<uint32_t>(std::min<int64_t>(o.apprentice.min_decisions, UINT32_MAX)));
  c.set_exploration_width(ToProto(kExplorationWidths, o.exploration_width));
  if (o.exploration_width == ExplorationWidth::kGpUcbTheorem ||
      o.exploration_width == ExplorationWidth::kBayesUcb) {
    v1::IndexScheduleConfig* s = c.mutable_index_schedule();
    s->set_arm_count(o.index_schedule.arm_count);
    s->set_omega(o.index_schedule.omega);
    s->set_xi(o.index_schedule.xi);
    s->set_inverse_t_level(o.index_schedule.inverse_t_level);
  }
  if (o.kernel_policy()) c.set_prior_mean(o.prior_mean);
  // kors_mu follows the (fitted) ridge unless it was set.
  if (o.kors_mu > 0.0 || !fits || !o.refit.fit_noise_variance) {
    c.mutable_nystrom()->set_kors_mu(o.effective_kors_mu());
  }
  c.mutable_nystrom()->set_kors_epsilon(o.kors_epsilon);
  c.mutable_nystrom()->set_kors_gamma(o.kors_gamma);
  c.mutable_nystrom()->set_max_dictionary_size(o.max_dictionary_size);
  c.mutable_exact_gp()->set_max_observations(o.exact_max_observations);
  c.set_context_dim(o.context_dim);
  c.set_arm_feature_dim(o.arm_dim);
  c.set_seed(o.seed);
  c.mutable_limits()->set_max_candidates(o.max_candidates);
  c.mutable_limits()->set_max_feature_dim(o.max_feature_dim);
  c.mutable_limits()->set_max_users(o.max_users);
  c.mutable_limits()->set_reward_bound(o.reward_bound);
  c.mutable_limits()->set_max_graph_edits_per_call(o.max_graph_edits_per_call);
  c.mutable_ledger()->set_reward_window_seconds(
      static_cast<uint32_t>(absl::ToInt64Seconds(o.reward_window)));
  c.mutable_ledger()->set_max_decisions(static_cast<uint32_t>(o.max_decisions));
  c.mutable_ledger()->set_aggregation(ToProto(kAggregations, o.aggregation));
  if (o.default_reward.has_value()) c.mutable_ledger()->set_default_reward(*o.default_reward);
  c.mutable_ledger()->set_max_tombstones(static_cast<uint32_t>(o.effective_max_tombstones()));
  if (o.features.configured) {
    v1::FeatureConfig* f = c.mutable_features();
    f->set_context_slots(static_cast<uint32_t>(o.features.context_slots));
    f->set_arm_slots(static_cast<uint32_t>(o.features.arm_slots));
    f->set_declared_only(o.features.declared_only);
    f->mutable_limits()->set_max_namespaces(
        static_cast<uint32_t>(o.features.limits.max_namespaces));
    f->mutable_limits()->set_max_values(static_cast<uint32_t>(o.features.limits.max_values));
    f->mutable_limits()->set_max_name_bytes(
        static_cast<uint32_t>(o.features.limits.max_name_bytes));
    f->mutable_limits()->set_max_value_bytes(
        static_cast<uint32_t>(o.features.limits.max_value_bytes));
    f->set_max_listed_features(static_cast<uint32_t>(o.features.max_listed_features));
    f->clear_declared();
    for (const ModelOptions::DeclaredFeature& d : o.features.declared) {
      v1::DeclaredFeature* out = f->add_declared();
      out->set_side(ToProto(kFeatureSides, d.context));
      out->set_namespace_(d.name_space);
      out->set_name(d.name);
      out->set_kind(ToProto(kFeatureKinds, d.kind));
    }
  }
  return c;
}

}  // namespace graphbandit::config
