#include "server/personalizer_http.h"

#include <httplib.h>
#include <openssl/ssl.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "google/protobuf/util/json_util.h"
#include "graphbandit/personalizer/v1/personalizer.pb.h"
#include "server/personalizer_features.h"

namespace graphbandit::server {
namespace {

namespace pz = ::graphbandit::personalizer::v1;

constexpr char kPrefix[] = "/personalizer/v1.0";
// How long a call may take at most (Personalizer's SDK waits far longer; a decision takes
// milliseconds, a reward waits at most for the fdatasync that makes it durable).
constexpr absl::Duration kCallDeadline = absl::Seconds(30);
// How long a connection may stay silent (idle between requests, or mid-request).
constexpr time_t kReadTimeoutSeconds = 2;

struct HttpError {
  int status;
  const char* code;
};

HttpError ErrorFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return {400, "BadRequest"};
    case absl::StatusCode::kUnauthenticated:
      return {401, "Unauthorized"};
    case absl::StatusCode::kPermissionDenied:
      return {403, "Forbidden"};
    case absl::StatusCode::kNotFound:
      return {404, "ResourceNotFound"};
    case absl::StatusCode::kAlreadyExists:
      return {409, "Conflict"};
    case absl::StatusCode::kResourceExhausted:
      return {429, "TooManyRequests"};
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:  // e.g. a concurrent first request: send it again
      return {503, "ServiceUnavailable"};
    case absl::StatusCode::kDeadlineExceeded:
      return {504, "GatewayTimeout"};
    default:
      return {500, "InternalServerError"};
  }
}

// Personalizer's error body: {"error": {"code": ..., "message": ...}}.
void Fail(const absl::Status& status, httplib::Response* res) {
  const HttpError error = ErrorFor(status.code());
  pz::ErrorResponse body;
  body.mutable_error()->set_code(error.code);
  body.mutable_error()->set_message(std::string(status.message()));
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(body, &json);
  res->status = error.status;
  res->set_content(json, "application/json; charset=utf-8");
}

grpc::StatusCode ToGrpcCode(absl::StatusCode code) { return static_cast<grpc::StatusCode>(code); }

absl::Status ParseJson(const httplib::Request& req, google::protobuf::Message* out) {
  const std::string type = req.get_header_value("Content-Type");
  if (!absl::StartsWithIgnoreCase(type, "application/json")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the body must be JSON with Content-Type application/json, got \"%s\"", type));
  }
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = true;  // fields of later API versions
  auto parsed = google::protobuf::util::JsonStringToMessage(req.body, out, options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the body is not a valid request: ", parsed.message().as_string()));
  }
  return absl::OkStatus();
}

// The user a rank request names with `feature` (a string at the top level of a context
// object), or `fallback`.
absl::StatusOr<std::string> UserOf(const pz::RankRequest& request, const std::string& feature,
                                   const std::string& fallback) {
  const std::string* user = nullptr;
  for (int i = 0; i < request.context_features_size(); ++i) {
    auto found = request.context_features(i).fields().find(feature);
    if (found == request.context_features(i).fields().end()) continue;
    if (found->second.kind_case() != google::protobuf::Value::kStringValue ||
        found->second.string_value().empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "contextFeatures[%d].%s must be a non-empty string (the user id)", i, feature));
    }
    if (user != nullptr && *user != found->second.string_value()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("contextFeatures names two users in %s", feature));
    }
    user = &found->second.string_value();
  }
  return user != nullptr ? *user : fallback;
}

}  // namespace

