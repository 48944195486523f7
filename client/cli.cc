// graphbandit-cli: one RPC per invocation, for humans at a terminal and for shell scripts.
// Exit status: 0 success, 1 health not SERVING (or a bad flag / --help, as for every absl
// program), 2 the call failed, 64 usage error (EX_USAGE).
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/connection.h"
#include "google/protobuf/util/json_util.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address HOST:PORT (IPv6 as [::1]:PORT; any gRPC target URI also works).");
ABSL_FLAG(int32_t, deadline_ms, 5000,
          "Deadline of the call in milliseconds (> 0). A call not finished by then fails with "
          "DEADLINE_EXCEEDED.");
// Options of the select/reward shortcuts. They are optional-typed so that "given" can be told
// apart from "left at the default", which lets misplaced ones be reported instead of ignored.
ABSL_FLAG(std::optional<std::string>, user, std::nullopt, "select: the user to serve (required).");
ABSL_FLAG(std::optional<std::string>, model, std::nullopt,
          "select, reward: model name; unset means the server's default model.");
ABSL_FLAG(std::optional<int32_t>, k, std::nullopt,
          "select: number of arms to return (slate_size, >= 1); unset means 1.");
ABSL_FLAG(std::optional<std::string>, event_id, std::nullopt,
          "select: optional caller-chosen event id (a retry with the same id replays the stored "
          "decision). reward: the event id SelectArm returned (required).");
ABSL_FLAG(std::optional<std::string>, context, std::nullopt,
          "select: request context as comma-separated numbers, e.g. --context=1,0,0.5.");
ABSL_FLAG(std::optional<double>, reward, std::nullopt,
          "reward: the reward of a single-arm decision (for slates give ARM_ID=X arguments).");

namespace {

namespace gbv1 = graphbandit::v1;
using google::protobuf::Message;

constexpr int kExitNotServing = 1;
constexpr int kExitRpcError = 2;
constexpr int kExitUsage = 64;

constexpr char kUsage[] = R"(one graphbandit RPC from the command line.

Usage: graphbandit-cli [--target=HOST:PORT] [--deadline_ms=N] COMMAND [ARGS]
       TLS and tokens: [--tls_ca_file=PEM [--tls_cert_file=PEM --tls_key_file=PEM]
       [--tls_server_name=NAME]] [--token_file=FILE] [--admin_token_file=FILE]

Commands:
  METHOD [JSON | -]
      Calls one RPC: SelectArm, ReportReward (graphbandit.v1.BanditService), AddUsers,
      AddEdges, RemoveEdges, DescribeModel, ListModels, SetServingMode
      (graphbandit.v1.AdminService); the fully qualified form SERVICE/METHOD is accepted too.
      JSON is the request message in the proto3 JSON mapping
      (proto/graphbandit/v1/bandit.proto; snake_case or camelCase names).
      Without JSON, or with '-', the request is read from stdin (empty input means {}; with no
      argument and a terminal on stdin, {} is sent). The response is printed as JSON.
        graphbandit-cli SelectArm '{"user_id":"alice","candidates":[{"id":"a","features":[1,0]},{"id":"b","features":[0,1]}]}'
        graphbandit-cli ReportReward '{"event_id":"EVENT_ID","reward":1}'
        graphbandit-cli AddEdges '{"edges":[{"user_a":"alice","user_b":"bob","weight":1}]}'
        graphbandit-cli RemoveEdges '{"edges":[{"user_a":"alice","user_b":"bob"}]}'
        echo '{"model":"news"}' | graphbandit-cli graphbandit.v1.AdminService/DescribeModel
        graphbandit-cli ListModels

  select --user=ID [--model=NAME] [--k=N] [--event_id=ID] [--context=X,Y,...] ARM_ID:F1,F2,... ...
      SelectArm shortcut. One argument per candidate: its id and its comma-separated
      features, split at the LAST ':' (so ids may contain ':').
        graphbandit-cli select --user=alice --k=1 a:1,0 b:0,1

  reward --event_id=ID [--model=NAME] (--reward=X | ARM_ID=X [ARM_ID=X]...)
      ReportReward shortcut: --reward for a decision that returned one arm, or one ARM_ID=X
      per rewarded arm of a slate (split at the LAST '=').
        graphbandit-cli reward --event_id=EVENT_ID --reward=1
        graphbandit-cli reward --event_id=EVENT_ID a=1 b=0

  health [SERVICE]
      grpc.health.v1.Health/Check for SERVICE (default "": the whole server). Prints
      SERVING, NOT_SERVING, SERVICE_UNKNOWN...; exits 0 only for SERVING, else 1.
        graphbandit-cli health && graphbandit-cli health graphbandit.v1.BanditService

