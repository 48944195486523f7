// Logs that travel and offline evaluation (sim/logged_history.h, sim/offline_replay.h): a model
// with the evaluation share logs every candidate; its log reads back as the decisions and
// rewards it served, writes as DSJSON and reads back unchanged; Vowpal Wabbit's own DSJSON
// lines read as Vowpal Wabbit reads them; and graphbandit-replay's values cover what is known to
// be true on a simulated log.
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "core/base/random.h"
#include "core/model/engine.h"
#include "sim/environment.h"
#include "sim/logged_history.h"
#include "sim/offline_replay.h"
#include "sim/runner.h"
#include "sim/warm_start.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit::replay {
namespace {

constexpr int kArms = 5;
double Expected(int arm) { return 0.1 + 0.2 * arm; }  // item0..item4
std::vector<double> ItemFeatures(int arm) { return {std::cos(arm), std::sin(arm)}; }

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A served model with the evaluation share, `rounds` decisions for three users (two of them
// friends), each rewarded; the model is closed when this returns. Each reward is learned before
// the next decision, so the decisions do not depend on how the writer thread is scheduled (the
// checks on them are statistical).
struct Served {
  std::vector<Decision> decisions;
  std::vector<double> rewards;
};
Served Serve(const std::string& state_dir, int rounds, double epsilon,
             PolicyKind policy = PolicyKind::kEkUcb, bool apprentice = false) {
  ModelOptions options;
  options.name = "default";
  options.policy = policy;
  options.apprentice_start = apprentice;
  options.evaluation_epsilon = epsilon;
  options.reward_window = absl::Seconds(600);
  options.refit.enabled = false;  // no fits to wait for (below); the log is what is tested
  options.max_learn_delay = absl::ZeroDuration();  // each reward learned once applied
  Served served;
  auto engine = OpenEngine({options}, state_dir);
  Model* model = *engine->FindModel("");
  EXPECT_TRUE(model->AddUsers({"user0", "user1", "user2"}).ok());
  EXPECT_TRUE(model->AddEdges({EdgeEdit{"user0", "user1", 0.5}}).ok());
  Rng noise(5);
  for (int t = 0; t < rounds; ++t) {
    OwnedRequest r;
    r.user = absl::StrCat("user", t % 3);
    r.context = {0.25 * (t % 4)};
    for (int a = 0; a < kArms; ++a)
      r.candidates.push_back({absl::StrCat("item", a), ItemFeatures(a)});
    r.event_id = absl::StrCat("e", t);
    r.baseline = t % 2 == 0 ? 1 : -1;
    auto decision = engine->SelectArm(r.View());
    EXPECT_TRUE(decision.ok()) << decision.status();
    if (!decision.ok()) return served;
    const double reward = Expected(decision->arms[0].arm_id.back() - '0') + 0.1 * noise.Normal();
    EXPECT_TRUE(engine->ReportReward({decision->event_id, reward, {}, ""}).ok());
    model->WaitForFits();
    served.decisions.push_back(*decision);
    served.rewards.push_back(reward);
  }
  return served;
}

TEST(LoggedHistoryTest, TheLogHoldsEveryCandidateOfEveryDecision) {
  TempDir dir;
  const double epsilon = 0.3;
  const Served served = Serve(dir.path(), 300, epsilon);
  auto history = ReadStateDirectory(dir.path(), "default");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_TRUE(history->from_start);
  ASSERT_EQ(history->events.size(), served.decisions.size());
  EXPECT_EQ(history->decisions_without_candidates, 0);
  EXPECT_EQ(history->decisions_without_reward, 0);
  ASSERT_EQ(history->edges.size(), 1u);
  EXPECT_EQ(history->edges[0].weight, 0.5);
  int explored = 0, single = 0;
  for (size_t t = 0; t < served.decisions.size(); ++t) {
    const LoggedEvent& e = history->events[t];
    const Decision& d = served.decisions[t];
    EXPECT_EQ(e.event_id, d.event_id);
    EXPECT_EQ(e.user, absl::StrCat("user", t % 3));
    EXPECT_EQ(e.context, std::vector<double>{0.25 * (t % 4)});
    ASSERT_EQ(e.ids.size(), static_cast<size_t>(kArms));
    for (int a = 0; a < kArms; ++a) {
      EXPECT_EQ(e.ids[a], absl::StrCat("item", a));
      EXPECT_EQ(e.features[a], ItemFeatures(a));
    }
    EXPECT_EQ(e.ids[e.chosen], d.arms[0].arm_id);
    EXPECT_EQ(e.probabilities[e.chosen], *d.arms[0].probability);
    EXPECT_EQ(e.reward, served.rewards[t]);
    EXPECT_EQ(e.explored, d.explored);
    EXPECT_EQ(e.baseline, t % 2 == 0 ? 1 : -1);
    // UCB's rule is deterministic: the k arms tied for the best score share its part,
    // (1 - e) / k + e / K each, and the others have e / K. Ties are of every item while the
    // prior scores them alike, and of pairs early on: items on either side of a rewarded one are
    // equally far from it (the features lie on a circle).
    double sum = 0.0;
    int top = 0;
    for (double p : e.probabilities) {
      sum += p;
      if (std::abs(p - epsilon / kArms) > 1e-12) ++top;
    }
    ASSERT_GE(top, 1) << t;
    for (double p : e.probabilities) {
      if (std::abs(p - epsilon / kArms) > 1e-12) {
        EXPECT_NEAR(p, (1 - epsilon) / top + epsilon / kArms, 1e-12) << t;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
    single += top == 1 ? 1 : 0;
    explored += e.explored ? 1 : 0;
  }
  EXPECT_GT(explored, 60);
  EXPECT_LT(explored, 120);
  EXPECT_GT(single, 250);  // ties only until the first rewards are learned
}

// Thompson sampling's and an apprentice's logged probabilities: the chosen arm's is the one
// SelectArm answered, and they add up to 1 (Thompson's by numerical integration).
TEST(LoggedHistoryTest, ThompsonAndApprenticeLogTheirMixtures) {
  const double epsilon = 0.2;
  for (const bool apprentice : {false, true}) {
    TempDir dir;
    const Served served = Serve(dir.path(), 60, epsilon, PolicyKind::kEkTs, apprentice);
    auto history = ReadStateDirectory(dir.path(), "default");
    ASSERT_TRUE(history.ok()) << history.status();
    ASSERT_EQ(history->events.size(), served.decisions.size());
    for (size_t t = 0; t < served.decisions.size(); ++t) {
      const LoggedEvent& e = history->events[t];
      EXPECT_EQ(e.probabilities[e.chosen], *served.decisions[t].arms[0].probability) << t;
      double sum = 0.0;
      for (double p : e.probabilities) sum += p;
      EXPECT_NEAR(sum, 1.0, apprentice ? 1e-12 : 1e-3) << t;
      if (apprentice) {
        // The baseline (item1 on even rounds, else the first item) or a uniform draw.
        const int b = t % 2 == 0 ? 1 : 0;
        for (int a = 0; a < kArms; ++a) {
          EXPECT_NEAR(e.probabilities[a], (a == b ? 1 - epsilon : 0.0) + epsilon / kArms, 1e-12);
        }
      }
    }
  }
}

TEST(LoggedHistoryTest, WithoutTheShareNothingIsKeptAndTheCountSaysWhy) {
  TempDir dir;
  Serve(dir.path(), 20, 0.0);
  auto history = ReadStateDirectory(dir.path(), "default");
  ASSERT_TRUE(history.ok()) << history.status();
  EXPECT_TRUE(history->events.empty());
  EXPECT_EQ(history->decisions_without_candidates, 20);
  EXPECT_NE(DescribeHistory(*history).find("20 decisions without every candidate"),
            std::string::npos);
  EXPECT_EQ(ReadStateDirectory(dir.path(), "other").status().code(), absl::StatusCode::kNotFound);
}

// Every field a DSJSON line carries, read with protobuf's JSON parser (not ours), and the
// whole history read back by ours unchanged.
TEST(DsjsonTest, AnExportedLogReadsBackUnchanged) {
  TempDir dir;
  Serve(dir.path(), 120, 0.5);
  auto history = ReadStateDirectory(dir.path(), "default");
  ASSERT_TRUE(history.ok()) << history.status();
  std::string text;
  for (const LoggedEvent& e : history->events) {
    const std::string line = ToDsjsonLine(e);
    text += line + "\n";
    // Vowpal Wabbit reads a line as a stream: the label before the features, and the shared
    // features before the actions.
    EXPECT_LT(line.find("\"_label_cost\""), line.find("\"c\""));
    EXPECT_LT(line.find("\"x\""), line.find("\"_multi\""));
    EXPECT_LT(line.find("\"user\""), line.find("\"_multi\""));
    google::protobuf::Struct json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &json).ok()) << line;
    const auto& f = json.fields();
    EXPECT_EQ(f.at("_label_cost").number_value(), -e.reward);
    EXPECT_EQ(f.at("_label_probability").number_value(), e.probabilities[e.chosen]);
    EXPECT_EQ(f.at("_label_Action").number_value(), e.chosen + 1);
    EXPECT_EQ(f.at("_labelIndex").number_value(), e.chosen);
    EXPECT_EQ(f.at("EventId").string_value(), e.event_id);
    const auto& a = f.at("a").list_value();
    const auto& p = f.at("p").list_value();
    ASSERT_EQ(a.values_size(), kArms);
    ASSERT_EQ(p.values_size(), kArms);
    EXPECT_EQ(a.values(0).number_value(), e.chosen + 1);
    for (int j = 0; j < kArms; ++j) {
      const int arm = static_cast<int>(a.values(j).number_value()) - 1;
      EXPECT_EQ(p.values(j).number_value(), e.probabilities[arm]);
    }
    const auto& multi = f.at("c").struct_value().fields().at("_multi").list_value();
    ASSERT_EQ(multi.values_size(), kArms);
    EXPECT_EQ(multi.values(2).struct_value().fields().at("id").string_value(), "item2");
    EXPECT_EQ(f.at("_explored").bool_value(), e.explored);
    EXPECT_EQ(f.count("_ba") == 1, e.baseline >= 0);
  }
  auto back = ParseDsjson(text, "export");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->events.size(), history->events.size());
  for (size_t i = 0; i < back->events.size(); ++i) {
    const LoggedEvent& x = history->events[i];
    const LoggedEvent& y = back->events[i];
    EXPECT_EQ(y.event_id, x.event_id);
    EXPECT_EQ(y.created_micros, x.created_micros);
    EXPECT_EQ(y.user, x.user);
    EXPECT_EQ(y.context, x.context);
    EXPECT_EQ(y.ids, x.ids);
    EXPECT_EQ(y.features, x.features);
    EXPECT_EQ(y.probabilities, x.probabilities);
    EXPECT_EQ(y.means, x.means);
    EXPECT_EQ(y.chosen, x.chosen);
    EXPECT_EQ(y.baseline, x.baseline);
    EXPECT_EQ(y.explored, x.explored);
    EXPECT_EQ(y.reward, x.reward);
    EXPECT_EQ(y.weight, 1.0);
  }
  // And the command writes the same lines.
  const std::string out = dir.path() + "/export.dsjson";
  const std::string command =
      absl::StrCat(GRAPHBANDIT_REPLAY_BINARY, " --state_dir=", dir.path(),
                   " --model=default --export_dsjson=", out, " 2>", dir.path(), "/stderr");
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadAll(dir.path() + "/stderr");
  EXPECT_EQ(ReadAll(out), text);
  EXPECT_NE(ReadAll(dir.path() + "/stderr").find("reaches back to the model's first record"),
            std::string::npos);
}

// The model's live off-policy estimates, recomputed from nothing but the exported lines (read with
// protobuf's JSON parser): each estimator's value is the same.
TEST(DsjsonTest, TheExportReproducesTheModelsEstimates) {
  TempDir dir;
  Serve(dir.path(), 400, 0.3);
  auto history = ReadStateDirectory(dir.path(), "default");
  ASSERT_TRUE(history.ok()) << history.status();
  std::vector<PolicyValue> live;
  {
    ModelOptions options;
    options.name = "default";
    options.evaluation_epsilon = 0.3;
    auto engine = OpenEngine({options}, dir.path());
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    live = model->View()->policy_values;
  }
  ASSERT_EQ(live.size(), 4u);  // deployed, uniform, greedy, baseline
  // Per policy: sums of w r, w, and the DR terms, over n decisions.
  std::vector<double> ips(4, 0.0), weights(4, 0.0), dr(4, 0.0);
  int n = 0;
  for (const LoggedEvent& e : history->events) {
    google::protobuf::Struct json;
    ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(ToDsjsonLine(e), &json).ok());
    const auto& f = json.fields();
    const double reward = -f.at("_label_cost").number_value();
    const double p = f.at("_label_probability").number_value();
    const int chosen = static_cast<int>(f.at("_labelIndex").number_value());
    const auto& multi = f.at("c").struct_value().fields().at("_multi").list_value();
    std::vector<double> q;
    for (const auto& action : multi.values()) {
      q.push_back(action.struct_value().fields().at("_q").number_value());
    }
    const int k = static_cast<int>(q.size());
    const double best = *std::max_element(q.begin(), q.end());
    const int ties = static_cast<int>(std::count(q.begin(), q.end(), best));
    const int b = f.count("_ba")
                      ? static_cast<int>(f.at("_ba").list_value().values(0).number_value()) - 1
                      : 0;
    double mean_q = 0.0;
    for (double v : q) mean_q += v / k;
    // (probability of the logged arm, value of the policy under q) per policy.
    const std::vector<std::pair<double, double>> targets = {
        {1.0, 0.0},  // deployed: weight 1, its plain mean
        {1.0 / k, mean_q},
        {q[chosen] == best ? 1.0 / ties : 0.0, best},
        {chosen == b ? 1.0 : 0.0, q[b]}};
    for (int t = 0; t < 4; ++t) {
      const double w = t == 0 ? 1.0 : targets[t].first / p;
      ips[t] += w * reward;
      weights[t] += w;
      dr[t] += t == 0 ? reward : targets[t].second + w * (reward - q[chosen]);
    }
    ++n;
  }
  ASSERT_GT(n, 300);
  for (int t = 0; t < 4; ++t) {
    ASSERT_TRUE(live[t].valid) << t;
    EXPECT_EQ(live[t].decisions, n);
    EXPECT_NEAR(live[t].ips.estimate, ips[t] / n, 1e-9) << t;
    EXPECT_NEAR(live[t].snips.estimate, ips[t] / weights[t], 1e-9) << t;
    EXPECT_NEAR(live[t].dr.estimate, dr[t] / n, 1e-9) << t;
  }
}

