// What a model has learned: the user graph and its kernel, the learner, the feature scaling,
// the drifting baseline, the kernel hyper-parameters in use and the bookkeeping of fits — the
// deterministic state machine that the writer (live) and recovery (replay) drive with the
// logged operations in log order. Applying the same operations to the same snapshot gives a
// bit-identical state (the learner's only randomness is a seeded stream kept in snapshots; sums
// over graph neighbours run in index order).
//
// Batches. A learner that LearnsInBatches (the EK policies) does not learn a reward when its
// record is applied: the observation is staged, and a LearnOp later in the log learns every
// staged observation before its `through` ordinal as one batch (Learner::ObserveBatch; several
// in turn of at most kMaxLearnBatchLimit each, a constant, so that replay does not depend on the
// configuration). The writer logs a LearnOp of at most max_learn_batch rewards once that many
// wait or the oldest has waited max_learn_delay (core/model/model_writer.cc), and replay learns
// the same batches at the same points of the log. Operations that change the learner otherwise
// (graph edits, hyper-parameters) learn what is staged first; snapshots keep what is staged.
//
// Not thread-safe: owned by the model's writer thread, or by recovery before it starts. Two
// things are shared: the user registry (thread-safe, read by request threads to map user ids)
// and the published ModelView (immutable).
#ifndef GRAPHBANDIT_CORE_MODEL_LEARNED_STATE_H_
#define GRAPHBANDIT_CORE_MODEL_LEARNED_STATE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/fit/hyperparameter_fit.h"
#include "core/fit/refit.h"
#include "core/graph/user_graph.h"
#include "core/graph/user_kernel.h"
#include "core/kernel/arm_kernel.h"
#include "core/learner/baseline_tracker.h"
#include "core/learner/posterior.h"
#include "core/model/learning_health.h"
#include "core/model/model_ops.h"
#include "core/model/model_options.h"
#include "core/model/model_view.h"
#include "core/model/request_validation.h"
#include "core/policy/evaluation.h"
#include "core/storage/coding.h"

namespace graphbandit {

// DATA_LOSS "malformed snapshot: <what>".
absl::Status MalformedSnapshot(absl::string_view what);

class LearnedState {
 public:
  // A state with nothing learned: the empty graph's user kernel, and the learner if the
  // configuration fixes the dimensions.
  static absl::StatusOr<std::unique_ptr<LearnedState>> Create(const ModelOptions& options);

  // Called by Apply for each user id it registers (the model releases the id's reservation).
  void set_on_user_registered(std::function<void(const std::string&)> f) {
    on_user_registered_ = std::move(f);
  }

  // Applies one logged operation. The ledger part of an operation is not here (the ledger is
  // the model's, under its lock). A failure leaves the state as it was for that operation and
  // is deterministic: replay fails the same way (a refused graph edit, a reward that cannot be
  // learned).
  absl::Status Apply(const ModelOp& op, EdgeEditResult* result);

  // The view decisions read, as of `version` (the sequence number of the last applied record).
  std::shared_ptr<ModelView> BuildView(uint64_t version) const;

  // The snapshot payload's state part, at sequence number `seq` (the ledger follows it),
  // encoded into `buffer`'s memory (its contents are dropped; see storage::Encoder).
  std::string Save(uint64_t seq, std::string buffer = {}) const;
  // Restores a fresh state (from Create) from a snapshot payload's state part, leaving `in` at
  // the ledger. DATA_LOSS for malformed bytes; FAILED_PRECONDITION when the configuration
  // contradicts the snapshot (another kernel, dimensions that do not match).
  absl::Status Load(storage::Decoder* in);

  // After recovery: the next fit waits for the rewards to grow as after a fit.
  void DeferNextFitAfterRestart();

  // ---- for the fit scheduler (core/model/fit_scheduler.h) ----
  const ModelOptions& options() const { return options_; }
  const Learner* learner() const { return learner_.get(); }
  bool refits() const { return learner_ != nullptr && learner_->SupportsRefit(); }
  const FeatureScaling& scaling() const { return scaling_; }
  const UserGraph& graph() const { return graph_; }
  const std::shared_ptr<const UserKernel>& user_kernel() const { return user_kernel_; }
  const Hyperparameters& hyperparameters() const { return hyper_; }
  double kors_mu_factor() const { return kors_mu_factor_; }
  int64_t rewards_learned() const { return rewards_learned_; }
  int64_t last_fit_rewards() const { return last_fit_rewards_; }
  int64_t fits_applied() const { return fits_applied_; }
  int64_t next_fit_at() const { return next_fit_at_; }
  void set_next_fit_at(int64_t rewards) { next_fit_at_ = rewards; }
  KernelShape CurrentShape() const;

  // ---- batches ----
  // Observations staged in all (the ordinal the next one gets), learned in batches (the ordinal
  // below which every staged observation is learned), and waiting now.
  int64_t staged_total() const { return staged_total_; }
  int64_t learned_through() const { return staged_total_ - static_cast<int64_t>(staged_.size()); }
  int64_t staged() const { return static_cast<int64_t>(staged_.size()); }

