#include "core/features/feature_catalog.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

FeatureCatalog Sized(int slots, int max_listed_features = 4096, int64_t max_tracked_keys = 0) {
  FeatureCatalog::Options options;
  options.slots = slots;
  options.max_listed_features = max_listed_features;
  options.max_tracked_keys = max_tracked_keys;
  absl::StatusOr<FeatureCatalog> catalog = FeatureCatalog::Create(options);
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  return *std::move(catalog);
}

TEST(RunningSummaryTest, MatchesTheTwoPassFormulaWhereTheSumOfSquaresCancels) {
  // Values near 1e6 with a spread of about 1: the textbook E[x^2] - E[x]^2 loses the spread.
  std::vector<double> xs;
  for (int i = 0; i < 1000; ++i) xs.push_back(1e6 + std::sin(0.37 * i));
  RunningSummary s;
  for (double x : xs) s.Add(x);
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  double m2 = 0;
  for (double x : xs) m2 += (x - mean) * (x - mean);
  EXPECT_EQ(s.count, 1000);
  EXPECT_NEAR(s.mean, mean, 1e-9);
  EXPECT_NEAR(s.variance(), m2 / 1000.0, 1e-9 * m2 / 1000.0 + 1e-12);
  EXPECT_EQ(s.min, *std::min_element(xs.begin(), xs.end()));
  EXPECT_EQ(s.max, *std::max_element(xs.begin(), xs.end()));
  RunningSummary one;
  one.Add(-3);
  EXPECT_EQ(one.variance(), 0.0);
  EXPECT_EQ(one.min, -3);
  EXPECT_EQ(one.max, -3);
}

std::vector<FeatureNamespace> Request(double temperature, absl::string_view os,
                                      std::vector<absl::string_view> tags) {
  return {{"", {{"temperature", FeatureValue::Number(temperature)}}},
          {"device", {{"os", FeatureValue::String(os)}, {"tags", FeatureValue::Strings(tags)}}}};
}

TEST(FeatureCatalogTest, ListsWhatItSaw) {
  FeatureCatalog catalog = Sized(1 << 16);
  catalog.Record(Request(20, "ios", {"a", "b"}));
  catalog.Record(Request(22, "android", {"b"}));
  catalog.Record(Request(24, "ios", {}));
  const auto& ns = catalog.namespaces();
  ASSERT_EQ(ns.size(), 2u);
  const FeatureCatalog::Feature& t = ns.at("").at("temperature");
  EXPECT_EQ(t.kind, FeatureKind::kNumeric);
  EXPECT_FALSE(t.declared);
  EXPECT_EQ(t.seen, 3);
  EXPECT_EQ(t.numbers.count, 3);
  EXPECT_DOUBLE_EQ(t.numbers.mean, 22.0);
  EXPECT_DOUBLE_EQ(t.numbers.variance(), 8.0 / 3.0);
  const FeatureCatalog::Feature& os = ns.at("device").at("os");
  EXPECT_EQ(os.kind, FeatureKind::kCategorical);
  EXPECT_EQ(os.seen, 3);
  EXPECT_EQ(os.distinct_values, 2);
  EXPECT_EQ(ns.at("device").at("tags").distinct_values, 2);
  EXPECT_EQ(ns.at("device").at("tags").seen, 3);
  EXPECT_EQ(catalog.listed_features(), 3);
  // Keys: temperature, ios, android, tags a and b.
  const FeatureCatalog::HashLoad load = catalog.hash_load();
  EXPECT_EQ(load.distinct_keys, 5);
  EXPECT_EQ(load.slots, 1 << 16);
}

TEST(FeatureCatalogTest, HashLoadCountsSlotsAndCollisionsAsABruteForceDoes) {
  constexpr int kSlots = 64;
  FeatureCatalog catalog = Sized(kSlots);
  absl::flat_hash_set<int> slots;
  std::vector<std::string> values;
  for (int i = 0; i < 200; ++i) values.push_back("item" + std::to_string(i));
  for (const std::string& v : values) {
    catalog.Record({{"ns", {{"item", FeatureValue::String(v)}}}});
    catalog.Record({{"ns", {{"item", FeatureValue::String(v)}}}});  // seen again: one key
    slots.insert(SlotOf(StringKey("ns", "item", v), kSlots));
  }
  const FeatureCatalog::HashLoad load = catalog.hash_load();
  EXPECT_EQ(load.distinct_keys, 200);
  EXPECT_EQ(load.occupied_slots, static_cast<int64_t>(slots.size()));
  EXPECT_EQ(load.colliding_keys, 200 - static_cast<int64_t>(slots.size()));
  EXPECT_DOUBLE_EQ(load.load(), static_cast<double>(slots.size()) / kSlots);
  EXPECT_EQ(catalog.namespaces().at("ns").at("item").distinct_values, 200);

  FeatureCatalog one_slot = Sized(1);
  one_slot.Record(Request(1, "x", {"y", "z"}));
  EXPECT_EQ(one_slot.hash_load().occupied_slots, 1);
  EXPECT_EQ(one_slot.hash_load().colliding_keys, 3);
}

