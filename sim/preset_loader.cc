#include "sim/preset_loader.h"

#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "core/learner/batched_nystrom_posterior.h"
#include "core/learner/linear_posterior.h"
#include "core/learner/nystrom_posterior.h"
#include "google/protobuf/descriptor.h"
#include "proto/model_config.h"
#include "proto/model_enums.h"
#include "proto/text_format.h"
#include "sim/lastfm_environment.h"
#include "sim/mm_environment.h"
#include "sim/navigation.h"
#include "sim/preset.pb.h"
#include "sim/preset_analyses.h"
#include "sim/preset_loader_internal.h"
#include "sim/robustness.h"
#include "sim/sg_environment.h"
#include "sim/task_environment.h"

namespace graphbandit::sim {
namespace {

namespace pb = ::graphbandit::sim::v1;
namespace cfg = ::graphbandit::v1;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// ---- Sweeps ---------------------------------------------------------------------------------

// A singular numeric field and the message that holds it (mutable when asked for).
struct FieldRef {
  const Message* holder;
  Message* mutable_holder;  // null unless asked for
  const FieldDescriptor* field;
};

// The singular numeric field at `path` ("exploration", "served.exploration") of `message`,
// creating the messages on the way when `mutable_message` (which is `message`) is given.
absl::StatusOr<FieldRef> NumericField(const Message& message, Message* mutable_message,
                                      const std::string& path) {
  const Message* m = &message;
  Message* mm = mutable_message;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const FieldDescriptor* field = m->GetDescriptor()->FindFieldByName(parts[i]);
    if (field == nullptr || field->is_repeated()) break;
    if (i + 1 < parts.size()) {
      if (field->type() != FieldDescriptor::TYPE_MESSAGE) break;
      if (mm != nullptr) mm = mm->GetReflection()->MutableMessage(mm, field);
      m = mm != nullptr ? mm : &m->GetReflection()->GetMessage(*m, field);
      continue;
    }
    const FieldDescriptor::CppType type = field->cpp_type();
    if (type != FieldDescriptor::CPPTYPE_DOUBLE && type != FieldDescriptor::CPPTYPE_INT32 &&
        type != FieldDescriptor::CPPTYPE_INT64 && type != FieldDescriptor::CPPTYPE_UINT32 &&
        type != FieldDescriptor::CPPTYPE_UINT64) {
      break;
    }
    return FieldRef{m, mm, field};
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("\"%s\" is not a numeric field of Policy", absl::CEscape(path)));
}

absl::Status SetNumeric(pb::Policy* policy, const std::string& path, double value) {
  auto field = NumericField(*policy, policy, path);
  if (!field.ok()) return field.status();
  Message* message = field->mutable_holder;
  const FieldDescriptor* descriptor = field->field;
  const Reflection* reflection = message->GetReflection();
  if (descriptor->cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE) {
    reflection->SetDouble(message, descriptor, value);
  } else if (value != std::floor(value) || std::abs(value) > 1e15) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is an integer field: %g is not an integer", path, value));
  } else if (descriptor->cpp_type() == FieldDescriptor::CPPTYPE_INT32) {
    reflection->SetInt32(message, descriptor, static_cast<int32_t>(value));
  } else if (descriptor->cpp_type() == FieldDescriptor::CPPTYPE_INT64) {
    reflection->SetInt64(message, descriptor, static_cast<int64_t>(value));
  } else if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s is an unsigned field: %g is negative", path, value));
  } else if (descriptor->cpp_type() == FieldDescriptor::CPPTYPE_UINT32) {
    if (value > 4294967295.0) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %g is out of range", path, value));
    }
    reflection->SetUInt32(message, descriptor, static_cast<uint32_t>(value));
  } else {
    reflection->SetUInt64(message, descriptor, static_cast<uint64_t>(value));
  }
  return absl::OkStatus();
}