// Lines from Vowpal Wabbit's public test data (test/train-sets/cb_simple_pdrop.json and the
// first line of test/train-sets/dsjson_cb.json, BSD-3-Clause), read as Vowpal Wabbit's
// --dsjson parser reads them.
TEST(DsjsonTest, ReadsVowpalWabbitLines) {
  const std::string pdrop =
      R"({"_label_cost":-1.0,"_label_probability":0.5,"_label_Action":2,"_labelIndex":1,"a":[2,1],)"
      R"("c":{"shared":{"f":"1"},"_multi":[{"action":{"f":"1"}},{"action":{"f":"2"}}]},)"
      R"("p":[0.5,0.5],"pdrop":0.9})";
  const std::string personalizer =
      R"({"_label_cost":-0.0,"_label_probability":0.05000000074505806,"_label_Action":4,)"
      R"("_labelIndex":3,"o":[{"v":0.0,"EventId":"13118d9b4c114f8485d9dec417e3aefe",)"
      R"("ActionTaken":false}],"Timestamp":"2021-02-04T16:31:29.2460000Z","Version":"1",)"
      R"("EventId":"13118d9b4c114f8485d9dec417e3aefe","a":[4,2,1,3],"c":{"FromUrl":[{)"
      R"("timeofday":"Afternoon","weather":"Sunny","name":"Cathy"}],"_multi":[{"_tag":)"
      R"("Cappucino","i":{"constant":1,"id":"Cappucino"},"j":[{"type":"hot","origin":"kenya",)"
      R"("organic":"yes","roast":"dark"}]},{"_tag":"Cold brew","i":{"constant":1,"id":)"
      R"("Cold brew"},"j":[{"type":"cold","origin":"brazil","organic":"yes","roast":"light"}]},)"
      R"({"_tag":"Iced mocha","i":{"constant":1,"id":"Iced mocha"},"j":[{"type":"cold",)"
      R"("origin":"ethiopia","organic":"no","roast":"light"}]},{"_tag":"Latte","i":{"constant":)"
      R"(1,"id":"Latte"},"j":[{"type":"hot","origin":"brazil","organic":"no","roast":"dark"}]}]},)"
      R"("p":[0.05,0.05,0.05,0.85],"VWState":{"m":"ff0744c1aa494e1ab39ba0c78d048146/)"
      R"(550c12cbd3aa47f09fbed3387fb9c6ec"},"_original_label_cost":-0.0})";
  const std::string skipped =
      R"({"_label_cost":-1.0,"_label_probability":0.5,"_labelIndex":0,"_skipLearn":true,)"
      R"("a":[1,2],"c":{"_multi":[{"x":1},{"x":2}]},"p":[0.5,0.5]})";
  const std::string unlabelled = R"({"a":[1,2],"c":{"_multi":[{"x":1},{"x":2}]},"p":[0.5,0.5]})";

  auto simple = ParseDsjson(pdrop + "\n" + skipped + "\n" + unlabelled + "\n", "vw");
  ASSERT_TRUE(simple.ok()) << simple.status();
  EXPECT_EQ(simple->lines_skipped, 2);
  ASSERT_EQ(simple->events.size(), 1u);
  const LoggedEvent& s = simple->events[0];
  EXPECT_EQ(s.reward, 1.0);
  EXPECT_EQ(s.chosen, 1);
  EXPECT_EQ(s.probabilities, (std::vector<double>{0.5, 0.5}));
  EXPECT_NEAR(s.weight, 10.0, 1e-12);  // 1 / (1 - pdrop)
  EXPECT_TRUE(s.explored);             // every action had the same probability
  EXPECT_EQ(s.ids, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(s.context, std::vector<double>{1.0});  // shared.f=1
  EXPECT_EQ(s.features, (std::vector<std::vector<double>>{{1.0, 0.0}, {0.0, 1.0}}));

  auto coffee = ParseDsjson(personalizer, "vw");
  ASSERT_TRUE(coffee.ok()) << coffee.status();
  ASSERT_EQ(coffee->events.size(), 1u);
  const LoggedEvent& c = coffee->events[0];
  EXPECT_EQ(c.reward, 0.0);
  EXPECT_EQ(c.chosen, 3);
  EXPECT_EQ(c.ids, (std::vector<std::string>{"Cappucino", "Cold brew", "Iced mocha", "Latte"}));
  // p follows a = [4, 2, 1, 3]; the logged action's probability is _label_probability.
  EXPECT_EQ(c.probabilities, (std::vector<double>{0.05, 0.05, 0.85, 0.05000000074505806}));
  EXPECT_FALSE(c.explored);
  EXPECT_EQ(c.event_id, "13118d9b4c114f8485d9dec417e3aefe");
  EXPECT_EQ(c.created_micros, absl::ToUnixMicros(absl::FromCivil(
                                  absl::CivilSecond(2021, 2, 4, 16, 31, 29), absl::UTCTimeZone())) +
                                  246000);
  EXPECT_EQ(c.user, "dsjson");
  // Shared: FromUrl.name=Cathy, FromUrl.timeofday=Afternoon, FromUrl.weather=Sunny.
  EXPECT_EQ(c.context, (std::vector<double>{1.0, 1.0, 1.0}));
  // Each action: i.constant, i.id=..., j.organic=..., j.origin=..., j.roast=..., j.type=...
  for (const std::vector<double>& f : c.features) {
    double sum = 0.0;
    for (double v : f) sum += v;
    EXPECT_EQ(sum, 6.0);
  }
  EXPECT_NE(c.features[0], c.features[1]);

  // Malformed lines fail with their line number.
  for (const std::string& bad : {
           std::string(R"({"_label_cost":-1,"a":[3],"c":{"_multi":[{"x":1}]},"p":[1]})"),
           std::string(R"({"_label_cost":-1,"_labelIndex":0,"c":{"_multi":[{"x":1}]}})"),
           std::string(
               R"({"_label_cost":"high","_labelIndex":0,"c":{"_multi":[{"x":1}]},"p":[1]})"),
           std::string(R"({"_label_cost":-1,"_labelIndex":0,"_label_probability":0.5,"c":{}})"),
           std::string(R"({"_label_cost":-1,"_labelIndex":0,"_label_probability":0.5,)"
                       R"("pdrop":1,"c":{"_multi":[{"x":1}]}})"),
           std::string(R"({"_label_cost":-1,)"),
       }) {
    auto parsed = ParseDsjson(pdrop + "\n" + bad + "\n", "bad.json");
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("bad.json line 2"), std::string::npos)
        << parsed.status();
  }
}

