#include "server/malformed_requests.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/stubs/logging.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "core/base/log.h"

namespace graphbandit::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

// How often a kind of bad input may write a log line.
constexpr absl::Duration kLogInterval = absl::Seconds(10);

// What protobuf said about the message this thread failed to parse last (it parses a request
// and runs the call's interceptors on the same thread in the synchronous server).
thread_local std::string t_parse_error;

RateLimitedLog& ProtobufLog() {
  static auto* log = new RateLimitedLog(kLogInterval);
  return *log;
}

void ProtobufLogHandler(google::protobuf::LogLevel level, const char* /*filename*/, int /*line*/,
                        const std::string& message) {
  // "String field 'graphbandit.v1.SelectArmRequest.user_id' contains invalid UTF-8 data when
  // parsing a protocol buffer. ..." is the one message a request can provoke: keep it for the
  // call's status, which names the field, and let the interceptor report the call.
  constexpr absl::string_view kUtf8Prefix = "String field '";
  const size_t field_end = message.find("' contains invalid UTF-8 data when parsing");
  if (absl::StartsWith(message, kUtf8Prefix) && field_end != std::string::npos) {
    t_parse_error = absl::StrCat("string field ",
                                 message.substr(kUtf8Prefix.size(), field_end - kUtf8Prefix.size()),
                                 " is not valid UTF-8");
    return;
  }
  if (level < google::protobuf::LOGLEVEL_WARNING) return;
  ProtobufLog().Report(absl::StrCat("protobuf: ", message));
}

// "/graphbandit.v1.BanditService/SelectArm" -> "SelectArm".
std::string ShortMethodName(absl::string_view method) {
  const size_t slash = method.rfind('/');
  return std::string(slash == absl::string_view::npos ? method : method.substr(slash + 1));
}

class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  MalformedRequestInterceptor(std::string method, ServerMetrics* metrics,
                              std::shared_ptr<RateLimitedLog> log)
      : method_(std::move(method)), metrics_(metrics), log_(std::move(log)), start_(absl::Now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE)) {
      // A null message is one gRPC could not deserialize; its status is already INTERNAL.
      if (methods->GetRecvMessage() == nullptr) {
        unparsed_ = true;
        detail_ = std::move(t_parse_error);
      }
      t_parse_error.clear();
    }
    if (unparsed_ && methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = UnparseableRequestStatus(method_, detail_);
      methods->ModifySendStatus(status);
      // Our own services' calls are counted (their handlers never ran, so nothing else counts
      // them); other services (health, reflection) are not counted at all.
      if (absl::StartsWith(method_, "/graphbandit.")) {
        metrics_->RecordRpc(ShortMethodName(method_), status.error_code(),
                            absl::ToDoubleSeconds(absl::Now() - start_));
      }
      log_->Report(absl::StrCat("unparseable request: ", method_, ": ", status.error_message()));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  ServerMetrics* const metrics_;
  const std::shared_ptr<RateLimitedLog> log_;
  const absl::Time start_;
  bool unparsed_ = false;
  std::string detail_;
};

}  // namespace

void RateLimitedLog::Report(const std::string& message) {
  int64_t suppressed;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now - last_line_ < interval_) {
      ++suppressed_;
      return;
    }
    last_line_ = now;
    suppressed = suppressed_;
    suppressed_ = 0;
  }
  if (suppressed == 0) {
    LogWarning(message);
  } else {
    LogWarning(absl::StrFormat("%s (and %d more like it in the last %s, not logged)", message,
                               suppressed, absl::FormatDuration(interval_)));
  }
}

int64_t RateLimitedLog::suppressed() const {
  absl::MutexLock lock(&mu_);
  return suppressed_;
}

void InstallProtobufLogHandler() { google::protobuf::SetLogHandler(&ProtobufLogHandler); }

MalformedRequestInterceptorFactory::MalformedRequestInterceptorFactory(ServerMetrics* metrics)
    : metrics_(metrics), log_(std::make_shared<RateLimitedLog>(kLogInterval)) {}

grpc::experimental::Interceptor* MalformedRequestInterceptorFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  // Only unary calls: on a stream a null message marks its end, not a parse failure (and every
  // graphbandit method is unary).
  if (info->type() != grpc::experimental::ServerRpcInfo::Type::UNARY) return nullptr;
  return new MalformedRequestInterceptor(info->method() != nullptr ? info->method() : "", metrics_,
                                         log_);
}

grpc::Status UnparseableRequestStatus(const std::string& method, const std::string& detail) {
  // "/graphbandit.v1.BanditService/SelectArm" -> "graphbandit.v1.BanditService.SelectArm".
  std::string full_name = absl::StrReplaceAll(method.substr(method.empty() ? 0 : 1), {{"/", "."}});
  const google::protobuf::MethodDescriptor* descriptor =
      google::protobuf::DescriptorPool::generated_pool()->FindMethodByName(full_name);
  const std::string type =
      descriptor != nullptr ? descriptor->input_type()->full_name() : "the method's request type";
  // A detail is used only if it names a field of this request type (a message another parse
  // on this thread left behind names something else).
  const bool about_this_type =
      descriptor != nullptr &&
      absl::StrContains(detail, " " + descriptor->input_type()->full_name() + ".");
  return grpc::Status(
      grpc::StatusCode::INVALID_ARGUMENT,
      absl::StrCat(
          "the request body could not be parsed as ", type, ": ",
          about_this_type ? detail : "it is not a valid protobuf encoding of that message"));
}

}  // namespace graphbandit::server
