#include "server/services.h"

#include <chrono>
#include <climits>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/fit/refit.h"
#include "server/config.h"
#include "server/status_util.h"

namespace graphbandit::server {
namespace {

// A call whose deadline passed (or whose client went away) before we started is not worth
// starting: the answer could not be delivered.
bool Abandoned(grpc::ServerContextBase* context) { return context->IsCancelled(); }

// The client's deadline (InfiniteFuture when it set none).
absl::Time Deadline(const grpc::ServerContextBase* context) {
  const auto deadline = context->deadline();
  if (deadline >= std::chrono::system_clock::now() + std::chrono::hours(24 * 365 * 100)) {
    return absl::InfiniteFuture();
  }
  return absl::FromChrono(deadline);
}

// What every BanditService call checks first: the token, then that the client still waits.
grpc::Status Admit(const BearerToken& token, grpc::ServerContextBase* context) {
  if (grpc::Status denied = token.Check(*context); !denied.ok()) return denied;
  if (Abandoned(context)) return grpc::Status(grpc::StatusCode::CANCELLED, "call abandoned");
  return grpc::Status::OK;
}

// What every AdminService call on one model does first: checks the token and finds the model.
grpc::Status AdmitToModel(const BearerToken& token, const grpc::ServerContext& context,
                          Engine& engine, const std::string& name, Model** model) {
  if (grpc::Status denied = token.Check(context); !denied.ok()) return denied;
  absl::StatusOr<Model*> found = engine.FindModel(name);
  if (!found.ok()) return ToGrpcStatus(found.status());
  *model = *found;
  return grpc::Status::OK;
}

// Views of one context's or candidate's named features (valid while `in` lives); `field` names
// them in messages. INVALID_ARGUMENT for a feature without a value (the rest is checked by the
// model, core/features/named_features.h).
absl::Status ViewNamedFeatures(const google::protobuf::RepeatedPtrField<v1::FeatureNamespace>& in,
                               absl::string_view field, std::vector<FeatureNamespace>* out) {
  out->reserve(in.size());
  for (int n = 0; n < in.size(); ++n) {
    const v1::FeatureNamespace& ns = in[n];
    FeatureNamespace& view = out->emplace_back();
    view.name = ns.name();
    view.features.reserve(ns.features_size());
    for (int f = 0; f < ns.features_size(); ++f) {
      const v1::NamedFeature& feature = ns.features(f);
      const v1::FeatureValue& value = feature.value();
      switch (value.kind_case()) {
        case v1::FeatureValue::kNumber:
          view.features.push_back({feature.name(), FeatureValue::Number(value.number())});
          break;
        case v1::FeatureValue::kText:
          view.features.push_back({feature.name(), FeatureValue::String(value.text())});
          break;
        case v1::FeatureValue::kStrings: {
          std::vector<absl::string_view> texts(value.strings().values().begin(),
                                               value.strings().values().end());
          view.features.push_back({feature.name(), FeatureValue::Strings(std::move(texts))});
          break;
        }
        case v1::FeatureValue::KIND_NOT_SET:
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: no value (set number, text or strings)",
                              FeatureFieldPath(field, n, ns.name(), f, feature.name())));
      }
    }
  }
  return absl::OkStatus();
}

