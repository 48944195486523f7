#include "core/storage/log_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/storage/crc32c.h"
#include "core/storage/file_util.h"
#include "core/storage/log_format.h"

namespace graphbandit::storage {
namespace {

// Big enough that syscall overhead is negligible against checksumming, small
// enough not to matter next to the records themselves.
constexpr size_t kReadChunk = 256 << 10;

uint32_t LoadLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// Returns the first min(max_bytes, file size) bytes of `path`.
absl::StatusOr<std::string> ReadHead(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open", path);
  std::string head(max_bytes, '\0');
  absl::StatusOr<size_t> got = PreadUpTo(fd, head.data(), max_bytes, 0, path);
  CloseQuietly(fd);
  if (!got.ok()) return got.status();
  head.resize(*got);
  return head;
}

// Completes a log whose creation was interrupted before the whole magic
// reached the disk. The existing bytes are a prefix of the magic, so writing
// the full magic over them at offset 0 yields exactly the magic.
absl::Status RewriteMagic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open", path);
  absl::Status status;
  size_t done = 0;
  while (status.ok() && done < kLogMagicSize) {
    const ssize_t r =
        ::pwrite(fd, kLogMagic.data() + done, kLogMagicSize - done, static_cast<off_t>(done));
    if (r < 0) {
      if (errno == EINTR) continue;
      status = OsError(errno, "write magic to", path);
    } else if (r == 0) {
      status = OsError(EIO, "write magic to", path);
    } else {
      done += static_cast<size_t>(r);
    }
  }
  if (status.ok() && ::fsync(fd) != 0) status = OsError(errno, "fsync", path);
  CloseQuietly(fd);
  if (!status.ok()) return status;
  // The crash that left the prefix may also have lost the directory entry's
  // durability; the file is only safe once that is synced too.
  return SyncParentDir(path);
}

// Creates a new file for the discarded bytes without overwriting the copy
// kept by an earlier recovery at the same offset. Returns its descriptor.
absl::StatusOr<int> CreateForensicFile(const std::string& base, std::string* chosen) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::string name = attempt == 0 ? base : absl::StrCat(base, ".", attempt);
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      *chosen = std::move(name);
      return fd;
    }
    if (errno != EEXIST) return OsError(errno, "create", name);
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("too many existing copies named ", base, "[.N]"));
}

// Copies [offset, EOF) of `path` into a new forensic file, durably. Streams
// in chunks: the damaged region may be most of a large log.
absl::Status SaveDiscardedBytes(const std::string& path, uint64_t offset, uint64_t* copied,
                                std::string* saved_path) {
  *copied = 0;
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) return OsError(errno, "open", path);
  std::string name;
  absl::StatusOr<int> out = CreateForensicFile(absl::StrCat(path, ".corrupt-", offset), &name);
  if (!out.ok()) {
    CloseQuietly(in);
    return out.status();
  }

  absl::Status status;
  std::unique_ptr<char[]> chunk(new char[kReadChunk]);
  for (;;) {
    absl::StatusOr<size_t> got = PreadUpTo(in, chunk.get(), kReadChunk, offset + *copied, path);
    if (!got.ok()) {
      status = got.status();
      break;
    }
    if (*got == 0) break;
    status = WriteFully(*out, chunk.get(), *got, name);
    if (!status.ok()) break;
    *copied += *got;
  }
  if (status.ok() && ::fsync(*out) != 0) status = OsError(errno, "fsync", name);
  CloseQuietly(*out);
  CloseQuietly(in);
  if (status.ok()) status = SyncParentDir(name);
  if (status.ok()) *saved_path = std::move(name);
  return status;
}

absl::Status TruncateDurably(const std::string& path, uint64_t size) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open", path);
  absl::Status status;
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    status = OsError(errno, "truncate", path);
  } else if (::fsync(fd) != 0) {
    status = OsError(errno, "fsync", path);
  }
  CloseQuietly(fd);
  return status;
}

}  // namespace

// ---------------------------------------------------------------------------
// LogReader