// The name with every "{field}" replaced by the field's value (%g).
absl::StatusOr<std::string> ExpandName(const pb::Policy& policy) {
  std::string name;
  absl::string_view rest = policy.name();
  while (true) {
    const size_t open = rest.find('{');
    if (open == absl::string_view::npos) break;
    const size_t close = rest.find('}', open);
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError("an unclosed '{' in the policy name");
    }
    const std::string path(rest.substr(open + 1, close - open - 1));
    auto field = NumericField(policy, nullptr, path);
    if (!field.ok()) return field.status();
    const FieldDescriptor* descriptor = field->field;
    const Message* holder = field->holder;
    const Reflection* reflection = holder->GetReflection();
    if (descriptor->has_presence() && !reflection->HasField(*holder, descriptor)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the name uses {%s}, which is not set", path));
    }
    double value = 0;
    switch (descriptor->cpp_type()) {
      case FieldDescriptor::CPPTYPE_DOUBLE:
        value = reflection->GetDouble(*holder, descriptor);
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        value = reflection->GetInt32(*holder, descriptor);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        value = reflection->GetUInt32(*holder, descriptor);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        value = static_cast<double>(reflection->GetUInt64(*holder, descriptor));
        break;
      default:
        value = static_cast<double>(reflection->GetInt64(*holder, descriptor));
        break;
    }
    absl::StrAppend(&name, rest.substr(0, open), absl::StrFormat("%g", value));
    rest.remove_prefix(close + 1);
  }
  absl::StrAppend(&name, rest);
  return name;
}

// Appends the policies of `entry` with `bindings` (parameter, value) applied, in order.
absl::Status Expand(const pb::PolicyEntry& entry,
                    const std::vector<std::pair<std::string, double>>& bindings,
                    std::vector<pb::Policy>* out) {
  if (entry.has_policy()) {
    pb::Policy policy = entry.policy();
    for (const auto& [path, value] : bindings) {
      absl::Status status = SetNumeric(&policy, path, value);
      if (!status.ok()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "policy \"%s\": sweep: %s", absl::CEscape(policy.name()), status.message()));
      }
    }
    out->push_back(std::move(policy));
    return absl::OkStatus();
  }
  if (!entry.has_sweep()) {
    return absl::InvalidArgumentError("a policy entry sets neither policy nor sweep");
  }
  const pb::PolicySweep& sweep = entry.sweep();
  if (sweep.value().empty() || sweep.entry().empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the sweep over \"%s\" needs at least one value and one entry",
                        absl::CEscape(sweep.parameter())));
  }
  for (double value : sweep.value()) {
    std::vector<std::pair<std::string, double>> inner = bindings;
    inner.emplace_back(sweep.parameter(), value);
    for (const pb::PolicyEntry& e : sweep.entry()) {
      absl::Status status = Expand(e, inner, out);
      if (!status.ok()) return status;
    }
  }
  return absl::OkStatus();
}

// ---- Policies -------------------------------------------------------------------------------

// The fields each family may set (name and family: every family).
const std::set<std::string>& AllowedFields(pb::Policy::Family family) {
  static const auto* allowed = [] {
    const std::set<std::string> learner = {"rule",
                                           "exploration",
                                           "user_kernel",
                                           "rho",
                                           "pooled",
                                           "arm_lengthscale",
                                           "context_lengthscale",
                                           "width",
                                           "arm_count",
                                           "omega",
                                           "xi",
                                           "inverse_t_level"};
    auto with = [&learner](std::set<std::string> more) {
      more.insert(learner.begin(), learner.end());
      return more;
    };
    auto* m = new std::map<pb::Policy::Family, std::set<std::string>>;
    (*m)[pb::Policy::LK_GP] = with({"ek_beta", "lambda_base", "grid", "ridge"});
    (*m)[pb::Policy::EK] = with({"ek_beta", "ridge", "ridge_from_lambda_base", "kors_mu",
                                 "kors_gamma", "kors_gamma_per_ridge", "max_dictionary_size",
                                 "max_history", "forget_evicted", "prior_mean"});
    (*m)[pb::Policy::BATCHED] = with({"ek_beta", "ridge", "threshold", "oversampling_per_ridge"});
    // Linear models use no user kernel: linear_rho is their graph regulariser.
    (*m)[pb::Policy::LINEAR] = {
        "rule",      "exploration", "pooled",        "arm_lengthscale", "context_lengthscale",
        "intercept", "prior",       "linear_lambda", "linear_rho"};
    (*m)[pb::Policy::SEMI_PARAMETRIC] = {"exploration",      "pooled",    "intercept",
                                         "linear_lambda",    "semi",      "propensity",
                                         "propensity_draws", "code_gamma"};
    (*m)[pb::Policy::KERNEL_UCB] = {"exploration", "bound", "noise_std", "norm_bound", "delta"};
    (*m)[pb::Policy::ROUTE] = {"rule", "exploration",     "width",       "omega",
                               "xi",   "inverse_t_level", "independent", "rectify_with_posterior"};
    (*m)[pb::Policy::RANDOM] = {};
    (*m)[pb::Policy::SERVED] = {"served"};
    return m;
  }();
  static const std::set<std::string> none;
  auto it = allowed->find(family);
  return it == allowed->end() ? none : it->second;
}

