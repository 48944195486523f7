#include "core/features/feature_catalog.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {
namespace {

// Largest hashed space a catalog accepts (a decoded one is checked against it).
constexpr int kMaxSlots = 1 << 24;

FeatureKind KindOf(const FeatureValue& value) {
  return value.type == FeatureValue::Type::kNumber ? FeatureKind::kNumeric
                                                   : FeatureKind::kCategorical;
}

absl::Status Corrupt(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("feature catalog: ", what));
}

}  // namespace

absl::string_view FeatureKindName(FeatureKind kind) {
  return kind == FeatureKind::kNumeric ? "numeric" : "categorical";
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
    : options_(options),
      max_tracked_keys_(options.max_tracked_keys > 0
                            ? options.max_tracked_keys
                            : std::max<int64_t>(4 * static_cast<int64_t>(options.slots), 65536)),
      occupied_(static_cast<size_t>(std::max(options.slots, 1)), false) {
  options_.slots = std::max(options_.slots, 1);
}

const FeatureCatalog::Feature* FeatureCatalog::Find(absl::string_view name_space,
                                                    absl::string_view name) const {
  const auto ns = features_.find(name_space);
  if (ns == features_.end()) return nullptr;
  const auto f = ns->second.find(name);
  return f == ns->second.end() ? nullptr : &f->second;
}

absl::Status FeatureCatalog::Declare(absl::string_view name_space, absl::string_view name,
                                     FeatureKind kind) {
  if (const Feature* known = Find(name_space, name); known != nullptr) {
    if (known->kind != kind) {
      return absl::InvalidArgumentError(
          absl::StrFormat("feature \"%s\" of namespace \"%s\" is declared %s and %s", name,
                          name_space, FeatureKindName(known->kind), FeatureKindName(kind)));
    }
    features_.find(name_space)->second.find(name)->second.declared = true;
    return absl::OkStatus();
  }
  if (listed_ >= options_.max_listed_features) {
    return absl::InvalidArgumentError(
        absl::StrFormat("more than %d features declared; at most that many are listed",
                        options_.max_listed_features));
  }
  Feature feature;
  feature.kind = kind;
  feature.declared = true;
  features_[std::string(name_space)].emplace(std::string(name), feature);
  ++listed_;
  return absl::OkStatus();
}

absl::Status FeatureCatalog::Check(absl::Span<const FeatureNamespace> namespaces,
                                   absl::string_view field, bool declared_only) const {
  for (size_t n = 0; n < namespaces.size(); ++n) {
    const FeatureNamespace& ns = namespaces[n];
    for (size_t f = 0; f < ns.features.size(); ++f) {
      const NamedFeature& feature = ns.features[f];
      const Feature* known = Find(ns.name, feature.name);
      const FeatureKind kind = KindOf(feature.value);
      if (known != nullptr && known->kind != kind) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: a %s value, but this feature is %s in the model (%s)",
            FeatureFieldPath(field, n, ns.name, f, feature.name), FeatureKindName(kind),
            FeatureKindName(known->kind), known->declared ? "declared" : "as first seen"));
      }
      if (known == nullptr && declared_only) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: not among the model's declared features",
                            FeatureFieldPath(field, n, ns.name, f, feature.name)));
      }
    }
  }
  return absl::OkStatus();
}

