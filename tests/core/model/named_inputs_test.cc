// Named features through the engine (core/model/named_inputs.h): the slots a model gets, the
// encoding (checked against dense requests built by hand from the hashing's definition),
// errors that name the field, retries, and slots that survive a restart and a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/features/named_features.h"
#include "core/model/engine.h"
#include "core/model/model_ops.h"
#include "tests/core/model/engine_test_util.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

// A request with named features that owns its strings.
struct NamedRequest {
  std::string model;
  std::string user = "alice";
  std::string event_id;
  int slate_size = 1;
  std::vector<double> context;
  std::vector<FeatureNamespace> context_features;
  struct Candidate {
    std::string id;
    std::vector<double> features;
    std::vector<FeatureNamespace> named;
  };
  std::vector<Candidate> candidates;

  DecisionRequest View() const {
    DecisionRequest r;
    r.model = model;
    r.user_id = user;
    r.context = context;
    r.context_features = context_features;
    for (const Candidate& c : candidates) r.candidates.push_back({c.id, c.features, c.named});
    r.slate_size = slate_size;
    r.event_id = event_id;
    return r;
  }
};

const char* const kTimes[] = {"Morning", "Afternoon", "Evening", "Night"};
const char* const kGenres[] = {"rock", "jazz", "pop"};

// The context {"": {"timeOfDay": time, "hour": hour}}; items {"item": {"genre": g}} plus a
// dense feature, and tags on the first one.
NamedRequest TimeAndGenre(int time, double hour) {
  NamedRequest r;
  r.context_features = {
      {"",
       {{"timeOfDay", FeatureValue::String(kTimes[time])}, {"hour", FeatureValue::Number(hour)}}}};
  for (int g = 0; g < 3; ++g) {
    NamedRequest::Candidate c;
    c.id = kGenres[g];
    c.features = {0.5 * g};
    c.named = {{"item", {{"genre", FeatureValue::String(kGenres[g])}}}};
    if (g == 0) c.named[0].features.push_back({"tags", FeatureValue::Strings({"loud", "old"})});
    r.candidates.push_back(std::move(c));
  }
  return r;
}

// The same request as dense vectors, encoded from the hashing's definition: a number adds its
// value, scaled with `scale` if given, at SlotOf(NumberKey), a string 1 at SlotOf(StringKey).
OwnedRequest DenseEquivalent(int time, double hour, int slots, const NumericScale* scale) {
  OwnedRequest r;
  r.context.assign(slots, 0.0);
  r.context[SlotOf(StringKey("", "timeOfDay", kTimes[time]), slots)] += 1.0;
  r.context[SlotOf(NumberKey("", "hour"), slots)] +=
      scale != nullptr ? (hour - scale->center) / scale->spread : hour;
  for (int g = 0; g < 3; ++g) {
    std::vector<double> arm(1 + slots, 0.0);
    arm[0] = 0.5 * g;
    arm[1 + SlotOf(StringKey("item", "genre", kGenres[g]), slots)] += 1.0;
    if (g == 0) {
      arm[1 + SlotOf(StringKey("item", "tags", "loud"), slots)] += 1.0;
      arm[1 + SlotOf(StringKey("item", "tags", "old"), slots)] += 1.0;
    }
    r.candidates.push_back({kGenres[g], arm});
  }
  return r;
}

double RewardOf(int time, const std::string& arm) {
  // Jazz in the evening and at night, rock otherwise.
  const bool late = time >= 2;
  return (late && arm == "jazz") || (!late && arm == "rock") ? 1.0 : 0.1;
}

ModelOptions Named(const std::string& name, int slots) {
  ModelOptions o;
  o.name = name;
  o.features.configured = true;
  o.features.context_slots = slots;
  o.features.arm_slots = slots;
  o.arm_dim = 1;
  return o;
}

ModelOptions Dense(const std::string& name, int slots) {
  ModelOptions o;
  o.name = name;
  o.context_dim = slots;
  o.arm_dim = 1 + slots;
  return o;
}

