// The server over a real gRPC channel on loopback: learning, slates and retries, the evaluation
// share, administration, explanations, health checking, reflection, and the Prometheus endpoint.
// Invalid requests have their own file, tests/server/invalid_request_test.cc.
#include "server/server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/config.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

// Read-your-writes over gRPC: a decision that asks for the version ReportReward returned is
// made from a state that has learned the reward, every time.
TEST_F(ServerTest, MinModelVersionGivesReadYourWrites) {
  for (int round = 0; round < 30; ++round) {
    v1::SelectArmResponse decided;
    ASSERT_TRUE(Select(ThreeArms(), &decided).ok());
    v1::ReportRewardRequest reward;
    reward.set_event_id(decided.event_id());
    reward.set_reward(round % 2);
    v1::ReportRewardResponse rewarded;
    ASSERT_TRUE(Reward(reward, &rewarded).ok());
    ASSERT_EQ(rewarded.outcome(), v1::ACCEPTED);
    ASSERT_GT(rewarded.model_version(), decided.model_version());
    v1::SelectArmRequest after = ThreeArms();
    after.set_min_model_version(rewarded.model_version());
    v1::SelectArmResponse fresh;
    ASSERT_TRUE(Select(after, &fresh).ok());
    EXPECT_GE(fresh.model_version(), rewarded.model_version()) << "round " << round;
  }
  v1::SelectArmRequest ahead = ThreeArms();
  ahead.set_min_model_version(1'000'000'000);
  v1::SelectArmResponse response;
  const grpc::Status status = Select(ahead, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("min_model_version 1000000000 is ahead"));
}

TEST_F(ServerTest, SelectRewardAndLearnOverGrpc) {
  // True rewards: a -> 0.9, b -> 0.1, c -> 0.4 (the same for everyone).
  const std::map<std::string, double> truth = {{"a", 0.9}, {"b", 0.1}, {"c", 0.4}};
  double first_mean_of_a = NAN;
  for (int round = 0; round < 80; ++round) {
    v1::SelectArmResponse decision;
    ASSERT_TRUE(Select(ThreeArms(), &decision).ok());
    ASSERT_EQ(decision.arms_size(), 1);
    EXPECT_EQ(decision.model(), "default");
    EXPECT_EQ(decision.policy(), "EK_UCB");
    EXPECT_EQ(decision.event_id().size(), 32u);
    const v1::RankedArm& arm = decision.arms(0);
    EXPECT_TRUE(arm.has_selection_probability());
    EXPECT_GT(arm.stddev(), 0.0);
    if (arm.arm_id() == "a" && std::isnan(first_mean_of_a)) first_mean_of_a = arm.mean();
    v1::ReportRewardRequest report;
    report.set_event_id(decision.event_id());
    report.set_reward(truth.at(arm.arm_id()));
    v1::ReportRewardResponse outcome;
    ASSERT_TRUE(Reward(report, &outcome).ok());
    EXPECT_EQ(outcome.outcome(), v1::ACCEPTED);
  }
  server_->engine().FindModel("").value()->WaitForWriter();
  v1::SelectArmRequest all = ThreeArms();
  all.set_slate_size(3);
  v1::SelectArmResponse ranked;
  ASSERT_TRUE(Select(all, &ranked).ok());
  ASSERT_EQ(ranked.arms_size(), 3);
  EXPECT_EQ(ranked.arms(0).arm_id(), "a");
  // The differences between arms are learned closely; the common level less so (it moves with
  // the drifting-baseline tracker and the fitted prior mean, by up to ~0.16 here depending on
  // which rounds the batches and the fit fell on).
  double mean_of_c = NAN;
  for (const v1::RankedArm& arm : ranked.arms()) {
    if (arm.arm_id() == "c") mean_of_c = arm.mean();
  }
  for (const v1::RankedArm& arm : ranked.arms()) {
    EXPECT_NEAR(arm.mean() - mean_of_c, truth.at(arm.arm_id()) - truth.at("c"), 0.15)
        << arm.arm_id();
    EXPECT_NEAR(arm.mean(), truth.at(arm.arm_id()), 0.25) << arm.arm_id();
    EXPECT_EQ(arm.candidate_index(), arm.arm_id() == "a" ? 0u : arm.arm_id() == "b" ? 1u : 2u);
  }
  EXPECT_GT(ranked.model_version(), 0u);
  const v1::ModelDescription description = Describe();
  EXPECT_EQ(description.rewards_learned(), 80u);
  EXPECT_GT(description.dictionary_size(), 0u);
  EXPECT_EQ(description.pending_decisions(), 1u);  // the ranking request above
  EXPECT_EQ(description.decisions(), 81u);
  EXPECT_TRUE(description.dimensions_fixed());
  EXPECT_EQ(description.arm_feature_dim(), 2u);
  EXPECT_EQ(description.config().policy(), v1::EK_UCB);
  // By default the kernel's hyper-parameters are fitted: the configuration leaves them unset
  // and the values in use are described beside it.
  EXPECT_EQ(description.config().ridge(), 0.0);
  EXPECT_EQ(description.config().graph().rho(), 0.0);
  EXPECT_TRUE(description.config().hyperparameters().fit());
  EXPECT_TRUE(description.has_hyperparameters());
  EXPECT_EQ(description.hyperparameters().arm_lengthscales_size(), 2);
  EXPECT_EQ(description.hyperparameters().context_lengthscales_size(), 0);
  EXPECT_GT(description.hyperparameters().noise_variance(), 0.0);
  EXPECT_GT(description.hyperparameters().rho(), 0.0);
  EXPECT_EQ(description.hyperparameters().kors_mu(),
            description.hyperparameters().noise_variance());
  EXPECT_EQ(description.hyperparameters().fixed_size(), 0);
}

TEST_F(ServerTest, SlatesRetriesAndPerArmRewards) {
  v1::SelectArmRequest request = ThreeArms();
  request.set_slate_size(2);
  request.set_event_id("page-view-7");
  v1::SelectArmResponse first, retry;
  ASSERT_TRUE(Select(request, &first).ok());
  ASSERT_TRUE(Select(request, &retry).ok());
  EXPECT_EQ(first.event_id(), "page-view-7");
  EXPECT_FALSE(first.replayed());
  EXPECT_TRUE(retry.replayed());
  ASSERT_EQ(retry.arms_size(), 2);
  EXPECT_EQ(retry.arms(0).arm_id(), first.arms(0).arm_id());
  EXPECT_EQ(retry.arms(1).score(), first.arms(1).score());
  request.set_user_id("mallory");
  v1::SelectArmResponse reused;
  EXPECT_EQ(Select(request, &reused).error_code(), grpc::StatusCode::ALREADY_EXISTS);

  v1::ReportRewardRequest report;
  report.set_event_id("page-view-7");
  for (const v1::RankedArm& arm : first.arms()) {
    v1::ArmReward* reward = report.add_arm_rewards();
    reward->set_arm_id(arm.arm_id());
    reward->set_reward(1.0);
  }
  v1::ReportRewardResponse outcome;
  ASSERT_TRUE(Reward(report, &outcome).ok());
  EXPECT_EQ(outcome.outcome(), v1::ACCEPTED);
  ASSERT_EQ(outcome.arm_outcomes_size(), 2);
  ASSERT_TRUE(Reward(report, &outcome).ok());
  EXPECT_EQ(outcome.outcome(), v1::DUPLICATE);
  EXPECT_EQ(outcome.arm_outcomes(1).outcome(), v1::DUPLICATE);
}

// The evaluation share over gRPC: explored arms are flagged with the mixture's probability, a
// baseline_arm that is not a candidate is refused, and the estimates reach DescribeModel and the
// metrics.
TEST_F(ServerTest, EvaluationShareAndPolicyValues) {
  ModelOptions options;
  options.name = "default";
  options.evaluation_epsilon = 0.5;
  // A model whose fixed values call every reward noise: its "signal" check fails.
  ModelOptions deaf;
  deaf.name = "deaf";
  deaf.kernel_variance = 1e-4;
  deaf.ridge = 1.0;
  deaf.refit.enabled = false;
  StartServer({options, deaf}, /*with_metrics=*/true);
  v1::SelectArmRequest request = ThreeArms();
  request.set_baseline_arm("nope");
  v1::SelectArmResponse response;
  const grpc::Status refused = Select(request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("baseline_arm \"nope\""));
  request.set_baseline_arm(request.candidates(1).id());
  int explored = 0, ones = 0;
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(Select(request, &response).ok());
    ASSERT_EQ(response.arms_size(), 1);
    const v1::RankedArm& arm = response.arms(0);
    explored += arm.explored() ? 1 : 0;
    // The mixture's probability: (1 - 0.5) q + 0.5 / 3, q the policy's own (1 for its arm, 0
    // for another, a tie's share 1/2 or 1/3).
    ASSERT_TRUE(arm.has_selection_probability());
    const double q = (arm.selection_probability() - 0.5 / 3) / 0.5;
    EXPECT_TRUE(std::abs(q) < 1e-12 || std::abs(q - 1) < 1e-12 || std::abs(q - 0.5) < 1e-12 ||
                std::abs(q - 1.0 / 3) < 1e-12)
        << arm.selection_probability();
    if (!arm.explored()) {
      EXPECT_GT(q, 0.3) << "the policy's own arm";
    }
    v1::ReportRewardRequest report;
    report.set_event_id(response.event_id());
    report.set_reward(arm.candidate_index() == 2 ? 1.0 : 0.0);
    ones += arm.candidate_index() == 2 ? 1 : 0;
    v1::ReportRewardResponse outcome;
    ASSERT_TRUE(Reward(report, &outcome).ok());
  }
  EXPECT_GT(explored, 50);
  EXPECT_LT(explored, 150);
  (*server_->engine().FindModel(""))->WaitForFits();
  const v1::ModelDescription description = Describe();
  EXPECT_EQ(description.config().evaluation().epsilon(), 0.5);
  const v1::EvaluationSummary& evaluation = description.evaluation();
  EXPECT_EQ(evaluation.epsilon(), 0.5);
  EXPECT_EQ(evaluation.decisions_explored(), static_cast<uint64_t>(explored));
  ASSERT_EQ(evaluation.policies_size(), 4);
  const char* names[4] = {"deployed", "uniform", "greedy", "baseline"};
  for (int p = 0; p < 4; ++p) {
    const v1::PolicyValueEstimate& v = evaluation.policies(p);
    EXPECT_EQ(v.policy(), names[p]);
    EXPECT_EQ(v.decisions(), 200u);
    ASSERT_TRUE(v.has_ips() && v.has_snips() && v.has_dr()) << names[p];
    EXPECT_LT(v.dr().lower(), v.dr().estimate());
    EXPECT_LT(v.dr().estimate(), v.dr().upper());
    EXPECT_GE(v.effective_sample_size(), 10.0);
  }
  // The deployed policy earned what was reported; the greedy one learned candidate 2 (reward 1)
  // and the baseline, candidate 1, earns 0, which IPS sees exactly.
  EXPECT_NEAR(evaluation.policies(0).ips().estimate(), static_cast<double>(ones) / 200, 1e-12);
  EXPECT_GT(evaluation.policies(2).dr().estimate(), evaluation.policies(1).dr().upper());
  EXPECT_EQ(evaluation.policies(3).ips().estimate(), 0.0);
  EXPECT_LT(evaluation.policies(3).dr().estimate(), evaluation.policies(1).dr().lower());
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(metrics, HasSubstr("graphbandit_policy_value{bound=\"estimate\",estimator=\"dr\","
                                 "model=\"default\",policy=\"greedy\"}"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_policy_value_decisions{model=\"default\","
                                 "policy=\"uniform\"} 200"));

  // Learning health: every check passes for the model that learned candidate 2, whose recent
  // rewards lie above what the baseline (candidate 1, reward 0) earns.
  const v1::LearningHealth& learning = description.learning();
  EXPECT_TRUE(learning.healthy());
  ASSERT_EQ(learning.checks_size(), 4);
  EXPECT_EQ(learning.checks(3).name(), "reward_trend");
  EXPECT_GT(learning.recent_weight(), 150.0);
  EXPECT_GT(learning.recent_reward(), 0.3);
  EXPECT_LT(learning.recent_reward(), 1.0);
  ASSERT_TRUE(learning.has_signal_to_noise());
  EXPECT_GT(learning.signal_to_noise(), 0.05);
  EXPECT_NE(learning.last_fit(), "failed");
  EXPECT_THAT(metrics, HasSubstr("graphbandit_learning_healthy{check=\"signal\","
                                 "model=\"default\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_signal_to_noise{model=\"default\"}"));
  v1::SelectArmRequest deaf_request = ThreeArms();
  deaf_request.set_model("deaf");
  ASSERT_TRUE(Select(deaf_request, &response).ok());
  const v1::LearningHealth deaf_learning = Describe("deaf").learning();
  EXPECT_FALSE(deaf_learning.healthy());
  ASSERT_EQ(deaf_learning.checks_size(), 4);
  EXPECT_EQ(deaf_learning.checks(1).name(), "signal");
  EXPECT_FALSE(deaf_learning.checks(1).ok());
  EXPECT_THAT(deaf_learning.checks(1).problem(), HasSubstr("almost no signal"));
  EXPECT_THAT(ScrapeMetrics(), HasSubstr("graphbandit_learning_healthy{check=\"signal\","
                                         "model=\"deaf\"} 0"));
}

TEST_F(ServerTest, AdminCallsAndColdStartThroughAFriend) {
  v1::AddEdgesResponse added;
  ASSERT_NO_FATAL_FAILURE(TeachAliceThenBefriend(40, &added));
  EXPECT_EQ(added.added(), 1u);
  EXPECT_EQ(added.users_added(), 1u);
  EXPECT_EQ(added.edges(), 1u);
  v1::SelectArmResponse first_request;
  ASSERT_TRUE(Select(ThreeArms("newcomer"), &first_request).ok());
  EXPECT_EQ(first_request.arms(0).arm_id(), "b");
  EXPECT_GT(first_request.arms(0).mean(), 0.3);

  grpc::ClientContext list_context;
  WithDeadline(&list_context);
  v1::ListModelsResponse models;
  ASSERT_TRUE(admin_->ListModels(&list_context, v1::ListModelsRequest(), &models).ok());
  ASSERT_EQ(models.models_size(), 1);
  EXPECT_EQ(models.default_model(), "default");
  EXPECT_EQ(Describe().graph_components(), 1u);
}

// SelectArmRequest.explain: the parts add up to the mean, a newcomer's mean comes from its
// friend, a retry has no explanation, and a policy that cannot explain refuses before deciding.
TEST_F(ServerTest, ExplanationsAddUpAndNameWhoWeighs) {
  v1::AddEdgesResponse added;
  ASSERT_NO_FATAL_FAILURE(TeachAliceThenBefriend(30, &added));
  auto expect_adds_up = [](const v1::RankedArm& arm) {
    ASSERT_TRUE(arm.has_explanation());
    const v1::Explanation& e = arm.explanation();
    EXPECT_NEAR(e.shared() + e.own() + e.neighbours(), arm.mean(), 1e-9);
    EXPECT_NEAR(e.exploration_bonus(), arm.score() - arm.mean(), 1e-12);
    EXPECT_GT(e.exploration_bonus(), 0.0);
    EXPECT_LE(e.top_users_size(), 5);
    EXPECT_LE(e.top_decisions_size(), 5);
  };
  v1::SelectArmRequest request = ThreeArms("newcomer");
  request.set_explain(true);
  request.set_event_id("explained-1");
  v1::SelectArmResponse response;
  ASSERT_TRUE(Select(request, &response).ok());
  expect_adds_up(response.arms(0));
  const v1::Explanation& newcomer = response.arms(0).explanation();
  EXPECT_EQ(newcomer.own(), 0.0) << "no reward of its own yet";
  EXPECT_GT(newcomer.neighbours(), 0.1) << "alice's rewards, through the edge";
  // Other users are not named by default (ModelConfig.evaluation.explain_names_users).
  ASSERT_EQ(newcomer.top_users_size(), 1);
  EXPECT_EQ(newcomer.top_users(0).user_id(), "");
  EXPECT_GT(newcomer.top_users(0).user_factor(), 0.0);
  EXPECT_GT(newcomer.top_users(0).points(), 0);
  ASSERT_GE(newcomer.top_decisions_size(), 1);
  EXPECT_EQ(newcomer.top_decisions(0).user_id(), "");
  EXPECT_GT(newcomer.top_decisions(0).similarity(), 0.0);
  // A retry returns the stored decision, which keeps no explanation.
  v1::SelectArmResponse retry;
  ASSERT_TRUE(Select(request, &retry).ok());
  EXPECT_TRUE(retry.replayed());
  EXPECT_FALSE(retry.arms(0).has_explanation());
  // Every arm of a slate, for a user with rewards of its own.
  request = ThreeArms("alice");
  request.set_explain(true);
  request.set_slate_size(2);
  ASSERT_TRUE(Select(request, &response).ok());
  ASSERT_EQ(response.arms_size(), 2);
  for (const v1::RankedArm& arm : response.arms()) expect_adds_up(arm);
  EXPECT_NE(response.arms(0).explanation().own(), 0.0);
  ASSERT_GE(response.arms(0).explanation().top_users_size(), 1);
  EXPECT_EQ(response.arms(0).explanation().top_users(0).user_id(), "alice") << "her own id";

  // With explain_names_users, the newcomer hears from alice by name.
  ModelOptions named;
  named.name = "default";
  named.explain_names_users = true;
  StartServer({named}, /*with_metrics=*/false);
  ASSERT_NO_FATAL_FAILURE(TeachAliceThenBefriend(30, &added));
  request = ThreeArms("newcomer");
  request.set_explain(true);
  ASSERT_TRUE(Select(request, &response).ok());
  expect_adds_up(response.arms(0));
  ASSERT_EQ(response.arms(0).explanation().top_users_size(), 1);
  EXPECT_EQ(response.arms(0).explanation().top_users(0).user_id(), "alice");
  ASSERT_GE(response.arms(0).explanation().top_decisions_size(), 1);
  EXPECT_EQ(response.arms(0).explanation().top_decisions(0).user_id(), "alice");

  ModelOptions linear;
  linear.name = "default";
  linear.policy = PolicyKind::kLinUcbPerUser;
  StartServer({linear}, /*with_metrics=*/false);
  request = ThreeArms("alice");
  request.set_explain(true);
  request.set_event_id("explained-2");
  const grpc::Status refused = Select(request, &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("cannot be explained"));
  EXPECT_FALSE(Describe().dimensions_fixed()) << "refused before the request fixed anything";
  request.set_explain(false);
  ASSERT_TRUE(Select(request, &response).ok());
  EXPECT_FALSE(response.replayed()) << "the refused request decided nothing";
}

TEST_F(ServerTest, HealthReflectionAndMetrics) {
  StartServer({}, /*with_metrics=*/true);
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "graphbandit.v1.BanditService", "graphbandit.v1.AdminService"}) {
    grpc::ClientContext context;
    WithDeadline(&context);
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(health->Check(&context, request, &response).ok()) << service;
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }

  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(channel_);
  grpc::ClientContext context;
  WithDeadline(&context);
  auto stream = reflection->ServerReflectionInfo(&context);
  grpc::reflection::v1alpha::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  grpc::reflection::v1alpha::ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::vector<std::string> services;
  for (const auto& service : listed.list_services_response().service())
    services.push_back(service.name());
  EXPECT_THAT(services,
              ::testing::IsSupersetOf({"graphbandit.v1.BanditService",
                                       "graphbandit.v1.AdminService", "grpc.health.v1.Health"}));
  stream->WritesDone();
  stream->Finish();

  // Traffic, then the metrics it should have produced.
  v1::SelectArmResponse decision;
  ASSERT_TRUE(Select(ThreeArms(), &decision).ok());
  v1::ReportRewardRequest report;
  report.set_event_id(decision.event_id());
  report.set_reward(1.0);
  v1::ReportRewardResponse outcome;
  ASSERT_TRUE(Reward(report, &outcome).ok());
  v1::SelectArmRequest bad = ThreeArms();
  bad.clear_candidates();
  EXPECT_FALSE(Select(bad, &decision).ok());
  server_->engine().FindModel("").value()->WaitForWriter();
  server_->engine().FindModel("").value()->WaitForFits();
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(metrics,
              HasSubstr("graphbandit_rpc_requests_total{code=\"OK\",method=\"SelectArm\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_hyperparameter_fits_in_flight{model=\"default\"} 0"));
  // Nothing was behind: no decision waited under the learning-lag bound (engine_test shows one
  // that does).
  EXPECT_THAT(metrics, HasSubstr("graphbandit_decisions_paced_total{model=\"default\"} 0\n"));
  EXPECT_THAT(metrics,
              HasSubstr("graphbandit_decision_pacing_seconds_total{model=\"default\"} 0\n"));
  EXPECT_THAT(
      metrics,
      HasSubstr(
          "graphbandit_rpc_requests_total{code=\"INVALID_ARGUMENT\",method=\"SelectArm\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_rpc_duration_seconds_bucket{code=\"OK\",method="
                                 "\"ReportReward\",le=\"+Inf\"} 1"));
  EXPECT_THAT(metrics,
              HasSubstr("graphbandit_rewards_total{model=\"default\",outcome=\"accepted\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_dictionary_size{model=\"default\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_users{model=\"default\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_pending_decisions{model=\"default\"} 0"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_rewards_learned{model=\"default\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_decisions_total{model=\"default\"} 1"));
  // No user or event ids in labels.
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr("alice")));
  EXPECT_THAT(metrics, ::testing::Not(HasSubstr(decision.event_id())));

  // The process's CPU time and memory (the server runs in this test's process): the counter
  // grows by at least the CPU this thread burns between two scrapes.
  const auto value = [](const std::string& text, const std::string& name) {
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      if (!absl::StartsWith(line, name + " ")) continue;
      double v = 0.0;
      if (absl::SimpleAtod(line.substr(name.size() + 1), &v)) return v;
    }
    return -1.0;
  };
  const double cpu_before = value(metrics, "process_cpu_seconds_total");
  EXPECT_GT(cpu_before, 0.0);
  EXPECT_GT(value(metrics, "process_resident_memory_bytes"), 1e6);
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  timespec thread_start{}, thread_now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &thread_start);
  volatile double sink = 0.0;
  while (std::chrono::steady_clock::now() < spin_until) sink = sink + 1.0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &thread_now);
  const double burned = static_cast<double>(thread_now.tv_sec - thread_start.tv_sec) +
                        1e-9 * static_cast<double>(thread_now.tv_nsec - thread_start.tv_nsec);
  const double cpu_after = value(ScrapeMetrics(), "process_cpu_seconds_total");
  // getrusage counts in clock ticks on some kernels: allow one tick (10 ms) of rounding.
  EXPECT_GE(cpu_after - cpu_before, burned - 0.011)
      << "burned " << burned << " s of CPU in this thread";
}

TEST(ServerStartTest, ReportsBusyPortsClearly) {
  ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "127.0.0.1:0";
  auto first = GraphbanditServer::Start(options, *Engine::Open({}));
  ASSERT_TRUE(first.ok());
  ServerOptions clash;
  clash.listen = "127.0.0.1:0";
  clash.metrics_listen = absl::StrCat("127.0.0.1:", (*first)->metrics_port());
  auto second = GraphbanditServer::Start(clash, *Engine::Open({}));
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("cannot serve metrics"));
  clash.metrics_listen = "";
  clash.listen = absl::StrCat("127.0.0.1:", (*first)->grpc_port());
  auto third = GraphbanditServer::Start(clash, *Engine::Open({}));
  EXPECT_EQ(third.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(third.status().message()), HasSubstr("cannot listen for gRPC"));
}

}  // namespace
}  // namespace graphbandit::server