  // ---- for the model ----
  const std::shared_ptr<UserRegistry>& registry() const { return registry_; }
  Dimensions dimensions() const;
  int64_t history_size() const { return learner_ != nullptr ? learner_->history_size() : 0; }

 private:
  explicit LearnedState(const ModelOptions& options);

  absl::Status ApplyHyperparameters(const HyperparametersOp& op);
  // Rebuilds the learner, scaling and user kernel with `values` (no bookkeeping of fits).
  absl::Status SwitchHyperparameters(const Hyperparameters& values, double kors_mu_factor);
  // A pending refit completed now (before a graph edit or another refit), and the model's side
  // switched with the learner's.
  absl::Status CompletePendingRefit();
  // After the learner learned: when its pending refit has ended, the model switches too (or, if
  // the learner abandoned it, keeps its values and says so).
  void SyncRefit();
  // Applies `op` (Apply without the refit's synchronisation).
  absl::Status ApplyOp(const ModelOp& op, EdgeEditResult* result);
  void ApplyScaling(const FeatureScalingOp& op);
  // `h` with every value the configuration fixes set to the configured value.
  Hyperparameters WithConfiguredValues(Hyperparameters h) const;
  // The learner for the current dimensions, graph and hyper-parameters.
  absl::StatusOr<std::unique_ptr<Learner>> NewLearner() const;
  // The user kernel's options with the current (possibly fitted) rho.
  UserKernelOptions CurrentUserKernelOptions() const;
  int32_t Register(const std::string& id, bool* added = nullptr);
  // Learns one reward of a policy that learns from whole decisions (LearnsFromDecisions).
  absl::Status LearnFromDecision(const ObserveOp& observe, int32_t user);
  // Learns the oldest `count` staged observations, in batches of at most max_learn_batch.
  absl::Status LearnStaged(int64_t count);

  const ModelOptions options_;
  std::function<void(const std::string&)> on_user_registered_;
  std::shared_ptr<UserRegistry> registry_ = std::make_shared<UserRegistry>();
  UserGraph graph_;
  std::shared_ptr<const UserKernel> user_kernel_;
  std::unique_ptr<Learner> learner_;
  // The scorer the last view published, and the count of learner-changing operations it
  // reflects: a batch of decisions only (which teach the learner nothing) publishes the same
  // scorer again instead of freezing a copy of the learner.
  uint64_t learner_changes_ = 0;
  mutable std::shared_ptr<const Scorer> published_scorer_;
  mutable uint64_t published_changes_ = 0;
  FeatureScaling scaling_;
  // Of scaling_'s dimensions, the trailing ones that hold named features' hashed inputs.
  int32_t context_slots_ = 0;
  int32_t arm_slots_ = 0;
  // The frozen scales of named numeric features, per side (FeatureScalingOp).
  std::shared_ptr<const NumericScaling> context_scaling_ = std::make_shared<NumericScaling>();
  std::shared_ptr<const NumericScaling> arm_scaling_ = std::make_shared<NumericScaling>();
  int64_t rewards_learned_ = 0;
  int64_t components_ = 0;
  int64_t users_at_rebuild_ = 0;
  // Hyper-parameters in use (from the configuration until a logged fit changes them).
  Hyperparameters hyper_;
  double kors_mu_factor_ = 1.0;
  int64_t next_fit_at_ = 0;  // rewards learned at which the next fit is due
  int64_t fits_applied_ = 0;
  int64_t coarsenings_ = 0;  // full-dictionary rebuilds with a coarser KORS mu
  int64_t last_fit_rewards_ = 0;
  int32_t last_fit_points_ = 0;
  double last_fit_log_likelihood_ = 0.0;
  BaselineTracker baseline_;
  // The rewards learned lately (core/model/learning_health.h); not in snapshots: after a restart
  // it starts again from the rewards replayed.
  RecentRewards recent_;
  // SignalToNoise of hyper_ under the user kernel it was computed for (BuildView).
  mutable std::weak_ptr<const UserKernel> snr_kernel_;
  mutable Hyperparameters snr_values_;
  mutable int32_t snr_users_ = -1;
  mutable double snr_ = 0.0;
  // The off-policy estimates, fed by every reward of a decision with an evaluation record.
  PolicyEvaluator evaluator_;
  // Apprentice or serving, and the lift that decides (core/policy/apprentice.h).
  Apprenticeship apprenticeship_;
  // Staged observations (batches), oldest first: the learner's point, user and reward.
  struct Staged {
    int32_t user = 0;
    Eigen::VectorXd point;
    double reward = 0.0;
  };
  std::deque<Staged> staged_;
  int64_t staged_total_ = 0;
  // A refit the learner spreads over later observations (Learner::RefitPending): the values,
  // scaling and user kernel the model switches to when the learner does (SyncRefit).
  struct PendingSwitch {
    Hyperparameters values;
    double kors_mu_factor = 1.0;
    PreparedRefit prepared;
  };
  std::optional<PendingSwitch> pending_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_LEARNED_STATE_H_