TEST(FeatureCatalogTest, AFeatureKeepsItsKind) {
  FeatureCatalog catalog = Sized(256);
  catalog.Record(Request(20, "ios", {"a"}));
  EXPECT_TRUE(catalog.Check(Request(1, "x", {}), "context_features", false).ok());
  // A number where a string was seen, and a string where a number was.
  absl::Status status = catalog.Check({{"device", {{"os", FeatureValue::Number(3)}}}},
                                      "candidates[4].named_features", false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("candidates[4].named_features[0] (\"device\").features[0] (\"os\"): a "
                        "numeric value, but this feature is categorical in the model (as first "
                        "seen)"));
  status = catalog.Check({{"", {{"temperature", FeatureValue::Strings({"warm"})}}}}, "ctx", false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("ctx[0] (\"\").features[0] (\"temperature\")"));
  // A string and a list of strings are the same kind.
  EXPECT_TRUE(
      catalog.Check({{"device", {{"os", FeatureValue::Strings({"a", "b"})}}}}, "c", false).ok());
  // New features are fine unless only declared ones are.
  EXPECT_TRUE(catalog.Check({{"new", {{"f", FeatureValue::Number(1)}}}}, "c", false).ok());
  status = catalog.Check({{"new", {{"f", FeatureValue::Number(1)}}}}, "c", true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("c[0] (\"new\").features[0] (\"f\"): not among the model's declared"));
}

TEST(FeatureCatalogTest, DeclaredKindsHoldBeforeAnyTraffic) {
  FeatureCatalog catalog = Sized(256);
  ASSERT_TRUE(catalog.Declare("user", "age", FeatureKind::kNumeric).ok());
  ASSERT_TRUE(catalog.Declare("user", "age", FeatureKind::kNumeric).ok());  // again: no change
  const absl::Status twice = catalog.Declare("user", "age", FeatureKind::kCategorical);
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(twice.message()),
              HasSubstr("feature \"age\" of namespace \"user\" is numeric (declared) and cannot "
                        "be declared categorical"));
  EXPECT_EQ(catalog.Declare("user", "", FeatureKind::kNumeric).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(catalog.Declare("user", std::string(257, 'x'), FeatureKind::kNumeric).code(),
            absl::StatusCode::kInvalidArgument);
  const absl::Status status =
      catalog.Check({{"user", {{"age", FeatureValue::String("old")}}}}, "context_features", true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("is numeric in the model (declared)"));
  EXPECT_TRUE(
      catalog.Check({{"user", {{"age", FeatureValue::Number(30)}}}}, "context_features", true)
          .ok());
  EXPECT_EQ(catalog.listed_features(), 1);
  EXPECT_TRUE(catalog.namespaces().at("user").at("age").declared);
  EXPECT_EQ(catalog.namespaces().at("user").at("age").seen, 0);

  // A feature seen in traffic is listed but not declared: refused where only declared ones are.
  catalog.Record({{"user", {{"city", FeatureValue::String("Oslo")}}}});
  const absl::Status seen_only =
      catalog.Check({{"user", {{"city", FeatureValue::String("Rome")}}}}, "context_features", true);
  EXPECT_EQ(seen_only.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(seen_only.message()), HasSubstr("not among the model's declared"));
  const absl::Status seen_then_declared = catalog.Declare("user", "city", FeatureKind::kNumeric);
  EXPECT_THAT(std::string(seen_then_declared.message()),
              HasSubstr("is categorical (as seen in traffic) and cannot be declared numeric"));
  ASSERT_TRUE(catalog.Declare("user", "city", FeatureKind::kCategorical).ok());
  EXPECT_TRUE(
      catalog.Check({{"user", {{"city", FeatureValue::String("Rome")}}}}, "context_features", true)
          .ok());
  EXPECT_EQ(catalog.declared_features(), 2);
}

