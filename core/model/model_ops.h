// The state-changing operations of a model. Each is one record in the model's append-only log
// (core/storage); replaying the records in order rebuilds the model exactly, because every
// operation is applied by a single writer in log order and the learner's only randomness (the
// KORS coin flips) comes from a seeded stream.
#ifndef GRAPHBANDIT_CORE_MODEL_MODEL_OPS_H_
#define GRAPHBANDIT_CORE_MODEL_MODEL_OPS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/features/named_features.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/ledger/decision.h"
#include "core/policy/apprentice.h"
#include "core/storage/coding.h"

namespace graphbandit {

// Fixes the feature dimensions of a model whose configuration left them open. The dimensions
// count every input: the dense values and, after them, the hashed inputs of named features
// (`context_slots` of the context's, `arm_slots` of each candidate's; core/features).
struct FixDimensionsOp {
  int32_t context_dim = 0;
  int32_t arm_dim = 0;
  int32_t context_slots = 0;
  int32_t arm_slots = 0;
};

struct AddUsersOp {
  std::vector<std::string> users;
};

struct EdgeEdit {
  std::string user_a;
  std::string user_b;
  double weight = 1.0;
};

// Adds edges or replaces their weights.
struct SetEdgesOp {
  std::vector<EdgeEdit> edges;
};

struct RemoveEdgesOp {
  std::vector<std::pair<std::string, std::string>> pairs;
};

// One learned reward: the user, the raw (unscaled) context and arm features, the reward, and
// for auditing the decision it came from.
struct ObserveOp {
  std::string event_id;
  std::string arm_id;
  std::string user;
  std::vector<double> context;
  std::vector<double> features;
  double reward = 0.0;
  // Policies that learn from whole decisions: the decision's candidates and which of them
  // (index) this reward is for. Null / -1 otherwise.
  std::shared_ptr<const DecisionCandidates> candidates;
  int32_t chosen = -1;
  // The decision's evaluation record (Decision::evaluation; often null): learning this reward
  // adds it to the model's off-policy estimates (core/policy/evaluation.h).
  std::shared_ptr<const EvaluationRecord> evaluation;
};

// A decision entered the ledger (SelectArm). Carries everything a retry must return and a
// reward will need.
struct DecideOp {
  std::string event_id;
  uint64_t fingerprint = 0;
  int64_t created_micros = 0;  // Unix time
  std::string user;
  std::vector<double> context;
  struct Arm {
    std::string arm_id;
    std::vector<double> features;
    int32_t candidate_index = 0;
    double mean = 0.0, stddev = 0.0, score = 0.0;
    bool has_probability = false;
    double probability = 0.0;
  };
  std::vector<Arm> arms;
  uint64_t model_version = 0;
  std::shared_ptr<const DecisionCandidates> candidates;  // see DecisionCandidates
  bool deferred = false;                                 // DecisionRequest.defer_activation
  int32_t baseline = -1;  // DecisionRequest.baseline (a candidate index), -1 for none
  bool explored = false;  // drawn by the evaluation share (Decision::explored)
  std::shared_ptr<const EvaluationRecord> evaluation;  // Decision::evaluation
  // Every candidate, with the evaluation record (Decision::logged_candidates); not kept by the
  // ledger, so a snapshot's ledger entries and a retry's record lack it.
  std::shared_ptr<const LoggedCandidates> logged;
};

// A reward report accepted for arm `arm` of a decision. With the FIRST rule it is learned at
// once (`learn` holds the observation); with SUM / MAX / LAST it only updates the aggregate.
struct RewardOp {
  std::string event_id;
  int32_t arm = 0;
  double reward = 0.0;
  std::vector<ObserveOp> learn;  // empty or one
};

// A decision left the ledger; `learn` holds what it teaches now (aggregates of SUM / MAX / LAST,
// and default rewards of arms without a report).
struct CloseOp {
  std::string event_id;
  uint8_t how = 0;            // ClosedAs
  int64_t closed_micros = 0;  // Unix time
  std::vector<ObserveOp> learn;
};

// A deferred decision was activated: `learn` holds the rewards it held (FIRST: each reported
// arm's; the other rules learn at the close, as without deferral).
struct ActivateOp {
  std::string event_id;
  std::vector<ObserveOp> learn;
};

// New hyper-parameters for the model's kernel, fitted beside the serving state (core/fit/refit.h)
// and applied by the writer at this point of the log; replay applies the same values at the
// same point, so recovery reproduces the fit without running it again.
struct HyperparametersOp {
  enum class Reason : uint8_t {
    kFit = 0,             // a fit on the helper thread
    kDictionaryFull = 1,  // the same values, a coarser KORS mu (core/fit/refit.h)
  };
  Reason reason = Reason::kFit;
  Hyperparameters values;
  double kors_mu_factor = 1.0;
  int64_t fitted_at = 0;        // rewards learned when the fit started (schedules the next one)
  int32_t points = 0;           // observations the fit used
  double log_likelihood = 0.0;  // per point, at the fitted values
};

// Learns the rewards waiting in a batch (core/model/learned_state.h, "Batches"): the staged
// observations whose ordinal (counted from the model's first staged observation) is below
// `through` (one ObserveBatch per kMaxLearnBatchLimit of them; the writer logs at most
// max_learn_batch per LearnOp). Logged by the writer, which decides when a batch ends; replay
// learns the same batches at the same points, so that batched learning stays bit-identical.
struct LearnOp {
  int64_t through = 0;
};

// New frozen scales of named numeric features (core/features/named_features.h, NumericScale):
// decisions after it is applied encode those numbers with them. What was learned before keeps
// the inputs it was logged with, so replay needs nothing else to be bit-identical; the scales
// are logged (and kept in snapshots) so that every replica and every restart encodes the same
// value alike.
struct FeatureScalingOp {
  struct Entry {
    bool context = true;  // else the candidates'
    uint64_t key = 0;     // NumberKey
    NumericScale scale;
  };
  std::vector<Entry> entries;
};

// A switch between apprentice and serving (core/policy/apprentice.h): an admin call
// (AdminService.SetServingMode) or, once, a new model that its configuration starts as an
// apprentice. A switch to apprentice carries the rule it is judged by. A switch the lift decides
// is not logged: replaying the rewards repeats it at the same reward.
struct ServingModeOp {
  bool apprentice = false;
  ServingSwitch reason = ServingSwitch::kAdmin;  // kAdmin or kStart
  ApprenticeRule rule;
};

using ModelOp = std::variant<FixDimensionsOp, AddUsersOp, SetEdgesOp, RemoveEdgesOp, ObserveOp,
                             DecideOp, RewardOp, CloseOp, HyperparametersOp, LearnOp,
                             FeatureScalingOp, ActivateOp, ServingModeOp>;

// Log record types (never reuse a number; 0 is invalid in the log format).
enum class OpType : uint8_t {
  kFixDimensions = 1,
  kAddUsers = 2,
  kSetEdges = 3,
  kRemoveEdges = 4,
  kObserve = 5,
  kDecide = 6,
  kReward = 7,
  kClose = 8,
  kHyperparameters = 9,
  kLearn = 10,
  kFeatureScaling = 11,
  kActivate = 12,
  kServingMode = 13,
};

// The observations an operation teaches the learner (rewards learned now), or empty.
std::vector<const ObserveOp*> ObservationsOf(const ModelOp& op);

OpType TypeOf(const ModelOp& op);
// A decision's candidates as logged (with decisions, rewards and in snapshots of the ledger).
void PutCandidates(storage::Encoder* out, const DecisionCandidates& candidates);
bool GetCandidates(storage::Decoder* in, std::shared_ptr<const DecisionCandidates>* candidates);
std::string EncodeOp(const ModelOp& op);
// Fails with DataLoss on a malformed payload or an unknown type.
absl::StatusOr<ModelOp> DecodeOp(uint8_t type, absl::string_view payload);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_MODEL_OPS_H_