bool FeatureCatalog::TrackKey(uint64_t key) {
  if (keys_.contains(key)) return false;
  if (static_cast<int64_t>(keys_.size()) >= max_tracked_keys_) {
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
  for (const FeatureNamespace& ns : namespaces) {
    for (const NamedFeature& feature : ns.features) {
      const FeatureValue& value = feature.value;
      Feature* listed = nullptr;
      auto by_name = features_.find(ns.name);
      if (by_name != features_.end()) {
        auto f = by_name->second.find(feature.name);
        if (f != by_name->second.end()) listed = &f->second;
      }
      if (listed == nullptr && listed_ < options_.max_listed_features) {
        if (by_name == features_.end()) {
          by_name =
              features_.emplace(std::string(ns.name), std::map<std::string, Feature, std::less<>>())
                  .first;
        }
        Feature added;
        added.kind = KindOf(value);
        listed = &by_name->second.emplace(std::string(feature.name), added).first->second;
        ++listed_;
      }
      if (listed != nullptr) ++listed->seen;
      switch (value.type) {
        case FeatureValue::Type::kNumber:
          if (listed != nullptr) {
            listed->numbers.Add(value.number);
          } else {
            ++unlisted_values_;
          }
          TrackKey(NumberKey(ns.name, feature.name));
          break;
        case FeatureValue::Type::kString:
        case FeatureValue::Type::kStrings: {
          const bool one = value.type == FeatureValue::Type::kString;
          const size_t count = one ? 1 : value.texts.size();
          for (size_t i = 0; i < count; ++i) {
            const absl::string_view text = one ? value.text : value.texts[i];
            const bool added = TrackKey(StringKey(ns.name, feature.name, text));
            if (listed == nullptr) {
              ++unlisted_values_;
            } else if (added) {
              ++listed->distinct_values;
            }
          }
          break;
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
  out->PutVarint64(static_cast<uint64_t>(options_.slots));
  out->PutVarint64(static_cast<uint64_t>(options_.max_listed_features));
  out->PutVarint64(static_cast<uint64_t>(max_tracked_keys_));
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
  out->PutVarint64(static_cast<uint64_t>(untracked_values_));
  std::vector<uint64_t> keys(keys_.begin(), keys_.end());
  std::sort(keys.begin(), keys.end());
  out->PutVarint64(keys.size());
  for (uint64_t key : keys) out->PutFixed64(key);
}

absl::StatusOr<FeatureCatalog> FeatureCatalog::DecodeFrom(storage::Decoder* in) {
  uint64_t slots = 0, max_listed = 0, max_tracked = 0, namespaces = 0;
  if (!in->GetVarint64(&slots) || !in->GetVarint64(&max_listed) || !in->GetVarint64(&max_tracked) ||
      !in->GetVarint64(&namespaces)) {
    return Corrupt("truncated header");
  }
  if (slots < 1 || slots > kMaxSlots) return Corrupt("slots out of range");
  if (max_listed > static_cast<uint64_t>(INT32_MAX)) return Corrupt("listing bound too large");
  if (max_tracked < 1 || max_tracked > (uint64_t{1} << 40)) {
    return Corrupt("key bound out of range");
  }
  Options options;
  options.slots = static_cast<int>(slots);
  options.max_listed_features = static_cast<int>(max_listed);
  options.max_tracked_keys = static_cast<int64_t>(max_tracked);
  FeatureCatalog catalog(options);
  // Each namespace takes at least two bytes and each feature at least 40: a count larger than
  // the input could hold is refused before anything is reserved for it.
  if (namespaces > in->remaining() / 2) return Corrupt("namespace count exceeds the input");
  for (uint64_t n = 0; n < namespaces; ++n) {
    std::string name_space;
    uint64_t count = 0;
    if (!in->GetString(&name_space) || !in->GetVarint64(&count)) {
      return Corrupt("truncated namespace");
    }
    if (count > in->remaining() / 40) return Corrupt("feature count exceeds the input");
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
      if (kind != static_cast<uint8_t>(FeatureKind::kNumeric) &&
          kind != static_cast<uint8_t>(FeatureKind::kCategorical)) {
        return Corrupt("unknown feature kind");
      }
      if (declared > 1 || seen > static_cast<uint64_t>(INT64_MAX) || numbers > seen ||
          distinct > static_cast<uint64_t>(INT64_MAX)) {
        return Corrupt("feature counts out of range");
      }
      f.kind = static_cast<FeatureKind>(kind);
      f.declared = declared == 1;
      f.seen = static_cast<int64_t>(seen);
      f.numbers.count = static_cast<int64_t>(numbers);
      f.distinct_values = static_cast<int64_t>(distinct);
      if (!by_name->second.emplace(std::move(name), f).second) {
        return Corrupt("a feature listed twice");
      }
      ++catalog.listed_;
    }
  }
  if (catalog.listed_ > catalog.options_.max_listed_features) {
    return Corrupt("more features listed than its bound");
  }
  uint64_t unlisted = 0, untracked = 0, keys = 0;
  if (!in->GetVarint64(&unlisted) || !in->GetVarint64(&untracked) || !in->GetVarint64(&keys)) {
    return Corrupt("truncated counts");
  }
  if (unlisted > static_cast<uint64_t>(INT64_MAX) || untracked > static_cast<uint64_t>(INT64_MAX)) {
    return Corrupt("counts out of range");
  }
  if (keys > max_tracked || keys > in->remaining() / 8) return Corrupt("key count out of range");
  catalog.unlisted_values_ = static_cast<int64_t>(unlisted);
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
