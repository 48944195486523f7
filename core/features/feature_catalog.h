// What a model has seen of its named features (named_features.h): each feature's kind, how often
// it came, a running summary of its numbers, how many distinct strings it had, and how loaded the
// hashed space is (slots in use, keys that landed on a slot another key already held). Also the
// schema: a feature keeps the kind it was declared with (configuration) or first seen with
// (traffic), and a request that sends it with the other kind is refused, naming the field.
//
// A plain value: its owner serialises access. Bounded: at most max_listed_features features are
// listed (later ones are encoded, counted as unlisted, and not kind-checked) and at most
// max_tracked_keys distinct keys are remembered for the collision count.
#ifndef GRAPHBANDIT_CORE_FEATURES_FEATURE_CATALOG_H_
#define GRAPHBANDIT_CORE_FEATURES_FEATURE_CATALOG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/features/named_features.h"
#include "core/storage/coding.h"

namespace graphbandit {

// A number is kNumeric; a string and a list of strings are both kCategorical (a string is a
// list of one).
enum class FeatureKind : uint8_t { kNumeric = 1, kCategorical = 2 };
absl::string_view FeatureKindName(FeatureKind kind);

// Count, mean and spread of a stream of numbers, updated one at a time (Welford's method, which
// stays accurate where the textbook sum of squares cancels).
struct RunningSummary {
  int64_t count = 0;
  double mean = 0.0;
  double m2 = 0.0;  // sum of squared deviations from the mean
  double min = 0.0;
  double max = 0.0;

  void Add(double x);
  // The population variance (m2 / count); 0 for fewer than two values.
  double variance() const { return count > 1 ? m2 / static_cast<double>(count) : 0.0; }
};

class FeatureCatalog {
 public:
  struct Options {
    int slots = 1;  // the hashed space's size, > 0
    int max_listed_features = 4096;
    // 0: max(4 * slots, 65536).
    int64_t max_tracked_keys = 0;
  };

  struct Feature {
    FeatureKind kind = FeatureKind::kNumeric;
    bool declared = false;        // by the configuration, rather than first seen in traffic
    int64_t seen = 0;             // contexts or candidates that carried it
    RunningSummary numbers;       // kNumeric
    int64_t distinct_values = 0;  // kCategorical: distinct strings among the tracked keys
  };

  struct HashLoad {
    int slots = 0;
    int64_t occupied_slots = 0;
    int64_t distinct_keys = 0;   // tracked
    int64_t colliding_keys = 0;  // tracked keys beyond one per occupied slot
    // Values whose key was not tracked (the key bound reached): not in the counts above.
    int64_t untracked_values = 0;
    double load() const {
      return slots > 0 ? static_cast<double>(occupied_slots) / static_cast<double>(slots) : 0.0;
    }
  };

  explicit FeatureCatalog(Options options);

  // Declares a feature's kind (a schema in the configuration). Declaring one again with the
  // other kind is INVALID_ARGUMENT; with the same kind, nothing happens.
  absl::Status Declare(absl::string_view name_space, absl::string_view name, FeatureKind kind);

  // INVALID_ARGUMENT, naming the field under `field` as ValidateNamedFeatures does, for the first
  // listed feature sent with the other kind than the catalog's; with `declared_only`, also for a
  // feature that was not declared. REQUIRES: the features passed ValidateNamedFeatures.
  absl::Status Check(absl::Span<const FeatureNamespace> namespaces, absl::string_view field,
                     bool declared_only) const;

  // Takes in one context's or candidate's features: lists new features (up to the bound) with
  // the kind they came with, counts them, adds their numbers to the summaries and tracks their
  // keys' slots. REQUIRES: Check passed for these features.
  void Record(absl::Span<const FeatureNamespace> namespaces);

  int slots() const { return options_.slots; }
  int64_t max_tracked_keys() const { return max_tracked_keys_; }
  // Features by namespace, then name (both in byte order).
  const std::map<std::string, std::map<std::string, Feature, std::less<>>, std::less<>>&
  namespaces() const {
    return features_;
  }
  int64_t listed_features() const { return listed_; }
  // Values of features beyond max_listed_features (not listed, not kind-checked).
  int64_t unlisted_values() const { return unlisted_values_; }
  HashLoad hash_load() const;

  // The whole catalog, bit for bit (the tracked keys in sorted order, so that two catalogs
  // that saw the same requests encode the same bytes).
  void EncodeTo(storage::Encoder* out) const;
  // INVALID_ARGUMENT (naming what is wrong) for bytes EncodeTo did not write.
  static absl::StatusOr<FeatureCatalog> DecodeFrom(storage::Decoder* in);

 private:
  const Feature* Find(absl::string_view name_space, absl::string_view name) const;
  // Remembers `key` if new and there is room; returns whether it was new (and tracked).
  bool TrackKey(uint64_t key);

  Options options_;
  int64_t max_tracked_keys_;
  std::map<std::string, std::map<std::string, Feature, std::less<>>, std::less<>> features_;
  int64_t listed_ = 0;
  int64_t unlisted_values_ = 0;
  // Whether some tracked key landed on each slot. The keys that collide are the tracked keys
  // beyond the occupied slots, whatever order they came in.
  std::vector<bool> occupied_;
  absl::flat_hash_set<uint64_t> keys_;
  int64_t occupied_slots_ = 0;
  int64_t untracked_values_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FEATURES_FEATURE_CATALOG_H_
