// A replicated, ordered log of opaque records on a NATS JetStream stream (a model's
// operations in cluster mode). An append returns once the stream has stored the record on a
// majority of its replicas, with the record's stream sequence number: the order every reader
// sees. Readers start at any sequence number and receive every later record, in order, across
// reconnections and the loss of a minority of the NATS servers.
//
// Retries: an append carries a record id. The stream keeps the ids of its recent records
// (Options::duplicate_window) and stores a repeated id only once, answering with the first
// copy's sequence number; so an append whose answer was lost (UNAVAILABLE, DEADLINE_EXCEEDED)
// can be retried with the same id without storing the record twice.
//
// Threads: Append may be called from any number of threads at once. A Reader is used by one
// thread at a time, and is destroyed before the JetStreamLog that made it.
#ifndef GRAPHBANDIT_SERVER_CLUSTER_JETSTREAM_LOG_H_
#define GRAPHBANDIT_SERVER_CLUSTER_JETSTREAM_LOG_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/model/shared_log.h"

// libnats's handles, so that including this header does not include nats.h.
struct __natsConnection;
struct __jsCtx;
struct __natsSubscription;

namespace graphbandit::cluster {

class JetStreamLog {
 public:
  struct Options {
    // NATS server URLs, e.g. nats://127.0.0.1:4222; the client fails over between them.
    std::vector<std::string> servers;
    // The stream, and the one subject it holds (records are published there).
    std::string stream;
    std::string subject;
    // Copies the stream keeps (1..5; 3 survives the loss of one server). An existing stream
    // must have this many.
    int replicas = 3;
    // How long the stream remembers record ids for deduplication.
    absl::Duration duplicate_window = absl::Minutes(2);
    // How long an append waits for the stream's acknowledgement.
    absl::Duration append_timeout = absl::Seconds(5);
    // How long Open keeps trying to connect, and then to find or make the stream (a new
    // cluster elects its leaders first; servers started together with the node come up first).
    // Each phase has this long, and a try under way finishes, so Open can take somewhat more
    // than twice this.
    absl::Duration open_timeout = absl::Seconds(60);
    // How long Read keeps trying to make its consumer (the stream's leader may be being
    // elected). Shorter than open_timeout: the model's feeder retries a failed Read itself and
    // checks between tries whether it should stop, so a long wait here would hold up shutdown.
    absl::Duration read_timeout = absl::Seconds(10);
  };

  struct Appended {
    uint64_t seq = 0;
    bool duplicate = false;  // the id was stored before; seq is the first copy's
  };

  struct Record {
    uint64_t seq = 0;
    std::string id;  // the record id it was appended with
    std::string payload;
  };

  class Reader;

  // Connects and creates the stream when it does not exist (an existing one is used as it is if
  // its subject and replica count match: FAILED_PRECONDITION otherwise). INVALID_ARGUMENT for bad
  // options; UNAVAILABLE when no server or no JetStream quorum answered in time.
  static absl::StatusOr<std::unique_ptr<JetStreamLog>> Open(const Options& options);
  ~JetStreamLog();
  JetStreamLog(const JetStreamLog&) = delete;
  JetStreamLog& operator=(const JetStreamLog&) = delete;

  // Appends one record with `record_id` (non-empty) for deduplication. UNAVAILABLE or
  // DEADLINE_EXCEEDED when the outcome is unknown (the record may be stored: retry with the same
  // id); other codes when the stream refused it.
  absl::StatusOr<Appended> Append(absl::string_view payload, absl::string_view record_id);

  // The sequence number of the last record in the stream (0 when empty).
  absl::StatusOr<uint64_t> LastSeq();

  // Where the stream's copies are: the leader and, for each other replica, whether it has
  // caught up with the leader (a replica that restarted catches up before it counts towards the
  // majority an append needs again).
  struct Peer {
    std::string name;
    bool current = false;
    bool offline = false;
    uint64_t lag = 0;  // operations behind the leader
  };
  struct Replication {
    std::string leader;  // empty while there is none
    std::vector<Peer> followers;
    // A leader, and every follower current and online.
    bool healthy() const;
  };
  absl::StatusOr<Replication> Replicas();

  // A reader that returns the records from `first_seq` (>= 1) on, in order.
  absl::StatusOr<std::unique_ptr<Reader>> Read(uint64_t first_seq);

  const Options& options() const { return options_; }

 private:
  explicit JetStreamLog(Options options) : options_(std::move(options)) {}

  Options options_;
  __natsConnection* connection_ = nullptr;
  __jsCtx* js_ = nullptr;
};

class JetStreamLog::Reader {
 public:
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // The next record, waiting at most `timeout`: DEADLINE_EXCEEDED when none came in that time
  // (call again), UNAVAILABLE when the connection is gone for good.
  absl::StatusOr<Record> Next(absl::Duration timeout);

 private:
  friend class JetStreamLog;
  Reader() = default;

  __natsSubscription* subscription_ = nullptr;
  uint64_t next_seq_ = 0;  // what the next record must be
};

// A model's shared log (core/model/shared_log.h, cluster mode) on its JetStream stream.
class JetStreamSharedLog : public SharedLog {
 public:
  explicit JetStreamSharedLog(std::unique_ptr<JetStreamLog> log) : log_(std::move(log)) {}
  absl::StatusOr<uint64_t> Append(absl::string_view payload, absl::string_view record_id) override;
  absl::StatusOr<uint64_t> LastSeq() override { return log_->LastSeq(); }
  absl::StatusOr<std::unique_ptr<SharedLog::Reader>> Read(uint64_t first_seq) override;
  JetStreamLog& log() { return *log_; }

 private:
  std::unique_ptr<JetStreamLog> log_;
};

// The stream and subject of a model's shared log: <prefix>_<model> and <prefix>.model.<model>,
// with the model name escaped ('_' as "__", '.' as "_d") so that distinct names stay distinct
// and the stream name has no '.'.
std::string ModelStreamName(absl::string_view prefix, absl::string_view model);
std::string ModelSubject(absl::string_view prefix, absl::string_view model);

}  // namespace graphbandit::cluster

#endif  // GRAPHBANDIT_SERVER_CLUSTER_JETSTREAM_LOG_H_
