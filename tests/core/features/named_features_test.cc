#include "core/features/named_features.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace graphbandit {
namespace {

using ::testing::HasSubstr;

TEST(NamedFeaturesTest, KeysMatchAnIndependentComputation) {
  // Computed apart from this code, by this Python reading of the construction the header
  // documents, so that a change to the keys, which would move every model's slots, fails here:
  //   M = 2**64 - 1
  //   def mix(s):  # SplitMix64
  //       z = (s + 0x9E3779B97F4A7C15) & M
  //       z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
  //       z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
  //       return z ^ (z >> 31)
  //   def h(b, seed=0):  # FNV-1a folded through SplitMix64
  //       x = 0xcbf29ce484222325 ^ seed
  //       for c in b: x = ((x ^ c) * 0x100000001b3) & M
  //       return mix(x)
  //   number_key = lambda ns, name: h(name, h(ns, 0x6e616d6573706163)) or 1
  //   string_key = lambda ns, name, v: h(v, number_key(ns, name) ^ 0x76616c7565736565) or 1
  //   slot = lambda key, slots: (key * slots) >> 64
  EXPECT_EQ(NumberKey("", "temperature"), 0xf395b82779b40531ULL);
  EXPECT_EQ(NumberKey("weather", "temp"), 0xb5643e5a49385c97ULL);
  EXPECT_EQ(StringKey("device", "os", "ios"), 0x8021c52c07f657a5ULL);
  EXPECT_EQ(StringKey("", "timeOfDay", "Morning"), 0x57213b981cdb2960ULL);
  EXPECT_EQ(SlotOf(NumberKey("", "temperature"), 1024), 974);
  EXPECT_EQ(SlotOf(StringKey("device", "os", "ios"), 1024), 512);
}

TEST(NamedFeaturesTest, KeysKeepTheirPartsApart) {
  // The same bytes split differently between namespace, name and value are different keys.
  EXPECT_NE(NumberKey("ab", "c"), NumberKey("a", "bc"));
  EXPECT_NE(StringKey("a", "b", "c"), StringKey("a", "bc", ""));
  EXPECT_NE(StringKey("", "ab", "c"), StringKey("", "a", "bc"));
  EXPECT_NE(NumberKey("", "x"), StringKey("", "x", ""));
  EXPECT_NE(NumberKey("", "x"), 0u);
}

TEST(NamedFeaturesTest, SlotsCoverTheSpaceEvenly) {
  EXPECT_EQ(SlotOf(0, 7), 0);
  EXPECT_EQ(SlotOf(std::numeric_limits<uint64_t>::max(), 7), 6);
  constexpr int kSlots = 64;
  constexpr int kKeys = 64000;
  std::vector<int> count(kSlots, 0);
  for (int i = 0; i < kKeys; ++i) {
    const int slot = SlotOf(StringKey("ns", "item", std::to_string(i)), kSlots);
    ASSERT_GE(slot, 0);
    ASSERT_LT(slot, kSlots);
    ++count[slot];
  }
  // 1,000 expected per slot; a binomial's standard deviation is about 31.
  for (int c : count) {
    EXPECT_GT(c, 850);
    EXPECT_LT(c, 1150);
  }
}

TEST(NamedFeaturesTest, EncodingAddsNumbersAndOneHotCodes) {
  std::vector<FeatureNamespace> features = {
      {"",
       {{"timeOfDay", FeatureValue::String("Morning")},
        {"temperature", FeatureValue::Number(21.5)}}},
      {"device",
       {{"os", FeatureValue::String("ios")}, {"tags", FeatureValue::Strings({"a", "b", "a"})}}},
  };
  ASSERT_TRUE(ValidateNamedFeatures(features, FeatureLimits{}, "context_features").ok());
  constexpr int kSlots = 1 << 20;  // large enough that these five keys do not share a slot
  std::vector<double> out(kSlots, 0.0);
  AddNamedFeatures(features, absl::MakeSpan(out));
  const int morning = SlotOf(StringKey("", "timeOfDay", "Morning"), kSlots);
  const int temperature = SlotOf(NumberKey("", "temperature"), kSlots);
  const int ios = SlotOf(StringKey("device", "os", "ios"), kSlots);
  const int a = SlotOf(StringKey("device", "tags", "a"), kSlots);
  const int b = SlotOf(StringKey("device", "tags", "b"), kSlots);
  ASSERT_EQ(absl::flat_hash_set<int>({morning, temperature, ios, a, b}).size(), 5u);
  EXPECT_EQ(out[morning], 1.0);
  EXPECT_EQ(out[temperature], 21.5);
  EXPECT_EQ(out[ios], 1.0);
  EXPECT_EQ(out[a], 1.0);  // listed twice, one code
  EXPECT_EQ(out[b], 1.0);
  double total = 0;
  int nonzero = 0;
  for (double x : out) {
    total += x;
    nonzero += x != 0.0;
  }
  EXPECT_EQ(total, 25.5);
  EXPECT_EQ(nonzero, 5);

  // Not cleared first: a second call adds again.
  AddNamedFeatures(features, absl::MakeSpan(out));
  EXPECT_EQ(out[temperature], 43.0);
  EXPECT_EQ(out[ios], 2.0);
}

TEST(NamedFeaturesTest, KeysSharingASlotAddUp) {
  std::vector<FeatureNamespace> features = {
      {"n", {{"x", FeatureValue::Number(-2.0)}, {"s", FeatureValue::String("v")}}}};
  std::vector<double> out(1, 0.5);
  AddNamedFeatures(features, absl::MakeSpan(out));
  EXPECT_EQ(out[0], 0.5 - 2.0 + 1.0);
}

// The error's code and that its message names the field.
void ExpectRefused(const std::vector<FeatureNamespace>& features, const FeatureLimits& limits,
                   const std::string& in_message) {
  const absl::Status status =
      ValidateNamedFeatures(features, limits, "candidates[2].named_features");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr("candidates[2].named_features"));
  EXPECT_THAT(std::string(status.message()), HasSubstr(in_message));
}

