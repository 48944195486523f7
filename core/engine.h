// The engine hosts every model of a server and implements the service's semantics over them:
// event ids, retried decisions, the join of rewards to decisions, and graph administration.
// The gRPC layer (server/) only converts messages and statuses; tests and tools can drive the
// whole service in-process through this class.
#ifndef GRAPHBANDIT_CORE_ENGINE_H_
#define GRAPHBANDIT_CORE_ENGINE_H_

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/decision.h"
#include "core/model.h"
#include "core/model_options.h"

namespace graphbandit {

struct EngineOptions {
  std::string state_dir;  // empty: nothing is persisted
  std::vector<ModelOptions> models;
  std::string default_model = "default";
};

enum class RewardOutcome { kAccepted, kDuplicate, kUnknownEvent };
absl::string_view RewardOutcomeName(RewardOutcome outcome);

struct RewardRequest {
  std::string event_id;
  std::optional<double> reward;                             // single-arm decisions
  std::vector<std::pair<std::string, double>> arm_rewards;  // (arm id, reward)
  std::string model;                                        // optional
};

struct RewardResult {
  RewardOutcome outcome = RewardOutcome::kUnknownEvent;
  std::vector<std::pair<std::string, RewardOutcome>> arm_outcomes;
  std::string model;
};

class Engine {
 public:
  // Opens every model (replaying their logs). A model named options.default_model is created
  // with default options when the list has none.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(EngineOptions options);
  ~Engine();

  absl::StatusOr<Decision> SelectArm(const DecisionRequest& request);
  absl::StatusOr<RewardResult> ReportReward(const RewardRequest& request);

  // NotFound for an unknown name; the empty name is the default model.
  absl::StatusOr<Model*> FindModel(absl::string_view name) const;
  std::vector<std::string> ModelNames() const;
  const std::string& default_model() const { return default_model_; }

  // Stops every model's writer after it has applied what is queued, and closes the logs.
  void Shutdown();

 private:
  Engine() = default;

  std::string default_model_;
  std::map<std::string, std::unique_ptr<Model>, std::less<>> models_;
};

// Fingerprint of a decision request, to tell a retry from a reused event id.
uint64_t RequestFingerprint(const DecisionRequest& request);
// A fresh random event id: 32 hexadecimal characters.
std::string NewEventId();

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_ENGINE_H_
