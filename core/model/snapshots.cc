#include "core/model/snapshots.h"

#include <utility>

#include "absl/time/clock.h"
#include "core/base/thread_priority.h"
#include "core/model/ledger_records.h"
#include "core/storage/snapshot_file.h"

namespace graphbandit {

absl::StatusOr<uint64_t> SnapshotWriter::Write(PreparedSnapshot prepared) {
  if (dir_ == nullptr) return prepared.seq;
  prepared.payload.append(EncodeLedger(prepared.ledger));
  prepared.ledger = LedgerCapture();  // lets go of the closed decisions it kept alive
  absl::Status status =
      storage::WriteSnapshotFile(dir_->SnapshotPath(prepared.seq), prepared.seq, prepared.payload);
  if (!status.ok()) return status;
  dir_->RemoveOldFiles(prepared.seq);
  MutexLock lock(&mu_);
  ++stats_.written;
  stats_.last_seq = prepared.seq;
  stats_.last_time = absl::Now();
  return prepared.seq;
}

void SnapshotWriter::WriteInBackground(PreparedSnapshot prepared,
                                       std::function<void(absl::StatusOr<uint64_t>)> done) {
  JoinBackground();
  std::function<void()> hook;
  {
    MutexLock lock(&mu_);
    writing_ = true;
    hook = before_write_hook_;
  }
  background_ =
      std::thread([this, prepared = std::move(prepared), done = std::move(done), hook]() mutable {
        SetThreadName("gb-snapshot");
        SetThreadBackground();
        if (hook) hook();
        done(Write(std::move(prepared)));
        MutexLock lock(&mu_);
        writing_ = false;
        background_cv_.SignalAll();
      });
}

bool SnapshotWriter::Writing() const {
  MutexLock lock(&mu_);
  return writing_;
}

void SnapshotWriter::WaitForBackground() const {
  MutexLock lock(&mu_);
  background_cv_.Wait(&mu_, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !writing_; });
}

void SnapshotWriter::JoinBackground() {
  WaitForBackground();
  if (background_.joinable()) background_.join();
}

void SnapshotWriter::SetBeforeWriteHookForTesting(std::function<void()> hook) {
  MutexLock lock(&mu_);
  before_write_hook_ = std::move(hook);
}

SnapshotWriter::Stats SnapshotWriter::stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace graphbandit
