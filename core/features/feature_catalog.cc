#include "core/features/feature_catalog.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {
namespace {

constexpr uint8_t kFormatVersion = 1;
constexpr int kMaxNameBytesBound = 1 << 16;
// The fewest bytes EncodeTo writes for one feature (a one-byte name, a varint for each count,
// four doubles), and for one namespace (an empty name and a count).
constexpr size_t kMinFeatureBytes = 38;
constexpr size_t kMinNamespaceBytes = 2;

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("feature catalog: ", what));
}

}  // namespace

absl::string_view FeatureKindName(FeatureKind kind) {
  return kind == FeatureKind::kNumeric ? "numeric" : "categorical";
}

FeatureKind KindOf(const FeatureValue& value) {
  return value.type == FeatureValue::Type::kNumber ? FeatureKind::kNumeric
                                                   : FeatureKind::kCategorical;
}

void RunningSummary::Add(double x) {
  if (count == 0) {
    min = max = x;
  } else {
    min = std::min(min, x);
    max = std::max(max, x);
  }
  ++count;
  const double delta = x - mean;
  mean += delta / static_cast<double>(count);
  m2 += delta * (x - mean);
}

FeatureCatalog::FeatureCatalog(Options options)
    : options_(options), occupied_(static_cast<size_t>(options.slots), false) {}

absl::StatusOr<FeatureCatalog> FeatureCatalog::Create(Options options) {
  if (options.slots < 1 || options.slots > kMaxFeatureSlots) {
    return absl::InvalidArgumentError(
        absl::StrFormat("feature slots %d; must be 1..%d", options.slots, kMaxFeatureSlots));
  }
  if (options.max_listed_features < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_listed_features %d; must be at least 0", options.max_listed_features));
  }
  if (options.max_tracked_keys == 0) {
    options.max_tracked_keys = std::min<int64_t>(
        std::max<int64_t>(4 * static_cast<int64_t>(options.slots), 65536), int64_t{1} << 20);
  }
  if (options.max_tracked_keys < 1 || options.max_tracked_keys > kMaxTrackedKeys) {
    return absl::InvalidArgumentError(
        absl::StrFormat("max_tracked_keys %d; must be 1..%d (or 0 for the default)",
                        options.max_tracked_keys, kMaxTrackedKeys));
  }
  if (options.max_name_bytes < 1 || options.max_name_bytes > kMaxNameBytesBound) {
    return absl::InvalidArgumentError(absl::StrFormat("max_name_bytes %d; must be 1..%d",
                                                      options.max_name_bytes, kMaxNameBytesBound));
  }
  return FeatureCatalog(options);
}

const FeatureCatalog::Feature* FeatureCatalog::Find(absl::string_view name_space,
                                                    absl::string_view name) const {
  const auto ns = features_.find(name_space);
  if (ns == features_.end()) return nullptr;
  const auto f = ns->second.find(name);
  return f == ns->second.end() ? nullptr : &f->second;
}

FeatureCatalog::Feature* FeatureCatalog::FindMutable(absl::string_view name_space,
                                                     absl::string_view name) {
  return const_cast<Feature*>(Find(name_space, name));
}

absl::Status FeatureCatalog::Declare(absl::string_view name_space, absl::string_view name,
                                     FeatureKind kind) {
  const auto too_long = [this](absl::string_view s) {
    return s.size() > static_cast<size_t>(options_.max_name_bytes);
  };
  if (name.empty() || too_long(name) || too_long(name_space)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "declared feature %s of namespace %s: names must be 1..%d bytes (a namespace may be "
        "empty)",
        QuotedName(name), QuotedName(name_space), options_.max_name_bytes));
  }
  if (Feature* known = FindMutable(name_space, name); known != nullptr) {
    if (known->kind != kind) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %s of namespace %s is %s (%s) and cannot be declared %s", QuotedName(name),
          QuotedName(name_space), FeatureKindName(known->kind),
          known->declared ? "declared" : "as seen in traffic", FeatureKindName(kind)));
    }
    if (!known->declared) {
      known->declared = true;
      ++declared_;
    }
    return absl::OkStatus();
  }
  Feature feature;
  feature.kind = kind;
  feature.declared = true;
  features_[std::string(name_space)].emplace(std::string(name), feature);
  ++listed_;
  ++declared_;
  return absl::OkStatus();
}