  services
      Lists the services the server exposes (server reflection v1alpha), one per line.
        graphbandit-cli services

Exit status: 0 success; 1 health not SERVING; 2 the call failed, with "error: CODE: message"
on stderr (UNAVAILABLE when nothing answers at --target, DEADLINE_EXCEEDED past
--deadline_ms); 64 usage error (unknown command, malformed JSON or argument); an unknown flag, like
--help itself, exits 1.)";

int UsageError(const std::string& message) {
  std::cerr << "graphbandit-cli: " << message
            << "\nRun 'graphbandit-cli --help' for the commands and flags.\n";
  return kExitUsage;
}

int RpcError(grpc::StatusCode code, const std::string& message) {
  std::cerr << "error: " << graphbandit::client::StatusCodeName(code) << ": " << message << "\n";
  return kExitRpcError;
}

int RpcError(const grpc::Status& status) {
  return RpcError(status.error_code(), status.error_message());
}

void SetDeadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms)));
}

// ---- The generic METHOD command -------------------------------------------------------------

// One unary RPC, type-erased so that the JSON path serves every method alike.
struct Method {
  std::string service;  // fully qualified, e.g. "graphbandit.v1.BanditService"
  std::string name;
  const Message* request_prototype;
  const Message* response_prototype;
  std::function<grpc::Status(const std::shared_ptr<grpc::Channel>&, grpc::ClientContext*,
                             const Message&, Message*)>
      call;
};

// Service is given explicitly (it cannot be deduced through Service::Stub); the message types
// are deduced from the stub's member function.
template <typename Service, typename Request, typename Response>
Method MakeMethod(const char* name, grpc::Status (Service::Stub::*rpc)(grpc::ClientContext*,
                                                                       const Request&, Response*)) {
  return Method{Service::service_full_name(), name, &Request::default_instance(),
                &Response::default_instance(),
                [rpc](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context,
                      const Message& request, Message* response) {
                  auto stub = Service::NewStub(channel);
                  return (stub.get()->*rpc)(context, static_cast<const Request&>(request),
                                            static_cast<Response*>(response));
                }};
}

const std::vector<Method>& Methods() {
  using gbv1::AdminService;
  using gbv1::BanditService;
  static const auto* methods = new std::vector<Method>{
      MakeMethod<BanditService>("SelectArm", &BanditService::Stub::SelectArm),
      MakeMethod<BanditService>("ReportReward", &BanditService::Stub::ReportReward),
      MakeMethod<AdminService>("AddUsers", &AdminService::Stub::AddUsers),
      MakeMethod<AdminService>("AddEdges", &AdminService::Stub::AddEdges),
      MakeMethod<AdminService>("RemoveEdges", &AdminService::Stub::RemoveEdges),
      MakeMethod<AdminService>("DescribeModel", &AdminService::Stub::DescribeModel),
      MakeMethod<AdminService>("ListModels", &AdminService::Stub::ListModels),
      MakeMethod<AdminService>("SetServingMode", &AdminService::Stub::SetServingMode),
  };
  return *methods;
}

// Accepts "SelectArm", "graphbandit.v1.BanditService/SelectArm" and the HTTP/2 path form
// "/graphbandit.v1.BanditService/SelectArm" that grpcurl users and server logs show.
const Method* FindMethod(absl::string_view name) {
  absl::ConsumePrefix(&name, "/");
  for (const Method& method : Methods()) {
    if (name == method.name || name == absl::StrCat(method.service, "/", method.name)) {
      return &method;
    }
  }
  return nullptr;
}

int Invoke(const graphbandit::client::Connection& connection, const Method& method,
           const Message& request) {
  std::unique_ptr<Message> response(method.response_prototype->New());
  grpc::ClientContext context;
  SetDeadline(&context);
  connection.Authorize(&context, method.service);
  graphbandit::client::NameModel(&context, absl::GetFlag(FLAGS_model).value_or(""));
  const grpc::Status status = method.call(connection.channel, &context, request, response.get());
  if (!status.ok()) return RpcError(status);

  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(*response, &json, options);
  if (!printed.ok()) {
    std::cerr << "graphbandit-cli: cannot print the response as JSON: " << printed.ToString()
              << "\n";
    return kExitRpcError;
  }
  while (!json.empty() && json.back() == '\n') json.pop_back();
  std::cout << json << "\n";
  return 0;
}