// A world whose truth is known: five items with expected rewards 0.1 .. 0.9 and noise 0.1, one
// user, and a log drawn uniformly at random.
class FiveItems final : public sim::SimEnvironment {
 public:
  explicit FiveItems(uint64_t seed) : seed_(seed) {}
  std::string name() const override { return "five items"; }
  int users() const override { return 1; }
  const std::vector<sim::Edge>& edges() const override { return edges_; }
  int context_dim() const override { return 0; }
  int arm_dim() const override { return 2; }
  sim::Round MakeRound(uint64_t index) const override {
    Rng rng = sim::StreamRng(seed_, 1, index);
    sim::Round round;
    round.arms.resize(2, kArms);
    round.means.resize(kArms);
    round.noise.resize(kArms);
    for (int a = 0; a < kArms; ++a) {
      round.arms(0, a) = std::cos(a);
      round.arms(1, a) = std::sin(a);
      round.means(a) = Expected(a);
      round.noise(a) = 0.1 * rng.Normal();
    }
    return round;
  }

 private:
  uint64_t seed_;
  std::vector<sim::Edge> edges_;
};

// `decisions` drawn uniformly from the first K items, K alternating between `k_values`.
LoggedHistory UniformLog(int decisions, uint64_t seed, std::vector<int> k_values = {kArms}) {
  LoggedHistory history;
  history.source = "simulated";
  Rng rng(seed);
  for (int t = 0; t < decisions; ++t) {
    LoggedEvent e;
    e.event_id = absl::StrCat("sim-", t);
    e.user = "u";
    const int k = k_values[t % k_values.size()];
    for (int a = 0; a < k; ++a) {
      e.ids.push_back(absl::StrCat("item", a));
      e.features.push_back(ItemFeatures(a));
      e.probabilities.push_back(1.0 / k);
    }
    e.chosen = static_cast<int>(rng.UniformInt(static_cast<uint64_t>(k)));
    e.explored = true;
    e.reward = Expected(e.chosen) + 0.1 * rng.Normal();
    history.events.push_back(std::move(e));
  }
  return history;
}

