// The engine hosts every model of a server and implements the service's semantics over them:
// event ids, retried decisions, the join of rewards to decisions, and graph administration.
// The gRPC layer (server/) only converts messages and statuses; tests and tools can drive the
// whole service in-process through this class.
#ifndef GRAPHBANDIT_CORE_MODEL_ENGINE_H_
#define GRAPHBANDIT_CORE_MODEL_ENGINE_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/sync.h"
#include "core/ledger/decision.h"
#include "core/model/model.h"
#include "core/model/model_options.h"
#include "core/model/shadow_feed.h"

namespace graphbandit {

struct EngineOptions {
  std::string state_dir;  // empty: nothing is persisted
  std::vector<ModelOptions> models;
  std::string default_model = "default";
  Durability durability;
  // Run a thread that closes decisions whose reward window ended. Tests that want to drive
  // expiry themselves (ExpireDue with a chosen clock) turn it off.
  bool run_sweeper = true;
  // Cluster mode (Replication in model.h): this node's id (letters, digits, '.', '_', '-'; at
  // most 64 bytes), which also prefixes the event ids it generates, and the shared log of each
  // model. Unset: every model is this node's alone, with its own log.
  std::string node_id;
  std::function<absl::StatusOr<std::shared_ptr<SharedLog>>(const ModelOptions&)> shared_log;
  absl::Duration expiry_grace = absl::Seconds(2);
};

class Engine {
 public:
  // Opens every model (replaying their logs). A model named options.default_model is created
  // with default options when the list has none.
  static absl::StatusOr<std::unique_ptr<Engine>> Open(EngineOptions options);
  ~Engine();

  // `now` is the wall-clock time the call arrived; `deadline` the caller's deadline (a reward
  // waits for durability until then and answers DEADLINE_EXCEEDED after it).
  absl::StatusOr<Decision> SelectArm(const DecisionRequest& request,
                                     absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<RewardResult> ReportReward(const RewardRequest& request,
                                            absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<Decision> SelectArmAt(const DecisionRequest& request, absl::Time now,
                                       absl::Time deadline);
  absl::StatusOr<RewardResult> ReportRewardAt(const RewardRequest& request, absl::Time now,
                                              absl::Time deadline);
  // ReportReward without blocking (Model::TryRewardWithoutWaiting): true when `*done` (moved
  // from) has been or will be called with the answer; false, having done nothing, when the
  // reward has to wait (for room, or for the cluster's log): the caller then calls
  // ReportReward on a thread that may wait.
  bool TryReportRewardWithoutWaiting(const RewardRequest& request, absl::Time deadline,
                                     Model::RewardCallback* done);
  // Activates a deferred decision of model `model_name` (empty: the default model);
  // Model::Activate.
  absl::StatusOr<ActivationResult> Activate(absl::string_view model_name,
                                            const std::string& event_id,
                                            absl::Time deadline = absl::InfiniteFuture());
  absl::StatusOr<ActivationResult> ActivateAt(absl::string_view model_name,
                                              const std::string& event_id, absl::Time now,
                                              absl::Time deadline);
  // Closes, in every model, the decisions whose window ended by `now`; returns how many.
  int ExpireDue(absl::Time now);

  // NotFound for an unknown name; the empty name is the default model.
  absl::StatusOr<Model*> FindModel(absl::string_view name) const;
  std::vector<std::string> ModelNames() const;
  const std::string& default_model() const { return default_model_; }
  // The challengers of model `leader` (ModelOptions::shadow_of; core/model/shadow_feed.h).
  std::vector<const ShadowFeed*> Challengers(absl::string_view leader) const;
  // Waits until every challenger has handled what its leader was sent so far (tests).
  void DrainChallengers();

  // Stops the sweeper; every model applies what is logged, writes a final snapshot, syncs and
  // closes its log, by `deadline` (Model::Shutdown). Idempotent. False if some model's writer
  // (or a cancelled fit) was still busy at the deadline: the process must then exit without
  // destroying the engine.
  bool Shutdown(absl::Time deadline = absl::InfiniteFuture());
  // While RPCs drain: waits for model versions end (Model::BeginShutdown).
  void BeginShutdown();

 private:
  Engine() = default;
  void SweeperLoop(absl::Duration period);
  // Finds the model whose event a reward report is, checking the event id it routes by (the
  // owner checks the rest): null when no model knows the event (several models, none with it:
  // UNKNOWN_EVENT without a model to ask, once the report itself is found well-formed).
  absl::StatusOr<Model*> RewardOwner(const RewardRequest& request, absl::Time now,
                                     absl::Time deadline);
  // The challengers of `leader` (empty for most models).
  std::vector<std::shared_ptr<ShadowFeed>> FeedsOf(const Model& leader) const;
  // FAILED_PRECONDITION for a challenger, which is never sent requests itself.
  static absl::Status RefuseChallenger(const Model& model, absl::string_view call);

  std::string default_model_;
  std::string event_id_prefix_;  // cluster mode: the node id and '-'
  std::map<std::string, std::unique_ptr<Model>, std::less<>> models_;
  // One feed per challenger, and the feeds of each leader.
  // (Shared: a leader's reward callback holds its feeds until it runs.)
  std::vector<std::shared_ptr<ShadowFeed>> feeds_;
  std::map<std::string, std::vector<std::shared_ptr<ShadowFeed>>, std::less<>> challengers_;
  bool stopped_cleanly_ = true;           // written once, in Shutdown's call_once
  std::vector<std::string> busy_models_;  // whose writer outlived the shutdown deadline

  Mutex sweeper_mu_;
  CondVar sweeper_cv_;
  bool sweeper_stop_ ABSL_GUARDED_BY(sweeper_mu_) = false;
  std::thread sweeper_;
  std::once_flag shutdown_once_;
};

// Fingerprint of a decision request, to tell a retry from a reused event id.
uint64_t RequestFingerprint(const DecisionRequest& request);
// A fresh random event id: 32 hexadecimal characters.
std::string NewEventId();

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_ENGINE_H_
