#include "core/model/named_inputs.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/types/span.h"

namespace graphbandit {

namespace {

// Namespaces without features carry nothing: they do not make a request "named".
bool AnyFeature(absl::Span<const FeatureNamespace> namespaces) {
  for (const FeatureNamespace& ns : namespaces) {
    if (!ns.features.empty()) return true;
  }
  return false;
}

}  // namespace

bool HasNamedFeatures(const DecisionRequest& request) {
  if (AnyFeature(request.context_features)) return true;
  for (const CandidateRef& candidate : request.candidates) {
    if (AnyFeature(candidate.named_features)) return true;
  }
  return false;
}

FixDimensionsOp ConfiguredDimensions(const ModelOptions& options) {
  const ModelOptions::FeatureOptions& f = options.features;
  const int context_slots = f.configured ? f.context_slots : 0;
  const int arm_slots = f.configured ? f.arm_slots : 0;
  return FixDimensionsOp{options.context_dim + context_slots, options.arm_dim + arm_slots,
                         context_slots, arm_slots};
}

void SlotsForFirstRequest(const DecisionRequest& request, const ModelOptions& options,
                          int* context_slots, int* arm_slots) {
  const bool named = options.features.configured || request.named_form || HasNamedFeatures(request);
  *context_slots = named ? options.features.context_slots : 0;
  *arm_slots = named ? options.features.arm_slots : 0;
}

namespace {

std::string CandidateField(const DecisionRequest& request, size_t i) {
  return absl::StrFormat("candidates[%d] (%s)", i, QuoteId(request.candidates[i].id));
}

absl::Status NoSlots(const ModelOptions& options, absl::string_view field, absl::string_view side) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: model \"%s\" takes no named %s features: its features.%s_slots is 0, or its "
      "dimensions were fixed without named features (by its configuration or by its first "
      "request); configure a features block",
      field, options.name, side, side == "context" ? "context" : "arm"));
}

}  // namespace

