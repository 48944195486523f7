// A decision request's named features (SelectArmRequest.context_features,
// Arm.named_features) turned into the dense input the model's kernel takes: each context and
// each candidate keeps its dense values and gets, after them, its side's hashed inputs (the
// slots; core/features/named_features.h). What is logged and learned is that dense input, so
// recovery and replicas replay it as they replay dense requests.
#ifndef GRAPHBANDIT_CORE_MODEL_NAMED_INPUTS_H_
#define GRAPHBANDIT_CORE_MODEL_NAMED_INPUTS_H_

#include <vector>

#include "absl/status/status.h"
#include "core/features/feature_catalog.h"
#include "core/ledger/decision.h"
#include "core/model/model_options.h"
#include "core/model/request_validation.h"

namespace graphbandit {

// Whether the context or some candidate carries named features.
bool HasNamedFeatures(const DecisionRequest& request);

// The dimensions a model's configuration fixes at creation (dense values plus slots), for a
// model with arm_dim > 0 or a features block.
FixDimensionsOp ConfiguredDimensions(const ModelOptions& options);

// The named-feature inputs a model whose dimensions are not fixed yet gets from this request:
// the configured (or default) counts when it carries named features, else none.
void SlotsForFirstRequest(const DecisionRequest& request, const ModelOptions& options,
                          int* context_slots, int* arm_slots);

// A request with its dense input built: `request` views `context` and `arms`.
struct EncodedRequest {
  std::vector<double> context;
  std::vector<std::vector<double>> arms;
  DecisionRequest request;
};

// What a model knows of its named features, per side: the catalog of what it saw and the
// schema it enforces (null for a side without slots), and the frozen scales of numbers (null:
// numbers as sent).
struct FeatureCatalogs {
  const FeatureCatalog* context = nullptr;
  const FeatureCatalog* arm = nullptr;
  const NumericScaling* context_scaling = nullptr;
  const NumericScaling* arm_scaling = nullptr;
};

// Checks the request's named features (limits, kinds against the catalogs, declared_only) and
// its dense values' counts, all INVALID_ARGUMENT naming the field; then builds `out`. Records
// nothing (RecordNamedFeatures does, once the decision is made). `dims` are the model's (fixed)
// or, before they are fixed, {fixed=false, slots from SlotsForFirstRequest}. REQUIRES: the
// caller holds the catalogs' lock; the request outlives `out`.
absl::Status EncodeNamedFeatures(const DecisionRequest& request, const Dimensions& dims,
                                 const ModelOptions& options, FeatureCatalogs catalogs,
                                 EncodedRequest* out);

// Takes a decided request's named features into the catalogs (either may be null).
void RecordNamedFeatures(const DecisionRequest& request, FeatureCatalog* context,
                         FeatureCatalog* arm);

// Online scaling of numbers: the request's numeric features whose scale should be frozen
// afresh, appended to `out` (at most once per feature). A feature qualifies when the values
// the catalog summarised have at least doubled since its scale was frozen (or since a freeze
// was last considered: `considered`, by key, updated here), and the scale they give now has
// no frozen scale yet or differs materially from it (ScaleMoved). So a feature's scale is
// frozen O(log n) times over n values, often at first and rarely once it has settled.
void CollectScaleFreezes(absl::Span<const FeatureNamespace> namespaces, bool context,
                         const FeatureCatalog& catalog, const NumericScaling& frozen,
                         absl::flat_hash_map<uint64_t, int64_t>* considered,
                         std::vector<FeatureScalingOp::Entry>* out);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_NAMED_INPUTS_H_