absl::Status PersonalizerHttp::Rank(const pz::RankRequest& request, httplib::Response* res) {
  if (absl::StrContains(request.event_id(), '/')) {
    // The event is named in the path of its reward and activate calls, where a '/' (even
    // percent-encoded) would split it.
    return absl::InvalidArgumentError(
        absl::StrFormat("eventId %s must not contain '/'", QuoteId(request.event_id())));
  }
  const int n = request.actions_size();
  if (n == 0) return absl::InvalidArgumentError("actions must not be empty");
  absl::flat_hash_map<absl::string_view, int> index;
  for (int i = 0; i < n; ++i) {
    const std::string& id = request.actions(i).id();
    if (id.empty())
      return absl::InvalidArgumentError(absl::StrFormat("actions[%d].id is empty", i));
    auto [it, fresh] = index.emplace(id, i);
    if (!fresh) {
      return absl::InvalidArgumentError(
          absl::StrFormat("actions[%d].id %s repeats actions[%d]", i, QuoteId(id), it->second));
    }
  }
  std::vector<bool> excluded(n, false);
  for (int k = 0; k < request.excluded_actions_size(); ++k) {
    auto it = index.find(request.excluded_actions(k));
    if (it == index.end()) {
      return absl::InvalidArgumentError(absl::StrFormat("excludedActions[%d] %s is not an action",
                                                        k, QuoteId(request.excluded_actions(k))));
    }
    excluded[it->second] = true;
  }
  absl::StatusOr<std::string> user = UserOf(request, options_.user_feature, options_.default_user);
  if (!user.ok()) return user.status();
  FlattenedFeatures context;
  if (absl::Status s =
          FlattenPersonalizerFeatures(request.context_features(), "contextFeatures", &context);
      !s.ok()) {
    return s;
  }
  std::vector<FlattenedFeatures> arms(n);
  DecisionRequest decide;
  decide.model = options_.model;
  decide.user_id = *user;
  decide.context_features = context.namespaces;
  std::vector<int> candidate_action;  // candidate -> action index
  for (int i = 0; i < n; ++i) {
    if (excluded[i]) continue;
    const pz::RankableAction& action = request.actions(i);
    if (absl::Status s = FlattenPersonalizerFeatures(
            action.features(), absl::StrFormat("actions[%d].features", i), &arms[i]);
        !s.ok()) {
      return s;
    }
    decide.candidates.push_back(CandidateRef{action.id(), {}, arms[i].namespaces});
    candidate_action.push_back(i);
  }
  if (decide.candidates.empty()) {
    return absl::InvalidArgumentError("every action is in excludedActions: nothing to rank");
  }
  decide.slate_size = 1;
  decide.event_id = request.event_id();
  decide.rank_all = true;
  decide.named_form = true;
  decide.defer_activation = request.defer_activation();
  decide.baseline = 0;  // Personalizer's baseline: the first action not excluded
  absl::StatusOr<Decision> decision = engine_->SelectArm(decide, absl::Now() + kCallDeadline);
  if (!decision.ok()) return decision.status();
  if (!decision->logged) {
    // gRPC answers it with logged: false; this API has no such field, and the event's reward
    // would be unknown: the application shows its default instead.
    return absl::UnavailableError(absl::StrFormat(
        "model \"%s\" cannot write its log: the decision was not recorded; retry later",
        decision->model));
  }
  pz::RankResponse response;
  const ChosenArm& top = decision->arms.at(0);
  // The chosen action's probability is the policy's; the others share what is left (0 for the
  // deterministic UCB policies, whose choice has probability 1 but for exact ties).
  const double p_top = top.probability.value_or(1.0);
  const int rest = static_cast<int>(decide.candidates.size()) - 1;
  pz::RankedAction* first = response.add_ranking();
  first->set_id(top.arm_id);
  first->set_probability(p_top);
  std::vector<int> others = decision->others;
  if (others.empty() && rest > 0) {  // a replayed decision: the stored one has no ranking
    for (int c = 0; c < static_cast<int>(decide.candidates.size()); ++c) {
      if (c != top.candidate_index) others.push_back(c);
    }
  }
  for (int c : others) {
    pz::RankedAction* ranked = response.add_ranking();
    ranked->set_id(request.actions(candidate_action[c]).id());
    ranked->set_probability(rest > 0 ? std::max(0.0, 1.0 - p_top) / rest : 0.0);
  }
  for (int i = 0; i < n; ++i) {
    if (!excluded[i]) continue;
    pz::RankedAction* ranked = response.add_ranking();
    ranked->set_id(request.actions(i).id());
    ranked->set_probability(0.0);
  }
  response.set_event_id(decision->event_id);
  response.set_reward_action_id(top.arm_id);
  google::protobuf::util::JsonPrintOptions print;
  print.always_print_primitive_fields = true;  // a probability of 0 is printed
  std::string json;
  if (auto printed = google::protobuf::util::MessageToJsonString(response, &json, print);
      !printed.ok()) {
    return absl::InternalError(printed.message().as_string());
  }
  res->status = 201;
  res->set_content(json, "application/json; charset=utf-8");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PersonalizerHttp>> PersonalizerHttp::Start(
    const PersonalizerHttpOptions& options, Engine* engine, ServerMetrics* metrics,
    const BearerToken* token) {
  std::unique_ptr<PersonalizerHttp> server(new PersonalizerHttp());
  server->options_ = options;
  server->engine_ = engine;
  server->metrics_ = metrics;
  server->token_ = token;
  if (absl::StatusOr<Model*> model = engine->FindModel(options.model); !model.ok()) {
    return model.status();
  }
  const size_t colon = options.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--http_listen=%s is not host:port (e.g. 127.0.0.1:8080)", options.listen));
  }
  std::string host = options.listen.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  if (options.tls.enabled()) {
    auto https = std::make_unique<httplib::SSLServer>(
        options.tls.cert_file.c_str(), options.tls.key_file.c_str(),
        options.tls.client_ca_file.empty() ? nullptr : options.tls.client_ca_file.c_str());
    if (!https->is_valid()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("cannot serve HTTPS with --tls_cert_file=%s and --tls_key_file=%s",
                          options.tls.cert_file, options.tls.key_file));
    }
    SSL_CTX* ctx = https->ssl_context();
    // TLS 1.2 at least, as gRPC's port. With client certificates, a resumed session must know
    // its context (else OpenSSL refuses to resume it: "internal error"), and the server names
    // the CAs it accepts.
    static constexpr unsigned char kSessionContext[] = "graphbandit-personalizer";
    if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
        SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1) != 1) {
      return absl::InternalError("cannot configure TLS for the HTTP port");
    }
    if (!options.tls.client_ca_file.empty()) {
      STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.tls.client_ca_file.c_str());
      if (names == nullptr) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "--tls_client_ca_file=%s holds no CA certificate", options.tls.client_ca_file));
      }
      SSL_CTX_set_client_CA_list(ctx, names);  // takes ownership
    }
    server->http_ = std::move(https);
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  const int threads = options.threads;
  server->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server->http_->set_payload_max_length(options.max_body_bytes);
  // Without TCP_NODELAY an answer written in two segments (headers, then body) waits for the
  // client's delayed ACK: ~40 ms per call on Linux.
  server->http_->set_tcp_nodelay(true);
  // Each open connection holds a worker while it waits for its next request: short waits keep
  // idle or slow clients from holding them (and the shutdown) for long.
  server->http_->set_read_timeout(kReadTimeoutSeconds);
  server->http_->set_write_timeout(kReadTimeoutSeconds);
  server->http_->set_keep_alive_timeout(kReadTimeoutSeconds);
  server->http_->set_keep_alive_max_count(1000);
  server->Route();
  if (port == 0) {
    server->port_ = server->http_->bind_to_any_port(host);
  } else if (server->http_->bind_to_port(host, port)) {
    server->port_ = port;
  }
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for HTTP on %s; is the port in use? Choose another with --http_listen",
        options.listen));
  }
  server->listener_ = std::thread([s = server.get()] {
    s->http_->listen_after_bind();  // returns once stopped and its workers have finished
    s->stopped_.Notify();
  });
  // A stop() before the listener runs would be lost: return once it runs.
  for (int i = 0; i < 5000 && !server->http_->is_running(); ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  if (!server->http_->is_running()) {
    return absl::InternalError(
        absl::StrFormat("the HTTP server on %s did not start", options.listen));
  }
  return server;
}

