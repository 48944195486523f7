// Named features on the submission side (core/model/named_inputs.h): the catalogs of what the
// model saw, the encoding of a request into dense input, and the logged freezes of the scales
// of numbers.
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/model/model.h"

namespace graphbandit {

FeatureCatalog* Model::CatalogLocked(bool context, int slots) {
  std::optional<FeatureCatalog>& catalog = context ? context_catalog_ : arm_catalog_;
  if (slots == 0) return nullptr;
  if (!catalog.has_value()) {
    FeatureCatalog::Options o;
    o.slots = slots;
    o.max_listed_features = options_.features.max_listed_features;
    o.max_name_bytes = options_.features.limits.max_name_bytes;
    auto created = FeatureCatalog::Create(o);
    if (!created.ok()) return nullptr;  // options validated at start: cannot happen
    for (const ModelOptions::DeclaredFeature& d : options_.features.declared) {
      if (d.context != context) continue;
      (void)created->Declare(d.name_space, d.name, d.kind);  // validated at start
    }
    catalog = *std::move(created);
  }
  return catalog->slots() == slots ? &*catalog : nullptr;
}

absl::Status Model::EncodeRequest(const DecisionRequest& request, EncodedRequest* encoded,
                                  Dimensions* slots) {
  Dimensions dims = CurrentDimensions();
  if (!dims.fixed) {
    SlotsForFirstRequest(request, options_, &dims.context_slots, &dims.arm_slots);
  }
  *slots = dims;
  if (!dims.named_features()) {
    if (!HasNamedFeatures(request)) return absl::OkStatus();
    // Refused, naming the field (no slots on either side).
    return EncodeNamedFeatures(request, dims, options_, FeatureCatalogs{}, encoded);
  }
  const std::shared_ptr<const ModelView> view = View();  // its scales encode the numbers
  MutexLock lock(&features_mu_);
  // A configured schema is checked from the first request on; a catalog learned from traffic
  // exists once a decision was recorded in it.
  const bool configured = options_.features.configured;
  FeatureCatalogs catalogs{configured
                               ? CatalogLocked(true, dims.context_slots)
                               : (context_catalog_.has_value() ? &*context_catalog_ : nullptr),
                           configured ? CatalogLocked(false, dims.arm_slots)
                                      : (arm_catalog_.has_value() ? &*arm_catalog_ : nullptr),
                           view->context_scaling.get(), view->arm_scaling.get()};
  return EncodeNamedFeatures(request, dims, options_, catalogs, encoded);
}

void Model::RecordDecided(const DecisionRequest& sent, const Dimensions& slots) {
  if (!slots.named_features()) return;
  const std::shared_ptr<const ModelView> view = View();
  FeatureScalingOp freezes;
  {
    MutexLock lock(&features_mu_);
    FeatureCatalog* context = CatalogLocked(true, slots.context_slots);
    FeatureCatalog* arm = CatalogLocked(false, slots.arm_slots);
    RecordNamedFeatures(sent, context, arm);
    if (context != nullptr) {
      CollectScaleFreezes(sent.context_features, /*context=*/true, *context, *view->context_scaling,
                          &context_scales_considered_, &freezes.entries);
    }
    if (arm != nullptr) {
      for (const CandidateRef& candidate : sent.candidates) {
        CollectScaleFreezes(candidate.named_features, /*context=*/false, *arm, *view->arm_scaling,
                            &arm_scales_considered_, &freezes.entries);
      }
    }
  }
  if (!freezes.entries.empty()) LogFeatureScaling(std::move(freezes));
}

void Model::LogFeatureScaling(FeatureScalingOp op) {
  absl::StatusOr<uint64_t> seq;
  if (replicated()) {
    seq = PublishOnly(ModelOp(std::move(op)), absl::Now() + absl::Seconds(5));
  } else {
    MutexLock ledger(&ledger_mu_);
    MutexLock lock(&queue_mu_);
    seq = AppendLocked(ModelOp(std::move(op)), nullptr, absl::InfinitePast());
  }
  // Not fatal: the numbers keep their current scales, and a later request asks again once
  // their count has doubled.
  if (!seq.ok()) {
    LogWarning(absl::StrFormat("model \"%s\": new scales of numeric features not logged: %s",
                               options_.name, seq.status().message()));
  }
}

void Model::VisitFeatureCatalogs(
    absl::FunctionRef<void(const FeatureCatalog* context, const FeatureCatalog* arm)> visit) const {
  MutexLock lock(&features_mu_);
  visit(context_catalog_.has_value() ? &*context_catalog_ : nullptr,
        arm_catalog_.has_value() ? &*arm_catalog_ : nullptr);
}

}  // namespace graphbandit
