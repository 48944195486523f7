// Personalizer's v1.0 REST API (server/personalizer_http.h) through an HTTP client: rank, reward
// and activate with their statuses and bodies, the key, every refusal as Personalizer's error
// body with the field named, the user id feature, retries, metrics, 503 while draining, and a
// task with categorical features learned through it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "graphbandit/personalizer/v1/personalizer.pb.h"
#include "tests/server/server_fixture.h"
// After Eigen (through the fixture): httplib.h brings <resolv.h>, whose macro _res breaks
// Eigen's headers.
#include <httplib.h>  // NOLINT(build/include_order)

namespace graphbandit::server {
namespace {

namespace pz = ::graphbandit::personalizer::v1;
using ::testing::HasSubstr;

constexpr char kKey[] = "0123456789abcdef";

class PersonalizerHttpTest : public ServerTest {
 protected:
  void SetUp() override { StartHttp(/*with_metrics=*/false); }

  void StartHttp(bool with_metrics) {
    ServerOptions options;
    options.http_listen = "127.0.0.1:0";
    options.bandit_token = kKey;
    StartServer({}, with_metrics, "", options);
    ASSERT_GT(server_->http_port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    client_->set_read_timeout(10, 0);
    client_->set_tcp_nodelay(true);
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       const std::string& key = kKey) {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Ocp-Apim-Subscription-Key", key);
    return client_->Post(absl::StrCat("/personalizer/v1.0", path), headers, body,
                         "application/json");
  }

  // The error body of a refused call, checked to be Personalizer's.
  static pz::ErrorResponse ErrorOf(const httplib::Result& result) {
    pz::ErrorResponse error;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result->body, &error).ok())
        << result->body;
    EXPECT_EQ(result->get_header_value("Content-Type"), "application/json; charset=utf-8");
    return error;
  }

  void ExpectRefused(const httplib::Result& result, int status, const std::string& code,
                     const std::string& text) {
    ASSERT_TRUE(result) << httplib::to_string(result.error());
    EXPECT_EQ(result->status, status) << result->body;
    const pz::ErrorResponse error = ErrorOf(result);
    EXPECT_EQ(error.error().code(), code) << result->body;
    EXPECT_THAT(error.error().message(), HasSubstr(text));
  }

  static pz::RankResponse RankOf(const httplib::Result& result) {
    pz::RankResponse rank;
    EXPECT_TRUE(result);
    if (!result) return rank;
    EXPECT_EQ(result->status, 201) << result->body;
    EXPECT_TRUE(google::protobuf::util::JsonStringToMessage(result->body, &rank).ok())
        << result->body;
    return rank;
  }

  // The model learns on its writer thread: waits (at most 10 s) until it has learned `n`
  // rewards, and returns how many it has.
  uint64_t AwaitLearned(uint64_t n) {
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    uint64_t learned = Describe().rewards_learned();
    while (learned < n && absl::Now() < give_up) {
      absl::SleepFor(absl::Milliseconds(10));
      learned = Describe().rewards_learned();
    }
    return learned;
  }

  // Writes `request` on a fresh connection, then reads the answer until the server closes it
  // or 2 s pass.
  std::string RawExchange(const std::string& request) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
    timeval timeout{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    (void)!write(fd, request.data(), request.size());
    std::string answer;
    char buffer[4096];
    for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) answer.append(buffer, n);
    close(fd);
    return answer;
  }

  std::unique_ptr<httplib::Client> client_;
};

const char* const kDevices[] = {"phone", "tablet", "desktop"};
const char* const kItems[] = {"news", "video", "game"};

// A rank body for the device task: the best item depends on the device only.
std::string DeviceRank(int device, const std::string& user, const std::string& event_id) {
  std::string context = absl::StrFormat(R"({"device": {"type": "%s", "inches": %d}})",
                                        kDevices[device], device == 0 ? 6 : 10 + device * 7);
  if (!user.empty()) context = absl::StrFormat(R"({"_userId": "%s"}, %s)", user, context);
  std::string actions;
  for (int i = 0; i < 3; ++i) {
    absl::StrAppendFormat(&actions,
                          R"(%s{"id": "%s", "features": [{"kind": "%s"}, )"
                          R"({"tags": ["%s"]}]})",
                          i > 0 ? ", " : "", kItems[i], kItems[i],
                          i == 2 ? "interactive" : "passive");
  }
  std::string body =
      absl::StrFormat(R"({"contextFeatures": [%s], "actions": [%s])", context, actions);
  if (!event_id.empty()) absl::StrAppendFormat(&body, R"(, "eventId": "%s")", event_id);
  return body + "}";
}

