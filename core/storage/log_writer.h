// Appends checksummed records to a log file (format: log_format.h).
//
// Durability contract: a record is durable once Append() for it and a later
// Sync() have both returned OK. After a crash, a log may end in a partial
// record; RecoverLog() (log_reader.h) removes it. Append() alone only hands
// the bytes to the kernel.
//
// Thread safety: none. A LogWriter must be used by one thread at a time; the
// caller serialises Append/Sync/Close (e.g. under the mutex that orders the
// records). Two LogWriters, or two processes, must never append to the same
// file: nothing here locks it.

#ifndef GRAPHBANDIT_CORE_STORAGE_LOG_WRITER_H_
#define GRAPHBANDIT_CORE_STORAGE_LOG_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::storage {

class LogWriter {
 public:
  // Opens `path` for appending.
  //   * Missing or empty file: writes the magic, fsyncs the file and its
  //     parent directory, so the new (empty) log survives a crash.
  //   * Existing file: must start with the current magic (else DataLoss, and
  //     the file is left untouched). Appends go to its current end. A
  //     version-1 log with no record gets the current magic; one with records
  //     is FailedPrecondition (start a new file).
  // Precondition: an existing file has already been through RecoverLog() (or
  // is otherwise known to end on a record boundary). The writer does not scan
  // the file; records appended after a torn tail would be unreadable.
  // Errors from the OS keep their errno-derived code (NotFound,
  // PermissionDenied, ...).
  static absl::StatusOr<std::unique_ptr<LogWriter>> Open(const std::string& path);

  // Closes the file without syncing: unsynced appends may be lost on a crash.
  ~LogWriter();

  LogWriter(const LogWriter&) = delete;
  LogWriter& operator=(const LogWriter&) = delete;

  // Appends one record with a single write loop. `seq` is stored in the record
  // (the reader returns it); the writer does not interpret it.
  //   InvalidArgument: type == 0 or payload.size() > kMaxRecordPayload; the
  //     writer stays usable.
  //   DataLoss: the write failed. The file may now end in a partial record,
  //     so the writer is poisoned: this and every later call returns the same
  //     error. Reopen only after RecoverLog().
  //   FailedPrecondition: called after Close().
  absl::Status Append(uint64_t seq, uint8_t type, absl::string_view payload);

  // Makes every appended record durable (fdatasync). A failed sync poisons the
  // writer like a failed write: after an fsync error Linux may have dropped
  // the dirty pages, so retrying could report success for lost data.
  absl::Status Sync();

  // Closes the file without syncing (call Sync() first if needed). Returns the
  // close() error if any, else the poisoning error if any. Later calls to
  // Append/Sync fail; Close() again returns OK.
  absl::Status Close();

  // Bytes in the file, magic included: the offset the next record will start
  // at. After a failed write, includes any bytes of the partial record.
  uint64_t size() const { return size_; }
  // The file descriptor, for a syncer thread that fdatasyncs the file while appends continue
  // (fdatasync covers every write that returned before it, whichever descriptor made it).
  int fd() const { return fd_; }

  const std::string& path() const { return path_; }
  // The errno of the failed write or sync that poisoned the writer (0: none, or not an OS error).
  int error_number() const { return errno_; }

 private:
  LogWriter(std::string path, int fd, uint64_t size);

  // Records the first fatal error; later calls report it.
  absl::Status Poison(absl::Status status);
  absl::Status CheckUsable() const;

  std::string path_;
  int fd_;
  uint64_t size_;
  absl::Status failed_;  // OK until the first write or sync failure.
  int errno_ = 0;
  std::string buf_;  // Reused for header+payload to avoid per-record malloc.
};

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_LOG_WRITER_H_