absl::Status FeatureCatalog::Check(absl::Span<const Source> sources, bool declared_only) const {
  // Kinds of the features the catalog does not list, as they came earlier in this request.
  absl::flat_hash_map<std::pair<absl::string_view, absl::string_view>, FeatureKind> earlier;
  for (const Source& source : sources) {
    for (size_t n = 0; n < source.namespaces.size(); ++n) {
      const FeatureNamespace& ns = source.namespaces[n];
      for (size_t f = 0; f < ns.features.size(); ++f) {
        const NamedFeature& feature = ns.features[f];
        const FeatureKind kind = KindOf(feature.value);
        const auto path = [&] {
          return FeatureFieldPath(source.field, n, ns.name, f, feature.name);
        };
        const Feature* known = Find(ns.name, feature.name);
        if (known != nullptr && known->kind != kind) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: a %s value, but this feature is %s in the model (%s)", path(),
                              FeatureKindName(kind), FeatureKindName(known->kind),
                              known->declared ? "declared" : "as first seen"));
        }
        if (declared_only && (known == nullptr || !known->declared)) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: not among the model's declared features", path()));
        }
        if (known != nullptr) continue;
        const auto [at, fresh] = earlier.try_emplace({ns.name, feature.name}, kind);
        if (!fresh && at->second != kind) {
          return absl::InvalidArgumentError(
              absl::StrFormat("%s: a %s value, but the same feature is %s earlier in this request",
                              path(), FeatureKindName(kind), FeatureKindName(at->second)));
        }
      }
    }
  }
  return absl::OkStatus();
}

bool FeatureCatalog::TrackKey(uint64_t key) {
  if (keys_.contains(key)) return false;
  if (static_cast<int64_t>(keys_.size()) >= options_.max_tracked_keys) {
    ++untracked_values_;
    return false;
  }
  keys_.insert(key);
  const auto slot = static_cast<size_t>(SlotOf(key, options_.slots));
  if (!occupied_[slot]) {
    occupied_[slot] = true;
    ++occupied_slots_;
  }
  return true;
}

void FeatureCatalog::Record(absl::Span<const FeatureNamespace> namespaces) {
  const auto too_long = [this](absl::string_view s) {
    return s.size() > static_cast<size_t>(options_.max_name_bytes);
  };
  for (const FeatureNamespace& ns : namespaces) {
    if (too_long(ns.name)) continue;  // refused by validation; never listed
    for (const NamedFeature& feature : ns.features) {
      if (feature.name.empty() || too_long(feature.name)) continue;
      const FeatureValue& value = feature.value;
      const FeatureKind kind = KindOf(value);
      Feature* listed = FindMutable(ns.name, feature.name);
      if (listed != nullptr && listed->kind != kind) {
        ++kind_conflicts_;
        continue;
      }
      if (listed == nullptr && listed_ - declared_ < options_.max_listed_features) {
        Feature added;
        added.kind = kind;
        listed = &features_[std::string(ns.name)]
                      .emplace(std::string(feature.name), added)
                      .first->second;
        ++listed_;
      }
      if (listed != nullptr) ++listed->seen;
      if (kind == FeatureKind::kNumeric) {
        if (listed != nullptr) {
          listed->numbers.Add(value.number);
        } else {
          ++unlisted_values_;
        }
        TrackKey(NumberKey(ns.name, feature.name));
        continue;
      }
      const bool one = value.type == FeatureValue::Type::kString;
      const size_t count = one ? 1 : value.texts.size();
      for (size_t i = 0; i < count; ++i) {
        const bool added =
            TrackKey(StringKey(ns.name, feature.name, one ? value.text : value.texts[i]));
        if (listed == nullptr) {
          ++unlisted_values_;
        } else if (added) {
          ++listed->distinct_values;
        }
      }
    }
  }
}

FeatureCatalog::HashLoad FeatureCatalog::hash_load() const {
  HashLoad load;
  load.slots = options_.slots;
  load.occupied_slots = occupied_slots_;
  load.distinct_keys = static_cast<int64_t>(keys_.size());
  load.colliding_keys = load.distinct_keys - occupied_slots_;
  load.untracked_values = untracked_values_;
  return load;
}

