#include "server/personalizer_features.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit::server {
namespace {

using google::protobuf::ListValue;
using google::protobuf::Struct;
using google::protobuf::Value;

// A JSON object's keys in byte order (protobuf's map has none).
std::vector<const google::protobuf::MapPair<std::string, Value>*> SortedEntries(const Struct& s) {
  std::vector<const google::protobuf::MapPair<std::string, Value>*> entries;
  entries.reserve(s.fields().size());
  for (const auto& entry : s.fields()) entries.push_back(&entry);
  std::sort(entries.begin(), entries.end(),
            [](const auto* a, const auto* b) { return a->first < b->first; });
  return entries;
}

class Flattener {
 public:
  explicit Flattener(FlattenedFeatures* out) : out_(out) {}

  // The entries of one object of namespace `ns`, their names prefixed by `prefix` (with '.').
  absl::Status AddObject(absl::string_view ns, const std::string& prefix, const Struct& object,
                         const std::string& path) {
    for (const auto* entry : SortedEntries(object)) {
      const std::string& key = entry->first;
      if (key.empty() || key[0] == '_') continue;
      const std::string name = prefix.empty() ? key : absl::StrCat(prefix, ".", key);
      if (absl::Status status = AddValue(ns, name, entry->second, absl::StrCat(path, ".", key));
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  absl::Status AddValue(absl::string_view ns, const std::string& name, const Value& value,
                        const std::string& path) {
    switch (value.kind_case()) {
      case Value::kNullValue:
      case Value::KIND_NOT_SET:
        return absl::OkStatus();
      case Value::kBoolValue:
        if (!value.bool_value()) return absl::OkStatus();
        return Add(ns, name, FeatureValue::Number(1.0), path);
      case Value::kNumberValue:
        return Add(ns, name, FeatureValue::Number(value.number_value()), path);
      case Value::kStringValue:
        return Add(ns, name, FeatureValue::String(value.string_value()), path);
      case Value::kStructValue:
        return AddObject(ns, name, value.struct_value(), path);
      case Value::kListValue:
        return AddList(ns, name, value.list_value(), path);
    }
    return absl::OkStatus();
  }

  absl::Status AddList(absl::string_view ns, const std::string& name, const ListValue& list,
                       const std::string& path) {
    if (list.values_size() == 0) return absl::OkStatus();
    const Value::KindCase kind = list.values(0).kind_case();
    for (int i = 0; i < list.values_size(); ++i) {
      const Value::KindCase k = list.values(i).kind_case();
      if ((k != Value::kStringValue && k != Value::kNumberValue) || k != kind) {
        return absl::InvalidArgumentError(
            absl::StrFormat("%s[%d]: a list must hold only strings or only numbers", path, i));
      }
    }
    if (kind == Value::kStringValue) {
      std::vector<absl::string_view> texts;
      texts.reserve(static_cast<size_t>(list.values_size()));
      for (const Value& v : list.values()) texts.push_back(v.string_value());
      return Add(ns, name, FeatureValue::Strings(std::move(texts)), path);
    }
    for (int i = 0; i < list.values_size(); ++i) {
      if (absl::Status status = Add(ns, absl::StrFormat("%s[%d]", name, i),
                                    FeatureValue::Number(list.values(i).number_value()),
                                    absl::StrFormat("%s[%d]", path, i));
          !status.ok()) {
        return status;
      }
    }
    return absl::OkStatus();
  }

  void Finish() {
    out_->namespaces.clear();
    for (auto& [ns, features] : by_namespace_) {
      FeatureNamespace space;
      space.name = *ns;
      for (auto& [name, value] : features) {
        space.features.push_back(NamedFeature{*name, std::move(value)});
      }
      out_->namespaces.push_back(std::move(space));
    }
  }

 private:
  // Keeps `s` alive with the result and returns a view of it.
  const std::string* Keep(absl::string_view s) {
    out_->names.emplace_back(s);
    return &out_->names.back();
  }

  absl::Status Add(absl::string_view ns, const std::string& name, FeatureValue value,
                   const std::string& path) {
    auto space = by_namespace_.find(ns);
    if (space == by_namespace_.end()) {
      space = by_namespace_.emplace(Keep(ns), Features()).first;
    }
    if (space->second.count(name) != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: feature \"%s\" of namespace \"%s\" is given twice", path, name, ns));
    }
    space->second.emplace(Keep(name), std::move(value));
    return absl::OkStatus();
  }

  // Names compared by their text; the pointers are into out_->names.
  struct ByText {
    using is_transparent = void;
    static absl::string_view View(const std::string* s) { return *s; }
    static absl::string_view View(absl::string_view s) { return s; }
    static absl::string_view View(const std::string& s) { return s; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return View(a) < View(b);
    }
  };
  using Features = std::map<const std::string*, FeatureValue, ByText>;

  FlattenedFeatures* out_;
  std::map<const std::string*, Features, ByText> by_namespace_;
};

}  // namespace

absl::Status FlattenPersonalizerFeatures(
    const google::protobuf::RepeatedPtrField<google::protobuf::Struct>& objects,
    absl::string_view field, FlattenedFeatures* out) {
  out->names.clear();
  out->namespaces.clear();
  Flattener flattener(out);
  for (int i = 0; i < objects.size(); ++i) {
    const std::string path = absl::StrFormat("%s[%d]", field, i);
    for (const auto* entry : SortedEntries(objects.Get(i))) {
      const std::string& key = entry->first;
      if (key.empty() || key[0] == '_') continue;
      const Value& value = entry->second;
      const std::string at = absl::StrCat(path, ".", key);
      absl::Status status = value.kind_case() == Value::kStructValue
                                ? flattener.AddObject(key, "", value.struct_value(), at)
                                : flattener.AddValue("", key, value, at);
      if (!status.ok()) return status;
    }
  }
  flattener.Finish();
  return absl::OkStatus();
}

}  // namespace graphbandit::server
