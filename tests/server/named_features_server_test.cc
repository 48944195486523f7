// Named features over gRPC: a task whose best arm depends on categorical context features is
// learned from named features alone; DescribeModel lists what was seen; malformed features are
// INVALID_ARGUMENT naming the field; a configured schema shows in the effective configuration.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "server/config.h"
#include "tests/server/server_fixture.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<EngineOptions> LoadConfigText(const std::string& text) {
  auto config = ParseServerConfig(text, "test.textproto");
  if (!config.ok()) return config.status();
  return ToEngineOptions(*config, "");
}

const char* const kDevices[] = {"phone", "tablet", "desktop"};
const char* const kItems[] = {"news", "video", "game"};

// The best item depends on the device only: phone -> news, tablet -> video, desktop -> game.
double Truth(int device, int item) { return device == item ? 0.9 : 0.2; }

v1::SelectArmRequest DeviceRequest(int device, const std::string& user) {
  v1::SelectArmRequest request;
  request.set_user_id(user);
  v1::FeatureNamespace* ns = request.add_context_features();
  ns->set_name("device");
  v1::NamedFeature* os = ns->add_features();
  os->set_name("type");
  os->mutable_value()->set_text(kDevices[device]);
  v1::NamedFeature* inches = ns->add_features();
  inches->set_name("inches");
  inches->mutable_value()->set_number(device == 0 ? 6.0 : device == 1 ? 10.0 : 24.0);
  for (int i = 0; i < 3; ++i) {
    v1::Arm* arm = request.add_candidates();
    arm->set_id(kItems[i]);
    v1::FeatureNamespace* item = arm->add_named_features();
    item->set_name("item");
    v1::NamedFeature* kind = item->add_features();
    kind->set_name("kind");
    kind->mutable_value()->set_text(kItems[i]);
    v1::NamedFeature* tags = item->add_features();
    tags->set_name("tags");
    tags->mutable_value()->mutable_strings()->add_values(i == 2 ? "interactive" : "passive");
  }
  return request;
}

TEST_F(ServerTest, CategoricalContextIsLearnedFromNamedFeaturesAlone) {
  int best_late = 0;
  constexpr int kRounds = 240, kLate = 60;
  for (int round = 0; round < kRounds; ++round) {
    const int device = round % 3;
    v1::SelectArmResponse decision;
    ASSERT_TRUE(Select(DeviceRequest(device, "anyone"), &decision).ok());
    int chosen = 0;
    while (kItems[chosen] != decision.arms(0).arm_id()) ++chosen;
    if (round >= kRounds - kLate && chosen == device) ++best_late;
    v1::ReportRewardRequest report;
    report.set_event_id(decision.event_id());
    report.set_reward(Truth(device, chosen));
    v1::ReportRewardResponse outcome;
    ASSERT_TRUE(Reward(report, &outcome).ok());
  }
  // Exploration keeps some share; the device decides the rest.
  EXPECT_GE(best_late, kLate * 8 / 10) << best_late << " of " << kLate;

  const v1::ModelDescription description = Describe();
  EXPECT_EQ(description.context_dim(), 0u);  // no dense values: the slots are not counted here
  EXPECT_EQ(description.arm_feature_dim(), 0u);
  const v1::NamedFeatureSummary& context = description.context_features();
  EXPECT_EQ(context.slots(), 64u);
  ASSERT_EQ(context.namespaces_size(), 1);
  EXPECT_EQ(context.namespaces(0).name(), "device");
  ASSERT_EQ(context.namespaces(0).features_size(), 2);
  const v1::FeatureSummary& inches = context.namespaces(0).features(0);  // byte order
  EXPECT_EQ(inches.name(), "inches");
  EXPECT_EQ(inches.kind(), v1::NUMERIC);
  EXPECT_EQ(inches.seen(), static_cast<uint64_t>(kRounds));
  EXPECT_DOUBLE_EQ(inches.mean(), (6.0 + 10.0 + 24.0) / 3);
  EXPECT_EQ(inches.min(), 6.0);
  EXPECT_EQ(inches.max(), 24.0);
  const v1::FeatureSummary& type = context.namespaces(0).features(1);
  EXPECT_EQ(type.kind(), v1::CATEGORICAL);
  EXPECT_EQ(type.distinct_values(), 3u);
  EXPECT_EQ(context.distinct_keys(), 4u);  // three types and one number
  EXPECT_EQ(context.occupied_slots() + context.colliding_keys(), context.distinct_keys());
  const v1::NamedFeatureSummary& arms = description.arm_features();
  EXPECT_EQ(arms.distinct_keys(), 5u);  // three kinds, two tags
  EXPECT_EQ(arms.namespaces(0).features(0).seen(), static_cast<uint64_t>(3 * kRounds));
}

