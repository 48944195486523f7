// What the model shows of itself: the published view, statistics, and the waits for the writer
// (fits, a model version, everything logged so far).
#include <algorithm>
#include <functional>
#include <memory>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/model/learning_health.h"
#include "core/model/model.h"

namespace graphbandit {

std::shared_ptr<const ModelView> Model::View() const {
  MutexLock lock(&view_mu_);
  return view_;
}

ModelStats Model::Stats() const {
  ModelStats stats;
  stats.view = *View();
  stats.users = registry_->size();
  stats.decisions = decisions_.load(std::memory_order_relaxed);
  {
    MutexLock lock(&ledger_mu_);
    stats.pending_decisions = ledger_->pending();
    stats.ledger_size = ledger_->size();
    stats.expired_decisions = ledger_->expired_total();
  }
  {
    MutexLock lock(&queue_mu_);
    // Logged but not yet published (a batch the writer is applying is no longer in queue_).
    stats.queued_operations = static_cast<int64_t>(next_seq_ - 1 - applied_seq_);
    stats.writes_delayed = writes_delayed_;
    stats.writes_refused_behind = writes_refused_behind_;
    stats.decisions_paced = decisions_paced_;
    stats.decision_pacing_seconds = absl::ToDoubleSeconds(decision_pacing_);
    stats.fits_in_flight = fits_in_flight_;
  }
  stats.log_syncs = log_ != nullptr ? log_->syncs() : 0;
  if (log_ != nullptr) stats.log = log_->Health();
  stats.unlogged_decisions = unlogged_decisions_.load(std::memory_order_relaxed);
  stats.replicated = replicated();
  stats.shared_log_seq = shared_log_seq_.load(std::memory_order_relaxed);
  stats.records_unreadable = records_unreadable_.load(std::memory_order_relaxed);
  stats.recovery = recovery_;
  const SnapshotWriter::Stats snapshots = snapshots_.stats();
  stats.snapshots_written = snapshots.written;
  stats.last_snapshot_seq = snapshots.last_seq;
  stats.last_snapshot_time = snapshots.last_time;
  {
    MutexLock lock(&stats_mu_);
    stats.freshness = freshness_;
  }
  stats.fits_applied =
      stats.view.hyperparameters.has_value() ? stats.view.hyperparameters->fits_applied : 0;
  const FitScheduler::Stats fits = fits_.stats();
  stats.fits_unchanged = fits.unchanged;
  stats.fits_skipped = fits.skipped;
  stats.fits_failed = fits.failed;
  stats.fit_seconds = fits.seconds;
  stats.last_fit = fits.last;
  LearningInputs learning;
  learning.queued_operations = stats.queued_operations;
  learning.max_queued = max_queued();
  if (stats.view.hyperparameters.has_value()) {
    learning.signal_to_noise = stats.view.hyperparameters->signal_to_noise;
  }
  if (options_.policy == PolicyKind::kEkUcb || options_.policy == PolicyKind::kEkTs) {
    learning.max_dictionary_size = options_.max_dictionary_size;  // the Nystrom policies
  }
  learning.dictionary_size = stats.view.dictionary_size;
  learning.last_fit = fits.last;
  learning.last_fit_error = fits.last_error;
  learning.recent_reward = stats.view.recent_reward;
  learning.recent_weight = stats.view.recent_weight;
  learning.policy_values = stats.view.policy_values;
  learning.apprentice = stats.view.apprentice;
  stats.learning = AssessLearning(learning);
  return stats;
}

void Model::SetAfterApplyHookForTesting(std::function<void()> hook) {
  MutexLock lock(&queue_mu_);
  after_apply_hook_ =
      hook ? std::make_shared<const std::function<void()>>(std::move(hook)) : nullptr;
}

void Model::WaitForFits() {
  MutexLock lock(&queue_mu_);
  for (;;) {
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return fits_in_flight_ == 0 || stopping_ || draining_;
    });
    // Not only applied: every reward logged so far learned (its batch's LearnOp applied), and
    // the writer must also have decided, after that, whether a fit is due (AfterBatch), or a fit
    // about to start would be missed here.
    const uint64_t target = next_seq_ - 1;
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return LearnedOrBlocked(target) || (stopping_ && queue_.empty());
    });
    const uint64_t applied = applied_seq_;
    queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return decided_seq_ >= applied || (stopping_ && queue_.empty());
    });
    // A shutdown cancels the fits (BeginShutdown): the one in flight never lands.
    if (fits_in_flight_ == 0 || stopping_ || draining_) return;
  }
}

absl::Status Model::WaitForVersion(uint64_t version, absl::Time deadline) {
  // Cluster mode: a version from another node may be ahead of what this one has read yet; only
  // one beyond the shared log's end is refused.
  uint64_t shared_last = 0;
  if (replicated() && version > LastLogged()) {
    absl::StatusOr<uint64_t> last = replication_.log->LastSeq();
    if (!last.ok()) return last.status();
    shared_last = *last;
  }
  MutexLock lock(&queue_mu_);
  const uint64_t logged = std::max(next_seq_ - 1, shared_last);
  if (version > logged) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "min_model_version %d is ahead of everything model \"%s\" has recorded (version %d); "
        "use a model_version returned by ReportReward",
        version, options_.name, logged));
  }
  // A reward's version is its record's: wait until its batch is learned too (learned_seq_).
  queue_cv_.WaitUntil(&queue_mu_, deadline, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return LearnedOrBlocked(version) || stopping_ || draining_;
  });
  if (LearnedOrBlocked(version)) return absl::OkStatus();
  if (stopping_ || draining_) return absl::UnavailableError("the model is shutting down");
  return absl::DeadlineExceededError(
      absl::StrFormat("the deadline passed before model \"%s\" published version %d (it is at %d)",
                      options_.name, version, learned_seq_));
}

void Model::WaitForWriter() {
  MutexLock lock(&queue_mu_);
  const uint64_t target = next_seq_ - 1;
  queue_cv_.Wait(&queue_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return LearnedOrBlocked(target) || (stopping_ && queue_.empty());
  });
}

bool Model::LearnedOrBlocked(uint64_t target) const {
  // While the local log refuses writes no LearnOp can be logged: the staged rewards (durable in
  // the log) wait for its repair, and the waits settle for everything being applied.
  return learned_seq_ >= target || (LogDegraded() && applied_seq_ >= target);
}

}  // namespace graphbandit
