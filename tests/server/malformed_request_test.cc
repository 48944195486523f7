// Request bodies that cannot be parsed (not protobuf, or a string field that is not UTF-8) get
// INVALID_ARGUMENT naming the request type and field, are counted in the RPC metrics like any
// other failure, are logged at most once per interval, and leave the server answering.
#include <gmock/gmock.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <future>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "core/base/log.h"
#include "server/malformed_requests.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

// Sends `body` as the request of `method` ("/graphbandit.v1.BanditService/SelectArm").
grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& body) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  return done.get_future().get();
}

// The value of one series of graphbandit_rpc_requests_total (0 when absent).
double RpcCount(const std::string& metrics, const std::string& method, const std::string& code) {
  const std::regex series("graphbandit_rpc_requests_total\\{code=\"" + code + "\",method=\"" +
                          method + "\"\\} ([0-9.e+]+)");
  std::smatch match;
  return std::regex_search(metrics, match, series) ? std::stod(match[1]) : 0.0;
}

// Collects what the server logs.
class LogCapture {
 public:
  LogCapture() {
    SetLogSink([this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    });
  }
  ~LogCapture() { SetLogSink(nullptr); }
  std::vector<std::string> lines() {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> lines_;
};

const char* const kMethods[][2] = {
    {"/graphbandit.v1.BanditService/SelectArm", "graphbandit.v1.SelectArmRequest"},
    {"/graphbandit.v1.BanditService/ReportReward", "graphbandit.v1.ReportRewardRequest"},
    {"/graphbandit.v1.AdminService/AddUsers", "graphbandit.v1.AddUsersRequest"},
    {"/graphbandit.v1.AdminService/AddEdges", "graphbandit.v1.AddEdgesRequest"},
    {"/graphbandit.v1.AdminService/RemoveEdges", "graphbandit.v1.RemoveEdgesRequest"},
    {"/graphbandit.v1.AdminService/DescribeModel", "graphbandit.v1.DescribeModelRequest"},
    {"/graphbandit.v1.AdminService/ListModels", "graphbandit.v1.ListModelsRequest"},
};

class MalformedRequestTest : public ServerTest {
 protected:
  void SetUp() override { StartServer({}, /*with_metrics=*/true); }
};

TEST_F(MalformedRequestTest, GarbageBodiesAreInvalidArgumentCountedAndLoggedSparingly) {
  LogCapture log;
  const std::string before = ScrapeMetrics();
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    for (const auto& [method, type] : kMethods) {
      const grpc::Status status = CallRaw(channel_, method, "\xff\xff\xff");
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << method;
      EXPECT_EQ(status.error_message(),
                std::string("the request body could not be parsed as ") + type +
                    ": it is not a valid protobuf encoding of that message");
    }
  }
  const std::string after = ScrapeMetrics();
  for (const auto& [method, type] : kMethods) {
    const std::string name = std::string(method).substr(std::string(method).rfind('/') + 1);
    EXPECT_EQ(
        RpcCount(after, name, "INVALID_ARGUMENT") - RpcCount(before, name, "INVALID_ARGUMENT"),
        kRounds)
        << name;
  }
  // 140 bad requests within a few seconds: a line per 10 s interval (one, or two if the
  // requests straddled an interval on a slow machine), not 140.
  int unparseable_lines = 0;
  for (const std::string& line : log.lines()) {
    unparseable_lines += line.find("unparseable request") != std::string::npos;
  }
  EXPECT_GE(unparseable_lines, 1);
  EXPECT_LE(unparseable_lines, 2);

  // The server still answers.
  v1::SelectArmResponse response;
  EXPECT_TRUE(Select(ThreeArms(), &response).ok());
}

TEST_F(MalformedRequestTest, AStringFieldThatIsNotUtf8IsNamed) {
  LogCapture log;
  // A valid request with "alice" as user id, then the id's bytes replaced by invalid UTF-8.
  std::string body = ThreeArms("alice").SerializeAsString();
  body = absl::StrReplaceAll(body, {{"alice", std::string("\xc3\x28lic", 5)}});
  grpc::Status status = CallRaw(channel_, kMethods[0][0], body);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "the request body could not be parsed as graphbandit.v1.SelectArmRequest: string "
            "field graphbandit.v1.SelectArmRequest.user_id is not valid UTF-8");

  v1::ReportRewardRequest reward;
  reward.set_event_id("event-1");
  reward.set_reward(1.0);
  body = absl::StrReplaceAll(reward.SerializeAsString(), {{"event-1", "event-\xff"}});
  status = CallRaw(channel_, kMethods[1][0], body);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("string field graphbandit.v1.ReportRewardRequest.event_id is not valid "
                        "UTF-8"));
  // protobuf's own line per request is not written; the interceptor's (rate-limited) one is.
  for (const std::string& line : log.lines())
    EXPECT_THAT(line, ::testing::Not(HasSubstr("UTF-8 data")));

  // A valid request right after, on the same server, is unaffected (no stale parse error).
  v1::SelectArmResponse response;
  EXPECT_TRUE(Select(ThreeArms(), &response).ok());
}

TEST(RateLimitedLogTest, OneLinePerIntervalWithTheCountOfTheOthers) {
  LogCapture log;
  RateLimitedLog limited(absl::Milliseconds(300));
  for (int i = 0; i < 5; ++i) limited.Report("bad");
  EXPECT_EQ(limited.suppressed(), 4);
  absl::SleepFor(absl::Milliseconds(350));
  limited.Report("bad again");
  const std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "bad");
  EXPECT_THAT(lines[1], HasSubstr("bad again (and 4 more like it"));
  EXPECT_EQ(limited.suppressed(), 0);
}

}  // namespace
}  // namespace graphbandit::server
