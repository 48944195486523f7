// graphbandit-loadgen's driver of the gRPC load: the ring of SelectArm requests it sends, the
// health-check baseline, the closed and open loops of SelectArm with their rewards (now or after
// a delay), and the measurements of each (client/loadgen.cc says what a run is).
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_GENERATOR_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_GENERATOR_H_

#include <Eigen/Dense>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/connection.h"
#include "client/loadtest/call_summary.h"
#include "client/loadtest/completion_threads.h"
#include "client/loadtest/load_driver.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace graphbandit::loadtest {

// The load's shape (graphbandit-loadgen's flags of the same names).
struct LoadOptions {
  std::string model;        // empty: the server's default model
  bool open_loop = false;   // --mode=open: requests at `rate` on a schedule
  int concurrency = 4;      // closed loop: callers; open loop: most calls in flight
  double rate = 0;          // open loop: SelectArm requests per second
  int client_threads = 1;   // threads draining the completion queue
  int deadline_ms = 5000;   // of every RPC
  double reward_ratio = 1;  // fraction of decisions rewarded
  double reward_delay_ms = 0;
  uint64_t seed = 1;
  // The requests: C candidates of d features drawn from `items`, `context_dim` context values,
  // `users` users, `slate_size` arms chosen; named_features sends them as named features.
  int candidates = 50, dim = 16, context_dim = 0, items = 1000, users = 200, slate_size = 1;
  bool named_features = false;
};

// A pre-built ring of SelectArm requests (building messages would cost the client the CPU the
// server needs on a small machine), with the candidates' features for the rewards.
struct Workload {
  std::vector<graphbandit::v1::SelectArmRequest> requests;
  std::vector<std::vector<Eigen::VectorXd>> features;  // per request, per candidate
  Eigen::VectorXd direction;                           // the rewards' hidden preference
};

Workload BuildWorkload(const LoadOptions& options, int ring);

struct PendingReward {
  std::chrono::steady_clock::time_point due;
  std::string event_id;
  std::vector<std::pair<std::string, double>> arms;  // one entry: a single reward
  bool operator>(const PendingReward& o) const { return due > o.due; }
};

// A Tally shared by the completion callbacks (the CompletionThreads).
struct SharedTally {
  std::mutex mu;
  Tally tally;
};

// Every call is asynchronous (a completion queue and --client_threads threads), with no thread
// blocked per call, so that on a small machine the generator takes as little as it can from the
// server it measures (about 0.09 ms of CPU per call at C = 50, d = 16; PERFORMANCE.md).
class Generator {
 public:
  using Clock = std::chrono::steady_clock;

  Generator(LoadOptions options, std::vector<client::Connection> channels, Workload workload);

  // grpc.health.v1 Check for `seconds`: a closed loop at `concurrency` callers, or with `rate`
  // > 0 an open loop (call i due at start + i / rate, at most `concurrency` in flight).
  Summary Baseline(int concurrency, double seconds, double rate);

  // The workload for one phase; `measure` false discards what it saw (warm-up).
  void RunPhase(double seconds, int64_t max_requests, bool measure);

  // The reward timer (rewards with a delay): started before the phases, stopped (after sending
  // what is queued and waiting for the answers) by StopRewards.
  void StartRewards();
  void StopRewards();

  // The slowest SelectArm since the last progress line (microseconds), so that a stall shows
  // when it happened, not only in the run's percentiles.
  void NoteSlowest(double seconds);

  // One line per second on stderr while `running`.
  void Progress(const std::atomic<bool>& running);

  // Registers users u0..u(n-1) and a ring lattice of `degree` over them (AddUsers, AddEdges).
  absl::Status AddRingGraph(int users, int degree);

  absl::StatusOr<graphbandit::v1::ModelDescription> Describe();

  const Summary& select() const { return select_; }
  Summary RewardSummary() {
    std::lock_guard<std::mutex> lock(reward_tally_.mu);
    return Summarise("graphbandit.v1.BanditService/ReportReward", reward_tally_.tally,
                     measured_seconds_);
  }
  std::map<std::string, int64_t> outcomes() {
    std::lock_guard<std::mutex> lock(reward_tally_.mu);
    return outcomes_;
  }
  int64_t accepted_total() { return accepted_total_.load(); }

 private:
  // Calls in flight, and waiting for them.
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    int64_t in_flight = 0;
    void Add() {
      std::lock_guard<std::mutex> lock(mu);
      ++in_flight;
    }
    void Done() {
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      cv.notify_all();
    }
    void WaitBelow(int64_t limit) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return in_flight < limit; });
    }
    void WaitIdle() { WaitBelow(1); }
  };

  struct Phase {
    Clock::time_point start, end;
    int64_t max_requests = 0;
    std::atomic<int64_t> issued{0};
    SharedTally select;
    Flight flight;
  };

  std::chrono::milliseconds Deadline() const {
    return std::chrono::milliseconds(options_.deadline_ms);
  }
  void Record(SharedTally* shared, const grpc::Status& status, double latency);

  // One health call, its latency counted from `due`; once it is answered, the caller's next
  // call follows while the clock is before `chain_until` (closed loop).
  void CheckHealth(size_t i, Clock::time_point due, Clock::time_point chain_until,
                   SharedTally* tally, Flight* flight);

  // SelectArm for ring entry i; `chain` (closed loop): the caller's next request follows.
  void Decide(size_t i, Clock::time_point intended, Phase* phase, bool chain);

  // The reward for a decision (with probability --reward_ratio): now, or by the timer.
  void Reward(size_t i, size_t r, const graphbandit::v1::SelectArmResponse& response);

  void SendReward(PendingReward pending);

  const LoadOptions options_;
  std::vector<client::Connection> channels_;
  Workload workload_;
  std::vector<std::unique_ptr<graphbandit::v1::BanditService::Stub>> bandit_;
  std::vector<std::unique_ptr<graphbandit::v1::AdminService::Stub>> admin_;
  std::vector<std::unique_ptr<grpc::health::v1::Health::Stub>> health_;
  Summary select_;
  double measured_seconds_ = 0;
  std::atomic<Clock::time_point> phase_started_{Clock::now()};
  std::atomic<bool> measuring_{false};
  std::atomic<int64_t> decisions_{0}, rewards_sent_{0}, errors_{0}, accepted_total_{0};
  std::atomic<int64_t> slowest_micros_{0};

  std::mutex reward_mu_;
  std::condition_variable reward_cv_;
  std::priority_queue<PendingReward, std::vector<PendingReward>, std::greater<PendingReward>>
      rewards_;
  bool rewards_stopping_ = false;
  std::thread reward_timer_;
  Flight reward_flight_;

  SharedTally reward_tally_;
  std::map<std::string, int64_t> outcomes_;  // guarded by reward_tally_.mu
  // Last: its destructor waits for the threads, whose callbacks use the members above.
  CompletionThreads calls_;
};

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_GENERATOR_H_