TEST(NamedInputsTest, NamedFeaturesLearnExactlyAsTheirHashedDenseInputs) {
  constexpr int kSlots = 16;
  // Fits run beside the writer and are applied when they finish: off, so that both models
  // learn at exactly the same points.
  ModelOptions named_options = Named("named", kSlots), dense_options = Dense("dense", kSlots);
  named_options.refit.enabled = dense_options.refit.enabled = false;
  auto engine = OpenEngine({named_options, dense_options});
  Model* named_model = *engine->FindModel("named");
  Model* dense_model = *engine->FindModel("dense");
  int scaled_rounds = 0;
  for (int round = 0; round < 60; ++round) {
    // Both decide from everything logged so far (the writers learn in batches whose ends
    // depend on timing otherwise), and the scale the request will be encoded with is the one
    // applied when it arrives.
    named_model->WaitForWriter();
    dense_model->WaitForWriter();
    const std::shared_ptr<const ModelView> view = named_model->View();
    const NumericScaling& scaling = *view->context_scaling;
    auto frozen = scaling.find(NumberKey("", "hour"));
    const NumericScale* scale = frozen != scaling.end() ? &frozen->second : nullptr;
    scaled_rounds += scale != nullptr;
    const int time = round % 4;
    const double hour = 6.0 + 4.0 * time + 0.25 * (round % 3);
    NamedRequest named = TimeAndGenre(time, hour);
    named.model = "named";
    named.user = absl::StrCat("u", round % 3);
    named.event_id = absl::StrCat("e", round);  // the same ids: ties break alike
    OwnedRequest dense = DenseEquivalent(time, hour, kSlots, scale);
    dense.model = "dense";
    dense.user = named.user;
    dense.event_id = named.event_id;
    auto a = engine->SelectArm(named.View());
    auto b = engine->SelectArm(dense.View());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_EQ(a->arms[0].arm_id, b->arms[0].arm_id) << "round " << round;
    EXPECT_EQ(a->arms[0].mean, b->arms[0].mean) << "round " << round;
    EXPECT_EQ(a->arms[0].stddev, b->arms[0].stddev) << "round " << round;
    const double reward = RewardOf(time, a->arms[0].arm_id);
    ASSERT_TRUE(engine->ReportReward({a->event_id, reward, {}, "named"}).ok());
    ASSERT_TRUE(engine->ReportReward({b->event_id, reward, {}, "dense"}).ok());
  }
  Model* named = *engine->FindModel("named");
  Model* dense = *engine->FindModel("dense");
  named->WaitForFits();
  dense->WaitForFits();
  EXPECT_EQ(named->View()->rewards_learned, 60);
  EXPECT_EQ(named->View()->context_dim, kSlots);
  EXPECT_EQ(named->View()->arm_dim, 1 + kSlots);
  EXPECT_EQ(named->View()->context_slots, kSlots);
  EXPECT_EQ(named->View()->arm_slots, kSlots);
  EXPECT_EQ(dense->View()->context_slots, 0);
  EXPECT_EQ(scaled_rounds, 59);  // every round after the first value was frozen
  // The catalogs saw what was sent.
  named->VisitFeatureCatalogs([](const FeatureCatalog* context, const FeatureCatalog* arm) {
    ASSERT_NE(context, nullptr);
    ASSERT_NE(arm, nullptr);
    const auto& top = context->namespaces().at("");
    EXPECT_EQ(top.at("timeOfDay").kind, FeatureKind::kCategorical);
    EXPECT_EQ(top.at("timeOfDay").seen, 60);
    EXPECT_EQ(top.at("timeOfDay").distinct_values, 4);
    EXPECT_EQ(top.at("hour").kind, FeatureKind::kNumeric);
    EXPECT_EQ(top.at("hour").numbers.min, 6.0);
    EXPECT_EQ(top.at("hour").numbers.max, 18.5);
    EXPECT_EQ(arm->namespaces().at("item").at("genre").seen, 180);
    EXPECT_EQ(arm->namespaces().at("item").at("tags").distinct_values, 2);
    // 3 genres and 2 tags: 5 keys.
    EXPECT_EQ(arm->hash_load().distinct_keys, 5);
  });
}

