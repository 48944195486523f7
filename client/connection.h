// How the command-line programs reach a server: plaintext, TLS or mutual TLS, with the bearer
// tokens the server may require (see server/security.h). Shared by graphbandit-cli and
// graphbandit-loadtest, which both take the flags defined in connection.cc.
#ifndef GRAPHBANDIT_CLIENT_CONNECTION_H_
#define GRAPHBANDIT_CLIENT_CONNECTION_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace graphbandit::client {

struct Connection {
  std::shared_ptr<grpc::Channel> channel;
  std::string bandit_token;  // sent on BanditService calls when non-empty
  std::string admin_token;   // sent on AdminService calls when non-empty

  // Adds 'authorization: Bearer ...' for a call to `service` (a full name such as
  // "graphbandit.v1.AdminService"); other services (health, reflection) get nothing.
  void Authorize(grpc::ClientContext* context, const std::string& service) const;
};

// Names the call's model in the x-graphbandit-model header, which a proxy in front of a cluster
// routes by (deploy/cluster/nginx.conf); nothing for the default model ("").
void NameModel(grpc::ClientContext* context, const std::string& model);

// Opens a channel to `target` as the connection flags say (--tls_ca_file, --tls_cert_file,
// --tls_key_file, --tls_server_name, --token_file, --admin_token_file). Errors name the flag.
// A channel_index >= 0 makes the channel's arguments unique, so that channels opened with
// different indices never share a TCP connection (gRPC pools subchannels with equal arguments).
absl::StatusOr<Connection> ConnectFromFlags(const std::string& target, int channel_index = -1);

// The command line of a program whose own flags are defined in the file ending in
// `program_file` (e.g. "client/cli.cc"), as every graphbandit program reads it
// (core/base/command_line.h: --help exits 0, a usage error exits 64); --help lists that file's
// flags and the connection flags. Returns the positional arguments, argv[0] first.
std::vector<char*> ParseCommandLine(int argc, char** argv, absl::string_view program_file,
                                    absl::string_view usage);

// The canonical name of a gRPC status code ("RESOURCE_EXHAUSTED"; "CODE_n" outside the known
// range), as the command-line tools print and report it.
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace graphbandit::client

#endif  // GRAPHBANDIT_CLIENT_CONNECTION_H_