absl::Status EncodeNamedFeatures(const DecisionRequest& request, const Dimensions& dims,
                                 const ModelOptions& options, FeatureCatalogs catalogs,
                                 EncodedRequest* out) {
  const FeatureLimits& limits = options.features.limits;
  const int n = static_cast<int>(request.candidates.size());
  // Named features: present only where the model has slots, and well formed.
  if (!request.context_features.empty()) {
    if (dims.context_slots == 0) return NoSlots(options, "context_features", "context");
    if (absl::Status s =
            ValidateNamedFeatures(request.context_features, limits, "context_features");
        !s.ok()) {
      return s;
    }
  }
  std::vector<std::string> fields(n);
  for (int i = 0; i < n; ++i) {
    const CandidateRef& candidate = request.candidates[i];
    if (candidate.named_features.empty()) continue;  // no field name formatted for it
    fields[i] = absl::StrFormat("candidates[%d].named_features", i);
    if (dims.arm_slots == 0) {
      return NoSlots(options, CandidateField(request, i) + ".named_features", "arm");
    }
    if (absl::Status s = ValidateNamedFeatures(candidate.named_features, limits, fields[i]);
        !s.ok()) {
      return s;
    }
  }
  // Dense values: as many as the model's dense dimensions (or, before they are fixed, as the
  // first candidate's).
  const int dense_context = static_cast<int>(request.context.size());
  if (dims.fixed && dense_context != dims.dense_context_dim()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "context has %d values; model \"%s\" expects %d (its named context features go in "
        "context_features)",
        dense_context, options.name, dims.dense_context_dim()));
  }
  const int dense_arm = dims.fixed ? dims.dense_arm_dim()
                        : n > 0    ? static_cast<int>(request.candidates[0].features.size())
                                   : 0;
  for (int i = 0; i < n; ++i) {
    const int got = static_cast<int>(request.candidates[i].features.size());
    if (got != dense_arm) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s has %d features; %s %d (its named features go in named_features)",
                          CandidateField(request, i), got,
                          dims.fixed ? absl::StrFormat("model \"%s\" expects", options.name)
                                     : std::string("candidates[0] has"),
                          dense_arm));
    }
  }
  if (dense_arm + dims.arm_slots == 0) {
    return absl::InvalidArgumentError(
        "candidates[0] has no features; every candidate needs at least one");
  }
  // The schema: kinds as declared or first seen, and declared_only.
  if (catalogs.context != nullptr && !request.context_features.empty()) {
    if (absl::Status s = catalogs.context->Check(request.context_features, "context_features",
                                                 options.features.declared_only);
        !s.ok()) {
      return s;
    }
  }
  if (catalogs.arm != nullptr) {
    std::vector<FeatureCatalog::Source> sources;
    for (int i = 0; i < n; ++i) {
      if (request.candidates[i].named_features.empty()) continue;
      sources.push_back(FeatureCatalog::Source{request.candidates[i].named_features, fields[i]});
    }
    if (!sources.empty()) {
      if (absl::Status s = catalogs.arm->Check(sources, options.features.declared_only); !s.ok()) {
        return s;
      }
    }
  }
  // Accepted: encoded after the dense values.
  out->context.assign(request.context.begin(), request.context.end());
  out->context.resize(dense_context + dims.context_slots, 0.0);
  if (dims.context_slots > 0) {
    AddNamedFeatures(request.context_features, absl::MakeSpan(out->context).subspan(dense_context),
                     catalogs.context_scaling);
  }
  out->arms.resize(n);
  for (int i = 0; i < n; ++i) {
    const CandidateRef& candidate = request.candidates[i];
    std::vector<double>& arm = out->arms[i];
    arm.assign(candidate.features.begin(), candidate.features.end());
    arm.resize(dense_arm + dims.arm_slots, 0.0);
    if (dims.arm_slots > 0) {
      AddNamedFeatures(candidate.named_features, absl::MakeSpan(arm).subspan(dense_arm),
                       catalogs.arm_scaling);
    }
  }
  out->request = request;
  out->request.context = out->context;
  out->request.context_features = {};
  for (int i = 0; i < n; ++i) {
    out->request.candidates[i].features = out->arms[i];
    out->request.candidates[i].named_features = {};
  }
  return absl::OkStatus();
}

void RecordNamedFeatures(const DecisionRequest& request, FeatureCatalog* context,
                         FeatureCatalog* arm) {
  if (context != nullptr && !request.context_features.empty()) {
    context->Record(request.context_features);
  }
  if (arm != nullptr) {
    for (const CandidateRef& candidate : request.candidates) {
      if (!candidate.named_features.empty()) arm->Record(candidate.named_features);
    }
  }
}

void CollectScaleFreezes(absl::Span<const FeatureNamespace> namespaces, bool context,
                         const FeatureCatalog& catalog, const NumericScaling& frozen,
                         absl::flat_hash_map<uint64_t, int64_t>* considered,
                         std::vector<FeatureScalingOp::Entry>* out) {
  for (const FeatureNamespace& ns : namespaces) {
    auto listed = catalog.namespaces().find(ns.name);
    if (listed == catalog.namespaces().end()) continue;
    for (const NamedFeature& feature : ns.features) {
      if (feature.value.type != FeatureValue::Type::kNumber) continue;
      auto found = listed->second.find(feature.name);
      if (found == listed->second.end() || found->second.kind != FeatureKind::kNumeric) continue;
      const RunningSummary& numbers = found->second.numbers;
      if (numbers.count == 0) continue;
      const uint64_t key = NumberKey(ns.name, feature.name);
      auto current = frozen.find(key);
      int64_t& last = (*considered)[key];
      const int64_t since =
          std::max(last, current != frozen.end() ? current->second.count : int64_t{0});
      if (numbers.count / 2 < since) continue;  // not doubled yet (no overflow near 2^62)
      last = numbers.count;
      const NumericScale now = FreezeScale(numbers.count, numbers.mean, numbers.variance());
      if (current != frozen.end() && !ScaleMoved(current->second, now)) continue;
      out->push_back(FeatureScalingOp::Entry{context, key, now});
    }
  }
}

}  // namespace graphbandit