TEST(NamedInputsTest, AFirstRequestWithNamedFeaturesGivesTheDefaultSlots) {
  auto engine = OpenEngine();
  NamedRequest request = TimeAndGenre(0, 7.0);
  for (auto& c : request.candidates) c.features.clear();  // named features only
  auto decision = engine->SelectArm(request.View());
  ASSERT_TRUE(decision.ok()) << decision.status();
  auto view = (*engine->FindModel(""))->View();
  constexpr int kDefault = ModelOptions::FeatureOptions::kDefaultSlots;
  EXPECT_EQ(view->context_dim, kDefault);
  EXPECT_EQ(view->arm_dim, kDefault);
  EXPECT_EQ(view->context_slots, kDefault);
  EXPECT_EQ(view->arm_slots, kDefault);
  // The arms' input is all slots: an arm without named features is all zeros, not an error.
  NamedRequest bare;
  bare.candidates = {{"x", {}, {}},
                     {"y", {}, {{"item", {{"genre", FeatureValue::String("pop")}}}}}};
  EXPECT_TRUE(engine->SelectArm(bare.View()).ok());
}

TEST(NamedInputsTest, AModelFixedWithoutNamedFeaturesRefusesThemNamingTheField) {
  auto engine = OpenEngine();
  ASSERT_TRUE(engine->SelectArm(ThreeArms().View()).ok());  // fixes dense dimensions (0, 2)
  NamedRequest request;
  request.context_features = {{"", {{"timeOfDay", FeatureValue::String("Morning")}}}};
  request.candidates = {{"a", {1.0, 0.0}, {}}};
  absl::Status s = engine->SelectArm(request.View()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("context_features"));
  EXPECT_THAT(s.message(), HasSubstr("takes no named context features"));
  request.context_features.clear();
  request.candidates[0].named = {{"item", {{"genre", FeatureValue::String("pop")}}}};
  s = engine->SelectArm(request.View()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("candidates[0] (\"a\").named_features"));
}

TEST(NamedInputsTest, BadNamedFeaturesAreRefusedNamingTheFieldAndTeachNothing) {
  ModelOptions options = Named("m", 8);
  options.features.limits.max_name_bytes = 16;
  options.features.declared = {{false, "item", "price", FeatureKind::kNumeric}};
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("m");
  auto refused = [&](const NamedRequest& r) { return engine->SelectArm(r.View()).status(); };
  NamedRequest ok = TimeAndGenre(1, 12.0);
  ok.model = "m";
  ASSERT_TRUE(engine->SelectArm(ok.View()).ok());

  NamedRequest wrong_kind = ok;  // genre was first seen as a string
  wrong_kind.candidates[2].named[0].features[0].value = FeatureValue::Number(3.0);
  absl::Status s = refused(wrong_kind);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("candidates[2].named_features[0] (\"item\").features[0] "
                                     "(\"genre\")"));

  NamedRequest declared_kind = ok;  // price is declared numeric
  declared_kind.candidates[1].named[0].features.push_back({"price", FeatureValue::String("high")});
  s = refused(declared_kind);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(\"price\")"));

  NamedRequest long_name = ok;
  long_name.context_features[0].features.push_back(
      {"a_name_longer_than_sixteen", FeatureValue::Number(1.0)});
  s = refused(long_name);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("context_features[0] (\"\").features[2]"));

  NamedRequest infinite = ok;
  infinite.context_features[0].features[1].value = FeatureValue::Number(1.0 / 0.0);
  EXPECT_EQ(refused(infinite).code(), absl::StatusCode::kInvalidArgument);

  NamedRequest dense_count = ok;  // the model's dense arm dimension is 1
  dense_count.candidates[1].features = {1.0, 2.0};
  s = refused(dense_count);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("candidates[1] (\"jazz\") has 2 features; model \"m\" "
                                     "expects 1"));

  EXPECT_EQ(model->Stats().decisions, 1);
  model->VisitFeatureCatalogs([](const FeatureCatalog*, const FeatureCatalog* arm) {
    EXPECT_EQ(arm->namespaces().at("item").at("genre").seen, 3);  // only the accepted request
    EXPECT_EQ(arm->namespaces().at("item").at("price").seen, 0);
  });
}

TEST(NamedInputsTest, DeclaredOnlyRefusesUndeclaredFeatures) {
  ModelOptions options = Named("m", 8);
  options.features.declared = {{true, "", "timeOfDay", FeatureKind::kCategorical},
                               {false, "item", "genre", FeatureKind::kCategorical}};
  options.features.declared_only = true;
  auto engine = OpenEngine({options});
  NamedRequest request = TimeAndGenre(2, 20.0);  // carries the undeclared "hour" and "tags"
  request.model = "m";
  absl::Status s = engine->SelectArm(request.View()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("(\"hour\")"));
  request.context_features[0].features.pop_back();
  request.candidates[0].named[0].features.pop_back();
  EXPECT_TRUE(engine->SelectArm(request.View()).ok());
}

