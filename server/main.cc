// graphbandit-server: parses flags, opens the engine, serves until SIGTERM or SIGINT.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/base/command_line.h"
#include "core/base/log.h"
#include "core/model/engine.h"
#include "server/config.h"
#include "server/server.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "HOST:PORT for gRPC (IPv6 as [::1]:PORT). Port 0 picks a free port (see --port_file).");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "HOST:PORT for the Prometheus endpoint http://HOST:PORT/metrics; empty disables it.");
ABSL_FLAG(std::string, state_dir, "graphbandit-state",
          "Directory for each model's log segments and snapshots (<state_dir>/<model>/); at "
          "start the newest valid snapshot is loaded and the log after it replayed. Empty keeps "
          "everything in memory (lost at exit).");
ABSL_FLAG(std::string, graph, "",
          "Edge list for the default model's user graph, applied at start: lines "
          "'user_a user_b [weight]', '#' comments. Overrides graph.edge_list_file in --config.");
ABSL_FLAG(std::string, config, "",
          "ServerConfig in protobuf text format (proto/graphbandit/v1/config.proto) declaring "
          "models. Without it the server hosts one model, 'default', with default settings.");
ABSL_FLAG(int32_t, max_message_bytes, 8 << 20, "Largest gRPC message accepted or sent.");
ABSL_FLAG(int32_t, waiter_threads, 32,
          "Threads for the calls that wait: a ReportReward under back-pressure or in cluster mode "
          "(others are answered by the log once durable) and a SelectArm with min_model_version. "
          "Decisions without a wait run on gRPC's own threads.");
ABSL_FLAG(int32_t, max_waiting_calls, 4096,
          "Calls queued for --waiter_threads at most, and rewards unanswered at most (waiting "
          "for the sync that makes them durable or on those threads); more are refused with "
          "RESOURCE_EXHAUSTED.");
ABSL_FLAG(double, shutdown_grace_seconds, 10.0,
          "On SIGTERM/SIGINT, how long the whole shutdown may take: in-flight calls finish, then "
          "each model applies what it logged and writes a final snapshot. A model still busy "
          "then (a long re-draw) stops without it; its logged changes are replayed at the next "
          "start.");
ABSL_FLAG(std::string, port_file, "",
          "If set, once serving, write 'GRPC_PORT METRICS_PORT' to this file, followed by "
          "' HTTP_PORT' with --http_listen (for listen addresses with port 0).");

ABSL_FLAG(std::string, tls_cert_file, "",
          "PEM certificate chain for TLS on the gRPC port (with --tls_key_file). Without it the "
          "gRPC port is plaintext: keep it on a private network.");
ABSL_FLAG(std::string, tls_key_file, "", "PEM private key matching --tls_cert_file.");
ABSL_FLAG(std::string, tls_client_ca_file, "",
          "PEM CA bundle: turns on mutual TLS; every client must present a certificate signed "
          "by one of these CAs.");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding a bearer token; when set, every AdminService call must carry the "
          "metadata 'authorization: Bearer <token>' (else UNAUTHENTICATED).");
ABSL_FLAG(std::string, http_listen, "",
          "Also serve Azure Personalizer's v1.0 REST API (rank, reward, activate) on HOST:PORT, "
          "for the default model, with --bandit_token_file's token as its key and "
          "--tls_cert_file's TLS. Empty (the default): no HTTP API.");
ABSL_FLAG(std::string, bandit_token_file, "",
          "File holding a bearer token required the same way on BanditService calls "
          "(SelectArm, ReportReward). Health checks and reflection need no token.");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "graphbandit-server: %s\n", std::string(status.message()).c_str());
  return 1;
}

// "HOST:PORT" with the port actually bound (it differs when PORT was 0).
std::string WithPort(const std::string& address, int port) {
  const size_t colon = address.rfind(':');
  return absl::StrCat(colon == std::string::npos ? address : address.substr(0, colon), ":", port);
}

}  // namespace

// A program built for a newer CPU than the one it runs on (GRAPHBANDIT_ARCH, CMakeLists.txt)
// would die with SIGILL at its first wide vector instruction; this names what is missing
// instead, as early as main can.
std::string MissingCpuFeatures() {
  std::string missing;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  [[maybe_unused]] const auto need = [&](bool has, const char* name) {
    if (!has) absl::StrAppend(&missing, missing.empty() ? "" : ", ", name);
  };
#if defined(__AVX512F__)
  need(__builtin_cpu_supports("avx512f"), "AVX-512F");
#endif
#if defined(__AVX2__)
  need(__builtin_cpu_supports("avx2"), "AVX2");
#endif
#if defined(__FMA__)
  need(__builtin_cpu_supports("fma"), "FMA");
#endif
#if defined(__AVX__)
  need(__builtin_cpu_supports("avx"), "AVX");
#endif
#endif
  return missing;
}