int RunMethod(const graphbandit::client::Connection& connection, const Method& method,
              const std::vector<std::string>& args) {
  if (args.size() > 1)
    return UsageError(absl::StrCat(method.name, " takes at most one JSON argument"));
  std::string json;
  if (!args.empty() && args[0] != "-") {
    json = args[0];
  } else if (!args.empty() || !isatty(STDIN_FILENO)) {
    json.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }
  // Nothing at all is the empty request, so `graphbandit-cli ListModels </dev/null` works.
  if (absl::StripAsciiWhitespace(json).empty()) json = "{}";

  std::unique_ptr<Message> request(method.request_prototype->New());
  const auto parsed = google::protobuf::util::JsonStringToMessage(json, request.get());
  if (!parsed.ok()) {
    return UsageError(absl::StrCat("bad JSON for ", request->GetDescriptor()->full_name(), ": ",
                                   std::string(parsed.message())));
  }
  return Invoke(connection, method, *request);
}

// ---- The select and reward shortcuts --------------------------------------------------------

// "1,0,0.5" -> {1, 0, 0.5}; "" -> {}. Returns false on any malformed number.
bool ParseNumbers(absl::string_view text, google::protobuf::RepeatedField<double>* out) {
  if (text.empty()) return true;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double value;
    if (!absl::SimpleAtod(part, &value)) return false;
    out->Add(value);
  }
  return true;
}

int RunSelect(const graphbandit::client::Connection& connection,
              const std::vector<std::string>& args) {
  gbv1::SelectArmRequest request;
  const auto user = absl::GetFlag(FLAGS_user);
  if (!user.has_value()) return UsageError("select needs --user=ID");
  request.set_user_id(*user);
  request.set_model(absl::GetFlag(FLAGS_model).value_or(""));
  request.set_event_id(absl::GetFlag(FLAGS_event_id).value_or(""));
  if (const auto k = absl::GetFlag(FLAGS_k); k.has_value()) {
    if (*k < 1) return UsageError("--k must be at least 1");
    request.set_slate_size(static_cast<uint32_t>(*k));
  }
  const std::string context = absl::GetFlag(FLAGS_context).value_or("");
  if (!ParseNumbers(context, request.mutable_context())) {
    return UsageError(absl::StrCat("--context='", context, "' is not comma-separated numbers"));
  }
  if (args.empty()) return UsageError("select needs at least one candidate ARM_ID:F1,F2,...");
  for (const std::string& arg : args) {
    const size_t colon = arg.rfind(':');
    gbv1::Arm* arm = request.add_candidates();
    if (colon == std::string::npos ||
        !ParseNumbers(absl::string_view(arg).substr(colon + 1), arm->mutable_features())) {
      return UsageError(absl::StrCat("candidate '", arg, "' is not ARM_ID:F1,F2,..."));
    }
    arm->set_id(arg.substr(0, colon));
  }
  return Invoke(connection, *FindMethod("SelectArm"), request);
}

int RunReward(const graphbandit::client::Connection& connection,
              const std::vector<std::string>& args) {
  gbv1::ReportRewardRequest request;
  const auto event_id = absl::GetFlag(FLAGS_event_id);
  if (!event_id.has_value()) return UsageError("reward needs --event_id=ID");
  request.set_event_id(*event_id);
  request.set_model(absl::GetFlag(FLAGS_model).value_or(""));
  const auto reward = absl::GetFlag(FLAGS_reward);
  if (reward.has_value() == !args.empty()) {
    return UsageError("reward needs either --reward=X or ARM_ID=X arguments (not both)");
  }
  if (reward.has_value()) request.set_reward(*reward);
  for (const std::string& arg : args) {
    const size_t equals = arg.rfind('=');
    double value;
    if (equals == std::string::npos || !absl::SimpleAtod(arg.substr(equals + 1), &value)) {
      return UsageError(absl::StrCat("arm reward '", arg, "' is not ARM_ID=X"));
    }
    gbv1::ArmReward* arm_reward = request.add_arm_rewards();
    arm_reward->set_arm_id(arg.substr(0, equals));
    arm_reward->set_reward(value);
  }
  return Invoke(connection, *FindMethod("ReportReward"), request);
}

// The shortcut options are global absl flags, so `DescribeModel --model=x` would parse fine and
// then silently describe the default model; refuse such misplaced options instead.
std::string MisplacedFlag(const std::string& command) {
  struct Option {
    const char* name;
    bool given;
    bool for_select;
    bool for_reward;
  };
  const Option options[] = {
      {"user", absl::GetFlag(FLAGS_user).has_value(), true, false},
      {"model", absl::GetFlag(FLAGS_model).has_value(), true, true},
      {"k", absl::GetFlag(FLAGS_k).has_value(), true, false},
      {"event_id", absl::GetFlag(FLAGS_event_id).has_value(), true, true},
      {"context", absl::GetFlag(FLAGS_context).has_value(), true, false},
      {"reward", absl::GetFlag(FLAGS_reward).has_value(), false, true},
  };
  for (const Option& option : options) {
    if (!option.given) continue;
    if ((command == "select" && option.for_select) || (command == "reward" && option.for_reward)) {
      continue;
    }
    const char* applies = option.for_select && option.for_reward ? "select and reward"
                          : option.for_select                    ? "select"
                                                                 : "reward";
    return absl::StrCat("--", option.name, " applies only to ", applies,
                        command == "select" || command == "reward"
                            ? ""
                            : "; with a METHOD put the field in the JSON request");
  }
  return "";
}

