#include "core/model/snapshots.h"

#include "absl/time/clock.h"
#include "core/storage/snapshot_file.h"

namespace graphbandit {

absl::StatusOr<uint64_t> SnapshotWriter::Write(const PreparedSnapshot& prepared) {
  if (dir_ == nullptr) return prepared.seq;
  absl::Status status =
      storage::WriteSnapshotFile(dir_->SnapshotPath(prepared.seq), prepared.seq, prepared.payload);
  if (!status.ok()) return status;
  dir_->RemoveOldFiles(prepared.seq);
  MutexLock lock(&stats_mu_);
  ++stats_.written;
  stats_.last_seq = prepared.seq;
  stats_.last_time = absl::Now();
  return prepared.seq;
}

SnapshotWriter::Stats SnapshotWriter::stats() const {
  MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace graphbandit