PersonalizerHttp::~PersonalizerHttp() { Stop(absl::InfiniteFuture()); }

bool PersonalizerHttp::Stop(absl::Time deadline) {
  if (http_ != nullptr) http_->stop();
  if (!listener_.joinable()) return true;
  if (!stopped_.WaitForNotificationWithDeadline(deadline)) return false;
  listener_.join();
  return true;
}

const char* PersonalizerHttp::MethodOf(const std::string& path) {
  if (absl::EndsWith(path, "/rank")) return "Personalizer.Rank";
  if (absl::EndsWith(path, "/reward")) return "Personalizer.Reward";
  if (absl::EndsWith(path, "/activate")) return "Personalizer.Activate";
  return "Personalizer.Other";
}

bool PersonalizerHttp::Authorized(const httplib::Request& req) const {
  if (!token_->required()) return true;
  grpc::Status checked;
  if (req.has_header("Ocp-Apim-Subscription-Key")) {  // an empty key is a wrong key
    const std::string header =
        absl::StrCat("Bearer ", req.get_header_value("Ocp-Apim-Subscription-Key"));
    checked = token_->CheckHeader(&header);
  } else if (req.has_header("Authorization")) {
    const std::string header = req.get_header_value("Authorization");
    checked = token_->CheckHeader(&header);
  } else {
    checked = token_->CheckHeader(nullptr);
  }
  return checked.ok();
}