bool Covers(const ValueInterval& v, double truth) { return v.lower <= truth && truth <= v.upper; }

TEST(OfflineReplayTest, ValuesCoverTheKnownTruth) {
  const LoggedHistory history = UniformLog(4000, 11);
  ModelOptions uniform;
  uniform.name = "uniform";
  uniform.policy = PolicyKind::kRandom;
  ModelOptions served;  // the default served model
  served.name = "default";
  const ReplayReport report = Replay(history, {{"uniform", uniform}, {"default", served}}, 1);
  ASSERT_EQ(report.candidates.size(), 2u);
  EXPECT_EQ(report.decisions, 4000);
  EXPECT_EQ(report.uniform_decisions, 4000);
  EXPECT_TRUE(Covers(report.logged, 0.5)) << report.logged.estimate;

  // Uniform random earns the mean of the items, 0.5, by every estimator.
  const CandidateValue& u = report.candidates[0];
  ASSERT_TRUE(u.error.empty()) << u.error;
  EXPECT_GT(u.kept, 650);
  EXPECT_LT(u.kept, 950);
  EXPECT_TRUE(Covers(u.replay, 0.5)) << u.replay.estimate;
  ASSERT_TRUE(u.off_policy.valid);
  EXPECT_TRUE(Covers(u.off_policy.ips, 0.5)) << u.off_policy.ips.estimate;
  EXPECT_TRUE(Covers(u.off_policy.snips, 0.5)) << u.off_policy.snips.estimate;
  EXPECT_TRUE(Covers(u.off_policy.dr, 0.5)) << u.off_policy.dr.estimate;

  // The served model, replayed on the kept decisions, earns what it earns online over as many
  // rounds: the truth is its mean reward in the world itself, over 40 runs.
  const CandidateValue& d = report.candidates[1];
  ASSERT_TRUE(d.error.empty()) << d.error;
  double online = 0.0;
  const int runs = 40;
  for (int seed = 1; seed <= runs; ++seed) {
    sim::RunSpec spec;
    spec.environment = "five items";
    spec.make_environment = [](uint64_t s) -> absl::StatusOr<std::unique_ptr<sim::SimEnvironment>> {
      return std::make_unique<FiveItems>(s);
    };
    spec.policy.name = "default";
    spec.policy.model = served;
    spec.seed = static_cast<uint64_t>(seed);
    spec.rounds = d.kept;
    spec.sample_points = 1;
    const sim::RunOutput out = sim::Run(spec, nullptr);
    ASSERT_TRUE(out.error.empty()) << out.error;
    online += Expected(kArms - 1) - out.result.cumulative_regret.back() / d.kept;
  }
  online /= runs;
  EXPECT_GT(online, 0.8);
  EXPECT_TRUE(Covers(d.replay, online))
      << d.replay.estimate << " [" << d.replay.lower << ", " << d.replay.upper << "] vs " << online;
  // Learning from every logged reward, it soon chooses the best item: its off-policy value is
  // near 0.9 and far above uniform's.
  ASSERT_TRUE(d.off_policy.valid);
  EXPECT_GT(d.off_policy.dr.lower, 0.8);
  EXPECT_LT(d.off_policy.dr.lower, 0.9);
  EXPECT_GT(d.off_policy.ips.lower, u.off_policy.ips.upper);
}

