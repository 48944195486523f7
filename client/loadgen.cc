// graphbandit-loadgen: drives SelectArm (and ReportReward) at a server the way ghz and wrk drive
// theirs, and says what the server sustained against the plain gRPC ceiling of the same machine.
//
//   closed loop (--mode=closed): --concurrency callers, each sending its next request when the
//     previous one returned;
//   open loop (--mode=open): requests at a fixed --rate on a schedule; a request's latency is
//     measured from the time the schedule meant to send it, so a server (or a client) that falls
//     behind shows as latency instead of as fewer requests (no coordinated omission).
//
// A run: connect --channels channels (each its own TCP connection); a baseline of
// grpc.health.v1.Health/Check at the same concurrency (--baseline_seconds, closed loop), the
// ceiling Q0 of the server's RPC path with no model work (or, with --baseline_rate, an open loop
// of health calls at that rate, which measures a bare call's cost and sets no ceiling);
// --warmup_seconds of the workload, discarded; then --duration_seconds (or --requests) measured.
// Every decision is rewarded with probability --reward_ratio after --reward_delay_ms, by separate
// reward senders. Afterwards the generator waits (at most --learn_wait_seconds) until the model has
// learned every ACCEPTED reward, reads the model's dictionary size m and, from the server's
// /metrics (--metrics_url), the freshness histogram of the measured interval.
//
// The report states SelectArm throughput as a ratio of Q0 and of the roofline
// R = 1 / (1/Q0 + F/P), F = 2 C m^2 + 2 C m d the flops of one request and P the rate of an
// Eigen (m x m)(m x C) product measured here in the same run on one core; latency percentiles
// (p50/p90/p99/p99.9/max, nearest rank), status codes, rewards by outcome and freshness. It is
// printed as text, and written as JSON (--report_json) and CSV (--report_csv, one row per RPC).
//
// With --metrics_url the report also states the CPU a SelectArm (with its rewards) cost the
// server (its process_cpu_seconds_total) and this process (getrusage), over the measured
// interval and the sending of the rewards still due after it, and the same per health call over
// the baseline. The window closes before the wait for learning: work the writer still owes then
// is not counted (and backlog it owed from the warm-up is), so when learning falls behind the
// server's figure is low. The sum is what the machine spent only when both run on it. A second
// server window closes after that wait (every reward learned); its CPU per SelectArm over the
// server's CPU per health call is printed as the decision's cost in health calls.
//
// --features=named sends the candidates and the context as named features. With --http_target,
// after all that, the same decisions go to the server's Personalizer REST API as rank calls (each
// rewarded at once), warm-up then a measured interval, and the report gives their latency,
// throughput and server CPU per rank beside gRPC's (client/loadtest/http_phase.h).
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <Eigen/Dense>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/connection.h"
#include "client/loadtest/http_phase.h"
#include "core/base/percentile.h"
#include "core/base/random.h"
#include "core/storage/file_util.h"
#include "graphbandit/v1/bandit.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "HOST:PORT of the graphbandit server.");
ABSL_FLAG(std::string, model, "", "Model to call; empty is the server's default model.");
ABSL_FLAG(std::string, mode, "closed",
          "closed (--concurrency callers back to back) or open (--rate requests per second).");
ABSL_FLAG(int32_t, concurrency, 4,
          "Closed loop: concurrent callers (each sends its next request when the previous one "
          "returned). Open loop: most SelectArm calls in flight at once (a due request that "
          "finds that many waits, and its latency counts from when it was due).");
ABSL_FLAG(double, rate, 0, "Open loop: SelectArm requests per second (> 0).");
ABSL_FLAG(double, duration_seconds, 10, "Length of the measured interval.");
ABSL_FLAG(int64_t, requests, 0, "If > 0, end the measured interval after this many requests.");
ABSL_FLAG(double, warmup_seconds, 2, "Workload run before measuring, then discarded.");
ABSL_FLAG(double, baseline_seconds, 3,
          "grpc.health.v1.Health/Check before the workload: a closed loop at --concurrency (the "
          "ceiling Q0), or an open loop at --baseline_rate; 0 skips it.");
ABSL_FLAG(double, baseline_rate, 0,
          "If > 0, the health baseline is an open loop at this many calls per second instead "
          "(at most --concurrency in flight; latency counted from when each call was due): what "
          "a bare call costs the server when calls come one at a time.");
ABSL_FLAG(int32_t, channels, 1, "gRPC channels (TCP connections); calls are spread over them.");
ABSL_FLAG(int32_t, client_threads, 1,
          "Threads that poll the connections and handle the answers (one completion queue).");
ABSL_FLAG(int32_t, candidates, 50, "Candidates per SelectArm (C).");
ABSL_FLAG(int32_t, dim, 16, "Features per candidate (d).");
ABSL_FLAG(int32_t, context_dim, 0, "Context values per request.");
ABSL_FLAG(std::string, features, "dense",
          "dense: candidates and context as vectors; named: as named features (the README's "
          "\"Named features\"), each candidate in namespace \"item\" with its id as a string and "
          "its --dim values as numbers f0, f1, ..., the context in \"ctx\" as c0, c1, ...; the "
          "model hashes them into its slots.");
ABSL_FLAG(int32_t, items, 1000, "Distinct items the candidates are drawn from.");
ABSL_FLAG(int32_t, users, 200, "Distinct users.");
ABSL_FLAG(int32_t, graph_degree, 0,
          "If > 0, first register the users and join each to its graph_degree nearest in a ring "
          "(user i to i +- 1 .. graph_degree / 2, rounded up; one connected component); 0 leaves "
          "the users without edges (each its own component).");
ABSL_FLAG(int32_t, slate_size, 1, "Arms chosen per SelectArm.");
ABSL_FLAG(double, reward_ratio, 1.0, "Fraction of decisions that get a ReportReward.");
ABSL_FLAG(double, reward_delay_ms, 0, "Delay between a decision and its reward.");
ABSL_FLAG(int32_t, deadline_ms, 5000, "Deadline of every RPC.");
ABSL_FLAG(double, learn_wait_seconds, 30,
          "After the run, wait at most this long for the model to learn the accepted rewards.");
ABSL_FLAG(std::string, metrics_url, "http://127.0.0.1:9464/metrics",
          "The server's Prometheus endpoint, for the freshness histogram; empty skips it.");
ABSL_FLAG(bool, roofline, true,
          "Measure an Eigen (m x m)(m x C) product here after the run and report the roofline.");
ABSL_FLAG(std::string, report_json, "", "Write the report as JSON to this file.");
ABSL_FLAG(std::string, report_csv, "", "Write the report as CSV (one row per RPC) to this file.");
ABSL_FLAG(bool, progress, true, "Print a progress line to stderr every second.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the items, users, contexts and rewards.");
ABSL_FLAG(std::string, http_target, "",
          "HOST:PORT of the server's Personalizer REST API (--http_listen). When set, after the "
          "gRPC run the same decisions are sent there as rank calls (each rewarded with "
          "probability --reward_ratio, at once) by --concurrency callers for --warmup_seconds, "
          "discarded, then --duration_seconds, and their latency, throughput and CPU per call "
          "are reported beside gRPC's. Needs --features=named and the default model.");
ABSL_FLAG(std::string, http_key_file, "",
          "File holding the key sent to --http_target (the server's --bandit_token_file).");

