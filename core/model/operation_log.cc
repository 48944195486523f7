#include "core/model/operation_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/log.h"
#include "core/base/thread_priority.h"
#include "core/storage/fault_injection.h"

namespace graphbandit {
namespace {

using storage::InjectedLogFault;
using storage::LogIo;

std::string ReasonFor(int err) {
  switch (err) {
    case ENOSPC:
      return "disk_full";
    case EDQUOT:
      return "disk_quota";
    case EROFS:
      return "read_only_filesystem";
    case EIO:
      return "io_error";
    default:
      return "log_error";
  }
}

}  // namespace

OperationLog::OperationLog(std::string model_name, Durability durability)
    : model_name_(std::move(model_name)), durability_(durability) {}

OperationLog::~OperationLog() {
  StopThreads();
  MutexLock lock(&sync_mu_);
  answered_all_ = true;
  AnswerOutsideLock(TakeAnsweredLocked(
      /*all=*/true,
      absl::UnavailableError(absl::StrFormat(
          "model \"%s\" closed its log before this record was on disk", model_name_))));
}

void OperationLog::MarkSynced(uint64_t seq) {
  {
    MutexLock lock(&writer_mu_);
    appended_seq_ = seq;
    written_seq_.store(seq, std::memory_order_release);
  }
  MutexLock lock(&sync_mu_);
  synced_seq_ = seq;
}

void OperationLog::StartThreads() {
  repairer_ = std::thread([this] {
    SetThreadName("gb-log-repair");
    RepairLoop();
  });
  if (durability_.sync == Durability::Sync::kEveryRecord) {
    acknowledger_ = std::thread([this] {
      SetThreadName("gb-log-ack");
      AcknowledgerLoop();
    });
  }
  if (durability_.sync != Durability::Sync::kGroupCommit) return;
  syncer_ = std::thread([this] {
    SetThreadName("gb-log-sync");
    SyncerLoop();
  });
}

void OperationLog::StopThreads() {
  {
    MutexLock lock(&sync_mu_);
    stop_ = true;
    sync_cv_.SignalAll();
    repair_cv_.SignalAll();
    acknowledger_cv_.SignalAll();
  }
  if (syncer_.joinable()) syncer_.join();
  if (acknowledger_.joinable()) acknowledger_.join();
  if (repairer_.joinable()) repairer_.join();
}

void OperationLog::FailLocked(const std::string& what, int err, bool tail_intact) {
  if (!tail_intact) {
    MutexLock copies(&copies_mu_);
    tail_intact_ = false;
  }
  if (sync_error_.ok()) {
    reason_ = ReasonFor(err);
    sync_error_ = absl::UnavailableError(absl::StrFormat(
        "model \"%s\" cannot write its log (%s: %s); decisions are still served but not logged, "
        "and rewards and graph changes are refused until writing works again (retried "
        "automatically)",
        model_name_, what, err != 0 ? std::strerror(err) : "unknown error"));
    degraded_since_ = absl::Now();
    ++degraded_episodes_;
    LogWarning(sync_error_.message());
    MutexLock error(&error_mu_);
    degraded_error_ = sync_error_;
  }
  failed_.store(true);
  sync_cv_.SignalAll();
  repair_cv_.SignalAll();
  acknowledger_cv_.SignalAll();
}

absl::Status OperationLog::DegradedError() const {
  MutexLock error(&error_mu_);
  return degraded_error_.ok()
             ? absl::UnavailableError(absl::StrFormat("model \"%s\" has no open log", model_name_))
             : degraded_error_;
}

int OperationLog::SyncFdLocked() {
  if (sync_fd_ < 0) return EBADF;
  if (const int injected = InjectedLogFault(LogIo::kSync, ""); injected != 0) return injected;
  if (::fdatasync(sync_fd_) != 0) return errno;
  ++syncs_;
  return 0;
}

int OperationLog::SyncOutsideLock() {
  if (sync_fd_ < 0) return EBADF;
  // The descriptor stays open meanwhile: whoever closes or replaces it waits for syncing_.
  const int fd = sync_fd_;
  syncing_ = true;
  sync_mu_.Unlock();
  // A test's hook runs where a slow disk would hold this thread: outside the lock.
  int err = InjectedLogFault(LogIo::kSync, "");
  if (err == 0 && ::fdatasync(fd) != 0) err = errno;
  sync_mu_.Lock();
  syncing_ = false;
  sync_cv_.SignalAll();
  acknowledger_cv_.SignalAll();
  if (err == 0) ++syncs_;
  return err;
}

void OperationLog::AwaitNoSyncLocked() {
  sync_cv_.Wait(&sync_mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !syncing_; });
}

