// The service semantics in-process (core/model/engine.h): validation, event ids and retries, the
// reward join, the ledger's bounds, graph administration, persistence and replay.
#include "core/model/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

// A request that owns its data (DecisionRequest only holds views).
struct OwnedRequest {
  std::string model;
  std::string user = "alice";
  std::vector<double> context;
  std::vector<std::pair<std::string, std::vector<double>>> candidates;
  int slate_size = 1;
  std::string event_id;

  DecisionRequest View() const {
    DecisionRequest r;
    r.model = model;
    r.user_id = user;
    r.context = context;
    for (const auto& [id, f] : candidates) r.candidates.push_back(CandidateRef{id, f});
    r.slate_size = slate_size;
    r.event_id = event_id;
    return r;
  }
};

OwnedRequest ThreeArms(const std::string& user = "alice") {
  OwnedRequest r;
  r.user = user;
  r.candidates = {{"a", {1.0, 0.0}}, {"b", {0.0, 1.0}}, {"c", {0.7, 0.7}}};
  return r;
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "/engine_test.XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::unique_ptr<Engine> OpenEngine(std::vector<ModelOptions> models = {},
                                   const std::string& state_dir = "") {
  EngineOptions options;
  options.models = std::move(models);
  options.state_dir = state_dir;
  auto engine = Engine::Open(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

absl::Status SelectStatus(Engine& engine, const OwnedRequest& request) {
  return engine.SelectArm(request.View()).status();
}

TEST(EngineTest, InvalidDecisionRequestsAreRejectedWithPreciseMessages) {
  auto engine = OpenEngine();
  ASSERT_TRUE(engine->SelectArm(ThreeArms().View()).ok());  // fixes dims: context 0, arms 2

  struct Case {
    std::string name;
    std::function<void(OwnedRequest&)> mutate;
    absl::StatusCode code;
    std::string message;
  };
  const double nan = std::nan(""), inf = INFINITY;
  const std::vector<Case> cases = {
      {"empty user", [](OwnedRequest& r) { r.user = ""; }, absl::StatusCode::kInvalidArgument, "user_id must not be empty"},
      {"long user", [](OwnedRequest& r) { r.user = std::string(300, 'u'); }, absl::StatusCode::kInvalidArgument, "user_id is 300 bytes long"},
      {"no candidates", [](OwnedRequest& r) { r.candidates.clear(); }, absl::StatusCode::kInvalidArgument, "candidates must not be empty"},
      {"nan feature", [nan](OwnedRequest& r) { r.candidates[1].second[0] = nan; }, absl::StatusCode::kInvalidArgument, "candidates[1] (\"b\") features[0] is NaN"},
      {"inf feature", [inf](OwnedRequest& r) { r.candidates[2].second[1] = -inf; }, absl::StatusCode::kInvalidArgument, "features[1] is infinite"},
      {"wrong dimension", [](OwnedRequest& r) { r.candidates[0].second.push_back(1.0); }, absl::StatusCode::kInvalidArgument, "candidates[0] (\"a\") has 3 features; model \"default\" expects 2"},
      {"unexpected context", [](OwnedRequest& r) { r.context = {1.0}; }, absl::StatusCode::kInvalidArgument, "context has 1 values; model \"default\" expects 0"},
      {"duplicate ids", [](OwnedRequest& r) { r.candidates[2].first = "a"; }, absl::StatusCode::kInvalidArgument, "duplicate arm id \"a\": candidates[0] and candidates[2]"},
      {"empty arm id", [](OwnedRequest& r) { r.candidates[1].first = ""; }, absl::StatusCode::kInvalidArgument, "candidates[1].id must not be empty"},
      {"slate too large", [](OwnedRequest& r) { r.slate_size = 4; }, absl::StatusCode::kInvalidArgument, "slate_size 4 exceeds the number of candidates (3)"},
      {"slate zero", [](OwnedRequest& r) { r.slate_size = 0; }, absl::StatusCode::kInvalidArgument, "slate_size must be at least 1"},
      {"bad event id", [](OwnedRequest& r) { r.event_id = "tab\there"; }, absl::StatusCode::kInvalidArgument, "outside printable ASCII"},
      {"long event id", [](OwnedRequest& r) { r.event_id = std::string(129, 'e'); }, absl::StatusCode::kInvalidArgument, "event_id must be 1..128"},
      {"unknown model", [](OwnedRequest& r) { r.model = "nope"; }, absl::StatusCode::kNotFound, "unknown model \"nope\"; this server hosts: default"},
  };
  for (const Case& c : cases) {
    OwnedRequest request = ThreeArms();
    c.mutate(request);
    const absl::Status status = SelectStatus(*engine, request);
    EXPECT_EQ(status.code(), c.code) << c.name << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message)) << c.name;
  }
  // Nothing was recorded for the failed requests.
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->Stats().decisions, 1);
  EXPECT_EQ(model->Stats().pending_decisions, 1);
}

TEST(EngineTest, TooManyCandidatesIsInvalid) {
  ModelOptions options;
  options.max_candidates = 2;
  auto engine = OpenEngine({options});
  const absl::Status status = SelectStatus(*engine, ThreeArms());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("3 candidates exceed model \"default\"'s limit of 2"));
}

TEST(EngineTest, FirstRequestFixesDimensionsAndTheyAreReported) {
  auto engine = OpenEngine();
  Model* model = *engine->FindModel("");
  EXPECT_FALSE(model->View()->dimensions_fixed);
  OwnedRequest request = ThreeArms();
  request.candidates[1].second = {1.0};  // inconsistent first request: nothing gets fixed
  EXPECT_EQ(SelectStatus(*engine, request).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(model->View()->dimensions_fixed);
  request = ThreeArms();
  request.context = {0.5, 0.5, 0.5};
  ASSERT_TRUE(engine->SelectArm(request.View()).ok());
  EXPECT_TRUE(model->View()->dimensions_fixed);
  EXPECT_EQ(model->View()->context_dim, 3);
  EXPECT_EQ(model->View()->arm_dim, 2);
}

TEST(EngineTest, SelectRewardLearnMovesTheMeanTowardTheTruth) {
  auto engine = OpenEngine();
  Model* model = *engine->FindModel("");
  // True reward: 1 for arm "a", 0 for the others.
  for (int round = 0; round < 60; ++round) {
    auto decision = engine->SelectArm(ThreeArms().View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    ASSERT_EQ(decision->arms.size(), 1u);
    const double reward = decision->arms[0].arm_id == "a" ? 1.0 : 0.0;
    RewardRequest report{decision->event_id, reward, {}, ""};
    auto result = engine->ReportReward(report);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);
    model->WaitForFits();
  }
  EXPECT_EQ(model->View()->rewards_learned, 60);
  auto decision = engine->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->arms[0].arm_id, "a");
  EXPECT_NEAR(decision->arms[0].mean, 1.0, 0.1);
  EXPECT_LT(decision->arms[0].stddev, 0.3);
  EXPECT_GT(decision->model_version, 0u);
}