namespace graphbandit::client {
namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = ::graphbandit::v1;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One RPC kind's measurements in one phase.
struct Tally {
  std::vector<double> latencies;  // seconds, successful calls
  std::map<std::string, int64_t> codes;
  int64_t late_sends = 0;  // open loop: sent more than 1 ms after the schedule said
  void Merge(const Tally& other) {
    latencies.insert(latencies.end(), other.latencies.begin(), other.latencies.end());
    for (const auto& [code, n] : other.codes) codes[code] += n;
    late_sends += other.late_sends;
  }
  int64_t calls() const {
    int64_t n = 0;
    for (const auto& [code, count] : codes) n += count;
    return n;
  }
  int64_t errors() const {
    auto it = codes.find("OK");
    return calls() - (it == codes.end() ? 0 : it->second);
  }
};

// What a phase reports for one RPC.
struct Summary {
  std::string rpc;
  double seconds = 0;
  int64_t calls = 0, errors = 0, late_sends = 0;
  double throughput = 0;  // successful calls per second
  double p50 = NAN, p90 = NAN, p99 = NAN, p999 = NAN, max = NAN, mean = NAN;
  std::map<std::string, int64_t> codes;
};

Summary Summarise(const std::string& rpc, Tally tally, double seconds) {
  Summary s;
  s.rpc = rpc;
  s.seconds = seconds;
  s.calls = tally.calls();
  s.errors = tally.errors();
  s.late_sends = tally.late_sends;
  s.codes = tally.codes;
  std::sort(tally.latencies.begin(), tally.latencies.end());
  const auto& l = tally.latencies;
  s.throughput = seconds > 0 ? static_cast<double>(l.size()) / seconds : 0;
  if (!l.empty()) {
    s.p50 = PercentileOfSorted(l, 0.5);
    s.p90 = PercentileOfSorted(l, 0.9);
    s.p99 = PercentileOfSorted(l, 0.99);
    s.p999 = PercentileOfSorted(l, 0.999);
    s.max = l.back();
    double sum = 0;
    for (double x : l) sum += x;
    s.mean = sum / static_cast<double>(l.size());
  }
  return s;
}

// A pre-built ring of SelectArm requests (building messages would cost the client the CPU the
// server needs on a small machine), with the candidates' features for the rewards.
struct Workload {
  std::vector<v1::SelectArmRequest> requests;
  std::vector<std::vector<Eigen::VectorXd>> features;  // per request, per candidate
  Eigen::VectorXd direction;                           // the rewards' hidden preference
};

Workload BuildWorkload(int ring) {
  const int c = absl::GetFlag(FLAGS_candidates), d = absl::GetFlag(FLAGS_dim);
  const int items = std::max(absl::GetFlag(FLAGS_items), c);
  Rng rng(absl::GetFlag(FLAGS_seed));
  std::vector<Eigen::VectorXd> pool(items);
  for (auto& f : pool) {
    f.resize(d);
    for (int i = 0; i < d; ++i) f(i) = rng.Normal() * 0.5;
  }
  Workload w;
  w.direction.resize(d);
  for (int i = 0; i < d; ++i) w.direction(i) = rng.Normal();
  w.direction /= std::max(w.direction.norm(), 1e-9);
  const bool named = absl::GetFlag(FLAGS_features) == "named";
  auto number = [](v1::FeatureNamespace* ns, std::string name, double value) {
    v1::NamedFeature* feature = ns->add_features();
    feature->set_name(std::move(name));
    feature->mutable_value()->set_number(value);
  };
  for (int r = 0; r < ring; ++r) {
    v1::SelectArmRequest request;
    request.set_model(absl::GetFlag(FLAGS_model));
    request.set_user_id(absl::StrCat("u", rng.UniformInt(absl::GetFlag(FLAGS_users))));
    v1::FeatureNamespace* context = nullptr;
    if (named && absl::GetFlag(FLAGS_context_dim) > 0) {
      context = request.add_context_features();
      context->set_name("ctx");
    }
    for (int i = 0; i < absl::GetFlag(FLAGS_context_dim); ++i) {
      const double value = rng.Normal() * 0.5;
      if (named) {
        number(context, absl::StrCat("c", i), value);
      } else {
        request.add_context(value);
      }
    }
    request.set_slate_size(static_cast<uint32_t>(absl::GetFlag(FLAGS_slate_size)));
    std::vector<Eigen::VectorXd> chosen;
    // C distinct items: a partial Fisher-Yates shuffle of the pool's indices.
    std::vector<int> index(items);
    for (int i = 0; i < items; ++i) index[i] = i;
    for (int j = 0; j < c; ++j) {
      std::swap(index[j], index[j + rng.UniformInt(items - j)]);
      v1::Arm* arm = request.add_candidates();
      arm->set_id(absl::StrCat("item", index[j]));
      if (named) {
        v1::FeatureNamespace* item = arm->add_named_features();
        item->set_name("item");
        v1::NamedFeature* id = item->add_features();
        id->set_name("id");
        id->mutable_value()->set_text(arm->id());
        for (int i = 0; i < d; ++i) number(item, absl::StrCat("f", i), pool[index[j]](i));
      } else {
        for (int i = 0; i < d; ++i) arm->add_features(pool[index[j]](i));
      }
      chosen.push_back(pool[index[j]]);
    }
    w.requests.push_back(std::move(request));
    w.features.push_back(std::move(chosen));
  }
  return w;
}

struct PendingReward {
  Clock::time_point due;
  std::string event_id;
  std::vector<std::pair<std::string, double>> arms;  // one entry: a single reward
  bool operator>(const PendingReward& o) const { return due > o.due; }
};

// A Tally shared by the completion callbacks (the CompletionThreads).
struct SharedTally {
  std::mutex mu;
  Tally tally;
};

// The generator's completion queue and the threads that drain it. A thread blocked in Next() is
// also one that polls the sockets, so with one thread an answer is handled where it arrived.
// gRPC's callback client API (used before) hands every completion from the polling thread to
// another one: about one more context switch per call, and CPU that on a two-core machine is
// taken from the server under test.
class CompletionThreads {
 public:
  explicit CompletionThreads(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Drain(); });
  }
  ~CompletionThreads() {
    cq_.Shutdown();
    for (std::thread& t : threads_) t.join();
  }
  CompletionThreads(const CompletionThreads&) = delete;
  CompletionThreads& operator=(const CompletionThreads&) = delete;

  grpc::CompletionQueue* cq() { return &cq_; }

  // Starts a call prepared on cq() (a stub's PrepareAsyncX); `done` runs on one of the threads
  // with the call's status once `response` holds the answer.
  template <typename Response>
  void Start(std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader, Response* response,
             std::function<void(const grpc::Status&)> done) {
    auto* tag = new CallTag<Response>;
    tag->done = std::move(done);
    tag->reader = std::move(reader);  // kept until the call completes
    tag->reader->StartCall();
    tag->reader->Finish(response, &tag->status, tag);
  }

 private:
  struct Tag {
    virtual ~Tag() = default;
    // The reader lives in the call's arena, which `done` may free (it deletes the call's
    // ClientContext): the reader goes first.
    virtual void DropReader() = 0;
    grpc::Status status;
    std::function<void(const grpc::Status&)> done;
  };
  template <typename Response>
  struct CallTag : Tag {
    void DropReader() override { reader.reset(); }
    std::unique_ptr<grpc::ClientAsyncResponseReader<Response>> reader;
  };
  void Drain() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      auto* t = static_cast<Tag*>(tag);
      t->DropReader();
      t->done(t->status);  // a client Finish always completes with ok; the status says how
      delete t;
    }
  }
  grpc::CompletionQueue cq_;
  std::vector<std::thread> threads_;
};

// Every call is asynchronous (a completion queue and --client_threads threads), with no thread
// blocked per call, so that on a small machine the generator takes as little as it can from the
// server it measures (about 0.09 ms of CPU per call at C = 50, d = 16; PERFORMANCE.md).
class Generator {
 public:
  Generator(std::vector<Connection> channels, Workload workload)
      : channels_(std::move(channels)),
        workload_(std::move(workload)),
        calls_(absl::GetFlag(FLAGS_client_threads)) {
    for (const Connection& c : channels_) {
      bandit_.push_back(v1::BanditService::NewStub(c.channel));
      admin_.push_back(v1::AdminService::NewStub(c.channel));
      health_.push_back(grpc::health::v1::Health::NewStub(c.channel));
    }
  }