void OperationLog::SyncedLocked(uint64_t seq) {
  synced_seq_ = std::max(synced_seq_, seq);
  MutexLock copies(&copies_mu_);
  while (!unsynced_.empty() && unsynced_.front().seq <= synced_seq_) {
    synced_size_ = unsynced_.front().end;
    unsynced_bytes_ -= unsynced_.front().payload.size();
    unsynced_.pop_front();
  }
  sync_cv_.SignalAll();
  acknowledger_cv_.SignalAll();
}

absl::Status OperationLog::StartSegment(const std::string& path, uint64_t last_logged) {
  {
    MutexLock lock(&writer_mu_);
    if (closed_) return absl::FailedPreconditionError("the log is closed");
    if (path == path_) return absl::OkStatus();  // nothing appended since the last start
  }
  // The new segment is opened first: if that fails the model keeps appending to the old one.
  const bool existed = ::access(path.c_str(), F_OK) == 0;
  auto writer = storage::LogWriter::Open(path);
  if (!writer.ok()) return writer.status();
  MutexLock lock(&writer_mu_);
  MutexLock sync(&sync_mu_);
  AwaitNoSyncLocked();  // the old segment's descriptor is closed below
  auto abandon = [&](absl::Status status) {
    (*writer)->Close().IgnoreError();
    if (!existed) ::unlink(path.c_str());  // empty and new; the records stay in the old one
    return status;
  };
  if (closed_) return abandon(absl::FailedPreconditionError("the log is closed"));
  if (!sync_error_.ok()) return abandon(sync_error_);
  if (writer_ != nullptr) {
    if (const int err = SyncFdLocked(); err != 0) {
      // Records in the old segment may not be on disk: degraded until repaired.
      FailLocked("fdatasync of the finished segment", err, /*tail_intact=*/false);
      return abandon(sync_error_);
    }
    SyncedLocked(last_logged);
    writer_->Close().IgnoreError();
  }
  writer_ = *std::move(writer);
  path_ = path;
  appended_seq_ = last_logged;
  written_seq_.store(last_logged, std::memory_order_release);
  sync_fd_ = writer_->fd();
  MutexLock copies(&copies_mu_);
  synced_size_ = writer_->size();
  return absl::OkStatus();
}

absl::Status OperationLog::Append(uint8_t type, absl::string_view payload) {
  // While degraded, answer at once: a repair may hold writer_mu_ through slow I/O.
  if (failed_.load()) return DegradedError();
  MutexLock lock(&writer_mu_);
  if (writer_ == nullptr || closed_ || failed_.load()) return DegradedError();
  if (durability_.sync != Durability::Sync::kOs) {
    // Bound the copies kept for a repair: sync when they grow large (decisions alone never
    // wait for a sync otherwise).
    bool large;
    {
      MutexLock copies(&copies_mu_);
      large = unsynced_bytes_ > kMaxUnsyncedBytes;
    }
    if (large) {
      MutexLock sync(&sync_mu_);
      // Not beside a WaitDurable's sync of the same file: if that one failed, this one's success
      // proves nothing (the kernel reports a writeback error once), so wait for its outcome and
      // never sync after a failure.
      AwaitNoSyncLocked();
      if (!sync_error_.ok()) return sync_error_;
      if (const int err = SyncFdLocked(); err != 0) {
        FailLocked("fdatasync", err, /*tail_intact=*/false);
        return sync_error_;
      }
      SyncedLocked(appended_seq_);
    }
  }
  absl::Status status = writer_->Append(appended_seq_ + 1, type, payload);
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    // Refused before anything was written (a record over the format's size limit).
    return absl::InvalidArgumentError(absl::StrFormat(
        "model \"%s\": this change is too large to log: %s", model_name_, status.message()));
  }
  if (!status.ok()) {
    MutexLock sync(&sync_mu_);
    FailLocked("write", writer_->error_number(), /*tail_intact=*/true);
    return sync_error_;
  }
  ++appended_seq_;
  written_seq_.store(appended_seq_, std::memory_order_release);
  if (durability_.sync == Durability::Sync::kOs) {
    // Durable as far as this policy promises once written: nothing to keep for a repair.
    MutexLock sync(&sync_mu_);
    synced_seq_ = appended_seq_;
    MutexLock copies(&copies_mu_);
    synced_size_ = writer_->size();
  } else {
    MutexLock copies(&copies_mu_);
    unsynced_.push_back(Unsynced{appended_seq_, type, std::string(payload),
                                 static_cast<uint64_t>(writer_->size())});
    unsynced_bytes_ += payload.size();
  }
  return absl::OkStatus();
}