void DescribeNamedFeatures(const FeatureCatalog& catalog, v1::NamedFeatureSummary* out) {
  const FeatureCatalog::HashLoad load = catalog.hash_load();
  out->set_slots(static_cast<uint32_t>(load.slots));
  out->set_occupied_slots(static_cast<uint64_t>(load.occupied_slots));
  out->set_distinct_keys(static_cast<uint64_t>(load.distinct_keys));
  out->set_colliding_keys(static_cast<uint64_t>(load.colliding_keys));
  out->set_load(load.load());
  out->set_untracked_values(static_cast<uint64_t>(load.untracked_values));
  out->set_listed_features(static_cast<uint64_t>(catalog.listed_features()));
  out->set_unlisted_values(static_cast<uint64_t>(catalog.unlisted_values()));
  for (const auto& [name_space, features] : catalog.namespaces()) {
    v1::NamespaceSummary* ns = out->add_namespaces();
    ns->set_name(name_space);
    for (const auto& [name, feature] : features) {
      v1::FeatureSummary* f = ns->add_features();
      f->set_name(name);
      f->set_kind(feature.kind == FeatureKind::kNumeric ? v1::NUMERIC : v1::CATEGORICAL);
      f->set_declared(feature.declared);
      f->set_seen(static_cast<uint64_t>(feature.seen));
      if (feature.kind == FeatureKind::kNumeric && feature.numbers.count > 0) {
        f->set_mean(feature.numbers.mean);
        f->set_stddev(std::sqrt(feature.numbers.variance()));
        f->set_min(feature.numbers.min);
        f->set_max(feature.numbers.max);
      }
      f->set_distinct_values(static_cast<uint64_t>(feature.distinct_values));
    }
  }
}

v1::RewardOutcome ToProto(RewardOutcome outcome) {
  switch (outcome) {
    case RewardOutcome::kAccepted:
      return v1::ACCEPTED;
    case RewardOutcome::kDuplicate:
      return v1::DUPLICATE;
    case RewardOutcome::kUnknownEvent:
      return v1::UNKNOWN_EVENT;
    case RewardOutcome::kLate:
      return v1::LATE;
  }
  return v1::REWARD_OUTCOME_UNSPECIFIED;
}

// One admitted reward in a count of those not yet answered: taken only below the limit, given
// back when its answer is sent (Release) or when it is dropped unanswered (destructor).
class RewardTicket {
 public:
  static std::optional<RewardTicket> Take(std::atomic<int>* count, int limit) {
    if (count->fetch_add(1, std::memory_order_relaxed) >= limit) {
      count->fetch_sub(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    return RewardTicket(count);
  }
  RewardTicket(RewardTicket&& other) noexcept : count_(std::exchange(other.count_, nullptr)) {}
  RewardTicket& operator=(RewardTicket&&) = delete;
  ~RewardTicket() { Release(); }
  void Release() {
    if (count_ != nullptr) count_->fetch_sub(1, std::memory_order_relaxed);
    count_ = nullptr;
  }

 private:
  explicit RewardTicket(std::atomic<int>* count) : count_(count) {}
  std::atomic<int>* count_;
};

void SetExplanation(const ArmExplanation& in, v1::Explanation* out) {
  out->set_shared(in.shared);
  out->set_own(in.own);
  out->set_neighbours(in.neighbours);
  out->set_exploration_bonus(in.exploration_bonus);
  for (const ArmExplanation::User& user : in.top_users) {
    v1::Explanation::User* u = out->add_top_users();
    u->set_user_id(user.user_id);
    u->set_user_factor(user.user_factor);
    u->set_points(user.points);
    u->set_contribution(user.contribution);
  }
  for (const ArmExplanation::Point& point : in.top_points) {
    v1::Explanation::PastDecision* p = out->add_top_decisions();
    p->set_user_id(point.user_id);
    p->set_user_factor(point.user_factor);
    p->set_similarity(point.similarity);
    p->set_contribution(point.contribution);
  }
}

void DescribeApprentice(const ModelView& view, v1::ApprenticeSummary* out) {
  out->set_apprentice(view.apprentice);
  out->set_decisions(static_cast<uint64_t>(view.lift.decisions));
  if (view.lift.valid) {
    out->mutable_lift()->set_estimate(view.lift.lift.estimate);
    out->mutable_lift()->set_lower(view.lift.lift.lower);
    out->mutable_lift()->set_upper(view.lift.lift.upper);
  }
  out->set_margin(view.apprentice_rule.margin);
  out->set_next_check(view.apprentice ? static_cast<uint64_t>(view.lift.next_check) : 0);
  if (view.last_switch.has_value()) {
    const SwitchRecord& last = *view.last_switch;
    v1::SwitchEvent* event = out->mutable_last_switch();
    event->set_reason(last.reason == ServingSwitch::kLift    ? v1::SwitchEvent::LIFT
                      : last.reason == ServingSwitch::kAdmin ? v1::SwitchEvent::ADMIN
                                                             : v1::SwitchEvent::START);
    event->set_to_apprentice(last.apprentice);
    event->set_decisions(static_cast<uint64_t>(last.decisions));
    event->set_lift(last.lift);
    event->set_lower(last.lower);
  }
}

}  // namespace

grpc::ServerUnaryReactor* BanditServiceImpl::OnPool(grpc::CallbackServerContext* context,
                                                    const char* method,
                                                    std::function<grpc::Status()> call) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const bool queued =
      waiters_->Submit([reactor, call = std::move(call)] { reactor->Finish(call()); });
  if (!queued) {
    RpcRecorder rpc(metrics_, method);
    reactor->Finish(rpc.Finish(PoolFull()));
  }
  return reactor;
}

