// Cluster mode on real NATS JetStream: three nats-server on loopback, and engines configured as
// the server configures them (a ServerConfig with a cluster block, through ToEngineOptions), each
// engine one node. Rewards go to another node than their decision, a NATS server is killed and
// restarted in the middle, and a node restarts from its snapshot: every acknowledged reward is
// learned exactly once on every node, and the nodes agree bit for bit.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/model/engine.h"
#include "server/config.h"
#include "tests/core/model/engine_test_util.h"
#include "tests/server/cluster/nats_cluster.h"

namespace graphbandit {
namespace {

using testing::NatsCluster;

bool Retryable(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status);
}

class ClusterEngineTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartAll()) << "nats-server did not start"; }

  std::unique_ptr<Engine> OpenNode(const std::string& id, const std::string& state_dir) {
    auto config = server::ParseServerConfig(
        absl::StrCat("cluster { node_id: \"", id, "\" nats_servers: [\"",
                     absl::StrJoin(cluster_.urls(), "\", \""),
                     "\"] stream_prefix: \"gbtest\" }\n"
                     "models { name: \"default\" ledger { reward_window_seconds: 600 } }\n"),
        "test.textproto");
    EXPECT_TRUE(config.ok()) << config.status();
    if (!config.ok()) return nullptr;
    auto options = server::ToEngineOptions(*config, state_dir);
    EXPECT_TRUE(options.ok()) << options.status();
    if (!options.ok()) return nullptr;
    options->run_sweeper = false;
    auto engine = Engine::Open(*std::move(options));
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? *std::move(engine) : nullptr;
  }

  NatsCluster cluster_{3};
};

Model& TheModel(Engine& engine) { return **engine.FindModel(""); }

// Retries a call that failed with a retryable status, as a client does (same request).
template <typename Call>
auto WithRetries(Call call) -> decltype(call()) {
  auto result = call();
  for (int attempt = 0; attempt < 100 && !result.ok() && Retryable(result.status()); ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    result = call();
  }
  return result;
}

std::vector<double> ProbeScores(Engine& engine, const std::string& tag) {
  std::vector<double> scores;
  for (const char* user : {"user0", "user3", "stranger"}) {
    OwnedRequest probe = ThreeArms(user);
    probe.slate_size = 3;
    probe.event_id = absl::StrCat("probe-", tag, "-", user);
    auto decision = WithRetries([&] { return engine.SelectArm(probe.View()); });
    EXPECT_TRUE(decision.ok()) << decision.status();
    if (!decision.ok()) continue;
    for (const ChosenArm& arm : decision->arms) {
      scores.push_back(arm.mean);
      scores.push_back(arm.stddev);
    }
  }
  return scores;
}

// Until no node has a fit running and both have applied the whole stream.
void Settle(Engine& a, Engine& b) {
  for (int round = 0; round < 20; ++round) {
    TheModel(a).WaitForFits();
    TheModel(b).WaitForFits();
    const uint64_t version =
        std::max(TheModel(a).Stats().shared_log_seq, TheModel(b).Stats().shared_log_seq);
    ASSERT_TRUE(TheModel(a).WaitForVersion(version, absl::Now() + absl::Seconds(60)).ok());
    ASSERT_TRUE(TheModel(b).WaitForVersion(version, absl::Now() + absl::Seconds(60)).ok());
    absl::SleepFor(absl::Milliseconds(300));  // a fit published meanwhile has arrived by now
    if (TheModel(a).Stats().shared_log_seq == version &&
        TheModel(b).Stats().shared_log_seq == version) {
      return;
    }
  }
  FAIL() << "the nodes kept publishing";
}