TEST_F(PersonalizerHttpTest, RankRewardAndActivateAnswerAsPersonalizerDoes) {
  const std::string body =
      R"({"contextFeatures": [{"timeOfDay": "Morning"}, {"device": {"os": "ios"}}],
          "actions": [{"id": "news", "features": [{"topic": "politics"}]},
                      {"id": "sports", "features": [{"topic": "football", "minutes": 3}]},
                      {"id": "music", "features": [{"topic": "jazz"}]}],
          "excludedActions": ["news"], "eventId": "event-1"})";
  const pz::RankResponse rank = RankOf(Post("/rank", body));
  ASSERT_EQ(rank.ranking_size(), 3);
  EXPECT_EQ(rank.event_id(), "event-1");
  EXPECT_EQ(rank.reward_action_id(), rank.ranking(0).id());
  EXPECT_NE(rank.ranking(0).id(), "news");
  EXPECT_EQ(rank.ranking(2).id(), "news");  // excluded: last, never chosen
  EXPECT_EQ(rank.ranking(2).probability(), 0.0);
  double total = 0.0;
  for (const pz::RankedAction& action : rank.ranking()) {
    EXPECT_GE(action.probability(), 0.0);
    total += action.probability();
  }
  EXPECT_NEAR(total, 1.0, 1e-12);
  EXPECT_EQ(Describe().decisions(), 1u);

  auto reward = Post("/events/event-1/reward", R"({"value": 1.0})");
  ASSERT_TRUE(reward);
  EXPECT_EQ(reward->status, 204) << reward->body;
  EXPECT_TRUE(reward->body.empty());
  EXPECT_EQ(AwaitLearned(1), 1u);  // FIRST aggregation: learned at once
  // A repeated reward is a duplicate, answered like Personalizer: 204, and not learned (the
  // next event's reward is learned after it would have been).
  ASSERT_EQ(Post("/events/event-1/reward", R"({"value": 0.0})")->status, 204);

  auto activate = Post("/events/event-1/activate", "");
  ASSERT_TRUE(activate);
  EXPECT_EQ(activate->status, 204) << activate->body;

  ExpectRefused(Post("/events/never-ranked/reward", R"({"value": 1})"), 404, "ResourceNotFound",
                "no event \"never-ranked\" is known");
  ExpectRefused(Post("/events/never-ranked/activate", ""), 404, "ResourceNotFound",
                "no event \"never-ranked\" is known");
  // An id no event can have is the caller's error, as for a reward.
  ExpectRefused(Post(absl::StrCat("/events/", std::string(200, 'e'), "/activate"), ""), 400,
                "BadRequest", "event_id must be 1..128");

  // Without an eventId, one is made and returned.
  const pz::RankResponse generated = RankOf(Post("/rank", DeviceRank(0, "", "")));
  EXPECT_FALSE(generated.event_id().empty());
  ASSERT_EQ(
      Post(absl::StrCat("/events/", generated.event_id(), "/reward"), R"({"value": 0.5})")->status,
      204);
}