  // grpc.health.v1 Check for `seconds`: a closed loop at `concurrency` callers, or with `rate`
  // > 0 an open loop (call i due at start + i / rate, at most `concurrency` in flight).
  Summary Baseline(int concurrency, double seconds, double rate) {
    SharedTally tally;
    const auto start = Clock::now();
    const auto end = start + ToDuration(seconds);
    Flight flight;
    if (rate > 0) {
      for (int64_t i = 0;; ++i) {
        const auto intended = start + ToDuration(static_cast<double>(i) / rate);
        if (intended >= end) break;
        std::this_thread::sleep_until(intended);
        flight.WaitBelow(concurrency);
        if (Clock::now() - intended > std::chrono::milliseconds(1)) {
          std::lock_guard<std::mutex> lock(tally.mu);
          ++tally.tally.late_sends;
        }
        CheckHealth(static_cast<size_t>(i), intended, /*chain_until=*/start, &tally, &flight);
      }
    } else {
      for (int w = 0; w < concurrency; ++w) {
        CheckHealth(static_cast<size_t>(w), Clock::now(), end, &tally, &flight);
      }
    }
    flight.WaitIdle();
    return Summarise("grpc.health.v1.Health/Check", std::move(tally.tally),
                     rate > 0 ? seconds : Seconds(Clock::now() - start));
  }

  // The workload for one phase; `measure` false discards what it saw (warm-up).
  void RunPhase(double seconds, int64_t max_requests, bool measure) {
    const bool open = absl::GetFlag(FLAGS_mode) == "open";
    const int concurrency = std::max(1, absl::GetFlag(FLAGS_concurrency));
    const double rate = absl::GetFlag(FLAGS_rate);
    Phase phase;
    phase.start = Clock::now();
    phase.end = phase.start + ToDuration(seconds);
    phase.max_requests = max_requests;
    phase_started_ = phase.start;
    measuring_ = measure;
    if (open) {
      // The schedule: request i is due at start + i / rate. A request that finds `concurrency`
      // calls in flight waits for one to finish; its latency still counts from when it was due.
      for (int64_t i = 0;; ++i) {
        if (max_requests > 0 && i >= max_requests) break;
        const auto intended = phase.start + ToDuration(static_cast<double>(i) / rate);
        if (intended >= phase.end) break;
        std::this_thread::sleep_until(intended);
        phase.flight.WaitBelow(concurrency);
        if (Clock::now() - intended > std::chrono::milliseconds(1)) {
          std::lock_guard<std::mutex> lock(phase.select.mu);
          ++phase.select.tally.late_sends;
        }
        Decide(static_cast<size_t>(i), intended, &phase, /*chain=*/false);
      }
    } else {
      for (int w = 0; w < concurrency; ++w) {
        const int64_t i = phase.issued.fetch_add(1);
        if (max_requests > 0 && i >= max_requests) break;
        Decide(static_cast<size_t>(i), Clock::now(), &phase, /*chain=*/true);
      }
    }
    phase.flight.WaitIdle();
    const double elapsed = Seconds(Clock::now() - phase.start);
    if (!measure) return;
    select_ = Summarise("graphbandit.v1.BanditService/SelectArm", std::move(phase.select.tally),
                        open ? seconds : elapsed);
    measured_seconds_ = open ? seconds : elapsed;
  }

  // The reward timer (rewards with a delay): started before the phases, stopped (after sending
  // what is queued and waiting for the answers) by StopRewards.
  void StartRewards() {
    reward_timer_ = std::thread([this] {
      for (;;) {
        PendingReward pending;
        {
          std::unique_lock<std::mutex> lock(reward_mu_);
          for (;;) {
            if (!rewards_.empty()) {
              const auto due = rewards_.top().due;
              if (due <= Clock::now()) break;
              reward_cv_.wait_until(lock, due);
              continue;
            }
            if (rewards_stopping_) return;
            reward_cv_.wait(lock);
          }
          pending = rewards_.top();
          rewards_.pop();
        }
        SendReward(std::move(pending));
      }
    });
  }

  void StopRewards() {
    {
      std::lock_guard<std::mutex> lock(reward_mu_);
      rewards_stopping_ = true;
    }
    reward_cv_.notify_all();
    if (reward_timer_.joinable()) reward_timer_.join();
    reward_flight_.WaitIdle();
  }

  // The slowest SelectArm since the last progress line (microseconds), so that a stall shows
  // when it happened, not only in the run's percentiles.
  void NoteSlowest(double seconds) {
    const int64_t micros = static_cast<int64_t>(seconds * 1e6);
    int64_t seen = slowest_micros_.load(std::memory_order_relaxed);
    while (micros > seen && !slowest_micros_.compare_exchange_weak(seen, micros)) {
    }
  }

