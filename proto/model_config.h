// The mapping between a model's configuration (graphbandit.v1.ModelConfig, what operators
// write) and core's ModelOptions, defaults included: the one way both the server and the
// simulator turn a model configuration into options (and so, through
// core/learner/learner_factory.h, into a learner).
#ifndef GRAPHBANDIT_PROTO_MODEL_CONFIG_H_
#define GRAPHBANDIT_PROTO_MODEL_CONFIG_H_

#include "absl/status/statusor.h"
#include "core/model/model_options.h"
#include "graphbandit/v1/config.pb.h"

namespace graphbandit::config {

// ModelConfig -> ModelOptions, filling in defaults for unset (zero) fields and validating.
absl::StatusOr<ModelOptions> ToModelOptions(const v1::ModelConfig& config);
// The effective configuration, every field set. `options` must be a servable kind
// (ModelOptions::servable()).
v1::ModelConfig ToModelConfig(const ModelOptions& options);

}  // namespace graphbandit::config

#endif  // GRAPHBANDIT_PROTO_MODEL_CONFIG_H_
