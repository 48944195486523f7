// A model's state directory: log segments "log-<first seq>.log", snapshots
// "snapshot-<seq>.snap" (20-digit numbers), and damaged files set aside beside them
// ("<name>.corrupt", "<name>.orphaned", never read again). Holds only the path: every call
// looks at the directory as it is. Used by recovery (before the model's threads start) and by
// the writer thread (segment rotation, removing old files); not by concurrent callers.
#ifndef GRAPHBANDIT_CORE_MODEL_STATE_DIRECTORY_H_
#define GRAPHBANDIT_CORE_MODEL_STATE_DIRECTORY_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit {

// Creates `path` and its missing parents (mode 0755). Errors carry the errno's status code.
absl::Status MakeDirectories(const std::string& path);

class StateDirectory {
 public:
  // A numbered file: its number (a sequence number) and its path.
  using File = std::pair<uint64_t, std::string>;

  // Makes `path` (and its parents) if missing.
  static absl::StatusOr<StateDirectory> Create(std::string path);

  const std::string& path() const { return path_; }
  std::string SegmentPath(uint64_t first_seq) const;
  std::string SnapshotPath(uint64_t seq) const;

  // The segments and snapshots present, by number (ascending).
  std::vector<File> Segments() const;
  std::vector<File> Snapshots() const;

  // Moves a damaged or unusable file out of the way, to "<path>.<why>" (".<why>.<n>" if taken).
  // Returns the new path, or an error if the file could not be moved.
  static absl::StatusOr<std::string> SetAside(const std::string& path, absl::string_view why);
  // "moved to <new path>", or what stopped the move (for damage reports).
  static std::string SetAsideReport(const std::string& path, absl::string_view why);

  // Removes the temporary files a snapshot being written leaves if the process dies before
  // renaming it ("snapshot-<seq>.snap.tmp"); returns their paths. Called at start, before the
  // writer thread exists (a temporary file then is never one being written).
  std::vector<std::string> RemoveTemporaryFiles() const;

  // After the snapshot `newest` is written: keeps the two newest snapshots up to it and every
  // segment needed to replay from the older one; removes the rest. Best effort.
  void RemoveOldFiles(uint64_t newest) const;

 private:
  explicit StateDirectory(std::string path) : path_(std::move(path)) {}
  std::vector<File> List(absl::string_view prefix, absl::string_view suffix) const;

  std::string path_;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_STATE_DIRECTORY_H_
