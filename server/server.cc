#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/base/thread_priority.h"
#include "server/malformed_requests.h"

namespace graphbandit::server {
namespace {

const char* const kServices[] = {"graphbandit.v1.BanditService", "graphbandit.v1.AdminService"};

// How long health watchers are given to hear NOT_SERVING before the port closes.
constexpr absl::Duration kDrainNotice = absl::Milliseconds(300);
// What the models get to stop even when draining RPCs used the whole grace.
constexpr absl::Duration kMinModelStop = absl::Milliseconds(500);

}  // namespace

absl::StatusOr<std::unique_ptr<GraphbanditServer>> GraphbanditServer::Start(
    const ServerOptions& options, std::unique_ptr<Engine> engine) {
  std::unique_ptr<GraphbanditServer> server(new GraphbanditServer());
  server->engine_ = std::move(engine);
  server->metrics_ = std::make_unique<ServerMetrics>(server->engine_.get());
  server->waiters_ =
      std::make_unique<WorkerPool>(options.waiter_threads, options.max_waiting_calls);
  server->bandit_ = std::make_unique<BanditServiceImpl>(
      server->engine_.get(), server->metrics_.get(), server->waiters_.get(),
      BearerToken(options.bandit_token));
  server->admin_ = std::make_unique<AdminServiceImpl>(server->engine_.get(), server->metrics_.get(),
                                                      BearerToken(options.admin_token));
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials =
      MakeServerCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();

  if (!options.metrics_listen.empty()) {
    try {
      server->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrFormat(
          "cannot serve metrics on %s (%s); is the port in use? Choose another with "
          "--metrics_listen",
          options.metrics_listen, e.what()));
    }
    server->exposer_->RegisterCollectable(server->metrics_->registry());
    server->exposer_->RegisterCollectable(server->metrics_->model_collector());
    server->exposer_->RegisterCollectable(server->metrics_->process_collector());
    const std::vector<int> ports = server->exposer_->GetListeningPorts();
    server->metrics_port_ = ports.empty() ? 0 : ports.front();
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, *credentials, &server->grpc_port_);
  builder.RegisterService(server->bandit_.get());
  builder.RegisterService(server->admin_.get());
  // gRPC sets SO_REUSEPORT by default, which lets a second server silently share a busy port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Unparseable request bodies: INVALID_ARGUMENT naming the type, counted, logged sparingly.
  InstallProtobufLogHandler();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(
      std::make_unique<MalformedRequestInterceptorFactory>(server->metrics_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrFormat(
        "cannot listen for gRPC on %s; is the port in use? Choose another with --listen",
        options.listen));
  }
  if (!options.http_listen.empty()) {
    server->http_token_ = BearerToken(options.bandit_token);
    PersonalizerHttpOptions http;
    http.listen = options.http_listen;
    http.tls = options.tls;
    auto started = PersonalizerHttp::Start(http, server->engine_.get(), server->metrics_.get(),
                                           &server->http_token_);
    if (!started.ok()) return started.status();
    server->http_ = *std::move(started);
  }
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const char* service : kServices) health->SetServingStatus(service, true);
  for (const std::string& model : server->engine_->ModelNames()) {
    health->SetServingStatus(model, true);
  }
  server->health_watcher_ = std::thread([s = server.get()] {
    SetThreadName("gb-health");
    s->WatchModelHealth();
  });
  return server;
}

void GraphbanditServer::WatchModelHealth() {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  const std::vector<std::string> models = engine_->ModelNames();
  std::vector<bool> serving(models.size(), true);
  while (!stop_health_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
    for (size_t i = 0; i < models.size(); ++i) {
      absl::StatusOr<Model*> model = engine_->FindModel(models[i]);
      const bool ok = model.ok() && !(*model)->LogDegraded();
      if (ok != serving[i]) {
        health->SetServingStatus(models[i], ok);
        serving[i] = ok;
      }
    }
  }
}

bool GraphbanditServer::Shutdown(absl::Duration grace) {
  if (shut_down_ || server_ == nullptr) return true;  // nothing started (a failed Start)
  shut_down_ = true;
  const absl::Time deadline = absl::Now() + grace;  // for the whole shutdown
  stop_health_.Notify();
  if (health_watcher_.joinable()) health_watcher_.join();
  // Every service and model NOT_SERVING, and a moment for Watch streams to carry it to their
  // clients before the listening port closes (Shutdown below ends those streams).
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->GetHealthCheckService()->Shutdown();  // and no later change flips it back
  if (http_ != nullptr) http_->BeginDrain();     // 503 from now on
  absl::SleepFor(std::min(grace, kDrainNotice));
  // CivetWeb (behind the Exposer) polls with a fixed 2 s quantum, so stopping it takes up to
  // 2 s: do that while gRPC drains, and wait for it before returning.
  std::thread metrics_stopper([exposer = std::move(exposer_)]() mutable { exposer.reset(); });
  engine_->BeginShutdown();  // calls waiting for a model version end now
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  bool http_stopped = true;
  if (http_ != nullptr && !http_->Stop(std::max(deadline, absl::Now() + absl::Milliseconds(500)))) {
    // A connection outlived the grace: its worker still uses the object, so it is left alone
    // (and the stop is not clean: the process exits without destroying what that uses).
    (void)http_.release();
    http_stopped = false;
  }
  waiters_.reset();  // every call it ran has finished (Wait returned)
  // The models get what is left of the grace, and at least a moment to stop an idle writer.
  const bool clean = engine_->Shutdown(std::max(deadline, absl::Now() + kMinModelStop));
  metrics_stopper.join();
  return clean && http_stopped;
}

GraphbanditServer::~GraphbanditServer() { Shutdown(absl::Seconds(5)); }

}  // namespace graphbandit::server