absl::Status OperationLog::WaitDurable(uint64_t seq, absl::Time deadline) {
  // Under OS, a record is as durable as promised once its append returned.
  if (durability_.sync == Durability::Sync::kOs) return absl::OkStatus();
  if (durability_.sync == Durability::Sync::kEveryRecord) {
    MutexLock lock(&sync_mu_);
    // One fdatasync covers every record written before it: while another caller's sync runs,
    // wait for it (it may cover this record) instead of starting another.
    sync_cv_.Wait(&sync_mu_, [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return synced_seq_ >= seq || !sync_error_.ok() || !syncing_;
    });
    if (synced_seq_ >= seq) return absl::OkStatus();  // on disk, whatever happened since
    if (!sync_error_.ok()) return sync_error_;        // never trust a sync retried after a failure
    // Everything written by now, not only this record: the callers waiting behind this sync
    // find theirs covered when it ends.
    const uint64_t target = written_seq_.load(std::memory_order_acquire);
    if (const int err = SyncOutsideLock(); err != 0) {
      FailLocked("fdatasync", err, /*tail_intact=*/false);
      return sync_error_;
    }
    // Another caller's write or sync failed meanwhile: this sync's success is not trusted.
    if (!sync_error_.ok()) return sync_error_;
    SyncedLocked(target);
    return absl::OkStatus();
  }
  MutexLock lock(&sync_mu_);
  const bool durable = sync_cv_.WaitUntil(
      &sync_mu_, deadline,
      [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return synced_seq_ >= seq || !sync_error_.ok(); });
  if (synced_seq_ >= seq) return absl::OkStatus();
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
                       [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; });
      if (stop_) return;
    }
    MutexLock lock(&sync_mu_);
    const uint64_t target = written_seq_.load(std::memory_order_acquire);
    if (target > synced_seq_ && sync_fd_ >= 0 && sync_error_.ok()) {
      if (const int err = SyncFdLocked(); err != 0) {
        FailLocked("fdatasync", err, /*tail_intact=*/false);
      } else {
        SyncedLocked(target);
      }
    }
    sync_cv_.SignalAll();  // also when a segment rotation already synced the waiters' records
    AnswerOutsideLock(TakeAnsweredLocked(/*all=*/false, absl::OkStatus()));
  }
}

void OperationLog::AcknowledgerLoop() {
  MutexLock lock(&sync_mu_);
  for (;;) {
    acknowledger_cv_.Wait(&sync_mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stop_ || (!pending_.empty() && !syncing_);
    });
    if (stop_) return;  // Close or the destructor answers what is left
    Answers answered = TakeAnsweredLocked(/*all=*/false, absl::OkStatus());
    if (answered.empty()) {
      // Nothing covered yet: one fdatasync for everything written by now, which the callbacks
      // registered meanwhile (and WaitDurable's callers) find covering theirs when it ends.
      const uint64_t target = written_seq_.load(std::memory_order_acquire);
      if (sync_fd_ < 0 || target <= synced_seq_) {
        // No segment to sync (being replaced) or nothing newer: a sync elsewhere answers.
        acknowledger_cv_.WaitFor(&sync_mu_, absl::Milliseconds(1),
                                 [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; });
        continue;
      }
      if (const int err = SyncOutsideLock(); err != 0) {
        FailLocked("fdatasync", err, /*tail_intact=*/false);
      } else if (sync_error_.ok()) {  // not trusted after another caller's failure meanwhile
        SyncedLocked(target);
      }
      answered = TakeAnsweredLocked(/*all=*/false, absl::OkStatus());
    }
    AnswerOutsideLock(std::move(answered));
  }
}

