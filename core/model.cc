#include "core/model.h"

#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/edge_list.h"
#include "core/learner_factory.h"
#include "core/random.h"
#include "core/selection.h"
#include "core/storage/log_reader.h"

namespace graphbandit {

struct OpCompletion {
  absl::Notification done;
  absl::Status status;
  EdgeEditResult result;
};

namespace {

absl::Status CheckId(absl::string_view id, absl::string_view field) {
  if (id.empty()) return absl::InvalidArgumentError(absl::StrCat(field, " must not be empty"));
  if (id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrFormat("%s is %d bytes long; the limit is %d", field,
                                                      id.size(), kMaxIdBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckFinite(absl::Span<const double> values, absl::string_view field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s[%d] is %s", field, i, std::isnan(values[i]) ? "NaN" : "infinite"));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  std::string partial;
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::PermissionDeniedError(
          absl::StrFormat("cannot create directory \"%s\": %s", partial, std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Model::Model(const ModelOptions& options)
    : options_(options), ledger_(options.reward_window, options.max_decisions) {}

Model::~Model() { Shutdown(); }

absl::StatusOr<std::unique_ptr<Model>> Model::Open(const ModelOptions& options,
                                                   const std::string& state_dir) {
  if (absl::Status s = ValidateModelOptions(options); !s.ok()) return s;
  std::unique_ptr<Model> model(new Model(options));
  auto kernel = BuildUserKernel(model->graph_, options.user_kernel_options());
  if (!kernel.ok()) return kernel.status();
  model->user_kernel_ = *std::move(kernel);
  if (options.arm_dim > 0) {
    EdgeEditResult ignored;
    absl::Status s = model->Apply(FixDimensionsOp{options.context_dim, options.arm_dim}, &ignored);
    if (!s.ok()) return s;
  }

  uint64_t last_seq = 0;
  if (!state_dir.empty()) {
    const std::string dir = absl::StrCat(state_dir, "/", options.name);
    if (absl::Status s = MakeDirectories(dir); !s.ok()) return s;
    const std::string path = dir + "/ops.log";
    int64_t skipped = 0;
    auto recovery = storage::RecoverLog(path, [&](uint8_t type, absl::string_view payload) {
      absl::StatusOr<ModelOp> op = DecodeOp(type, payload);
      if (!op.ok()) return op.status();
      ++last_seq;
      EdgeEditResult ignored;
      absl::Status applied = model->Apply(*op, &ignored);
      // A reward that could not be learned, or a graph edit the model refused, failed the same
      // way when it arrived (and was reported then); do the same now.
      if (!applied.ok() && !std::holds_alternative<FixDimensionsOp>(*op)) {
        ++skipped;
        return absl::OkStatus();
      }
      return applied;
    });
    if (!recovery.ok()) {
      return absl::Status(recovery.status().code(),
                          absl::StrFormat("model \"%s\": replaying %s failed at record %d: %s",
                                          options.name, path, last_seq + 1,
                                          recovery.status().message()));
    }
    model->recovery_.records_replayed = static_cast<int64_t>(recovery->records);
    model->recovery_.truncated = recovery->truncated;
    if (recovery->corruption.has_value()) {
      model->recovery_.damage = absl::StrFormat(
          "%s: %s at offset %d; %d bytes after it were moved to %s", path,
          recovery->corruption->reason, recovery->corruption->offset, recovery->discarded_bytes,
          recovery->discarded_path);
    }
    if (skipped > 0) {
      std::fprintf(stderr, "model \"%s\": %lld logged operations were refused again\n",
                   options.name.c_str(), static_cast<long long>(skipped));
    }
    auto writer = storage::LogWriter::Open(path);
    if (!writer.ok()) return writer.status();
    absl::MutexLock lock(&model->queue_mu_);
    model->log_ = *std::move(writer);
  }
  {
    absl::MutexLock lock(&model->queue_mu_);
    model->next_seq_ = last_seq + 1;
    model->applied_seq_ = last_seq;
    model->rewards_held_ = model->learner_ != nullptr ? model->learner_->history_size() : 0;
  }
  if (!options.edge_list_file.empty()) {
    // Applied as one logged edit, before the writer starts. Only edges that are missing or
    // weighted differently are part of it, so an unchanged file adds nothing on restart.
    auto edges = ReadEdgeList(options.edge_list_file);
    if (!edges.ok()) return edges.status();
    SetEdgesOp changes;
    for (EdgeEdit& edge : *edges) {
      const int32_t a = model->registry_->Find(edge.user_a);
      const int32_t b = model->registry_->Find(edge.user_b);
      if (a < 0 || b < 0 || model->graph_.Weight(a, b) != edge.weight) {
        changes.edges.push_back(std::move(edge));
      }
    }
    if (!changes.edges.empty()) {
      {
        absl::MutexLock lock(&model->queue_mu_);
        if (model->log_ != nullptr) {
          absl::Status s = model->log_->Append(static_cast<uint8_t>(OpType::kSetEdges),
                                               EncodeOp(ModelOp(changes)));
          if (!s.ok()) return s;
        }
        last_seq = model->next_seq_++;
        model->applied_seq_ = last_seq;
      }
      EdgeEditResult ignored;
      if (absl::Status s = model->Apply(changes, &ignored); !s.ok()) return s;
    }
  }
  model->Publish(last_seq);
  model->writer_ = std::thread([m = model.get()] { m->WriterLoop(); });
  return model;
}

// ---------------------------------------------------------------------------------------------
// Writer side.

absl::Status Model::Apply(const ModelOp& op, EdgeEditResult* result) {
  struct Undo {
    int32_t a, b;
    double weight;  // 0: there was no edge
  };
  std::vector<Undo> undo;  // graph edits, to revert if the new graph cannot be served
  if (const auto* fix = std::get_if<FixDimensionsOp>(&op)) {
    if (learner_ != nullptr) {
      if (fix->context_dim == scaling_.context_dim && fix->arm_dim == scaling_.arm_dim) {
        return absl::OkStatus();
      }
      return absl::FailedPreconditionError(absl::StrFormat(
          "model \"%s\": the log fixes dimensions (context %d, arms %d) but the model has "
          "(context %d, arms %d)",
          options_.name, fix->context_dim, fix->arm_dim, scaling_.context_dim, scaling_.arm_dim));
    }
    scaling_ = FeatureScaling{fix->context_dim, fix->arm_dim, options_.context_lengthscale,
                              options_.arm_lengthscale};
    auto learner = MakeLearner(options_, scaling_.joint_dim(), graph_, user_kernel_);
    if (!learner.ok()) return learner.status();
    learner_ = *std::move(learner);
    absl::MutexLock lock(&queue_mu_);
    dims_ = Dimensions{true, fix->context_dim, fix->arm_dim};
    return absl::OkStatus();
  } else if (const auto* add = std::get_if<AddUsersOp>(&op)) {
    for (const std::string& user : add->users) registry_->FindOrAdd(user);
    graph_.EnsureUsers(registry_->size());
    return absl::OkStatus();
  } else if (const auto* set = std::get_if<SetEdgesOp>(&op)) {
    for (const EdgeEdit& edge : set->edges) {
      const int32_t a = registry_->FindOrAdd(edge.user_a);
      const int32_t b = registry_->FindOrAdd(edge.user_b);
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
  } else if (const auto* observe = std::get_if<ObserveOp>(&op)) {
    if (learner_ == nullptr) {
      return absl::FailedPreconditionError("a reward was logged before the dimensions were fixed");
    }
    if (static_cast<int>(observe->context.size()) != scaling_.context_dim ||
        static_cast<int>(observe->features.size()) != scaling_.arm_dim) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "a logged reward has %d context and %d arm values; the model expects %d and %d",
          observe->context.size(), observe->features.size(), scaling_.context_dim,
          scaling_.arm_dim));
    }
    const int32_t user = registry_->FindOrAdd(observe->user);
    Eigen::VectorXd point(scaling_.joint_dim());
    scaling_.Apply(observe->context.data(), observe->features.data(), point.data());
    absl::Status status = learner_->Observe(user, point, observe->reward);
    if (status.ok()) ++rewards_learned_;
    return status;
  }
  graph_.EnsureUsers(registry_->size());
  if (!undo.empty()) {
    // Every graph edit rebuilds at once, so that the sequence of rebuilds (and hence the state)
    // depends on the log alone, not on how the writer happened to batch operations. A graph
    // the user kernel or the learner cannot serve (a dense kernel or a graph-linear model over
    // a too-large component) is refused as a whole and the model keeps the previous graph;
    // replaying the log refuses it again the same way.
    auto kernel = BuildUserKernel(graph_, options_.user_kernel_options());
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

void Model::Publish(uint64_t version) {
  auto view = std::make_shared<ModelView>();
  view->version = version;
  if (learner_ != nullptr) {
    view->scorer = learner_->Freeze();
    view->scaling = scaling_;
    view->context_dim = scaling_.context_dim;
    view->arm_dim = scaling_.arm_dim;
    view->dimensions_fixed = true;
    view->history_size = learner_->history_size();
    view->dictionary_size = learner_->dictionary_size();
  }
  view->rewards_learned = rewards_learned_;
  view->edges = graph_.num_edges();
  view->graph_users = registry_->size();
  // Users registered since the last rebuild have no edges: each is a component of its own.
  view->graph_components = components_ + (view->graph_users - users_at_rebuild_);
  absl::MutexLock lock(&view_mu_);
  view_ = std::move(view);
}

void Model::WriterLoop() {
  for (;;) {
    std::deque<Pending> batch;
    {
      absl::MutexLock lock(&queue_mu_);
      queue_mu_.Await(absl::Condition(
          +[](Model* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(m->queue_mu_) {
            return !m->queue_.empty() || m->stopping_;
          },
          this));
      if (queue_.empty()) return;  // stopping, and everything is applied
      batch.swap(queue_);
    }
    for (Pending& pending : batch) {
      EdgeEditResult result;
      absl::Status status = Apply(pending.op, &result);
      if (!status.ok()) {
        std::fprintf(stderr, "model \"%s\": operation %llu not applied: %s\n",
                     options_.name.c_str(), static_cast<unsigned long long>(pending.seq),
                     std::string(status.message()).c_str());
      }
      if (pending.completion != nullptr) {
        pending.completion->status = status;
        pending.completion->result = result;
      }
    }
    Publish(batch.back().seq);
    {
      absl::MutexLock lock(&queue_mu_);
      applied_seq_ = batch.back().seq;
    }
    for (Pending& pending : batch) {
      if (pending.completion != nullptr) pending.completion->done.Notify();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Submission side.

absl::StatusOr<uint64_t> Model::AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion) {
  if (stopping_) return absl::UnavailableError(absl::StrFormat("model \"%s\" is shutting down", options_.name));
  if (log_ != nullptr) {
    absl::Status status = log_->Append(static_cast<uint8_t>(TypeOf(op)), EncodeOp(op));
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrFormat(
          "model \"%s\" cannot write its log: %s", options_.name, status.message()));
    }
  }
  const uint64_t seq = next_seq_++;
  if (std::holds_alternative<ObserveOp>(op)) ++rewards_held_;
  queue_.push_back(Pending{seq, std::move(op), std::move(completion)});
  return seq;
}

absl::StatusOr<EdgeEditResult> Model::SubmitAndWait(ModelOp op) {
  auto completion = std::make_shared<OpCompletion>();
  {
    absl::MutexLock lock(&queue_mu_);
    auto seq = AppendLocked(std::move(op), completion);
    if (!seq.ok()) return seq.status();
  }
  completion->done.WaitForNotification();
  if (!completion->status.ok()) return completion->status;
  return completion->result;
}

Model::Dimensions Model::CurrentDimensions() const {
  absl::MutexLock lock(&queue_mu_);
  return dims_;
}

absl::Status Model::EnsureDimensions(int context_dim, int arm_dim) {
  auto completion = std::make_shared<OpCompletion>();
  {
    absl::MutexLock lock(&queue_mu_);
    if (dims_.fixed) return absl::OkStatus();  // a concurrent request fixed them; re-validated
    dims_ = Dimensions{true, context_dim, arm_dim};
    auto seq = AppendLocked(FixDimensionsOp{context_dim, arm_dim}, completion);
    if (!seq.ok()) {
      dims_ = Dimensions{};
      return seq.status();
    }
  }
  completion->done.WaitForNotification();
  return completion->status;
}

absl::Status Model::ValidateRequest(const DecisionRequest& request, const Dimensions& dims) const {
  if (absl::Status s = CheckId(request.user_id, "user_id"); !s.ok()) return s;
  const int n = static_cast<int>(request.candidates.size());
  if (n == 0) return absl::InvalidArgumentError("candidates must not be empty");
  if (n > options_.max_candidates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d candidates exceed model \"%s\"'s limit of %d (limits.max_candidates)",
                        n, options_.name, options_.max_candidates));
  }
  if (request.slate_size < 1) return absl::InvalidArgumentError("slate_size must be at least 1");
  if (request.slate_size > n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "slate_size %d exceeds the number of candidates (%d)", request.slate_size, n));
  }
  const int expected_context = dims.fixed ? dims.context_dim : -1;
  if (expected_context >= 0 && static_cast<int>(request.context.size()) != expected_context) {
    return absl::InvalidArgumentError(absl::StrFormat("context has %d values; model \"%s\" expects %d",
                                                      request.context.size(), options_.name,
                                                      expected_context));
  }
  if (!dims.fixed && static_cast<int>(request.context.size()) > options_.max_feature_dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "context has %d values; the limit is %d (limits.max_feature_dim)", request.context.size(),
        options_.max_feature_dim));
  }
  if (absl::Status s = CheckFinite(request.context, "context"); !s.ok()) return s;

  const int expected_arm = dims.fixed ? dims.arm_dim
                                      : static_cast<int>(request.candidates[0].features.size());
  if (!dims.fixed) {
    if (expected_arm == 0) {
      return absl::InvalidArgumentError(
          "candidates[0] has no features; every candidate needs at least one");
    }
    if (expected_arm > options_.max_feature_dim) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "candidates have %d features; the limit is %d (limits.max_feature_dim)", expected_arm,
          options_.max_feature_dim));
    }
  }
  absl::flat_hash_map<absl::string_view, int> seen;
  seen.reserve(n);
  for (int i = 0; i < n; ++i) {
    const CandidateRef& candidate = request.candidates[i];
    const std::string field = absl::StrFormat("candidates[%d].id", i);
    if (absl::Status s = CheckId(candidate.id, field); !s.ok()) return s;
    auto [it, inserted] = seen.emplace(candidate.id, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "duplicate arm id %s: candidates[%d] and candidates[%d]", QuoteId(candidate.id),
          it->second, i));
    }
    if (static_cast<int>(candidate.features.size()) != expected_arm) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "candidates[%d] (%s) has %d features; %s %d", i, QuoteId(candidate.id),
          candidate.features.size(),
          dims.fixed ? absl::StrFormat("model \"%s\" expects", options_.name)
                     : std::string("candidates[0] has"),
          expected_arm));
    }
    if (absl::Status s = CheckFinite(candidate.features,
                                     absl::StrFormat("candidates[%d] (%s) features", i,
                                                     QuoteId(candidate.id)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Decision> Model::Decide(const DecisionRequest& request,
                                       const std::string& event_id) {
  Dimensions dims = CurrentDimensions();
  if (absl::Status s = ValidateRequest(request, dims); !s.ok()) return s;
  if (!dims.fixed) {
    absl::Status s = EnsureDimensions(static_cast<int>(request.context.size()),
                                      static_cast<int>(request.candidates[0].features.size()));
    if (!s.ok()) return s;
    dims = CurrentDimensions();
    if (s = ValidateRequest(request, dims); !s.ok()) return s;
  }
  std::shared_ptr<const ModelView> view = View();
  if (view->scorer == nullptr) {  // another request is fixing the dimensions right now
    WaitForWriter();
    view = View();
    if (view->scorer == nullptr) return absl::InternalError("model has no posterior");
  }
  const int n = static_cast<int>(request.candidates.size());
  Eigen::MatrixXd points(view->scaling.joint_dim(), n);
  for (int i = 0; i < n; ++i) {
    view->scaling.Apply(request.context.data(), request.candidates[i].features.data(),
                        points.col(i).data());
  }
  Eigen::VectorXd mean, stddev;
  view->scorer->Score(registry_->Find(request.user_id), points, &mean, &stddev);
  if (!mean.allFinite() || !stddev.allFinite()) {
    return absl::InternalError("the posterior produced a non-finite score");
  }
  Rng rng(StableHash(event_id, options_.seed));
  const SelectionRule rule = SelectionRuleFor(options_);
  const std::vector<RankedChoice> slate =
      SelectSlate(rule, options_.exploration, mean, stddev, request.slate_size, rng);

  Decision decision;
  decision.event_id = event_id;
  decision.model = options_.name;
  decision.policy = std::string(PolicyName(options_.policy));
  decision.model_version = view->version;
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
  return decision;
}

absl::Status Model::Learn(std::vector<ObserveOp> observations) {
  absl::MutexLock lock(&queue_mu_);
  if (!dims_.fixed) return absl::FailedPreconditionError("the model has not decided anything yet");
  for (const ObserveOp& op : observations) {
    if (static_cast<int>(op.context.size()) != dims_.context_dim ||
        static_cast<int>(op.features.size()) != dims_.arm_dim) {
      return absl::InvalidArgumentError("reward for a decision with other dimensions");
    }
    if (!std::isfinite(op.reward) || std::abs(op.reward) > options_.reward_bound) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "reward %g is outside [-%g, %g] (limits.reward_bound)", op.reward,
          options_.reward_bound, options_.reward_bound));
    }
  }
  if (options_.exact()) {
    const int64_t held = rewards_held_;
    if (held + static_cast<int64_t>(observations.size()) > options_.exact_max_observations) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "model \"%s\" (exact GP) holds %d observations, its limit "
          "(exact_gp.max_observations is %d); use an EK policy for long-running models",
          options_.name, held, options_.exact_max_observations));
    }
  }
  absl::flat_hash_set<std::string> new_users;
  for (const ObserveOp& op : observations) {
    if (registry_->Find(op.user) < 0) new_users.insert(op.user);
  }
  if (registry_->size() + static_cast<int64_t>(new_users.size()) > options_.max_users) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "model \"%s\" has reached its limit of %d users (limits.max_users)", options_.name,
        options_.max_users));
  }
  for (ObserveOp& op : observations) {
    registry_->FindOrAdd(op.user);  // in log order, as replay will
    auto seq = AppendLocked(std::move(op), nullptr);
    if (!seq.ok()) return seq.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<AddUsersResult> Model::AddUsers(absl::Span<const std::string> users) {
  if (users.empty()) return absl::InvalidArgumentError("user_ids must not be empty");
  if (static_cast<int64_t>(users.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d users exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        users.size(), options_.max_graph_edits_per_call));
  }
  for (size_t i = 0; i < users.size(); ++i) {
    if (absl::Status s = CheckId(users[i], absl::StrFormat("user_ids[%d]", i)); !s.ok()) return s;
  }
  AddUsersResult result;
  absl::MutexLock lock(&queue_mu_);
  absl::flat_hash_set<absl::string_view> fresh;
  for (const std::string& user : users) {
    if (registry_->Find(user) < 0) fresh.insert(user);
  }
  if (registry_->size() + static_cast<int64_t>(fresh.size()) > options_.max_users) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "adding %d users would exceed model \"%s\"'s limit of %d (limits.max_users)",
        fresh.size(), options_.name, options_.max_users));
  }
  result.added = static_cast<int>(fresh.size());
  result.already_present = static_cast<int>(users.size()) - result.added;
  if (!fresh.empty()) {
    AddUsersOp op{std::vector<std::string>(users.begin(), users.end())};
    for (const std::string& user : op.users) registry_->FindOrAdd(user);
    auto seq = AppendLocked(std::move(op), nullptr);
    if (!seq.ok()) return seq.status();
  }
  result.users = registry_->size();
  return result;
}