TEST_F(PersonalizerHttpTest, ADeferredEventIsLearnedFromOnlyOnceActivated) {
  auto rank = [&](const std::string& event_id, bool deferred) {
    std::string body = DeviceRank(0, "", event_id);
    body.pop_back();
    return RankOf(Post("/rank", body + (deferred ? R"(, "deferActivation": true})" : "}")));
  };
  rank("shown-later", true);
  rank("never-shown", true);
  ASSERT_EQ(Post("/events/shown-later/reward", R"({"value": 1})")->status, 204);
  ASSERT_EQ(Post("/events/never-shown/reward", R"({"value": 1})")->status, 204);
  // An event ranked after them, not deferred, is learned at once; the held rewards, logged
  // before it, are not.
  rank("plain", false);
  ASSERT_EQ(Post("/events/plain/reward", R"({"value": 0})")->status, 204);
  EXPECT_EQ(AwaitLearned(1), 1u);
  auto activate = Post("/events/shown-later/activate", "");
  ASSERT_TRUE(activate);
  EXPECT_EQ(activate->status, 204) << activate->body;
  EXPECT_TRUE(activate->body.empty());
  EXPECT_EQ(AwaitLearned(2), 2u);
  // Again, or for an event that was never deferred: nothing more to learn.
  ASSERT_EQ(Post("/events/shown-later/activate", "")->status, 204);
  ASSERT_EQ(Post("/events/plain/activate", "")->status, 204);
  rank("after", false);
  ASSERT_EQ(Post("/events/after/reward", R"({"value": 0})")->status, 204);
  EXPECT_EQ(AwaitLearned(3), 3u);  // not 4: "shown-later" once, "never-shown" not at all
}

TEST_F(PersonalizerHttpTest, ActionsWithoutFeaturesAreRankedByAFreshModel) {
  // The first request gives the model its named inputs even when it carries no feature.
  const pz::RankResponse rank =
      RankOf(Post("/rank", R"({"actions": [{"id": "a"}, {"id": "b", "features": []}]})"));
  EXPECT_EQ(rank.ranking_size(), 2);
  EXPECT_EQ(Describe().context_features().slots(), 64u);
  const pz::RankResponse named = RankOf(Post("/rank", DeviceRank(1, "", "")));
  EXPECT_EQ(named.ranking_size(), 3);
}

TEST_F(PersonalizerHttpTest, TheKeyIsChecked) {
  const std::string body = DeviceRank(0, "", "");
  ExpectRefused(Post("/rank", body, ""), 401, "Unauthorized", "Ocp-Apim-Subscription-Key");
  ExpectRefused(Post("/rank", body, "wrong-key"), 401, "Unauthorized", "access denied");
  ExpectRefused(Post("/events/x/reward", R"({"value": 1})", "wrong-key"), 401, "Unauthorized",
                "access denied");
  EXPECT_EQ(Describe().decisions(), 0u);
  httplib::Headers bearer = {{"Authorization", absl::StrCat("Bearer ", kKey)}};
  auto result = client_->Post("/personalizer/v1.0/rank", bearer, body, "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 201) << result->body;
  httplib::Headers wrong_bearer = {{"Authorization", "Bearer nope"}};
  ExpectRefused(client_->Post("/personalizer/v1.0/rank", wrong_bearer, body, "application/json"),
                401, "Unauthorized", "access denied");
}

TEST_F(PersonalizerHttpTest, BadBodiesAreBadRequestsNamingTheField) {
  ExpectRefused(Post("/rank", "{not json"), 400, "BadRequest", "the body is not a valid request");
  ExpectRefused(Post("/rank", R"({"actions": 3})"), 400, "BadRequest", "actions");
  ExpectRefused(client_->Post("/personalizer/v1.0/rank", {{"Ocp-Apim-Subscription-Key", kKey}},
                              DeviceRank(0, "", ""), "text/plain"),
                400, "BadRequest", "Content-Type application/json");
  ExpectRefused(Post("/rank", R"({"actions": []})"), 400, "BadRequest",
                "actions must not be empty");
  // The reward's path could not name it.
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}], "eventId": "a/b"})"), 400, "BadRequest",
                "eventId \"a/b\" must not contain '/'");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}, {"id": ""}]})"), 400, "BadRequest",
                "actions[1].id is empty");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}, {"id": "b"}, {"id": "a"}]})"), 400,
                "BadRequest", "actions[2].id \"a\" repeats actions[0]");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}], "excludedActions": ["b"]})"), 400,
                "BadRequest", "excludedActions[0] \"b\" is not an action");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}], "excludedActions": ["a"]})"), 400,
                "BadRequest", "every action is in excludedActions");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a", "features": [{"x": [{"y": 1}]}]}]})"),
                400, "BadRequest", "actions[0].features[0].x");
  ExpectRefused(Post("/rank", R"({"contextFeatures": [{"_userId": 7}], "actions": [{"id": "a"}]})"),
                400, "BadRequest", "contextFeatures[0]._userId must be a non-empty string");
  ExpectRefused(Post("/rank", absl::StrCat(R"({"contextFeatures": [{"n": {"long": "x"}}],)",
                                           R"( "actions": [{"id": "a", "features": [{")",
                                           std::string(300, 'k'), R"(": 1}]}]})")),
                400, "BadRequest", "at most 256");
  ExpectRefused(Post("/rank", R"({"actions": [{"id": "a"}], "deferActivation": "soon"})"), 400,
                "BadRequest", "not a valid request");
  ExpectRefused(Post("/events/x/reward", R"({})"), 400, "BadRequest", "value is missing");
  ExpectRefused(Post("/events/x/reward", R"({"value": "NaN"})"), 400, "BadRequest",
                "value must be a finite number");
  ExpectRefused(Post("/events/x/reward", R"({"value": "high"})"), 400, "BadRequest",
                "not a valid request");
  ExpectRefused(Post("/nothing-here", "{}"), 404, "ResourceNotFound",
                "no such operation: POST /personalizer/v1.0/nothing-here");
  ExpectRefused(client_->Get("/personalizer/v1.0/rank", {{"Ocp-Apim-Subscription-Key", kKey}}), 404,
                "ResourceNotFound", "no such operation: GET");
  EXPECT_EQ(Describe().decisions(), 0u);  // nothing refused was decided
}