TEST(FeatureCatalogTest, ARequestMustAgreeWithItselfOnANewFeaturesKind) {
  FeatureCatalog catalog = Sized(256);
  const std::vector<FeatureNamespace> as_number = {{"n", {{"x", FeatureValue::Number(1)}}}};
  const std::vector<FeatureNamespace> as_string = {{"n", {{"x", FeatureValue::String("a")}}}};
  const std::vector<FeatureCatalog::Source> request = {{as_number, "candidates[0].named_features"},
                                                       {as_string, "candidates[1].named_features"}};
  const absl::Status status = catalog.Check(request, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("candidates[1].named_features[0] (\"n\").features[0] (\"x\"): a "
                        "categorical value, but the same feature is numeric earlier in this "
                        "request"));
  // Recorded anyway (Check skipped), the second kind is not taken in but counted.
  catalog.Record(as_number);
  catalog.Record(as_string);
  EXPECT_EQ(catalog.namespaces().at("n").at("x").kind, FeatureKind::kNumeric);
  EXPECT_EQ(catalog.namespaces().at("n").at("x").seen, 1);
  EXPECT_EQ(catalog.namespaces().at("n").at("x").distinct_values, 0);
  EXPECT_EQ(catalog.kind_conflicts(), 1);
  EXPECT_EQ(catalog.hash_load().distinct_keys, 1);
}

TEST(FeatureCatalogTest, OptionsOutOfRangeAreRefused) {
  const auto refused = [](FeatureCatalog::Options options, const std::string& in_message) {
    const absl::StatusOr<FeatureCatalog> catalog = FeatureCatalog::Create(options);
    EXPECT_EQ(catalog.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(catalog.status().message()), HasSubstr(in_message));
  };
  FeatureCatalog::Options options;
  options.slots = 0;
  refused(options, "feature slots 0");
  options.slots = kMaxFeatureSlots + 1;
  refused(options, "feature slots");
  options.slots = 8;
  options.max_listed_features = -1;
  refused(options, "max_listed_features -1");
  options.max_listed_features = 10;
  options.max_tracked_keys = FeatureCatalog::kMaxTrackedKeys + 1;
  refused(options, "max_tracked_keys");
  options.max_tracked_keys = 0;
  options.max_name_bytes = 0;
  refused(options, "max_name_bytes 0");
  options.max_name_bytes = 256;
  const absl::StatusOr<FeatureCatalog> made = FeatureCatalog::Create(options);
  ASSERT_TRUE(made.ok());
  EXPECT_EQ(made->max_tracked_keys(), 65536);  // the default for a small space
}

TEST(FeatureCatalogTest, BoundsLimitWhatIsListedAndTracked) {
  FeatureCatalog catalog = Sized(16, 2, 3);
  catalog.Record({{"a",
                   {{"x", FeatureValue::Number(1)},
                    {"y", FeatureValue::String("s")},
                    {"z", FeatureValue::Strings({"p", "q"})}}}});
  EXPECT_EQ(catalog.listed_features(), 2);
  EXPECT_EQ(catalog.namespaces().at("a").count("z"), 0u);
  EXPECT_EQ(catalog.unlisted_values(), 2);  // z's two strings
  // Keys x, y("s") and z("p") are tracked; z("q") is past the bound.
  EXPECT_EQ(catalog.hash_load().distinct_keys, 3);
  EXPECT_EQ(catalog.hash_load().untracked_values, 1);
  // An unlisted feature is not kind-checked.
  EXPECT_TRUE(catalog.Check({{"a", {{"z", FeatureValue::Number(1)}}}}, "c", false).ok());
  // Declared features do not count against the bound (a configuration that loaded once loads
  // again, whatever traffic listed meanwhile).
  EXPECT_TRUE(catalog.Declare("b", "w", FeatureKind::kNumeric).ok());
  EXPECT_EQ(catalog.listed_features(), 3);
}

std::string Encoded(const FeatureCatalog& catalog) {
  storage::Encoder out;
  catalog.EncodeTo(&out);
  return std::string(out.data());
}

