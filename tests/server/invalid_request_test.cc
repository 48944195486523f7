// Invalid requests over a real gRPC channel on loopback: every malformed decision, reward and
// graph edit gets the status code and message that names its fault, inputs beyond the size
// limits are refused before they cost anything, and nothing refused is learned or recorded.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

TEST_F(ServerTest, EveryMalformedRequestGetsAPreciseStatus) {
  v1::SelectArmResponse ignored;
  ASSERT_TRUE(Select(ThreeArms(), &ignored).ok());  // fixes the dimensions: 0 context, 2 arms

  struct Case {
    const char* name;
    std::function<void(v1::SelectArmRequest&)> mutate;
    grpc::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"NaN feature",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(1)->set_features(0, NAN); },
       grpc::StatusCode::INVALID_ARGUMENT, "candidates[1] (\"b\") features[0] is NaN"},
      {"infinite feature",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(2)->set_features(1, INFINITY); },
       grpc::StatusCode::INVALID_ARGUMENT, "candidates[2] (\"c\") features[1] is infinite"},
      {"infinite context", [](v1::SelectArmRequest& r) { r.add_context(-INFINITY); },
       grpc::StatusCode::INVALID_ARGUMENT, "context has 1 values; model \"default\" expects 0"},
      {"wrong dimension",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(0)->add_features(3.0); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "candidates[0] (\"a\") has 3 features; model \"default\" expects 2"},
      {"no candidates", [](v1::SelectArmRequest& r) { r.clear_candidates(); },
       grpc::StatusCode::INVALID_ARGUMENT, "candidates must not be empty"},
      {"duplicate arm ids", [](v1::SelectArmRequest& r) { r.mutable_candidates(2)->set_id("a"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "duplicate arm id \"a\": candidates[0] and candidates[2]"},
      {"k larger than candidates", [](v1::SelectArmRequest& r) { r.set_slate_size(4); },
       grpc::StatusCode::INVALID_ARGUMENT, "slate_size 4 exceeds the number of candidates (3)"},
      {"k huge", [](v1::SelectArmRequest& r) { r.set_slate_size(4000000000u); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "slate_size 4000000000 exceeds the number of candidates (3)"},
      {"k max", [](v1::SelectArmRequest& r) { r.set_slate_size(4294967295u); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "slate_size 4294967295 exceeds the number of candidates (3)"},
      {"feature too large",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(0)->set_features(0, 2e6); },
       grpc::StatusCode::INVALID_ARGUMENT, "must lie in [-1e+06, 1e+06]"},
      {"missing user", [](v1::SelectArmRequest& r) { r.clear_user_id(); },
       grpc::StatusCode::INVALID_ARGUMENT, "user_id must not be empty"},
      {"unknown model", [](v1::SelectArmRequest& r) { r.set_model("nope"); },
       grpc::StatusCode::NOT_FOUND, "unknown model \"nope\""},
      {"huge feature",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(0)->set_features(1, -3e9); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "candidates[0] (\"a\") features[1] is -3e+09; feature values must lie in"},
      {"user id too long", [](v1::SelectArmRequest& r) { r.set_user_id(std::string(257, 'u')); },
       grpc::StatusCode::INVALID_ARGUMENT, "user_id is 257 bytes long; the limit is 256"},
      {"arm id too long",
       [](v1::SelectArmRequest& r) { r.mutable_candidates(1)->set_id(std::string(300, 'b')); },
       grpc::StatusCode::INVALID_ARGUMENT, "candidates[1].id is 300 bytes long"},
      {"empty arm id", [](v1::SelectArmRequest& r) { r.mutable_candidates(1)->clear_id(); },
       grpc::StatusCode::INVALID_ARGUMENT, "candidates[1].id must not be empty"},
      {"event id too long", [](v1::SelectArmRequest& r) { r.set_event_id(std::string(129, 'e')); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "event_id must be 1..128 printable ASCII characters, got 129 bytes"},
      {"event id not printable", [](v1::SelectArmRequest& r) { r.set_event_id("ev\n1"); },
       grpc::StatusCode::INVALID_ARGUMENT, "contains a byte outside printable ASCII"},
      {"too many candidates",
       [](v1::SelectArmRequest& r) {
         for (int i = 0; i < 1000; ++i) {
           v1::Arm* arm = r.add_candidates();
           arm->set_id(absl::StrCat("extra", i));
           arm->add_features(0.0);
           arm->add_features(1.0);
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "1003 candidates exceed model \"default\"'s limit of 1000 (limits.max_candidates)"},
  };
  for (const Case& c : cases) {
    v1::SelectArmRequest request = ThreeArms();
    c.mutate(request);
    v1::SelectArmResponse response;
    const grpc::Status status = Select(request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }

  // Rewards.
  v1::SelectArmResponse decision;
  ASSERT_TRUE(Select(ThreeArms(), &decision).ok());
  struct RewardCase {
    const char* name;
    std::function<void(v1::ReportRewardRequest&)> mutate;
    grpc::StatusCode code;
    const char* message;
  };
  const std::string event = decision.event_id();
  const std::vector<RewardCase> reward_cases = {
      {"NaN reward", [](v1::ReportRewardRequest& r) { r.set_reward(NAN); },
       grpc::StatusCode::INVALID_ARGUMENT, "reward is NaN"},
      {"no reward", [](v1::ReportRewardRequest& r) { r.clear_reward(); },
       grpc::StatusCode::INVALID_ARGUMENT, "no reward given"},
      {"both",
       [](v1::ReportRewardRequest& r) {
         auto* a = r.add_arm_rewards();
         a->set_arm_id("a");
         a->set_reward(1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "not both"},
      {"empty event", [](v1::ReportRewardRequest& r) { r.clear_event_id(); },
       grpc::StatusCode::INVALID_ARGUMENT, "event_id must not be empty"},
      {"unknown model", [](v1::ReportRewardRequest& r) { r.set_model("nope"); },
       grpc::StatusCode::NOT_FOUND, "unknown model"},
      {"infinite reward", [](v1::ReportRewardRequest& r) { r.set_reward(-INFINITY); },
       grpc::StatusCode::INVALID_ARGUMENT, "reward is infinite"},
      {"reward out of bounds", [](v1::ReportRewardRequest& r) { r.set_reward(2e9); },
       grpc::StatusCode::INVALID_ARGUMENT, "limits.reward_bound"},
      {"event id too long",
       [](v1::ReportRewardRequest& r) { r.set_event_id(std::string(200, 'e')); },
       grpc::StatusCode::INVALID_ARGUMENT, "got 200 bytes"},
      {"arm reward for an arm not returned",
       [](v1::ReportRewardRequest& r) {
         r.clear_reward();
         auto* a = r.add_arm_rewards();
         a->set_arm_id("zzz");
         a->set_reward(1);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "arm \"zzz\" was not returned"},
      {"arm reported twice",
       [](v1::ReportRewardRequest& r) {
         r.clear_reward();
         for (int i = 0; i < 2; ++i) {
           auto* a = r.add_arm_rewards();
           a->set_arm_id("a");
           a->set_reward(1);
         }
       },
       grpc::StatusCode::INVALID_ARGUMENT, "arm \"a\" is reported twice"},
      {"NaN arm reward",
       [](v1::ReportRewardRequest& r) {
         r.clear_reward();
         auto* a = r.add_arm_rewards();
         a->set_arm_id("a");
         a->set_reward(NAN);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "arm_rewards[0].reward is NaN"},
  };
  for (const RewardCase& c : reward_cases) {
    v1::ReportRewardRequest request;
    request.set_event_id(event);
    request.set_reward(1.0);
    c.mutate(request);
    v1::ReportRewardResponse response;
    const grpc::Status status = Reward(request, &response);
    EXPECT_EQ(status.error_code(), c.code) << c.name << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message)) << c.name;
  }
  v1::ReportRewardRequest unknown;
  unknown.set_event_id("never-issued");
  unknown.set_reward(1.0);
  v1::ReportRewardResponse unknown_response;
  ASSERT_TRUE(Reward(unknown, &unknown_response).ok());
  EXPECT_EQ(unknown_response.outcome(), v1::UNKNOWN_EVENT);

  // Graph edits.
  grpc::ClientContext context;
  WithDeadline(&context);
  v1::AddEdgesRequest edges;
  v1::Edge* self_loop = edges.add_edges();
  self_loop->set_user_a("x");
  self_loop->set_user_b("x");
  self_loop->set_weight(1.0);
  v1::AddEdgesResponse edges_response;
  const grpc::Status edge_status = admin_->AddEdges(&context, edges, &edges_response);
  EXPECT_EQ(edge_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(edge_status.error_message(), HasSubstr("edges[0] joins user \"x\" to itself"));
  for (double weight : {0.0, -1.0, 1e-9, 1e9, double(NAN), double(INFINITY)}) {
    grpc::ClientContext weight_context;
    WithDeadline(&weight_context);
    v1::AddEdgesRequest bad_weight;
    v1::Edge* edge = bad_weight.add_edges();
    edge->set_user_a("x");
    edge->set_user_b("y");
    edge->set_weight(weight);
    const grpc::Status status = admin_->AddEdges(&weight_context, bad_weight, &edges_response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << weight;
    EXPECT_THAT(status.error_message(), HasSubstr("edges[0].weight must lie in [1e-06, 1e+06]"))
        << weight;
  }

  // None of it was learned or recorded.
  const v1::ModelDescription description = Describe();
  EXPECT_EQ(description.rewards_learned(), 0u);
  EXPECT_EQ(description.decisions(), 2u);
  EXPECT_EQ(description.users(), 0u);
}

TEST_F(ServerTest, OversizedInputsAreRefusedBeforeTheyCostAnything) {
  ModelOptions tight;
  tight.max_graph_edits_per_call = 3;
  tight.max_feature_dim = 8;
  StartServer({tight}, /*with_metrics=*/false);
  // A message over the server's size limit (8 MiB) never reaches the service.
  v1::SelectArmRequest huge = ThreeArms();
  for (int i = 0; i < (9 << 20) / 9; ++i) huge.mutable_candidates(0)->add_features(0.5);
  v1::SelectArmResponse response;
  const grpc::Status too_big = Select(huge, &response);
  EXPECT_EQ(too_big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << too_big.error_message();
  // More features than limits.max_feature_dim.
  v1::SelectArmRequest wide;
  wide.set_user_id("alice");
  v1::Arm* arm = wide.add_candidates();
  arm->set_id("a");
  for (int i = 0; i < 9; ++i) arm->add_features(0.1);
  const grpc::Status too_wide = Select(wide, &response);
  EXPECT_EQ(too_wide.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(too_wide.error_message(),
              HasSubstr("candidates have 9 features; the limit is 8 (limits.max_feature_dim)"));
  // A graph edit with more edges than limits.max_graph_edits_per_call.
  grpc::ClientContext context;
  WithDeadline(&context);
  v1::AddEdgesRequest edges;
  for (int i = 0; i < 4; ++i) {
    v1::Edge* edge = edges.add_edges();
    edge->set_user_a(absl::StrCat("a", i));
    edge->set_user_b(absl::StrCat("b", i));
    edge->set_weight(1.0);
  }
  v1::AddEdgesResponse added;
  const grpc::Status too_many = admin_->AddEdges(&context, edges, &added);
  EXPECT_EQ(too_many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(
      too_many.error_message(),
      HasSubstr("4 edges exceed the limit of 3 per call (limits.max_graph_edits_per_call)"));
  const v1::ModelDescription description = Describe();
  EXPECT_EQ(description.decisions(), 0u);
  EXPECT_EQ(description.users(), 0u);
  EXPECT_FALSE(description.dimensions_fixed());
}
}  // namespace
}  // namespace graphbandit::server
