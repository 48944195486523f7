// Cluster mode (Replication in core/model/model.h): several engines in one process, each a node,
// share one log in memory, as nodes share a JetStream stream. Checks what the replicas must
// agree on: what is learned (exactly once, whichever node a reward reaches), the answers, and
// the state after a restart from a snapshot.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/model/engine.h"
#include "core/model/replicated_records.h"
#include "tests/core/model/engine_test_util.h"
#include "tests/core/model/memory_shared_log.h"

namespace graphbandit {
namespace {

ModelOptions ClusterModel() {
  ModelOptions options;
  options.reward_window = absl::Seconds(30);
  // Fits run within the tests' few dozen rewards: every node must apply the same ones.
  options.refit.min_points_per_parameter = 0;
  return options;
}

std::unique_ptr<Engine> OpenNode(const std::string& id, const std::shared_ptr<SharedLog>& log,
                                 const std::string& state_dir = "",
                                 ModelOptions model = ClusterModel()) {
  EngineOptions options;
  options.models = {std::move(model)};
  options.state_dir = state_dir;
  options.run_sweeper = false;
  options.node_id = id;
  options.shared_log = [log](const ModelOptions&) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    return log;
  };
  auto engine = Engine::Open(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

Model& TheModel(Engine& engine) { return **engine.FindModel(""); }

// How many of the shared log's records from index `from` on are ordinary operations of `type`.
int RecordsOfType(MemorySharedLog& log, size_t from, OpType type) {
  int count = 0;
  const auto records = log.Records();
  for (size_t i = from; i < records.size(); ++i) {
    auto decoded = DecodeReplicated(records[i].payload);
    if (!decoded.ok()) continue;
    if (const auto* op = std::get_if<ModelOp>(&*decoded)) count += TypeOf(*op) == type ? 1 : 0;
  }
  return count;
}

// Waits until no node has a fit running and every node has applied the whole shared log.
void Settle(const std::vector<Engine*>& nodes, MemorySharedLog& log) {
  for (int round = 0; round < 20; ++round) {
    const uint64_t before = *log.LastSeq();
    for (Engine* node : nodes) TheModel(*node).WaitForFits();
    const uint64_t last = *log.LastSeq();
    for (Engine* node : nodes) {
      ASSERT_TRUE(TheModel(*node).WaitForVersion(last, absl::Now() + absl::Seconds(30)).ok());
    }
    if (*log.LastSeq() == before) return;
  }
  FAIL() << "the nodes kept publishing fits";
}

// Means and standard deviations of three fixed arms for three users, through SelectArm with a
// client event id that each node uses once (its decision enters the shared log, which changes
// nothing learned).
std::vector<double> ProbeScores(Engine& engine, const std::string& tag) {
  std::vector<double> scores;
  for (const char* user : {"user0", "user3", "stranger"}) {
    OwnedRequest probe = ThreeArms(user);
    probe.slate_size = 3;
    probe.event_id = absl::StrCat("probe-", tag, "-", user);
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

TEST(ClusterModeTest, ThreeNodesLearnEachRewardOnceAndAgree) {
  auto log = std::make_shared<MemorySharedLog>();
  auto a = OpenNode("a", log), b = OpenNode("b", log), c = OpenNode("c", log);
  ASSERT_TRUE(a && b && c);
  std::vector<Engine*> nodes = {a.get(), b.get(), c.get()};
  int accepted = 0;
  for (int round = 0; round < 60; ++round) {
    Engine& decider = *nodes[round % 3];
    Engine& rewarded = *nodes[(round + 1) % 3];
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 4));
    auto decision = decider.SelectArm(request.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    // Generated ids carry the deciding node's id.
    EXPECT_TRUE(absl::StartsWith(decision->event_id, absl::StrCat(round % 3 == 0   ? "a"
                                                                  : round % 3 == 1 ? "b"
                                                                                   : "c",
                                                                  "-")))
        << decision->event_id;
    const double reward = decision->arms[0].arm_id == "b" ? 0.8 : 0.1 * (round % 3);
    // The reward goes to another node than the decision; a third of them is retried on the
    // third node (the client did not hear the first answer).
    auto result = rewarded.ReportReward({decision->event_id, reward, {}, ""});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);
    EXPECT_GT(result->model_version, 0u);
    ++accepted;
    if (round % 3 == 0) {
      auto retry = nodes[(round + 2) % 3]->ReportReward({decision->event_id, reward, {}, ""});
      ASSERT_TRUE(retry.ok()) << retry.status();
      EXPECT_EQ(retry->outcome, RewardOutcome::kDuplicate);
      EXPECT_GE(retry->model_version, result->model_version);
    }
    if (round == 30) {
      ASSERT_TRUE(TheModel(*b).AddEdges({{"user0", "user1", 1.0}, {"user2", "user3", 0.5}}).ok());
    }
  }
  // A reward for an id no node decided.
  auto unknown = c->ReportReward({"nobody", 1.0, {}, ""});
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->outcome, RewardOutcome::kUnknownEvent);

  Settle(nodes, *log);
  const ModelStats stats_a = TheModel(*a).Stats();
  EXPECT_EQ(stats_a.view.rewards_learned, accepted);
  EXPECT_EQ(stats_a.view.edges, 2);
  EXPECT_TRUE(stats_a.replicated);
  EXPECT_EQ(stats_a.shared_log_seq, *log->LastSeq());
  // Every node ran the same fits and published them; each was applied once.
  ASSERT_TRUE(stats_a.view.hyperparameters.has_value());
  EXPECT_GE(stats_a.view.hyperparameters->fits_applied + stats_a.fits_unchanged, 1);
  int64_t fit_records = 0;
  for (const SharedLog::Record& record : log->Records()) {
    auto decoded = DecodeReplicated(record.payload);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    if (const auto* op = std::get_if<ModelOp>(&*decoded)) {
      fit_records += std::holds_alternative<HyperparametersOp>(*op) ? 1 : 0;
    }
  }
  EXPECT_GE(fit_records, stats_a.view.hyperparameters->fits_applied);
  for (Engine* node : {b.get(), c.get()}) {
    const ModelStats stats = TheModel(*node).Stats();
    EXPECT_EQ(stats.view.version, stats_a.view.version);
    EXPECT_EQ(stats.view.rewards_learned, accepted);
    EXPECT_EQ(stats.view.history_size, stats_a.view.history_size);
    EXPECT_EQ(stats.view.dictionary_size, stats_a.view.dictionary_size);
    EXPECT_EQ(stats.view.edges, 2);
    EXPECT_EQ(stats.ledger_size, stats_a.ledger_size);
  }
  // Bit-identical scores on every node (read from each node's view at the same version).
  const std::vector<double> expected = ProbeScores(*a, "a");
  ASSERT_EQ(expected.size(), 18u);
  EXPECT_EQ(ProbeScores(*b, "b"), expected);
  EXPECT_EQ(ProbeScores(*c, "c"), expected);
}

// Each replica runs the fit that is due and publishes the outcome: the first record of a fit
// (or of a dictionary coarsening) applies, the same one from another node does not.
TEST(ClusterModeTest, TheSameFitPublishedByTwoNodesAppliesOnce) {
  auto log = std::make_shared<MemorySharedLog>();
  auto a = OpenNode("a", log), b = OpenNode("b", log);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->SelectArm(ThreeArms().View()).ok());  // fixes the dimensions
  Settle({a.get(), b.get()}, *log);
  const std::optional<HyperparameterView> before = TheModel(*a).View()->hyperparameters;
  ASSERT_TRUE(before.has_value());
  HyperparametersOp fit;
  fit.values = before->values;
  fit.values.signal_variance *= 1.5;
  fit.kors_mu_factor = 1.0;
  fit.fitted_at = 20;
  fit.points = 20;
  HyperparametersOp coarser = fit;
  coarser.reason = HyperparametersOp::Reason::kDictionaryFull;
  coarser.kors_mu_factor = 2.0;
  coarser.fitted_at = 20;
  for (const auto& [op, id] : std::vector<std::pair<HyperparametersOp, std::string>>{
           {fit, "a/1"}, {fit, "b/1"}, {coarser, "a/2"}, {coarser, "b/2"}}) {
    ASSERT_TRUE(log->Append(EncodeReplicated(ModelOp(op)), id).ok());
  }
  Settle({a.get(), b.get()}, *log);
  for (Engine* node : {a.get(), b.get()}) {
    const std::optional<HyperparameterView> after = TheModel(*node).View()->hyperparameters;
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->fits_applied, before->fits_applied + 1);
    EXPECT_EQ(after->coarsenings, before->coarsenings + 1);
    EXPECT_EQ(after->values.signal_variance, fit.values.signal_variance);
    EXPECT_EQ(after->last_fit_rewards, 20);
  }
}

