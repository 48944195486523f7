// Features as applications have them: namespaces of named values (numbers, strings, lists of
// strings), as Azure Personalizer and Vowpal Wabbit take them, and their hashed encoding into
// the fixed-size input vector the model's kernel takes (the "hashing trick": a feature's slot is
// a stable hash of its name, and of its value for a string, modulo the number of slots).
//
// A number adds its value at the slot of (namespace, name); a string adds 1 at the slot of
// (namespace, name, value), a one-hot code; a list of strings adds 1 at the slot of each of its
// distinct values. Two keys that land on one slot share it (a collision: FeatureCatalog counts
// them); a larger space makes them rarer and each decision dearer.
#ifndef GRAPHBANDIT_CORE_FEATURES_NAMED_FEATURES_H_
#define GRAPHBANDIT_CORE_FEATURES_NAMED_FEATURES_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace graphbandit {

struct FeatureValue {
  enum class Type : uint8_t { kNumber = 0, kString = 1, kStrings = 2 };
  Type type = Type::kNumber;
  double number = 0.0;                   // kNumber
  absl::string_view text;                // kString
  std::vector<absl::string_view> texts;  // kStrings

  static FeatureValue Number(double x) {
    FeatureValue v;
    v.number = x;
    return v;
  }
  static FeatureValue String(absl::string_view s) {
    FeatureValue v;
    v.type = Type::kString;
    v.text = s;
    return v;
  }
  static FeatureValue Strings(std::vector<absl::string_view> list) {
    FeatureValue v;
    v.type = Type::kStrings;
    v.texts = std::move(list);
    return v;
  }
};

// Views into the caller's request, valid during the call.
struct NamedFeature {
  absl::string_view name;
  FeatureValue value;
};

struct FeatureNamespace {
  absl::string_view name;  // may be empty: the default namespace
  std::vector<NamedFeature> features;
};

// The largest hashed space (slots) a model may have.
inline constexpr int kMaxFeatureSlots = 1 << 24;

// What one context or one candidate may carry.
struct FeatureLimits {
  int max_namespaces = 64;
  // Values: a number or a string counts 1, a list its length (an empty list 1, so that the
  // number of features is bounded too).
  int max_values = 512;
  int max_name_bytes = 256;    // namespace and feature names
  int max_value_bytes = 1024;  // each string
};

// Checks one context's or candidate's features: distinct namespace names, distinct feature
// names within a namespace, non-empty feature names, names and strings within the limits,
// numbers finite and within kMaxFeatureMagnitude (model_options.h), at most max_values values.
// Every error is INVALID_ARGUMENT and names the field under `field` (e.g.
// `candidates[3].named_features[1] ("device").features[0] ("os")`).
absl::Status ValidateNamedFeatures(absl::Span<const FeatureNamespace> namespaces,
                                   const FeatureLimits& limits, absl::string_view field);

// A name as messages show it: in double quotes, with anything but printable ASCII escaped and
// cut after 64 bytes.
std::string QuotedName(absl::string_view name);

// Where a feature is, for messages: `field[n] ("namespace").features[f] ("name")`, names with
// anything but printable ASCII escaped and cut after 64 bytes.
std::string FeatureFieldPath(absl::string_view field, size_t n, absl::string_view name_space,
                             size_t f, absl::string_view name);

// The stable 64-bit keys of a number's (namespace, name) and of a string's (namespace, name,
// value). Never 0. Stable across platforms and releases (core/base/random.h, StableHash), so
// that a model's slots mean the same after a restart or on another node.
uint64_t NumberKey(absl::string_view name_space, absl::string_view name);
uint64_t StringKey(absl::string_view name_space, absl::string_view name, absl::string_view value);

// The slot of `key` in a space of `slots` slots (> 0): the high half of key * slots, which
// spreads keys evenly without a division.
inline int SlotOf(uint64_t key, int slots) {
  return static_cast<int>((static_cast<unsigned __int128>(key) * static_cast<uint64_t>(slots)) >>
                          64);
}

// How a number is scaled before it is added: (x - center) / spread, with the mean and standard
// deviation of the values seen up to some point (`count` of them), frozen there so that the
// same value keeps the same input until the next freeze.
struct NumericScale {
  double center = 0.0;
  double spread = 1.0;  // > 0
  int64_t count = 0;
  // Scaled values are clipped to +-kMaxScaled (that many spreads away is "very far" for any
  // kernel; it keeps a value far beyond what was seen from overflowing the input's range).
  static constexpr double kMaxScaled = 1000.0;
  double Apply(double x) const {
    return std::clamp((x - center) / spread, -kMaxScaled, kMaxScaled);
  }
};
// By NumberKey.
using NumericScaling = absl::flat_hash_map<uint64_t, NumericScale>;

// The scale for `count` values with this mean and (population) variance. Without spread (one
// value, or all alike) the spread is max(1, |mean|).
NumericScale FreezeScale(int64_t count, double mean, double variance);
// Whether `now` differs materially from `frozen`: the center by more than a tenth of the
// spread, or the spread by more than a factor 1.25.
bool ScaleMoved(const NumericScale& frozen, const NumericScale& now);

// Adds the features' values into `out`, a space of out.size() slots (see the top of this
// file), numbers scaled by `scaling` when it holds their key (else as they are). Each slot
// that received a value is then clamped to +-kMaxFeatureMagnitude (colliding values could sum
// beyond it). `out` is not cleared first. REQUIRES: 1 <= out.size() <= kMaxFeatureSlots (else
// nothing is added); the features passed ValidateNamedFeatures.
void AddNamedFeatures(absl::Span<const FeatureNamespace> namespaces, absl::Span<double> out,
                      const NumericScaling* scaling = nullptr);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FEATURES_NAMED_FEATURES_H_