TEST_F(ServerTest, MalformedNamedFeaturesAreInvalidArgumentNamingTheField) {
  v1::SelectArmResponse decision;
  ASSERT_TRUE(Select(DeviceRequest(0, "u"), &decision).ok());
  auto expect_refused = [&](const v1::SelectArmRequest& request, const std::string& text) {
    v1::SelectArmResponse response;
    grpc::Status status = Select(request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << text;
    EXPECT_THAT(status.error_message(), HasSubstr(text));
  };
  v1::SelectArmRequest no_value = DeviceRequest(1, "u");
  no_value.mutable_context_features(0)->mutable_features(1)->clear_value();
  expect_refused(no_value, "context_features[0] (\"device\").features[1] (\"inches\"): no value");

  v1::SelectArmRequest kind = DeviceRequest(1, "u");
  kind.mutable_candidates(2)
      ->mutable_named_features(0)
      ->mutable_features(0)
      ->mutable_value()
      ->set_number(2.0);
  expect_refused(kind, "candidates[2].named_features[0] (\"item\").features[0] (\"kind\")");

  v1::SelectArmRequest twice = DeviceRequest(1, "u");
  *twice.add_context_features() = twice.context_features(0);
  expect_refused(twice, "namespace \"device\" appears twice");

  v1::SelectArmRequest long_name = DeviceRequest(1, "u");
  long_name.mutable_context_features(0)->mutable_features(0)->set_name(std::string(300, 'x'));
  expect_refused(long_name, "feature name of 300 bytes; at most 256");

  v1::SelectArmRequest dense = DeviceRequest(1, "u");
  dense.add_context(1.0);
  expect_refused(dense, "context has 1 values; model \"default\" expects 0");
  EXPECT_EQ(Describe().decisions(), 1u);
}

TEST_F(ServerTest, AConfiguredSchemaIsPartOfTheEffectiveConfiguration) {
  auto options = LoadConfigText(R"pb(
    models {
      name: "shop"
      features {
        context_slots: 16
        arm_slots: 32
        declared { side: CONTEXT namespace: "device" name: "type" kind: CATEGORICAL }
        declared { side: ARM namespace: "item" name: "price" kind: NUMERIC }
      }
    }
  )pb");
  ASSERT_TRUE(options.ok()) << options.status();
  StartServer(options->models, /*with_metrics=*/false);
  const v1::ModelDescription before = Describe("shop");
  EXPECT_TRUE(before.dimensions_fixed());  // the features block fixes them at start
  EXPECT_EQ(before.config().features().context_slots(), 16u);
  EXPECT_EQ(before.config().features().arm_slots(), 32u);
  EXPECT_EQ(before.config().features().limits().max_values(), 512u);
  ASSERT_EQ(before.config().features().declared_size(), 2);
  EXPECT_EQ(before.config().features().declared(1).kind(), v1::NUMERIC);
  EXPECT_EQ(before.context_features().slots(), 16u);
  EXPECT_EQ(before.arm_features().slots(), 32u);

  v1::SelectArmRequest request = DeviceRequest(0, "u");
  request.set_model("shop");
  v1::NamedFeature* price =
      request.mutable_candidates(0)->mutable_named_features(0)->add_features();
  price->set_name("price");
  price->mutable_value()->set_text("cheap");
  v1::SelectArmResponse response;
  grpc::Status status = Select(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("(\"price\")"));
  price->mutable_value()->set_number(9.99);
  ASSERT_TRUE(Select(request, &response).ok());
  const v1::ModelDescription after = Describe("shop");
  ASSERT_EQ(after.arm_features().namespaces_size(), 1);
  bool found = false;
  for (const v1::FeatureSummary& f : after.arm_features().namespaces(0).features()) {
    if (f.name() != "price") continue;
    found = true;
    EXPECT_TRUE(f.declared());
    EXPECT_EQ(f.seen(), 1u);
    EXPECT_EQ(f.mean(), 9.99);
  }
  EXPECT_TRUE(found);
}

TEST(FeatureConfigTest, BadSchemasAreRefusedNamingTheField) {
  for (const auto& [text, message] : std::map<std::string, std::string>{
           {"models { name: \"m\" features { declared { side: CONTEXT name: \"x\" } } }",
            "features.declared[0] needs a side"},
           {"models { name: \"m\" features { context_slots: 70000 } }",
            "context_slots and arm_slots must be within 0..65536"},
           {"models { name: \"m\" features { arm_slots: 0 } }",
            "arm_slots is 0 and arm_feature_dim is 0"},
           {"models { name: \"m\" features { declared_only: true } }",
            "declared_only needs at least one declared feature"},
           {"models { name: \"m\" features { declared { side: ARM name: \"p\" kind: NUMERIC } "
            "declared { side: ARM name: \"p\" kind: NUMERIC } } }",
            "declared[1] repeats declared[0]"},
           {"models { name: \"m\" features { limits { max_values: 100000 } } }",
            "limits.max_values must be within 1..65536"},
       }) {
    auto options = LoadConfigText(text);
    EXPECT_FALSE(options.ok()) << text;
    EXPECT_THAT(options.status().message(), HasSubstr(message)) << text;
  }
}

}  // namespace
}  // namespace graphbandit::server
