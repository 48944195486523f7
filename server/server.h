// A running graphbandit server: the gRPC services with health checking and reflection, and the
// Prometheus endpoint. Used by main.cc and by the integration tests (on loopback port 0).
#ifndef GRAPHBANDIT_SERVER_SERVER_H_
#define GRAPHBANDIT_SERVER_SERVER_H_

#include <grpcpp/server.h>
#include <prometheus/exposer.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "core/model/engine.h"
#include "server/metrics.h"
#include "server/personalizer_http.h"
#include "server/security.h"
#include "server/services.h"

namespace graphbandit::server {

struct ServerOptions {
  std::string listen = "127.0.0.1:50051";         // port 0 picks a free port
  std::string metrics_listen = "127.0.0.1:9464";  // empty: no metrics endpoint
  int max_message_bytes = 8 << 20;
  // Calls that wait (rewards for room in a model's queue or for the cluster's log, decisions for
  // min_model_version) run on this many threads, with at most max_waiting_calls queued for them
  // (server/worker_pool.h). At most max_waiting_calls rewards are unanswered at once, whether
  // on those threads or waiting for the sync that makes them durable (server/services.h).
  int waiter_threads = 32;
  int max_waiting_calls = 4096;
  TlsOptions tls;            // the gRPC port's transport security (plaintext by default)
  std::string admin_token;   // non-empty: AdminService calls need 'Bearer <admin_token>'
  std::string bandit_token;  // non-empty: BanditService calls need 'Bearer <bandit_token>'
  // Non-empty: Azure Personalizer's REST API on this address (server/personalizer_http.h), with
  // the bandit token as its key.
  std::string http_listen;
};

class GraphbanditServer {
 public:
  static absl::StatusOr<std::unique_ptr<GraphbanditServer>> Start(const ServerOptions& options,
                                                                  std::unique_ptr<Engine> engine);
  ~GraphbanditServer();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_ != nullptr ? http_->port() : 0; }
  Engine& engine() { return *engine_; }

  // Health goes NOT_SERVING (and health watchers are told, before the port closes), new calls
  // are refused, in-flight calls get until `grace` to finish, then every model applies what it
  // has queued and closes its log.
  // `grace` bounds the whole shutdown (the models get at least 0.5 s to stop their writers);
  // returns false if a model's writer was still busy then: its logged records are replayed at
  // the next start, and the caller should exit at once (std::_Exit) rather than destroy it.
  bool Shutdown(absl::Duration grace);

 private:
  GraphbanditServer() = default;

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<WorkerPool> waiters_;
  std::unique_ptr<BanditServiceImpl> bandit_;
  std::unique_ptr<AdminServiceImpl> admin_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  BearerToken http_token_;
  std::unique_ptr<PersonalizerHttp> http_;
  // Keeps each model's health status (the health service's per-service status, with the
  // model's name as the service) NOT_SERVING while its log is degraded.
  void WatchModelHealth();
  absl::Notification stop_health_;
  std::thread health_watcher_;
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  bool shut_down_ = false;
};

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_SERVER_H_
