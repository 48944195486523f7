// What a model has seen of its named features (named_features.h): each feature's kind, how often
// it came, a running summary of its numbers, how many distinct strings it had, and how loaded the
// hashed space is (slots in use, keys that landed on a slot another key already held). Also the
// schema: a feature keeps the kind it was declared with (configuration) or first seen with
// (traffic), and a request that sends it with the other kind is refused, naming the field.
//
// A plain value: its owner serialises access, and must run Check and Record for one request
// under one lock (or in one log-ordered thread), since what Record does depends on what came
// before: the kind a feature is first seen with, which features fill the listing, which keys are
// tracked, and the last bits of the running means. Replaying the same requests in the same order
// rebuilds the same catalog, byte for byte.
//
// Bounded: at most max_listed_features features first seen in traffic are listed (later ones are
// encoded, counted as unlisted, and not kind-checked; declared features do not count against the
// bound), and at most max_tracked_keys distinct keys are remembered for the hash load, which past
// that bound describes a sample of the keys.
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
FeatureKind KindOf(const FeatureValue& value);

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
  // The most distinct keys a catalog may be asked to remember (8 bytes each in a snapshot).
  static constexpr int64_t kMaxTrackedKeys = int64_t{1} << 24;

  struct Options {
    int slots = 1;  // the hashed space's size, 1..kMaxFeatureSlots
    int max_listed_features = 4096;
    // 0: min(max(4 * slots, 65536), 2^20), about 8 MB of keys at the most.
    int64_t max_tracked_keys = 0;
    int max_name_bytes = 256;  // of declared names, as FeatureLimits for requests
  };

  struct Feature {
    FeatureKind kind = FeatureKind::kNumeric;
    bool declared = false;        // by the configuration, rather than only seen in traffic
    int64_t seen = 0;             // contexts or candidates that carried it
    RunningSummary numbers;       // kNumeric: one value per time seen
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

  // One context's or candidate's features, and the field that names them in messages (e.g.
  // "candidates[3].named_features").
  struct Source {
    absl::Span<const FeatureNamespace> namespaces;
    absl::string_view field;
  };

  // INVALID_ARGUMENT, naming the option, for options out of range.
  static absl::StatusOr<FeatureCatalog> Create(Options options);

  // Declares a feature's kind (a schema in the configuration). INVALID_ARGUMENT for an empty or
  // over-long name, or a feature declared or seen with the other kind; with the same kind it is
  // marked declared and nothing else changes.
  absl::Status Declare(absl::string_view name_space, absl::string_view name, FeatureKind kind);

  // Checks one request (its context and every candidate) before anything of it is recorded:
  // INVALID_ARGUMENT, naming the field as ValidateNamedFeatures does, for the first feature sent
  // with another kind than the catalog lists or, for one it does not list, than the same feature
  // had earlier in the request; with `declared_only`, also for a feature that is not declared.
  // REQUIRES: every source passed ValidateNamedFeatures.
  absl::Status Check(absl::Span<const Source> sources, bool declared_only) const;
  absl::Status Check(absl::Span<const FeatureNamespace> namespaces, absl::string_view field,
                     bool declared_only) const {
    const Source source{namespaces, field};
    return Check(absl::MakeConstSpan(&source, 1), declared_only);
  }

  // Takes in one context's or candidate's features: lists new features (up to the bound) with
  // the kind they came with, counts them, adds their numbers to the summaries and tracks their
  // keys' slots. A value of the other kind than the feature's (Check not run, or run apart from
  // this call) is not taken in but counted in kind_conflicts().
  void Record(absl::Span<const FeatureNamespace> namespaces);

  int slots() const { return options_.slots; }
  int64_t max_tracked_keys() const { return options_.max_tracked_keys; }
  // Features by namespace, then name (both in byte order).
  const std::map<std::string, std::map<std::string, Feature, std::less<>>, std::less<>>&
  namespaces() const {
    return features_;
  }
  int64_t listed_features() const { return listed_; }
  int64_t declared_features() const { return declared_; }
  // Values of features beyond max_listed_features (not listed, not kind-checked).
  int64_t unlisted_values() const { return unlisted_values_; }
  int64_t kind_conflicts() const { return kind_conflicts_; }
  HashLoad hash_load() const;

  // The whole catalog, bit for bit (the tracked keys in sorted order), after a format version.
  void EncodeTo(storage::Encoder* out) const;
  // INVALID_ARGUMENT (naming what is wrong) for bytes EncodeTo did not write: unknown version,
  // truncation, out-of-range or inconsistent counts and summaries, duplicates, unsorted keys.
  static absl::StatusOr<FeatureCatalog> DecodeFrom(storage::Decoder* in);

 private:
  explicit FeatureCatalog(Options options);

  const Feature* Find(absl::string_view name_space, absl::string_view name) const;
  Feature* FindMutable(absl::string_view name_space, absl::string_view name);
  // Remembers `key` if new and there is room; returns whether it was new (and tracked).
  bool TrackKey(uint64_t key);

  Options options_;
  std::map<std::string, std::map<std::string, Feature, std::less<>>, std::less<>> features_;
  int64_t listed_ = 0;
  int64_t declared_ = 0;
  int64_t unlisted_values_ = 0;
  int64_t kind_conflicts_ = 0;
  // Whether some tracked key landed on each slot. The keys that collide are the tracked keys
  // beyond the occupied slots, whatever order they came in.
  std::vector<bool> occupied_;
  absl::flat_hash_set<uint64_t> keys_;
  int64_t occupied_slots_ = 0;
  int64_t untracked_values_ = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_FEATURES_FEATURE_CATALOG_H_
