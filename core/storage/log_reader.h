// Reads and recovers log files written by LogWriter (format: log_format.h).
//
// Version 2 logs are read past damage: a damaged record is reported (with its sequence number
// and type when its header still verifies) and reading resumes at the next record that
// verifies. Which of the records after damage may be applied is the caller's decision (a reward
// whose decision record was lost must not be); the reader hands over every intact record with
// its sequence number and lists what it passed over. Version 1 logs have no resynchronisation
// points: reading stops for good at the first damaged record.

#ifndef GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_
#define GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::storage {

enum class ReadResult {
  kRecord,      // *type and *payload hold the next record.
  kEndOfFile,   // The log ended cleanly on a record boundary.
  kCorruption,  // A damaged tail (no intact record after it), see LogReader::corruption();
                // also used for read errors. In a version-1 log, any damage.
};

struct LogCorruption {
  // Offset of the first byte of the damaged record; 0 for a bad or truncated
  // magic. Always equal to LogReader::good_offset() at the time of detection.
  uint64_t offset = 0;
  // Human-readable cause, e.g. "payload checksum mismatch",
  // "truncated payload (100 of 2048 bytes)".
  std::string reason;
};

// A damaged region of a version-2 log that an intact record follows.
struct LogDamage {
  uint64_t offset = 0;  // first damaged byte: the end of the intact record before it
  uint64_t length = 0;  // bytes up to the next intact record
  std::string reason;   // e.g. "header checksum mismatch"
  // Set when the region is one record whose header verified but whose payload did not: its
  // sequence number and type are known.
  std::optional<uint64_t> seq;
  uint8_t type = 0;
  std::string saved_path;  // RecoverLog: where a copy of the bytes was kept
};

// Sequential reader over one log file.
//
// The reader sees the file as it was at Open(): bytes appended later are
// ignored, so a log that is still being written reads as a consistent prefix
// (its tail may look torn). Memory use is bounded by one read window the size
// of the largest record (at least 256 KiB), and the window only grows for a
// record whose length has been checked against the limit and the bytes in the
// file (and, in version 2, whose header checksum verified).
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

  // Reads the next intact record (version 2: passing over damage, see
  // skipped()). kEndOfFile and kCorruption are final: every later call returns
  // the same result. On anything but kRecord, *payload is cleared and *type is
  // left alone.
  ReadResult Next(uint8_t* type, std::string* payload);

  // The sequence number stored in the record Next() returned last (version 2;
  // 0 for version 1, whose records carry none).
  uint64_t seq() const { return seq_; }
  // The format version from the magic (0 until the magic has been read).
  int version() const { return version_; }
  // Damaged regions passed over so far, each followed by an intact record (a
  // damaged tail is corruption() instead). Version 2 only.
  const std::vector<LogDamage>& skipped() const { return skipped_; }
  // After a kCorruption result in a version-2 log: the damaged regions of the
  // tail (the first starts at corruption().offset), with the sequence numbers
  // and types of the records whose headers still verify.
  const std::vector<LogDamage>& tail() const { return pending_; }

  // Valid after Next() returned kCorruption.
  const LogCorruption& corruption() const { return corruption_; }

  // OK unless the kCorruption result was caused by a failed read() rather
  // than by the bytes in the file. Callers must not truncate a log whose
  // reader stopped on an I/O error: the data may be perfectly fine.
  const absl::Status& io_status() const { return io_status_; }

  // End of the last intact record read: kLogMagicSize once the magic has been
  // verified, 0 before that (or if the magic is bad). After a kCorruption
  // result, truncating the file to this offset leaves a clean log.
  uint64_t good_offset() const { return good_offset_; }

  // File size at Open().
  uint64_t file_size() const { return file_size_; }

 private:
  struct Header;
  enum class Check { kGood, kTruncated, kBadHeader, kBadPayload, kIoError };

  LogReader(std::string path, int fd, uint64_t file_size);

  // Verifies the magic; on failure records the corruption and returns false.
  bool ReadMagic();
  ReadResult Corrupt(std::string reason);
  ReadResult NextV1(uint8_t* type, std::string* payload);
  ReadResult NextV2(uint8_t* type, std::string* payload);
  // Whether a valid version-2 record starts at `pos` (its payload then is at
  // Window(pos + header, length)); `reason` says why not.
  Check CheckRecordAt(uint64_t pos, Header* header, std::string* reason);
  // The first position after `from` where a record verifies; file_size_ if
  // none (or on a read error, then io_status_ is set).
  uint64_t FindNextRecord(uint64_t from);
  // Bytes [pos, pos + n) of the file as of Open(), through a read window;
  // nullptr if they are not all in the file or a read failed (io_status_).
  const char* Window(uint64_t pos, size_t n);

  std::string path_;
  int fd_;
  uint64_t file_size_;

  std::unique_ptr<char[]> win_;
  size_t win_capacity_ = 0;
  uint64_t win_pos_ = 0;  // file offset of win_[0]
  size_t win_len_ = 0;

  int version_ = 0;
  std::optional<ReadResult> final_;  // Set once EOF or corruption is reached.
  uint64_t good_offset_ = 0;
  uint64_t pos_ = 0;  // version 2: where the next record is looked for
  uint64_t seq_ = 0;
  std::vector<LogDamage> pending_;  // damage not yet followed by an intact record
  std::vector<LogDamage> skipped_;
  LogCorruption corruption_;
  absl::Status io_status_;
};

