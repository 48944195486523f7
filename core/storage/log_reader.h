// Reads and recovers log files written by LogWriter (format: log_format.h).
//
// Reading stops for good at the first damaged record. Nothing after damage is
// ever returned: a later record may depend on the lost one (e.g. a reward
// whose decision record was destroyed), so resynchronising past damage would
// silently apply an inconsistent history.

#ifndef GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_
#define GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::storage {

enum class ReadResult {
  kRecord,      // *type and *payload hold the next record.
  kEndOfFile,   // The log ended cleanly on a record boundary.
  kCorruption,  // See LogReader::corruption(). Also used for read errors.
};

struct LogCorruption {
  // Offset of the first byte of the damaged record; 0 for a bad or truncated
  // magic. Always equal to LogReader::good_offset() at the time of detection.
  uint64_t offset = 0;
  // Human-readable cause, e.g. "checksum mismatch",
  // "truncated payload (100 of 2048 bytes)".
  std::string reason;
};

// Sequential reader over one log file.
//
// The reader sees the file as it was at Open(): bytes appended later are
// ignored, so a log that is still being written reads as a consistent prefix
// (its tail may look torn). Memory use is bounded by one read buffer plus the
// current record, and a record's buffer is only sized after its length has
// been checked against the limit and the bytes actually in the file.
//
// Not thread-safe; use from one thread at a time.
class LogReader {
 public:
  // NotFound if `path` does not exist; other OS errors keep their errno code.
  // A damaged magic is not an Open() error: the first Next() reports it.
  static absl::StatusOr<std::unique_ptr<LogReader>> Open(const std::string& path);

  ~LogReader();
  LogReader(const LogReader&) = delete;
  LogReader& operator=(const LogReader&) = delete;

  // Reads the next record. kEndOfFile and kCorruption are final: every later
  // call returns the same result. On anything but kRecord, *payload is
  // cleared and *type is left alone.
  ReadResult Next(uint8_t* type, std::string* payload);

  // Valid after Next() returned kCorruption.
  const LogCorruption& corruption() const { return corruption_; }

  // OK unless the kCorruption result was caused by a failed read() rather
  // than by the bytes in the file. Callers must not truncate a log whose
  // reader stopped on an I/O error: the data may be perfectly fine.
  const absl::Status& io_status() const { return io_status_; }

  // End of the last record read successfully: kLogMagicSize once the magic
  // has been verified, 0 before that (or if the magic is bad). Truncating the
  // file to this offset leaves a clean log.
  uint64_t good_offset() const { return good_offset_; }

  // File size at Open().
  uint64_t file_size() const { return file_size_; }

 private:
  LogReader(std::string path, int fd, uint64_t file_size);

  // Verifies the magic; on failure records the corruption and returns false.
  bool ReadMagic();
  ReadResult Corrupt(std::string reason);
  // Copies up to n bytes into dst, through the read buffer for small reads
  // and directly for large ones. Returns fewer than n only at the end of the
  // snapshot or on a read error (then io_status_ is set).
  size_t ReadBytes(char* dst, size_t n);
  // One read() of at most n bytes, never past file_size_; 0 at the end or on
  // error.
  size_t ReadSome(char* dst, size_t n);

  std::string path_;
  int fd_;
  uint64_t file_size_;
  uint64_t read_pos_ = 0;  // File offset of the next read().

  std::unique_ptr<char[]> buf_;
  size_t buf_capacity_ = 0;
  size_t buf_begin_ = 0;  // Unconsumed bytes are buf_[buf_begin_, buf_end_).
  size_t buf_end_ = 0;

  bool magic_ok_ = false;
  std::optional<ReadResult> final_;  // Set once EOF or corruption is reached.
  uint64_t good_offset_ = 0;
  LogCorruption corruption_;
  absl::Status io_status_;
};

// Outcome of RecoverLog.
struct LogRecovery {
  uint64_t records = 0;                     // Records passed to `apply`.
  uint64_t good_offset = 0;                 // Size of the log after recovery (0 if missing).
  bool truncated = false;                   // True if damaged bytes were cut off.
  std::optional<LogCorruption> corruption;  // Set iff truncated.
  uint64_t discarded_bytes = 0;             // Bytes cut off (and saved), 0 if none.
  std::string discarded_path;               // Where they were saved, empty if none.
};

// Replays the log at `path` and repairs its tail so a LogWriter can append.
//
// Passes each good record, in order, to `apply`. If `apply` returns an error,
// stops and returns that error with the file untouched.
//
// When reading stops at a damaged record (torn write, bit rot, zeroed tail,
// ...), the bytes from that record to the end of the file are first copied to
// `path + ".corrupt-<offset>"` (with ".1", ".2", ... appended if that name is
// taken), which is fsynced, and only then is the log truncated to the end of
// the last good record and fsynced. A crash at any point therefore leaves
// either the original bytes or their copy. The damage is reported in the
// result, never silently accepted; logging it is the caller's job.
//
// Special cases:
//   * missing file: OK, 0 records, nothing is created;
//   * a file that is a strict prefix of the magic (including empty; left by a
//     crash while the log was being created): rewritten to the bare magic, 0
//     records, not reported as truncated;
//   * any other bad magic: DataLoss and the file is left untouched, since it
//     is probably not a log at all (wrong path) and truncating it would
//     destroy someone else's data;
//   * read errors: returned as-is, without truncating anything.
//
// Must not run concurrently with a LogWriter on the same file.
absl::StatusOr<LogRecovery> RecoverLog(
    const std::string& path,
    const std::function<absl::Status(uint8_t type, absl::string_view payload)>& apply);

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_