void PersonalizerHttp::Route() {
  // Runs on the headers, before any body is read: a call while draining, without the key, or
  // with a body whose size the headers do not bound (chunked, compressed) reads nothing more.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    absl::Status refused;
    if (draining_.load()) {
      refused = absl::UnavailableError("the server is shutting down; retry on another server");
      res.set_header("Connection", "close");
      res.set_header("Retry-After", "1");
    } else if (!Authorized(req)) {
      refused = absl::UnauthenticatedError(
          "access denied: send the key in Ocp-Apim-Subscription-Key (or Authorization: Bearer "
          "KEY)");
    } else if (req.has_header("Transfer-Encoding")) {
      refused = absl::InvalidArgumentError(
          "a chunked body is not accepted: send the body with a Content-Length");
    } else if (req.has_header("Content-Encoding") &&
               !absl::EqualsIgnoreCase(req.get_header_value("Content-Encoding"), "identity")) {
      refused = absl::InvalidArgumentError(
          absl::StrFormat("Content-Encoding %s is not accepted: send the body uncompressed",
                          req.get_header_value("Content-Encoding")));
    }
    if (refused.ok()) return httplib::Server::HandlerResponse::Unhandled;
    Fail(refused, &res);
    if (req.has_header("Transfer-Encoding") &&
        refused.code() == absl::StatusCode::kInvalidArgument) {
      res.status = 411;  // Length Required
    }
    metrics_->RecordRpc(MethodOf(req.path), ToGrpcCode(refused.code()), 0.0);
    return httplib::Server::HandlerResponse::Handled;
  });
  auto timed = [this](const char* method, auto handler) {
    return [this, method, handler](const httplib::Request& req, httplib::Response& res) {
      const absl::Time start = absl::Now();
      const absl::Status status = handler(req, &res);
      if (!status.ok()) Fail(status, &res);
      metrics_->RecordRpc(method, ToGrpcCode(status.code()),
                          absl::ToDoubleSeconds(absl::Now() - start));
    };
  };

  http_->Post(absl::StrCat(kPrefix, "/rank"),
              timed("Personalizer.Rank",
                    [this](const httplib::Request& req, httplib::Response* res) -> absl::Status {
                      pz::RankRequest request;
                      if (absl::Status s = ParseJson(req, &request); !s.ok()) return s;
                      return Rank(request, res);
                    }));
  http_->Post(
      R"(/personalizer/v1\.0/events/([^/]+)/reward)",
      timed("Personalizer.Reward",
            [this](const httplib::Request& req, httplib::Response* res) -> absl::Status {
              pz::RewardRequest request;
              if (absl::Status s = ParseJson(req, &request); !s.ok()) return s;
              if (!request.has_value()) {
                return absl::InvalidArgumentError("value is missing (the reward, a number)");
              }
              if (!std::isfinite(request.value())) {
                return absl::InvalidArgumentError("value must be a finite number");
              }
              RewardRequest reward;
              reward.event_id = req.matches[1];
              reward.reward = request.value();
              reward.model = options_.model;
              absl::StatusOr<RewardResult> result =
                  engine_->ReportReward(reward, absl::Now() + kCallDeadline);
              if (!result.ok()) return result.status();
              if (result->outcome == RewardOutcome::kUnknownEvent) {
                return absl::NotFoundError(
                    absl::StrFormat("no event %s is known (never ranked here, or closed long ago)",
                                    QuoteId(reward.event_id)));
              }
              res->status = 204;  // accepted, a duplicate, or after the event's window
              return absl::OkStatus();
            }));
  http_->Post(R"(/personalizer/v1\.0/events/([^/]+)/activate)",
              timed("Personalizer.Activate",
                    [this](const httplib::Request& req, httplib::Response* res) -> absl::Status {
                      const std::string event_id = req.matches[1];
                      absl::StatusOr<ActivationResult> result =
                          engine_->Activate(options_.model, event_id, absl::Now() + kCallDeadline);
                      if (!result.ok()) return result.status();
                      if (result->outcome == ActivationOutcome::kUnknownEvent) {
                        return absl::NotFoundError(absl::StrFormat(
                            "no event %s is known (never ranked here, or closed long ago)",
                            QuoteId(event_id)));
                      }
                      // Activated now, active already (or never deferred), or after the
                      // event's window, when it is too late to learn from it (as for a late
                      // reward).
                      res->status = 204;
                      return absl::OkStatus();
                    }));
  // httplib's own refusals (no route, a body too large, malformed HTTP) get the error body too.
  http_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.status < 400) return;  // a handler's own answer
    const int status = res.status;
    if (status == 404) {
      Fail(absl::NotFoundError(absl::StrFormat("no such operation: %s %s", req.method, req.path)),
           &res);
    } else if (status == 413) {
      Fail(absl::InvalidArgumentError("the body is too large"), &res);
    } else if (status == 400) {
      Fail(absl::InvalidArgumentError(
               "malformed HTTP request (a POST needs a Content-Length, 0 for an empty body, or "
               "chunked encoding)"),
           &res);
    } else {
      Fail(absl::UnknownError(absl::StrFormat("HTTP status %d", status)), &res);
    }
    res.status = status;
  });
}

}  // namespace graphbandit::server