absl::StatusOr<PolicySpec> ToPolicySpec(const pb::Policy& p) {
  PolicySpec spec;
  auto name = ExpandName(p);
  if (!name.ok()) return name.status();
  spec.name = *name;
  if (spec.name.empty()) return absl::InvalidArgumentError("a policy has no name");
  const std::set<std::string>& allowed = AllowedFields(p.family());
  std::vector<const FieldDescriptor*> fields;
  p.GetReflection()->ListFields(p, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->name() == "name" || field->name() == "family" || allowed.count(field->name())) {
      continue;
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "field %s is not used by family %s", field->name(),
        pb::Policy::Family_Name(p.family()).empty() ? "FAMILY_UNSPECIFIED"
                                                    : pb::Policy::Family_Name(p.family())));
  }
  if (p.family() == pb::Policy::SERVED) {
    // The server's own mapping from its configuration (proto/model_config.h).
    ::graphbandit::v1::ModelConfig served = p.served();
    if (served.name().empty()) served.set_name("simulated");
    auto options = config::ToModelOptions(served);
    if (!options.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("served: ", options.status().message()));
    }
    if (!options->servable()) return absl::InvalidArgumentError("served: not a served policy");
    spec.model = *std::move(options);
    return spec;
  }
  // The papers' algorithms as published: options that differ from a served model's defaults
  // where the papers' runs do (no fits, no baseline tracker, exploration 1, the paper's
  // dictionary growth and re-draws), and the run's shared random stream.
  ModelOptions& o = spec.model;
  o.exploration = 1.0;
  o.baseline_half_life = 0.0;
  o.linear_intercept = false;  // the `intercept` field says whether a baseline has one
  o.refit.enabled = false;
  o.research.growth_batch_divisor = 0;
  o.research.spread_growth_scan = false;
  o.research.batched_min_growth = 0.0;
  o.research.batched_bounded = false;
  spec.run_stream = true;
  const bool thompson = p.rule() == pb::Policy::THOMPSON;
  if (p.has_exploration()) o.exploration = p.exploration();
  if (absl::Status s =
          config::FromProto(config::kUserKernels, p.user_kernel(),
                            UserKernelKind::kLaplacianInverse, "user_kernel", &o.user_kernel);
      !s.ok()) {
    return s;
  }
  if (p.has_rho()) o.rho = p.rho();
  spec.pooled = p.pooled();
  spec.intercept = p.intercept();
  if (p.has_arm_lengthscale() && p.arm_lengthscale() > 0.0) {
    o.arm_lengthscale = p.arm_lengthscale();
  } else {
    spec.median_arm_lengthscale = true;
  }
  if (p.has_context_lengthscale()) o.context_lengthscale = p.context_lengthscale();
  if ((p.has_ek_beta() || p.has_kors_gamma_per_ridge() || p.has_oversampling_per_ridge()) &&
      !p.has_ridge()) {
    return absl::InvalidArgumentError(
        "ek_beta, kors_gamma_per_ridge and oversampling_per_ridge need ridge");
  }
  if (p.has_ek_beta()) {
    if (p.has_exploration()) return absl::InvalidArgumentError("sets both exploration and ek_beta");
    o.exploration = p.ek_beta() / std::sqrt(p.ridge());
  }
  if (p.has_kors_gamma() && p.has_kors_gamma_per_ridge()) {
    return absl::InvalidArgumentError("sets both kors_gamma and kors_gamma_per_ridge");
  }
  if (thompson && p.family() != pb::Policy::LK_GP && p.family() != pb::Policy::EK &&
      p.family() != pb::Policy::ROUTE) {
    return absl::InvalidArgumentError("rule THOMPSON needs family LK_GP, EK or ROUTE");
  }
  // The combinatorial GP paper's schedules.
  IndexSchedule& schedule = o.index_schedule;
  if (p.has_arm_count()) schedule.arm_count = p.arm_count();
  if (p.has_omega()) schedule.omega = p.omega();
  if (p.has_xi()) schedule.xi = p.xi();
  schedule.inverse_t_level = p.inverse_t_level();
  if (absl::Status s = config::FromProto(config::kExplorationWidths, p.width(), o.exploration_width,
                                         "width", &o.exploration_width);
      !s.ok()) {
    return s;
  }
  if (p.has_prior_mean()) o.prior_mean = p.prior_mean();
  switch (p.family()) {
    case pb::Policy::LK_GP: {
      o.policy = thompson ? PolicyKind::kLkGpTs : PolicyKind::kLkGpUcb;
      LkGpOptions& lk = o.research.lk;
      if (p.has_lambda_base()) {
        lk.schedule = true;
        lk.lambda_base = p.lambda_base();
      }
      lk.grid = p.grid();
      if (p.has_ridge()) lk.ridge = p.ridge();
      o.ridge = lk.ridge;
      break;
    }
    case pb::Policy::EK: {
      o.policy = thompson ? PolicyKind::kEkTs : PolicyKind::kEkUcb;
      // The EK paper's settings (core/learner/nystrom_posterior.h's defaults).
      const NystromOptions paper;
      o.ridge = p.has_ridge() ? p.ridge() : paper.ridge;
      o.kors_mu = p.has_kors_mu() ? p.kors_mu() : paper.kors_mu;
      o.kors_epsilon = paper.kors_epsilon;
      o.kors_gamma = p.has_kors_gamma()             ? p.kors_gamma()
                     : p.has_kors_gamma_per_ridge() ? p.kors_gamma_per_ridge() * p.ridge()
                                                    : paper.kors_gamma;
      o.max_dictionary_size =
          p.has_max_dictionary_size() ? p.max_dictionary_size() : paper.max_dictionary_size;
      o.max_history = p.has_max_history() ? p.max_history() : paper.max_history;
      o.forget_evicted = p.forget_evicted();
      if (p.has_ridge_from_lambda_base()) spec.ridge_from_lambda_base = p.ridge_from_lambda_base();
      break;
    }
    case pb::Policy::BATCHED: {
      o.policy = PolicyKind::kBatchedNystromUcb;
      const BatchedNystromOptions paper;
      o.ridge = p.has_ridge() ? p.ridge() : paper.ridge;
      o.batched_threshold = p.has_threshold() ? p.threshold() : paper.threshold;
      o.batched_oversampling = p.has_oversampling_per_ridge()
                                   ? p.oversampling_per_ridge() * p.ridge()
                                   : paper.oversampling;
      break;
    }
    case pb::Policy::LINEAR: {
      switch (p.prior()) {
        case pb::Policy::PER_USER:
          o.policy = PolicyKind::kLinUcbPerUser;
          break;
        case pb::Policy::POOLED:
          o.policy = PolicyKind::kLinUcbPooled;
          break;
        case pb::Policy::GRAPH:
          o.policy = PolicyKind::kGraphUcb;
          break;
        default:
          return absl::InvalidArgumentError("prior must be PER_USER, POOLED or GRAPH");
      }
      // A linear model's graph regulariser is the model's rho (the user kernel is not used).
      const LinearOptions paper;
      o.linear_lambda = p.has_linear_lambda() ? p.linear_lambda() : paper.lambda;
      o.rho = p.has_linear_rho() ? p.linear_rho() : paper.rho;
      break;
    }
    case pb::Policy::SEMI_PARAMETRIC:
      o.policy = p.semi() == pb::Policy::SEMI_TS           ? PolicyKind::kSemiTs
                 : p.semi() == pb::Policy::LIN_TS          ? PolicyKind::kLinTs
                 : p.semi() == pb::Policy::GRAPH_UCB_LOCAL ? PolicyKind::kGraphUcbLocal
                                                           : PolicyKind::kSemiGraphTs;
      if (o.policy == PolicyKind::kGraphUcbLocal &&
          (p.has_propensity_draws() || p.propensity() != 0 || p.code_gamma() || p.pooled())) {
        return absl::InvalidArgumentError(
            "semi GRAPH_UCB_LOCAL chooses by UCB on the graph: propensity, propensity_draws, "
            "code_gamma and pooled do not apply");
      }
      o.linear_lambda = p.has_linear_lambda() ? p.linear_lambda() : 1.0;
      if (absl::Status s =
              config::FromProto(config::kPropensityRules, p.propensity(),
                                PropensityRule::kMultinomial, "propensity", &o.propensity_rule);
          !s.ok()) {
        return s;
      }
      if (p.has_propensity_draws()) o.propensity_draws = p.propensity_draws();
      o.research.semi_code_gamma = p.code_gamma();
      spec.median_arm_lengthscale = false;  // linear: features as given
      break;
    case pb::Policy::KERNEL_UCB: {
      o.policy = PolicyKind::kGpUcb;
      o.user_kernel = UserKernelKind::kIdentity;
      spec.median_arm_lengthscale = false;
      spec.mm_paper_parameters = true;
      ConfidenceBoundOptions& c = o.confidence;
      if (absl::Status s = config::FromProto(config::kBounds, p.bound(), ConfidenceBound::kAmm,
                                             "bound", &c.bound);
          !s.ok()) {
        return s;
      }
      if (c.bound == ConfidenceBound::kTuned) {
        return absl::InvalidArgumentError(
            "KERNEL_UCB: bound TUNED is not a confidence bound; use AMM, DMM, AY_GP_UCB or "
            "IGP_UCB");
      }
      c.noise_std = p.has_noise_std() ? p.noise_std() : 0.1;
      c.norm_bound = p.has_norm_bound() ? p.norm_bound() : 10.0;
      c.delta = p.has_delta() ? p.delta() : 0.01;
      o.exact_max_observations = 1'000'000;
      break;
    }
    case pb::Policy::ROUTE: {
      RoutePolicy route;
      route.independent = p.independent();
      route.rule = thompson                                   ? IndexRule::kThompson
                   : p.width() == cfg::ModelConfig::BAYES_UCB ? IndexRule::kBayesUcb
                                                              : IndexRule::kUcb;
      if (p.width() == cfg::ModelConfig::STDDEV || p.width() == cfg::ModelConfig::AMM) {
        return absl::InvalidArgumentError("ROUTE: width is GP_UCB_THEOREM or BAYES_UCB");
      }
      if (!(std::isfinite(schedule.omega) && schedule.omega > 0.0) ||
          !(std::isfinite(schedule.xi) && schedule.xi > 0.0)) {
        return absl::InvalidArgumentError("ROUTE: omega and xi must be finite and > 0");
      }
      if (!(std::isfinite(o.exploration) && o.exploration >= 0.0)) {
        return absl::InvalidArgumentError("ROUTE: exploration must be finite and >= 0");
      }
      route.schedule = schedule;
      route.exploration = o.exploration;
      route.rectify_with_posterior = p.rectify_with_posterior();
      spec.route = route;
      break;
    }
    case pb::Policy::RANDOM:
      o.policy = PolicyKind::kRandom;
      break;
    default:
      return absl::InvalidArgumentError(
          "family must be LK_GP, EK, BATCHED, LINEAR, SEMI_PARAMETRIC, KERNEL_UCB, ROUTE, RANDOM "
          "or SERVED");
  }
  return spec;
}