// A candidate configured like the logging model, its evaluation share included, keeps about 1 in
// K uniform decisions (its coins are its own, not the server's); and with K varying, the kept
// rewards are weighed by K, so that uniform random's value is still what it earns.
TEST(OfflineReplayTest, ReplayIsUnbiasedForSharesAndVaryingCandidateCounts) {
  ModelOptions sharing;
  sharing.name = "sharing";
  sharing.evaluation_epsilon = 0.5;
  const ReplayReport shared = Replay(UniformLog(3000, 21), {{"sharing", sharing}}, 1);
  const CandidateValue& s = shared.candidates[0];
  ASSERT_TRUE(s.error.empty()) << s.error;
  EXPECT_NEAR(static_cast<double>(s.kept) / s.uniform_decisions, 1.0 / kArms, 0.03);

  ModelOptions uniform;
  uniform.name = "uniform";
  uniform.policy = PolicyKind::kRandom;
  const ReplayReport varying = Replay(UniformLog(6000, 22, {2, 5}), {{"uniform", uniform}}, 1);
  const CandidateValue& u = varying.candidates[0];
  ASSERT_TRUE(u.error.empty()) << u.error;
  // Half the decisions among items 0-1 (mean 0.2), half among items 0-4 (mean 0.5). The plain
  // mean of the kept rewards would be near (0.5 * 0.2 + 0.2 * 0.5) / 0.7 = 0.286.
  EXPECT_TRUE(Covers(u.replay, 0.35)) << u.replay.estimate;
  EXPECT_TRUE(Covers(u.off_policy.ips, 0.35)) << u.off_policy.ips.estimate;
  EXPECT_TRUE(Covers(u.off_policy.dr, 0.35)) << u.off_policy.dr.estimate;
}