TEST(EngineTest, RetriedEventIdReturnsTheStoredDecisionAndReuseIsRejected) {
  ModelOptions options;
  options.policy = PolicyKind::kEkTs;  // randomised: a retry must not redraw
  auto engine = OpenEngine({options});
  OwnedRequest request = ThreeArms();
  request.event_id = "impression-42";
  auto first = engine->SelectArm(request.View());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->event_id, "impression-42");
  EXPECT_FALSE(first->replayed);
  for (int retry = 0; retry < 5; ++retry) {
    auto again = engine->SelectArm(request.View());
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->replayed);
    EXPECT_EQ(again->arms[0].arm_id, first->arms[0].arm_id);
    EXPECT_EQ(again->arms[0].score, first->arms[0].score);
  }
  EXPECT_EQ((*engine->FindModel(""))->Stats().decisions, 1);  // nothing decided twice
  request.user = "bob";
  const absl::Status reuse = SelectStatus(*engine, request);
  EXPECT_EQ(reuse.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(reuse.message()), HasSubstr("already used for a different request"));
}

TEST(EngineTest, RewardOutcomes) {
  auto engine = OpenEngine();
  OwnedRequest slate = ThreeArms();
  slate.slate_size = 2;
  auto decision = engine->SelectArm(slate.View());
  ASSERT_TRUE(decision.ok());
  const std::string first = decision->arms[0].arm_id, second = decision->arms[1].arm_id;

  auto unknown = engine->ReportReward({"no-such-event", 1.0, {}, ""});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->outcome, RewardOutcome::kUnknownEvent);

  auto scalar = engine->ReportReward({decision->event_id, 1.0, {}, ""});
  EXPECT_EQ(scalar.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(scalar.status().message()), HasSubstr("returned 2 arms; report each arm's reward in arm_rewards"));

  auto stranger = engine->ReportReward({decision->event_id, std::nullopt, {{"zzz", 1.0}}, ""});
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(stranger.status().message()), HasSubstr("arm \"zzz\" was not returned"));

  auto both = engine->ReportReward({decision->event_id, 1.0, {{first, 1.0}}, ""});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  auto none = engine->ReportReward({decision->event_id, std::nullopt, {}, ""});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  auto nan = engine->ReportReward({decision->event_id, std::nullopt, {{first, std::nan("")}}, ""});
  EXPECT_EQ(nan.status().code(), absl::StatusCode::kInvalidArgument);
  auto twice = engine->ReportReward({decision->event_id, std::nullopt, {{first, 1.0}, {first, 0.0}}, ""});
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  auto huge = engine->ReportReward({decision->event_id, std::nullopt, {{first, 1e12}}, ""});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_model = engine->ReportReward({decision->event_id, std::nullopt, {{first, 1.0}}, "other"});
  EXPECT_EQ(wrong_model.status().code(), absl::StatusCode::kNotFound);

  Model* model = *engine->FindModel("");
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 0);  // every failure above learned nothing
  EXPECT_EQ(model->Stats().pending_decisions, 1);

  auto partial = engine->ReportReward({decision->event_id, std::nullopt, {{first, 1.0}}, ""});
  ASSERT_TRUE(partial.ok());
  EXPECT_EQ(partial->outcome, RewardOutcome::kAccepted);
  EXPECT_EQ(model->Stats().pending_decisions, 1);  // the second arm is still open
  auto mixed = engine->ReportReward({decision->event_id, std::nullopt, {{first, 0.0}, {second, 0.5}}, ""});
  ASSERT_TRUE(mixed.ok());
  EXPECT_EQ(mixed->outcome, RewardOutcome::kAccepted);
  ASSERT_EQ(mixed->arm_outcomes.size(), 2u);
  EXPECT_EQ(mixed->arm_outcomes[0].second, RewardOutcome::kDuplicate);
  EXPECT_EQ(mixed->arm_outcomes[1].second, RewardOutcome::kAccepted);
  EXPECT_EQ(model->Stats().pending_decisions, 0);
  auto duplicate = engine->ReportReward({decision->event_id, std::nullopt, {{second, 0.5}}, ""});
  ASSERT_TRUE(duplicate.ok());
  EXPECT_EQ(duplicate->outcome, RewardOutcome::kDuplicate);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 2);  // each arm learned exactly once
}

TEST(EngineTest, LedgerIsBoundedAndExpires) {
  ModelOptions options;
  options.max_decisions = 3;
  options.max_tombstones = 10;
  options.reward_window = absl::Milliseconds(300);
  auto engine = OpenEngine({options});
  std::vector<std::string> events;
  for (int i = 0; i < 3; ++i) {
    auto decision = engine->SelectArm(ThreeArms().View());
    ASSERT_TRUE(decision.ok());
    events.push_back(decision->event_id);
  }
  const absl::Status full = SelectStatus(*engine, ThreeArms());
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(full.message()), HasSubstr("ledger.max_decisions"));
  // A rewarded decision can make room (it is kept only for duplicate detection).
  ASSERT_TRUE(engine->ReportReward({events[0], 1.0, {}, ""}).ok());
  ASSERT_TRUE(engine->SelectArm(ThreeArms().View()).ok());
  // After the window (closed by the engine's sweeper) a reward is LATE and learns nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  auto late = engine->ReportReward({events[1], 1.0, {}, ""});
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->outcome, RewardOutcome::kLate);
  // The rewarded decision was closed to make room: a repeat is a DUPLICATE.
  auto repeat = engine->ReportReward({events[0], 1.0, {}, ""});
  ASSERT_TRUE(repeat.ok());
  EXPECT_EQ(repeat->outcome, RewardOutcome::kDuplicate);
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->Stats().pending_decisions, 0);
  EXPECT_EQ(model->Stats().expired_decisions, 3);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);  // no default reward configured
  EXPECT_TRUE(engine->SelectArm(ThreeArms().View()).ok());
}

