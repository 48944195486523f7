#include "client/loadtest/session.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"

namespace graphbandit::loadtest {
namespace {

namespace v1 = graphbandit::v1;

constexpr char kBandit[] = "graphbandit.v1.BanditService";
constexpr char kAdmin[] = "graphbandit.v1.AdminService";
constexpr size_t kEdgesPerCall = 10000;

absl::Status CallError(const char* rpc, const grpc::Status& status) {
  return absl::Status(
      static_cast<absl::StatusCode>(status.error_code()),
      absl::StrFormat("%s failed: %d (%s)", rpc, status.error_code(), status.error_message()));
}

std::string ErrorKey(const char* rpc, const grpc::Status& status) {
  return absl::StrCat(rpc, " ", status.error_code());
}

double MillisecondsSince(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - since)
      .count();
}

}  // namespace

Session::Session(client::Connection connection, std::string model,
                 std::chrono::milliseconds deadline)
    : connection_(std::move(connection)),
      model_(std::move(model)),
      deadline_(deadline),
      bandit_(v1::BanditService::NewStub(connection_.channel)),
      admin_(v1::AdminService::NewStub(connection_.channel)) {}

absl::StatusOr<Session> Session::Connect(client::Connection connection, const std::string& target,
                                         std::string model, std::chrono::milliseconds deadline) {
  if (!connection.channel->WaitForConnected(std::chrono::system_clock::now() + deadline)) {
    return absl::UnavailableError(absl::StrFormat("cannot reach a server at %s", target));
  }
  return Session(std::move(connection), std::move(model), deadline);
}

std::unique_ptr<grpc::ClientContext> Session::Context(const char* service,
                                                      std::chrono::milliseconds extra) const {
  auto context = std::make_unique<grpc::ClientContext>();
  connection_.Authorize(context.get(), service);
  client::NameModel(context.get(), model_);
  context->set_deadline(std::chrono::system_clock::now() + deadline_ + extra);
  return context;
}

absl::StatusOr<v1::ModelDescription> Session::Describe() const {
  v1::DescribeModelRequest request;
  request.set_model(model_);
  v1::ModelDescription description;
  const grpc::Status status = admin_->DescribeModel(Context(kAdmin).get(), request, &description);
  if (!status.ok()) return CallError("DescribeModel", status);
  return description;
}

absl::StatusOr<v1::ModelDescription> Session::CheckModel(const sim::SimEnvironment& env) const {
  absl::StatusOr<v1::ModelDescription> description = Describe();
  if (!description.ok()) return description.status();
  if (description->dimensions_fixed() &&
      (description->context_dim() != static_cast<uint32_t>(env.context_dim()) ||
       description->arm_feature_dim() != static_cast<uint32_t>(env.arm_dim()))) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "model \"%s\" takes %d context values and %d arm features; this environment sends %d "
        "and %d. Use another --model (or --dim for the default environment).",
        description->name(), description->context_dim(), description->arm_feature_dim(),
        env.context_dim(), env.arm_dim()));
  }
  return description;
}

absl::Status Session::RegisterGraph(const sim::SimEnvironment& env, const Naming& naming) const {
  v1::AddUsersRequest users;
  users.set_model(model_);
  for (int u = 0; u < env.users(); ++u) users.add_user_ids(naming.UserId(u));
  v1::AddUsersResponse users_added;
  grpc::Status status = admin_->AddUsers(Context(kAdmin).get(), users, &users_added);
  if (!status.ok()) return CallError("AddUsers", status);

  const auto& edges = env.edges();
  for (size_t start = 0; start < edges.size(); start += kEdgesPerCall) {
    v1::AddEdgesRequest request;
    request.set_model(model_);
    for (size_t e = start; e < std::min(edges.size(), start + kEdgesPerCall); ++e) {
      v1::Edge* edge = request.add_edges();
      edge->set_user_a(naming.UserId(edges[e].a));
      edge->set_user_b(naming.UserId(edges[e].b));
      edge->set_weight(edges[e].weight);
    }
    v1::AddEdgesResponse response;
    // Edges may trigger a rebuild of the user kernel: a minute more.
    status = admin_->AddEdges(Context(kAdmin, std::chrono::seconds(60)).get(), request, &response);
    if (!status.ok()) return CallError("AddEdges", status);
  }
  return absl::OkStatus();
}