absl::StatusOr<EdgeEditResult> Model::AddEdges(std::vector<EdgeEdit> edges) {
  if (edges.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(edges.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        edges.size(), options_.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> pairs;
  for (size_t i = 0; i < edges.size(); ++i) {
    const EdgeEdit& e = edges[i];
    for (const std::string* user : {&e.user_a, &e.user_b}) {
      absl::Status s = CheckId(*user, absl::StrFormat("edges[%d].%s", i,
                                                      user == &e.user_a ? "user_a" : "user_b"));
      if (!s.ok()) return s;
    }
    if (e.user_a == e.user_b) {
      return absl::InvalidArgumentError(
          absl::StrFormat("edges[%d] joins user %s to itself", i, QuoteId(e.user_a)));
    }
    if (!std::isfinite(e.weight) || e.weight <= 0.0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d].weight must be a finite number > 0, got %g", i, e.weight));
    }
    auto key = e.user_a < e.user_b ? std::make_pair(absl::string_view(e.user_a), absl::string_view(e.user_b))
                                   : std::make_pair(absl::string_view(e.user_b), absl::string_view(e.user_a));
    auto [it, inserted] = pairs.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(e.user_a), QuoteId(e.user_b),
          it->second));
    }
  }
  auto completion = std::make_shared<OpCompletion>();
  int users_added = 0;
  {
    absl::MutexLock lock(&queue_mu_);
    absl::flat_hash_set<absl::string_view> fresh;
    for (const EdgeEdit& e : edges) {
      if (registry_->Find(e.user_a) < 0) fresh.insert(e.user_a);
      if (registry_->Find(e.user_b) < 0) fresh.insert(e.user_b);
    }
    if (registry_->size() + static_cast<int64_t>(fresh.size()) > options_.max_users) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "adding %d users would exceed model \"%s\"'s limit of %d (limits.max_users)",
          fresh.size(), options_.name, options_.max_users));
    }
    users_added = static_cast<int>(fresh.size());
    for (const EdgeEdit& e : edges) {
      registry_->FindOrAdd(e.user_a);
      registry_->FindOrAdd(e.user_b);
    }
    auto seq = AppendLocked(SetEdgesOp{std::move(edges)}, completion);
    if (!seq.ok()) return seq.status();
  }
  completion->done.WaitForNotification();
  if (!completion->status.ok()) return completion->status;
  completion->result.users_added = users_added;
  return completion->result;
}

