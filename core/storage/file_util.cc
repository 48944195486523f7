#include "core/storage/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"

namespace graphbandit::storage {

absl::Status OsError(int err, absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

void CloseQuietly(int fd) {
  if (fd >= 0) (void)::close(fd);
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status SyncParentDir(const std::string& path) {
  const std::string dir = ParentDir(path);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open directory", dir);
  absl::Status status;
  if (::fsync(fd) != 0) status = OsError(errno, "fsync directory", dir);
  CloseQuietly(fd);
  return status;
}

absl::Status WriteFully(int fd, const char* data, size_t n,
                        const std::string& path, size_t* written, int* error) {
  size_t done = 0;
  int err = 0;
  while (done < n) {
    const ssize_t r = ::write(fd, data + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (r == 0) {  // Not expected for regular files; avoid spinning.
      err = EIO;
      break;
    }
    done += static_cast<size_t>(r);
  }
  if (written != nullptr) *written = done;
  if (error != nullptr) *error = err;
  if (err != 0) return OsError(err, "write", path);
  return absl::OkStatus();
}

absl::StatusOr<size_t> PreadUpTo(int fd, char* dst, size_t n, uint64_t offset,
                                 const std::string& path, int* error) {
  size_t got = 0;
  int err = 0;
  while (got < n) {
    const ssize_t r = ::pread(fd, dst + got, n - got,
                              static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      err = errno;
      break;
    }
    if (r == 0) break;  // End of file.
    got += static_cast<size_t>(r);
  }
  if (error != nullptr) *error = err;
  if (err != 0) return OsError(err, "read", path);
  return got;
}

}  // namespace graphbandit::storage