int main(int argc, char** argv) {
  if (const std::string missing = MissingCpuFeatures(); !missing.empty()) {
    std::fprintf(stderr,
                 "graphbandit-server: this build needs CPU features this machine lacks (%s); "
                 "rebuild with -DGRAPHBANDIT_ARCH=native (or portable)\n",
                 missing.c_str());
    return 1;
  }
  // Block the shutdown signals before any thread starts, so that every thread inherits the
  // mask and only the sigwait below ever sees them (an early SIGTERM waits for us instead of
  // killing the process halfway through start-up).
  sigset_t shutdown_signals;
  sigemptyset(&shutdown_signals);
  sigaddset(&shutdown_signals, SIGTERM);
  sigaddset(&shutdown_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &shutdown_signals, nullptr);
  // Debian's Abseil is built with its debug checks, so every absl::Mutex acquisition (ours and
  // gRPC's) would also update a process-wide lock graph, under a global lock, to detect
  // lock-order cycles. The tests keep that check; a serving process does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Core's warnings (operations not applied, failed snapshots, a log that stopped being
  // durable) go to stderr like the server's own messages.
  graphbandit::SetLogSink([](absl::string_view message) {
    std::fprintf(stderr, "graphbandit-server: %.*s\n", static_cast<int>(message.size()),
                 message.data());
  });

  graphbandit::ParseProgramCommandLine(
      argc, argv, "graphbandit-server",
      "graphbandit-server: online graph-kernel bandit decisions over gRPC.\n"
      "Usage: graphbandit-server [--listen=HOST:PORT] [--metrics_listen=HOST:PORT]\n"
      "                          [--state_dir=DIR] [--graph=EDGE_LIST_FILE] [--config=FILE]\n"
      "                          [--tls_cert_file=PEM --tls_key_file=PEM "
      "[--tls_client_ca_file=PEM]]\n"
      "                          [--admin_token_file=FILE] [--bandit_token_file=FILE]"
      " [--http_listen=HOST:PORT]",
      {"server/main.cc"});
  if (absl::GetFlag(FLAGS_waiter_threads) < 1 || absl::GetFlag(FLAGS_waiter_threads) > 4096 ||
      absl::GetFlag(FLAGS_max_waiting_calls) < 1) {
    std::fprintf(stderr,
                 "graphbandit-server: --waiter_threads must be in [1, 4096] and "
                 "--max_waiting_calls at least 1 (see --help)\n");
    return graphbandit::kExitUsage;
  }

  const std::string config_path = absl::GetFlag(FLAGS_config);
  auto engine_options =
      config_path.empty()
          ? graphbandit::server::ToEngineOptions({}, absl::GetFlag(FLAGS_state_dir))
          : graphbandit::server::ReadEngineOptions(config_path, absl::GetFlag(FLAGS_state_dir));
  if (!engine_options.ok()) return Fail(engine_options.status());
  if (const std::string graph = absl::GetFlag(FLAGS_graph); !graph.empty()) {
    bool found = false;
    for (auto& model : engine_options->models) {
      if (model.name == engine_options->default_model) {
        model.edge_list_file = graph;
        found = true;
      }
    }
    if (!found) {
      graphbandit::ModelOptions model;
      model.name = engine_options->default_model;
      model.edge_list_file = graph;
      engine_options->models.push_back(model);
    }
  }
  auto engine = graphbandit::Engine::Open(*std::move(engine_options));
  if (!engine.ok()) return Fail(engine.status());
  for (const std::string& name : (*engine)->ModelNames()) {
    graphbandit::Model* model = *(*engine)->FindModel(name);
    const auto& recovery = model->recovery();
    const auto view = model->View();
    std::fprintf(stderr,
                 "graphbandit-server: model \"%s\" (%s): snapshot at record %llu, %lld log "
                 "records replayed in %.2f s, %lld rewards learned, %lld users, %lld edges\n",
                 name.c_str(),
                 std::string(graphbandit::PolicyName(model->options().policy)).c_str(),
                 static_cast<unsigned long long>(recovery.snapshot_seq),
                 static_cast<long long>(recovery.records_replayed), recovery.seconds,
                 static_cast<long long>(view->rewards_learned),
                 static_cast<long long>(model->Stats().users), static_cast<long long>(view->edges));
    if (recovery.temporary_files_removed > 0) {
      std::fprintf(stderr,
                   "graphbandit-server: model \"%s\": removed %lld temporary snapshot file(s) "
                   "left by an earlier process\n",
                   name.c_str(), static_cast<long long>(recovery.temporary_files_removed));
    }
    for (const auto& [what, counts] :
         {std::pair<const char*, const std::map<std::string, int64_t>*>{"records lost to damage",
                                                                        &recovery.records_lost},
          {"intact records dropped (their decision was lost)", &recovery.records_dropped}}) {
      if (counts->empty()) continue;
      std::string by_kind;
      for (const auto& [kind, n] : *counts) {
        absl::StrAppend(&by_kind, by_kind.empty() ? "" : ", ", kind, " ", n);
      }
      std::fprintf(stderr, "graphbandit-server: WARNING: model \"%s\": %s: %s\n", name.c_str(),
                   what, by_kind.c_str());
    }
    for (const std::string& damage : recovery.damage) {
      std::fprintf(stderr, "graphbandit-server: WARNING: model \"%s\": %s\n", name.c_str(),
                   damage.c_str());
    }
  }

  graphbandit::server::ServerOptions options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.waiter_threads = absl::GetFlag(FLAGS_waiter_threads);
  options.max_waiting_calls = absl::GetFlag(FLAGS_max_waiting_calls);
  options.tls.cert_file = absl::GetFlag(FLAGS_tls_cert_file);
  options.tls.key_file = absl::GetFlag(FLAGS_tls_key_file);
  options.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca_file);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  if (const std::string path = absl::GetFlag(FLAGS_admin_token_file); !path.empty()) {
    auto token = graphbandit::server::ReadTokenFile(path, "admin_token_file");
    if (!token.ok()) return Fail(token.status());
    options.admin_token = *std::move(token);
  }
  if (const std::string path = absl::GetFlag(FLAGS_bandit_token_file); !path.empty()) {
    auto token = graphbandit::server::ReadTokenFile(path, "bandit_token_file");
    if (!token.ok()) return Fail(token.status());
    options.bandit_token = *std::move(token);
  }
  if (!options.tls.enabled() && (!options.admin_token.empty() || !options.bandit_token.empty())) {
    std::fprintf(stderr,
                 "graphbandit-server: WARNING: bearer tokens without TLS travel in clear text; "
                 "add --tls_cert_file and --tls_key_file\n");
  }
  auto server = graphbandit::server::GraphbanditServer::Start(options, *std::move(engine));
  if (!server.ok()) return Fail(server.status());
  std::string security = options.tls.enabled()
                             ? (options.tls.client_ca_file.empty() ? "TLS" : "mutual TLS")
                             : "plaintext";
  if (!options.admin_token.empty()) security += ", admin token required";
  if (!options.bandit_token.empty()) security += ", bandit token required";
  std::fprintf(stderr, "graphbandit-server: serving gRPC (%s) on %s", security.c_str(),
               WithPort(options.listen, (*server)->grpc_port()).c_str());
  if (!options.metrics_listen.empty()) {
    std::fprintf(stderr, ", metrics on http://%s/metrics",
                 WithPort(options.metrics_listen, (*server)->metrics_port()).c_str());
  }
  if (!options.http_listen.empty()) {
    std::fprintf(stderr, ", Personalizer's REST API on %s://%s/personalizer/v1.0",
                 options.tls.enabled() ? "https" : "http",
                 WithPort(options.http_listen, (*server)->http_port()).c_str());
  }
  std::fprintf(stderr, "; state in %s\n",
               absl::GetFlag(FLAGS_state_dir).empty() ? "memory only"
                                                      : absl::GetFlag(FLAGS_state_dir).c_str());
  if (const std::string port_file = absl::GetFlag(FLAGS_port_file); !port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    {
      std::ofstream out(tmp);
      out << (*server)->grpc_port() << " " << (*server)->metrics_port();
      if (!options.http_listen.empty()) out << " " << (*server)->http_port();
      out << "\n";
    }
    std::rename(tmp.c_str(), port_file.c_str());  // readers never see a half-written file
  }

  int signal_number = 0;
  sigwait(&shutdown_signals, &signal_number);
  std::fprintf(stderr, "graphbandit-server: %s received; shutting down\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
  if (!(*server)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_seconds)))) {
    // A model's writer is still applying (its records are durable and replayed at the next
    // start), or a cancelled fit is still running: exit now, without destroying what it uses.
    std::fprintf(stderr,
                 "graphbandit-server: stopped at the grace deadline (the log above says which "
                 "model was busy); logged changes not yet applied, if any, will be replayed at "
                 "the next start\n");
    std::fflush(stderr);
    std::_Exit(0);
  }
  std::fprintf(stderr, "graphbandit-server: stopped cleanly\n");
  return 0;
}
