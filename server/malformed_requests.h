// Requests whose body cannot be parsed: not a protobuf message of the method's request type, or
// a message whose string field is not valid UTF-8. gRPC answers those before any handler runs,
// with INTERNAL and no message, and protobuf writes a line to stderr for each. This turns them
// into INVALID_ARGUMENT with a message that names the request type (and the field, for UTF-8),
// counts them in graphbandit_rpc_requests_total like any other failed call, and reports them in
// the log at most once per interval, with a count, so that garbage cannot fill a disk.
#ifndef GRAPHBANDIT_SERVER_MALFORMED_REQUESTS_H_
#define GRAPHBANDIT_SERVER_MALFORMED_REQUESTS_H_

#include <grpcpp/support/server_interceptor.h>

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/metrics.h"

namespace graphbandit::server {

// One line per interval at most: the first event of an interval is logged with the number of
// events suppressed since the previous line. Thread-safe.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(absl::Duration interval) : interval_(interval) {}
  // Logs `message` (with LogWarning) unless a line was written less than the interval ago.
  void Report(const std::string& message);
  int64_t suppressed() const;

 private:
  const absl::Duration interval_;
  mutable absl::Mutex mu_;
  absl::Time last_line_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int64_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
};

// Routes protobuf's own log lines to core's log sink (core/base/log.h), rate-limited, and keeps
// the parse errors it reports for the call being parsed (MalformedRequestInterceptorFactory
// reads them). Call once at start, before serving.
void InstallProtobufLogHandler();

// The interceptor that answers unparseable requests precisely (see the file comment).
class MalformedRequestInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MalformedRequestInterceptorFactory(ServerMetrics* metrics);
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

 private:
  ServerMetrics* metrics_;
  std::shared_ptr<RateLimitedLog> log_;
};

// The status an unparseable request gets: INVALID_ARGUMENT naming the request type of `method`
// ("/graphbandit.v1.BanditService/SelectArm") and, when known, what was wrong (`detail`).
grpc::Status UnparseableRequestStatus(const std::string& method, const std::string& detail);

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_MALFORMED_REQUESTS_H_
