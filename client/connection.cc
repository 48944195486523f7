#include "client/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <iterator>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/command_line.h"
#include "core/storage/file_util.h"

ABSL_FLAG(std::string, tls_ca_file, "",
          "PEM CA bundle that signed the server's certificate; setting it (or --tls_cert_file) "
          "connects with TLS instead of plaintext.");
ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM client certificate for servers that require mutual TLS (with --tls_key_file).");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key of --tls_cert_file.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate instead of the host in --target.");
ABSL_FLAG(std::string, token_file, "",
          "File holding the bearer token for BanditService calls (server flag "
          "--bandit_token_file).");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding the bearer token for AdminService calls (server flag "
          "--admin_token_file).");

namespace graphbandit::client {
namespace {

// The token of a --*token_file flag; no flag, no token.
absl::StatusOr<std::string> ReadToken(const std::string& path, const char* flag) {
  if (path.empty()) return std::string();
  return storage::ReadTokenFile(path, flag);
}

}  // namespace

void Connection::Authorize(grpc::ClientContext* context, const std::string& service) const {
  const std::string* token = nullptr;
  if (absl::EndsWith(service, ".BanditService")) token = &bandit_token;
  if (absl::EndsWith(service, ".AdminService")) token = &admin_token;
  if (token != nullptr && !token->empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", *token));
  }
}

void NameModel(grpc::ClientContext* context, const std::string& model) {
  if (!model.empty()) context->AddMetadata("x-graphbandit-model", model);
}

absl::StatusOr<Connection> ConnectFromFlags(const std::string& target, int channel_index) {
  Connection connection;
  absl::StatusOr<std::string> bandit = ReadToken(absl::GetFlag(FLAGS_token_file), "token_file");
  if (!bandit.ok()) return bandit.status();
  absl::StatusOr<std::string> admin =
      ReadToken(absl::GetFlag(FLAGS_admin_token_file), "admin_token_file");
  if (!admin.ok()) return admin.status();
  connection.bandit_token = *std::move(bandit);
  connection.admin_token = *std::move(admin);

  const std::string ca_file = absl::GetFlag(FLAGS_tls_ca_file);
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key_file);
  const std::string server_name = absl::GetFlag(FLAGS_tls_server_name);
  if (cert_file.empty() != key_file.empty()) {
    return absl::InvalidArgumentError("--tls_cert_file and --tls_key_file go together");
  }
  const bool tls = !ca_file.empty() || !cert_file.empty();
  if (!tls) {
    if (!server_name.empty()) {
      return absl::InvalidArgumentError("--tls_server_name needs TLS (--tls_ca_file)");
    }
    grpc::ChannelArguments arguments;
    if (channel_index >= 0) arguments.SetInt("graphbandit.channel_index", channel_index);
    connection.channel =
        grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), arguments);
    return connection;
  }
  grpc::SslCredentialsOptions ssl;  // an empty root bundle means the system's CAs
  if (!ca_file.empty()) {
    absl::StatusOr<std::string> ca = storage::ReadSecretFile(ca_file, "tls_ca_file");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!cert_file.empty()) {
    absl::StatusOr<std::string> cert = storage::ReadSecretFile(cert_file, "tls_cert_file");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = storage::ReadSecretFile(key_file, "tls_key_file");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  grpc::ChannelArguments arguments;
  if (channel_index >= 0) arguments.SetInt("graphbandit.channel_index", channel_index);
  if (!server_name.empty()) arguments.SetSslTargetNameOverride(server_name);
  connection.channel = grpc::CreateCustomChannel(target, grpc::SslCredentials(ssl), arguments);
  return connection;
}

std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view program_file,
                                    absl::string_view usage) {
  std::string program = argc > 0 ? argv[0] : "graphbandit";
  if (const size_t slash = program.rfind('/'); slash != std::string::npos) {
    program = program.substr(slash + 1);
  }
  return ParseProgramCommandLine(argc, argv, program, usage,
                                 {std::string(program_file), "client/connection.cc"});
}

std::string StatusCodeName(grpc::StatusCode code) {
  static constexpr const char* kNames[] = {"OK",
                                           "CANCELLED",
                                           "UNKNOWN",
                                           "INVALID_ARGUMENT",
                                           "DEADLINE_EXCEEDED",
                                           "NOT_FOUND",
                                           "ALREADY_EXISTS",
                                           "PERMISSION_DENIED",
                                           "RESOURCE_EXHAUSTED",
                                           "FAILED_PRECONDITION",
                                           "ABORTED",
                                           "OUT_OF_RANGE",
                                           "UNIMPLEMENTED",
                                           "INTERNAL",
                                           "UNAVAILABLE",
                                           "DATA_LOSS",
                                           "UNAUTHENTICATED"};
  const int index = static_cast<int>(code);
  if (index >= 0 && index < static_cast<int>(std::size(kNames))) return kNames[index];
  return absl::StrCat("CODE_", index);
}

}  // namespace graphbandit::client
