#include "server/config.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace graphbandit::server {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    errors.push_back(absl::StrFormat("line %d column %d: %s", line + 1, column + 1, message));
  }
  void AddWarning(int line, int column, const std::string& message) override {
    AddError(line, column, message);
  }
  std::vector<std::string> errors;
};

template <typename T>
T Or(T value, T fallback) {
  return value != T{} ? value : fallback;
}

}  // namespace

absl::StatusOr<v1::ServerConfig> ParseServerConfig(const std::string& text,
                                                   const std::string& source_name) {
  v1::ServerConfig config;
  CollectErrors errors;
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &config)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %s", source_name, absl::StrJoin(errors.errors, "; ")));
  }
  return config;
}

absl::StatusOr<v1::ServerConfig> ReadServerConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open config file \"%s\"", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseServerConfig(buffer.str(), path);
}

absl::StatusOr<ModelOptions> ToModelOptions(const v1::ModelConfig& c) {
  const ModelOptions d;  // defaults
  ModelOptions o;
  o.name = c.name();
  switch (c.policy()) {
    case v1::POLICY_UNSPECIFIED:
    case v1::EK_UCB:
      o.policy = PolicyKind::kEkUcb;
      break;
    case v1::EK_TS:
      o.policy = PolicyKind::kEkTs;
      break;
    case v1::GP_UCB:
      o.policy = PolicyKind::kGpUcb;
      break;
    case v1::GP_TS:
      o.policy = PolicyKind::kGpTs;
      break;
    case v1::LINUCB_PER_USER:
      o.policy = PolicyKind::kLinUcbPerUser;
      break;
    case v1::LINUCB_POOLED:
      o.policy = PolicyKind::kLinUcbPooled;
      break;
    case v1::GRAPH_UCB:
      o.policy = PolicyKind::kGraphUcb;
      break;
    case v1::GOB_LIN:
      o.policy = PolicyKind::kGobLin;
      break;
    case v1::BATCHED_NYSTROM_UCB:
      o.policy = PolicyKind::kBatchedNystromUcb;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat("model \"%s\": unknown policy %d", o.name, c.policy()));
  }
  switch (c.arm_kernel().type()) {
    case v1::ArmKernelConfig::TYPE_UNSPECIFIED:
    case v1::ArmKernelConfig::RBF:
      o.kernel = KernelType::kRbf;
      break;
    case v1::ArmKernelConfig::MATERN32:
      o.kernel = KernelType::kMatern32;
      break;
    case v1::ArmKernelConfig::MATERN52:
      o.kernel = KernelType::kMatern52;
      break;
    case v1::ArmKernelConfig::LINEAR:
      o.kernel = KernelType::kLinear;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("model \"%s\": unknown arm kernel %d", o.name, c.arm_kernel().type()));
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
  o.refit.fit_linear_variance =
      h.has_fit_linear() ? h.fit_linear() : d.refit.fit_linear_variance;
  o.refit.fit_user_variance =
      h.has_fit_user_variance() ? h.fit_user_variance() : d.refit.fit_user_variance;
  o.refit.per_dimension = h.has_per_dimension() ? h.per_dimension() : d.refit.per_dimension;
  o.refit.first_fit = static_cast<int64_t>(
      Or<uint32_t>(h.first_fit(), static_cast<uint32_t>(d.refit.first_fit)));
  o.refit.growth = Or(h.growth(), d.refit.growth);
  o.refit.max_interval = static_cast<int64_t>(
      Or<uint32_t>(h.max_interval(), static_cast<uint32_t>(d.refit.max_interval)));
  o.refit.max_points =
      static_cast<int>(Or<uint32_t>(h.max_points(), static_cast<uint32_t>(d.refit.max_points)));
  o.refit.max_evaluations = static_cast<int>(
      Or<uint32_t>(h.max_evaluations(), static_cast<uint32_t>(d.refit.max_evaluations)));
  o.refit.min_change = h.has_min_change() ? h.min_change() : d.refit.min_change;
  o.refit.min_gain_per_parameter = h.has_min_gain_per_parameter()
                                       ? h.min_gain_per_parameter()
                                       : d.refit.min_gain_per_parameter;
  o.edge_list_file = c.graph().edge_list_file();
  switch (c.graph().user_kernel()) {
    case v1::GraphConfig::USER_KERNEL_UNSPECIFIED:
    case v1::GraphConfig::LAPLACIAN_INVERSE:
      o.user_kernel = UserKernelKind::kLaplacianInverse;
      break;
    case v1::GraphConfig::HEAT:
      o.user_kernel = UserKernelKind::kHeat;
      break;
    case v1::GraphConfig::SPECTRAL_RBF:
      o.user_kernel = UserKernelKind::kSpectralRbf;
      break;
    case v1::GraphConfig::ALL_ONES:
      o.user_kernel = UserKernelKind::kAllOnes;
      break;
    case v1::GraphConfig::IDENTITY:
      o.user_kernel = UserKernelKind::kIdentity;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": unknown user kernel %d", o.name, c.graph().user_kernel()));
  }
  o.heat_tau = Or(c.graph().heat_tau(), d.heat_tau);
  o.spectral_dims = static_cast<int>(Or<uint32_t>(c.graph().spectral_dims(), d.spectral_dims));
  o.linear_lambda = Or(c.linear().lambda(), d.linear_lambda);
  o.batched_threshold = Or(c.batched().threshold(), d.batched_threshold);
  o.batched_oversampling = Or(c.batched().oversampling(), d.batched_oversampling);
  o.ridge = Or(c.ridge(), d.ridge);
  o.exploration = c.has_exploration() ? c.exploration() : d.exploration;
  o.baseline_half_life =
      c.has_baseline_half_life() ? c.baseline_half_life() : d.baseline_half_life;
  switch (c.exploration_width()) {
    case v1::ModelConfig::EXPLORATION_WIDTH_UNSPECIFIED:
      o.exploration_width = d.exploration_width;
      break;
    case v1::ModelConfig::STDDEV:
      o.exploration_width = ExplorationWidth::kStddev;
      break;
    case v1::ModelConfig::AMM:
      o.exploration_width = ExplorationWidth::kAmm;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": unknown exploration_width %d", o.name, c.exploration_width()));
  }
  o.kors_mu = c.nystrom().kors_mu();  // 0 means "the ridge"
  o.kors_epsilon = Or(c.nystrom().kors_epsilon(), d.kors_epsilon);
  o.kors_gamma = Or(c.nystrom().kors_gamma(), d.kors_gamma);
  o.max_dictionary_size = static_cast<int>(Or<uint32_t>(c.nystrom().max_dictionary_size(),
                                                        d.max_dictionary_size));
  o.max_history = static_cast<int64_t>(c.nystrom().max_history());
  o.forget_evicted = c.nystrom().forget_evicted();
  o.coarsen_full_dictionary = c.nystrom().coarsen_when_full();
  o.exact_max_observations =
      static_cast<int>(Or<uint32_t>(c.exact_gp().max_observations(), d.exact_max_observations));
  o.context_dim = static_cast<int>(c.context_dim());
  o.arm_dim = static_cast<int>(c.arm_feature_dim());
  o.seed = Or<uint64_t>(c.seed(), d.seed);
  o.max_candidates =
      static_cast<int>(Or<uint32_t>(c.limits().max_candidates(), d.max_candidates));
  o.max_feature_dim =
      static_cast<int>(Or<uint32_t>(c.limits().max_feature_dim(), d.max_feature_dim));
  o.max_users = static_cast<int64_t>(Or<uint64_t>(c.limits().max_users(), d.max_users));
  o.reward_bound = Or(c.limits().reward_bound(), d.reward_bound);
  o.max_graph_edits_per_call = static_cast<int>(
      Or<uint32_t>(c.limits().max_graph_edits_per_call(), d.max_graph_edits_per_call));
  o.reward_window = c.ledger().reward_window_seconds() > 0
                        ? absl::Seconds(c.ledger().reward_window_seconds())
                        : d.reward_window;
  o.max_decisions = static_cast<int64_t>(Or<uint32_t>(c.ledger().max_decisions(),
                                                      static_cast<uint32_t>(d.max_decisions)));
  switch (c.ledger().aggregation()) {
    case v1::AGGREGATION_UNSPECIFIED:
    case v1::FIRST:
      o.aggregation = Aggregation::kFirst;
      break;
    case v1::SUM:
      o.aggregation = Aggregation::kSum;
      break;
    case v1::MAX:
      o.aggregation = Aggregation::kMax;
      break;
    case v1::LAST:
      o.aggregation = Aggregation::kLast;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrFormat(
          "model \"%s\": unknown ledger.aggregation %d", o.name, c.ledger().aggregation()));
  }
  if (c.ledger().has_default_reward()) o.default_reward = c.ledger().default_reward();
  o.max_tombstones = static_cast<int64_t>(c.ledger().max_tombstones());
  if (absl::Status s = ValidateModelOptions(o); !s.ok()) return s;
  return o;
}

