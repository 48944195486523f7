#include "core/model/state_directory.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace graphbandit {

absl::Status MakeDirectories(const std::string& path) {
  for (size_t pos = 0; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    const std::string partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      const int error = errno;
      return absl::ErrnoToStatus(error, absl::StrFormat("cannot create directory \"%s\"", partial));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<StateDirectory> StateDirectory::Create(std::string path) {
  if (absl::Status s = MakeDirectories(path); !s.ok()) return s;
  return StateDirectory(std::move(path));
}

std::string StateDirectory::SegmentPath(uint64_t first_seq) const {
  return absl::StrFormat("%s/log-%020d.log", path_, first_seq);
}

std::string StateDirectory::SnapshotPath(uint64_t seq) const {
  return absl::StrFormat("%s/snapshot-%020d.snap", path_, seq);
}

std::vector<StateDirectory::File> StateDirectory::Segments() const { return List("log-", ".log"); }

std::vector<StateDirectory::File> StateDirectory::Snapshots() const {
  return List("snapshot-", ".snap");
}

// Files "<prefix><20 digits><suffix>", by number.
std::vector<StateDirectory::File> StateDirectory::List(absl::string_view prefix,
                                                       absl::string_view suffix) const {
  std::vector<File> files;
  if (DIR* d = opendir(path_.c_str())) {
    while (dirent* e = readdir(d)) {
      absl::string_view name = e->d_name;
      if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix)) continue;
      absl::string_view digits =
          name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
      uint64_t number = 0;
      if (digits.size() == 20 && absl::SimpleAtoi(digits, &number)) {
        files.emplace_back(number, path_ + "/" + std::string(name));
      }
    }
    closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> StateDirectory::RemoveTemporaryFiles() const {
  std::vector<std::string> removed;
  for (const auto& [seq, path] : List("snapshot-", ".snap.tmp")) {
    if (::unlink(path.c_str()) == 0) removed.push_back(path);
  }
  return removed;
}

absl::StatusOr<std::string> StateDirectory::SetAside(const std::string& path,
                                                     absl::string_view why) {
  std::string target = absl::StrCat(path, ".", why);
  for (int i = 1; access(target.c_str(), F_OK) == 0; ++i)
    target = absl::StrCat(path, ".", why, ".", i);
  if (std::rename(path.c_str(), target.c_str()) != 0) {
    const int error = errno;
    return absl::ErrnoToStatus(error,
                               absl::StrFormat("cannot move \"%s\" to \"%s\"", path, target));
  }
  return target;
}

std::string StateDirectory::SetAsideReport(const std::string& path, absl::string_view why) {
  absl::StatusOr<std::string> moved = SetAside(path, why);
  if (!moved.ok()) return absl::StrCat("not moved: ", moved.status().message());
  return absl::StrCat("moved to ", *moved);
}

void StateDirectory::RemoveOldFiles(uint64_t newest) const {
  // Keep the two newest snapshots and every segment needed to replay from the older one.
  auto snapshots = Snapshots();
  uint64_t keep_from = 0;
  int kept = 0;
  for (auto it = snapshots.rbegin(); it != snapshots.rend(); ++it) {
    if (it->first > newest) continue;
    if (kept < 2) {
      keep_from = it->first;
      ++kept;
    } else {
      ::unlink(it->second.c_str());
    }
  }
  if (kept < 2) return;  // nothing to fall back on yet: keep every segment
  auto segments = Segments();
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    if (segments[i + 1].first <= keep_from + 1) ::unlink(segments[i].second.c_str());
  }
}

}  // namespace graphbandit
