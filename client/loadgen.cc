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
//
// This file holds the flags and the run; the gRPC load is client/loadtest/generator.h, the
// summaries of calls client/loadtest/call_summary.h, the report and the roofline
// client/loadtest/loadgen_report.h, and the reading of /metrics client/loadtest/metrics_scrape.h.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "client/connection.h"
#include "client/loadtest/call_summary.h"
#include "client/loadtest/generator.h"
#include "client/loadtest/http_phase.h"
#include "client/loadtest/loadgen_report.h"
#include "client/loadtest/metrics_scrape.h"
#include "core/storage/file_util.h"
#include "graphbandit/v1/bandit.grpc.pb.h"

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
          "dense: candidates and context as vectors; named: as named features (docs/api.md's "
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

using loadtest::Clock;
using loadtest::ProcessCpuSeconds;
using loadtest::Seconds;
namespace v1 = ::graphbandit::v1;
using loadtest::Generator;
using loadtest::JsonSummary;
using loadtest::PrintSummary;
using loadtest::Summarise;
using loadtest::Summary;
using loadtest::Tally;
using loadtest::Workload;

// The load's shape, from the flags.
loadtest::LoadOptions LoadOptionsFromFlags() {
  loadtest::LoadOptions options;
  options.model = absl::GetFlag(FLAGS_model);
  options.open_loop = absl::GetFlag(FLAGS_mode) == "open";
  options.concurrency = absl::GetFlag(FLAGS_concurrency);
  options.rate = absl::GetFlag(FLAGS_rate);
  options.client_threads = absl::GetFlag(FLAGS_client_threads);
  options.deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  options.reward_ratio = absl::GetFlag(FLAGS_reward_ratio);
  options.reward_delay_ms = absl::GetFlag(FLAGS_reward_delay_ms);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.candidates = absl::GetFlag(FLAGS_candidates);
  options.dim = absl::GetFlag(FLAGS_dim);
  options.context_dim = absl::GetFlag(FLAGS_context_dim);
  options.items = absl::GetFlag(FLAGS_items);
  options.users = absl::GetFlag(FLAGS_users);
  options.slate_size = absl::GetFlag(FLAGS_slate_size);
  options.named_features = absl::GetFlag(FLAGS_features) == "named";
  return options;
}

