#include "core/model/snapshots.h"

#include <utility>

#include "absl/time/clock.h"
#include "core/base/thread_priority.h"
#include "core/model/ledger_records.h"
#include "core/storage/snapshot_file.h"

namespace graphbandit {

absl::StatusOr<uint64_t> SnapshotWriter::Write(PreparedSnapshot prepared) {
  absl::StatusOr<uint64_t> written = WriteFile(std::move(prepared), &buffer_);
  if (written.ok()) CountWritten(*written);
  return written;
}

absl::StatusOr<uint64_t> SnapshotWriter::WriteFile(PreparedSnapshot prepared,
                                                   std::string* keep) const {
  if (dir_ == nullptr) return prepared.seq;
  // The ledger in a buffer of its own, dropped after the write: it can be far larger than the
  // state (up to max_decisions open decisions), and is not worth keeping resident.
  const std::string ledger = EncodeLedger(prepared.ledger);
  prepared.ledger = LedgerCapture();  // lets go of the closed decisions it kept alive
  absl::Status status = storage::WriteSnapshotFile(dir_->SnapshotPath(prepared.seq), prepared.seq,
                                                   {prepared.payload, ledger});
  *keep = std::move(prepared.payload);
  if (!status.ok()) return status;
  dir_->RemoveOldFiles(prepared.seq);
  return prepared.seq;
}

void SnapshotWriter::CountWritten(uint64_t seq) {
  MutexLock lock(&mu_);
  ++stats_.written;
  stats_.last_seq = seq;
  stats_.last_time = absl::Now();
}

void SnapshotWriter::WriteInBackground(PreparedSnapshot prepared) {
  std::function<void()> hook;
  {
    MutexLock lock(&mu_);
    hook = before_write_hook_;
  }
  writing_.store(true, std::memory_order_release);
  background_ = std::thread([this, prepared = std::move(prepared), hook]() mutable {
    SetThreadName("gb-snapshot");
    SetThreadBackground();
    if (hook) hook();
    // Counted by TakeResult: no lock taken here.
    result_ = WriteFile(std::move(prepared), &written_buffer_);
    writing_.store(false, std::memory_order_release);
  });
}

std::optional<absl::StatusOr<uint64_t>> SnapshotWriter::TakeResult() {
  if (!background_.joinable() || Writing()) return std::nullopt;
  background_.join();
  buffer_ = std::move(written_buffer_);
  if (result_.ok()) CountWritten(*result_);
  return std::move(result_);
}

bool SnapshotWriter::WaitForBackground(absl::Time deadline) const {
  while (Writing()) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
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
