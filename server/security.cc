#include "server/security.h"

#include <grpcpp/security/server_credentials.h>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"

namespace graphbandit::server {
namespace {

constexpr char kBearerPrefix[] = "Bearer ";

// Equal-length compare whose time does not depend on where the inputs differ.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return difference == 0;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options) {
  if (!options.enabled()) {
    if (!options.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca_file needs --tls_cert_file and --tls_key_file (mutual TLS is TLS "
          "with client certificates)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.cert_file.empty() || options.key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls_cert_file and --tls_key_file");
  }
  absl::StatusOr<std::string> cert = ReadSecretFile(options.cert_file, "tls_cert_file");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadSecretFile(options.key_file, "tls_key_file");
  if (!key.ok()) return key.status();
  if (!absl::StrContains(*cert, "-----BEGIN CERTIFICATE-----")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls_cert_file: %s is not a PEM certificate", options.cert_file));
  }
  if (!absl::StrContains(*key, "PRIVATE KEY-----")) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--tls_key_file: %s is not a PEM private key", options.key_file));
  }
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  if (!options.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadSecretFile(options.client_ca_file, "tls_client_ca_file");
    if (!ca.ok()) return ca.status();
    if (!absl::StrContains(*ca, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--tls_client_ca_file: %s is not a PEM certificate bundle", options.client_ca_file));
    }
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

grpc::Status BearerToken::Check(const grpc::ServerContextBase& context) const {
  if (!required()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  if (found == metadata.end()) return CheckHeader(nullptr);
  const std::string header(found->second.data(), found->second.size());
  return CheckHeader(&header);
}

grpc::Status BearerToken::CheckHeader(const std::string* header) const {
  if (!required()) return grpc::Status::OK;
  if (header == nullptr) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "this service needs 'authorization: Bearer <token>' metadata");
  }
  // The scheme name is case-insensitive (RFC 7235 section 2.1); the token is not.
  if (!absl::StartsWithIgnoreCase(*header, kBearerPrefix)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "the authorization metadata must be 'Bearer <token>'");
  }
  const std::string presented = header->substr(sizeof(kBearerPrefix) - 1);
  if (!ConstantTimeEquals(presented, token_)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "the bearer token is not valid");
  }
  return grpc::Status::OK;
}

}  // namespace graphbandit::server