// An engine whose decisions close only when the test says so (no sweeper thread).
std::unique_ptr<Engine> ManualClockEngine(ModelOptions model) {
  EngineOptions options;
  options.models = {std::move(model)};
  options.run_sweeper = false;
  auto engine = Engine::Open(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

// A one-candidate request: the decision is forced, so what is learned depends only on rewards.
OwnedRequest OneArm(const std::string& event_id) {
  OwnedRequest r;
  r.candidates = {{"only", {0.6, 0.8}}};
  r.event_id = event_id;
  return r;
}

std::pair<double, double> MeanAndStddev(Engine& engine, absl::Time now) {
  auto probe = engine.SelectArmAt(OneArm("").View(), now, absl::InfiniteFuture());
  EXPECT_TRUE(probe.ok()) << probe.status();
  if (!probe.ok()) return {0, 0};
  return {probe->arms[0].mean, probe->arms[0].stddev};
}

// What a model learns from one reward `value` for the one-arm decision.
std::pair<double, double> LearnedFromOne(double value) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  auto engine = ManualClockEngine(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  EXPECT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  EXPECT_TRUE(engine->ReportRewardAt({"e", value, {}, ""}, t0, absl::InfiniteFuture()).ok());
  (*engine->FindModel(""))->WaitForFits();
  return MeanAndStddev(*engine, t0);
}

TEST(EngineTest, AggregationRulesLearnTheCombinedRewardWhenTheWindowEnds) {
  struct Case {
    Aggregation rule;
    double expected;
  };
  for (const Case& c : {Case{Aggregation::kSum, 0.3 + 0.5 + 0.1}, Case{Aggregation::kMax, 0.5},
                        Case{Aggregation::kLast, 0.1}}) {
    SCOPED_TRACE(AggregationName(c.rule));
    ModelOptions options;
    options.aggregation = c.rule;
    options.reward_window = absl::Seconds(10);
    auto engine = ManualClockEngine(options);
    Model* model = *engine->FindModel("");
    const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
    ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
    for (double reward : {0.3, 0.5, 0.1}) {
      auto result = engine->ReportRewardAt({"e", reward, {}, ""}, t0 + absl::Seconds(1),
                                           absl::InfiniteFuture());
      ASSERT_TRUE(result.ok());
      EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);  // every report counts
    }
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 0);  // nothing learned before the window ends
    EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(9)), 0);
    EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
    // Exactly what learning the aggregate once teaches.
    EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(c.expected));
    auto late = engine->ReportRewardAt({"e", 1.0, {}, ""}, t0 + absl::Seconds(11),
                                       absl::InfiniteFuture());
    ASSERT_TRUE(late.ok());
    EXPECT_EQ(late->outcome, RewardOutcome::kLate);
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
  }
}

TEST(EngineTest, FirstRuleLearnsAtOnceAndRepeatsAreDuplicatesEvenAfterTheWindow) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  auto first = engine->ReportRewardAt({"e", 0.3, {}, ""}, t0, absl::InfiniteFuture());
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->outcome, RewardOutcome::kAccepted);
  auto again = engine->ReportRewardAt({"e", 0.9, {}, ""}, t0, absl::InfiniteFuture());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, RewardOutcome::kDuplicate);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(0.3));
  // "e" and the probe's decision close; only the probe's counts as expired without a reward.
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 2);
  auto after = engine->ReportRewardAt({"e", 0.9, {}, ""}, t0 + absl::Seconds(11),
                                      absl::InfiniteFuture());
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->outcome, RewardOutcome::kDuplicate);  // complete, not late
  EXPECT_EQ(model->Stats().expired_decisions, 1);
}

TEST(EngineTest, DefaultRewardIsLearnedForDecisionsThatGetNone) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.25;
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  ASSERT_TRUE(engine->SelectArmAt(OneArm("e").View(), t0, absl::InfiniteFuture()).ok());
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_EQ(model->Stats().expired_decisions, 1);
  EXPECT_EQ(MeanAndStddev(*engine, t0), LearnedFromOne(0.25));
  auto late = engine->ReportRewardAt({"e", 1.0, {}, ""}, t0 + absl::Seconds(12),
                                     absl::InfiniteFuture());
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->outcome, RewardOutcome::kLate);
}

TEST(EngineTest, SlatesGetPerSlotRewardsAndDefaultsForTheSilentSlots) {
  ModelOptions options;
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.0;
  auto engine = ManualClockEngine(options);
  Model* model = *engine->FindModel("");
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  OwnedRequest slate = ThreeArms();
  slate.slate_size = 3;
  slate.event_id = "slate";
  auto decision = engine->SelectArmAt(slate.View(), t0, absl::InfiniteFuture());
  ASSERT_TRUE(decision.ok());
  auto clicked = engine->ReportRewardAt({"slate", std::nullopt, {{decision->arms[1].arm_id, 1.0}}, ""},
                                        t0, absl::InfiniteFuture());
  ASSERT_TRUE(clicked.ok());
  ASSERT_EQ(clicked->arm_outcomes.size(), 1u);
  EXPECT_EQ(clicked->arm_outcomes[0].first, decision->arms[1].arm_id);
  EXPECT_EQ(clicked->arm_outcomes[0].second, RewardOutcome::kAccepted);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 1);  // FIRST: the slot's reward at once
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(10)), 1);
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 3);  // the two silent slots learn the default
}

TEST(EngineTest, TombstonesAreBoundedAndOlderEventsBecomeUnknown) {
  ModelOptions options;
  options.reward_window = absl::Seconds(1);
  options.max_tombstones = 2;
  auto engine = ManualClockEngine(options);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(engine->SelectArmAt(OneArm(id).View(), t0, absl::InfiniteFuture()).ok());
  }
  EXPECT_EQ(engine->ExpireDue(t0 + absl::Seconds(2)), 3);
  auto outcome = [&](const char* id) {
    auto result = engine->ReportRewardAt({id, 1.0, {}, ""}, t0 + absl::Seconds(3), absl::InfiniteFuture());
    EXPECT_TRUE(result.ok());
    return result->outcome;
  };
  EXPECT_EQ(outcome("a"), RewardOutcome::kUnknownEvent);  // its tombstone was evicted
  EXPECT_EQ(outcome("b"), RewardOutcome::kLate);
  EXPECT_EQ(outcome("c"), RewardOutcome::kLate);
  // A closed event id cannot be reused for a new decision.
  EXPECT_EQ(engine->SelectArmAt(OneArm("c").View(), t0 + absl::Seconds(3), absl::InfiniteFuture())
                .status()
                .code(),
            absl::StatusCode::kAlreadyExists);
}