absl::StatusOr<std::unique_ptr<LogReader>> LogReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return OsError(errno, "open log", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    CloseQuietly(fd);
    return OsError(err, "stat log", path);
  }
  if (!S_ISREG(st.st_mode)) {
    CloseQuietly(fd);
    return absl::FailedPreconditionError(absl::StrCat("log ", path, " is not a regular file"));
  }
  return std::unique_ptr<LogReader>(new LogReader(path, fd, static_cast<uint64_t>(st.st_size)));
}

LogReader::LogReader(std::string path, int fd, uint64_t file_size)
    : path_(std::move(path)), fd_(fd), file_size_(file_size) {}

LogReader::~LogReader() { CloseQuietly(fd_); }

ReadResult LogReader::Corrupt(std::string reason) {
  corruption_.offset = good_offset_;
  corruption_.reason = std::move(reason);
  final_ = ReadResult::kCorruption;
  return ReadResult::kCorruption;
}

size_t LogReader::ReadSome(char* dst, size_t n) {
  const uint64_t left = file_size_ - read_pos_;
  if (n > left) n = static_cast<size_t>(left);
  if (n == 0) return 0;
  for (;;) {
    const ssize_t r = ::read(fd_, dst, n);
    if (r < 0) {
      if (errno == EINTR) continue;
      io_status_ = OsError(errno, "read log", path_);
      return 0;
    }
    // r == 0 here means the file shrank under us; callers see a short read.
    read_pos_ += static_cast<uint64_t>(r);
    return static_cast<size_t>(r);
  }
}

size_t LogReader::ReadBytes(char* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (buf_begin_ < buf_end_) {
      const size_t take = std::min(n - got, buf_end_ - buf_begin_);
      memcpy(dst + got, buf_.get() + buf_begin_, take);
      buf_begin_ += take;
      got += take;
      continue;
    }
    // Buffer empty. Large reads bypass it to avoid a second copy.
    size_t r;
    if (n - got >= kReadChunk) {
      r = ReadSome(dst + got, n - got);
      got += r;
    } else {
      if (buf_ == nullptr) {
        // No point in a 256 KiB buffer for a 100-byte file.
        buf_capacity_ =
            static_cast<size_t>(std::min<uint64_t>(kReadChunk, std::max<uint64_t>(file_size_, 1)));
        buf_.reset(new char[buf_capacity_]);
      }
      r = ReadSome(buf_.get(), buf_capacity_);
      buf_begin_ = 0;
      buf_end_ = r;
    }
    if (r == 0) break;
  }
  return got;
}

bool LogReader::ReadMagic() {
  char magic[kLogMagicSize];
  const size_t got = ReadBytes(magic, sizeof(magic));
  if (!io_status_.ok()) {
    Corrupt(std::string(io_status_.message()));
    return false;
  }
  const absl::string_view seen(magic, got);
  if (got < kLogMagicSize && seen == kLogMagic.substr(0, got)) {
    Corrupt(absl::StrFormat("truncated magic (%d of %d bytes)", got, kLogMagicSize));
    return false;
  }
  if (seen != kLogMagic) {
    Corrupt("bad magic");
    return false;
  }
  magic_ok_ = true;
  good_offset_ = kLogMagicSize;
  return true;
}

