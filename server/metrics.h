// Prometheus metrics (prometheus-cpp), named by Prometheus conventions: a graphbandit_ prefix,
// base units, _total on counters, histograms for latency, and only bounded label values
// (RPC method, status code, model name from the configuration, reward outcome).
//
// Request counters and latency histograms are recorded by the service handlers; per-model
// state (dictionary size, users, pending decisions...) is read from the engine at scrape time
// by a collector, so it is always current and costs nothing between scrapes.
#ifndef GRAPHBANDIT_SERVER_METRICS_H_
#define GRAPHBANDIT_SERVER_METRICS_H_

#include <grpcpp/support/status.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/model/engine.h"

namespace graphbandit::server {

class ServerMetrics {
 public:
  explicit ServerMetrics(const Engine* engine);

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // The collector of per-model gauges; register it with the exposer next to registry().
  std::shared_ptr<prometheus::Collectable> model_collector() const { return model_collector_; }
  // The process's CPU time and resident memory (process_cpu_seconds_total,
  // process_resident_memory_bytes); register it with the exposer too.
  std::shared_ptr<prometheus::Collectable> process_collector() const { return process_collector_; }

  void RecordRpc(const std::string& method, grpc::StatusCode code, double seconds);
  void RecordReward(const std::string& model, RewardOutcome outcome);

 private:
  struct RpcSeries {
    prometheus::Counter* requests;
    prometheus::Histogram* duration;
  };
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<prometheus::Collectable> model_collector_;
  std::shared_ptr<prometheus::Collectable> process_collector_;
  prometheus::Family<prometheus::Counter>& rpc_requests_;
  prometheus::Family<prometheus::Histogram>& rpc_duration_;
  prometheus::Family<prometheus::Counter>& rewards_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, int>, RpcSeries> rpc_series_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::pair<std::string, int>, prometheus::Counter*> reward_series_
      ABSL_GUARDED_BY(mu_);
};

// Times one RPC and records it with its final status code.
class RpcRecorder {
 public:
  RpcRecorder(ServerMetrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(absl::Now()) {}
  grpc::Status Finish(grpc::Status status) {
    metrics_->RecordRpc(method_, status.error_code(), absl::ToDoubleSeconds(absl::Now() - start_));
    return status;
  }

 private:
  ServerMetrics* metrics_;
  std::string method_;
  absl::Time start_;
};

// The text name of a gRPC status code ("OK", "INVALID_ARGUMENT", ...).
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace graphbandit::server

#endif  // GRAPHBANDIT_SERVER_METRICS_H_