TEST(EngineTest, PassedDeadlinesAreReported) {
  auto engine = OpenEngine();
  const absl::Time now = absl::Now();
  EXPECT_EQ(engine->SelectArmAt(ThreeArms().View(), now, now - absl::Seconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  auto decision = engine->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(engine->ReportRewardAt({decision->event_id, 1.0, {}, ""}, now, now).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  Model* model = *engine->FindModel("");
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 0);  // refused before anything was logged
}

TEST(EngineTest, GraphAdministrationAndColdStartThroughAFriend) {
  auto engine = OpenEngine();
  Model* model = *engine->FindModel("");
  auto users = model->AddUsers({"alice", "bob", "alice"});
  ASSERT_TRUE(users.ok());
  EXPECT_EQ(users->added, 2);
  EXPECT_EQ(users->already_present, 1);
  // Alice learns that arm "a" is good.
  for (int round = 0; round < 30; ++round) {
    OwnedRequest request = ThreeArms("alice");
    request.event_id = absl::StrCat("alice-", round);  // fixed ids: a reproducible sequence
    auto decision = engine->SelectArm(request.View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, decision->arms[0].arm_id == "a" ? 1.0 : 0.0, {}, ""}).ok());
  }
  model->WaitForFits();
  auto before = engine->SelectArm(ThreeArms("carol").View());  // a stranger: prior only
  ASSERT_TRUE(before.ok());
  // The prior mean, plus the reward baseline every mean carries.
  EXPECT_EQ(before->arms[0].mean, model->View()->baseline);

  auto edges = model->AddEdges({{"carol", "alice", 2.0}, {"bob", "carol", 1.0}});
  ASSERT_TRUE(edges.ok()) << edges.status();
  EXPECT_EQ(edges->changed, 2);
  EXPECT_EQ(edges->users_added, 1);  // carol
  EXPECT_EQ(edges->edges, 2);
  OwnedRequest carol = ThreeArms("carol");  // her first request as a friend of alice
  carol.slate_size = 3;
  auto after = engine->SelectArm(carol.View());
  ASSERT_TRUE(after.ok());
  const ChosenArm* best = &after->arms[0];
  for (const ChosenArm& arm : after->arms) {
    if (arm.mean > best->mean) best = &arm;
  }
  EXPECT_EQ(best->arm_id, "a");  // alice's favourite has carol's highest expected reward
  EXPECT_GT(best->mean, 0.3);

  auto reweight = model->AddEdges({{"alice", "carol", 0.5}});
  ASSERT_TRUE(reweight.ok());
  EXPECT_EQ(reweight->changed, 0);
  EXPECT_EQ(reweight->unchanged, 1);
  auto removed = model->RemoveEdges({{"alice", "carol"}, {"alice", "bob"}});
  ASSERT_TRUE(removed.ok());
  EXPECT_EQ(removed->changed, 1);
  EXPECT_EQ(removed->unchanged, 1);
  EXPECT_EQ(model->View()->edges, 1);

  // Invalid edits.
  EXPECT_EQ(model->AddEdges({{"x", "x", 1.0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddEdges({{"x", "y", 0.0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddEdges({{"x", "y", std::nan("")}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddEdges({{"x", "", 1.0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddEdges({{"x", "y", 1.0}, {"y", "x", 2.0}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddEdges({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->AddUsers({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->RemoveEdges({{"a", "b"}, {"b", "a"}}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(model->Stats().users, 3);  // nothing registered by the failures
}

TEST(EngineTest, UserLimitIsEnforced) {
  ModelOptions options;
  options.max_users = 2;
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(model->AddUsers({"u1", "u2"}).ok());
  EXPECT_EQ(model->AddUsers({"u3"}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(model->AddEdges({{"u1", "u3", 1.0}}).status().code(), absl::StatusCode::kResourceExhausted);
  // A stranger is still served, but their reward cannot be learned.
  auto decision = engine->SelectArm(ThreeArms("u9").View());
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(engine->ReportReward({decision->event_id, 1.0, {}, ""}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*engine->FindModel(""))->Stats().pending_decisions, 1);  // refused, so still open
  // A known user's reward goes through.
  auto known = engine->SelectArm(ThreeArms("u1").View());
  ASSERT_TRUE(known.ok());
  EXPECT_TRUE(engine->ReportReward({known->event_id, 1.0, {}, ""}).ok());
}

TEST(EngineTest, ExactGpModelsRefuseRewardsBeyondTheirCapacity) {
  ModelOptions options;
  options.policy = PolicyKind::kGpUcb;
  options.exact_max_observations = 3;
  auto engine = OpenEngine({options});
  for (int i = 0; i < 3; ++i) {
    auto decision = engine->SelectArm(ThreeArms().View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    const auto accepted = engine->ReportReward({decision->event_id, 1.0, {}, ""});
    ASSERT_TRUE(accepted.ok()) << accepted.status();
  }
  auto decision = engine->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  EXPECT_EQ(decision->policy, "GP_UCB");
  const auto refused = engine->ReportReward({decision->event_id, 1.0, {}, ""});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ((*engine->FindModel(""))->Stats().pending_decisions, 1);  // still open
}

// The means and standard deviations of a slate of three fixed arms for each of `users` (they do
// not depend on the decision's randomness); by default users DriveAndProbe trains, and one
// never seen.
std::vector<double> Probe(Engine& engine,
                          const std::vector<std::string>& users = {"user0", "user3", "stranger"}) {
  std::vector<double> scores;
  for (const std::string& user : users) {
    OwnedRequest probe = ThreeArms(user);
    probe.slate_size = 3;
    auto decision = engine.SelectArm(probe.View());
    EXPECT_TRUE(decision.ok()) << decision.status();
    if (!decision.ok()) continue;
    for (const ChosenArm& arm : decision->arms) {
      scores.push_back(arm.mean);
      scores.push_back(arm.stddev);
    }
  }
  return scores;
}

// Drives a model with a fixed sequence and returns the scores of a probe request.
std::vector<double> DriveAndProbe(Engine& engine, int rounds) {
  Model* model = *engine.FindModel("");
  for (int round = 0; round < rounds; ++round) {
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 4));
    request.event_id = absl::StrCat("e", round);
    auto decision = engine.SelectArm(request.View());
    EXPECT_TRUE(decision.ok());
    const double reward = decision->arms[0].arm_id == "b" ? 0.8 : 0.1 * (round % 3);
    EXPECT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
    if (round == rounds / 2) {
      EXPECT_TRUE(model->AddEdges({{"user0", "user1", 1.0}, {"user2", "user3", 0.5}}).ok());
    }
  }
  model->WaitForFits();
  return Probe(engine);
}

// What is on disk at this moment is what a kill -9 would leave (records are written before
// calls return): copying the state directory of a running engine simulates a crash.
std::string CrashCopy(const std::string& from, const std::string& to) {
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  return to;
}

absl::StatusOr<std::unique_ptr<Engine>> Reopen(const std::string& state_dir) {
  EngineOptions options;
  options.state_dir = state_dir;
  return Engine::Open(options);
}

// `rounds` decisions for alice, each rewarded 0.5.
void PlayRounds(Engine& engine, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    auto decision = engine.SelectArm(ThreeArms().View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine.ReportReward({decision->event_id, 0.5, {}, ""}).ok());
  }
}

std::vector<std::string> FilesMatching(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void FlipByte(const std::string& path, std::streamoff offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  char c = 0;
  file.read(&c, 1);
  c = static_cast<char>(c ^ 0x5a);
  file.seekp(offset);
  file.write(&c, 1);
}

TEST(EngineTest, RestartFromTheShutdownSnapshotIsBitIdentical) {
  TempDir dir;
  std::vector<double> before;
  int64_t learned = 0;
  uint64_t version = 0;
  {
    auto engine = OpenEngine({}, dir.path());
    before = DriveAndProbe(*engine, 80);
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    learned = model->View()->rewards_learned;
    version = model->View()->version;
    EXPECT_EQ(learned, 80);
  }
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->recovery().snapshot_seq, version);  // the shutdown snapshot holds everything
  EXPECT_EQ(model->recovery().records_replayed, 0);
  EXPECT_TRUE(model->recovery().damage.empty());
  EXPECT_EQ(model->View()->rewards_learned, learned);
  EXPECT_EQ(model->View()->version, version);
  EXPECT_EQ(model->View()->edges, 2);
  EXPECT_EQ(Probe(*engine), before);  // bit-identical
}

TEST(EngineTest, CrashRecoveryFromSnapshotPlusLogIsBitIdentical) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  DriveAndProbe(*engine, 40);
  auto snapshot = model->Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  // Decisions still waiting for their reward at the crash must survive it too.
  OwnedRequest open = ThreeArms("user1");
  open.event_id = "open-at-crash";
  auto open_decision = engine->SelectArm(open.View());
  ASSERT_TRUE(open_decision.ok());
  DriveAndProbe(*engine, 40);  // event ids e0..e39 again: retries, nothing new learned
  for (int round = 0; round < 30; ++round) {
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 5));
    request.event_id = absl::StrCat("late", round);
    auto decision = engine->SelectArm(request.View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.05 * (round % 7), {}, ""}).ok());
  }
  model->WaitForFits();
  const std::vector<double> before = Probe(*engine);
  const int64_t learned = model->View()->rewards_learned;
  const uint64_t version = model->View()->version;
  EXPECT_EQ(learned, 70);
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_EQ(again->recovery().snapshot_seq, *snapshot);
  EXPECT_GT(again->recovery().records_replayed, 30);
  EXPECT_TRUE(again->recovery().damage.empty());
  EXPECT_EQ(again->View()->rewards_learned, learned);
  EXPECT_GE(again->View()->version, version);  // the probes' decisions are logged too
  EXPECT_EQ(Probe(**recovered), before);  // bit-identical

  // The open decision is still open: its retry returns it, its reward is accepted once.
  auto retried = (*recovered)->SelectArm(open.View());
  ASSERT_TRUE(retried.ok());
  EXPECT_TRUE(retried->replayed);
  EXPECT_EQ(retried->arms[0].arm_id, open_decision->arms[0].arm_id);
  EXPECT_EQ(retried->arms[0].score, open_decision->arms[0].score);
  auto accepted = (*recovered)->ReportReward({"open-at-crash", 1.0, {}, ""});
  ASSERT_TRUE(accepted.ok());
  EXPECT_EQ(accepted->outcome, RewardOutcome::kAccepted);
  // Rewards acknowledged before the crash are duplicates, not learned twice.
  auto repeated = (*recovered)->ReportReward({"late7", 1.0, {}, ""});
  ASSERT_TRUE(repeated.ok());
  EXPECT_EQ(repeated->outcome, RewardOutcome::kDuplicate);
  again->WaitForFits();
  EXPECT_EQ(again->View()->rewards_learned, learned + 1);
  (*recovered)->Shutdown();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, TornLogTailIsReportedAndTruncated) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 10));
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> segments = FilesMatching(crashed + "/default", "log-");
  ASSERT_EQ(segments.size(), 1u);
  std::filesystem::resize_file(segments[0], std::filesystem::file_size(segments[0]) - 5);

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_TRUE(again->recovery().truncated);
  ASSERT_EQ(again->recovery().damage.size(), 1u);
  EXPECT_THAT(again->recovery().damage[0], HasSubstr("truncated"));
  // The torn record was the last reward: 9 of the 10 remain learned.
  EXPECT_EQ(again->View()->rewards_learned, 9);
  // The model keeps working and logging after recovery, and that survives a restart.
  auto decision = (*recovered)->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  EXPECT_TRUE((*recovered)->ReportReward({decision->event_id, 1.0, {}, ""}).ok());
  recovered->reset();
  auto reopened = Reopen(crashed);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*(*reopened)->FindModel(""))->View()->rewards_learned, 10);
  EXPECT_TRUE((*(*reopened)->FindModel(""))->recovery().damage.empty());
  reopened->reset();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, CorruptionInsideTheLogStopsReplayAtTheLastGoodRecord) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 40));
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> segments = FilesMatching(crashed + "/default", "log-");
  ASSERT_EQ(segments.size(), 1u);
  const auto size = std::filesystem::file_size(segments[0]);
  FlipByte(segments[0], static_cast<std::streamoff>(size / 2));

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_TRUE(again->recovery().truncated);
  ASSERT_FALSE(again->recovery().damage.empty());
  const int64_t learned = again->View()->rewards_learned;
  EXPECT_GT(learned, 10);
  EXPECT_LT(learned, 40);
  // The damaged bytes are set aside, not deleted.
  EXPECT_FALSE(FilesMatching(crashed + "/default", "log-").empty());
  bool set_aside = false;
  for (const auto& entry : std::filesystem::directory_iterator(crashed + "/default")) {
    set_aside |= entry.path().filename().string().find("corrupt") != std::string::npos ||
                 entry.path().filename().string().find("discard") != std::string::npos;
  }
  EXPECT_TRUE(set_aside);
  recovered->reset();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, WithEverySnapshotDamagedAndTheLogTrimmedItRefusesToStartEmpty) {
  TempDir dir;
  {
    auto engine = OpenEngine({}, dir.path());
    Model* model = *engine->FindModel("");
    for (int i = 0; i < 3; ++i) {
      ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
      ASSERT_TRUE(model->Snapshot().ok());  // the third removes the segments before the first
    }
  }
  const std::string model_dir = dir.path() + "/default";
  ASSERT_GT(std::filesystem::path(FilesMatching(model_dir, "log-").front()).filename().string(),
            "log-00000000000000000001.log");
  for (const std::string& snapshot : FilesMatching(model_dir, "snapshot-")) {
    FlipByte(snapshot, static_cast<std::streamoff>(std::filesystem::file_size(snapshot) / 2));
  }
  for (int attempt = 0; attempt < 2; ++attempt) {  // also once the damaged files are set aside
    auto refused = Reopen(dir.path());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss) << refused.status();
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("refusing to start with an empty model"));
  }
}

TEST(EngineTest, AnIntactSnapshotThatContradictsTheConfigurationIsNotDiscarded) {
  TempDir dir;
  {
    auto engine = OpenEngine({}, dir.path());
    ASSERT_NO_FATAL_FAILURE(PlayRounds(*engine, 5));
  }
  ModelOptions other;
  other.policy = PolicyKind::kLinUcbPooled;  // another learner than the snapshot holds
  EngineOptions options;
  options.state_dir = dir.path();
  options.models = {other};
  auto refused = Engine::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("cannot be restored"));
  // The snapshot is still there, and the original configuration opens it.
  auto reopened = Reopen(dir.path());
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*(*reopened)->FindModel(""))->View()->rewards_learned, 5);
}

TEST(EngineTest, ACorruptSnapshotFallsBackToTheOlderOneAndTheLog) {
  TempDir dir;
  auto engine = OpenEngine({}, dir.path());
  Model* model = *engine->FindModel("");
  DriveAndProbe(*engine, 30);
  const auto first = model->Snapshot();
  ASSERT_TRUE(first.ok());
  for (int round = 0; round < 20; ++round) {
    auto decision = engine->SelectArm(ThreeArms(absl::StrCat("user", round % 3)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.1 * (round % 4), {}, ""}).ok());
  }
  const auto second = model->Snapshot();
  ASSERT_TRUE(second.ok());
  ASSERT_GT(*second, *first);
  model->WaitForFits();
  const std::vector<double> before = Probe(*engine);
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  const std::vector<std::string> snapshots = FilesMatching(crashed + "/default", "snapshot-");
  ASSERT_EQ(snapshots.size(), 2u);
  FlipByte(snapshots[1], static_cast<std::streamoff>(std::filesystem::file_size(snapshots[1]) / 2));

  auto recovered = Reopen(crashed);
  ASSERT_TRUE(recovered.ok()) << recovered.status();
  Model* again = *(*recovered)->FindModel("");
  EXPECT_EQ(again->recovery().snapshot_seq, *first);
  ASSERT_EQ(again->recovery().damage.size(), 1u);
  EXPECT_THAT(again->recovery().damage[0], HasSubstr("snapshot-"));
  EXPECT_EQ(again->View()->rewards_learned, 50);
  EXPECT_EQ(Probe(**recovered), before);  // the log after the older snapshot rebuilds it all
  recovered->reset();
  std::filesystem::remove_all(crashed);
}