// Named features in cluster mode: the first request's slots and each freeze of a number's
// scale go through the shared log, so every node encodes the same value alike, whichever node
// saw the traffic.
TEST(ClusterModeTest, NamedFeatureSlotsAndScalesAreTheSameOnEveryNode) {
  auto log = std::make_shared<MemorySharedLog>();
  auto a = OpenNode("a", log), b = OpenNode("b", log);
  ASSERT_TRUE(a && b);
  const std::string genres[] = {"rock", "jazz"};
  std::vector<FeatureNamespace> context;
  std::vector<std::vector<FeatureNamespace>> arms(2);
  for (int round = 0; round < 40; ++round) {
    const double price = 100.0 + 7.0 * (round % 5);
    context = {{"", {{"price", FeatureValue::Number(price)}}}};
    DecisionRequest request;
    request.user_id = "alice";
    request.context_features = context;
    for (int g = 0; g < 2; ++g) {
      arms[g] = {{"item", {{"genre", FeatureValue::String(genres[g])}}}};
      request.candidates.push_back({genres[g], {}, arms[g]});
    }
    Engine& node = round % 2 == 0 ? *a : *b;  // only node a ever sees even rounds
    ASSERT_TRUE(node.SelectArm(request).ok()) << round;
  }
  Settle({a.get(), b.get()}, *log);
  EXPECT_GE(RecordsOfType(*log, 0, OpType::kFeatureScaling), 1);
  const auto va = TheModel(*a).View(), vb = TheModel(*b).View();
  EXPECT_EQ(va->context_slots, ModelOptions::FeatureOptions::kDefaultSlots);
  EXPECT_EQ(vb->context_slots, va->context_slots);
  EXPECT_EQ(vb->arm_slots, va->arm_slots);
  const uint64_t key = NumberKey("", "price");
  ASSERT_EQ(va->context_scaling->count(key), 1u);
  ASSERT_EQ(vb->context_scaling->count(key), 1u);
  EXPECT_EQ(va->context_scaling->at(key).center, vb->context_scaling->at(key).center);
  EXPECT_EQ(va->context_scaling->at(key).spread, vb->context_scaling->at(key).spread);
}