TEST(NamedFeaturesTest, ValidationNamesTheField) {
  FeatureLimits limits;
  limits.max_namespaces = 2;
  limits.max_values = 4;
  limits.max_name_bytes = 8;
  limits.max_value_bytes = 5;
  const FeatureValue one = FeatureValue::Number(1);
  // At the limits: accepted.
  EXPECT_TRUE(ValidateNamedFeatures({{"12345678", {{"abcdefgh", FeatureValue::String("12345")}}},
                                     {"", {{"x", FeatureValue::Strings({"a", "b", "c"})}}}},
                                    limits, "f")
                  .ok());
  ExpectRefused({{"a", {}}, {"b", {}}, {"c", {}}}, limits, "3 namespaces; at most 2");
  ExpectRefused({{"123456789", {}}}, limits, "namespace name of 9 bytes; at most 8");
  ExpectRefused({{"a", {}}, {"a", {}}}, limits, "[1] (\"a\"): namespace \"a\" appears twice");
  ExpectRefused({{"a", {{"", one}}}}, limits, "[0] (\"a\").features[0] (\"\"): empty feature name");
  ExpectRefused({{"a", {{"123456789", one}}}}, limits, "feature name of 9 bytes; at most 8");
  ExpectRefused({{"a", {{"x", one}, {"x", one}}}}, limits,
                "[0] (\"a\").features[1] (\"x\"): feature \"x\" appears twice");
  ExpectRefused({{"a", {{"x", FeatureValue::Number(std::nan(""))}}}}, limits, "not finite");
  ExpectRefused({{"a", {{"x", FeatureValue::Number(2e6)}}}}, limits, "exceeds");
  ExpectRefused({{"a", {{"x", FeatureValue::String("123456")}}}}, limits,
                "a string of 6 bytes; at most 5");
  ExpectRefused({{"a", {{"x", FeatureValue::Strings({"ok", "123456"})}}}}, limits,
                "string 1 of the list has 6 bytes; at most 5");
  ExpectRefused({{"a", {{"x", FeatureValue::Strings({"1", "2", "3"})}, {"y", one}, {"z", one}}}},
                limits, "[0] (\"a\").features[2] (\"z\"): past 4 feature values in all");
  // An empty list counts 1, so that the number of features is bounded too.
  ExpectRefused({{"a",
                  {{"p", FeatureValue::Strings({})},
                   {"q", FeatureValue::Strings({})},
                   {"r", FeatureValue::Strings({})},
                   {"s", FeatureValue::Strings({})},
                   {"t", FeatureValue::Strings({})}}}},
                limits, "features[4] (\"t\"): past 4 feature values");
  // Unprintable bytes in a name are escaped in the message.
  ExpectRefused({{"a\n\xff", {{"", one}}}}, limits, "(\"a\\x0a\\xff\")");
  // The same name in two namespaces is two features.
  EXPECT_TRUE(ValidateNamedFeatures({{"a", {{"x", one}}}, {"b", {{"x", one}}}}, limits, "f").ok());
}

}  // namespace
}  // namespace graphbandit