TEST(EngineTest, EdgeListFileIsAppliedAtStartAndNotRelogged) {
  TempDir dir;
  const std::string edges = dir.path() + "/edges.txt";
  {
    std::ofstream out(edges);
    out << "# friends\nalice\tbob\n bob carol 2.5\n\nbob alice 1\n";
  }
  ModelOptions options;
  options.edge_list_file = edges;
  uint64_t version = 0;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    EXPECT_EQ(model->View()->edges, 2);
    EXPECT_EQ(model->Stats().users, 3);
    EXPECT_EQ(model->View()->graph_components, 1);
    version = model->View()->version;
  }
  auto engine = OpenEngine({options}, dir.path());
  EXPECT_EQ((*engine->FindModel(""))->View()->version, version);  // nothing new logged

  {
    std::ofstream out(edges);
    out << "alice bob -1\n";
  }
  EngineOptions bad;
  bad.models = {options};
  const auto failed = Engine::Open(bad);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("line 1"));
}

TEST(EngineTest, ConfiguredDimensionsAndOptionValidation) {
  ModelOptions fixed;
  fixed.name = "fixed";
  fixed.context_dim = 1;
  fixed.arm_dim = 2;
  auto engine = OpenEngine({fixed});
  OwnedRequest request = ThreeArms();
  request.model = "fixed";
  EXPECT_EQ(SelectStatus(*engine, request).code(), absl::StatusCode::kInvalidArgument);
  request.context = {0.3};
  EXPECT_TRUE(SelectStatus(*engine, request).ok());
  EXPECT_EQ(engine->ModelNames(), (std::vector<std::string>{"default", "fixed"}));

  ModelOptions broken;
  broken.ridge = -1;
  EngineOptions options;
  options.models = {broken};
  const auto failed = Engine::Open(options);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("ridge must be a finite number > 0"));
  ModelOptions bad_name;
  bad_name.name = "../etc";
  options.models = {bad_name};
  EXPECT_EQ(Engine::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
  ModelOptions exact_sum;
  exact_sum.policy = PolicyKind::kGpUcb;
  exact_sum.default_reward = 0.0;
  options.models = {exact_sum};
  const auto exact_refused = Engine::Open(options);
  EXPECT_EQ(exact_refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(exact_refused.status().message()), HasSubstr("GP_UCB / GP_TS learn only with"));
}