TEST(ClusterModeTest, AClientRetryOfADecisionOnAnotherNodeGetsTheSameDecision) {
  auto log = std::make_shared<MemorySharedLog>();
  auto a = OpenNode("a", log), b = OpenNode("b", log);
  ASSERT_TRUE(a && b);
  OwnedRequest request = ThreeArms();
  request.event_id = "client-1";
  auto first = a->SelectArm(request.View());
  ASSERT_TRUE(first.ok()) << first.status();
  auto retry = b->SelectArm(request.View());
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_TRUE(retry->replayed);
  EXPECT_EQ(retry->arms[0].arm_id, first->arms[0].arm_id);
  EXPECT_EQ(retry->arms[0].score, first->arms[0].score);
  OwnedRequest other = ThreeArms("bob");
  other.event_id = "client-1";
  EXPECT_EQ(b->SelectArm(other.View()).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(TheModel(*a).Stats().ledger_size, 1);
}

TEST(ClusterModeTest, AnAppendWhoseAnswerWasLostIsRetriedAndStoredOnce) {
  auto log = std::make_shared<MemorySharedLog>();
  auto a = OpenNode("a", log);
  ASSERT_TRUE(a);
  auto decision = a->SelectArm(ThreeArms().View());
  ASSERT_TRUE(decision.ok());
  const size_t records = log->Records().size();
  log->FailAppends(2, /*stored=*/true);  // stored by the first attempt, answers lost twice
  auto result = a->ReportReward({decision->event_id, 1.0, {}, ""});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->outcome, RewardOutcome::kAccepted);
  TheModel(*a).WaitForWriter();  // the reward's batch learned (a LearnOp after it)
  EXPECT_EQ(RecordsOfType(*log, records, OpType::kLearn), 1);
  EXPECT_EQ(log->Records().size(), records + 2);  // the report once, and the LearnOp
  EXPECT_EQ(TheModel(*a).View()->rewards_learned, 1);

  // The shared log takes nothing until the deadline: a retryable error, nothing learned.
  auto second = a->SelectArm(ThreeArms().View());
  ASSERT_TRUE(second.ok());
  log->FailAppends(1000, /*stored=*/false);
  auto refused =
      a->ReportReward({second->event_id, 1.0, {}, ""}, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  log->FailAppends(0, false);
  auto later = a->ReportReward({second->event_id, 0.5, {}, ""});
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_EQ(later->outcome, RewardOutcome::kAccepted);
  TheModel(*a).WaitForWriter();
  EXPECT_EQ(TheModel(*a).View()->rewards_learned, 2);
}

TEST(ClusterModeTest, ExpiryAndLatenessAreTheSameOnEveryNode) {
  auto log = std::make_shared<MemorySharedLog>();
  ModelOptions options = ClusterModel();
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.0;
  auto a = OpenNode("a", log, "", options), b = OpenNode("b", log, "", options);
  ASSERT_TRUE(a && b);
  const absl::Time t0 = absl::Now();
  auto decided = a->SelectArmAt(ThreeArms().View(), t0, absl::InfiniteFuture());
  ASSERT_TRUE(decided.ok());
  auto other = a->SelectArmAt(ThreeArms().View(), t0, absl::InfiniteFuture());
  ASSERT_TRUE(other.ok());
  // Received after the window on b, before anything closed it: late on b's answer.
  auto late = b->ReportRewardAt({decided->event_id, 1.0, {}, ""}, t0 + absl::Seconds(11),
                                absl::InfiniteFuture());
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(late->outcome, RewardOutcome::kLate);
  // Not due yet once the grace (2 s) is counted; then due: both close, on both nodes.
  EXPECT_EQ(b->ExpireDue(t0 + absl::Seconds(11)), 0);
  EXPECT_EQ(b->ExpireDue(t0 + absl::Seconds(13)), 2);
  Settle({a.get(), b.get()}, *log);
  for (Engine* node : {a.get(), b.get()}) {
    EXPECT_EQ(TheModel(*node).Stats().ledger_size, 0);
    EXPECT_EQ(TheModel(*node).View()->rewards_learned, 2);  // the default reward, twice
  }
  EXPECT_EQ(a->ExpireDue(t0 + absl::Seconds(60)), 0);  // nothing left: nothing published
}

// Apprentice mode on two nodes: the start is logged once (the second node finds it), both
// serve the baseline, the switch by the lift happens at the same reward on both, and an admin
// switch on one reaches the other; a node that joins later replays all of it.
TEST(ClusterModeTest, ApprenticeSwitchesAreTheSameOnEveryNode) {
  auto log = std::make_shared<MemorySharedLog>();
  ModelOptions options = ClusterModel();
  options.evaluation_epsilon = 0.3;
  options.apprentice_start = true;
  options.apprentice.min_decisions = 30;
  auto a = OpenNode("a", log, "", options), b = OpenNode("b", log, "", options);
  ASSERT_TRUE(a && b);
  Settle({a.get(), b.get()}, *log);
  EXPECT_EQ(RecordsOfType(*log, 0, OpType::kServingMode), 1);
  for (Engine* node : {a.get(), b.get()}) ASSERT_TRUE(TheModel(*node).View()->apprentice);
  // Arm "b" (index 1) earns 1, the others 0; the baseline is "a".
  Rng noise(9);
  for (int round = 0; round < 600 && TheModel(*a).View()->apprentice; ++round) {
    Engine& node = round % 2 == 0 ? *a : *b;
    OwnedRequest request = ThreeArms(absl::StrCat("user", round % 4));
    request.baseline = 0;
    auto decision = node.SelectArm(request.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    const double reward =
        (decision->arms[0].candidate_index == 1 ? 1.0 : 0.0) + 0.1 * noise.Normal();
    ASSERT_TRUE(node.ReportReward({decision->event_id, reward, {}, ""}).ok());
    Settle({a.get(), b.get()}, *log);
  }
  ASSERT_FALSE(TheModel(*a).View()->apprentice);
  const std::optional<SwitchRecord> switched = TheModel(*a).View()->last_switch;
  ASSERT_EQ(switched->reason, ServingSwitch::kLift);
  EXPECT_FALSE(TheModel(*b).View()->apprentice);
  EXPECT_EQ(TheModel(*b).View()->last_switch, switched);
  auto c = OpenNode("c", log, "", options);  // replays the whole shared log
  ASSERT_TRUE(c);
  Settle({a.get(), b.get(), c.get()}, *log);
  EXPECT_EQ(TheModel(*c).View()->last_switch, switched);
  EXPECT_EQ(RecordsOfType(*log, 0, OpType::kServingMode), 1);  // c logged no start
  // An admin switch on b reaches every node.
  auto back = TheModel(*b).SetServingMode(true);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->changed, 1);
  Settle({a.get(), b.get(), c.get()}, *log);
  for (Engine* node : {a.get(), b.get(), c.get()}) {
    EXPECT_TRUE(TheModel(*node).View()->apprentice);
    EXPECT_EQ(TheModel(*node).View()->last_switch->reason, ServingSwitch::kAdmin);
  }
}

TEST(ClusterModeTest, ADeferredDecisionIsLearnedOnceActivatedOnAnyNode) {
  auto log = std::make_shared<MemorySharedLog>();
  ModelOptions options = ClusterModel();
  options.reward_window = absl::Seconds(10);
  options.default_reward = 0.0;
  auto a = OpenNode("a", log, "", options), b = OpenNode("b", log, "", options);
  ASSERT_TRUE(a && b);
  const absl::Time t0 = absl::Now();
  OwnedRequest deferred = ThreeArms();
  deferred.defer_activation = true;
  auto shown = a->SelectArmAt(deferred.View(), t0, absl::InfiniteFuture());
  auto hidden = a->SelectArmAt(deferred.View(), t0, absl::InfiniteFuture());
  auto late = a->SelectArmAt(deferred.View(), t0, absl::InfiniteFuture());
  ASSERT_TRUE(shown.ok() && hidden.ok() && late.ok());
  for (const auto* d : {&*shown, &*hidden}) {  // `late` gets none: no default reward either
    auto reward = b->ReportRewardAt({d->event_id, 1.0, {}, ""}, t0, absl::InfiniteFuture());
    ASSERT_TRUE(reward.ok()) << reward.status();
    EXPECT_EQ(reward->outcome, RewardOutcome::kAccepted);
    EXPECT_EQ(reward->model_version, 0u);  // held
  }
  Settle({a.get(), b.get()}, *log);
  for (Engine* node : {a.get(), b.get()}) EXPECT_EQ(TheModel(*node).View()->rewards_learned, 0);
  auto activated = b->ActivateAt("", shown->event_id, t0, absl::InfiniteFuture());
  ASSERT_TRUE(activated.ok()) << activated.status();
  EXPECT_EQ(activated->outcome, ActivationOutcome::kActivated);
  EXPECT_GT(activated->model_version, 0u);
  auto again = a->ActivateAt("", shown->event_id, t0, absl::InfiniteFuture());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->outcome, ActivationOutcome::kAlreadyActive);
  // Received after the window: too late on every node, whether or not an expiry came first.
  auto too_late = a->ActivateAt("", late->event_id, t0 + absl::Seconds(11), absl::InfiniteFuture());
  ASSERT_TRUE(too_late.ok());
  EXPECT_EQ(too_late->outcome, ActivationOutcome::kClosed);
  auto unknown = a->ActivateAt("", "nobody", t0, absl::InfiniteFuture());
  ASSERT_TRUE(unknown.ok());
  EXPECT_EQ(unknown->outcome, ActivationOutcome::kUnknownEvent);
  // The two never activated close without teaching anything, the default reward included.
  EXPECT_EQ(b->ExpireDue(t0 + absl::Seconds(13)), 3);
  Settle({a.get(), b.get()}, *log);
  for (Engine* node : {a.get(), b.get()}) {
    EXPECT_EQ(TheModel(*node).Stats().ledger_size, 0);
    EXPECT_EQ(TheModel(*node).View()->rewards_learned, 1);
  }
  EXPECT_EQ(RecordsOfType(*log, 0, OpType::kActivate), 0);  // published as requests
  EXPECT_EQ(ProbeScores(*a, "a"), ProbeScores(*b, "b"));
}