absl::Status Invalid(const std::string& file_name, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(file_name, ": ", what));
}

}  // namespace

absl::StatusOr<Preset> ParsePreset(absl::string_view text, const std::string& file_name) {
  pb::Preset data;
  if (absl::Status parsed = ParseTextFormat(std::string(text), &data); !parsed.ok()) {
    return Invalid(file_name, std::string(parsed.message()));
  }
  Preset preset;
  preset.name = data.name();
  const std::string stem =
      absl::EndsWith(file_name, ".textproto")
          ? file_name.substr(0, file_name.size() - std::string(".textproto").size())
          : file_name;
  const size_t slash = stem.rfind('/');
  const std::string base = slash == std::string::npos ? stem : stem.substr(slash + 1);
  if (preset.name.empty()) return Invalid(file_name, "name is not set");
  if (preset.name != base) {
    return Invalid(file_name, absl::StrFormat("name \"%s\" differs from the file's name \"%s\"",
                                              absl::CEscape(preset.name), base));
  }
  preset.description = data.description();
  if (preset.description.empty()) return Invalid(file_name, "description is not set");

  std::set<std::string> labels;
  for (int i = 0; i < data.environment_size(); ++i) {
    auto env = internal::ToEnvironmentSpec(data.environment(i));
    if (!env.ok()) {
      return Invalid(file_name,
                     absl::StrFormat("environment %d: %s", i + 1, env.status().message()));
    }
    if (!labels.insert(env->label).second) {
      return Invalid(file_name,
                     absl::StrFormat("two environments are labelled \"%s\"", env->label));
    }
    preset.environments.push_back(*std::move(env));
  }
  if (preset.environments.empty()) return Invalid(file_name, "no environment");

  std::vector<pb::Policy> policies;
  for (const pb::PolicyEntry& entry : data.policy()) {
    absl::Status status = Expand(entry, {}, &policies);
    if (!status.ok()) return Invalid(file_name, std::string(status.message()));
  }
  std::set<std::string> names;
  for (const pb::Policy& policy : policies) {
    auto spec = ToPolicySpec(policy);
    if (!spec.ok()) {
      return Invalid(file_name, absl::StrFormat("policy \"%s\": %s", absl::CEscape(policy.name()),
                                                spec.status().message()));
    }
    if (!names.insert(spec->name).second) {
      return Invalid(file_name, absl::StrFormat("two policies are named \"%s\"", spec->name));
    }
    preset.policies.push_back(*std::move(spec));
  }
  if (preset.policies.empty()) return Invalid(file_name, "no policy");

  if (data.has_seeds()) preset.seeds = data.seeds();
  if (data.has_rounds()) preset.rounds = data.rounds();
  if (data.has_sample_points()) preset.sample_points = data.sample_points();
  if (data.has_timing_window()) preset.timing_window = data.timing_window();
  if (data.has_slate_size()) preset.slate_size = data.slate_size();
  if (preset.slate_size < 1) return Invalid(file_name, "slate_size must be at least 1");
  if (preset.seeds < 1 || preset.rounds < 1 || preset.sample_points < 1 ||
      preset.timing_window < 0) {
    return Invalid(file_name,
                   "seeds, rounds and sample_points must be positive, timing_window "
                   "not negative");
  }
  for (const pb::Reference& r : data.reference()) {
    if (!labels.count(r.environment()) || !names.count(r.policy())) {
      return Invalid(
          file_name,
          absl::StrFormat(
              "the reference for (\"%s\", \"%s\") names no environment or policy of the preset",
              absl::CEscape(r.environment()), absl::CEscape(r.policy())));
    }
    if (r.has_se() == r.has_sd()) {
      return Invalid(file_name,
                     absl::StrFormat("the reference for (\"%s\", \"%s\") needs exactly one of se "
                                     "(a standard error) and sd (a standard deviation over runs)",
                                     absl::CEscape(r.environment()), absl::CEscape(r.policy())));
    }
    if (r.has_sd() != r.has_runs() || (r.has_runs() && r.runs() < 2) ||
        (r.has_se() ? r.se() : r.sd()) < 0) {
      return Invalid(file_name,
                     absl::StrFormat("the reference for (\"%s\", \"%s\"): sd goes with runs of "
                                     "at least 2, and a spread is not negative",
                                     absl::CEscape(r.environment()), absl::CEscape(r.policy())));
    }
    const Reference reference{r.mean(), r.has_se() ? r.se() : r.sd(), r.has_runs() ? r.runs() : 0};
    if (!preset.references.insert({{r.environment(), r.policy()}, reference}).second) {
      return Invalid(file_name, absl::StrFormat("two references for (\"%s\", \"%s\")",
                                                r.environment(), r.policy()));
    }
  }
  preset.dictionary_plot = data.dictionary_plot();
  preset.tradeoff_plot = data.tradeoff_plot();
  preset.frontier_plot = data.frontier_plot();
  if (!data.analysis().empty()) {
    const PresetAnalysis* analysis = FindPresetAnalysis(data.analysis());
    if (analysis == nullptr) {
      return Invalid(file_name, absl::StrFormat("unknown analysis \"%s\" (known: %s)",
                                                absl::CEscape(data.analysis()),
                                                absl::StrJoin(PresetAnalysisNames(), ", ")));
    }
    preset.analysis = *analysis;
  }
  return preset;
}

absl::StatusOr<std::vector<Preset>> LoadEmbeddedPresets() {
  std::vector<Preset> presets;
  std::set<std::string> names;
  for (const EmbeddedPresetFile& file : EmbeddedPresetFiles()) {
    auto preset = ParsePreset(file.text, file.name);
    if (!preset.ok()) return preset.status();
    if (!names.insert(preset->name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: a second preset named \"%s\"", file.name, preset->name));
    }
    presets.push_back(*std::move(preset));
  }
  return presets;
}

}  // namespace graphbandit::sim