grpc::Status BanditServiceImpl::PoolFull() const {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrFormat("the server has %d calls waiting (for room in a model's queue, the "
                      "cluster's log or a model version), its limit; retry later",
                      waiters_->max_queued()));
}

grpc::Status BanditServiceImpl::TooManyRewardsWaiting() const {
  return grpc::Status(
      grpc::StatusCode::RESOURCE_EXHAUSTED,
      absl::StrFormat("the server has %d rewards waiting for their answer (for the sync that "
                      "makes them durable, room in a model's queue or the cluster's log), its "
                      "limit; retry later",
                      waiters_->max_queued()));
}

grpc::ServerUnaryReactor* BanditServiceImpl::SelectArm(grpc::CallbackServerContext* context,
                                                       const v1::SelectArmRequest* request,
                                                       v1::SelectArmResponse* response) {
  if (request->min_model_version() > 0) {
    return OnPool(context, "SelectArm", [=] { return DoSelectArm(context, request, response); });
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(DoSelectArm(context, request, response));
  return reactor;
}

grpc::ServerUnaryReactor* BanditServiceImpl::ReportReward(grpc::CallbackServerContext* context,
                                                          const v1::ReportRewardRequest* request,
                                                          v1::ReportRewardResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RpcRecorder rpc(metrics_, "ReportReward");
  if (grpc::Status denied = Admit(token_, context); !denied.ok()) {
    reactor->Finish(rpc.Finish(denied));
    return reactor;
  }
  RewardRequest reward_request;
  reward_request.event_id = request->event_id();
  if (request->has_reward()) reward_request.reward = request->reward();
  for (const v1::ArmReward& arm : request->arm_rewards()) {
    reward_request.arm_rewards.emplace_back(arm.arm_id(), arm.reward());
  }
  reward_request.model = request->model();
  std::optional<RewardTicket> ticket =
      RewardTicket::Take(&rewards_waiting_, waiters_->max_queued());
  if (!ticket.has_value()) {
    reactor->Finish(rpc.Finish(TooManyRewardsWaiting()));
    return reactor;
  }
  Model::RewardCallback done =
      [this, reactor, response, rpc = std::move(rpc),
       ticket = *std::move(ticket)](absl::StatusOr<RewardResult> result) mutable {
        ticket.Release();
        reactor->Finish(rpc.Finish(AnswerReward(result, response)));
      };
  // Usually logged here and answered once durable, by the log's own thread.
  if (engine_->TryReportRewardWithoutWaiting(reward_request, Deadline(context), &done)) {
    return reactor;
  }
  // It has to wait (for room in the model's queue, or for the cluster's log): on the pool.
  auto answer = std::make_shared<Model::RewardCallback>(std::move(done));
  const bool queued =
      waiters_->Submit([this, context, answer, reward_request = std::move(reward_request)] {
        std::move (*answer)(engine_->ReportReward(reward_request, Deadline(context)));
      });
  if (!queued) std::move (*answer)(absl::ResourceExhaustedError(PoolFull().error_message()));
  return reactor;
}

grpc::Status BanditServiceImpl::DoSelectArm(grpc::ServerContextBase* context,
                                            const v1::SelectArmRequest* request,
                                            v1::SelectArmResponse* response) {
  RpcRecorder rpc(metrics_, "SelectArm");
  if (grpc::Status denied = Admit(token_, context); !denied.ok()) return rpc.Finish(denied);
  DecisionRequest decision_request;
  decision_request.model = request->model();
  decision_request.user_id = request->user_id();
  decision_request.context =
      absl::MakeConstSpan(request->context().data(), request->context_size());
  // Named features: views into the request, which outlives the call below.
  std::vector<FeatureNamespace> context_features;
  if (absl::Status s =
          ViewNamedFeatures(request->context_features(), "context_features", &context_features);
      !s.ok()) {
    return rpc.Finish(ToGrpcStatus(s));
  }
  decision_request.context_features = context_features;
  std::vector<std::vector<FeatureNamespace>> arm_features(request->candidates_size());
  decision_request.candidates.reserve(request->candidates_size());
  for (int i = 0; i < request->candidates_size(); ++i) {
    const v1::Arm& arm = request->candidates(i);
    if (arm.named_features_size() > 0) {
      absl::Status s =
          ViewNamedFeatures(arm.named_features(),
                            absl::StrFormat("candidates[%d].named_features", i), &arm_features[i]);
      if (!s.ok()) return rpc.Finish(ToGrpcStatus(s));
    }
    decision_request.candidates.push_back(
        CandidateRef{arm.id(), absl::MakeConstSpan(arm.features().data(), arm.features_size()),
                     arm_features[i]});
  }
  const uint32_t slate = request->slate_size() == 0 ? 1 : request->slate_size();
  if (slate > static_cast<uint32_t>(INT_MAX)) {
    // Said here, with the value as sent: core's int would not hold it (core checks the rest).
    return rpc.Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrFormat("slate_size %d exceeds the number of candidates (%d)", slate,
                                     request->candidates_size())));
  }
  decision_request.slate_size = static_cast<int>(slate);
  if (!request->baseline_arm().empty()) {
    for (int i = 0; i < request->candidates_size(); ++i) {
      if (request->candidates(i).id() == request->baseline_arm()) decision_request.baseline = i;
    }
    if (decision_request.baseline < 0) {
      return rpc.Finish(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrFormat("baseline_arm %s is not one of the candidates' ids",
                                       QuoteId(request->baseline_arm()))));
    }
  }
  decision_request.event_id = request->event_id();
  decision_request.min_model_version = request->min_model_version();
  decision_request.explain = request->explain();

  absl::StatusOr<Decision> decision = engine_->SelectArm(decision_request, Deadline(context));
  if (!decision.ok()) return rpc.Finish(ToGrpcStatus(decision.status()));
  response->set_event_id(decision->event_id);
  response->set_model_version(decision->model_version);
  response->set_model(decision->model);
  response->set_policy(decision->policy);
  response->set_replayed(decision->replayed);
  response->set_logged(decision->logged);
  for (const ChosenArm& arm : decision->arms) {
    v1::RankedArm* out = response->add_arms();
    out->set_arm_id(arm.arm_id);
    out->set_candidate_index(static_cast<uint32_t>(arm.candidate_index));
    out->set_mean(arm.mean);
    out->set_stddev(arm.stddev);
    out->set_score(arm.score);
    if (arm.probability.has_value()) out->set_selection_probability(*arm.probability);
    out->set_explored(decision->explored);
    if (arm.explanation != nullptr) SetExplanation(*arm.explanation, out->mutable_explanation());
  }
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status BanditServiceImpl::AnswerReward(const absl::StatusOr<RewardResult>& result,
                                             v1::ReportRewardResponse* response) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  response->set_outcome(ToProto(result->outcome));
  response->set_model(result->model);
  response->set_model_version(result->model_version);
  if (result->outcome == RewardOutcome::kUnknownEvent) {
    metrics_->RecordReward("", RewardOutcome::kUnknownEvent);
  }
  for (const auto& [arm_id, outcome] : result->arm_outcomes) {
    v1::ArmRewardOutcome* out = response->add_arm_outcomes();
    out->set_arm_id(arm_id);
    out->set_outcome(ToProto(outcome));
    metrics_->RecordReward(result->model, outcome);
  }
  return grpc::Status::OK;
}

