// Bearer tokens and TLS settings of the gRPC port: the token check itself, token files, the
// credential errors an operator sees, and a live server that refuses admin and bandit calls
// without the right token while health checks stay open. TLS on the wire (certificates made at
// run time with openssl) is exercised by tests/client/python_client_test.py.
#include "server/security.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "graphbandit/v1/bandit.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/server.h"

namespace graphbandit::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "graphbandit-security-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string Write(const std::string& name, const std::string& content) const {
    const std::string file = (std::filesystem::path(path_) / name).string();
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }

 private:
  std::string path_;
};

TEST(BearerTokenTest, EmptyTokenAdmitsEverything) {
  const BearerToken open;
  EXPECT_FALSE(open.required());
  EXPECT_TRUE(open.CheckHeader(nullptr).ok());
  const std::string anything = "Bearer whatever";
  EXPECT_TRUE(open.CheckHeader(&anything).ok());
}

TEST(BearerTokenTest, OnlyTheExactTokenPasses) {
  const BearerToken token("s3cr3t-Token");
  EXPECT_TRUE(token.required());
  for (const std::string good :
       {"Bearer s3cr3t-Token", "bearer s3cr3t-Token", "BEARER s3cr3t-Token"}) {
    EXPECT_TRUE(token.CheckHeader(&good).ok()) << good;
  }
  for (const std::string bad :
       {"Bearer s3cr3t-token", "Bearer s3cr3t-Token ", "Bearer s3cr3t-Toke", "Bearer s3cr3t-TokenX",
        "Bearer  s3cr3t-Token", "Basic s3cr3t-Token", "s3cr3t-Token", "Bearer ", ""}) {
    const grpc::Status status = token.CheckHeader(&bad);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << bad;
    EXPECT_THAT(status.error_message(), Not(HasSubstr("s3cr3t"))) << bad;
  }
  const grpc::Status missing = token.CheckHeader(nullptr);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(missing.error_message(), HasSubstr("authorization"));
}

TEST(TokenFileTest, WhitespaceIsTrimmedAndBadTokensAreRefused) {
  TempDir dir;
  auto token = ReadTokenFile(dir.Write("ok", "  abc.DEF-123_~\n"), "admin_token_file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, "abc.DEF-123_~");

  auto empty = ReadTokenFile(dir.Write("empty", " \n\t\n"), "admin_token_file");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("--admin_token_file"));

  auto spaced = ReadTokenFile(dir.Write("spaced", "two words\n"), "bandit_token_file");
  EXPECT_EQ(spaced.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spaced.status().message(), HasSubstr("--bandit_token_file"));
  EXPECT_THAT(spaced.status().message(), Not(HasSubstr("two words")));

  auto two_lines = ReadTokenFile(dir.Write("lines", "abc\ndef\n"), "admin_token_file");
  EXPECT_EQ(two_lines.status().code(), absl::StatusCode::kInvalidArgument);

  auto missing = ReadTokenFile("/nonexistent/graphbandit-token", "admin_token_file");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/graphbandit-token"));
}

TEST(ServerCredentialsTest, IncompleteOrMalformedTlsSettingsAreNamed) {
  TempDir dir;
  const std::string not_pem = dir.Write("not.pem", "hello\n");
  const std::string fake_cert =
      dir.Write("cert.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");

  EXPECT_TRUE(MakeServerCredentials(TlsOptions{}).ok());  // plaintext

  TlsOptions cert_only;
  cert_only.cert_file = fake_cert;
  auto status = MakeServerCredentials(cert_only).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tls_key_file"));

  TlsOptions ca_only;
  ca_only.client_ca_file = fake_cert;
  status = MakeServerCredentials(ca_only).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tls_client_ca_file"));

  TlsOptions bad_key;
  bad_key.cert_file = fake_cert;
  bad_key.key_file = not_pem;
  status = MakeServerCredentials(bad_key).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not a PEM private key"));

  TlsOptions missing;
  missing.cert_file = dir.Write("gone", "");
  std::filesystem::remove(missing.cert_file);
  missing.key_file = not_pem;
  status = MakeServerCredentials(missing).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--tls_cert_file"));
}

class TokenServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = Engine::Open(EngineOptions{});
    ASSERT_TRUE(engine.ok()) << engine.status();
    ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.admin_token = "admin-T0ken";
    options.bandit_token = "bandit-T0ken";
    auto server = GraphbanditServer::Start(options, *std::move(engine));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    channel_.reset();
    server_->Shutdown(absl::Seconds(2));
  }

  static void Prepare(grpc::ClientContext* context, const std::string& authorization) {
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!authorization.empty()) context->AddMetadata("authorization", authorization);
  }

  grpc::Status Describe(const std::string& authorization) {
    grpc::ClientContext context;
    Prepare(&context, authorization);
    v1::ModelDescription description;
    return v1::AdminService::NewStub(channel_)->DescribeModel(&context, {}, &description);
  }
  grpc::Status Select(const std::string& authorization, v1::SelectArmResponse* response) {
    grpc::ClientContext context;
    Prepare(&context, authorization);
    v1::SelectArmRequest request;
    request.set_user_id("alice");
    v1::Arm* arm = request.add_candidates();
    arm->set_id("a");
    arm->add_features(1.0);
    return v1::BanditService::NewStub(channel_)->SelectArm(&context, request, response);
  }

  std::unique_ptr<GraphbanditServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(TokenServerTest, EachServiceNeedsItsOwnToken) {
  for (const std::string wrong : {"", "Bearer nope", "Bearer bandit-T0ken", "admin-T0ken"}) {
    const grpc::Status status = Describe(wrong);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong;
    EXPECT_THAT(status.error_message(), Not(HasSubstr("T0ken")));
  }
  EXPECT_TRUE(Describe("Bearer admin-T0ken").ok());

  v1::SelectArmResponse response;
  for (const std::string wrong : {"", "Bearer admin-T0ken", "Bearer bandit-T0ke"}) {
    EXPECT_EQ(Select(wrong, &response).error_code(), grpc::StatusCode::UNAUTHENTICATED) << wrong;
  }
  // A refused call changes nothing: no decision was made.
  grpc::ClientContext context;
  Prepare(&context, "Bearer admin-T0ken");
  v1::ModelDescription before;
  ASSERT_TRUE(v1::AdminService::NewStub(channel_)->DescribeModel(&context, {}, &before).ok());
  EXPECT_EQ(before.decisions(), 0u);

  const grpc::Status ok = Select("Bearer bandit-T0ken", &response);
  ASSERT_TRUE(ok.ok()) << ok.error_message();
  EXPECT_EQ(response.arms_size(), 1);
}

TEST_F(TokenServerTest, HealthNeedsNoToken) {
  grpc::ClientContext context;
  Prepare(&context, "");
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("graphbandit.v1.AdminService");
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(
      grpc::health::v1::Health::NewStub(channel_)->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace graphbandit::server