TEST_F(ClusterEngineTest, NodesLearnEachRewardOnceThroughTheLossOfANatsServerAndARestart) {
  TempDir dir_a, dir_b;
  auto a = OpenNode("node-a", dir_a.path());
  auto b = OpenNode("node-b", dir_b.path());
  ASSERT_TRUE(a && b);
  Engine* nodes[2] = {a.get(), b.get()};
  int rewarded = 0;
  auto drive = [&](int from, int to) {
    for (int round = from; round < to; ++round) {
      Engine& decider = *nodes[round % 2];
      Engine& rewarder = *nodes[(round + 1) % 2];
      OwnedRequest request = ThreeArms(absl::StrCat("user", round % 4));
      request.event_id = absl::StrCat("e", round);  // a client id: retries are safe
      auto decision = WithRetries([&] { return decider.SelectArm(request.View()); });
      ASSERT_TRUE(decision.ok()) << decision.status();
      const double reward = decision->arms[0].arm_id == "b" ? 0.8 : 0.1 * (round % 3);
      // A retried report whose first attempt reached the stream is a duplicate: acknowledged
      // either way, learned once.
      auto result = WithRetries([&] {
        return rewarder.ReportReward({decision->event_id, reward, {}, ""},
                                     absl::Now() + absl::Seconds(5));
      });
      ASSERT_TRUE(result.ok()) << result.status();
      ASSERT_TRUE(result->outcome == RewardOutcome::kAccepted ||
                  result->outcome == RewardOutcome::kDuplicate)
          << RewardOutcomeName(result->outcome);
      ++rewarded;
    }
  };
  ASSERT_NO_FATAL_FAILURE(drive(0, 20));
  cluster_.Stop(1, SIGKILL);  // one of the three NATS servers crashes
  ASSERT_NO_FATAL_FAILURE(drive(20, 40));
  ASSERT_TRUE(cluster_.Start(1));
  ASSERT_NO_FATAL_FAILURE(drive(40, 50));
  ASSERT_NO_FATAL_FAILURE(Settle(*a, *b));
  for (Engine* node : nodes) {
    EXPECT_EQ(TheModel(*node).View()->rewards_learned, rewarded);
    EXPECT_EQ(TheModel(*node).Stats().records_unreadable, 0);
  }
  EXPECT_EQ(TheModel(*a).View()->version, TheModel(*b).View()->version);
  EXPECT_EQ(ProbeScores(*a, "a1"), ProbeScores(*b, "b1"));

  // Node a restarts from its snapshot while b goes on.
  ASSERT_TRUE(TheModel(*a).Snapshot().ok());
  a.reset();
  nodes[0] = b.get();
  ASSERT_NO_FATAL_FAILURE(drive(50, 60));
  a = OpenNode("node-a", dir_a.path());
  ASSERT_TRUE(a);
  nodes[0] = a.get();
  EXPECT_GT(TheModel(*a).recovery().snapshot_seq, 0u);
  ASSERT_NO_FATAL_FAILURE(drive(60, 70));
  ASSERT_NO_FATAL_FAILURE(Settle(*a, *b));
  EXPECT_EQ(TheModel(*a).View()->rewards_learned, rewarded);
  EXPECT_EQ(TheModel(*b).View()->rewards_learned, rewarded);
  EXPECT_EQ(ProbeScores(*a, "a2"), ProbeScores(*b, "b2"));
}

TEST(ClusterConfigTest, ClusterSettingsAreChecked) {
  auto parse = [](const std::string& cluster) {
    auto config =
        server::ParseServerConfig(absl::StrCat("cluster { ", cluster, " }\n"), "t.textproto");
    EXPECT_TRUE(config.ok()) << config.status();
    return server::ToEngineOptions(*config, "");
  };
  EXPECT_TRUE(absl::IsInvalidArgument(parse("node_id: \"a\"").status()));  // no servers
  const std::string servers = "nats_servers: \"nats://127.0.0.1:4222\" ";
  EXPECT_TRUE(absl::IsInvalidArgument(parse(servers + "node_id: \"a\" replicas: 6").status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(parse(servers + "node_id: \"a\" stream_prefix: \"x.y\"").status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(parse(servers + "node_id: \"a\" expiry_grace_ms: 600001").status()));
  auto options = parse(servers + "node_id: \"a\" expiry_grace_ms: 500");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->node_id, "a");
  EXPECT_EQ(options->expiry_grace, absl::Milliseconds(500));
  EXPECT_TRUE(static_cast<bool>(options->shared_log));
  // The host name by default.
  options = parse(servers);
  ASSERT_TRUE(options.ok());
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(options->node_id, host);
  // The engine checks the node id.
  options = parse(servers + "node_id: \"a b\"");
  ASSERT_TRUE(options.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(Engine::Open(*std::move(options)).status()));
}

}  // namespace
}  // namespace graphbandit