TEST(ClusterModeTest, ARestartedNodeReadsTheSharedLogOnFromItsSnapshot) {
  auto log = std::make_shared<MemorySharedLog>();
  TempDir dir_a;
  auto a = OpenNode("a", log, dir_a.path());
  auto b = OpenNode("b", log);
  ASSERT_TRUE(a && b);
  for (int i = 0; i < 20; ++i) {
    auto decision = (i % 2 == 0 ? a : b)->SelectArm(ThreeArms(absl::StrCat("user", i % 4)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(b->ReportReward({decision->event_id, 0.1 * (i % 5), {}, ""}).ok());
  }
  Settle({a.get(), b.get()}, *log);
  absl::StatusOr<uint64_t> snapshot = TheModel(*a).Snapshot();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_EQ(*snapshot, *log->LastSeq());
  a.reset();  // shuts down (a final snapshot, if anything changed since)
  // b goes on alone.
  for (int i = 0; i < 20; ++i) {
    auto decision = b->SelectArm(ThreeArms(absl::StrCat("user", i % 4)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(b->ReportReward({decision->event_id, 0.05 * (i % 7), {}, ""}).ok());
  }
  a = OpenNode("a", log, dir_a.path());
  ASSERT_TRUE(a);
  EXPECT_EQ(TheModel(*a).recovery().snapshot_seq, *snapshot);
  Settle({a.get(), b.get()}, *log);
  EXPECT_EQ(TheModel(*a).View()->rewards_learned, 40);
  EXPECT_EQ(ProbeScores(*a, "a"), ProbeScores(*b, "b"));
}

// A node started together with its NATS cluster finds the stream not answering for a while
// (leaders being elected): it waits for it instead of failing to start.
TEST(ClusterModeTest, ANodeStartingWhileTheSharedLogDoesNotAnswerWaitsForIt) {
  auto log = std::make_shared<MemorySharedLog>();
  auto b = OpenNode("b", log);
  ASSERT_TRUE(b);
  for (int i = 0; i < 5; ++i) {
    auto decision = b->SelectArm(ThreeArms(absl::StrCat("user", i % 4)).View());
    ASSERT_TRUE(decision.ok());
    ASSERT_TRUE(b->ReportReward({decision->event_id, 0.2 * i, {}, ""}).ok());
  }
  log->FailLastSeq(4);
  TempDir dir;
  auto a = OpenNode("a", log, dir.path());
  ASSERT_TRUE(a);
  Settle({a.get(), b.get()}, *log);
  EXPECT_EQ(TheModel(*a).View()->rewards_learned, 5);
  EXPECT_EQ(ProbeScores(*a, "a"), ProbeScores(*b, "b"));
}

TEST(ClusterModeTest, VersionsAndRewardsThatANodeCannotPlaceAreRefusedPrecisely) {
  auto log = std::make_shared<MemorySharedLog>();  // each model has its own shared log
  auto ads_log = std::make_shared<MemorySharedLog>();
  ModelOptions news = ClusterModel(), ads = ClusterModel();
  news.name = "news";
  ads.name = "ads";
  EngineOptions options;
  options.models = {news, ads};
  options.default_model = "news";
  options.run_sweeper = false;
  options.node_id = "a";
  options.shared_log =
      [log, ads_log](const ModelOptions& model) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    return model.name == "ads" ? ads_log : log;
  };
  auto engine = Engine::Open(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  // Several models: a node cannot tell from its own ledger which made a decision that it may
  // not have applied yet, so a reward must name the model.
  auto unnamed = (*engine)->ReportReward({"e1", 1.0, {}, ""});
  EXPECT_EQ(unnamed.status().code(), absl::StatusCode::kInvalidArgument) << unnamed.status();
  auto named = (*engine)->ReportReward({"e1", 1.0, {}, "news"});
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->outcome, RewardOutcome::kUnknownEvent);
  // A version beyond the end of the shared log is refused; one within it is waited for.
  Model& model = **(*engine)->FindModel("news");
  const uint64_t last = *log->LastSeq();
  EXPECT_EQ(model.WaitForVersion(last + 5, absl::Now() + absl::Seconds(5)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(model.WaitForVersion(last, absl::Now() + absl::Seconds(5)).ok());
}

// A report refused for its values never reaches the shared log: the node that receives it
// answers at once, with the model's own bound.
TEST(ClusterModeTest, AReportRefusedForItsValuesIsNotLogged) {
  auto log = std::make_shared<MemorySharedLog>();
  ModelOptions model = ClusterModel();
  model.reward_bound = 5.0;
  auto a = OpenNode("a", log, "", model), b = OpenNode("b", log, "", model);
  ASSERT_TRUE(a && b);
  auto decision = a->SelectArm(ThreeArms("user0").View());
  ASSERT_TRUE(decision.ok()) << decision.status();
  const size_t records = log->Records().size();
  for (const RewardRequest& bad :
       {RewardRequest{decision->event_id, 6.0, {}, ""},
        RewardRequest{decision->event_id, std::numeric_limits<double>::quiet_NaN(), {}, ""},
        RewardRequest{"nobody", -7.0, {}, ""},
        RewardRequest{decision->event_id, std::nullopt, {{"a", 1.0}, {"a", 1.0}}, ""}}) {
    auto refused = b->ReportReward(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  }
  EXPECT_EQ(log->Records().size(), records);
  auto accepted = b->ReportReward({decision->event_id, 5.0, {}, ""});
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->outcome, RewardOutcome::kAccepted);
  EXPECT_GT(log->Records().size(), records);
}

TEST(ClusterModeTest, StateThatDoesNotBelongToTheSharedLogIsRefused) {
  TempDir dir;
  {
    // A single node's state directory, with its local log.
    EngineOptions options;
    options.state_dir = dir.path();
    options.run_sweeper = false;
    auto single = Engine::Open(options);
    ASSERT_TRUE(single.ok());
    ASSERT_TRUE((*single)->SelectArm(ThreeArms().View()).ok());
  }
  EngineOptions options;
  options.state_dir = dir.path();
  options.run_sweeper = false;
  options.node_id = "a";
  auto log = std::make_shared<MemorySharedLog>();
  options.shared_log = [log](const ModelOptions&) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    return log;
  };
  auto refused = Engine::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();

  // Snapshots from a shared log longer than this one.
  TempDir cluster_dir;
  {
    auto node = OpenNode("a", log, cluster_dir.path());
    ASSERT_TRUE(node);
    ASSERT_TRUE(node->SelectArm(ThreeArms().View()).ok());
    ASSERT_TRUE(TheModel(*node).Snapshot().ok());
  }
  options.state_dir = cluster_dir.path();
  auto fresh_log = std::make_shared<MemorySharedLog>();
  options.shared_log =
      [fresh_log](const ModelOptions&) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    return fresh_log;
  };
  refused = Engine::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();

  // A shared log that no longer holds the records after the node's snapshot.
  TempDir behind_dir;
  auto trimmed_log = std::make_shared<MemorySharedLog>();
  {
    auto node = OpenNode("a", trimmed_log, behind_dir.path());
    ASSERT_TRUE(node);
    ASSERT_TRUE(node->SelectArm(ThreeArms().View()).ok());
    ASSERT_TRUE(TheModel(*node).Snapshot().ok());
  }
  {
    auto other = OpenNode("b", trimmed_log);
    ASSERT_TRUE(other);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(other->SelectArm(ThreeArms().View()).ok());
  }
  trimmed_log->DropBefore(*trimmed_log->LastSeq());
  options.state_dir = behind_dir.path();
  options.shared_log =
      [trimmed_log](const ModelOptions&) -> absl::StatusOr<std::shared_ptr<SharedLog>> {
    return trimmed_log;
  };
  refused = Engine::Open(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_NE(refused.status().message().find("no longer in the log"), absl::string_view::npos)
      << refused.status();

  options.node_id = "a b";
  options.state_dir = "";
  EXPECT_EQ(Engine::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace graphbandit