void FeatureCatalog::EncodeTo(storage::Encoder* out) const {
  out->PutU8(kFormatVersion);
  out->PutVarint64(static_cast<uint64_t>(options_.slots));
  out->PutVarint64(static_cast<uint64_t>(options_.max_listed_features));
  out->PutVarint64(static_cast<uint64_t>(options_.max_tracked_keys));
  out->PutVarint64(static_cast<uint64_t>(options_.max_name_bytes));
  out->PutVarint64(features_.size());
  for (const auto& [name_space, by_name] : features_) {
    out->PutString(name_space);
    out->PutVarint64(by_name.size());
    for (const auto& [name, f] : by_name) {
      out->PutString(name);
      out->PutU8(static_cast<uint8_t>(f.kind));
      out->PutU8(f.declared ? 1 : 0);
      out->PutVarint64(static_cast<uint64_t>(f.seen));
      out->PutVarint64(static_cast<uint64_t>(f.numbers.count));
      out->PutDouble(f.numbers.mean);
      out->PutDouble(f.numbers.m2);
      out->PutDouble(f.numbers.min);
      out->PutDouble(f.numbers.max);
      out->PutVarint64(static_cast<uint64_t>(f.distinct_values));
    }
  }
  out->PutVarint64(static_cast<uint64_t>(unlisted_values_));
  out->PutVarint64(static_cast<uint64_t>(kind_conflicts_));
  out->PutVarint64(static_cast<uint64_t>(untracked_values_));
  std::vector<uint64_t> keys(keys_.begin(), keys_.end());
  std::sort(keys.begin(), keys.end());
  out->PutVarint64(keys.size());
  for (uint64_t key : keys) out->PutFixed64(key);
}