TEST(FeatureCatalogTest, EncodingRoundTripsBitForBit) {
  FeatureCatalog catalog = Sized(32, 3, 100);
  ASSERT_TRUE(catalog.Declare("user", "age", FeatureKind::kNumeric).ok());
  for (int i = 0; i < 50; ++i) {
    catalog.Record(Request(0.1 * i, i % 3 ? "ios" : "android", {"t" + std::to_string(i % 7)}));
  }
  const std::string bytes = Encoded(catalog);
  storage::Decoder in(bytes);
  absl::StatusOr<FeatureCatalog> decoded = FeatureCatalog::DecodeFrom(&in);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(in.done());
  EXPECT_EQ(Encoded(*decoded), bytes);
  EXPECT_EQ(decoded->hash_load().occupied_slots, catalog.hash_load().occupied_slots);
  EXPECT_EQ(decoded->hash_load().colliding_keys, catalog.hash_load().colliding_keys);
  EXPECT_EQ(decoded->unlisted_values(), catalog.unlisted_values());
  EXPECT_EQ(decoded->namespaces().at("").at("temperature").numbers.mean,
            catalog.namespaces().at("").at("temperature").numbers.mean);
  // It goes on the same way: a key it tracked before is not new to it.
  decoded->Record(Request(1, "ios", {"t1"}));
  catalog.Record(Request(1, "ios", {"t1"}));
  EXPECT_EQ(Encoded(*decoded), Encoded(catalog));
}

TEST(FeatureCatalogTest, DeclaredFeaturesAloneRoundTrip) {
  // The smallest features EncodeTo writes: one-byte names, nothing seen.
  FeatureCatalog catalog = Sized(8);
  for (const char* name : {"a", "b", "c", "d", "e", "f"}) {
    ASSERT_TRUE(catalog.Declare("", name, FeatureKind::kCategorical).ok());
  }
  const std::string bytes = Encoded(catalog);
  storage::Decoder in(bytes);
  const absl::StatusOr<FeatureCatalog> decoded = FeatureCatalog::DecodeFrom(&in);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(Encoded(*decoded), bytes);
  EXPECT_EQ(decoded->declared_features(), 6);
}

TEST(FeatureCatalogTest, DecodingRefusesDamagedBytes) {
  FeatureCatalog catalog = Sized(32);
  catalog.Record(Request(3, "ios", {"a", "b"}));
  const std::string bytes = Encoded(catalog);
  for (size_t n = 0; n < bytes.size(); ++n) {
    storage::Decoder in(absl::string_view(bytes).substr(0, n));
    const absl::StatusOr<FeatureCatalog> decoded = FeatureCatalog::DecodeFrom(&in);
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument) << "prefix " << n;
  }
  // A kind byte that is neither kind: the first feature's kind follows its name.
  std::string bad = bytes;
  const size_t at = bad.find("temperature");
  ASSERT_NE(at, std::string::npos);
  bad[at + std::string("temperature").size()] = 7;
  storage::Decoder in(bad);
  const absl::StatusOr<FeatureCatalog> decoded = FeatureCatalog::DecodeFrom(&in);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(decoded.status().message()), HasSubstr("unknown feature kind"));

  // The tracked keys come last, eight bytes each in increasing order: two swapped are refused.
  std::string swapped = bytes;
  ASSERT_GE(catalog.hash_load().distinct_keys, 2);
  const std::string last = swapped.substr(swapped.size() - 8);
  const std::string before = swapped.substr(swapped.size() - 16, 8);
  swapped.replace(swapped.size() - 16, 8, last);
  swapped.replace(swapped.size() - 8, 8, before);
  storage::Decoder unordered(swapped);
  const absl::StatusOr<FeatureCatalog> refused = FeatureCatalog::DecodeFrom(&unordered);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("keys not in increasing order"));

  // Another format version.
  std::string versioned = bytes;
  versioned[0] = 2;
  storage::Decoder other(versioned);
  EXPECT_THAT(std::string(FeatureCatalog::DecodeFrom(&other).status().message()),
              HasSubstr("format version 2"));

  // A numeric feature seen more often than it has numbers: its "seen" count follows its name,
  // its kind and its declared flag.
  std::string counted = bytes;
  counted[at + std::string("temperature").size() + 2] += 1;
  storage::Decoder disagreeing(counted);
  EXPECT_THAT(std::string(FeatureCatalog::DecodeFrom(&disagreeing).status().message()),
              HasSubstr("a numeric feature's counts disagree"));
}

}  // namespace
}  // namespace graphbandit
