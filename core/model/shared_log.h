// The log of a model served by several nodes (cluster mode): one ordered sequence of records
// that every node appends to and every node reads in full, in the same order. Core only needs
// this interface; server/cluster/ implements it on a NATS JetStream stream replicated over three
// servers, and tests on memory.
#ifndef GRAPHBANDIT_CORE_MODEL_SHARED_LOG_H_
#define GRAPHBANDIT_CORE_MODEL_SHARED_LOG_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace graphbandit {

class SharedLog {
 public:
  struct Record {
    uint64_t seq = 0;  // position in the log, from 1, without gaps
    std::string id;    // the id it was appended with
    std::string payload;
  };

  // Returns the records from a position on, in order. Used by one thread at a time.
  class Reader {
   public:
    virtual ~Reader() = default;
    // The next record, waiting at most `timeout`: DEADLINE_EXCEEDED when none came (call
    // again); UNAVAILABLE when the connection is gone (open a new reader); DATA_LOSS when the
    // log no longer holds the next record.
    virtual absl::StatusOr<Record> Next(absl::Duration timeout) = 0;
  };

  virtual ~SharedLog() = default;

  // Appends a record and returns its position once the log has made it durable. `record_id`
  // (non-empty, unique per record) makes retries safe: a repeated id (within the log's
  // deduplication window) is stored once and answered with the first copy's position.
  // UNAVAILABLE or DEADLINE_EXCEEDED when the outcome is unknown (retry with the same id).
  virtual absl::StatusOr<uint64_t> Append(absl::string_view payload,
                                          absl::string_view record_id) = 0;
  // The position of the last record (0 when empty).
  virtual absl::StatusOr<uint64_t> LastSeq() = 0;
  // LastSeq, asked again while the log answers UNAVAILABLE or DEADLINE_EXCEEDED (a new cluster
  // electing its leaders, a server restarting), for at most `timeout`: for a node starting up,
  // which had better wait than exit.
  absl::StatusOr<uint64_t> LastSeqWaiting(absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      absl::StatusOr<uint64_t> last = LastSeq();
      if (last.ok() ||
          (!absl::IsUnavailable(last.status()) && !absl::IsDeadlineExceeded(last.status())) ||
          absl::Now() >= deadline) {
        return last;
      }
      absl::SleepFor(absl::Milliseconds(200));
    }
  }
  // A reader from position `first_seq` (>= 1).
  virtual absl::StatusOr<std::unique_ptr<Reader>> Read(uint64_t first_seq) = 0;
};

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_MODEL_SHARED_LOG_H_