  // One line per second on stderr while `running`.
  void Progress(const std::atomic<bool>& running) {
    int64_t last_decisions = 0, last_rewards = 0;
    auto last = Clock::now();
    while (running.load()) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      const auto now = Clock::now();
      const int64_t d = decisions_.load(), r = rewards_sent_.load();
      const double dt = Seconds(now - last);
      const double slowest_ms = 1e-3 * static_cast<double>(slowest_micros_.exchange(0));
      std::fprintf(stderr,
                   "[%6.1fs %s] SelectArm %8.0f/s (slowest %7.1f ms)  ReportReward %8.0f/s  "
                   "errors %lld\n",
                   Seconds(now - phase_started_.load()), measuring_ ? "measure" : "warm-up",
                   static_cast<double>(d - last_decisions) / dt, slowest_ms,
                   static_cast<double>(r - last_rewards) / dt,
                   static_cast<long long>(errors_.load()));
      last_decisions = d;
      last_rewards = r;
      last = now;
    }
  }

  // Registers users u0..u(n-1) and a ring lattice of `degree` over them (AddUsers, AddEdges).
  absl::Status AddRingGraph(int users, int degree) {
    const auto call = [this](auto method, const auto& request, auto* response) {
      grpc::ClientContext context;
      channels_[0].Authorize(&context, "graphbandit.v1.AdminService");
      NameModel(&context, absl::GetFlag(FLAGS_model));
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
      return (admin_[0].get()->*method)(&context, request, response);
    };
    v1::AddUsersRequest add_users;
    add_users.set_model(absl::GetFlag(FLAGS_model));
    for (int u = 0; u < users; ++u) add_users.add_user_ids(absl::StrCat("u", u));
    v1::AddUsersResponse users_added;
    grpc::Status status = call(&v1::AdminService::Stub::AddUsers, add_users, &users_added);
    if (!status.ok())
      return absl::UnavailableError(absl::StrCat("AddUsers: ", status.error_message()));
    v1::AddEdgesRequest add_edges;
    add_edges.set_model(absl::GetFlag(FLAGS_model));
    for (int u = 0; u < users; ++u) {
      for (int step = 1; step <= (degree + 1) / 2 && step < users; ++step) {
        const int v = (u + step) % users;
        if (v == u || (2 * step == users && u >= v)) continue;  // each edge once
        v1::Edge* edge = add_edges.add_edges();
        edge->set_user_a(absl::StrCat("u", u));
        edge->set_user_b(absl::StrCat("u", v));
        edge->set_weight(1.0);
      }
    }
    v1::AddEdgesResponse edges_added;
    status = call(&v1::AdminService::Stub::AddEdges, add_edges, &edges_added);
    if (!status.ok())
      return absl::UnavailableError(absl::StrCat("AddEdges: ", status.error_message()));
    return absl::OkStatus();
  }

  absl::StatusOr<v1::ModelDescription> Describe() {
    grpc::ClientContext context;
    channels_[0].Authorize(&context, "graphbandit.v1.AdminService");
    NameModel(&context, absl::GetFlag(FLAGS_model));
    context.set_deadline(std::chrono::system_clock::now() + Deadline());
    v1::DescribeModelRequest request;
    request.set_model(absl::GetFlag(FLAGS_model));
    v1::ModelDescription response;
    const grpc::Status status = admin_[0]->DescribeModel(&context, request, &response);
    if (!status.ok()) {
      return absl::UnavailableError(absl::StrCat("DescribeModel: ", status.error_message()));
    }
    return response;
  }

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

  static std::chrono::milliseconds Deadline() {
    return std::chrono::milliseconds(absl::GetFlag(FLAGS_deadline_ms));
  }
  static Clock::duration ToDuration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  void Record(SharedTally* shared, const grpc::Status& status, double latency) {
    {
      std::lock_guard<std::mutex> lock(shared->mu);
      ++shared->tally.codes[StatusCodeName(status.error_code())];
      if (status.ok()) shared->tally.latencies.push_back(latency);
    }
    if (!status.ok()) errors_.fetch_add(1);
  }

  // One health call, its latency counted from `due`; once it is answered, the caller's next
  // call follows while the clock is before `chain_until` (closed loop).
  void CheckHealth(size_t i, Clock::time_point due, Clock::time_point chain_until,
                   SharedTally* tally, Flight* flight) {
    struct Call {
      grpc::ClientContext context;
      grpc::health::v1::HealthCheckRequest request;
      grpc::health::v1::HealthCheckResponse response;
      Clock::time_point due;
    };
    auto* call = new Call;
    call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
    call->due = due;
    flight->Add();
    calls_.Start(
        health_[i % health_.size()]->PrepareAsyncCheck(&call->context, call->request, calls_.cq()),
        &call->response, [this, call, i, chain_until, tally, flight](const grpc::Status& status) {
          Record(tally, status, Seconds(Clock::now() - call->due));
          delete call;
          // The next call of the chain is due when it is sent, after this one's bookkeeping.
          if (const auto now = Clock::now(); now < chain_until) {
            CheckHealth(i + 1, now, chain_until, tally, flight);
          }
          flight->Done();
        });
  }

  // SelectArm for ring entry i; `chain` (closed loop): the caller's next request follows.
  void Decide(size_t i, Clock::time_point intended, Phase* phase, bool chain) {
    struct Call {
      grpc::ClientContext context;
      v1::SelectArmResponse response;
    };
    auto* call = new Call;
    const size_t r = i % workload_.requests.size();
    const size_t channel = i % bandit_.size();
    channels_[channel].Authorize(&call->context, "graphbandit.v1.BanditService");
    NameModel(&call->context, absl::GetFlag(FLAGS_model));
    call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
    phase->flight.Add();
    calls_.Start(
        bandit_[channel]->PrepareAsyncSelectArm(&call->context, workload_.requests[r], calls_.cq()),
        &call->response, [this, call, i, r, intended, phase, chain](const grpc::Status& status) {
          const double latency = Seconds(Clock::now() - intended);
          Record(&phase->select, status, latency);
          decisions_.fetch_add(1, std::memory_order_relaxed);
          NoteSlowest(latency);
          if (status.ok()) Reward(i, r, call->response);
          delete call;
          if (chain && Clock::now() < phase->end) {
            const int64_t next = phase->issued.fetch_add(1);
            if (phase->max_requests <= 0 || next < phase->max_requests) {
              Decide(static_cast<size_t>(next), Clock::now(), phase, true);
            }
          }
          phase->flight.Done();
        });
  }

  // The reward for a decision (with probability --reward_ratio): now, or by the timer.
  void Reward(size_t i, size_t r, const v1::SelectArmResponse& response) {
    Rng rng(absl::GetFlag(FLAGS_seed) * 0x9E3779B97F4A7C15ULL + i);
    if (rng.Uniform() >= absl::GetFlag(FLAGS_reward_ratio)) return;
    PendingReward pending;
    pending.event_id = response.event_id();
    for (const v1::RankedArm& arm : response.arms()) {
      const size_t k = arm.candidate_index();
      if (k >= workload_.features[r].size()) continue;
      const double value =
          0.5 + 0.4 * std::tanh(workload_.direction.dot(workload_.features[r][k]) * 2.0) +
          0.05 * rng.Normal();
      pending.arms.emplace_back(arm.arm_id(), value);
    }
    const double delay_ms = absl::GetFlag(FLAGS_reward_delay_ms);
    if (delay_ms <= 0) {
      SendReward(std::move(pending));
      return;
    }
    pending.due = Clock::now() + ToDuration(delay_ms / 1e3);
    {
      std::lock_guard<std::mutex> lock(reward_mu_);
      rewards_.push(std::move(pending));
    }
    reward_cv_.notify_one();
  }

  void SendReward(PendingReward pending) {
    struct Call {
      grpc::ClientContext context;
      v1::ReportRewardRequest request;
      v1::ReportRewardResponse response;
      Clock::time_point sent;
    };
    auto* call = new Call;
    call->request.set_model(absl::GetFlag(FLAGS_model));
    call->request.set_event_id(pending.event_id);
    if (pending.arms.size() == 1) {
      call->request.set_reward(pending.arms[0].second);
    } else {
      for (const auto& [id, value] : pending.arms) {
        v1::ArmReward* arm = call->request.add_arm_rewards();
        arm->set_arm_id(id);
        arm->set_reward(value);
      }
    }
    const size_t channel = static_cast<size_t>(rewards_sent_.fetch_add(1)) % bandit_.size();
    channels_[channel].Authorize(&call->context, "graphbandit.v1.BanditService");
    NameModel(&call->context, absl::GetFlag(FLAGS_model));
    call->context.set_deadline(std::chrono::system_clock::now() + Deadline());
    call->sent = Clock::now();
    reward_flight_.Add();
    calls_.Start(
        bandit_[channel]->PrepareAsyncReportReward(&call->context, call->request, calls_.cq()),
        &call->response, [this, call](const grpc::Status& status) {
          const double latency = Seconds(Clock::now() - call->sent);
          if (measuring_) {
            Record(&reward_tally_, status, latency);
          } else if (!status.ok()) {
            errors_.fetch_add(1);
          }
          if (status.ok()) {
            int64_t accepted = 0;
            std::lock_guard<std::mutex> lock(reward_tally_.mu);
            auto count = [&](v1::RewardOutcome o) {
              ++outcomes_[v1::RewardOutcome_Name(o)];
              if (o == v1::ACCEPTED) ++accepted;
            };
            if (call->response.arm_outcomes_size() > 0) {
              for (const auto& arm : call->response.arm_outcomes()) count(arm.outcome());
            } else {
              count(call->response.outcome());
            }
            accepted_total_.fetch_add(accepted);
          }
          delete call;
          reward_flight_.Done();
        });
  }

  std::vector<Connection> channels_;
  Workload workload_;
  std::vector<std::unique_ptr<v1::BanditService::Stub>> bandit_;
  std::vector<std::unique_ptr<v1::AdminService::Stub>> admin_;
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

// GET http://HOST:PORT/PATH over HTTP/1.0 (the server's Prometheus endpoint); the body.
absl::StatusOr<std::string> HttpGet(const std::string& url) {
  const std::string prefix = "http://";
  if (url.rfind(prefix, 0) != 0) return absl::InvalidArgumentError("--metrics_url needs http://");
  const std::string rest = url.substr(prefix.size());
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  const size_t colon = hostport.rfind(':');
  if (colon == std::string::npos) return absl::InvalidArgumentError("--metrics_url needs a port");
  std::string host = hostport.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), hostport.substr(colon + 1).c_str(), &hints, &found) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve ", host));
  }
  int fd = socket(found->ai_family, found->ai_socktype, found->ai_protocol);
  const bool connected = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0;
  freeaddrinfo(found);
  if (!connected) {
    if (fd >= 0) close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to ", hostport));
  }
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", hostport, "\r\n\r\n");
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("cannot send the metrics request");
  }
  std::string response;
  char buffer[65536];
  for (;;) {
    const ssize_t n = recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos) return absl::UnavailableError("no HTTP response");
  // "HTTP/1.x 200 ...": anything else (a 404 for a wrong path, say) is not a metrics page.
  const size_t line_end = response.find("\r\n");
  const absl::string_view status_line(response.data(), line_end);
  const std::vector<absl::string_view> words = absl::StrSplit(status_line, ' ');
  if (words.size() < 2 || !absl::StartsWith(words[0], "HTTP/") || words[1] != "200") {
    return absl::UnavailableError(
        absl::StrCat("GET ", url, " answered \"", status_line, "\", not 200"));
  }
  return response.substr(body + 4);
}