absl::StatusOr<EdgeEditResult> Model::RemoveEdges(
    std::vector<std::pair<std::string, std::string>> pairs) {
  if (pairs.empty()) return absl::InvalidArgumentError("edges must not be empty");
  if (static_cast<int64_t>(pairs.size()) > options_.max_graph_edits_per_call) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d edges exceed the limit of %d per call (limits.max_graph_edits_per_call)",
        pairs.size(), options_.max_graph_edits_per_call));
  }
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, size_t> seen;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const auto& [a, b] = pairs[i];
    if (absl::Status s = CheckId(a, absl::StrFormat("edges[%d].user_a", i)); !s.ok()) return s;
    if (absl::Status s = CheckId(b, absl::StrFormat("edges[%d].user_b", i)); !s.ok()) return s;
    auto key = a < b ? std::make_pair(absl::string_view(a), absl::string_view(b))
                     : std::make_pair(absl::string_view(b), absl::string_view(a));
    auto [it, inserted] = seen.emplace(key, i);
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "edges[%d] repeats the pair (%s, %s) of edges[%d]", i, QuoteId(a), QuoteId(b), it->second));
    }
  }
  return SubmitAndWait(RemoveEdgesOp{std::move(pairs)});
}

// ---------------------------------------------------------------------------------------------