TEST_F(PersonalizerHttpTest, BodiesTheHeadersDoNotBoundAreRefusedBeforeTheyAreRead) {
  // Chunked: refused (411) from its headers, the first chunk of an endless body sent; without
  // the key, 401 first. Over a raw socket: the client sees the answer while it still writes.
  const auto chunked = [this](const std::string& key) {
    std::string request = absl::StrCat(
        "POST /personalizer/v1.0/rank HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        key.empty() ? "" : absl::StrCat("Ocp-Apim-Subscription-Key: ", key, "\r\n"),
        "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n10000\r\n",
        std::string(1 << 16, ' '), "\r\n");
    return RawExchange(request);
  };
  std::string answer = chunked(kKey);
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 411"));
  EXPECT_THAT(answer, HasSubstr("a chunked body is not accepted"));
  answer = chunked("");
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(answer, HasSubstr(R"("code":"Unauthorized")"));
  httplib::Headers gzip = {{"Ocp-Apim-Subscription-Key", kKey}, {"Content-Encoding", "gzip"}};
  ExpectRefused(client_->Post("/personalizer/v1.0/rank", gzip, "\x1f\x8b", "application/json"), 400,
                "BadRequest", "Content-Encoding gzip is not accepted");
  // A body over the limit (4 MiB) with its length.
  ExpectRefused(Post("/rank", std::string(5 << 20, ' ')), 413, "BadRequest", "too large");
  EXPECT_EQ(Describe().decisions(), 0u);
}

