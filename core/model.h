// One named model: its user graph, its posterior, its decision ledger and its log.
//
// Concurrency (the TensorFlow-Serving pattern of building a new state beside the serving one and
// publishing it in one step):
//  * Every state change (learned reward, graph edit, fixing the dimensions) is an operation
//    that is appended to the model's log and queued, under one mutex, so queue order is log
//    order. A single writer thread applies queued operations in that order and then publishes
//    an immutable ModelView.
//  * Decisions read the current ModelView and never wait for the writer (except the very first
//    decision of a model whose dimensions are not fixed yet).
//  * Applying operations is deterministic (the only randomness, KORS coin flips, comes from a
//    seeded stream and every graph edit triggers its own rebuild), so replaying the log
//    rebuilds the same state; the model version is the sequence number of the last applied
//    operation.
#ifndef GRAPHBANDIT_CORE_MODEL_H_
#define GRAPHBANDIT_CORE_MODEL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/types/span.h"
#include "core/arm_kernel.h"
#include "core/decision.h"
#include "core/decision_ledger.h"
#include "core/model_ops.h"
#include "core/model_options.h"
#include "core/posterior.h"
#include "core/storage/log_writer.h"
#include "core/user_graph.h"

namespace graphbandit {

// What decisions read: immutable once published.
struct ModelView {
  uint64_t version = 0;
  std::shared_ptr<const Scorer> scorer;  // null until the dimensions are fixed
  FeatureScaling scaling;                // valid when dimensions_fixed
  int context_dim = 0;
  int arm_dim = 0;
  bool dimensions_fixed = false;
  int64_t rewards_learned = 0;
  int64_t history_size = 0;
  int64_t dictionary_size = 0;
  int64_t edges = 0;
  int64_t graph_components = 0;
  int64_t graph_users = 0;
};

struct AddUsersResult {
  int added = 0;
  int already_present = 0;
  int64_t users = 0;
};

struct EdgeEditResult {
  int changed = 0;     // edges added (AddEdges) or removed (RemoveEdges)
  int unchanged = 0;   // AddEdges: existing edges re-weighted; RemoveEdges: pairs with no edge
  int users_added = 0;
  int64_t edges = 0;   // total after the edit
};

struct ModelStats {
  ModelView view;
  int64_t users = 0;
  int64_t decisions = 0;
  int64_t pending_decisions = 0;
  int64_t ledger_size = 0;
  int64_t expired_decisions = 0;
  int64_t queued_operations = 0;
};

// Where recovery found damage in a model's log (reported, then truncated).
struct RecoveryReport {
  int64_t records_replayed = 0;
  bool truncated = false;
  std::string damage;  // human-readable, empty if the log was clean
};

class Model {
 public:
  // Opens the model, replaying its log from `state_dir`/<name>/ops.log (no persistence if
  // state_dir is empty), then applies the configured edge list, and starts the writer.
  static absl::StatusOr<std::unique_ptr<Model>> Open(const ModelOptions& options,
                                                     const std::string& state_dir);
  ~Model();

  const ModelOptions& options() const { return options_; }
  const std::string& name() const { return options_.name; }
  const RecoveryReport& recovery() const { return recovery_; }

  // Validates the request against the model's limits and dimensions and decides. Does not
  // touch the ledger. The decision's randomness is seeded by (model seed, event_id), so the
  // same state and event id give the same decision.
  absl::StatusOr<Decision> Decide(const DecisionRequest& request, const std::string& event_id);

  // Appends the rewards to the log and queues them; returns once they are logged (they are
  // learned asynchronously, in order). Fails without logging anything on invalid input or when
  // an exact-GP model is at its capacity.
  absl::Status Learn(std::vector<ObserveOp> observations);

  // Graph administration; each returns after the edit is applied and published.
  absl::StatusOr<AddUsersResult> AddUsers(absl::Span<const std::string> users);
  absl::StatusOr<EdgeEditResult> AddEdges(std::vector<EdgeEdit> edges);
  absl::StatusOr<EdgeEditResult> RemoveEdges(
      std::vector<std::pair<std::string, std::string>> pairs);

  DecisionLedger& ledger() { return ledger_; }
  void CountDecision() { decisions_.fetch_add(1, std::memory_order_relaxed); }
  std::shared_ptr<const ModelView> View() const ABSL_LOCKS_EXCLUDED(view_mu_);
  ModelStats Stats() const;

  // Blocks until every operation queued before the call has been applied and published.
  void WaitForWriter() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Stops the writer after it has applied everything queued, and closes the log.
  void Shutdown() ABSL_LOCKS_EXCLUDED(queue_mu_);

 private:
  struct Pending {
    uint64_t seq;
    ModelOp op;
    std::shared_ptr<struct OpCompletion> completion;  // null for rewards
  };
  struct Dimensions {
    bool fixed = false;
    int context_dim = 0;
    int arm_dim = 0;
  };

  explicit Model(const ModelOptions& options);

  // Checks the request's shape (ids, counts, finiteness, slate size, dimensions if fixed).
  absl::Status ValidateRequest(const DecisionRequest& request, const Dimensions& dims) const;
  absl::Status EnsureDimensions(int context_dim, int arm_dim);
  Dimensions CurrentDimensions() const ABSL_LOCKS_EXCLUDED(queue_mu_);

  // Logs and queues one operation. REQUIRES queue_mu_.
  absl::StatusOr<uint64_t> AppendLocked(ModelOp op, std::shared_ptr<OpCompletion> completion)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Submits an administrative operation and waits until it is applied.
  absl::StatusOr<EdgeEditResult> SubmitAndWait(ModelOp op);

  // Writer side. Apply is also used directly during replay (before the writer starts).
  absl::Status Apply(const ModelOp& op, EdgeEditResult* result);
  void Publish(uint64_t version);
  void WriterLoop();

  ModelOptions options_;
  RecoveryReport recovery_;
  DecisionLedger ledger_;
  std::atomic<int64_t> decisions_{0};
  std::shared_ptr<UserRegistry> registry_ = std::make_shared<UserRegistry>();

  // Owned by the writer (or by Open before the writer starts).
  UserGraph graph_;
  std::shared_ptr<const UserKernel> user_kernel_;
  std::unique_ptr<Learner> learner_;
  FeatureScaling scaling_;
  int64_t rewards_learned_ = 0;
  int64_t components_ = 0;        // of the graph's first users_at_rebuild_ users
  int64_t users_at_rebuild_ = 0;

  mutable absl::Mutex queue_mu_;
  std::unique_ptr<storage::LogWriter> log_ ABSL_GUARDED_BY(queue_mu_);
  std::deque<Pending> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(queue_mu_) = 1;
  uint64_t applied_seq_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // Rewards in the posterior or on their way to it (the exact-GP capacity counts these).
  int64_t rewards_held_ ABSL_GUARDED_BY(queue_mu_) = 0;
  Dimensions dims_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  absl::Status writer_error_ ABSL_GUARDED_BY(queue_mu_);

  mutable absl::Mutex view_mu_;
  std::shared_ptr<const ModelView> view_ ABSL_GUARDED_BY(view_mu_);

  std::thread writer_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_H_