std::shared_ptr<const ModelView> Model::View() const {
  absl::MutexLock lock(&view_mu_);
  return view_;
}

ModelStats Model::Stats() const {
  ModelStats stats;
  stats.view = *View();
  stats.users = registry_->size();
  stats.decisions = decisions_.load(std::memory_order_relaxed);
  stats.pending_decisions = ledger_.pending();
  stats.ledger_size = ledger_.size();
  stats.expired_decisions = ledger_.expired_total();
  absl::MutexLock lock(&queue_mu_);
  // Logged but not yet published (a batch the writer is applying is no longer in queue_).
  stats.queued_operations = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
  return stats;
}

void Model::WaitForWriter() {
  absl::MutexLock lock(&queue_mu_);
  const uint64_t target = next_seq_ - 1;
  auto applied = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    return applied_seq_ >= target || !writer_.joinable();
  };
  queue_mu_.Await(absl::Condition(&applied));
}

void Model::Shutdown() {
  {
    absl::MutexLock lock(&queue_mu_);
    if (stopping_ && !writer_.joinable()) return;
    stopping_ = true;
  }
  if (writer_.joinable()) writer_.join();
  absl::MutexLock lock(&queue_mu_);
  if (log_ != nullptr) {
    absl::Status status = log_->Sync();
    if (status.ok()) status = log_->Close();
    if (!status.ok()) {
      std::fprintf(stderr, "model \"%s\": closing the log: %s\n", options_.name.c_str(),
                   std::string(status.message()).c_str());
    }
    log_.reset();
  }
}

}  // namespace graphbandit