std::string Session::PlayRound(const sim::SimEnvironment& env, const Naming& naming, int64_t r,
                               Sample* sample) const {
  const sim::Round round = env.MakeRound(static_cast<uint64_t>(r));
  v1::SelectArmRequest select;
  select.set_model(model_);
  select.set_user_id(naming.UserId(round.user));
  for (int i = 0; i < round.context.size(); ++i) select.add_context(round.context(i));
  for (Eigen::Index k = 0; k < round.arms.cols(); ++k) {
    v1::Arm* arm = select.add_candidates();
    // Pool items keep their id; fresh candidates get one of their own.
    arm->set_id(k < static_cast<Eigen::Index>(round.items.size()) ? Naming::ItemId(round.items[k])
                                                                  : absl::StrCat("r", r, "-c", k));
    for (int i = 0; i < env.arm_dim(); ++i) arm->add_features(round.arms(i, k));
  }
  v1::SelectArmResponse decision;
  auto t0 = std::chrono::steady_clock::now();
  grpc::Status status = bandit_->SelectArm(Context(kBandit).get(), select, &decision);
  sample->select_ms = MillisecondsSince(t0);
  if (!status.ok() || decision.arms_size() != 1) return ErrorKey("SelectArm", status);

  const int slot = static_cast<int>(decision.arms(0).candidate_index());
  v1::ReportRewardRequest report;
  report.set_event_id(decision.event_id());
  report.set_model(model_);
  report.set_reward(env.Reward(round, slot));
  v1::ReportRewardResponse outcome;
  t0 = std::chrono::steady_clock::now();
  status = bandit_->ReportReward(Context(kBandit).get(), report, &outcome);
  sample->reward_ms = MillisecondsSince(t0);
  if (!status.ok()) return ErrorKey("ReportReward", status);
  if (outcome.outcome() != v1::ACCEPTED) {
    return ErrorKey("ReportReward", grpc::Status(grpc::StatusCode::UNKNOWN, "not accepted"));
  }
  sample->regret = env.Regret(round, slot);
  return "";
}

RunResult Session::Run(const sim::SimEnvironment& env, const Naming& naming, int64_t rounds,
                       int concurrency, double max_seconds) const {
  RunResult result;
  result.samples.resize(rounds);
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> next_round{0};
  absl::Mutex errors_mu;
  const auto start = std::chrono::steady_clock::now();
  const auto stop_at = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                   std::chrono::duration<double>(max_seconds));
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w) {
    workers.emplace_back([&] {
      for (;;) {
        const int64_t r = next_round.fetch_add(1);
        if (r >= rounds || std::chrono::steady_clock::now() > stop_at) return;
        const std::string error = PlayRound(env, naming, r, &result.samples[r]);
        if (error.empty()) {
          accepted.fetch_add(1);
        } else {
          absl::MutexLock lock(&errors_mu);
          ++result.errors[error];
        }
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  result.seconds = MillisecondsSince(start) / 1000.0;
  result.played = std::min<int64_t>(next_round.load(), rounds);
  result.accepted = accepted.load();
  return result;
}

v1::ModelDescription Session::WaitForLearning(double max_seconds) const {
  const auto wait_until = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(1000 * max_seconds));
  v1::ModelDescription last;
  for (;;) {
    absl::StatusOr<v1::ModelDescription> after = Describe();
    if (!after.ok()) return last;
    last = *std::move(after);
    if ((last.queued_operations() == 0 && last.rewards_staged() == 0) ||
        std::chrono::steady_clock::now() > wait_until) {
      return last;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace graphbandit::loadtest