void OperationLog::NotifyDurable(uint64_t seq, DurableCallback done) {
  if (durability_.sync == Durability::Sync::kOs) {
    std::move(done)(absl::OkStatus());
    return;
  }
  absl::Status answer;
  {
    MutexLock lock(&sync_mu_);
    if (synced_seq_ < seq && sync_error_.ok() && !answered_all_) {
      pending_.push_back(PendingDurable{seq, std::move(done)});
      acknowledger_cv_.Signal();
      return;
    }
    if (synced_seq_ >= seq) {
      answer = absl::OkStatus();
    } else if (!sync_error_.ok()) {
      answer = sync_error_;
    } else {
      answer = absl::UnavailableError(absl::StrFormat(
          "model \"%s\" closed its log before this record was on disk", model_name_));
    }
  }
  std::move(done)(std::move(answer));
}

OperationLog::Answers OperationLog::TakeAnsweredLocked(bool all, absl::Status status) {
  Answers answered;
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    PendingDurable& p = pending_[i];
    if (p.seq <= synced_seq_) {
      answered.emplace_back(std::move(p.done), absl::OkStatus());
    } else if (!sync_error_.ok()) {
      answered.emplace_back(std::move(p.done), sync_error_);
    } else if (all) {
      answered.emplace_back(std::move(p.done), status);
    } else {
      if (kept != i) pending_[kept] = std::move(p);
      ++kept;
    }
  }
  pending_.resize(kept);
  return answered;
}

void OperationLog::AnswerOutsideLock(Answers answered) {
  if (answered.empty()) return;
  sync_mu_.Unlock();
  for (auto& [done, status] : answered) std::move(done)(std::move(status));
  sync_mu_.Lock();
}

absl::Status OperationLog::RepairLocked() {
  if (sync_error_.ok()) return absl::OkStatus();
  if (closed_ || path_.empty()) return sync_error_;
  AwaitNoSyncLocked();  // the writer's descriptor is closed below
  // The poisoned writer is dropped: its file may end in a partial record.
  if (writer_ != nullptr) writer_->Close().IgnoreError();
  writer_.reset();
  sync_fd_ = -1;
  ++repair_attempts_;
  // Where to cut: after a failed write, the end of the last complete record (the records
  // before it are intact); after a failed sync, the last point a sync covered (nothing after
  // it is trusted, and the copies are written again).
  uint64_t cut;
  bool rewrite;
  {
    MutexLock copies(&copies_mu_);
    rewrite = !tail_intact_;
    cut = rewrite || unsynced_.empty() ? synced_size_ : unsynced_.back().end;
  }
  auto failed = [this](const std::string& what) {
    MutexLock copies(&copies_mu_);
    tail_intact_ = false;  // a failed sync here: written pages may be gone
    return absl::UnavailableError(what);
  };
  int err = InjectedLogFault(LogIo::kTruncate, path_);
  if (err == 0) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(cut)) != 0) {
      err = errno;
    } else if (::fdatasync(fd) != 0) {
      err = errno;
      ::close(fd);
      return failed(absl::StrCat("fdatasync of ", path_, ": ", std::strerror(err)));
    }
    if (fd >= 0) ::close(fd);
  }
  if (err != 0) {
    return absl::UnavailableError(absl::StrCat("truncating ", path_, ": ", std::strerror(err)));
  }
  auto writer = storage::LogWriter::Open(path_);
  if (!writer.ok()) return writer.status();
  size_t rewritten = 0;
  if (rewrite) {
    MutexLock copies(&copies_mu_);
    for (const Unsynced& record : unsynced_) {
      if (absl::Status s = (*writer)->Append(record.seq, record.type, record.payload); !s.ok()) {
        return s;
      }
      ++rewritten;
    }
  }
  if (absl::Status s = (*writer)->Sync(); !s.ok()) return failed(std::string(s.message()));
  ++syncs_;
  writer_ = *std::move(writer);
  sync_fd_ = writer_->fd();
  {
    MutexLock copies(&copies_mu_);
    if (!unsynced_.empty()) synced_seq_ = std::max(synced_seq_, unsynced_.back().seq);
    unsynced_.clear();
    unsynced_bytes_ = 0;
    synced_size_ = writer_->size();
    tail_intact_ = true;
  }
  LogWarning(absl::StrFormat(
      "model \"%s\": its log is writable again after %s (%d records re-written); rewards and "
      "graph changes are accepted again",
      model_name_, absl::FormatDuration(absl::Now() - degraded_since_), rewritten));
  sync_error_ = absl::OkStatus();
  reason_.clear();
  degraded_since_ = absl::InfinitePast();
  {
    MutexLock error(&error_mu_);
    degraded_error_ = absl::OkStatus();
  }
  failed_.store(false);
  sync_cv_.SignalAll();
  return absl::OkStatus();
}