// The freshness histogram of one model: upper bound -> cumulative count (+Inf included).
std::map<double, double> FreshnessBuckets(const loadtest::MetricsPage& page,
                                          const std::string& model) {
  loadtest::MetricLabels match;
  if (!model.empty()) match.emplace_back("model", model);
  return page.Buckets("graphbandit_state_freshness_seconds", match);
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
  const loadtest::LoadOptions options = LoadOptionsFromFlags();
  Generator generator(options, std::move(channels), loadtest::BuildWorkload(options, 512));
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
    if (absl::StatusOr<loadtest::MetricsPage> page = loadtest::ScrapeMetrics(metrics_url);
        !page.ok()) {
      std::fprintf(stderr, "graphbandit-loadgen: --metrics_url: %s; no server CPU or freshness\n",
                   std::string(page.status().message()).c_str());
    }
  }
  // CPU of the server (its process_cpu_seconds_total; NaN without --metrics_url) and ours.
  const auto server_cpu_now = [&metrics_url]() -> double {
    if (metrics_url.empty()) return NAN;
    absl::StatusOr<loadtest::MetricsPage> page = loadtest::ScrapeMetrics(metrics_url);
    return page.ok() ? page->Value("process_cpu_seconds_total") : NAN;
  };
  Summary baseline;
  double baseline_server_cpu = NAN, baseline_own_cpu = NAN;
  if (absl::GetFlag(FLAGS_baseline_seconds) > 0) {
    const double rate = absl::GetFlag(FLAGS_baseline_rate);
    generator.Baseline(absl::GetFlag(FLAGS_concurrency), 0.5, rate);  // warm-up
    const double server_before = server_cpu_now(), own_before = ProcessCpuSeconds();
    baseline = generator.Baseline(absl::GetFlag(FLAGS_concurrency),
                                  absl::GetFlag(FLAGS_baseline_seconds), rate);
    baseline_own_cpu = ProcessCpuSeconds() - own_before;
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
    if (auto page = loadtest::ScrapeMetrics(metrics_url); page.ok()) {
      fresh_before = FreshnessBuckets(*page, model);
      server_cpu_before = page->Value("process_cpu_seconds_total");
    }
  }
  const double own_cpu_before = ProcessCpuSeconds();
  const int64_t accepted_before = generator.accepted_total();
  const absl::StatusOr<v1::ModelDescription> measured_from = generator.Describe();
  generator.RunPhase(absl::GetFlag(FLAGS_duration_seconds), absl::GetFlag(FLAGS_requests), true);
  generator.StopRewards();  // sends every reward still due
  const double own_cpu = ProcessCpuSeconds() - own_cpu_before;
  double server_cpu = NAN;
  if (!metrics_url.empty() && std::isfinite(server_cpu_before)) {
    if (auto page = loadtest::ScrapeMetrics(metrics_url); page.ok()) {
      server_cpu = page->Value("process_cpu_seconds_total") - server_cpu_before;
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
    if (auto page = loadtest::ScrapeMetrics(metrics_url); page.ok()) {
      std::map<double, double> fresh_after = FreshnessBuckets(*page, model);
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
  loadtest::LoadgenReport report;
  report.mode = mode;
  report.concurrency = absl::GetFlag(FLAGS_concurrency);
  report.channels = absl::GetFlag(FLAGS_channels);
  report.slate_size = absl::GetFlag(FLAGS_slate_size);
  report.rate = absl::GetFlag(FLAGS_rate);
  report.baseline_rate = absl::GetFlag(FLAGS_baseline_rate);
  report.reward_ratio = absl::GetFlag(FLAGS_reward_ratio);
  report.reward_delay_ms = absl::GetFlag(FLAGS_reward_delay_ms);
  report.features = absl::GetFlag(FLAGS_features);
  // The kernel's input: the dense values, or with named features the model's hashed slots.
  report.c = absl::GetFlag(FLAGS_candidates);
  report.d =
      absl::GetFlag(FLAGS_features) == "named"
          ? static_cast<int>(after->context_features().slots() + after->arm_features().slots())
          : absl::GetFlag(FLAGS_dim) + absl::GetFlag(FLAGS_context_dim);
  report.model = model;
  report.policy = v1::Policy_Name(after->config().policy());
  report.m = static_cast<int64_t>(after->dictionary_size());
  report.m_start =
      measured_from.ok() ? static_cast<int64_t>(measured_from->dictionary_size()) : report.m;
  report.baseline = baseline;
  report.baseline_server_cpu = baseline_server_cpu;
  report.baseline_own_cpu = baseline_own_cpu;
  report.select = generator.select();
  report.rewards = generator.RewardSummary();
  report.outcomes = generator.outcomes();
  report.accepted = accepted;
  report.learned = learned;
  report.learn_wait = learn_wait;
  report.fresh_p99 = fresh_p99;
  report.fresh_count = fresh_count;
  report.server_cpu = server_cpu;
  report.own_cpu = own_cpu;
  report.server_cpu_learned = server_cpu_learned;
  loadtest::AddRoofline(absl::GetFlag(FLAGS_roofline), &report);
  loadtest::PrintLoadgenReport(report);
  (void)accepted_before;
  const Summary& select = report.select;
  const double server_cpu_per_select = report.server_cpu_per_select();

  // The same decisions over Personalizer's REST API, measured the same way, after the gRPC run.
  json::Value http_json = json::Null();
  bool http_failed = false;
  if (const std::string target = absl::GetFlag(FLAGS_http_target); !target.empty()) {
    const Workload workload = loadtest::BuildWorkload(options, 512);  // the gRPC run's ring
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
    const double server_before = server_cpu_now(), own_before = ProcessCpuSeconds();
    absl::StatusOr<loadtest::HttpPhaseResult> run = loadtest::RunHttpPhase(http, bodies, reward_of);
    if (!run.ok()) {
      std::fprintf(stderr, "%s\n", std::string(run.status().message()).c_str());
      return 64;
    }
    const double http_own_cpu = ProcessCpuSeconds() - own_before;
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
    http_json = json::Object({
        {"rank", JsonSummary(rank)},
        {"reward", rank_rewards.calls > 0 ? JsonSummary(rank_rewards) : json::Null()},
        {"server_cpu_ms_per_rank", json::Number(1e3 * server_per_rank)},
        {"loadgen_cpu_ms_per_rank", json::Number(1e3 * own_per_rank)},
        {"server_cpu_rank_over_select", json::Number(over_grpc)},
        {"throughput_rank_over_select",
         json::Number(select.throughput > 0 ? rank.throughput / select.throughput : NAN)},
    });
    http_failed = rank.errors > 0 || rank_rewards.errors > 0 || rank.calls == 0;
  }

  if (const std::string path = absl::GetFlag(FLAGS_report_json); !path.empty()) {
    loadtest::WriteLoadgenJson(path, report, http_json);
  }
  if (const std::string path = absl::GetFlag(FLAGS_report_csv); !path.empty()) {
    loadtest::WriteLoadgenCsv(path, report);
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