TEST_F(PersonalizerHttpTest, AnIdleConnectionDoesNotHoldTheShutdown) {
  // A client connected and silent: the shutdown ends it (2 s without a byte) and is clean.
  httplib::Client idle("127.0.0.1", server_->http_port());
  ASSERT_EQ(Post("/rank", DeviceRank(0, "", "")).value().status, 201);  // keep-alive, now idle
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(server_->Shutdown(absl::Seconds(10)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  server_.reset();
  close(fd);
}

TEST_F(PersonalizerHttpTest, ARetryGetsTheSameAnswerAndAReusedEventIdIsAConflict) {
  const pz::RankResponse first = RankOf(Post("/rank", DeviceRank(1, "ann", "retried")));
  const pz::RankResponse again = RankOf(Post("/rank", DeviceRank(1, "ann", "retried")));
  EXPECT_EQ(again.reward_action_id(), first.reward_action_id());
  EXPECT_EQ(again.ranking_size(), first.ranking_size());
  EXPECT_EQ(Describe().decisions(), 1u);
  ExpectRefused(Post("/rank", DeviceRank(2, "ann", "retried")), 409, "Conflict", "retried");
}

TEST_F(PersonalizerHttpTest, TheUserIdFeatureNamesTheUserOfTheGraph) {
  ASSERT_EQ(Describe().users(), 0u);
  for (const char* user : {"ann", "bob", "ann"}) {
    const pz::RankResponse rank = RankOf(
        Post("/rank", DeviceRank(0, user, absl::StrCat("u-", user, Describe().decisions()))));
    ASSERT_EQ(Post(absl::StrCat("/events/", rank.event_id(), "/reward"), R"({"value": 1})")->status,
              204);
  }
  ASSERT_EQ(AwaitLearned(3), 3u);
  EXPECT_EQ(Describe().users(), 2u);  // ann and bob; "_userId" is not a feature
  EXPECT_EQ(Describe().context_features().distinct_keys(), 2u);  // device.type, device.inches
  // Without it, every request is the one default user.
  for (int i = 0; i < 2; ++i) {
    const pz::RankResponse rank = RankOf(Post("/rank", DeviceRank(1, "", "")));
    ASSERT_EQ(Post(absl::StrCat("/events/", rank.event_id(), "/reward"), R"({"value": 1})")->status,
              204);
  }
  ASSERT_EQ(AwaitLearned(5), 5u);
  EXPECT_EQ(Describe().users(), 3u);
}

TEST_F(PersonalizerHttpTest, ACategoricalTaskIsLearnedThroughTheRestApi) {
  int best_late = 0;
  constexpr int kRounds = 240, kLate = 60;
  for (int round = 0; round < kRounds; ++round) {
    const int device = round % 3;
    const pz::RankResponse rank = RankOf(Post("/rank", DeviceRank(device, "", "")));
    int chosen = 0;
    while (chosen < 3 && kItems[chosen] != rank.reward_action_id()) ++chosen;
    ASSERT_LT(chosen, 3) << rank.reward_action_id();
    if (round >= kRounds - kLate && chosen == device) ++best_late;
    auto reward = Post(absl::StrCat("/events/", rank.event_id(), "/reward"),
                       absl::StrFormat(R"({"value": %g})", chosen == device ? 0.9 : 0.2));
    ASSERT_TRUE(reward);
    ASSERT_EQ(reward->status, 204) << reward->body;
  }
  EXPECT_GE(best_late, kLate * 8 / 10) << best_late << " of " << kLate;
}

TEST_F(PersonalizerHttpTest, CallsAreCountedByMethodAndRefusedWithServiceUnavailableWhileDraining) {
  StartHttp(/*with_metrics=*/true);
  const pz::RankResponse rank = RankOf(Post("/rank", DeviceRank(0, "", "m")));
  ASSERT_EQ(Post("/events/m/reward", R"({"value": 1})")->status, 204);
  ASSERT_EQ(Post("/events/m/activate", "")->status, 204);
  ASSERT_EQ(Post("/rank", "{}", "bad")->status, 401);
  const std::string metrics = ScrapeMetrics();
  EXPECT_THAT(
      metrics,
      HasSubstr(R"(graphbandit_rpc_requests_total{code="OK",method="Personalizer.Rank"} 1)"));
  EXPECT_THAT(
      metrics,
      HasSubstr(R"(graphbandit_rpc_requests_total{code="OK",method="Personalizer.Reward"} 1)"));
  EXPECT_THAT(
      metrics,
      HasSubstr(R"(graphbandit_rpc_requests_total{code="OK",method="Personalizer.Activate"} 1)"));
  EXPECT_THAT(
      metrics,
      HasSubstr(
          R"(graphbandit_rpc_requests_total{code="UNAUTHENTICATED",method="Personalizer.Rank"} 1)"));

  // Shutdown announces the drain, then waits a moment before closing the ports: a call then is
  // told to go elsewhere.
  std::thread stopping([this] { server_->Shutdown(absl::Seconds(2)); });
  absl::SleepFor(absl::Milliseconds(100));
  httplib::Result during = Post("/rank", DeviceRank(0, "", ""));
  stopping.join();
  server_.reset();
  ExpectRefused(during, 503, "ServiceUnavailable", "shutting down");
}

}  // namespace
}  // namespace graphbandit::server
