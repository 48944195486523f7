#include "core/storage/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

absl::Status WriteFully(int fd, const char* data, size_t n, const std::string& path,
                        size_t* written, int* error) {
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
    const ssize_t r = ::pread(fd, dst + got, n - got, static_cast<off_t>(offset + got));
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

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag) {
  constexpr size_t kMaxSecretFileBytes = 1 << 20;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s: cannot read %s", flag, path));
  }
  std::ostringstream content;
  content << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s: error reading %s", flag, path));
  }
  std::string text = content.str();
  if (text.size() > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s: %s is larger than %d bytes", flag, path, kMaxSecretFileBytes));
  }
  return text;
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path, absl::string_view flag) {
  absl::StatusOr<std::string> content = ReadSecretFile(path, flag);
  if (!content.ok()) return content.status();
  std::string token(absl::StripAsciiWhitespace(*content));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s: %s holds no token", flag, path));
  }
  for (const char c : token) {
    // Visible ASCII only: what an HTTP/2 header value can carry and a person
    // can paste.
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s: the token in %s must be one line of visible ASCII characters "
                          "(no spaces)",
                          flag, path));
    }
  }
  return token;
}

}  // namespace graphbandit::storage
