#include "core/storage/log_writer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/storage/crc32c.h"
#include "core/storage/fault_injection.h"
#include "core/storage/file_util.h"
#include "core/storage/log_format.h"

namespace graphbandit::storage {
namespace {

// Keeping a buffer that once held a 64 MiB record would pin that memory for
// the life of the writer; above this size it is released after each append.
constexpr size_t kMaxRetainedBuffer = 1 << 20;

// glibc gives the GNU strerror_r (returns char*) under _GNU_SOURCE, which g++
// defines; the overloads keep this compiling against the XSI variant too.
[[maybe_unused]] const char* PickStrError(int rc, const char* buf) {
  return rc == 0 ? buf : "unknown error";
}
[[maybe_unused]] const char* PickStrError(const char* msg, const char*) { return msg; }

std::string ErrnoText(int err) {
  char buf[256];
  buf[0] = '\0';
  return absl::StrFormat("%s (errno %d)", PickStrError(strerror_r(err, buf, sizeof(buf)), buf),
                         err);
}

// Checks the first bytes of an existing, non-empty log. Uses its own
// descriptors because the append descriptor is write-only and appends. A
// version-1 log holding no record (a segment created by an older build that
// never got a record) is turned into an empty version-2 log; one that holds
// records is refused, since records of two formats cannot share a file.
absl::Status VerifyMagic(const std::string& path, uint64_t file_size) {
  if (file_size < kLogMagicSize) {
    return absl::DataLossError(
        absl::StrFormat("log %s is %d bytes, shorter than its %d-byte magic; run RecoverLog "
                        "before opening it for writing",
                        path, file_size, kLogMagicSize));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open for reading", path);
  char magic[kLogMagicSize];
  int err = 0;
  const absl::StatusOr<size_t> got = PreadUpTo(fd, magic, sizeof(magic), 0, path, &err);
  CloseQuietly(fd);
  if (!got.ok()) return OsError(err, "read magic of", path);
  const absl::string_view seen(magic, *got);
  if (seen == kLogMagic) return absl::OkStatus();
  if (seen == kLogMagicV1 && file_size == kLogMagicSize) {
    const int out = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (out < 0) return OsError(errno, "open", path);
    absl::Status status;
    if (::pwrite(out, kLogMagic.data(), kLogMagicSize, 0) != static_cast<ssize_t>(kLogMagicSize)) {
      status = OsError(errno, "rewrite magic of", path);
    } else if (::fsync(out) != 0) {
      status = OsError(errno, "fsync", path);
    }
    CloseQuietly(out);
    return status;
  }
  if (seen == kLogMagicV1) {
    return absl::FailedPreconditionError(
        absl::StrFormat("log %s holds version-1 records; new records go to a new segment", path));
  }
  return absl::DataLossError(absl::StrFormat("%s is not a graphbandit log (bad magic)", path));
}

void PutLE32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}
void PutLE64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xffu);
}

}  // namespace

absl::StatusOr<std::unique_ptr<LogWriter>> LogWriter::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return OsError(errno, "open log", path);

  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    CloseQuietly(fd);
    return OsError(err, "stat log", path);
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);

  if (size == 0) {
    int err = 0;
    const absl::Status write_status = WriteFully(fd, kLogMagic.data(), kLogMagic.size(), path,
                                                 /*written=*/nullptr, &err);
    if (write_status.ok() && ::fsync(fd) != 0) err = errno;
    if (err != 0) {
      CloseQuietly(fd);
      return absl::DataLossError(
          absl::StrFormat("writing magic to new log %s: %s", path, ErrnoText(err)));
    }
    size = kLogMagicSize;
    // Covers the file we just created and also an empty file left by a crash
    // during an earlier creation, whose directory entry may never have been
    // synced either.
    if (absl::Status s = SyncParentDir(path); !s.ok()) {
      CloseQuietly(fd);
      return s;
    }
  } else if (absl::Status s = VerifyMagic(path, size); !s.ok()) {
    CloseQuietly(fd);
    return s;
  }
  return std::unique_ptr<LogWriter>(new LogWriter(path, fd, size));
}

LogWriter::LogWriter(std::string path, int fd, uint64_t size)
    : path_(std::move(path)), fd_(fd), size_(size) {}

LogWriter::~LogWriter() { CloseQuietly(fd_); }

absl::Status LogWriter::Poison(absl::Status status) {
  if (failed_.ok()) failed_ = std::move(status);
  return failed_;
}

absl::Status LogWriter::CheckUsable() const {
  if (!failed_.ok()) return failed_;
  if (fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat("log ", path_, " is closed"));
  }
  return absl::OkStatus();
}

absl::Status LogWriter::Append(uint64_t seq, uint8_t type, absl::string_view payload) {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  if (type == kInvalidRecordType) {
    return absl::InvalidArgumentError("log record type 0 is reserved");
  }
  if (payload.size() > kMaxRecordPayload) {
    return absl::InvalidArgumentError(
        absl::StrFormat("log record payload of %d bytes exceeds the %d-byte limit", payload.size(),
                        kMaxRecordPayload));
  }

  // One buffer, one write loop: with O_APPEND a single write() places the
  // record contiguously, and a crash can leave at most a prefix of it.
  char header[kLogHeaderSize] = {};
  PutLE32(header + 4, Mask(Crc32c(payload)));
  PutLE32(header + 8, static_cast<uint32_t>(payload.size()));
  header[12] = static_cast<char>(type);
  PutLE64(header + 16, seq);
  PutLE64(header + 24, size_);
  PutLE32(header, Mask(Crc32cExtend(0, header + 4, kLogHeaderSize - 4)));
  buf_.clear();
  buf_.reserve(kLogHeaderSize + payload.size());
  buf_.append(header, sizeof(header));
  buf_.append(payload.data(), payload.size());

  size_t written = 0;
  int err = InjectedLogFault(LogIo::kWrite, path_);
  const absl::Status write_status =
      err != 0 ? OsError(err, "write", path_)
               : WriteFully(fd_, buf_.data(), buf_.size(), path_, &written, &err);
  size_ += written;
  if (buf_.capacity() > kMaxRetainedBuffer) std::string().swap(buf_);
  if (!write_status.ok()) {
    if (errno_ == 0) errno_ = err;
    return Poison(absl::DataLossError(absl::StrFormat(
        "append to log %s failed after %d of %d bytes at offset %d: %s; the "
        "log may end in a partial record and must be recovered before reuse",
        path_, written, kLogHeaderSize + payload.size(), size_ - written, ErrnoText(err))));
  }
  return absl::OkStatus();
}

absl::Status LogWriter::Sync() {
  if (absl::Status s = CheckUsable(); !s.ok()) return s;
  int err = InjectedLogFault(LogIo::kSync, path_);
  if (err != 0 || ::fdatasync(fd_) != 0) {
    if (err == 0) err = errno;
    if (errno_ == 0) errno_ = err;
    return Poison(absl::DataLossError(
        absl::StrFormat("fdatasync of log %s failed: %s; appended records may not be durable",
                        path_, ErrnoText(err))));
  }
  return absl::OkStatus();
}

absl::Status LogWriter::Close() {
  if (fd_ < 0) return absl::OkStatus();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) {
    const int err = errno;
    return Poison(
        absl::DataLossError(absl::StrFormat("close of log %s failed: %s", path_, ErrnoText(err))));
  }
  return failed_;
}

}  // namespace graphbandit::storage
