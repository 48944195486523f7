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

// Copies kept of damaged regions that stay in one log (beyond, they are only listed): a log
// with damage everywhere must not cost an fsync per region at every start.
constexpr size_t kMaxSavedRegions = 100;

uint32_t LoadLE32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

uint64_t LoadLE64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
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

// Copies [offset, offset + length) of `path` (length UINT64_MAX: to the end)
// into a new forensic file, durably. Streams in chunks: the damaged region may
// be most of a large log.
absl::Status SaveDiscardedBytes(const std::string& path, uint64_t offset, uint64_t length,
                                uint64_t* copied, std::string* saved_path) {
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
  while (*copied < length) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(kReadChunk, length - *copied));
    absl::StatusOr<size_t> got = PreadUpTo(in, chunk.get(), want, offset + *copied, path);
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

// Keeps a copy of a damaged region that stays in the log. An earlier recovery
// of the same log saved the same region under the same name: that copy is kept
// instead of making another one at every start.
absl::Status SaveSkippedRegion(const std::string& path, LogDamage* damage) {
  const std::string name = absl::StrCat(path, ".corrupt-", damage->offset);
  struct stat st;
  if (::stat(name.c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == damage->length) {
    damage->saved_path = name;
    return absl::OkStatus();
  }
  uint64_t copied = 0;
  return SaveDiscardedBytes(path, damage->offset, damage->length, &copied, &damage->saved_path);
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

struct LogReader::Header {
  uint32_t payload_crc = 0;
  uint32_t length = 0;
  uint8_t type = 0;
  uint64_t seq = 0;
};

ReadResult LogReader::Corrupt(std::string reason) {
  corruption_.offset = good_offset_;
  corruption_.reason = std::move(reason);
  final_ = ReadResult::kCorruption;
  return ReadResult::kCorruption;
}

const char* LogReader::Window(uint64_t pos, size_t n) {
  if (pos > file_size_ || n > file_size_ - pos) return nullptr;
  if (pos >= win_pos_ && pos - win_pos_ <= win_len_ && n <= win_len_ - (pos - win_pos_)) {
    return win_.get() + (pos - win_pos_);
  }
  // Refill from `pos`: at least one chunk (sequential reading and scanning
  // move forward), at least n bytes, never past the end of the file.
  const size_t want =
      static_cast<size_t>(std::min<uint64_t>(std::max(n, kReadChunk), file_size_ - pos));
  if (want > win_capacity_) {
    win_.reset(new char[want]);
    win_capacity_ = want;
  }
  win_len_ = 0;
  absl::StatusOr<size_t> got = PreadUpTo(fd_, win_.get(), want, pos, path_);
  if (!got.ok()) {
    io_status_ = got.status();
    return nullptr;
  }
  win_pos_ = pos;
  win_len_ = *got;  // short only if the file shrank since Open()
  return n <= win_len_ ? win_.get() : nullptr;
}

bool LogReader::ReadMagic() {
  const uint64_t avail = std::min<uint64_t>(file_size_, kLogMagicSize);
  const char* magic = Window(0, static_cast<size_t>(avail));
  if (!io_status_.ok()) {
    Corrupt(std::string(io_status_.message()));
    return false;
  }
  const absl::string_view seen =
      magic == nullptr ? absl::string_view() : absl::string_view(magic, avail);
  if (seen.size() < kLogMagicSize &&
      (seen == kLogMagic.substr(0, seen.size()) || seen == kLogMagicV1.substr(0, seen.size()))) {
    Corrupt(absl::StrFormat("truncated magic (%d of %d bytes)", seen.size(), kLogMagicSize));
    return false;
  }
  if (seen == kLogMagic) {
    version_ = 2;
  } else if (seen == kLogMagicV1) {
    version_ = 1;
  } else {
    Corrupt("bad magic");
    return false;
  }
  good_offset_ = kLogMagicSize;
  pos_ = kLogMagicSize;
  return true;
}

ReadResult LogReader::Next(uint8_t* type, std::string* payload) {
  payload->clear();
  if (final_.has_value()) return *final_;
  if (version_ == 0 && !ReadMagic()) return *final_;
  return version_ == 1 ? NextV1(type, payload) : NextV2(type, payload);
}

ReadResult LogReader::NextV1(uint8_t* type, std::string* payload) {
  // good_offset_ is also the read position: the reader never gets ahead of
  // the last good record except while reading the current one.
  const uint64_t left = file_size_ - good_offset_;
  if (left == 0) {
    final_ = ReadResult::kEndOfFile;
    return *final_;
  }
  if (left < kLogHeaderSizeV1) {
    return Corrupt(absl::StrFormat("truncated header (%d of %d bytes)", left, kLogHeaderSizeV1));
  }
  const char* header = Window(good_offset_, kLogHeaderSizeV1);
  if (header == nullptr) {
    if (!io_status_.ok()) return Corrupt(std::string(io_status_.message()));
    return Corrupt("the log shrank while it was read");
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
  const uint64_t payload_left = left - kLogHeaderSizeV1;
  if (length > payload_left) {
    // Report without reading: the length may be garbage, and allocating it
    // would let a damaged header demand memory the file cannot back.
    return Corrupt(absl::StrFormat("truncated payload (%d of %d bytes)", payload_left, length));
  }
  const char* record = Window(good_offset_, kLogHeaderSizeV1 + length);
  if (record == nullptr) {
    if (!io_status_.ok()) return Corrupt(std::string(io_status_.message()));
    return Corrupt("the log shrank while it was read");
  }
  uint32_t crc = Crc32cExtend(0, record + 8, 1);
  crc = Crc32cExtend(crc, record + kLogHeaderSizeV1, length);
  if (crc != stored_crc) return Corrupt("checksum mismatch");

  payload->assign(record + kLogHeaderSizeV1, length);
  good_offset_ += kLogHeaderSizeV1 + length;
  *type = record_type;
  return ReadResult::kRecord;
}

LogReader::Check LogReader::CheckRecordAt(uint64_t pos, Header* header, std::string* reason) {
  const uint64_t left = file_size_ - pos;
  if (left < kLogHeaderSize) {
    *reason = absl::StrFormat("truncated header (%d of %d bytes)", left, kLogHeaderSize);
    return Check::kTruncated;
  }
  const char* h = Window(pos, kLogHeaderSize);
  if (h == nullptr) {
    if (!io_status_.ok()) return Check::kIoError;
    *reason = "the log shrank while it was read";
    return Check::kTruncated;
  }
  if (Unmask(LoadLE32(h)) != Crc32cExtend(0, h + 4, kLogHeaderSize - 4)) {
    bool zero = true;
    for (size_t i = 0; i < kLogHeaderSize && zero; ++i) zero = h[i] == 0;
    *reason = zero ? "zeroed header" : "header checksum mismatch";
    return Check::kBadHeader;
  }
  header->payload_crc = Unmask(LoadLE32(h + 4));
  header->length = LoadLE32(h + 8);
  header->type = static_cast<unsigned char>(h[12]);
  header->seq = LoadLE64(h + 16);
  const uint64_t offset = LoadLE64(h + 24);
  // The checksum verified, so these only fail for a header written by
  // something else (or a copy of a log moved within a file).
  if (offset != pos) {
    *reason = absl::StrFormat("header says it is at offset %d", offset);
    return Check::kBadHeader;
  }
  if (header->type == kInvalidRecordType || h[13] != 0 || h[14] != 0 || h[15] != 0) {
    *reason = "invalid record type";
    return Check::kBadHeader;
  }
  if (header->length > kMaxRecordPayload) {
    *reason = absl::StrFormat("record length %d exceeds the %d MiB limit", header->length,
                              kMaxRecordPayload >> 20);
    return Check::kBadHeader;
  }
  if (header->length > left - kLogHeaderSize) {
    *reason = absl::StrFormat("truncated payload (%d of %d bytes)", left - kLogHeaderSize,
                              header->length);
    return Check::kTruncated;
  }
  const char* payload = Window(pos + kLogHeaderSize, header->length);
  if (payload == nullptr) {
    if (!io_status_.ok()) return Check::kIoError;
    *reason = "the log shrank while it was read";
    return Check::kTruncated;
  }
  if (Crc32cExtend(0, payload, header->length) != header->payload_crc) {
    *reason = "payload checksum mismatch";
    return Check::kBadPayload;
  }
  return Check::kGood;
}

uint64_t LogReader::FindNextRecord(uint64_t from) {
  Header header;
  std::string ignored;
  for (uint64_t pos = from; pos + kLogHeaderSize <= file_size_; ++pos) {
    // A cheap filter first: the offset field must name this very position.
    const char* h = Window(pos, kLogHeaderSize);
    if (h == nullptr) return file_size_;  // a read error (io_status_ is set)
    if (LoadLE64(h + 24) != pos) continue;
    // A record whose header verifies is where the damage ends, even if its own payload is
    // damaged too: the caller then reports it with its sequence number and type.
    const Check check = CheckRecordAt(pos, &header, &ignored);
    if (check == Check::kGood || check == Check::kBadPayload) return pos;
    if (check == Check::kIoError) return file_size_;
  }
  return file_size_;
}

ReadResult LogReader::NextV2(uint8_t* type, std::string* payload) {
  for (;;) {
    if (pos_ == file_size_) {
      if (pending_.empty()) {
        final_ = ReadResult::kEndOfFile;
        return *final_;
      }
      // No intact record after the damage: a damaged tail.
      return Corrupt(pending_.front().reason);
    }
    Header header;
    std::string reason;
    const Check check = CheckRecordAt(pos_, &header, &reason);
    switch (check) {
      case Check::kGood: {
        skipped_.insert(skipped_.end(), pending_.begin(), pending_.end());
        pending_.clear();
        payload->assign(Window(pos_ + kLogHeaderSize, header.length), header.length);
        *type = header.type;
        seq_ = header.seq;
        pos_ += kLogHeaderSize + header.length;
        good_offset_ = pos_;
        return ReadResult::kRecord;
      }
      case Check::kIoError:
        return Corrupt(std::string(io_status_.message()));
      case Check::kBadPayload: {
        // The header verified: its length can be trusted to step over the record.
        LogDamage damage;
        damage.offset = pos_;
        damage.length = kLogHeaderSize + header.length;
        damage.reason = std::move(reason);
        damage.seq = header.seq;
        damage.type = header.type;
        pending_.push_back(std::move(damage));
        pos_ += kLogHeaderSize + header.length;
        break;
      }
      case Check::kTruncated:
      case Check::kBadHeader: {
        // Nothing here says where the record ends: search for the next one.
        const uint64_t next = FindNextRecord(pos_ + 1);
        if (!io_status_.ok()) return Corrupt(std::string(io_status_.message()));
        LogDamage damage;
        damage.offset = pos_;
        damage.length = next - pos_;
        damage.reason = std::move(reason);
        pending_.push_back(std::move(damage));
        pos_ = next;
        break;
      }
    }
  }
}

// ---------------------------------------------------------------------------
// RecoverLog

absl::StatusOr<LogRecovery> RecoverLog(const std::string& path, uint64_t first_seq,
                                       const ApplyRecord& apply) {
  LogRecovery result;

  absl::StatusOr<std::unique_ptr<LogReader>> opened = LogReader::Open(path);
  if (absl::IsNotFound(opened.status())) return result;  // Nothing logged yet.
  if (!opened.ok()) return opened.status();
  LogReader& reader = **opened;

  uint8_t type = 0;
  std::string payload;
  ReadResult r;
  for (;;) {
    r = reader.Next(&type, &payload);
    if (r != ReadResult::kRecord) break;
    const uint64_t seq = reader.version() == 1 ? first_seq + result.records : reader.seq();
    if (absl::Status s = apply(seq, type, payload); !s.ok()) return s;
    ++result.records;
    result.last_seq = seq;
  }
  result.version = reader.version();
  if (!reader.io_status().ok()) return reader.io_status();
  result.skipped = reader.skipped();
  for (size_t i = 0; i < result.skipped.size() && i < kMaxSavedRegions; ++i) {
    if (absl::Status s = SaveSkippedRegion(path, &result.skipped[i]); !s.ok()) return s;
  }
  if (r == ReadResult::kEndOfFile) {
    result.good_offset = reader.good_offset();
    return result;
  }
  const LogCorruption& corruption = reader.corruption();

  if (reader.good_offset() < kLogMagicSize) {
    // The magic itself is bad. A strict prefix of it (empty included) can only
    // come from a crash while the log was created: nothing was ever recorded,
    // so finishing the magic loses nothing.
    if (reader.file_size() < kLogMagicSize) {
      absl::StatusOr<std::string> head = ReadHead(path, kLogMagicSize);
      if (!head.ok()) return head.status();
      if (head->size() < kLogMagicSize && (*head == kLogMagic.substr(0, head->size()) ||
                                           *head == kLogMagicV1.substr(0, head->size()))) {
        if (absl::Status s = RewriteMagic(path); !s.ok()) return s;
        result.good_offset = kLogMagicSize;
        result.version = 2;
        return result;
      }
    }
    return absl::DataLossError(absl::StrFormat("%s is not a graphbandit log (%s); left untouched",
                                               path, corruption.reason));
  }

  // Damaged tail: keep a copy of everything from the first damaged record on,
  // then cut it off so the writer can append after good data.
  result.good_offset = reader.good_offset();
  result.corruption = corruption;
  result.tail = reader.tail();
  if (absl::Status s = SaveDiscardedBytes(path, result.good_offset, UINT64_MAX,
                                          &result.discarded_bytes, &result.discarded_path);
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
