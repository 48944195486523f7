// A server on loopback with a gRPC channel and stubs to it, for the tests of tests/server/.
#ifndef GRAPHBANDIT_TESTS_SERVER_SERVER_FIXTURE_H_
#define GRAPHBANDIT_TESTS_SERVER_SERVER_FIXTURE_H_

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "server/server.h"

namespace graphbandit::server {

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer({}, /*with_metrics=*/false); }
  void TearDown() override {
    bandit_.reset();
    admin_.reset();
    channel_.reset();
    if (server_) server_->Shutdown(absl::Seconds(2));
  }

  // The metrics endpoint costs ~2 s at shutdown (CivetWeb's poll quantum): only when needed.
  // `server_options`' addresses are replaced by loopback ones.
  void StartServer(std::vector<ModelOptions> models, bool with_metrics,
                   const std::string& state_dir = "", ServerOptions server_options = {}) {
    if (server_) server_->Shutdown(absl::Seconds(2));
    EngineOptions options;
    options.models = std::move(models);
    options.state_dir = state_dir;
    auto engine = Engine::Open(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    server_options.listen = "127.0.0.1:0";
    server_options.metrics_listen = with_metrics ? "127.0.0.1:0" : "";
    auto server = GraphbanditServer::Start(server_options, *std::move(engine));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    bandit_ = v1::BanditService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(channel_);
  }

  static void WithDeadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  }

  grpc::Status Select(const v1::SelectArmRequest& request, v1::SelectArmResponse* response) {
    grpc::ClientContext context;
    WithDeadline(&context);
    return bandit_->SelectArm(&context, request, response);
  }
  grpc::Status Reward(const v1::ReportRewardRequest& request, v1::ReportRewardResponse* response) {
    grpc::ClientContext context;
    WithDeadline(&context);
    return bandit_->ReportReward(&context, request, response);
  }
  v1::ModelDescription Describe(const std::string& model = "") {
    grpc::ClientContext context;
    WithDeadline(&context);
    v1::DescribeModelRequest request;
    request.set_model(model);
    v1::ModelDescription description;
    EXPECT_TRUE(admin_->DescribeModel(&context, request, &description).ok());
    return description;
  }

  // Three candidates with 2 features each.
  static v1::SelectArmRequest ThreeArms(const std::string& user = "alice") {
    v1::SelectArmRequest request;
    request.set_user_id(user);
    const double features[3][2] = {{1.0, 0.0}, {0.0, 1.0}, {0.6, 0.8}};
    const char* ids[3] = {"a", "b", "c"};
    for (int i = 0; i < 3; ++i) {
      v1::Arm* arm = request.add_candidates();
      arm->set_id(ids[i]);
      arm->add_features(features[i][0]);
      arm->add_features(features[i][1]);
    }
    return request;
  }

  // `rounds` decisions for alice, rewarded 1 for arm "b" and 0 otherwise (none asks for an
  // explanation, and none has one); then an edge between her and a new user, "newcomer".
  void TeachAliceThenBefriend(int rounds, v1::AddEdgesResponse* added) {
    for (int round = 0; round < rounds; ++round) {
      v1::SelectArmResponse decision;
      ASSERT_TRUE(Select(ThreeArms("alice"), &decision).ok());
      EXPECT_FALSE(decision.arms(0).has_explanation());
      v1::ReportRewardRequest report;
      report.set_event_id(decision.event_id());
      report.set_reward(decision.arms(0).arm_id() == "b" ? 1.0 : 0.0);
      v1::ReportRewardResponse outcome;
      ASSERT_TRUE(Reward(report, &outcome).ok());
    }
    grpc::ClientContext context;
    WithDeadline(&context);
    v1::AddEdgesRequest edges;
    v1::Edge* edge = edges.add_edges();
    edge->set_user_a("newcomer");
    edge->set_user_b("alice");
    edge->set_weight(1.0);
    ASSERT_TRUE(admin_->AddEdges(&context, edges, added).ok());
  }

  // GET /metrics over a plain socket.
  std::string ScrapeMetrics() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->metrics_port()));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    EXPECT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
    std::string body;
    char buffer[4096];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) body.append(buffer, n);
    close(fd);
    return body;
  }

  std::unique_ptr<GraphbanditServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::BanditService::Stub> bandit_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_TESTS_SERVER_SERVER_FIXTURE_H_
