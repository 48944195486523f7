// What clients and operators see when a model's log cannot be written, over gRPC: SelectArm
// answers with logged: false, writes get UNAVAILABLE naming the cause, the model's health
// status (service name = model name) is NOT_SERVING and graphbandit_model_degraded shows why,
// until the model has repaired its log by itself. And draining: a health watcher hears
// NOT_SERVING before the port closes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/storage/fault_injection.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::testing::HasSubstr;

class DegradedServerTest : public ServerTest {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/degraded_server_test.XXXXXX";
    state_dir_ = mkdtemp(pattern.data());
    StartServer({}, /*with_metrics=*/true, state_dir_);
  }
  void TearDown() override {
    storage::SetLogFaultForTesting(nullptr);
    ServerTest::TearDown();
    std::filesystem::remove_all(state_dir_);
  }

  HealthCheckResponse::ServingStatus Health(const std::string& service) {
    auto stub = grpc::health::v1::Health::NewStub(channel_);
    grpc::ClientContext context;
    WithDeadline(&context);
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    const grpc::Status status = stub->Check(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  }

  // Polls the model's health until it is `want` (the server checks every 100 ms).
  bool WaitForHealth(const std::string& service, HealthCheckResponse::ServingStatus want) {
    for (int i = 0; i < 200; ++i) {
      if (Health(service) == want) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string state_dir_;
};

TEST_F(DegradedServerTest, AFullDiskIsToldToClientsHealthAndMetricsAndHealsItself) {
  std::atomic<bool> full{false};
  storage::SetLogFaultForTesting(
      [&full](storage::LogIo, const std::string&) { return full ? ENOSPC : 0; });
  v1::SelectArmResponse decided;
  ASSERT_TRUE(Select(ThreeArms(), &decided).ok());
  EXPECT_TRUE(decided.logged());
  EXPECT_EQ(Health("default"), HealthCheckResponse::SERVING);

  full = true;
  v1::ReportRewardRequest reward;
  reward.set_event_id(decided.event_id());
  reward.set_reward(1.0);
  v1::ReportRewardResponse rewarded;
  grpc::Status status = Reward(reward, &rewarded);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("No space left on device"));

  v1::SelectArmResponse unlogged;
  ASSERT_TRUE(Select(ThreeArms(), &unlogged).ok());
  EXPECT_FALSE(unlogged.logged());
  EXPECT_TRUE(WaitForHealth("default", HealthCheckResponse::NOT_SERVING));
  EXPECT_EQ(Health(""), HealthCheckResponse::SERVING);  // the server as a whole still answers
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(metrics,
              HasSubstr("graphbandit_model_degraded{model=\"default\",reason=\"disk_full\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("graphbandit_unlogged_decisions_total{model=\"default\"} 1"));

  full = false;
  EXPECT_TRUE(WaitForHealth("default", HealthCheckResponse::SERVING));
  status = Reward(reward, &rewarded);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(rewarded.outcome(), v1::ACCEPTED);
  EXPECT_THAT(ScrapeMetrics(),
              HasSubstr("graphbandit_model_degraded{model=\"default\",reason=\"\"} 0"));
}

// A disk whose syncs stall holds every reward's answer: at most --max_waiting_calls of them wait;
// the rest are refused at once instead of piling up, and are accepted again once the disk moves.
TEST_F(DegradedServerTest, RewardsWaitingForAStalledSyncAreBounded) {
  ServerOptions options;
  options.max_waiting_calls = 2;
  StartServer({}, /*with_metrics=*/false, state_dir_, options);
  constexpr int kRewards = 5;
  std::vector<std::string> events;
  for (int i = 0; i < kRewards; ++i) {
    v1::SelectArmResponse decided;
    ASSERT_TRUE(Select(ThreeArms(), &decided).ok());
    events.push_back(decided.event_id());
  }
  absl::Notification disk_moves;
  std::atomic<int> stalled{0};
  storage::SetLogFaultForTesting([&](storage::LogIo io, const std::string&) {
    if (io == storage::LogIo::kSync) {
      ++stalled;
      disk_moves.WaitForNotificationWithTimeout(absl::Seconds(30));
    }
    return 0;
  });
  std::vector<grpc::Status> statuses(kRewards);
  std::vector<v1::ReportRewardResponse> responses(kRewards);
  std::atomic<int> answered{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < kRewards; ++i) {
    callers.emplace_back([&, i] {
      v1::ReportRewardRequest reward;
      reward.set_event_id(events[i]);
      reward.set_reward(1.0);
      statuses[i] = Reward(reward, &responses[i]);
      ++answered;
    });
  }
  // Nothing is durable while the sync stalls, so only the refusals come back.
  for (int i = 0; i < 1000 && answered < kRewards - 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // no answer beyond them
  EXPECT_EQ(answered, kRewards - 2);
  EXPECT_GE(stalled, 1);
  disk_moves.Notify();
  for (std::thread& caller : callers) caller.join();
  int accepted = 0, refused = 0;
  for (int i = 0; i < kRewards; ++i) {
    if (statuses[i].ok()) {
      EXPECT_EQ(responses[i].outcome(), v1::ACCEPTED);
      ++accepted;
    } else {
      EXPECT_EQ(statuses[i].error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
      EXPECT_THAT(statuses[i].error_message(), HasSubstr("2 rewards waiting for their answer"));
      ++refused;
    }
  }
  EXPECT_EQ(accepted, 2);
  EXPECT_EQ(refused, kRewards - 2);
  // The answered ones gave their places back.
  for (int i = 0; i < kRewards; ++i) {
    if (statuses[i].ok()) continue;
    v1::ReportRewardRequest reward;
    reward.set_event_id(events[i]);
    reward.set_reward(1.0);
    v1::ReportRewardResponse rewarded;
    const grpc::Status status = Reward(reward, &rewarded);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(rewarded.outcome(), v1::ACCEPTED);
  }
}

TEST_F(DegradedServerTest, AHealthWatcherHearsNotServingBeforeThePortCloses) {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  HealthCheckRequest request;  // the server as a whole
  auto reader = stub->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  const std::string address = absl::StrCat("127.0.0.1:", server_->grpc_port());
  std::thread stopper([this] { server_->Shutdown(absl::Seconds(2)); });
  std::vector<HealthCheckResponse::ServingStatus> seen;
  grpc::Status checked_after_notice;
  HealthCheckResponse::ServingStatus status_after_notice = HealthCheckResponse::UNKNOWN;
  while (reader->Read(&response)) {
    seen.push_back(response.status());
    if (response.status() != HealthCheckResponse::NOT_SERVING || seen.size() > 1) continue;
    // Told NOT_SERVING: the port is still open, so a load balancer probing now hears it too
    // (instead of a refused connection it cannot tell from a crash).
    auto fresh = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext probe;
    probe.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
    HealthCheckResponse probed;
    checked_after_notice = fresh->Check(&probe, request, &probed);
    status_after_notice = probed.status();
  }
  stopper.join();
  ASSERT_FALSE(seen.empty()) << "the stream ended without a status change";
  EXPECT_EQ(seen.back(), HealthCheckResponse::NOT_SERVING);
  EXPECT_TRUE(checked_after_notice.ok()) << checked_after_notice.error_message();
  EXPECT_EQ(status_after_notice, HealthCheckResponse::NOT_SERVING);
  reader->Finish().IgnoreError();
  server_.reset();
}

// Damage in the middle of a log found at start is in the metrics, by kind: the damaged decision
// as lost, its intact reward as dropped.
TEST_F(DegradedServerTest, DamageFoundAtStartIsCountedInTheMetricsByKind) {
  for (int i = 0; i < 3; ++i) {
    v1::SelectArmResponse decided;
    ASSERT_TRUE(Select(ThreeArms(), &decided).ok());
    v1::ReportRewardRequest reward;
    reward.set_event_id(decided.event_id());
    reward.set_reward(1.0);
    v1::ReportRewardResponse rewarded;
    ASSERT_TRUE(Reward(reward, &rewarded).ok());
  }
  // What a kill -9 leaves: a copy of the state directory of the running server.
  const std::string crashed = state_dir_ + "-crash";
  std::filesystem::copy(state_dir_, crashed, std::filesystem::copy_options::recursive);
  std::string segment;
  for (const auto& entry : std::filesystem::directory_iterator(crashed + "/default")) {
    if (entry.path().filename().string().rfind("log-", 0) == 0) segment = entry.path();
  }
  ASSERT_FALSE(segment.empty());
  std::string bytes;
  {
    std::ifstream in(segment, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  // Walk the records (core/storage/log_format.h: 32-byte headers, the length at 8, the type at
  // 12) to the second decision (type 6), and damage a byte of its payload.
  size_t at = 8, decisions = 0, victim = 0;
  while (at + 32 <= bytes.size()) {
    const size_t length = static_cast<unsigned char>(bytes[at + 8]) |
                          static_cast<size_t>(static_cast<unsigned char>(bytes[at + 9])) << 8;
    if (bytes[at + 12] == 6 && ++decisions == 2) victim = at + 32 + length / 2;
    at += 32 + length;
  }
  ASSERT_GT(victim, 0u);
  bytes[victim] ^= 0x40;
  {
    std::ofstream out(segment, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  StartServer({}, /*with_metrics=*/true, crashed);
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(
      metrics,
      HasSubstr("graphbandit_recovery_records_lost{model=\"default\",kind=\"decision\"} 1"));
  EXPECT_THAT(
      metrics,
      HasSubstr("graphbandit_recovery_records_dropped{model=\"default\",kind=\"reward\"} 1"));
  EXPECT_EQ(Describe().rewards_learned(), 2u);
  server_->Shutdown(absl::Seconds(2));
  server_.reset();
  std::filesystem::remove_all(crashed);
}

}  // namespace
}  // namespace graphbandit::server