v1::ModelConfig ToModelConfig(const ModelOptions& o) {
  v1::ModelConfig c;
  c.set_name(o.name);
  switch (o.policy) {
    case PolicyKind::kEkUcb:
      c.set_policy(v1::EK_UCB);
      break;
    case PolicyKind::kEkTs:
      c.set_policy(v1::EK_TS);
      break;
    case PolicyKind::kGpUcb:
      c.set_policy(v1::GP_UCB);
      break;
    case PolicyKind::kGpTs:
      c.set_policy(v1::GP_TS);
      break;
    case PolicyKind::kLinUcbPerUser:
      c.set_policy(v1::LINUCB_PER_USER);
      break;
    case PolicyKind::kLinUcbPooled:
      c.set_policy(v1::LINUCB_POOLED);
      break;
    case PolicyKind::kGraphUcb:
      c.set_policy(v1::GRAPH_UCB);
      break;
    case PolicyKind::kGobLin:
      c.set_policy(v1::GOB_LIN);
      break;
    case PolicyKind::kBatchedNystromUcb:
      c.set_policy(v1::BATCHED_NYSTROM_UCB);
      break;
  }
  auto* kernel = c.mutable_arm_kernel();
  switch (o.kernel) {
    case KernelType::kRbf:
      kernel->set_type(v1::ArmKernelConfig::RBF);
      break;
    case KernelType::kMatern32:
      kernel->set_type(v1::ArmKernelConfig::MATERN32);
      break;
    case KernelType::kMatern52:
      kernel->set_type(v1::ArmKernelConfig::MATERN52);
      break;
    case KernelType::kLinear:
      kernel->set_type(v1::ArmKernelConfig::LINEAR);
      break;
  }
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
    h->set_first_fit(static_cast<uint32_t>(o.refit.first_fit));
    h->set_growth(o.refit.growth);
    h->set_max_interval(static_cast<uint32_t>(o.refit.max_interval));
    h->set_max_points(static_cast<uint32_t>(o.refit.max_points));
    h->set_max_evaluations(static_cast<uint32_t>(o.refit.max_evaluations));
    h->set_min_change(o.refit.min_change);
    h->set_min_gain_per_parameter(o.refit.min_gain_per_parameter);
  }
  c.mutable_graph()->set_edge_list_file(o.edge_list_file);
  switch (o.user_kernel) {
    case UserKernelKind::kLaplacianInverse:
      c.mutable_graph()->set_user_kernel(v1::GraphConfig::LAPLACIAN_INVERSE);
      break;
    case UserKernelKind::kHeat:
      c.mutable_graph()->set_user_kernel(v1::GraphConfig::HEAT);
      break;
    case UserKernelKind::kSpectralRbf:
      c.mutable_graph()->set_user_kernel(v1::GraphConfig::SPECTRAL_RBF);
      break;
    case UserKernelKind::kAllOnes:
      c.mutable_graph()->set_user_kernel(v1::GraphConfig::ALL_ONES);
      break;
    case UserKernelKind::kIdentity:
      c.mutable_graph()->set_user_kernel(v1::GraphConfig::IDENTITY);
      break;
  }
  c.mutable_graph()->set_heat_tau(o.heat_tau);
  c.mutable_graph()->set_spectral_dims(o.spectral_dims);
  c.mutable_nystrom()->set_max_history(o.max_history);
  c.mutable_nystrom()->set_forget_evicted(o.forget_evicted);
  c.mutable_nystrom()->set_coarsen_when_full(o.coarsen_full_dictionary);
  c.mutable_linear()->set_lambda(o.linear_lambda);
  c.mutable_batched()->set_threshold(o.batched_threshold);
  c.mutable_batched()->set_oversampling(o.batched_oversampling);
  if (!fits || !o.refit.fit_noise_variance) c.set_ridge(o.ridge);
  c.set_exploration(o.exploration);
  c.set_baseline_half_life(o.baseline_half_life);
  c.set_exploration_width(o.exploration_width == ExplorationWidth::kAmm ? v1::ModelConfig::AMM
                                                                         : v1::ModelConfig::STDDEV);
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
  switch (o.aggregation) {
    case Aggregation::kFirst:
      c.mutable_ledger()->set_aggregation(v1::FIRST);
      break;
    case Aggregation::kSum:
      c.mutable_ledger()->set_aggregation(v1::SUM);
      break;
    case Aggregation::kMax:
      c.mutable_ledger()->set_aggregation(v1::MAX);
      break;
    case Aggregation::kLast:
      c.mutable_ledger()->set_aggregation(v1::LAST);
      break;
  }
  if (o.default_reward.has_value()) c.mutable_ledger()->set_default_reward(*o.default_reward);
  c.mutable_ledger()->set_max_tombstones(static_cast<uint32_t>(o.effective_max_tombstones()));
  return c;
}

