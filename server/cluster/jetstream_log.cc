#include "server/cluster/jetstream_log.h"

#include <nats/nats.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace graphbandit::cluster {
namespace {

int64_t Millis(absl::Duration d) { return std::max<int64_t>(1, absl::ToInt64Milliseconds(d)); }

// Whether a failed call may have been cut short by the network or a server's loss (the caller
// may retry) rather than refused.
bool Transient(natsStatus s) {
  switch (s) {
    case NATS_IO_ERROR:
    case NATS_CONNECTION_CLOSED:
    case NATS_NO_SERVER:
    case NATS_STALE_CONNECTION:
    case NATS_CONNECTION_DISCONNECTED:
    case NATS_NOT_YET_CONNECTED:
    case NATS_NO_RESPONDERS:
    case NATS_TIMEOUT:
    case NATS_MISSED_HEARTBEAT:
    case NATS_SLOW_CONSUMER:
      return true;
    default:
      return false;
  }
}

absl::Status FromNats(natsStatus s, jsErrCode js_error, absl::string_view what) {
  const std::string detail = js_error != 0
                                 ? absl::StrFormat("%s (JetStream error %d)", natsStatus_GetText(s),
                                                   static_cast<int>(js_error))
                                 : std::string(natsStatus_GetText(s));
  const std::string message = absl::StrFormat("%s: %s", what, detail);
  if (s == NATS_TIMEOUT) return absl::DeadlineExceededError(message);
  // JetStream without a quorum, electing a leader, or with the stream's replicas offline.
  if (Transient(s) || js_error == JSClusterNoPeersErr || js_error == JSClusterNotAvailErr ||
      js_error == JSClusterNotLeaderErr || js_error == JSStreamOfflineErr ||
      js_error == JSNotEnabledErr) {
    return absl::UnavailableError(message);
  }
  return absl::InternalError(message);
}

absl::Status CheckOptions(const JetStreamLog::Options& o) {
  if (o.servers.empty()) return absl::InvalidArgumentError("JetStream log: no NATS server given");
  if (o.stream.empty() || o.stream.find_first_of(" .*>\t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JetStream log: stream name \"%s\" must be non-empty without spaces, '.', '*' or '>'",
        o.stream));
  }
  if (o.subject.empty() || o.subject.find_first_of(" *>\t\r\n") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "JetStream log: subject \"%s\" must be a literal subject (no spaces or wildcards)",
        o.subject));
  }
  if (o.replicas < 1 || o.replicas > 5) {
    return absl::InvalidArgumentError(
        absl::StrFormat("JetStream log: replicas must lie in 1..5, got %d", o.replicas));
  }
  if (o.duplicate_window <= absl::ZeroDuration() || o.append_timeout <= absl::ZeroDuration() ||
      o.open_timeout <= absl::ZeroDuration() || o.read_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("JetStream log: durations must be positive");
  }
  return absl::OkStatus();
}