// ---- health and services --------------------------------------------------------------------

int RunHealth(const std::shared_ptr<grpc::Channel>& channel, const std::vector<std::string>& args) {
  using grpc::health::v1::HealthCheckResponse;
  if (args.size() > 1) return UsageError("health takes at most one SERVICE name");
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(args.empty() ? "" : args[0]);
  HealthCheckResponse response;
  grpc::ClientContext context;
  SetDeadline(&context);
  const grpc::Status status =
      grpc::health::v1::Health::NewStub(channel)->Check(&context, request, &response);
  // Check answers NOT_FOUND for a service it does not know; scripts probing readiness want the
  // status name the health protocol defines for that case, not an RPC failure.
  if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
    std::cout << HealthCheckResponse::ServingStatus_Name(HealthCheckResponse::SERVICE_UNKNOWN)
              << "\n";
    return kExitNotServing;
  }
  if (!status.ok()) return RpcError(status);
  std::cout << HealthCheckResponse::ServingStatus_Name(response.status()) << "\n";
  return response.status() == HealthCheckResponse::SERVING ? 0 : kExitNotServing;
}

int RunServices(const std::shared_ptr<grpc::Channel>& channel,
                const std::vector<std::string>& args) {
  namespace reflection = grpc::reflection::v1alpha;
  if (!args.empty()) return UsageError("services takes no arguments");
  grpc::ClientContext context;
  SetDeadline(&context);
  auto stub = reflection::ServerReflection::NewStub(channel);
  auto stream = stub->ServerReflectionInfo(&context);
  reflection::ServerReflectionRequest request;
  request.set_list_services("*");  // the content is ignored; "*" is the convention
  if (stream->Write(request)) stream->WritesDone();

  std::vector<std::string> names;
  std::optional<reflection::ErrorResponse> reflection_error;
  reflection::ServerReflectionResponse response;
  while (stream->Read(&response)) {
    if (response.has_error_response()) reflection_error = response.error_response();
    for (const auto& service : response.list_services_response().service()) {
      names.push_back(service.name());
    }
  }
  const grpc::Status status = stream->Finish();
  if (!status.ok()) return RpcError(status);
  if (reflection_error.has_value()) {
    return RpcError(static_cast<grpc::StatusCode>(reflection_error->error_code()),
                    reflection_error->error_message());
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) std::cout << name << "\n";
  return 0;
}

// ---- Flag parsing ---------------------------------------------------------------------------

// Returns the positional arguments, argv[0] first. --help prints the usage and exits 0; an
// unknown flag or a bad value exits 64 (core/base/command_line.h).
std::vector<char*> ParseFlags(int argc, char** argv) {
  return graphbandit::client::ParseCommandLine(argc, argv, "client/cli.cc", kUsage);
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<char*> positional = ParseFlags(argc, argv);
  if (positional.size() < 2) return UsageError("missing COMMAND");
  const std::string command = positional[1];
  const std::vector<std::string> args(positional.begin() + 2, positional.end());

  if (const std::string misplaced = MisplacedFlag(command); !misplaced.empty()) {
    return UsageError(misplaced);
  }
  if (absl::GetFlag(FLAGS_deadline_ms) <= 0) return UsageError("--deadline_ms must be > 0");
  const std::string target = absl::GetFlag(FLAGS_target);
  if (target.empty()) return UsageError("--target must not be empty");
  const absl::StatusOr<graphbandit::client::Connection> connection =
      graphbandit::client::ConnectFromFlags(target);
  if (!connection.ok()) return UsageError(std::string(connection.status().message()));

  if (command == "select") return RunSelect(*connection, args);
  if (command == "reward") return RunReward(*connection, args);
  if (command == "health") return RunHealth(connection->channel, args);
  if (command == "services") return RunServices(connection->channel, args);
  if (const Method* method = FindMethod(command)) return RunMethod(*connection, *method, args);
  std::string known;
  for (const Method& method : Methods()) absl::StrAppend(&known, method.name, ", ");
  return UsageError(absl::StrCat("unknown command '", command, "' (commands: ", known,
                                 "select, reward, health, services)"));
}