TEST(EngineTest, EveryConfigurablePolicyServesAndLearns) {
  for (PolicyKind policy :
       {PolicyKind::kEkUcb, PolicyKind::kEkTs, PolicyKind::kGpUcb, PolicyKind::kGpTs,
        PolicyKind::kLinUcbPerUser, PolicyKind::kLinUcbPooled, PolicyKind::kGraphUcb,
        PolicyKind::kGobLin, PolicyKind::kBatchedNystromUcb}) {
    for (UserKernelKind kernel : {UserKernelKind::kLaplacianInverse, UserKernelKind::kHeat}) {
      ModelOptions options;
      options.policy = policy;
      options.user_kernel = kernel;
      options.batched_threshold = 0.5;  // re-draw often enough to learn in 80 rounds
      auto engine = OpenEngine({options});
      Model* model = *engine->FindModel("");
      ASSERT_TRUE(model->AddEdges({{"alice", "bob", 1.0}, {"bob", "carol", 1.0}}).ok());
      const std::string name = absl::StrCat(PolicyName(policy), "/", UserKernelKindName(kernel));
      int late_a = 0;  // choices of "a" in the last 20 rounds
      for (int round = 0; round < 80; ++round) {
        // "a" moves through the candidate positions, so a policy stuck on one position fails.
        OwnedRequest request = ThreeArms(round % 2 ? "alice" : "bob");
        std::rotate(request.candidates.begin(), request.candidates.begin() + round % 3,
                    request.candidates.end());
        auto decision = engine->SelectArm(request.View());
        ASSERT_TRUE(decision.ok()) << name << ": " << decision.status();
        EXPECT_EQ(decision->policy, PolicyName(policy));
        const bool a = decision->arms[0].arm_id == "a";
        if (round >= 60 && a) ++late_a;
        ASSERT_TRUE(engine->ReportReward({decision->event_id, a ? 1.0 : 0.0, {}, ""}).ok()) << name;
        // Decisions never wait for learning, and in-process rounds take microseconds: let the
        // model learn each reward before the next decision, as a client over a network would.
        model->WaitForWriter();
      }
      model->WaitForFits();
      EXPECT_EQ(model->View()->rewards_learned, 80) << name;
      // Arm "a" pays 1, the others 0: every policy has settled on it. (Not: "ranks the others
      // below it". A policy whose first choice was "a" may never have tried them, and then
      // knows nothing about them; it has no regret either.)
      EXPECT_GE(late_a, 16) << name;
    }
  }
}