ReadResult LogReader::Next(uint8_t* type, std::string* payload) {
  payload->clear();
  if (final_.has_value()) return *final_;
  if (!magic_ok_ && !ReadMagic()) return *final_;

  // good_offset_ is also the read position: the reader never gets ahead of
  // the last good record except while reading the current one.
  const uint64_t left = file_size_ - good_offset_;
  if (left == 0) {
    final_ = ReadResult::kEndOfFile;
    return *final_;
  }

  char header[kLogHeaderSize];
  const size_t header_got =
      ReadBytes(header, static_cast<size_t>(std::min<uint64_t>(left, kLogHeaderSize)));
  if (!io_status_.ok()) return Corrupt(std::string(io_status_.message()));
  if (header_got < kLogHeaderSize) {
    return Corrupt(
        absl::StrFormat("truncated header (%d of %d bytes)", header_got, kLogHeaderSize));
  }

  const uint32_t stored_crc = Unmask(LoadLE32(header));
  const uint32_t length = LoadLE32(header + 4);
  const uint8_t record_type = static_cast<unsigned char>(header[8]);

  // Checked before the length so a zero-filled tail gets the specific reason.
  if (record_type == kInvalidRecordType) return Corrupt("zero record type");
  if (length > kMaxRecordPayload) {
    return Corrupt(absl::StrFormat("record length %d exceeds the %d MiB limit", length,
                                   kMaxRecordPayload >> 20));
  }
  const uint64_t payload_left = left - kLogHeaderSize;
  if (length > payload_left) {
    // Report without reading: the length may be garbage, and allocating it
    // would let a damaged header demand memory the file cannot back.
    return Corrupt(absl::StrFormat("truncated payload (%d of %d bytes)", payload_left, length));
  }

  payload->resize(length);
  const size_t payload_got = ReadBytes(payload->data(), length);
  if (!io_status_.ok()) {
    payload->clear();
    return Corrupt(std::string(io_status_.message()));
  }
  if (payload_got < length) {  // The file shrank since Open().
    payload->clear();
    return Corrupt(absl::StrFormat("truncated payload (%d of %d bytes)", payload_got, length));
  }

  uint32_t crc = Crc32cExtend(0, header + 8, 1);
  crc = Crc32cExtend(crc, payload->data(), payload->size());
  if (crc != stored_crc) {
    payload->clear();
    return Corrupt("checksum mismatch");
  }

  good_offset_ += kLogHeaderSize + length;
  *type = record_type;
  return ReadResult::kRecord;
}

// ---------------------------------------------------------------------------
// RecoverLog

absl::StatusOr<LogRecovery> RecoverLog(
    const std::string& path,
    const std::function<absl::Status(uint8_t type, absl::string_view payload)>& apply) {
  LogRecovery result;

  absl::StatusOr<std::unique_ptr<LogReader>> opened = LogReader::Open(path);
  if (absl::IsNotFound(opened.status())) return result;  // Nothing logged yet.
  if (!opened.ok()) return opened.status();
  LogReader& reader = **opened;

  uint8_t type = 0;
  std::string payload;
  for (;;) {
    const ReadResult r = reader.Next(&type, &payload);
    if (r == ReadResult::kRecord) {
      if (absl::Status s = apply(type, payload); !s.ok()) return s;
      ++result.records;
      continue;
    }
    if (r == ReadResult::kEndOfFile) {
      result.good_offset = reader.good_offset();
      return result;
    }
    break;
  }

  if (!reader.io_status().ok()) return reader.io_status();
  const LogCorruption& corruption = reader.corruption();

  if (reader.good_offset() < kLogMagicSize) {
    // The magic itself is bad. A strict prefix of it (empty included) can only
    // come from a crash while the log was created: nothing was ever recorded,
    // so finishing the magic loses nothing.
    if (reader.file_size() < kLogMagicSize) {
      absl::StatusOr<std::string> head = ReadHead(path, kLogMagicSize);
      if (!head.ok()) return head.status();
      if (head->size() < kLogMagicSize && *head == kLogMagic.substr(0, head->size())) {
        if (absl::Status s = RewriteMagic(path); !s.ok()) return s;
        result.good_offset = kLogMagicSize;
        return result;
      }
    }
    return absl::DataLossError(absl::StrFormat("%s is not a graphbandit log (%s); left untouched",
                                               path, corruption.reason));
  }

  // Damaged record or torn tail: keep a copy of everything from the damaged
  // record on, then cut it off so the writer can append after good data.
  result.good_offset = reader.good_offset();
  result.corruption = corruption;
  if (absl::Status s = SaveDiscardedBytes(path, result.good_offset, &result.discarded_bytes,
                                          &result.discarded_path);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = TruncateDurably(path, result.good_offset); !s.ok()) {
    return s;
  }
  result.truncated = true;
  return result;
}

}  // namespace graphbandit::storage