TEST(NamedInputsTest, ARetryWithOtherNamedFeaturesIsAnotherRequest) {
  auto engine = OpenEngine({Named("m", 8)});
  NamedRequest request = TimeAndGenre(0, 8.0);
  request.model = "m";
  request.event_id = "impression-1";
  auto first = engine->SelectArm(request.View());
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = engine->SelectArm(request.View());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->replayed);
  request.context_features[0].features[0].value = FeatureValue::String("Night");
  EXPECT_EQ(engine->SelectArm(request.View()).status().code(), absl::StatusCode::kAlreadyExists);
}

std::vector<double> ProbeNamed(Engine& engine) {
  std::vector<double> out;
  for (int time = 0; time < 4; ++time) {
    NamedRequest probe = TimeAndGenre(time, 6.0 + 4.0 * time);
    for (auto& c : probe.candidates) c.features.clear();
    probe.slate_size = 3;
    auto decision = engine.SelectArm(probe.View());
    EXPECT_TRUE(decision.ok()) << decision.status();
    if (!decision.ok()) continue;
    for (const ChosenArm& arm : decision->arms) {
      out.push_back(arm.mean);
      out.push_back(arm.stddev);
    }
  }
  return out;
}

void PlayNamed(Engine& engine, int rounds, const std::string& prefix) {
  for (int round = 0; round < rounds; ++round) {
    const int time = round % 4;
    NamedRequest request = TimeAndGenre(time, 6.0 + 4.0 * time);
    for (auto& c : request.candidates) c.features.clear();
    request.user = absl::StrCat("u", round % 3);
    request.event_id = absl::StrCat(prefix, round);
    auto decision = engine.SelectArm(request.View());
    ASSERT_TRUE(decision.ok()) << decision.status();
    ASSERT_TRUE(
        engine.ReportReward({decision->event_id, RewardOf(time, decision->arms[0].arm_id), {}, ""})
            .ok());
  }
}

TEST(NamedInputsTest, SlotsLearnedFromTrafficSurviveARestartAndACrash) {
  TempDir dir;
  std::vector<double> before;
  {
    auto engine = OpenEngine({}, dir.path());
    PlayNamed(*engine, 40, "a");
    (*engine->FindModel(""))->WaitForFits();
    before = ProbeNamed(*engine);
    ASSERT_FALSE(before.empty());
  }
  {
    auto engine = OpenEngine({}, dir.path());  // from the shutdown snapshot
    Model* model = *engine->FindModel("");
    EXPECT_EQ(model->View()->context_slots, ModelOptions::FeatureOptions::kDefaultSlots);
    EXPECT_EQ(model->View()->arm_slots, ModelOptions::FeatureOptions::kDefaultSlots);
    EXPECT_EQ(ProbeNamed(*engine), before);
    PlayNamed(*engine, 12, "b");
    model->WaitForFits();
    before = ProbeNamed(*engine);
    // Crash image: the snapshot of the restart plus a log holding the FixDimensions-free rest.
    TempDir crash;
    CrashCopy(dir.path(), crash.path() + "/copy");
    auto reopened = Reopen(crash.path() + "/copy");
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    Model* recovered = *(*reopened)->FindModel("");
    recovered->WaitForFits();
    EXPECT_EQ(recovered->View()->arm_slots, ModelOptions::FeatureOptions::kDefaultSlots);
    EXPECT_EQ(ProbeNamed(**reopened), before);
  }
}

TEST(NamedInputsTest, AModelThatDecidedButLearnedNothingRestarts) {
  // Its snapshot holds an empty dictionary of 128-dimensional points: a few bytes, which once
  // failed the decoder's bound on an empty matrix's extent.
  TempDir dir;
  std::vector<double> before;
  {
    auto engine = OpenEngine({}, dir.path());
    NamedRequest request = TimeAndGenre(1, 9.0);
    for (auto& c : request.candidates) c.features.clear();
    ASSERT_TRUE(engine->SelectArm(request.View()).ok());
    before = ProbeNamed(*engine);
  }
  auto engine = OpenEngine({}, dir.path());  // from the shutdown snapshot
  Model* model = *engine->FindModel("");
  EXPECT_GT(model->recovery().snapshot_seq, 0u);
  EXPECT_EQ(model->View()->context_slots, ModelOptions::FeatureOptions::kDefaultSlots);
  EXPECT_EQ(model->View()->rewards_learned, 0);
  EXPECT_EQ(ProbeNamed(*engine), before);
}