namespace {

// One feature's fields as decoded, checked against each other.
absl::Status CheckFeature(const FeatureCatalog::Feature& f) {
  const RunningSummary& s = f.numbers;
  if (f.kind == FeatureKind::kNumeric) {
    if (s.count != f.seen || f.distinct_values != 0) {
      return Corrupt("a numeric feature's counts disagree");
    }
    if (!std::isfinite(s.mean) || !std::isfinite(s.m2) || !std::isfinite(s.min) ||
        !std::isfinite(s.max) || s.m2 < 0 || (s.count > 0 && s.min > s.max) ||
        (s.count == 0 && (s.mean != 0 || s.m2 != 0 || s.min != 0 || s.max != 0))) {
      return Corrupt("a numeric feature's summary is not one of numbers");
    }
  } else if (s.count != 0 || s.mean != 0 || s.m2 != 0 || s.min != 0 || s.max != 0) {
    return Corrupt("a categorical feature with a summary of numbers");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<FeatureCatalog> FeatureCatalog::DecodeFrom(storage::Decoder* in) {
  uint8_t version = 0;
  if (!in->GetU8(&version)) return Corrupt("truncated header");
  if (version != kFormatVersion) {
    return Corrupt(
        absl::StrFormat("format version %d; this build reads %d", version, kFormatVersion));
  }
  uint64_t slots = 0, max_listed = 0, max_tracked = 0, max_name = 0, namespaces = 0;
  if (!in->GetVarint64(&slots) || !in->GetVarint64(&max_listed) || !in->GetVarint64(&max_tracked) ||
      !in->GetVarint64(&max_name) || !in->GetVarint64(&namespaces)) {
    return Corrupt("truncated header");
  }
  if (slots > static_cast<uint64_t>(kMaxFeatureSlots) ||
      max_listed > static_cast<uint64_t>(INT32_MAX) ||
      max_tracked > static_cast<uint64_t>(kMaxTrackedKeys) ||
      max_name > static_cast<uint64_t>(kMaxNameBytesBound)) {
    return Corrupt("options out of range");
  }
  Options options;
  options.slots = static_cast<int>(slots);
  options.max_listed_features = static_cast<int>(max_listed);
  options.max_tracked_keys = static_cast<int64_t>(max_tracked);
  options.max_name_bytes = static_cast<int>(max_name);
  if (max_tracked == 0) return Corrupt("options out of range");
  absl::StatusOr<FeatureCatalog> created = Create(options);
  if (!created.ok()) return Corrupt(created.status().message());
  FeatureCatalog catalog = *std::move(created);
  if (namespaces > in->remaining() / kMinNamespaceBytes) {
    return Corrupt("namespace count exceeds the input");
  }
  int64_t distinct_total = 0;
  for (uint64_t n = 0; n < namespaces; ++n) {
    std::string name_space;
    uint64_t count = 0;
    if (!in->GetString(&name_space) || !in->GetVarint64(&count)) {
      return Corrupt("truncated namespace");
    }
    if (name_space.size() > max_name) return Corrupt("a namespace name too long");
    if (count == 0) return Corrupt("a namespace without features");
    if (count > in->remaining() / kMinFeatureBytes) {
      return Corrupt("feature count exceeds the input");
    }
    auto [by_name, fresh] = catalog.features_.emplace(
        std::move(name_space), std::map<std::string, Feature, std::less<>>());
    if (!fresh) return Corrupt("a namespace listed twice");
    for (uint64_t i = 0; i < count; ++i) {
      std::string name;
      Feature f;
      uint8_t kind = 0, declared = 0;
      uint64_t seen = 0, numbers = 0, distinct = 0;
      if (!in->GetString(&name) || !in->GetU8(&kind) || !in->GetU8(&declared) ||
          !in->GetVarint64(&seen) || !in->GetVarint64(&numbers) ||
          !in->GetDouble(&f.numbers.mean) || !in->GetDouble(&f.numbers.m2) ||
          !in->GetDouble(&f.numbers.min) || !in->GetDouble(&f.numbers.max) ||
          !in->GetVarint64(&distinct)) {
        return Corrupt("truncated feature");
      }
      if (name.empty() || name.size() > max_name)
        return Corrupt("a feature name empty or too long");
      if (kind != static_cast<uint8_t>(FeatureKind::kNumeric) &&
          kind != static_cast<uint8_t>(FeatureKind::kCategorical)) {
        return Corrupt("unknown feature kind");
      }
      if (declared > 1 || seen > static_cast<uint64_t>(INT64_MAX) ||
          numbers > static_cast<uint64_t>(INT64_MAX) ||
          distinct > static_cast<uint64_t>(max_tracked)) {
        return Corrupt("feature counts out of range");
      }
      f.kind = static_cast<FeatureKind>(kind);
      f.declared = declared == 1;
      f.seen = static_cast<int64_t>(seen);
      f.numbers.count = static_cast<int64_t>(numbers);
      f.distinct_values = static_cast<int64_t>(distinct);
      if (absl::Status status = CheckFeature(f); !status.ok()) return status;
      distinct_total += f.distinct_values;
      if (!by_name->second.emplace(std::move(name), f).second) {
        return Corrupt("a feature listed twice");
      }
      ++catalog.listed_;
      if (f.declared) ++catalog.declared_;
    }
  }
  if (catalog.listed_ - catalog.declared_ > catalog.options_.max_listed_features) {
    return Corrupt("more features listed than its bound");
  }
  uint64_t unlisted = 0, conflicts = 0, untracked = 0, keys = 0;
  if (!in->GetVarint64(&unlisted) || !in->GetVarint64(&conflicts) || !in->GetVarint64(&untracked) ||
      !in->GetVarint64(&keys)) {
    return Corrupt("truncated counts");
  }
  if (unlisted > static_cast<uint64_t>(INT64_MAX) || conflicts > static_cast<uint64_t>(INT64_MAX) ||
      untracked > static_cast<uint64_t>(INT64_MAX)) {
    return Corrupt("counts out of range");
  }
  if (keys > max_tracked || keys > in->remaining() / 8) return Corrupt("key count out of range");
  if (untracked > 0 && keys != max_tracked) return Corrupt("untracked values below the key bound");
  if (static_cast<uint64_t>(distinct_total) > keys) {
    return Corrupt("more distinct strings than tracked keys");
  }
  catalog.unlisted_values_ = static_cast<int64_t>(unlisted);
  catalog.kind_conflicts_ = static_cast<int64_t>(conflicts);
  catalog.keys_.reserve(keys);
  uint64_t previous = 0;
  for (uint64_t i = 0; i < keys; ++i) {
    uint64_t key = 0;
    if (!in->GetFixed64(&key)) return Corrupt("truncated keys");
    if (key == 0 || key <= previous) return Corrupt("keys not in increasing order");
    previous = key;
    catalog.TrackKey(key);
  }
  catalog.untracked_values_ = static_cast<int64_t>(untracked);
  return catalog;
}

}  // namespace graphbandit
