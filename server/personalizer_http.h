// Azure Personalizer's v1.0 data-plane REST API (rank, reward, activate) on its own port, so that
// an application written for Personalizer moves here by changing its endpoint and its key.
// Every call goes through the same engine as gRPC's SelectArm and ReportReward, and is counted in
// the same graphbandit_rpc_* metrics under the method names "Personalizer.Rank",
// "Personalizer.Reward" and "Personalizer.Activate".
//
// Served with cpp-httplib (Debian's libcpp-httplib-dev): a C++ server with a thread pool,
// keep-alive and routing, whose stop does not wait for a poll quantum (CivetWeb, which the
// metrics endpoint already links, polls with a fixed 2 s one and would add that to every
// shutdown and test), and that Debian keeps patched.
#ifndef GRAPHBANDIT_SERVER_PERSONALIZER_HTTP_H_
#define GRAPHBANDIT_SERVER_PERSONALIZER_HTTP_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/model/engine.h"
#include "server/metrics.h"
#include "server/security.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace graphbandit::personalizer::v1 {
class RankRequest;
}

namespace graphbandit::server {

struct PersonalizerHttpOptions {
  std::string listen;  // host:port; port 0 picks a free port
  // The model that ranks and learns; empty: the server's default model.
  std::string model;
  int threads = 16;  // each open connection holds one while it is open
  size_t max_body_bytes = 4 << 20;
  // The top-level context feature that names the user (a string), e.g. {"_userId": "alice"}.
  // Personalizer ignores keys beginning with '_', so the same request still works there.
  std::string user_feature = "_userId";
  // The user of a request without that feature: every such request learns for this one user,
  // as Personalizer learns one function for everyone.
  std::string default_user = "personalizer";
  TlsOptions tls;  // as the gRPC port's: HTTPS when set
};

class PersonalizerHttp {
 public:
  // Listens at once; errors name the address. `engine`, `metrics` and `token` outlive it.
  static absl::StatusOr<std::unique_ptr<PersonalizerHttp>> Start(
      const PersonalizerHttpOptions& options, Engine* engine, ServerMetrics* metrics,
      const BearerToken* token);
  ~PersonalizerHttp();

  int port() const { return port_; }
  // From now on every call is answered 503 (ServiceUnavailable), while the port stays open.
  void BeginDrain() { draining_.store(true); }
  // Closes the port and waits, until `deadline`, for the calls in progress and the open
  // connections (each closes within 2 s of silence). False: some are still open, and the object
  // must not be destroyed (its threads still use it).
  bool Stop(absl::Time deadline);

 private:
  PersonalizerHttp() = default;
  void Route();
  bool Authorized(const httplib::Request& req) const;
  static const char* MethodOf(const std::string& path);
  // POST .../rank, parsed: answers 201 with the ranking, or an error status.
  absl::Status Rank(const personalizer::v1::RankRequest& request, httplib::Response* res);

  PersonalizerHttpOptions options_;
  Engine* engine_ = nullptr;
  ServerMetrics* metrics_ = nullptr;
  const BearerToken* token_ = nullptr;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  absl::Notification stopped_;  // the listener has returned
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_PERSONALIZER_HTTP_H_