absl::Status OperationLog::Repair() {
  MutexLock lock(&writer_mu_);
  MutexLock sync(&sync_mu_);
  return RepairLocked();
}

void OperationLog::RepairLoop() {
  absl::Duration interval = kFirstRepairInterval;
  for (;;) {
    {
      MutexLock lock(&sync_mu_);
      repair_cv_.Wait(&sync_mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || !sync_error_.ok();
      });
      if (stop_) return;
      repair_cv_.WaitFor(&sync_mu_, interval,
                         [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return stop_; });
      if (stop_) return;
    }
    if (Repair().ok()) {
      interval = kFirstRepairInterval;
    } else {
      interval = std::min(interval * 2, kMaxRepairInterval);
    }
  }
}

LogHealth OperationLog::Health() const {
  MutexLock lock(&sync_mu_);
  LogHealth health;
  health.degraded = !sync_error_.ok();
  health.reason = reason_;
  health.message = std::string(sync_error_.message());
  health.since = degraded_since_;
  health.degraded_episodes = degraded_episodes_;
  health.repair_attempts = repair_attempts_;
  return health;
}

void OperationLog::Close(uint64_t last_logged) {
  Answers answered;
  {
    MutexLock lock(&writer_mu_);
    if (closed_) return;
    MutexLock sync(&sync_mu_);
    CloseLocked(last_logged);
    // The callbacks still waiting get their answer now: the final sync covered them, or failed.
    answered_all_ = true;
    answered = TakeAnsweredLocked(
        /*all=*/true,
        absl::UnavailableError(absl::StrFormat(
            "model \"%s\" closed its log before this record was on disk", model_name_)));
  }
  for (auto& [done, status] : answered) std::move(done)(std::move(status));
}

void OperationLog::CloseLocked(uint64_t last_logged) {
  AwaitNoSyncLocked();  // the writer's descriptor is closed below
  // A degraded log gets one last chance: what it holds was applied, so it should be kept.
  if (!sync_error_.ok()) {
    if (absl::Status s = RepairLocked(); !s.ok()) {
      LogWarning(
          absl::StrFormat("model \"%s\": closing a log that could not be repaired (%s); "
                          "records not yet on disk were never acknowledged",
                          model_name_, s.message()));
    }
  }
  closed_ = true;
  if (writer_ != nullptr && sync_error_.ok()) {
    absl::Status status = writer_->Sync();
    if (status.ok()) {
      ++syncs_;
      SyncedLocked(last_logged);
    } else {
      FailLocked("final sync", writer_->error_number(), /*tail_intact=*/false);
    }
    if (status.ok()) status = writer_->Close();
    if (!status.ok()) {
      LogWarning(
          absl::StrFormat("model \"%s\": closing the log: %s", model_name_, status.message()));
    }
  }
  sync_cv_.SignalAll();  // rewards still waiting for a group commit get their answer
  sync_fd_ = -1;
  writer_.reset();
}

}  // namespace graphbandit
