// The replicated log (server/cluster/jetstream_log.h) against a real three-server JetStream
// cluster on loopback (Debian's nats-server).
#include "server/cluster/jetstream_log.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/cluster/nats_cluster.h"

namespace graphbandit::cluster {
namespace {

using ::graphbandit::testing::NatsCluster;

JetStreamLog::Options LogOptions(const NatsCluster& cluster,
                                 const std::string& stream = "GB_test") {
  JetStreamLog::Options options;
  options.servers = cluster.urls();
  options.stream = stream;
  options.subject = absl::StrCat("graphbandit.", stream, ".ops");
  options.replicas = 3;
  options.open_timeout = absl::Seconds(30);
  options.read_timeout = absl::Seconds(30);  // what the tests allowed before read_timeout existed
  return options;
}

std::string Payload(int i) {
  // Binary, with zero bytes: records are opaque.
  std::string payload = absl::StrCat("record-", i);
  payload.push_back('\0');
  payload.append(std::string(static_cast<size_t>(i % 7), static_cast<char>(i)));
  return payload;
}

// Reads `count` records from `first`, or fails the test.
std::vector<JetStreamLog::Record> ReadRecords(JetStreamLog& log, uint64_t first, int count) {
  std::vector<JetStreamLog::Record> records;
  auto reader = log.Read(first);
  EXPECT_TRUE(reader.ok()) << reader.status();
  if (!reader.ok()) return records;
  while (static_cast<int>(records.size()) < count) {
    auto record = (*reader)->Next(absl::Seconds(20));
    EXPECT_TRUE(record.ok()) << record.status() << " after " << records.size() << " records";
    if (!record.ok()) break;
    records.push_back(*std::move(record));
  }
  return records;
}

class JetStreamLogTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(cluster_.StartAll()) << "nats-server did not start"; }
  NatsCluster cluster_{3};
};

TEST_F(JetStreamLogTest, AppendsAreNumberedInOrderAndReadBackFromAnyPoint) {
  auto log = JetStreamLog::Open(LogOptions(cluster_));
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_TRUE((*log)->LastSeq().ok());
  EXPECT_EQ(*(*log)->LastSeq(), 0u);
  for (int i = 1; i <= 200; ++i) {
    auto appended = (*log)->Append(Payload(i), absl::StrCat("id-", i));
    ASSERT_TRUE(appended.ok()) << appended.status();
    EXPECT_EQ(appended->seq, static_cast<uint64_t>(i));
    EXPECT_FALSE(appended->duplicate);
  }
  EXPECT_EQ(*(*log)->LastSeq(), 200u);

  const auto all = ReadRecords(**log, 1, 200);
  ASSERT_EQ(all.size(), 200u);
  for (int i = 1; i <= 200; ++i) {
    EXPECT_EQ(all[i - 1].seq, static_cast<uint64_t>(i));
    EXPECT_EQ(all[i - 1].payload, Payload(i));
    EXPECT_EQ(all[i - 1].id, absl::StrCat("id-", i));
  }
  const auto tail = ReadRecords(**log, 150, 51);
  ASSERT_EQ(tail.size(), 51u);
  EXPECT_EQ(tail.front().seq, 150u);
  EXPECT_EQ(tail.front().payload, Payload(150));

  // A reader at the end waits, and sees what is appended later.
  auto reader = (*log)->Read(201);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE(absl::IsDeadlineExceeded((*reader)->Next(absl::Milliseconds(200)).status()));
  ASSERT_TRUE((*log)->Append(Payload(201), "id-201").ok());
  auto next = (*reader)->Next(absl::Seconds(20));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->seq, 201u);
  EXPECT_EQ(next->payload, Payload(201));
}

TEST_F(JetStreamLogTest, ARetriedAppendIsStoredOnce) {
  auto log = JetStreamLog::Open(LogOptions(cluster_));
  ASSERT_TRUE(log.ok()) << log.status();
  auto first = (*log)->Append("reward e1", "node-a/1");
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE((*log)->Append("reward e2", "node-a/2").ok());
  // The same id again (an answer lost, the append retried): the first copy's number.
  auto again = (*log)->Append("reward e1", "node-a/1");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->duplicate);
  EXPECT_EQ(again->seq, first->seq);
  EXPECT_EQ(*(*log)->LastSeq(), 2u);
  EXPECT_FALSE((*log)->Append("x", "").ok());
}