TEST(NamedInputsTest, ALogWithoutSnapshotsReplaysTheSlots) {
  TempDir dir;
  std::vector<double> before;
  auto engine = OpenEngine({}, dir.path());
  PlayNamed(*engine, 30, "a");
  (*engine->FindModel(""))->WaitForFits();
  before = ProbeNamed(*engine);
  TempDir crash;  // only the log: the FixDimensionsOp with its slots is replayed
  CrashCopy(dir.path(), crash.path() + "/copy");
  auto reopened = Reopen(crash.path() + "/copy");
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  Model* recovered = *(*reopened)->FindModel("");
  EXPECT_EQ(recovered->recovery().snapshot_seq, 0u);
  recovered->WaitForFits();
  EXPECT_EQ(recovered->View()->context_slots, ModelOptions::FeatureOptions::kDefaultSlots);
  EXPECT_EQ(ProbeNamed(**reopened), before);
}

// Online scaling: the frozen scale follows the values' mean and spread, is frozen a logarithmic
// number of times, and is the same after a restart and after a crash.
TEST(NamedInputsTest, NumbersAreScaledOnlineWithScalesFrozenInTheLog) {
  TempDir dir;
  Rng rng(5);
  std::vector<double> hours;
  NumericScale frozen;
  {
    auto engine = OpenEngine({Named("m", 8)}, dir.path());
    Model* model = *engine->FindModel("m");
    for (int round = 0; round < 1000; ++round) {
      NamedRequest request = TimeAndGenre(round % 4, 0.0);
      request.model = "m";
      const double hour = 12.0 + 3.0 * rng.Normal();
      hours.push_back(hour);
      request.context_features[0].features[1].value = FeatureValue::Number(hour);
      ASSERT_TRUE(engine->SelectArm(request.View()).ok());
    }
    model->WaitForWriter();
    const NumericScaling& scaling = *model->View()->context_scaling;
    ASSERT_EQ(scaling.count(NumberKey("", "hour")), 1u);
    frozen = scaling.at(NumberKey("", "hour"));
    // Frozen at a power of two of the count, from the values up to then.
    EXPECT_GE(frozen.count, 64);
    EXPECT_EQ(frozen.count & (frozen.count - 1), 0) << frozen.count;
    double mean = 0.0, m2 = 0.0;
    for (int i = 0; i < frozen.count; ++i) mean += hours[i] / frozen.count;
    for (int i = 0; i < frozen.count; ++i) m2 += (hours[i] - mean) * (hours[i] - mean);
    EXPECT_NEAR(frozen.center, mean, 1e-9);
    EXPECT_NEAR(frozen.spread, std::sqrt(m2 / frozen.count), 1e-9);
    EXPECT_NEAR(frozen.spread, 3.0, 0.6);
    // Arms carry no numbers here: nothing frozen for them.
    EXPECT_TRUE(model->View()->arm_scaling->empty());
    // A crash image replays the logged freezes to the same table.
    TempDir crash;
    CrashCopy(dir.path(), crash.path() + "/copy");
    EngineOptions options;
    options.models = {Named("m", 8)};
    options.state_dir = crash.path() + "/copy";
    auto reopened = Engine::Open(options);
    ASSERT_TRUE(reopened.ok()) << reopened.status();
    const NumericScaling& replayed = *(*(*reopened)->FindModel("m"))->View()->context_scaling;
    ASSERT_EQ(replayed.count(NumberKey("", "hour")), 1u);
    EXPECT_EQ(replayed.at(NumberKey("", "hour")).center, frozen.center);
    EXPECT_EQ(replayed.at(NumberKey("", "hour")).count, frozen.count);
  }
  auto engine = OpenEngine({Named("m", 8)}, dir.path());  // from the shutdown snapshot
  const NumericScaling& restored = *(*engine->FindModel("m"))->View()->context_scaling;
  ASSERT_EQ(restored.count(NumberKey("", "hour")), 1u);
  EXPECT_EQ(restored.at(NumberKey("", "hour")).center, frozen.center);
  EXPECT_EQ(restored.at(NumberKey("", "hour")).spread, frozen.spread);
}

