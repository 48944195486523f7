#include "core/model/operation_log.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"

namespace graphbandit {

OperationLog::OperationLog(std::string model_name, Durability durability,
                           std::function<uint64_t()> last_logged)
    : model_name_(std::move(model_name)),
      durability_(durability),
      last_logged_(std::move(last_logged)) {}

OperationLog::~OperationLog() { StopSyncer(); }

void OperationLog::MarkSynced(uint64_t seq) {
  MutexLock lock(&sync_mu_);
  synced_seq_ = seq;
}

void OperationLog::StartSyncer() {
  if (durability_.sync != Durability::Sync::kGroupCommit) return;
  syncer_ = std::thread([this] { SyncerLoop(); });
}

void OperationLog::StopSyncer() {
  {
    MutexLock lock(&sync_mu_);
    syncer_stop_ = true;
    sync_cv_.SignalAll();
  }
  if (syncer_.joinable()) syncer_.join();
}

void OperationLog::FailLocked(const std::string& what) {
  if (sync_error_.ok()) {
    sync_error_ = absl::UnavailableError(absl::StrFormat(
        "model \"%s\" cannot make its log durable (%s); it accepts no more changes until the "
        "server is restarted",
        model_name_, what));
    LogWarning(sync_error_.ToString());
  }
  failed_.store(true);
  sync_cv_.SignalAll();
}

absl::Status OperationLog::StartSegment(const std::string& path, uint64_t last_logged) {
  // The new segment is opened first: if that fails the model keeps appending to the old one.
  auto writer = storage::LogWriter::Open(path);
  if (!writer.ok()) return writer.status();
  MutexLock lock(&writer_mu_);
  if (writer_ != nullptr) {
    MutexLock sync(&sync_mu_);
    if (::fdatasync(sync_fd_) == 0) {
      ++syncs_;
      synced_seq_ = std::max(synced_seq_, last_logged);
      sync_cv_.SignalAll();  // group-commit waiters covered by this sync
    } else {
      // Records in the old segment may be lost: stop acknowledging anything (fail-stop).
      FailLocked(absl::StrCat("fdatasync of the finished segment: ", std::strerror(errno)));
    }
    sync_fd_ = -1;
  }
  if (writer_ != nullptr) writer_->Close().IgnoreError();
  writer_ = *std::move(writer);
  MutexLock sync(&sync_mu_);
  sync_fd_ = writer_->fd();
  return absl::OkStatus();
}

absl::Status OperationLog::Append(uint8_t type, absl::string_view payload) {
  MutexLock lock(&writer_mu_);
  // Fail-stop: after a failed write or sync nothing more is acknowledged (a later record
  // could follow a torn one, and a retried fsync can falsely succeed).
  if (writer_ == nullptr || failed_.load()) {
    MutexLock sync(&sync_mu_);
    return sync_error_.ok() ? absl::UnavailableError(
                                  absl::StrFormat("model \"%s\" has no open log", model_name_))
                            : sync_error_;
  }
  absl::Status status = writer_->Append(type, payload);
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    // Refused before anything was written (a record over the format's size limit).
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": this change is too large to log: %s", model_name_, status.message()));
  }
  if (!status.ok()) {
    MutexLock sync(&sync_mu_);
    FailLocked(absl::StrCat("write: ", status.message()));
    return sync_error_;
  }
  return absl::OkStatus();
}

absl::Status OperationLog::WaitDurable(uint64_t seq, absl::Time deadline) {
  if (durability_.sync == Durability::Sync::kOs) return absl::OkStatus();
  if (durability_.sync == Durability::Sync::kEveryRecord) {
    const uint64_t target = last_logged_();
    MutexLock lock(&sync_mu_);
    if (!sync_error_.ok()) return sync_error_;  // never trust a sync retried after a failure
    if (synced_seq_ >= seq) return absl::OkStatus();
    // One fdatasync covers every record written before it: concurrent callers share it.
    if (sync_fd_ < 0 || ::fdatasync(sync_fd_) != 0) {
      FailLocked(absl::StrCat("fdatasync: ", std::strerror(errno)));
      return sync_error_;
    }
    ++syncs_;
    synced_seq_ = std::max(synced_seq_, target);
    return absl::OkStatus();
  }
  MutexLock lock(&sync_mu_);
  const bool durable = sync_cv_.WaitUntil(
      &sync_mu_, deadline,
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return synced_seq_ >= seq || !sync_error_.ok(); });
  if (!sync_error_.ok()) return sync_error_;
  if (!durable) {
    return absl::DeadlineExceededError(
        "the deadline passed before the record was on disk; it may still become durable (a "
        "retry answers DUPLICATE then)");
  }
  return absl::OkStatus();
}

void OperationLog::SyncerLoop() {
  for (;;) {
    {
      MutexLock lock(&sync_mu_);
      sync_cv_.WaitFor(&sync_mu_, durability_.group_commit_interval,
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return syncer_stop_; });
      if (syncer_stop_) return;
    }
    const uint64_t target = last_logged_();
    MutexLock lock(&sync_mu_);
    if (target > synced_seq_ && sync_fd_ >= 0 && sync_error_.ok()) {
      if (::fdatasync(sync_fd_) == 0) {
        ++syncs_;
        synced_seq_ = target;
      } else {
        FailLocked(absl::StrCat("fdatasync: ", std::strerror(errno)));
      }
    }
    sync_cv_.SignalAll();  // also when a segment rotation already synced the waiters' records
  }
}

void OperationLog::Close(uint64_t last_logged) {
  MutexLock lock(&writer_mu_);
  if (writer_ == nullptr) return;
  MutexLock sync(&sync_mu_);
  absl::Status status = writer_->Sync();
  if (status.ok()) {
    synced_seq_ = last_logged;
  } else {
    FailLocked(absl::StrCat("final sync: ", status.message()));
  }
  sync_cv_.SignalAll();  // rewards still waiting for a group commit get their answer
  if (status.ok()) status = writer_->Close();
  if (!status.ok()) {
    LogWarning(absl::StrFormat("model \"%s\": closing the log: %s", model_name_, status.message()));
  }
  sync_fd_ = -1;
  writer_.reset();
}

}  // namespace graphbandit
