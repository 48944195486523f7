#include "server/personalizer_features.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "graphbandit/personalizer/v1/personalizer.pb.h"
#include "gtest/gtest.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;
namespace pz = ::graphbandit::personalizer::v1;

pz::RankRequest Parse(const std::string& json) {
  pz::RankRequest request;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &request);
  EXPECT_TRUE(status.ok()) << status.message() << " in " << json;
  return request;
}

// One line per feature, "namespace|name=value", in the order flattening gives them.
std::vector<std::string> Lines(const FlattenedFeatures& features) {
  std::vector<std::string> lines;
  for (const FeatureNamespace& ns : features.namespaces) {
    for (const NamedFeature& f : ns.features) {
      std::string value;
      switch (f.value.type) {
        case FeatureValue::Type::kNumber:
          value = std::to_string(f.value.number);
          break;
        case FeatureValue::Type::kString:
          value = "'" + std::string(f.value.text) + "'";
          break;
        case FeatureValue::Type::kStrings:
          for (absl::string_view t : f.value.texts) value += "'" + std::string(t) + "' ";
          break;
      }
      lines.push_back(std::string(ns.name) + "|" + std::string(f.name) + "=" + value);
    }
  }
  return lines;
}

TEST(PersonalizerFeaturesTest, ReadsObjectsAsNamespacesInByteOrder) {
  const pz::RankRequest request = Parse(R"({
    "contextFeatures": [
      {"weather": {"temp": 21.5, "tags": ["sunny", "warm"]}},
      {"timeOfDay": "Morning"},
      {"device": {"os": "ios", "type": "mobile"}}
    ],
    "actions": [{"id": "pasta", "features": [{"cuisine": "italian", "spice": {"level": 2}}]}]
  })");
  FlattenedFeatures context;
  ASSERT_TRUE(
      FlattenPersonalizerFeatures(request.context_features(), "contextFeatures", &context).ok());
  EXPECT_THAT(Lines(context), ::testing::ElementsAre(
                                  "|timeOfDay='Morning'", "device|os='ios'", "device|type='mobile'",
                                  "weather|tags='sunny' 'warm' ", "weather|temp=21.500000"));
  EXPECT_TRUE(ValidateNamedFeatures(context.namespaces, FeatureLimits{}, "contextFeatures").ok());
  FlattenedFeatures action;
  ASSERT_TRUE(
      FlattenPersonalizerFeatures(request.actions(0).features(), "actions[0].features", &action)
          .ok());
  EXPECT_THAT(Lines(action), ::testing::ElementsAre("|cuisine='italian'", "spice|level=2.000000"));
}

TEST(PersonalizerFeaturesTest, FlattensNestingListsAndWhatPersonalizerIgnores) {
  const pz::RankRequest request = Parse(R"({"contextFeatures": [
    {"a": {"b": {"c": 1, "d": true, "e": false, "_x": 5, "f": null, "g": []}},
     "v": [1, 2.5], "_hidden": "x", "": 3, "on": true}
  ]})");
  FlattenedFeatures features;
  ASSERT_TRUE(FlattenPersonalizerFeatures(request.context_features(), "c", &features).ok());
  EXPECT_THAT(Lines(features),
              ::testing::ElementsAre("|on=1.000000", "|v[0]=1.000000", "|v[1]=2.500000",
                                     "a|b.c=1.000000", "a|b.d=1.000000"));
}

TEST(PersonalizerFeaturesTest, TheSameRequestInAnotherKeyOrderReadsTheSame) {
  FlattenedFeatures one, two;
  const pz::RankRequest a =
      Parse(R"({"contextFeatures": [{"x": {"p": 1, "q": "s"}, "y": 2}, {"z": {"r": "t"}}]})");
  const pz::RankRequest b =
      Parse(R"({"contextFeatures": [{"y": 2, "x": {"q": "s", "p": 1}}, {"z": {"r": "t"}}]})");
  ASSERT_TRUE(FlattenPersonalizerFeatures(a.context_features(), "c", &one).ok());
  ASSERT_TRUE(FlattenPersonalizerFeatures(b.context_features(), "c", &two).ok());
  EXPECT_EQ(Lines(one), Lines(two));
  std::vector<double> ea(256, 0.0), eb(256, 0.0);
  AddNamedFeatures(one.namespaces, absl::MakeSpan(ea));
  AddNamedFeatures(two.namespaces, absl::MakeSpan(eb));
  EXPECT_EQ(ea, eb);
}