TEST_F(JetStreamLogTest, ConcurrentWritersOnTwoConnectionsGetOneTotalOrder) {
  auto a = JetStreamLog::Open(LogOptions(cluster_));
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = JetStreamLog::Open(LogOptions(cluster_));  // the stream exists now: used as it is
  ASSERT_TRUE(b.ok()) << b.status();
  constexpr int kPerWriter = 150;
  std::atomic<int> failures{0};
  auto write = [&](JetStreamLog* log, const std::string& node) {
    for (int i = 0; i < kPerWriter; ++i) {
      if (!log->Append(absl::StrCat(node, ":", i), absl::StrCat(node, "/", i)).ok()) ++failures;
    }
  };
  std::thread ta(write, a->get(), "a");
  std::thread tb(write, b->get(), "b");
  ta.join();
  tb.join();
  ASSERT_EQ(failures.load(), 0);
  // Both connections read the same sequence; each writer's records keep their own order.
  const auto from_a = ReadRecords(**a, 1, 2 * kPerWriter);
  const auto from_b = ReadRecords(**b, 1, 2 * kPerWriter);
  ASSERT_EQ(from_a.size(), 2u * kPerWriter);
  ASSERT_EQ(from_b.size(), 2u * kPerWriter);
  int next_a = 0, next_b = 0;
  for (size_t k = 0; k < from_a.size(); ++k) {
    EXPECT_EQ(from_a[k].payload, from_b[k].payload);
    if (from_a[k].payload == absl::StrCat("a:", next_a)) {
      ++next_a;
    } else {
      EXPECT_EQ(from_a[k].payload, absl::StrCat("b:", next_b));
      ++next_b;
    }
  }
  EXPECT_EQ(next_a, kPerWriter);
  EXPECT_EQ(next_b, kPerWriter);
}

TEST_F(JetStreamLogTest, AnExistingStreamWithOtherSettingsIsRefused) {
  auto log = JetStreamLog::Open(LogOptions(cluster_));
  ASSERT_TRUE(log.ok()) << log.status();
  JetStreamLog::Options other = LogOptions(cluster_);
  other.replicas = 1;
  auto refused = JetStreamLog::Open(other);
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
  EXPECT_NE(refused.status().message().find("3 replicas"), std::string::npos) << refused.status();

  JetStreamLog::Options bad = LogOptions(cluster_);
  bad.stream = "a.b";
  EXPECT_TRUE(absl::IsInvalidArgument(JetStreamLog::Open(bad).status()));
  bad = LogOptions(cluster_);
  bad.servers.clear();
  EXPECT_TRUE(absl::IsInvalidArgument(JetStreamLog::Open(bad).status()));
}

// A stream of three replicas keeps taking appends with one server killed; the killed server
// comes back with its store and readers on any connection see every record once, in order.
TEST_F(JetStreamLogTest, SurvivesTheLossOfOneServer) {
  auto log = JetStreamLog::Open(LogOptions(cluster_));
  ASSERT_TRUE(log.ok()) << log.status();
  int appended = 0;
  auto append_until = [&](int count) {
    while (appended < count) {
      const int i = appended + 1;
      // Retried with the same id while the cluster fails over: stored once whatever happens.
      absl::StatusOr<JetStreamLog::Appended> result;
      for (int attempt = 0; attempt < 100; ++attempt) {
        result = (*log)->Append(Payload(i), absl::StrCat("id-", i));
        if (result.ok()) break;
        ASSERT_TRUE(absl::IsUnavailable(result.status()) ||
                    absl::IsDeadlineExceeded(result.status()))
            << "not a retryable status: " << result.status();
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      ASSERT_TRUE(result.ok()) << result.status();
      ASSERT_EQ(result->seq, static_cast<uint64_t>(i));
      ++appended;
    }
  };
  // A restarted server counts towards the majority again once it has caught up.
  auto wait_until_healthy = [&] {
    for (int attempt = 0; attempt < 300; ++attempt) {  // up to 30 s
      auto replicas = (*log)->Replicas();
      if (replicas.ok() && replicas->healthy() && replicas->followers.size() == 2) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  };
  ASSERT_TRUE(wait_until_healthy());
  ASSERT_NO_FATAL_FAILURE(append_until(100));
  cluster_.Stop(0, SIGKILL);
  ASSERT_NO_FATAL_FAILURE(append_until(200));
  auto degraded = (*log)->Replicas();
  ASSERT_TRUE(degraded.ok()) << degraded.status();
  EXPECT_FALSE(degraded->healthy());  // one copy is missing
  ASSERT_TRUE(cluster_.Start(0));
  ASSERT_NO_FATAL_FAILURE(append_until(300));
  ASSERT_TRUE(wait_until_healthy());
  cluster_.Stop(2, SIGKILL);
  ASSERT_NO_FATAL_FAILURE(append_until(400));
  ASSERT_TRUE(cluster_.Start(2));

  const auto records = ReadRecords(**log, 1, 400);
  ASSERT_EQ(records.size(), 400u);
  for (int i = 1; i <= 400; ++i) {
    ASSERT_EQ(records[i - 1].seq, static_cast<uint64_t>(i));
    ASSERT_EQ(records[i - 1].payload, Payload(i));
  }
  EXPECT_EQ(*(*log)->LastSeq(), 400u);
}

}  // namespace
}  // namespace graphbandit::cluster