// Outcome of RecoverLog.
struct LogRecovery {
  int version = 0;                          // the log's format version (0 if missing)
  uint64_t records = 0;                     // Records passed to `apply`.
  uint64_t last_seq = 0;                    // sequence number of the last one, 0 if none
  uint64_t good_offset = 0;                 // Size of the log after recovery (0 if missing).
  bool truncated = false;                   // True if a damaged tail was cut off.
  std::optional<LogCorruption> corruption;  // Set iff truncated.
  uint64_t discarded_bytes = 0;             // Bytes cut off (and saved), 0 if none.
  std::string discarded_path;               // Where they were saved, empty if none.
  // Damage in the middle of a version-2 log that reading passed over; the file keeps these
  // bytes, and a copy of each region (of the first 100) is saved beside it
  // (LogDamage::saved_path; empty beyond).
  std::vector<LogDamage> skipped;
  // Version 2, when truncated: the regions of the damaged tail (see LogReader::tail()).
  std::vector<LogDamage> tail;
};

// The sequence number, type and payload of one intact record.
using ApplyRecord =
    std::function<absl::Status(uint64_t seq, uint8_t type, absl::string_view payload)>;

// Replays the log at `path` and repairs its tail so a LogWriter can append.
//
// Passes each intact record, in file order, to `apply` with its sequence number: the stored one
// (version 2) or `first_seq` plus its index (version 1). If `apply` returns an error, stops and
// returns that error with the file untouched.
//
// Damage that an intact record follows (version 2) is passed over; each region's bytes are
// copied to `path + ".corrupt-<offset>"` (kept as is when an earlier recovery saved the same
// region) and listed in `skipped`; the log file itself is not changed there.
//
// When no intact record follows the damage (torn write, zeroed tail, or any damage in a version-1
// log), the bytes from the first damaged record to the end of the file are first copied to
// `path + ".corrupt-<offset>"` (with ".1", ".2", ... appended if that name is taken), which is
// fsynced, and only then is the log truncated to the end of the last good record and fsynced.
// A crash at any point therefore leaves either the original bytes or their copy. The damage is
// reported in the result, never silently accepted; logging it is the caller's job.
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
absl::StatusOr<LogRecovery> RecoverLog(const std::string& path, uint64_t first_seq,
                                       const ApplyRecord& apply);

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_LOG_READER_H_