// `rounds` decisions of users u0..u3 among 6 items whose 2 features are on a scale of 10, with a
// smooth reward of them: the default length-scale 1 is far too short, and the noise standard
// deviation is 0.1.
void PlaySmoothTask(Engine& engine, int rounds) {
  Rng rng(17);
  for (int round = 0; round < rounds; ++round) {
    OwnedRequest request;
    request.user = absl::StrCat("u", round % 4);
    for (int i = 0; i < 6; ++i) {
      request.candidates.push_back(
          {absl::StrCat("item", i), {10.0 * rng.Normal(), 10.0 * rng.Normal()}});
    }
    auto decision = engine.SelectArm(request.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    const std::vector<double>& x = request.candidates[decision->arms[0].candidate_index].second;
    const double reward = std::sin(x[0] / 8.0) + 0.5 * std::cos(x[1] / 12.0) + 0.1 * rng.Normal();
    ASSERT_TRUE(engine.ReportReward({decision->event_id, reward, {}, ""}).ok());
  }
}

// WaitForFits covers the moment between the writer applying a batch and deciding that a fit is
// due (the writer is held in that moment here; before the fix WaitForFits returned in it with
// no fit started, and fits_* below were all 0).
TEST(EngineTest, WaitForFitsSeesAFitDueOnTheLastBatch) {
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  auto engine = OpenEngine({options}, "");
  Model* model = *engine->FindModel("");
  PlaySmoothTask(*engine, 19);
  model->WaitForFits();
  ModelStats stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_skipped + stats.fits_failed, 0);

  model->SetAfterApplyHookForTesting(
      [] { std::this_thread::sleep_for(std::chrono::milliseconds(200)); });
  PlaySmoothTask(*engine, 1);  // the 20th reward: a fit is due once it is applied
  model->WaitForFits();
  stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_skipped + stats.fits_failed, 1);
  model->SetAfterApplyHookForTesting(nullptr);
}

// Hyper-parameters are fitted beside the serving state, logged, and reproduced by recovery
// (from the log alone, and from the shutdown snapshot); values set in the configuration stay
// exactly as configured.
TEST(EngineTest, FittedHyperparametersAreLoggedAndRecovered) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  options.rho = 0.5;
  options.refit.fit_rho = false;  // as if "graph { rho: 0.5 }" were configured
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 1.0}}).ok());
  PlaySmoothTask(*engine, 240);
  model->WaitForFits();
  const std::shared_ptr<const ModelView> view = model->View();
  ASSERT_TRUE(view->hyperparameters.has_value());
  const HyperparameterView fitted = *view->hyperparameters;
  EXPECT_GE(fitted.fits_applied, 1);
  EXPECT_GE(model->Stats().fits_applied, 1);
  EXPECT_EQ(fitted.values.rho, 0.5);  // configured: fixed
  ASSERT_EQ(fitted.values.lengthscales.size(), 2);
  for (int d = 0; d < 2; ++d) {
    EXPECT_GT(fitted.values.lengthscales(d), 3.0) << fitted.values.DebugString();
  }
  EXPECT_GT(fitted.values.noise_variance, 0.1 * 0.01) << fitted.values.DebugString();
  EXPECT_LT(fitted.values.noise_variance, 10 * 0.01) << fitted.values.DebugString();
  EXPECT_EQ(fitted.kors_mu, fitted.values.noise_variance);
  EXPECT_EQ(view->scaling.lengthscales(), fitted.values.lengthscales);
  // Users the model learned from (their posterior depends on the whole learner state) and one
  // it never saw.
  const std::vector<std::string> probed = {"u0", "u1", "u3", "stranger"};
  const std::vector<double> before = Probe(*engine, probed);
  model->WaitForFits();

  // Crash: the log alone (no snapshot yet) replays the logged fits at their place.
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  auto reopen = [&options](const std::string& state_dir) {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = state_dir;
    return Engine::Open(engine_options);
  };
  {
    auto recovered = reopen(crashed);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* again = *(*recovered)->FindModel("");
    EXPECT_EQ(again->recovery().snapshot_seq, 0u);
    EXPECT_TRUE(again->recovery().damage.empty());
    ASSERT_TRUE(again->View()->hyperparameters.has_value());
    EXPECT_EQ(again->View()->hyperparameters->values, fitted.values);
    EXPECT_EQ(again->View()->hyperparameters->fits_applied, fitted.fits_applied);
    EXPECT_EQ(Probe(**recovered, probed), before);  // bit-identical
    (*recovered)->Shutdown();
  }
  std::filesystem::remove_all(crashed);

  // Clean restart: the shutdown snapshot holds the values and the learner built with them.
  engine->Shutdown();
  engine.reset();
  auto restarted = reopen(dir.path());
  ASSERT_TRUE(restarted.ok()) << restarted.status();
  Model* again = *(*restarted)->FindModel("");
  EXPECT_GT(again->recovery().snapshot_seq, 0u);
  EXPECT_EQ(again->recovery().records_replayed, 0);
  EXPECT_EQ(again->View()->hyperparameters->values, fitted.values);
  EXPECT_EQ(Probe(**restarted, probed), before);
}

// A KORS mu set in the configuration is what the learner uses, through fits (which change the
// noise variance mu would otherwise follow) and after a restart from the shutdown snapshot.
TEST(EngineTest, AConfiguredKorsMuStaysThroughFitsAndRestarts) {
  TempDir dir;
  ModelOptions options;
  options.kors_mu = 0.05;
  options.refit.first_fit = 20;
  options.refit.max_points = 200;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}, {"u1", "u2", 1.0}}).ok());
    PlaySmoothTask(*engine, 240);
    model->WaitForFits();
    const std::shared_ptr<const ModelView> view = model->View();
    ASSERT_GE(view->hyperparameters->fits_applied, 1);
    ASSERT_NE(view->hyperparameters->values.noise_variance, 0.05);
    EXPECT_EQ(view->hyperparameters->kors_mu, 0.05);  // read from the learner
    engine->Shutdown();
  }
  auto engine = OpenEngine({options}, dir.path());
  const std::shared_ptr<const ModelView> view = (*engine->FindModel(""))->View();
  EXPECT_GT((*engine->FindModel(""))->recovery().snapshot_seq, 0u);
  EXPECT_EQ(view->hyperparameters->kors_mu, 0.05);
}

