#include "core/features/named_features.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/base/random.h"
#include "core/model/model_options.h"

namespace graphbandit {
namespace {

// Seeds that keep a number's key and a string's key of the same name apart, and keep this
// file's keys apart from other uses of StableHash.
constexpr uint64_t kNamespaceSeed = 0x6e616d6573706163ULL;
constexpr uint64_t kValueSeed = 0x76616c7565736565ULL;

uint64_t NonZero(uint64_t key) { return key == 0 ? 1 : key; }

}  // namespace

std::string QuotedName(absl::string_view name) {
  constexpr size_t kShown = 64;
  std::string out = "\"";
  for (size_t i = 0; i < name.size() && i < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += absl::StrFormat("\\x%02x", c);
    }
  }
  if (name.size() > kShown) out += "...";
  out += '"';
  return out;
}

absl::Status ValidateNamedFeatures(absl::Span<const FeatureNamespace> namespaces,
                                   const FeatureLimits& limits, absl::string_view field) {
  if (namespaces.size() > static_cast<size_t>(limits.max_namespaces)) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: %d namespaces; at most %d", field,
                                                      namespaces.size(), limits.max_namespaces));
  }
  absl::flat_hash_set<absl::string_view> namespace_names;
  int64_t values = 0;
  for (size_t n = 0; n < namespaces.size(); ++n) {
    const FeatureNamespace& ns = namespaces[n];
    const std::string at = absl::StrFormat("%s[%d] (%s)", field, n, QuotedName(ns.name));
    if (ns.name.size() > static_cast<size_t>(limits.max_name_bytes)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: namespace name of %d bytes; at most %d", at, ns.name.size(), limits.max_name_bytes));
    }
    if (!namespace_names.insert(ns.name).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: namespace %s appears twice", at, QuotedName(ns.name)));
    }
    absl::flat_hash_set<absl::string_view> feature_names;
    for (size_t f = 0; f < ns.features.size(); ++f) {
      const NamedFeature& feature = ns.features[f];
      const std::string where = FeatureFieldPath(field, n, ns.name, f, feature.name);
      if (feature.name.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("%s: empty feature name", where));
      }
      if (feature.name.size() > static_cast<size_t>(limits.max_name_bytes)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: feature name of %d bytes; at most %d", where, feature.name.size(),
                            limits.max_name_bytes));
      }
      if (!feature_names.insert(feature.name).second) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s: feature %s appears twice in namespace %s", where,
                            QuotedName(feature.name), QuotedName(ns.name)));
      }
      const FeatureValue& value = feature.value;
      switch (value.type) {
        case FeatureValue::Type::kNumber:
          if (!std::isfinite(value.number) || std::abs(value.number) > kMaxFeatureMagnitude) {
            return absl::InvalidArgumentError(
                absl::StrFormat("%s: the number %g is not finite or exceeds %g in magnitude", where,
                                value.number, kMaxFeatureMagnitude));
          }
          ++values;
          break;
        case FeatureValue::Type::kString:
          if (value.text.size() > static_cast<size_t>(limits.max_value_bytes)) {
            return absl::InvalidArgumentError(
                absl::StrFormat("%s: a string of %d bytes; at most %d", where, value.text.size(),
                                limits.max_value_bytes));
          }
          ++values;
          break;
        case FeatureValue::Type::kStrings:
          for (size_t i = 0; i < value.texts.size(); ++i) {
            if (value.texts[i].size() > static_cast<size_t>(limits.max_value_bytes)) {
              return absl::InvalidArgumentError(
                  absl::StrFormat("%s: string %d of the list has %d bytes; at most %d", where, i,
                                  value.texts[i].size(), limits.max_value_bytes));
            }
          }
          values += std::max<int64_t>(1, static_cast<int64_t>(value.texts.size()));
          break;
      }
      if (values > limits.max_values) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s: past %d feature values in all (a list counts its length, an empty one 1)", where,
            limits.max_values));
      }
    }
  }
  return absl::OkStatus();
}

std::string FeatureFieldPath(absl::string_view field, size_t n, absl::string_view name_space,
                             size_t f, absl::string_view name) {
  return absl::StrFormat("%s[%d] (%s).features[%d] (%s)", field, n, QuotedName(name_space), f,
                         QuotedName(name));
}

uint64_t NumberKey(absl::string_view name_space, absl::string_view name) {
  return NonZero(StableHash(name, StableHash(name_space, kNamespaceSeed)));
}

uint64_t StringKey(absl::string_view name_space, absl::string_view name, absl::string_view value) {
  return NonZero(StableHash(value, NumberKey(name_space, name) ^ kValueSeed));
}

NumericScale FreezeScale(int64_t count, double mean, double variance) {
  NumericScale scale;
  scale.count = count;
  scale.center = mean;
  const double stddev = std::sqrt(std::max(variance, 0.0));
  // No spread yet (one value, or all alike): the magnitude stands in, so that the scaled
  // values stay of order one.
  scale.spread =
      stddev > 1e-9 * std::max(1.0, std::abs(mean)) ? stddev : std::max(1.0, std::abs(mean));
  return scale;
}

bool ScaleMoved(const NumericScale& frozen, const NumericScale& now) {
  return std::abs(now.center - frozen.center) > 0.1 * frozen.spread ||
         now.spread > 1.25 * frozen.spread || now.spread < 0.8 * frozen.spread;
}

void AddNamedFeatures(absl::Span<const FeatureNamespace> namespaces, absl::Span<double> out,
                      const NumericScaling* scaling) {
  if (out.empty() || out.size() > static_cast<size_t>(kMaxFeatureSlots)) return;
  const int slots = static_cast<int>(out.size());
  std::vector<absl::string_view> distinct;
  for (const FeatureNamespace& ns : namespaces) {
    for (const NamedFeature& feature : ns.features) {
      const FeatureValue& value = feature.value;
      switch (value.type) {
        case FeatureValue::Type::kNumber: {
          const uint64_t key = NumberKey(ns.name, feature.name);
          double x = value.number;
          if (scaling != nullptr) {
            if (auto it = scaling->find(key); it != scaling->end()) x = it->second.Apply(x);
          }
          out[SlotOf(key, slots)] += x;
          break;
        }
        case FeatureValue::Type::kString:
          out[SlotOf(StringKey(ns.name, feature.name, value.text), slots)] += 1.0;
          break;
        case FeatureValue::Type::kStrings:
          // A list is a set: a value listed twice is still one code.
          distinct.assign(value.texts.begin(), value.texts.end());
          std::sort(distinct.begin(), distinct.end());
          distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
          for (absl::string_view text : distinct) {
            out[SlotOf(StringKey(ns.name, feature.name, text), slots)] += 1.0;
          }
          break;
      }
    }
  }
  for (double& x : out) x = std::clamp(x, -kMaxFeatureMagnitude, kMaxFeatureMagnitude);
}

}  // namespace graphbandit