grpc::Status AdminServiceImpl::AddUsers(grpc::ServerContext* context,
                                        const v1::AddUsersRequest* request,
                                        v1::AddUsersResponse* response) {
  RpcRecorder rpc(metrics_, "AddUsers");
  Model* model = nullptr;
  grpc::Status admitted = AdmitToModel(token_, *context, *engine_, request->model(), &model);
  if (!admitted.ok()) return rpc.Finish(admitted);
  std::vector<std::string> users(request->user_ids().begin(), request->user_ids().end());
  absl::StatusOr<AddUsersResult> result = model->AddUsers(users, Deadline(context));
  if (!result.ok()) return rpc.Finish(ToGrpcStatus(result.status()));
  response->set_added(result->added);
  response->set_already_present(result->already_present);
  response->set_users(result->users);
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::AddEdges(grpc::ServerContext* context,
                                        const v1::AddEdgesRequest* request,
                                        v1::AddEdgesResponse* response) {
  RpcRecorder rpc(metrics_, "AddEdges");
  Model* model = nullptr;
  grpc::Status admitted = AdmitToModel(token_, *context, *engine_, request->model(), &model);
  if (!admitted.ok()) return rpc.Finish(admitted);
  std::vector<EdgeEdit> edges;
  edges.reserve(request->edges_size());
  for (const v1::Edge& edge : request->edges()) {
    edges.push_back(EdgeEdit{edge.user_a(), edge.user_b(), edge.weight()});
  }
  absl::StatusOr<EdgeEditResult> result = model->AddEdges(std::move(edges), Deadline(context));
  if (!result.ok()) return rpc.Finish(ToGrpcStatus(result.status()));
  response->set_added(result->changed);
  response->set_updated(result->unchanged);
  response->set_users_added(result->users_added);
  response->set_edges(result->edges);
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::RemoveEdges(grpc::ServerContext* context,
                                           const v1::RemoveEdgesRequest* request,
                                           v1::RemoveEdgesResponse* response) {
  RpcRecorder rpc(metrics_, "RemoveEdges");
  Model* model = nullptr;
  grpc::Status admitted = AdmitToModel(token_, *context, *engine_, request->model(), &model);
  if (!admitted.ok()) return rpc.Finish(admitted);
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const v1::UserPair& pair : request->edges())
    pairs.emplace_back(pair.user_a(), pair.user_b());
  absl::StatusOr<EdgeEditResult> result = model->RemoveEdges(std::move(pairs), Deadline(context));
  if (!result.ok()) return rpc.Finish(ToGrpcStatus(result.status()));
  response->set_removed(result->changed);
  response->set_not_found(result->unchanged);
  response->set_edges(result->edges);
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::DescribeModel(grpc::ServerContext* context,
                                             const v1::DescribeModelRequest* request,
                                             v1::ModelDescription* response) {
  RpcRecorder rpc(metrics_, "DescribeModel");
  Model* model = nullptr;
  grpc::Status admitted = AdmitToModel(token_, *context, *engine_, request->model(), &model);
  if (!admitted.ok()) return rpc.Finish(admitted);
  const ModelStats stats = model->Stats();
  response->set_name(model->name());
  *response->mutable_config() = ToModelConfig(model->options());
  response->set_users(stats.users);
  response->set_edges(stats.view.edges);
  response->set_graph_components(stats.view.graph_components);
  response->set_decisions(stats.decisions);
  response->set_rewards_learned(stats.view.rewards_learned);
  response->set_history_size(stats.view.history_size);
  response->set_dictionary_size(stats.view.dictionary_size);
  response->set_model_version(stats.view.version);
  response->set_pending_decisions(stats.pending_decisions);
  // What a request's dense vectors carry: the named features' slots come after them.
  response->set_context_dim(
      static_cast<uint32_t>(stats.view.context_dim - stats.view.context_slots));
  response->set_arm_feature_dim(static_cast<uint32_t>(stats.view.arm_dim - stats.view.arm_slots));
  model->VisitFeatureCatalogs([&](const FeatureCatalog* context, const FeatureCatalog* arm) {
    // A side with slots but no catalog yet (nothing seen since the start) is described empty.
    if (context != nullptr) {
      DescribeNamedFeatures(*context, response->mutable_context_features());
    } else if (stats.view.context_slots > 0) {
      response->mutable_context_features()->set_slots(
          static_cast<uint32_t>(stats.view.context_slots));
    }
    if (arm != nullptr) {
      DescribeNamedFeatures(*arm, response->mutable_arm_features());
    } else if (stats.view.arm_slots > 0) {
      response->mutable_arm_features()->set_slots(static_cast<uint32_t>(stats.view.arm_slots));
    }
  });
  response->set_dimensions_fixed(stats.view.dimensions_fixed);
  response->set_queued_operations(stats.queued_operations);
  response->set_rewards_staged(static_cast<uint64_t>(stats.view.rewards_staged));
  response->set_reward_baseline(stats.view.baseline);
  v1::EvaluationSummary* evaluation = response->mutable_evaluation();
  evaluation->set_epsilon(model->options().evaluation_epsilon);
  evaluation->set_decisions_explored(static_cast<uint64_t>(stats.view.decisions_explored));
  // The model's estimates, then each challenger's own policy under its name (a challenger
  // reports its own under its own name too; core/model/shadow_feed.h).
  std::vector<std::pair<std::string, PolicyValue>> values;
  for (const PolicyValue& value : stats.view.policy_values) {
    values.emplace_back(EvaluatedPolicyName(value.policy), value);
  }
  if (!model->options().shadow_of.empty() && stats.view.own_value.has_value()) {
    values.emplace_back(model->name(), *stats.view.own_value);
  }
  for (const ShadowFeed* feed : engine_->Challengers(model->name())) {
    const std::optional<PolicyValue> own = feed->challenger()->View()->own_value;
    if (own.has_value()) values.emplace_back(feed->challenger()->name(), *own);
  }
  for (const auto& [policy, value] : values) {
    v1::PolicyValueEstimate* out = evaluation->add_policies();
    out->set_policy(policy);
    out->set_decisions(static_cast<uint64_t>(value.decisions));
    out->set_effective_sample_size(value.effective_sample_size);
    if (!value.valid) continue;
    for (const auto& [interval, field] :
         {std::pair{&value.ips, out->mutable_ips()}, std::pair{&value.snips, out->mutable_snips()},
          std::pair{&value.dr, out->mutable_dr()}}) {
      field->set_estimate(interval->estimate);
      field->set_lower(interval->lower);
      field->set_upper(interval->upper);
    }
  }
  response->set_dictionary_points_refused(
      static_cast<uint64_t>(stats.view.dictionary_points_refused));
  DescribeApprentice(stats.view, response->mutable_apprentice());
  v1::LearningHealth* learning = response->mutable_learning();
  learning->set_healthy(stats.learning.healthy());
  for (const LearningHealth::Check& check : stats.learning.checks) {
    v1::LearningHealth::Check* out = learning->add_checks();
    out->set_name(check.name);
    out->set_ok(check.ok);
    out->set_problem(check.problem);
  }
  learning->set_queued_operations(static_cast<uint64_t>(stats.queued_operations));
  learning->set_max_queued_operations(static_cast<uint64_t>(model->max_queued()));
  learning->set_recent_reward(stats.view.recent_reward);
  learning->set_recent_weight(stats.view.recent_weight);
  if (stats.view.hyperparameters.has_value()) {
    learning->set_signal_to_noise(stats.view.hyperparameters->signal_to_noise);
  }
  learning->set_dictionary_full(stats.learning.dictionary_full);
  learning->set_last_fit(std::string(FitOutcomeName(stats.last_fit)));
  if (stats.view.hyperparameters.has_value()) {
    const HyperparameterView& hv = *stats.view.hyperparameters;
    const ModelOptions& options = model->options();
    v1::Hyperparameters* h = response->mutable_hyperparameters();
    h->set_signal_variance(hv.values.signal_variance);
    h->set_offset_variance(hv.values.offset_variance);
    h->set_linear_variance(hv.values.linear_variance);
    h->set_user_variance(hv.values.user_variance);
    h->set_community_variance(hv.values.community_variance);
    for (Eigen::Index d = 0; d < hv.values.lengthscales.size(); ++d) {
      if (d < stats.view.context_dim) {
        h->add_context_lengthscales(hv.values.lengthscales(d));
      } else {
        h->add_arm_lengthscales(hv.values.lengthscales(d));
      }
    }
    h->set_noise_variance(hv.values.noise_variance);
    h->set_rho(hv.values.rho);
    h->set_prior_mean(hv.values.prior_mean);
    h->set_kors_mu(hv.kors_mu);
    h->set_fits_applied(static_cast<uint64_t>(hv.fits_applied));
    h->set_dictionary_coarsenings(static_cast<uint64_t>(hv.coarsenings));
    h->set_last_fit_rewards(static_cast<uint64_t>(hv.last_fit_rewards));
    h->set_last_fit_points(static_cast<uint32_t>(hv.last_fit_points));
    h->set_last_fit_log_likelihood(hv.last_fit_log_likelihood);
    h->set_exploration_width(stats.view.exploration_width);
    KernelShape shape;
    shape.kernel = options.kernel;
    shape.user_kernel = options.user_kernel_options();
    shape.context_dim = stats.view.context_dim;
    shape.arm_dim = stats.view.arm_dim;
    for (const std::string& name :
         FixedHyperparameterNames(options.refit, options.refits_hyperparameters(), shape)) {
      h->add_fixed(name);
    }
  }
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::SetServingMode(grpc::ServerContext* context,
                                              const v1::SetServingModeRequest* request,
                                              v1::SetServingModeResponse* response) {
  RpcRecorder rpc(metrics_, "SetServingMode");
  Model* model = nullptr;
  grpc::Status admitted = AdmitToModel(token_, *context, *engine_, request->model(), &model);
  if (!admitted.ok()) return rpc.Finish(admitted);
  if (request->mode() != v1::SetServingModeRequest::APPRENTICE &&
      request->mode() != v1::SetServingModeRequest::SERVING) {
    return rpc.Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "mode must be APPRENTICE or SERVING"));
  }
  absl::StatusOr<EdgeEditResult> result = model->SetServingMode(
      request->mode() == v1::SetServingModeRequest::APPRENTICE, Deadline(context));
  if (!result.ok()) return rpc.Finish(ToGrpcStatus(result.status()));
  response->set_changed(result->changed == 1);
  DescribeApprentice(*model->View(), response->mutable_apprentice());
  return rpc.Finish(grpc::Status::OK);
}

grpc::Status AdminServiceImpl::ListModels(grpc::ServerContext* context,
                                          const v1::ListModelsRequest* /*request*/,
                                          v1::ListModelsResponse* response) {
  RpcRecorder rpc(metrics_, "ListModels");
  if (grpc::Status denied = token_.Check(*context); !denied.ok()) return rpc.Finish(denied);
  for (const std::string& name : engine_->ModelNames()) response->add_models(name);
  response->set_default_model(engine_->default_model());
  return rpc.Finish(grpc::Status::OK);
}

}  // namespace graphbandit::server
