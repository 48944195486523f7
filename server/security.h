// Transport security and bearer tokens for the gRPC port.
//
// TLS (optionally mutual) is gRPC's own; the tokens are static shared secrets read from files,
// checked in every method of a protected service before anything else runs. A token never
// appears in a log line, a status message or a metric label.
#ifndef GRAPHBANDIT_SERVER_SECURITY_H_
#define GRAPHBANDIT_SERVER_SECURITY_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/storage/file_util.h"

namespace graphbandit::server {

struct TlsOptions {
  std::string cert_file;       // PEM certificate chain of the server; empty: plaintext
  std::string key_file;        // PEM private key of the server
  std::string client_ca_file;  // PEM CA bundle; non-empty: clients must present a certificate
                               // signed by it (mutual TLS)
  bool enabled() const { return !cert_file.empty() || !key_file.empty(); }
};

// Credentials for the listening port: insecure without TLS options; TLS; or mutual TLS when a
// client CA is given. Errors name the file and the flag that set it.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

// The secret-file readers shared with the command-line clients (core/storage/file_util.h):
// ReadSecretFile for PEM files, ReadTokenFile for the bearer token files.
using storage::ReadSecretFile;
using storage::ReadTokenFile;

// Checks `authorization: Bearer <token>` on a call. An empty token accepts every call.
class BearerToken {
 public:
  BearerToken() = default;
  explicit BearerToken(std::string token) : token_(std::move(token)) {}

  bool required() const { return !token_.empty(); }

  // OK, or UNAUTHENTICATED saying what was missing; the compare takes the same time wherever
  // the presented token first differs.
  grpc::Status Check(const grpc::ServerContextBase& context) const;
  grpc::Status CheckHeader(const std::string* header) const;  // nullptr: no header

 private:
  std::string token_;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_SECURITY_H_