TEST(NamedInputsTest, AScaleIsFrozenALogarithmicNumberOfTimes) {
  auto catalog = FeatureCatalog::Create({});
  ASSERT_TRUE(catalog.ok());
  NumericScaling frozen;
  absl::flat_hash_map<uint64_t, int64_t> considered;
  Rng rng(9);
  std::vector<int64_t> frozen_at;
  for (int i = 1; i <= 100000; ++i) {
    std::vector<FeatureNamespace> request = {
        {"", {{"x", FeatureValue::Number(50.0 + 10.0 * rng.Normal())}}}};
    catalog->Record(request);
    std::vector<FeatureScalingOp::Entry> out;
    CollectScaleFreezes(request, true, *catalog, frozen, &considered, &out);
    ASSERT_LE(out.size(), 1u);
    for (const auto& e : out) {
      frozen[e.key] = e.scale;  // applied at once, as the writer would soon after
      frozen_at.push_back(e.scale.count);
    }
  }
  // Considered at 1, 2, 4, ..., 65536 (17 times); frozen only while the scale still moves.
  ASSERT_FALSE(frozen_at.empty());
  EXPECT_EQ(frozen_at.front(), 1);
  EXPECT_LE(frozen_at.size(), 10u);

  for (int64_t count : frozen_at) EXPECT_EQ(count & (count - 1), 0) << count;
  const NumericScale& x = frozen.at(NumberKey("", "x"));
  EXPECT_NEAR(x.center, 50.0, 1.0);
  EXPECT_NEAR(x.spread, 10.0, 1.0);
  // A shift of the distribution is followed at the next doubling.
  for (int i = 0; i < 200000; ++i) {
    std::vector<FeatureNamespace> request = {
        {"", {{"x", FeatureValue::Number(500.0 + 10.0 * rng.Normal())}}}};
    catalog->Record(request);
    std::vector<FeatureScalingOp::Entry> out;
    CollectScaleFreezes(request, true, *catalog, frozen, &considered, &out);
    for (const auto& e : out) frozen[e.key] = e.scale;
  }
  EXPECT_GT(frozen.at(NumberKey("", "x")).center, 300.0);
}

// A request refused after its named features were checked (here for its user id, which Decide
// checks) leaves no trace: nothing counted, no kind learned, no scale frozen.
TEST(NamedInputsTest, ARefusedRequestRecordsAndFreezesNothing) {
  auto engine = OpenEngine({Named("m", 8)});
  Model* model = *engine->FindModel("m");
  NamedRequest request = TimeAndGenre(0, 9.0);
  request.model = "m";
  request.user = "";
  EXPECT_EQ(engine->SelectArm(request.View()).status().code(), absl::StatusCode::kInvalidArgument);
  request.user = "alice";
  request.slate_size = 4;  // more than the candidates
  EXPECT_EQ(engine->SelectArm(request.View()).status().code(), absl::StatusCode::kInvalidArgument);
  model->WaitForWriter();
  EXPECT_TRUE(model->View()->context_scaling->empty());
  model->VisitFeatureCatalogs([](const FeatureCatalog* context, const FeatureCatalog* arm) {
    if (context != nullptr) {
      EXPECT_TRUE(context->namespaces().empty());
    }
    if (arm != nullptr) {
      EXPECT_TRUE(arm->namespaces().empty());
    }
  });
  // The genre was not learned as anything: a string is still accepted, then counted once.
  request.slate_size = 1;
  ASSERT_TRUE(engine->SelectArm(request.View()).ok());
  model->VisitFeatureCatalogs([](const FeatureCatalog* context, const FeatureCatalog*) {
    ASSERT_NE(context, nullptr);
    EXPECT_EQ(context->namespaces().at("").at("hour").seen, 1);
  });
}