// After a configuration change, values the new configuration fixes win over the snapshot's.
TEST(EngineTest, ConfiguredValuesWinOverFittedOnesAfterARestart) {
  TempDir dir;
  ModelOptions options;
  options.refit.first_fit = 10;
  {
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    for (int round = 0; round < 60; ++round) {
      auto decision = engine->SelectArm(ThreeArms(absl::StrCat("u", round % 3)).View());
      ASSERT_TRUE(decision.ok());
      const double reward = decision->arms[0].arm_id == "a" ? 1.0 : 0.1 * (round % 4);
      ASSERT_TRUE(engine->ReportReward({decision->event_id, reward, {}, ""}).ok());
    }
    model->WaitForFits();
    ASSERT_GE(model->Stats().fits_applied, 1);
    ASSERT_NE(model->View()->hyperparameters->values.noise_variance, 0.3);
  }
  ModelOptions fixed = options;
  fixed.ridge = 0.3;
  fixed.refit.fit_noise_variance = false;  // as if "ridge: 0.3" were configured now
  {
    auto engine = OpenEngine({fixed}, dir.path());
    Model* model = *engine->FindModel("");
    EXPECT_GT(model->recovery().snapshot_seq, 0u);
    EXPECT_EQ(model->View()->hyperparameters->values.noise_variance, 0.3);
    auto decision = engine->SelectArm(ThreeArms("u1").View());
    ASSERT_TRUE(decision.ok()) << decision.status();
  }
  ModelOptions off = options;
  off.refit.enabled = false;
  auto engine = OpenEngine({off}, dir.path());
  const std::shared_ptr<const ModelView> view = (*engine->FindModel(""))->View();
  const HyperparameterView& h = *view->hyperparameters;
  EXPECT_EQ(h.values.noise_variance, off.ridge);
  EXPECT_EQ(h.values.rho, off.rho);
  EXPECT_EQ(h.values.signal_variance, off.kernel_variance);
  EXPECT_EQ(h.values.offset_variance, 0.0);
  EXPECT_EQ(h.values.user_variance, 0.0);
  EXPECT_EQ(h.values.lengthscales, Eigen::Vector2d(1.0, 1.0));
}

// A model whose dictionary reaches its cap rebuilds it with a coarser KORS mu, logged so that
// recovery rebuilds at the same place; the cap is never exceeded.
TEST(EngineTest, AFullDictionaryIsCoarsenedAndRecovered) {
  TempDir dir;
  ModelOptions options;
  options.max_dictionary_size = 12;
  options.coarsen_full_dictionary = true;
  options.refit.enabled = false;  // the coarsening alone
  auto engine = OpenEngine({options}, dir.path());
  Model* model = *engine->FindModel("");
  Rng rng(5);
  for (int round = 0; round < 200; ++round) {
    OwnedRequest request;
    request.user = absl::StrCat("u", round % 5);
    for (int i = 0; i < 4; ++i) {
      request.candidates.push_back({absl::StrCat("i", i), {3 * rng.Normal(), 3 * rng.Normal()}});
    }
    auto decision = engine->SelectArm(request.View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, rng.Normal(), {}, ""}).ok());
    ASSERT_LE(model->View()->dictionary_size, 12);
  }
  model->WaitForFits();
  const HyperparameterView h = *model->View()->hyperparameters;
  EXPECT_GE(h.coarsenings, 1);
  EXPECT_GT(h.kors_mu, h.values.noise_variance);
  EXPECT_EQ(model->View()->rewards_learned, 200);
  const std::vector<std::string> probed = {"u0", "u2", "u4", "stranger"};
  const std::vector<double> before = Probe(*engine, probed);
  model->WaitForFits();
  const std::string crashed = CrashCopy(dir.path(), dir.path() + "-crash");
  {
    EngineOptions engine_options;
    engine_options.models = {options};
    engine_options.state_dir = crashed;
    auto recovered = Engine::Open(engine_options);
    ASSERT_TRUE(recovered.ok()) << recovered.status();
    Model* again = *(*recovered)->FindModel("");
    EXPECT_EQ(again->View()->hyperparameters->coarsenings, h.coarsenings);
    EXPECT_EQ(again->View()->hyperparameters->kors_mu, h.kors_mu);
    EXPECT_EQ(Probe(**recovered, probed), before);
    (*recovered)->Shutdown();
  }
  std::filesystem::remove_all(crashed);
}

// With fitting off every value is used as configured and no fit runs.
TEST(EngineTest, FittingCanBeSwitchedOff) {
  ModelOptions options;
  options.refit.enabled = false;
  options.refit.first_fit = 5;
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("");
  for (int round = 0; round < 60; ++round) {
    auto decision = engine->SelectArm(ThreeArms(absl::StrCat("u", round % 3)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 0.1 * (round % 7), {}, ""}).ok());
  }
  model->WaitForFits();
  const ModelStats stats = model->Stats();
  EXPECT_EQ(stats.fits_applied + stats.fits_unchanged + stats.fits_failed + stats.fits_skipped, 0);
  ASSERT_TRUE(stats.view.hyperparameters.has_value());
  EXPECT_EQ(stats.view.hyperparameters->values.noise_variance, options.ridge);
  EXPECT_EQ(stats.view.hyperparameters->values.rho, options.rho);
  EXPECT_EQ(stats.view.hyperparameters->values.lengthscales, Eigen::Vector2d(1.0, 1.0));
}

TEST(EngineTest, AGraphThePolicyCannotServeIsRefusedAndReplayedTheSameWay) {
  TempDir dir;
  ModelOptions options;
  options.policy = PolicyKind::kGraphUcb;  // one dense inverse per connected component
  auto open = [&] { return OpenEngine({options}, dir.path()); };
  {
    auto engine = open();
    Model* model = *engine->FindModel("");
    ASSERT_TRUE(engine->SelectArm(ThreeArms("u0").View()).ok());  // 2 features per point
    ASSERT_TRUE(model->AddEdges({{"u0", "u1", 1.0}}).ok());
    // A chain of 4097 users x 2 features = 8194 rows: over the 8192-row limit.
    std::vector<EdgeEdit> chain;
    for (int u = 1; u < 4097; ++u) chain.push_back({absl::StrCat("u", u), absl::StrCat("u", u + 1), 1.0});
    const auto refused = model->AddEdges(chain);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("exceeds its limit"));
    EXPECT_EQ(model->View()->edges, 1);  // the previous graph is kept
    auto decision = engine->SelectArm(ThreeArms("u1").View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(engine->ReportReward({decision->event_id, 1.0, {}, ""}).ok());
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 1);
  }
  auto engine = open();  // the refused edit is in the log: replay refuses it again
  Model* model = *engine->FindModel("");
  EXPECT_EQ(model->View()->edges, 1);
  EXPECT_EQ(model->View()->rewards_learned, 1);
  EXPECT_TRUE(engine->SelectArm(ThreeArms("u2").View()).ok());
}

TEST(EngineTest, ConcurrentDecisionsWhileLearning) {
  auto engine = OpenEngine();
  ASSERT_TRUE(engine->SelectArm(ThreeArms().View()).ok());
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&engine, &failures, t] {
      for (int i = 0; i < 200; ++i) {
        auto decision = engine->SelectArm(ThreeArms(absl::StrCat("u", (t * 7 + i) % 10)).View());
        if (!decision.ok()) {
          ++failures;
          continue;
        }
        if (!engine->ReportReward({decision->event_id, 0.5, {}, ""}).ok()) ++failures;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  Model* model = *engine->FindModel("");
  model->WaitForFits();
  EXPECT_EQ(model->View()->rewards_learned, 800);
}

}  // namespace
}  // namespace graphbandit