// The command, on the same log as DSJSON, with the candidates as a server configuration: the
// same values as in-process, as a table, JSON and SVG.
TEST(OfflineReplayTest, TheCommandReportsTheSameValues) {
  TempDir dir;
  const LoggedHistory history = UniformLog(1500, 12);
  ASSERT_TRUE(WriteDsjson(history, dir.path() + "/log.dsjson").ok());
  {
    std::ofstream config(dir.path() + "/candidates.textproto");
    config << "models { name: \"default\" }\n";
  }
  ModelOptions served;
  served.name = "default";
  auto read = ReadDsjson(dir.path() + "/log.dsjson");
  ASSERT_TRUE(read.ok()) << read.status();
  const ReplayReport expected = Replay(*read, {{"default", served}}, 7);
  const std::string command = absl::StrCat(
      GRAPHBANDIT_REPLAY_BINARY, " --dsjson=", dir.path(), "/log.dsjson --candidates=", dir.path(),
      "/candidates.textproto --seed=7 --json=", dir.path(), "/report.json --svg=", dir.path(),
      "/report.svg >", dir.path(), "/table.txt 2>", dir.path(), "/stderr");
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadAll(dir.path() + "/stderr");
  EXPECT_EQ(ReadAll(dir.path() + "/report.json"), FormatJson(expected));
  EXPECT_EQ(ReadAll(dir.path() + "/table.txt"), FormatTable(expected));
  const std::string svg = ReadAll(dir.path() + "/report.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("default: dr"), std::string::npos);
  google::protobuf::Struct json;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(ReadAll(dir.path() + "/report.json"), &json)
          .ok());
  const auto& candidate = json.fields().at("candidates").list_value().values(0).struct_value();
  EXPECT_EQ(candidate.fields().at("name").string_value(), "default");
  EXPECT_NEAR(candidate.fields()
                  .at("off_policy")
                  .struct_value()
                  .fields()
                  .at("dr")
                  .struct_value()
                  .fields()
                  .at("estimate")
                  .number_value(),
              expected.candidates[0].off_policy.dr.estimate, 1e-9);

  // Bad input: a clear message and a failing exit status.
  const std::string missing = absl::StrCat(GRAPHBANDIT_REPLAY_BINARY, " --dsjson=", dir.path(),
                                           "/none.json 2>", dir.path(), "/stderr");
  EXPECT_NE(std::system(missing.c_str()), 0);
  EXPECT_NE(ReadAll(dir.path() + "/stderr").find("cannot read"), std::string::npos);
  const std::string both = absl::StrCat(GRAPHBANDIT_REPLAY_BINARY, " --dsjson=x --state_dir=y 2>",
                                        dir.path(), "/stderr");
  EXPECT_NE(std::system(both.c_str()), 0);
  EXPECT_NE(ReadAll(dir.path() + "/stderr").find("either --state_dir or --dsjson"),
            std::string::npos);
}

