// The tables between the configuration's enums (config.proto) and core's, one per enum: the
// server's configuration (proto/model_config.cc) and the simulator's presets (sim/preset.proto
// uses the same enums) read them through the same rows (proto/enum_table.h).
#ifndef GRAPHBANDIT_PROTO_MODEL_ENUMS_H_
#define GRAPHBANDIT_PROTO_MODEL_ENUMS_H_

#include "core/model/model_options.h"
#include "graphbandit/v1/config.pb.h"
#include "proto/enum_table.h"

namespace graphbandit::config {

inline constexpr EnumRow<v1::Policy, PolicyKind> kPolicies[] = {
    {v1::EK_UCB, PolicyKind::kEkUcb},
    {v1::EK_TS, PolicyKind::kEkTs},
    {v1::GP_UCB, PolicyKind::kGpUcb},
    {v1::GP_TS, PolicyKind::kGpTs},
    {v1::LINUCB_PER_USER, PolicyKind::kLinUcbPerUser},
    {v1::LINUCB_POOLED, PolicyKind::kLinUcbPooled},
    {v1::GRAPH_UCB, PolicyKind::kGraphUcb},
    {v1::GOB_LIN, PolicyKind::kGobLin},
    {v1::BATCHED_NYSTROM_UCB, PolicyKind::kBatchedNystromUcb},
    {v1::SEMI_GRAPH_TS, PolicyKind::kSemiGraphTs},
    {v1::SEMI_TS, PolicyKind::kSemiTs},
    {v1::LIN_TS, PolicyKind::kLinTs},
};

inline constexpr EnumRow<v1::ConfidenceBoundConfig::Bound, ConfidenceBound> kBounds[] = {
    {v1::ConfidenceBoundConfig::TUNED, ConfidenceBound::kTuned},
    {v1::ConfidenceBoundConfig::AMM, ConfidenceBound::kAmm},
    {v1::ConfidenceBoundConfig::DMM, ConfidenceBound::kDmm},
    {v1::ConfidenceBoundConfig::AY_GP_UCB, ConfidenceBound::kAyGpUcb},
    {v1::ConfidenceBoundConfig::IGP_UCB, ConfidenceBound::kIgpUcb},
};

inline constexpr EnumRow<v1::SemiParametricConfig::PropensityRule, PropensityRule>
    kPropensityRules[] = {
        {v1::SemiParametricConfig::MULTINOMIAL, PropensityRule::kMultinomial},
        {v1::SemiParametricConfig::OWN_DRAW, PropensityRule::kOwnDraw},
};

inline constexpr EnumRow<v1::ArmKernelConfig::Type, KernelType> kArmKernels[] = {
    {v1::ArmKernelConfig::RBF, KernelType::kRbf},
    {v1::ArmKernelConfig::MATERN32, KernelType::kMatern32},
    {v1::ArmKernelConfig::MATERN52, KernelType::kMatern52},
    {v1::ArmKernelConfig::LINEAR, KernelType::kLinear},
};

inline constexpr EnumRow<v1::GraphConfig::UserKernel, UserKernelKind> kUserKernels[] = {
    {v1::GraphConfig::LAPLACIAN_INVERSE, UserKernelKind::kLaplacianInverse},
    {v1::GraphConfig::HEAT, UserKernelKind::kHeat},
    {v1::GraphConfig::SPECTRAL_RBF, UserKernelKind::kSpectralRbf},
    {v1::GraphConfig::ALL_ONES, UserKernelKind::kAllOnes},
    {v1::GraphConfig::IDENTITY, UserKernelKind::kIdentity},
};

inline constexpr EnumRow<v1::ModelConfig::ExplorationWidth, ExplorationWidth> kExplorationWidths[] =
    {
        {v1::ModelConfig::STDDEV, ExplorationWidth::kStddev},
        {v1::ModelConfig::AMM, ExplorationWidth::kAmm},
        {v1::ModelConfig::GP_UCB_THEOREM, ExplorationWidth::kGpUcbTheorem},
        {v1::ModelConfig::BAYES_UCB, ExplorationWidth::kBayesUcb},
};

inline constexpr EnumRow<v1::Aggregation, Aggregation> kAggregations[] = {
    {v1::FIRST, Aggregation::kFirst},
    {v1::SUM, Aggregation::kSum},
    {v1::MAX, Aggregation::kMax},
    {v1::LAST, Aggregation::kLast},
};

inline constexpr EnumRow<v1::FeatureKind, FeatureKind> kFeatureKinds[] = {
    {v1::NUMERIC, FeatureKind::kNumeric},
    {v1::CATEGORICAL, FeatureKind::kCategorical},
};

inline constexpr EnumRow<v1::DeclaredFeature::Side, bool> kFeatureSides[] = {
    {v1::DeclaredFeature::CONTEXT, true},
    {v1::DeclaredFeature::ARM, false},
};

}  // namespace graphbandit::config

#endif  // GRAPHBANDIT_PROTO_MODEL_ENUMS_H_