absl::StatusOr<EngineOptions> ToEngineOptions(const v1::ServerConfig& config,
                                              const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  options.default_model = config.default_model().empty() ? "default" : config.default_model();
  for (int i = 0; i < config.models_size(); ++i) {
    if (config.models(i).name().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("models[%d].name is required", i));
    }
    absl::StatusOr<ModelOptions> model = ToModelOptions(config.models(i));
    if (!model.ok()) return model.status();
    options.models.push_back(*std::move(model));
  }
  const v1::DurabilityConfig& d = config.durability();
  switch (d.sync()) {
    case v1::DurabilityConfig::SYNC_UNSPECIFIED:
    case v1::DurabilityConfig::EVERY_RECORD:
      options.durability.sync = Durability::Sync::kEveryRecord;
      break;
    case v1::DurabilityConfig::GROUP_COMMIT:
      options.durability.sync = Durability::Sync::kGroupCommit;
      break;
    case v1::DurabilityConfig::OS:
      options.durability.sync = Durability::Sync::kOs;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown durability.sync %d", static_cast<int>(d.sync())));
  }
  if (d.group_commit_interval_ms() > 1000) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "durability.group_commit_interval_ms is %d; it must be 1..1000", d.group_commit_interval_ms()));
  }
  if (d.group_commit_interval_ms() > 0) {
    options.durability.group_commit_interval = absl::Milliseconds(d.group_commit_interval_ms());
  }
  if (d.has_snapshot_every_records()) {
    if (d.snapshot_every_records() > static_cast<uint64_t>(INT64_MAX)) {
      return absl::InvalidArgumentError("durability.snapshot_every_records is too large");
    }
    options.durability.snapshot_every_records = static_cast<int64_t>(d.snapshot_every_records());
  }
  return options;
}

}  // namespace graphbandit::server