// An unlabelled sample on a Prometheus text page (e.g. process_cpu_seconds_total); NaN if absent.
double MetricValue(const std::string& metrics, const std::string& name) {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() <= name.size() || line[name.size()] != ' ') {
      continue;
    }
    double value = NAN;
    if (absl::SimpleAtod(line.substr(name.size() + 1), &value)) return value;
  }
  return NAN;
}

// CPU time (user + system) this process has used, in seconds.
double OwnCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return NAN;
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// The freshness histogram of one model: upper bound -> cumulative count (+Inf included).
std::map<double, double> FreshnessBuckets(const std::string& metrics, const std::string& model) {
  std::map<double, double> buckets;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, "graphbandit_state_freshness_seconds_bucket{")) continue;
    if (!model.empty() && line.find(absl::StrCat("model=\"", model, "\"")) == line.npos) continue;
    const size_t le = line.find("le=\"");
    const size_t close_brace = line.rfind('}');
    if (le == line.npos || close_brace == line.npos) continue;
    const size_t le_end = line.find('"', le + 4);
    const absl::string_view bound_text = line.substr(le + 4, le_end - le - 4);
    double bound = 0, value = 0;
    if (bound_text == "+Inf") {
      bound = INFINITY;
    } else if (!absl::SimpleAtod(bound_text, &bound)) {
      continue;
    }
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(close_brace + 1)), &value))
      continue;
    buckets[bound] += value;
  }
  return buckets;
}

// Eigen's (m x m)(m x C) product on this thread: flops per second.
double ProductRate(int m, int c) {
  const Eigen::MatrixXd a = Eigen::MatrixXd::Random(m, m), b = Eigen::MatrixXd::Random(m, c);
  Eigen::MatrixXd out(m, c);
  double best = INFINITY;
  const auto until = Clock::now() + std::chrono::milliseconds(600);
  int reps = 0;
  while (Clock::now() < until || reps < 5) {
    const auto t0 = Clock::now();
    out.noalias() = a * b;
    best = std::min(best, Seconds(Clock::now() - t0));
    ++reps;
  }
  return 2.0 * m * m * c / best;
}

std::string Ms(double seconds) { return absl::StrFormat("%.3f", seconds * 1e3); }

void PrintSummary(const Summary& s) {
  std::printf(
      "%-40s %9lld calls %7lld errors %10.1f/s  p50 %s  p90 %s  p99 %s  p99.9 %s  max %s ms\n",
      s.rpc.c_str(), static_cast<long long>(s.calls), static_cast<long long>(s.errors),
      s.throughput, Ms(s.p50).c_str(), Ms(s.p90).c_str(), Ms(s.p99).c_str(), Ms(s.p999).c_str(),
      Ms(s.max).c_str());
  for (const auto& [code, n] : s.codes) {
    if (code != "OK") std::printf("    %s: %lld\n", code.c_str(), static_cast<long long>(n));
  }
}

std::string JsonSummary(const Summary& s) {
  std::string codes;
  for (const auto& [code, n] : s.codes) {
    absl::StrAppend(&codes, codes.empty() ? "" : ", ", "\"", code, "\": ", n);
  }
  const auto num = [](double x) { return std::isfinite(x) ? absl::StrFormat("%.9g", x) : "null"; };
  return absl::StrFormat(
      "{\"rpc\": \"%s\", \"seconds\": %s, \"calls\": %d, \"errors\": %d, \"late_sends\": %d, "
      "\"throughput_per_second\": %s, \"latency_seconds\": {\"p50\": %s, \"p90\": %s, \"p99\": %s, "
      "\"p99_9\": %s, \"max\": %s, \"mean\": %s}, \"codes\": {%s}}",
      s.rpc, num(s.seconds), s.calls, s.errors, s.late_sends, num(s.throughput), num(s.p50),
      num(s.p90), num(s.p99), num(s.p999), num(s.max), num(s.mean), codes);
}

int Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "closed" && mode != "open") {
    std::fprintf(stderr, "--mode must be closed or open\n");
    return 64;
  }
  // A rate is finite and its schedule countable: at most 1e9 calls in the interval (an infinite
  // or huge rate would put every call at time 0 and the schedule would never end).
  const auto schedulable = [](double rate, double seconds) {
    return std::isfinite(rate) && rate > 0 && std::isfinite(seconds) && rate * seconds <= 1e9;
  };
  if (mode == "open" &&
      !schedulable(absl::GetFlag(FLAGS_rate),
                   absl::GetFlag(FLAGS_duration_seconds) + absl::GetFlag(FLAGS_warmup_seconds))) {
    std::fprintf(stderr,
                 "--mode=open needs a finite --rate > 0, at most 1e9 requests over the warm-up "
                 "and the measured interval\n");
    return 64;
  }
  if (const double rate = absl::GetFlag(FLAGS_baseline_rate); rate != 0) {
    if (!schedulable(rate, absl::GetFlag(FLAGS_baseline_seconds) + 0.5) ||
        !(absl::GetFlag(FLAGS_baseline_seconds) > 0)) {
      std::fprintf(stderr,
                   "--baseline_rate must be 0 (a closed-loop baseline) or a finite rate > 0, at "
                   "most 1e9 calls over --baseline_seconds, which must then be > 0\n");
      return 64;
    }
  }
  if (absl::GetFlag(FLAGS_features) != "dense" && absl::GetFlag(FLAGS_features) != "named") {
    std::fprintf(stderr, "--features must be dense or named\n");
    return 64;
  }
  if (!absl::GetFlag(FLAGS_http_target).empty() &&
      (absl::GetFlag(FLAGS_features) != "named" || !absl::GetFlag(FLAGS_model).empty())) {
    std::fprintf(stderr,
                 "--http_target needs --features=named and the default model (no --model): "
                 "Personalizer's API carries named features and serves the default model\n");
    return 64;
  }
  std::string http_key;
  if (const std::string path = absl::GetFlag(FLAGS_http_key_file); !path.empty()) {
    absl::StatusOr<std::string> key = storage::ReadTokenFile(path, "http_key_file");
    if (!key.ok()) {
      std::fprintf(stderr, "%s\n", std::string(key.status().message()).c_str());
      return 64;
    }
    http_key = *std::move(key);
  }
  if (absl::GetFlag(FLAGS_candidates) < 1 || absl::GetFlag(FLAGS_dim) < 1 ||
      absl::GetFlag(FLAGS_channels) < 1 || absl::GetFlag(FLAGS_concurrency) < 1 ||
      absl::GetFlag(FLAGS_users) < 1 || absl::GetFlag(FLAGS_slate_size) < 1 ||
      absl::GetFlag(FLAGS_slate_size) > absl::GetFlag(FLAGS_candidates) ||
      absl::GetFlag(FLAGS_client_threads) < 1 || absl::GetFlag(FLAGS_client_threads) > 64) {
    std::fprintf(stderr,
                 "--candidates, --dim, --channels, --concurrency, --users must be >= 1, "
                 "--slate_size in [1, --candidates] and --client_threads in [1, 64]\n");
    return 64;
  }
  std::vector<Connection> channels;
  for (int i = 0; i < absl::GetFlag(FLAGS_channels); ++i) {
    absl::StatusOr<Connection> c = ConnectFromFlags(absl::GetFlag(FLAGS_target), i);
    if (!c.ok()) {
      std::fprintf(stderr, "%s\n", std::string(c.status().message()).c_str());
      return 64;
    }
    if (!c->channel->WaitForConnected(std::chrono::system_clock::now() +
                                      std::chrono::seconds(10))) {
      std::fprintf(stderr, "cannot connect to %s\n", absl::GetFlag(FLAGS_target).c_str());
      return 1;
    }
    channels.push_back(*std::move(c));
  }
  Generator generator(std::move(channels), BuildWorkload(512));
  if (absl::GetFlag(FLAGS_graph_degree) < 0) {
    std::fprintf(stderr, "--graph_degree must be >= 0\n");
    return 64;
  }
  if (absl::GetFlag(FLAGS_graph_degree) > 0) {
    if (absl::Status s =
            generator.AddRingGraph(absl::GetFlag(FLAGS_users), absl::GetFlag(FLAGS_graph_degree));
        !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  const absl::StatusOr<v1::ModelDescription> before = generator.Describe();
  if (!before.ok()) {
    std::fprintf(stderr, "%s\n", std::string(before.status().message()).c_str());
    return 1;
  }
  const std::string model = before->name();
  const std::string metrics_url = absl::GetFlag(FLAGS_metrics_url);

  // A metrics URL that does not answer a page is said once, before anything is measured; the
  // figures read from it are then missing ("-", null) rather than wrong.
  if (!metrics_url.empty()) {
    if (absl::StatusOr<std::string> body = HttpGet(metrics_url); !body.ok()) {
      std::fprintf(stderr, "graphbandit-loadgen: --metrics_url: %s; no server CPU or freshness\n",
                   std::string(body.status().message()).c_str());
    }
  }
  // CPU of the server (its process_cpu_seconds_total; NaN without --metrics_url) and ours.
  const auto server_cpu_now = [&metrics_url]() -> double {
    if (metrics_url.empty()) return NAN;
    absl::StatusOr<std::string> body = HttpGet(metrics_url);
    return body.ok() ? MetricValue(*body, "process_cpu_seconds_total") : NAN;
  };
  Summary baseline;
  double baseline_server_cpu = NAN, baseline_own_cpu = NAN;
  if (absl::GetFlag(FLAGS_baseline_seconds) > 0) {
    const double rate = absl::GetFlag(FLAGS_baseline_rate);
    generator.Baseline(absl::GetFlag(FLAGS_concurrency), 0.5, rate);  // warm-up
    const double server_before = server_cpu_now(), own_before = OwnCpuSeconds();
    baseline = generator.Baseline(absl::GetFlag(FLAGS_concurrency),
                                  absl::GetFlag(FLAGS_baseline_seconds), rate);
    baseline_own_cpu = OwnCpuSeconds() - own_before;
    baseline_server_cpu = server_cpu_now() - server_before;
  }
  std::atomic<bool> running{true};
  std::thread progress;
  if (absl::GetFlag(FLAGS_progress)) progress = std::thread([&] { generator.Progress(running); });
  generator.StartRewards();
  if (absl::GetFlag(FLAGS_warmup_seconds) > 0) {
    generator.RunPhase(absl::GetFlag(FLAGS_warmup_seconds), 0, /*measure=*/false);
  }
  std::map<double, double> fresh_before;
  // CPU over the measured interval (and the rewards still due after it), on both sides: ours
  // from getrusage, the server's from its process_cpu_seconds_total (only when it runs on this
  // machine is the sum what the machine spent).
  double server_cpu_before = NAN;
  if (!metrics_url.empty()) {
    if (auto body = HttpGet(metrics_url); body.ok()) {
      fresh_before = FreshnessBuckets(*body, model);
      server_cpu_before = MetricValue(*body, "process_cpu_seconds_total");
    }
  }
  const double own_cpu_before = OwnCpuSeconds();
  const int64_t accepted_before = generator.accepted_total();
  const absl::StatusOr<v1::ModelDescription> measured_from = generator.Describe();
  generator.RunPhase(absl::GetFlag(FLAGS_duration_seconds), absl::GetFlag(FLAGS_requests), true);
  generator.StopRewards();  // sends every reward still due
  const double own_cpu = OwnCpuSeconds() - own_cpu_before;
  double server_cpu = NAN;
  if (!metrics_url.empty() && std::isfinite(server_cpu_before)) {
    if (auto body = HttpGet(metrics_url); body.ok()) {
      server_cpu = MetricValue(*body, "process_cpu_seconds_total") - server_cpu_before;
    }
  }
  running = false;
  if (progress.joinable()) progress.join();

  // Every reward ACCEPTED since the warm-up started is learned once the model has learned as
  // many as it had before plus those (the generator is assumed to be the only client).
  const int64_t accepted = generator.accepted_total();
  const auto learn_deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(absl::GetFlag(FLAGS_learn_wait_seconds)));
  absl::StatusOr<v1::ModelDescription> after = generator.Describe();
  const auto learn_start = Clock::now();
  while (after.ok() &&
         static_cast<int64_t>(after->rewards_learned()) <
             static_cast<int64_t>(before->rewards_learned()) + accepted &&
         Clock::now() < learn_deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    after = generator.Describe();
  }
  const double learn_wait = Seconds(Clock::now() - learn_start);
  // The server's CPU again once every reward is learned: the window from the start of the
  // measured interval to here also holds the learning the writer still owed when the interval
  // closed (and the idle polling of the wait).
  double server_cpu_learned = NAN;
  if (!metrics_url.empty() && std::isfinite(server_cpu_before)) {
    server_cpu_learned = server_cpu_now() - server_cpu_before;
  }
  if (!after.ok()) {
    std::fprintf(stderr, "%s\n", std::string(after.status().message()).c_str());
    return 1;
  }
  const int64_t learned = static_cast<int64_t>(after->rewards_learned()) -
                          static_cast<int64_t>(before->rewards_learned());
  double fresh_p99 = NAN, fresh_count = 0;
  if (!metrics_url.empty()) {
    if (auto body = HttpGet(metrics_url); body.ok()) {
      std::map<double, double> fresh_after = FreshnessBuckets(*body, model);
      fresh_count =
          fresh_after.count(INFINITY) ? fresh_after[INFINITY] - fresh_before[INFINITY] : 0;
      for (const auto& [bound, cumulative] : fresh_after) {
        if (fresh_count > 0 && cumulative - fresh_before[bound] >= 0.99 * fresh_count) {
          fresh_p99 = bound;
          break;
        }
      }
    }
  }

  const Summary& select = generator.select();  // stays valid: the generator outlives it
  const Summary rewards = generator.RewardSummary();
  // The kernel's input: the dense values, or with named features the model's hashed slots.
  const int c = absl::GetFlag(FLAGS_candidates),
            d = absl::GetFlag(FLAGS_features) == "named"
                    ? static_cast<int>(after->context_features().slots() +
                                       after->arm_features().slots())
                    : absl::GetFlag(FLAGS_dim) + absl::GetFlag(FLAGS_context_dim);
  const int64_t m = static_cast<int64_t>(after->dictionary_size());
  const int64_t m_start =
      measured_from.ok() ? static_cast<int64_t>(measured_from->dictionary_size()) : m;
  const double flops = 2.0 * c * static_cast<double>(m * m) + 2.0 * c * static_cast<double>(m) * d;
  const double product =
      absl::GetFlag(FLAGS_roofline) && m > 0 ? ProductRate(static_cast<int>(m), c) : NAN;
  // The roofline's ceiling is the closed-loop health rate; an open-loop baseline has none.
  const double q0 = absl::GetFlag(FLAGS_baseline_rate) > 0 ? 0 : baseline.throughput;
  const double roofline = (q0 > 0 && product > 0) ? 1.0 / (1.0 / q0 + flops / product) : NAN;

  std::printf(
      "graphbandit-loadgen: %s loop, %s, %d channel(s), C = %d, d = %d (%s features), slate %d, "
      "reward ratio %.2f after %.0f ms; model \"%s\" (%s), dictionary m = %lld "
      "(%lld at the start of the measured interval)\n",
      mode.c_str(),
      mode == "open" ? absl::StrFormat("%.0f requests/s, at most %d in flight",
                                       absl::GetFlag(FLAGS_rate), absl::GetFlag(FLAGS_concurrency))
                           .c_str()
                     : absl::StrFormat("%d callers", absl::GetFlag(FLAGS_concurrency)).c_str(),
      absl::GetFlag(FLAGS_channels), c, d, absl::GetFlag(FLAGS_features).c_str(),
      absl::GetFlag(FLAGS_slate_size), absl::GetFlag(FLAGS_reward_ratio),
      absl::GetFlag(FLAGS_reward_delay_ms), model.c_str(),
      v1::Policy_Name(after->config().policy()).c_str(), static_cast<long long>(m),
      static_cast<long long>(m_start));
  if (baseline.calls > 0) {
    PrintSummary(baseline);
    if (absl::GetFlag(FLAGS_baseline_rate) > 0) {
      absl::PrintF(
          "    open loop at %.0f calls/s; sent more than 1 ms after their scheduled time: %d\n",
          absl::GetFlag(FLAGS_baseline_rate), baseline.late_sends);
    }
    absl::PrintF("    CPU per health call: server %s ms, load generator %.4f ms\n",
                 std::isfinite(baseline_server_cpu)
                     ? absl::StrFormat(
                           "%.4f", 1e3 * baseline_server_cpu / static_cast<double>(baseline.calls))
                     : "-",
                 1e3 * baseline_own_cpu / static_cast<double>(baseline.calls));
  }
  PrintSummary(select);
  if (mode == "open") {
    std::printf("    sent more than 1 ms after their scheduled time: %lld\n",
                static_cast<long long>(select.late_sends));
  }
  if (rewards.calls > 0) PrintSummary(rewards);
  std::string outcome_text;
  for (const auto& [name, n] : generator.outcomes()) {
    absl::StrAppend(&outcome_text, outcome_text.empty() ? "" : ", ", name, " ", n);
  }
  std::printf("reward outcomes (warm-up included): %s\n",
              outcome_text.empty() ? "none" : outcome_text.c_str());
  std::printf("learned: %lld of %lld accepted rewards (waited %.2f s after the run)%s\n",
              static_cast<long long>(learned), static_cast<long long>(accepted), learn_wait,
              learned >= accepted ? "" : "  <-- NOT ALL LEARNED");
  if (std::isfinite(fresh_p99) || fresh_count > 0) {
    std::printf("freshness (server histogram, measured interval): %.0f rewards, p99 <= %g s\n",
                fresh_count, fresh_p99);
  }
  const double calls = static_cast<double>(select.calls);
  const double server_cpu_per_select = calls > 0 ? server_cpu / calls : NAN;
  const double own_cpu_per_select = calls > 0 ? own_cpu / calls : NAN;
  if (calls > 0) {
    absl::PrintF(
        "CPU per SelectArm (with its rewards), measured interval: server %s ms, load generator "
        "%.3f ms (%s s and %.2f s in %.2f s)\n",
        std::isfinite(server_cpu_per_select) ? absl::StrFormat("%.3f", 1e3 * server_cpu_per_select)
                                             : "-",
        1e3 * own_cpu_per_select,
        std::isfinite(server_cpu) ? absl::StrFormat("%.2f", server_cpu) : "-", own_cpu,
        select.seconds);
  }
  // Server CPU per rewarded decision (through learning) over server CPU per health call, the
  // two measured in this run: what the model costs in units of a bare gRPC round trip.
  const double health_cpu_per_call =
      baseline.calls > 0 ? baseline_server_cpu / static_cast<double>(baseline.calls) : NAN;
  // The ratio is defined against a health call in the closed loop (issue 35's target); an
  // open-loop baseline's health call costs more, so no ratio is given against it.
  const bool closed_baseline = !(absl::GetFlag(FLAGS_baseline_rate) > 0);
  const double learned_cpu_per_select = calls > 0 ? server_cpu_learned / calls : NAN;
  const double cpu_ratio = closed_baseline && health_cpu_per_call > 0
                               ? learned_cpu_per_select / health_cpu_per_call
                               : NAN;
  if (std::isfinite(cpu_ratio)) {
    absl::PrintF(
        "server CPU per SelectArm through the learning of its rewards %.3f ms (window closed "
        "after the wait) / per health call %.4f ms = %.1fx\n",
        1e3 * learned_cpu_per_select, 1e3 * health_cpu_per_call, cpu_ratio);
  }
  if (q0 > 0) {
    std::printf("SelectArm / health throughput: %.3f\n", select.throughput / q0);
  }
  if (std::isfinite(roofline)) {
    std::printf(
        "roofline: Q0 %.0f RPC/s, F %.3g flops per request (2Cm^2 + 2Cmd), P %.2f GFLOP/s "
        "(Eigen product, one core) -> R = %.0f RPC/s; SelectArm / R = %.3f\n",
        q0, flops, product / 1e9, roofline, select.throughput / roofline);
  }
  (void)accepted_before;

  // The same decisions over Personalizer's REST API, measured the same way, after the gRPC run.
  std::string http_json = "null";
  bool http_failed = false;
  if (const std::string target = absl::GetFlag(FLAGS_http_target); !target.empty()) {
    const Workload workload = BuildWorkload(512);  // the same ring as the gRPC run's
    std::vector<std::string> bodies;
    for (const v1::SelectArmRequest& request : workload.requests) {
      absl::StatusOr<std::string> body = loadtest::RankBody(request);
      if (!body.ok()) {
        std::fprintf(stderr, "%s\n", std::string(body.status().message()).c_str());
        return 1;
      }
      bodies.push_back(*std::move(body));
    }
    // The rewards of the gRPC run's model, without its noise draws.
    const auto reward_of = [&workload](size_t r, const std::string& arm_id) {
      const v1::SelectArmRequest& request = workload.requests[r];
      for (int k = 0; k < request.candidates_size(); ++k) {
        if (request.candidates(k).id() == arm_id) {
          return 0.5 + 0.4 * std::tanh(workload.direction.dot(workload.features[r][k]) * 2.0);
        }
      }
      return 0.0;
    };
    loadtest::HttpPhaseOptions http;
    http.target = target;
    http.key = http_key;
    http.callers = absl::GetFlag(FLAGS_concurrency);
    http.reward_ratio = absl::GetFlag(FLAGS_reward_ratio);
    http.seed = absl::GetFlag(FLAGS_seed);
    http.seconds = absl::GetFlag(FLAGS_warmup_seconds);
    if (http.seconds > 0) {
      if (auto warm = loadtest::RunHttpPhase(http, bodies, reward_of); !warm.ok()) {
        std::fprintf(stderr, "%s\n", std::string(warm.status().message()).c_str());
        return 64;
      }
    }
    http.seconds = absl::GetFlag(FLAGS_duration_seconds);
    const double server_before = server_cpu_now(), own_before = OwnCpuSeconds();
    absl::StatusOr<loadtest::HttpPhaseResult> run = loadtest::RunHttpPhase(http, bodies, reward_of);
    if (!run.ok()) {
      std::fprintf(stderr, "%s\n", std::string(run.status().message()).c_str());
      return 64;
    }
    const double http_own_cpu = OwnCpuSeconds() - own_before;
    const double http_server_cpu = server_cpu_now() - server_before;
    const auto summary = [&run](const char* name, const loadtest::HttpCalls& calls) {
      Tally tally;
      tally.latencies = calls.latencies;
      tally.codes = calls.codes;
      return Summarise(name, std::move(tally), run->seconds);
    };
    const Summary rank = summary("Personalizer.Rank (HTTP)", run->rank);
    const Summary rank_rewards = summary("Personalizer.Reward (HTTP)", run->reward);
    std::printf("over Personalizer's REST API (%s), the same decisions, %d callers:\n",
                target.c_str(), http.callers);
    PrintSummary(rank);
    if (rank_rewards.calls > 0) PrintSummary(rank_rewards);
    const double ranks = static_cast<double>(rank.calls);
    const double server_per_rank = ranks > 0 ? http_server_cpu / ranks : NAN;
    const double own_per_rank = ranks > 0 ? http_own_cpu / ranks : NAN;
    const double over_grpc = server_per_rank / server_cpu_per_select;
    absl::PrintF(
        "CPU per rank (with its rewards): server %s ms, load generator %.3f ms; gRPC's per "
        "SelectArm above: server %s ms -> HTTP / gRPC = %s; throughput HTTP / gRPC = %.3f\n",
        std::isfinite(server_per_rank) ? absl::StrFormat("%.3f", 1e3 * server_per_rank) : "-",
        1e3 * own_per_rank,
        std::isfinite(server_cpu_per_select) ? absl::StrFormat("%.3f", 1e3 * server_cpu_per_select)
                                             : "-",
        std::isfinite(over_grpc) ? absl::StrFormat("%.2f", over_grpc) : "-",
        select.throughput > 0 ? rank.throughput / select.throughput : NAN);
    const auto num = [](double x) {
      return std::isfinite(x) ? absl::StrFormat("%.9g", x) : "null";
    };
    http_json = absl::StrFormat(
        "{\"rank\": %s, \"reward\": %s, \"server_cpu_ms_per_rank\": %s, "
        "\"loadgen_cpu_ms_per_rank\": %s, \"server_cpu_rank_over_select\": %s, "
        "\"throughput_rank_over_select\": %s}",
        JsonSummary(rank), rank_rewards.calls > 0 ? JsonSummary(rank_rewards) : "null",
        num(1e3 * server_per_rank), num(1e3 * own_per_rank), num(over_grpc),
        num(select.throughput > 0 ? rank.throughput / select.throughput : NAN));
    http_failed = rank.errors > 0 || rank_rewards.errors > 0 || rank.calls == 0;
  }

  if (const std::string path = absl::GetFlag(FLAGS_report_json); !path.empty()) {
    std::ofstream out(path);
    const auto num = [](double x) {
      return std::isfinite(x) ? absl::StrFormat("%.9g", x) : "null";
    };
    out << absl::StrFormat(
        "{\"mode\": \"%s\", \"concurrency\": %d, \"rate\": %s, \"baseline_rate\": %s, "
        "\"channels\": %d, \"candidates\": "
        "%d, "
        "\"dim\": %d, \"slate_size\": %d, \"reward_ratio\": %s, \"reward_delay_ms\": %s, "
        "\"model\": \"%s\", \"policy\": \"%s\", \"dictionary_size\": %d, "
        "\"baseline\": %s, \"select\": %s, \"reward\": %s, \"accepted_rewards\": %d, "
        "\"learned_rewards\": %d, \"freshness_p99_seconds_at_most\": %s, "
        "\"select_over_health\": %s, \"flops_per_request\": %s, \"product_flops_per_second\": %s, "
        "\"roofline_rpc_per_second\": %s, \"select_over_roofline\": %s, "
        "\"server_cpu_seconds\": %s, \"loadgen_cpu_seconds\": %s, "
        "\"server_cpu_ms_per_select\": %s, \"loadgen_cpu_ms_per_select\": %s, "
        "\"baseline_server_cpu_ms_per_call\": %s, \"baseline_loadgen_cpu_ms_per_call\": %s, "
        "\"server_cpu_ms_per_select_learned\": %s, \"server_cpu_select_over_health\": %s, "
        "\"http\": %s}\n",
        mode, absl::GetFlag(FLAGS_concurrency), num(absl::GetFlag(FLAGS_rate)),
        num(absl::GetFlag(FLAGS_baseline_rate)), absl::GetFlag(FLAGS_channels), c, d,
        absl::GetFlag(FLAGS_slate_size), num(absl::GetFlag(FLAGS_reward_ratio)),
        num(absl::GetFlag(FLAGS_reward_delay_ms)), model, v1::Policy_Name(after->config().policy()),
        m, baseline.calls > 0 ? JsonSummary(baseline) : "null", JsonSummary(select),
        rewards.calls > 0 ? JsonSummary(rewards) : "null", accepted, learned, num(fresh_p99),
        num(q0 > 0 ? select.throughput / q0 : NAN), num(flops), num(product), num(roofline),
        num(std::isfinite(roofline) ? select.throughput / roofline : NAN), num(server_cpu),
        num(own_cpu), num(1e3 * server_cpu_per_select), num(1e3 * own_cpu_per_select),
        num(baseline.calls > 0 ? 1e3 * baseline_server_cpu / static_cast<double>(baseline.calls)
                               : NAN),
        num(baseline.calls > 0 ? 1e3 * baseline_own_cpu / static_cast<double>(baseline.calls)
                               : NAN),
        num(1e3 * learned_cpu_per_select), num(cpu_ratio), http_json);
  }
  if (const std::string path = absl::GetFlag(FLAGS_report_csv); !path.empty()) {
    std::ofstream out(path);
    out << "rpc,mode,concurrency,rate,candidates,dim,dictionary_size,seconds,calls,errors,"
           "throughput_per_second,p50_ms,p90_ms,p99_ms,p99_9_ms,max_ms,ratio_to_health,"
           "ratio_to_roofline\n";
    for (const Summary* s : std::initializer_list<const Summary*>{&baseline, &select, &rewards}) {
      if (s->calls == 0) continue;
      const bool is_select = s == &select;
      const bool is_baseline = s == &baseline;
      const double baseline_rate = absl::GetFlag(FLAGS_baseline_rate);
      out << absl::StrFormat(
          "%s,%s,%d,%g,%d,%d,%d,%.3f,%d,%d,%.1f,%s,%s,%s,%s,%s,%s,%s\n", s->rpc,
          is_baseline ? (baseline_rate > 0 ? "open" : "closed") : mode,
          absl::GetFlag(FLAGS_concurrency), is_baseline ? baseline_rate : absl::GetFlag(FLAGS_rate),
          c, d, m, s->seconds, s->calls, s->errors, s->throughput, Ms(s->p50), Ms(s->p90),
          Ms(s->p99), Ms(s->p999), Ms(s->max),
          is_select && q0 > 0 ? absl::StrFormat("%.4f", s->throughput / q0) : "",
          is_select && std::isfinite(roofline) ? absl::StrFormat("%.4f", s->throughput / roofline)
                                               : "");
    }
  }
  return select.errors == 0 && learned >= accepted && !http_failed ? 0 : 2;
}

}  // namespace
}  // namespace graphbandit::client

int main(int argc, char** argv) {
  graphbandit::client::ParseCommandLine(
      argc, argv, "client/loadgen.cc",
      "graphbandit-loadgen: measures what a graphbandit server sustains. Closed loop (N callers)\n"
      "or open loop (a fixed rate, latency from the scheduled send time); a health-check\n"
      "baseline in the same run; warm-up; rewards after a delay; percentiles, status codes,\n"
      "freshness and the roofline; JSON and CSV reports. Exit status: 0 when every SelectArm\n"
      "succeeded and every accepted reward was learned, 2 otherwise, 1 when the server could\n"
      "not be reached, 64 for a usage error.\n"
      "  graphbandit-loadgen --mode=closed --concurrency=8 --candidates=50 --duration_seconds=20\n"
      "  graphbandit-loadgen --mode=open --rate=1500 --reward_ratio=1 --report_json=run.json");
  // As in the server (server/main.cc): no lock-graph bookkeeping on every absl::Mutex acquisition
  // in the measuring process, whose CPU the server shares on a small machine.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return graphbandit::client::Run();
}