TEST(PersonalizerFeaturesTest, MergesNamespacesAcrossObjectsAndRefusesAFeatureTwice) {
  FlattenedFeatures features;
  const pz::RankRequest merged =
      Parse(R"({"contextFeatures": [{"device": {"os": "ios"}}, {"device": {"model": "x"}}]})");
  ASSERT_TRUE(FlattenPersonalizerFeatures(merged.context_features(), "c", &features).ok());
  EXPECT_THAT(Lines(features), ::testing::ElementsAre("device|model='x'", "device|os='ios'"));

  const pz::RankRequest twice =
      Parse(R"({"contextFeatures": [{"device": {"os": "ios"}}, {"device": {"os": "android"}}]})");
  absl::Status status =
      FlattenPersonalizerFeatures(twice.context_features(), "contextFeatures", &features);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("contextFeatures[1].device.os: feature \"os\" of namespace \"device\" is "
                        "given twice"));
  // A top-level scalar and a namespace's nested name can still not meet: "a.b" in "" and "b"
  // in "a" are different features.
  const pz::RankRequest apart = Parse(R"({"contextFeatures": [{"a": {"b": 1}}, {"a.b": 2}]})");
  EXPECT_TRUE(FlattenPersonalizerFeatures(apart.context_features(), "c", &features).ok());
}

TEST(PersonalizerFeaturesTest, RefusesListsItCannotRead) {
  FlattenedFeatures features;
  for (const char* json : {R"({"contextFeatures": [{"v": [1, "a"]}]})",
                           R"({"contextFeatures": [{"n": {"v": ["a", {"b": 1}]}}]})",
                           R"({"contextFeatures": [{"v": [[1], [2]]}]})"}) {
    const pz::RankRequest request = Parse(json);
    const absl::Status status =
        FlattenPersonalizerFeatures(request.context_features(), "contextFeatures", &features);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json;
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("a list must hold only strings or only numbers"));
    EXPECT_THAT(std::string(status.message()), HasSubstr("contextFeatures[0]."));
  }
  const pz::RankRequest nested = Parse(R"({"contextFeatures": [{"n": {"v": ["a", 2]}}]})");
  EXPECT_THAT(std::string(FlattenPersonalizerFeatures(nested.context_features(), "contextFeatures",
                                                      &features)
                              .message()),
              HasSubstr("contextFeatures[0].n.v[1]:"));
}

TEST(PersonalizerFeaturesTest, OfSeveralErrorsTheFirstKeyInByteOrderIsNamed) {
  // The same request gives the same error, whatever order its keys were written in.
  std::string json = R"({"contextFeatures": [{)";
  for (int k = 9; k >= 0; --k) {
    json += "\"k" + std::to_string(k) + "\": [1, \"x\"]" + (k > 0 ? ", " : "");
  }
  json += "}]}";
  const pz::RankRequest request = Parse(json);
  FlattenedFeatures features;
  const absl::Status status =
      FlattenPersonalizerFeatures(request.context_features(), "contextFeatures", &features);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("contextFeatures[0].k0[1]:"));
}

TEST(PersonalizerFeaturesTest, NothingGivesNoNamespaces) {
  FlattenedFeatures features;
  features.names.push_back("left over");
  const pz::RankRequest request = Parse(R"({"contextFeatures": [{}, {"_a": 1}]})");
  ASSERT_TRUE(FlattenPersonalizerFeatures(request.context_features(), "c", &features).ok());
  EXPECT_TRUE(features.namespaces.empty());
  EXPECT_TRUE(features.names.empty());
}

}  // namespace
}  // namespace graphbandit::server
