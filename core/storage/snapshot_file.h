// Snapshot files: a model's complete state at one log sequence number, written atomically.
//
// Layout: magic "GBSNAP\0\1" (8 bytes) | sequence number (fixed64) | payload length (fixed64) |
// masked CRC-32C of the payload (fixed32) | payload. Written to a temporary name, fsynced,
// renamed into place and the directory fsynced, so a crash leaves either the old set of
// snapshots or the new one, never a half-written file under a snapshot's name.
#ifndef GRAPHBANDIT_CORE_STORAGE_SNAPSHOT_FILE_H_
#define GRAPHBANDIT_CORE_STORAGE_SNAPSHOT_FILE_H_

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::storage {

// The payload is `parts` one after another (a model writes its learned state and its ledger
// from two buffers, without copying them into one).
absl::Status WriteSnapshotFile(const std::string& path, uint64_t seq,
                               std::initializer_list<absl::string_view> parts);
inline absl::Status WriteSnapshotFile(const std::string& path, uint64_t seq,
                                      absl::string_view payload) {
  return WriteSnapshotFile(path, seq, {payload});
}

struct SnapshotContents {
  uint64_t seq = 0;
  std::string payload;
};
// DataLoss (with the reason) for a damaged or foreign file; NotFound if missing.
absl::StatusOr<SnapshotContents> ReadSnapshotFile(const std::string& path);

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_SNAPSHOT_FILE_H_