// Checks that an existing stream is the one the options describe.
absl::Status CheckStream(const jsStreamInfo& info, const JetStreamLog::Options& o) {
  const jsStreamConfig& config = *info.Config;
  const bool one_subject = config.SubjectsLen == 1 && o.subject == config.Subjects[0];
  if (config.Storage != js_FileStorage ||
      config.Duplicates < absl::ToInt64Nanoseconds(o.duplicate_window)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "JetStream stream %s exists with %s storage and a duplicate window of %s; this node needs "
        "file storage and at least %s (retried appends are deduplicated within it)",
        o.stream, config.Storage == js_FileStorage ? "file" : "memory",
        absl::FormatDuration(absl::Nanoseconds(config.Duplicates)),
        absl::FormatDuration(o.duplicate_window)));
  }
  if (!one_subject || config.Replicas != o.replicas) {
    std::vector<std::string> subjects(config.Subjects, config.Subjects + config.SubjectsLen);
    return absl::FailedPreconditionError(absl::StrFormat(
        "JetStream stream %s exists with subjects [%s] and %d replicas; this node expects "
        "subject %s and %d replicas",
        o.stream, absl::StrJoin(subjects, ", "), config.Replicas, o.subject, o.replicas));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<JetStreamLog>> JetStreamLog::Open(const Options& options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  std::unique_ptr<JetStreamLog> log(new JetStreamLog(options));

  natsOptions* nats_options = nullptr;
  natsStatus s = natsOptions_Create(&nats_options);
  std::vector<const char*> urls;
  for (const std::string& url : options.servers) urls.push_back(url.c_str());
  if (s == NATS_OK) {
    s = natsOptions_SetServers(nats_options, urls.data(), static_cast<int>(urls.size()));
  }
  // Reconnect for ever (the servers are restarted under us), quickly; the calls themselves are
  // bounded by their own timeouts.
  if (s == NATS_OK) s = natsOptions_SetMaxReconnect(nats_options, -1);
  if (s == NATS_OK) s = natsOptions_SetReconnectWait(nats_options, 100);
  if (s == NATS_OK) {
    s = natsOptions_SetTimeout(nats_options,
                               Millis(std::min(options.open_timeout, absl::Seconds(5))));
  }
  if (s == NATS_OK) s = natsOptions_SetPingInterval(nats_options, 2000);
  // The servers may not be up yet (a cluster started together with its nodes): try again until
  // the open timeout.
  const absl::Time connect_deadline = absl::Now() + options.open_timeout;
  while (s == NATS_OK) {
    s = natsConnection_Connect(&log->connection_, nats_options);
    // NO_SERVER: every server refused; the others: the last server tried failed later (name
    // not resolvable yet, handshake cut short).
    const bool retry = s == NATS_NO_SERVER || s == NATS_TIMEOUT || s == NATS_SYS_ERROR ||
                       s == NATS_IO_ERROR || s == NATS_CONNECTION_CLOSED;
    if (!retry || absl::Now() >= connect_deadline) break;
    s = NATS_OK;
    absl::SleepFor(absl::Milliseconds(250));
  }
  natsOptions_Destroy(nats_options);
  if (s != NATS_OK) {
    return FromNats(
        s, static_cast<jsErrCode>(0),
        absl::StrFormat("connecting to NATS at %s", absl::StrJoin(options.servers, ",")));
  }

  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.Wait = Millis(options.append_timeout);
  s = natsConnection_JetStream(&log->js_, log->connection_, &js_options);
  if (s != NATS_OK) return FromNats(s, static_cast<jsErrCode>(0), "opening JetStream");

  // The stream may be new, or made by another node; a new cluster may need a moment to elect
  // its JetStream leader, so retry transient failures until the open timeout.
  const absl::Time deadline = absl::Now() + options.open_timeout;
  for (;;) {
    jsStreamInfo* info = nullptr;
    jsErrCode js_error = static_cast<jsErrCode>(0);
    s = js_GetStreamInfo(&info, log->js_, options.stream.c_str(), nullptr, &js_error);
    if (s == NATS_OK) {
      absl::Status checked = CheckStream(*info, options);
      jsStreamInfo_Destroy(info);
      if (!checked.ok()) return checked;
      return log;
    }
    if (s == NATS_NOT_FOUND || js_error == JSStreamNotFoundErr) {
      jsStreamConfig config;
      jsStreamConfig_Init(&config);
      config.Name = options.stream.c_str();
      const char* subject = options.subject.c_str();
      config.Subjects = &subject;
      config.SubjectsLen = 1;
      config.Storage = js_FileStorage;
      config.Replicas = options.replicas;
      config.Duplicates = absl::ToInt64Nanoseconds(options.duplicate_window);
      js_error = static_cast<jsErrCode>(0);
      s = js_AddStream(&info, log->js_, &config, nullptr, &js_error);
      if (s == NATS_OK) {
        jsStreamInfo_Destroy(info);
        return log;
      }
      // Another node created it first: look again (below, after the pause).
      if (js_error == JSStreamNameExistErr) s = NATS_TIMEOUT;
    }
    absl::Status status = FromNats(s, js_error, absl::StrCat("opening stream ", options.stream));
    if (!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) return status;
    if (absl::Now() >= deadline) {
      return absl::UnavailableError(
          absl::StrFormat("JetStream stream %s not available within %s: %s", options.stream,
                          absl::FormatDuration(options.open_timeout), status.message()));
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
}

JetStreamLog::~JetStreamLog() {
  if (js_ != nullptr) jsCtx_Destroy(js_);
  if (connection_ != nullptr) {
    natsConnection_Close(connection_);
    natsConnection_Destroy(connection_);
  }
}

absl::StatusOr<JetStreamLog::Appended> JetStreamLog::Append(absl::string_view payload,
                                                            absl::string_view record_id) {
  if (record_id.empty()) return absl::InvalidArgumentError("JetStream log: empty record id");
  const std::string id(record_id);
  jsPubOptions publish;
  jsPubOptions_Init(&publish);
  publish.MsgId = id.c_str();
  publish.ExpectStream = options_.stream.c_str();
  publish.MaxWait = Millis(options_.append_timeout);
  jsPubAck* ack = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  const natsStatus s = js_Publish(&ack, js_, options_.subject.c_str(), payload.data(),
                                  static_cast<int>(payload.size()), &publish, &js_error);
  if (s != NATS_OK) {
    return FromNats(s, js_error, absl::StrCat("appending to stream ", options_.stream));
  }
  Appended appended{ack->Sequence, ack->Duplicate};
  jsPubAck_Destroy(ack);
  return appended;
}

absl::StatusOr<uint64_t> JetStreamLog::LastSeq() {
  jsStreamInfo* info = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&info, js_, options_.stream.c_str(), nullptr, &js_error);
  if (s != NATS_OK) return FromNats(s, js_error, absl::StrCat("reading stream ", options_.stream));
  const uint64_t last = info->State.LastSeq;
  jsStreamInfo_Destroy(info);
  return last;
}

bool JetStreamLog::Replication::healthy() const {
  if (leader.empty()) return false;
  for (const Peer& peer : followers) {
    if (!peer.current || peer.offline) return false;
  }
  return true;
}

absl::StatusOr<JetStreamLog::Replication> JetStreamLog::Replicas() {
  jsStreamInfo* info = nullptr;
  jsErrCode js_error = static_cast<jsErrCode>(0);
  const natsStatus s = js_GetStreamInfo(&info, js_, options_.stream.c_str(), nullptr, &js_error);
  if (s != NATS_OK) return FromNats(s, js_error, absl::StrCat("reading stream ", options_.stream));
  Replication replication;
  if (info->Cluster != nullptr) {
    if (info->Cluster->Leader != nullptr) replication.leader = info->Cluster->Leader;
    for (int i = 0; i < info->Cluster->ReplicasLen; ++i) {
      const jsPeerInfo& peer = *info->Cluster->Replicas[i];
      replication.followers.push_back(
          Peer{peer.Name != nullptr ? peer.Name : "", peer.Current, peer.Offline, peer.Lag});
    }
  }
  jsStreamInfo_Destroy(info);
  return replication;
}

absl::StatusOr<std::unique_ptr<JetStreamLog::Reader>> JetStreamLog::Read(uint64_t first_seq) {
  if (first_seq == 0)
    return absl::InvalidArgumentError("JetStream log: sequence numbers start at 1");
  std::unique_ptr<Reader> reader(new Reader());
  jsSubOptions subscribe;
  jsSubOptions_Init(&subscribe);
  subscribe.Stream = options_.stream.c_str();
  // An ordered consumer: no acknowledgements, and the client library recreates it from the last
  // sequence it delivered when it detects a gap or loses its server.
  subscribe.Ordered = true;
  subscribe.Config.DeliverPolicy = js_DeliverByStartSequence;
  subscribe.Config.OptStartSeq = first_seq;
  // Making the consumer needs the stream's leader: while a server restarts or a leader is being
  // elected, retry for up to the read timeout.
  const absl::Time deadline = absl::Now() + options_.read_timeout;
  for (;;) {
    jsErrCode js_error = static_cast<jsErrCode>(0);
    const natsStatus s = js_SubscribeSync(&reader->subscription_, js_, options_.subject.c_str(),
                                          nullptr, &subscribe, &js_error);
    if (s == NATS_OK) break;
    absl::Status status = FromNats(s, js_error, absl::StrCat("reading stream ", options_.stream));
    if ((!absl::IsUnavailable(status) && !absl::IsDeadlineExceeded(status)) ||
        absl::Now() >= deadline) {
      return status;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  reader->next_seq_ = first_seq;
  return reader;
}

JetStreamLog::Reader::~Reader() {
  if (subscription_ != nullptr) {
    natsSubscription_Unsubscribe(subscription_);
    natsSubscription_Destroy(subscription_);
  }
}

absl::StatusOr<JetStreamLog::Record> JetStreamLog::Reader::Next(absl::Duration timeout) {
  for (;;) {
    natsMsg* message = nullptr;
    const natsStatus s = natsSubscription_NextMsg(&message, subscription_, Millis(timeout));
    if (s == NATS_TIMEOUT) {
      return absl::DeadlineExceededError(
          absl::StrFormat("no record %d within %s", next_seq_, absl::FormatDuration(timeout)));
    }
    if (s != NATS_OK) return FromNats(s, static_cast<jsErrCode>(0), "reading the stream");
    jsMsgMetaData* meta = nullptr;
    const natsStatus m = natsMsg_GetMetaData(&meta, message);
    if (m != NATS_OK) {
      natsMsg_Destroy(message);  // a control message (heartbeat, flow control): not a record
      continue;
    }
    const uint64_t seq = meta->Sequence.Stream;
    jsMsgMetaData_Destroy(meta);
    if (seq < next_seq_) {  // delivered again after the consumer was recreated
      natsMsg_Destroy(message);
      continue;
    }
    if (seq != next_seq_) {
      natsMsg_Destroy(message);
      // The stream lost records (they were removed, or its storage was replaced).
      return absl::DataLossError(absl::StrFormat(
          "the stream skipped from record %d to %d: records are missing", next_seq_, seq));
    }
    Record record;
    record.seq = seq;
    const char* id = nullptr;
    if (natsMsgHeader_Get(message, "Nats-Msg-Id", &id) == NATS_OK && id != nullptr) {
      record.id = id;
    }
    record.payload.assign(natsMsg_GetData(message), natsMsg_GetDataLength(message));
    natsMsg_Destroy(message);
    ++next_seq_;
    return record;
  }
}

namespace {

class SharedReader : public SharedLog::Reader {
 public:
  explicit SharedReader(std::unique_ptr<JetStreamLog::Reader> reader)
      : reader_(std::move(reader)) {}
  absl::StatusOr<SharedLog::Record> Next(absl::Duration timeout) override {
    absl::StatusOr<JetStreamLog::Record> record = reader_->Next(timeout);
    if (!record.ok()) return record.status();
    return SharedLog::Record{record->seq, std::move(record->id), std::move(record->payload)};
  }

 private:
  std::unique_ptr<JetStreamLog::Reader> reader_;
};

std::string EscapedModel(absl::string_view model) {
  std::string escaped;
  for (char c : model) {
    if (c == '_') {
      escaped += "__";
    } else if (c == '.') {
      escaped += "_d";
    } else {
      escaped += c;
    }
  }
  return escaped;
}

}  // namespace

absl::StatusOr<uint64_t> JetStreamSharedLog::Append(absl::string_view payload,
                                                    absl::string_view record_id) {
  absl::StatusOr<JetStreamLog::Appended> appended = log_->Append(payload, record_id);
  if (!appended.ok()) return appended.status();
  return appended->seq;
}

absl::StatusOr<std::unique_ptr<SharedLog::Reader>> JetStreamSharedLog::Read(uint64_t first_seq) {
  absl::StatusOr<std::unique_ptr<JetStreamLog::Reader>> reader = log_->Read(first_seq);
  if (!reader.ok()) return reader.status();
  return std::unique_ptr<SharedLog::Reader>(new SharedReader(*std::move(reader)));
}

std::string ModelStreamName(absl::string_view prefix, absl::string_view model) {
  return absl::StrCat(prefix, "_", EscapedModel(model));
}

std::string ModelSubject(absl::string_view prefix, absl::string_view model) {
  return absl::StrCat(prefix, ".model.", EscapedModel(model));
}

}  // namespace graphbandit::cluster