// A warm start teaches a new model the history through its own API: it then knows the best item
// before serving anything, keeps it across a restart, and a second import adds nothing.
TEST(WarmStartTest, ANewModelLearnsTheHistory) {
  TempDir dir;
  const LoggedHistory history = UniformLog(600, 13);
  ASSERT_TRUE(WriteDsjson(history, dir.path() + "/log.dsjson").ok());
  const std::string state = dir.path() + "/state";
  const std::string command = absl::StrCat(GRAPHBANDIT_REPLAY_BINARY, " --dsjson=", dir.path(),
                                           "/log.dsjson --warm_start_state_dir=", state,
                                           " --warm_start_model=default 2>", dir.path(), "/stderr");
  ASSERT_EQ(std::system(command.c_str()), 0) << ReadAll(dir.path() + "/stderr");
  EXPECT_NE(ReadAll(dir.path() + "/stderr").find("learned 600 rewards (0 imported before)"),
            std::string::npos)
      << ReadAll(dir.path() + "/stderr");
  {
    ModelOptions options;
    options.name = "default";
    auto engine = OpenEngine({options}, state);
    Model* model = *engine->FindModel("");
    model->WaitForFits();
    EXPECT_EQ(model->View()->rewards_learned, 600);
    OwnedRequest r;
    r.user = "u";
    for (int a = 0; a < kArms; ++a)
      r.candidates.push_back({absl::StrCat("item", a), ItemFeatures(a)});
    r.slate_size = kArms;
    auto decision = engine->SelectArm(r.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    for (const ChosenArm& arm : decision->arms) {
      EXPECT_NEAR(arm.mean, Expected(arm.arm_id.back() - '0'), 0.05) << arm.arm_id;
    }
  }
  // Models a warm start cannot teach are refused, naming why.
  for (const std::string& config :
       {std::string("models { name: \"semi\" policy: SEMI_GRAPH_TS }"),
        std::string("models { name: \"summed\" ledger { aggregation: SUM } }")}) {
    {
      std::ofstream out(dir.path() + "/config.textproto");
      out << config << "\n";
    }
    const std::string name = config.find("semi") != std::string::npos ? "semi" : "summed";
    const std::string refused_command = absl::StrCat(
        GRAPHBANDIT_REPLAY_BINARY, " --dsjson=", dir.path(),
        "/log.dsjson --warm_start_state_dir=", dir.path(), "/other --warm_start_model=", name,
        " --config=", dir.path(), "/config.textproto 2>", dir.path(), "/stderr");
    EXPECT_NE(std::system(refused_command.c_str()), 0);
    EXPECT_NE(ReadAll(dir.path() + "/stderr").find("cannot be warm-started"), std::string::npos)
        << ReadAll(dir.path() + "/stderr");
  }
  // In-process, the same import again: every event is known.
  ModelOptions options;
  options.name = "default";
  auto engine = OpenEngine({options}, state);
  auto again = WarmStart(history, *engine, "default");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->learned, 0);
  EXPECT_EQ(again->already_known, 600);
  // A history the model cannot take (other dimensions) fails, naming the event.
  LoggedHistory wider = UniformLog(1, 14);
  wider.events[0].event_id = "wider";
  wider.events[0].features[wider.events[0].chosen].push_back(1.0);
  auto refused = WarmStart(wider, *engine, "default");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("event wider"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace graphbandit::replay