// A scale frozen from values close together does not push later values out of range: scaled
// numbers are clipped, and slots clamped.
TEST(NamedInputsTest, ATinySpreadDoesNotRefuseLaterValues) {
  ModelOptions options = Named("m", 1);  // one slot: every number collides
  auto engine = OpenEngine({options});
  Model* model = *engine->FindModel("m");
  for (double x : {0.0, 2e-6, 1e-6, 5.0, 1e6}) {
    if (x == 5.0) {  // the scale in use was frozen from 0 and 2e-6
      EXPECT_LT(model->View()->context_scaling->at(NumberKey("", "hour")).spread, 1e-5);
    }
    NamedRequest request = TimeAndGenre(0, x);
    request.model = "m";
    request.context_features[0].features.push_back({"other", FeatureValue::Number(9e5)});
    auto decision = engine->SelectArm(request.View());
    EXPECT_TRUE(decision.ok()) << x << ": " << decision.status();
    model->WaitForWriter();
  }
}

TEST(NamedInputsTest, EmptyNamespacesDoNotGiveAModelNamedInputs) {
  auto engine = OpenEngine();
  NamedRequest request;
  request.context_features = {{"empty", {}}};
  request.candidates = {{"a", {1.0, 0.0}, {}}, {"b", {0.0, 1.0}, {{"nothing", {}}}}};
  ASSERT_TRUE(engine->SelectArm(request.View()).ok());
  EXPECT_EQ((*engine->FindModel(""))->View()->context_slots, 0);
  EXPECT_EQ((*engine->FindModel(""))->View()->arm_dim, 2);
}

TEST(NamedInputsTest, ScalingRecordsRoundTripAndDamageIsRefused) {
  FeatureScalingOp op;
  op.entries = {{true, 42, NumericScale{12.5, 3.25, 64}}, {false, 7, NumericScale{-1, 1, 1}}};
  const std::string bytes = EncodeOp(ModelOp(op));
  auto decoded = DecodeOp(static_cast<uint8_t>(OpType::kFeatureScaling), bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  const auto& back = std::get<FeatureScalingOp>(*decoded);
  ASSERT_EQ(back.entries.size(), 2u);
  EXPECT_TRUE(back.entries[0].context);
  EXPECT_EQ(back.entries[0].key, 42u);
  EXPECT_EQ(back.entries[0].scale.center, 12.5);
  EXPECT_EQ(back.entries[0].scale.spread, 3.25);
  EXPECT_EQ(back.entries[0].scale.count, 64);
  EXPECT_FALSE(back.entries[1].context);
  FeatureScalingOp zero_spread = op;
  zero_spread.entries[1].scale.spread = 0.0;
  EXPECT_FALSE(
      DecodeOp(static_cast<uint8_t>(OpType::kFeatureScaling), EncodeOp(ModelOp(zero_spread))).ok());
  EXPECT_FALSE(
      DecodeOp(static_cast<uint8_t>(OpType::kFeatureScaling), bytes.substr(0, bytes.size() - 1))
          .ok());
}

TEST(NamedInputsTest, FixDimensionsRecordsKeepTheirOldFormatWithoutSlots) {
  const std::string old_format = EncodeOp(ModelOp(FixDimensionsOp{3, 5}));
  auto decoded = DecodeOp(static_cast<uint8_t>(OpType::kFixDimensions), old_format);
  ASSERT_TRUE(decoded.ok());
  const auto& fix = std::get<FixDimensionsOp>(*decoded);
  EXPECT_EQ(fix.context_dim, 3);
  EXPECT_EQ(fix.context_slots, 0);
  EXPECT_EQ(old_format.size(), 2u);  // two one-byte varints, as before named features

  auto round_trip = DecodeOp(static_cast<uint8_t>(OpType::kFixDimensions),
                             EncodeOp(ModelOp(FixDimensionsOp{67, 65, 64, 64})));
  ASSERT_TRUE(round_trip.ok());
  const auto& slots = std::get<FixDimensionsOp>(*round_trip);
  EXPECT_EQ(slots.context_dim, 67);
  EXPECT_EQ(slots.arm_dim, 65);
  EXPECT_EQ(slots.context_slots, 64);
  EXPECT_EQ(slots.arm_slots, 64);
  // More slots than dimensions is damage, not a record.
  EXPECT_FALSE(DecodeOp(static_cast<uint8_t>(OpType::kFixDimensions),
                        EncodeOp(ModelOp(FixDimensionsOp{3, 5, 4, 0})))
                   .ok());
}

}  // namespace
}  // namespace graphbandit
