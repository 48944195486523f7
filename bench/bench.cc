// graphbandit-bench: measures, in-process on the engine (no gRPC), the two costs that the
// learner's design trades:
//
//  --mode=reward_rate   SelectArm latency while one stream of rewards arrives at increasing
//                       rates. Decision callers run closed-loop the whole time; in each phase
//                       the reward stream is paced at a target rate (0 = none, "max" = as fast
//                       as the engine accepts). Printed per phase: SelectArm p50/p99/max, the
//                       decision rate, the reward rate reached, and state freshness (from
//                       acknowledging a reward to serving a state that learned it).
//  --mode=durability    ReportReward throughput and latency under each fsync policy (every
//                       record, group commit, none), closed-loop reporters on a real disk.
//  --mode=refit         What hyper-parameter fitting costs (core/fit/refit.h): one fit on the
//                       default max_points observations (helper thread), and the rebuild of
//                       the Nystrom posterior with the fitted values (writer thread, learning
//                       paused meanwhile) after t observations, for each --refit_history.
//  --mode=ledger_snapshot  What a snapshot costs decisions: the ledger is captured under the
//                       ledger lock (SelectArm and ReportReward wait that long), then encoded
//                       without it. For each --ledger_sizes, a ledger of that many decisions
//                       (one arm, d = 16, reward reported) and as many tombstones: the time
//                       of each step.
//  --mode=aging         Whether learning's cost stays flat as a model ages, memory caps on
//                       (--aging_dictionary, --aging_history): --aging_events decisions, each
//                       rewarded at once by closed-loop callers, and per checkpoint the mean and
//                       p99 time from acknowledging a reward to publishing a state that learned
//                       it over the preceding --aging_window rewards, with m and the rate. With
//                       --aging_rate the callers are paced (open loop) to that many events per
//                       second, so that below the writer's capacity the time is the update's
//                       own cost rather than queueing behind a saturated writer.
//  --mode=growth        What dictionary growth costs the writer per reward: an EK_UCB learner as
//                       the server builds one (cap --growth_dictionary, every observation
//                       retained) learns --growth_events rewards twice from the same stream,
//                       once scanning the history for a whole growth batch when it fills, once
//                       spreading that scan over the following rewards; per row of
//                       --growth_window rewards, m and the mean, p99 and largest time of one
//                       Observe for each.
//
// Each prints a table; figures come from one run, side by side. The two that time one learner
// outside the engine, refit and growth, are in bench/learner_bench.cc.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/learner_bench.h"
#include "client/loadtest/load_driver.h"
#include "core/base/command_line.h"
#include "core/base/log.h"
#include "core/base/random.h"
#include "core/ledger/decision_ledger.h"
#include "core/model/engine.h"
#include "core/model/ledger_records.h"

ABSL_FLAG(std::string, mode, "all",
          "reward_rate, durability, refit, aging, growth, ledger_snapshot, or all (all but aging "
          "and growth, which are long).");
ABSL_FLAG(std::string, ledger_sizes, "10000,100000,1000000",
          "--mode=ledger_snapshot: decisions (and tombstones) in the ledger, one row each.");
ABSL_FLAG(std::string, refit_history, "1000,5000,20000",
          "--mode=refit: observations learned before the fit and the rebuild, one row each.");
ABSL_FLAG(std::string, reward_rates, "0,100,500,2000,max",
          "Reward rates per second for --mode=reward_rate, one phase each; max = unpaced.");
ABSL_FLAG(double, phase_seconds, 4.0, "Length of each phase.");
ABSL_FLAG(int32_t, deciders, 2, "Closed-loop SelectArm callers.");
ABSL_FLAG(int32_t, reporters, 4, "Closed-loop ReportReward callers in --mode=durability.");
ABSL_FLAG(int32_t, candidates, 20, "Candidates per SelectArm.");
ABSL_FLAG(int32_t, users, 50, "Distinct users.");
ABSL_FLAG(int64_t, aging_events, 1'000'000, "--mode=aging: decisions (each rewarded) in all.");
ABSL_FLAG(std::string, aging_checkpoints, "10000,100000,300000,1000000",
          "--mode=aging: event counts at which a row is printed.");
ABSL_FLAG(int64_t, aging_window, 5000, "--mode=aging: rewards each row averages over.");
ABSL_FLAG(int32_t, aging_dictionary, 256, "--mode=aging: max_dictionary_size (memory cap).");
ABSL_FLAG(int64_t, aging_history, 20000, "--mode=aging: max_history (memory cap).");
ABSL_FLAG(int32_t, aging_candidates, 20, "--mode=aging: candidates per decision.");
ABSL_FLAG(double, aging_rate, 0,
          "--mode=aging: events per second over all callers (open loop: event i is due at "
          "i / rate seconds after the start); 0 = closed loop, as fast as the callers go.");
ABSL_FLAG(int64_t, growth_events, 60000, "--mode=growth: rewards learned by each learner.");
ABSL_FLAG(int64_t, growth_window, 10000, "--mode=growth: rewards per printed row.");
ABSL_FLAG(int32_t, growth_dictionary, 1000, "--mode=growth: max_dictionary_size.");
ABSL_FLAG(std::string, state_dir, "",
          "Where to keep the benchmark's state (a fresh directory under it; default: a temporary "
          "directory on the disk that holds /tmp).");

namespace graphbandit {
namespace {

using loadtest::Clock;
using loadtest::LatencyStats;
using loadtest::OpenLoopSchedule;

struct Items {
  std::vector<std::string> ids;
  std::vector<std::vector<double>> features;
};

Items MakeItems(int n) {
  Items items;
  for (int i = 0; i < n; ++i) {
    items.ids.push_back(absl::StrCat("item", i));
    items.features.push_back(
        {std::cos(i * 0.7), std::sin(i * 0.7), std::cos(i * 0.3), 0.1 * (i % 5)});
  }
  return items;
}

DecisionRequest Request(const Items& items, const std::string& user, const std::string& event_id) {
  DecisionRequest request;
  request.user_id = user;
  for (size_t i = 0; i < items.ids.size(); ++i)
    request.candidates.push_back({items.ids[i], items.features[i]});
  request.event_id = event_id;
  return request;
}

std::string FreshDir(const std::string& base, const std::string& name) {
  std::string root = base.empty() ? "/tmp" : base;
  std::string pattern = absl::StrCat(root, "/graphbandit-bench-", name, ".XXXXXX");
  return mkdtemp(pattern.data());
}

std::unique_ptr<Engine> Open(const std::string& dir, Durability durability) {
  EngineOptions options;
  options.state_dir = dir;
  options.durability = durability;
  ModelOptions model;
  model.max_decisions = 2'000'000;
  options.models = {model};
  auto engine = Engine::Open(options);
  if (!engine.ok()) {
    std::fprintf(stderr, "cannot open the engine: %s\n", engine.status().ToString().c_str());
    std::exit(1);
  }
  return *std::move(engine);
}

// Freshness quantile from the histogram difference between two readings.
double FreshnessQuantile(const FreshnessStats& before, const FreshnessStats& after, double q) {
  const int64_t n = after.count - before.count;
  if (n <= 0) return std::nan("");
  for (int b = 0; b < FreshnessStats::kBuckets; ++b) {
    if (after.buckets[b] - before.buckets[b] >= static_cast<int64_t>(std::ceil(q * n))) {
      return FreshnessStats::kBounds[b];
    }
  }
  return INFINITY;
}

void RewardRate() {
  const std::string dir = FreshDir(absl::GetFlag(FLAGS_state_dir), "rate");
  Durability durability;  // the defaults: a (shared) sync per reward, snapshots every 100k records
  auto engine = Open(dir, durability);
  Model* model = *engine->FindModel("");
  const Items items = MakeItems(absl::GetFlag(FLAGS_candidates));
  const int users = absl::GetFlag(FLAGS_users);
  const int deciders = absl::GetFlag(FLAGS_deciders);
  const double phase_seconds = absl::GetFlag(FLAGS_phase_seconds);

  // Warm up: a model that has learned something, so decisions do real work.
  for (int i = 0; i < 2000; ++i) {
    const std::string user = absl::StrCat("u", i % users), id = absl::StrCat("warm", i);
    auto d = engine->SelectArm(Request(items, user, id));
    if (d.ok()) engine->ReportReward({id, 0.1 * (i % 9), {}, ""}).IgnoreError();
  }
  model->WaitForWriter();

  std::printf(
      "SelectArm latency against the reward rate (in-process, %d closed-loop deciders, %d "
      "candidates, EK-UCB, default durability; %.0f s per phase)\n",
      deciders, static_cast<int>(items.ids.size()), phase_seconds);
  std::printf("%-12s %12s %12s %10s %10s %10s %14s %14s %8s %6s\n", "target/s", "rewards/s",
              "decisions/s", "p50 ms", "p99 ms", "max ms", "fresh p50 ms", "fresh p99 ms", "CPU %",
              "m");
  int phase_index = 0;
  for (absl::string_view rate_text : absl::StrSplit(absl::GetFlag(FLAGS_reward_rates), ',')) {
    const bool unpaced = rate_text == "max";
    double rate = 0;
    if (!unpaced && !absl::SimpleAtod(rate_text, &rate)) {
      std::fprintf(stderr, "bad --reward_rates entry \"%s\"\n", std::string(rate_text).c_str());
      std::exit(2);
    }
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<double> latencies;
    std::atomic<int64_t> rewards{0};
    const FreshnessStats fresh_before = model->Stats().freshness;
    const double cpu_before = loadtest::ProcessCpuSeconds();
    std::vector<std::thread> threads;
    for (int t = 0; t < deciders; ++t) {
      threads.emplace_back([&, t] {
        std::vector<double> mine;
        for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          const std::string user = absl::StrCat("u", (i * 7 + t) % users);
          const auto start = Clock::now();
          auto d = engine->SelectArm(Request(items, user, ""));
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          if (d.ok()) mine.push_back(ms);
        }
        std::lock_guard<std::mutex> lock(mu);
        latencies.insert(latencies.end(), mine.begin(), mine.end());
      });
    }
    // The reward stream: decide (not timed; one candidate, so that the stream's own decisions
    // are cheap and it can reach its rate) then report, paced to the target rate.
    threads.emplace_back([&] {
      if (!unpaced && rate <= 0) return;
      const OpenLoopSchedule schedule(Clock::now(), unpaced ? 1.0 : rate);
      for (int64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        if (!unpaced) schedule.WaitFor(i);
        const std::string user = absl::StrCat("u", i % users);
        const std::string id = absl::StrCat("p", phase_index, "-", i);
        DecisionRequest one = Request(items, user, id);
        one.candidates = {one.candidates[static_cast<size_t>(i) % one.candidates.size()]};
        auto d = engine->SelectArm(one);
        if (!d.ok()) continue;
        auto r = engine->ReportReward({id, 0.1 * static_cast<double>((i * 13) % 9), {}, ""});
        if (r.ok() && r->outcome == RewardOutcome::kAccepted) ++rewards;
      }
    });
    std::this_thread::sleep_for(std::chrono::duration<double>(phase_seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double cpu_percent = 100.0 * (loadtest::ProcessCpuSeconds() - cpu_before) / phase_seconds;
    model->WaitForWriter();
    const FreshnessStats fresh_after = model->Stats().freshness;
    const double decisions_per_s = static_cast<double>(latencies.size()) / phase_seconds;
    const LatencyStats latency = loadtest::SummariseLatencies(std::move(latencies));
    const double p50 = latency.p50, p99 = latency.p99, max = latency.count > 0 ? latency.max : 0;
    std::printf("%-12s %12.0f %12.0f %10.3f %10.3f %10.2f %14.3g %14.3g %8.0f %6lld\n",
                std::string(rate_text).c_str(), static_cast<double>(rewards.load()) / phase_seconds,
                decisions_per_s, p50, p99, max,
                1000 * FreshnessQuantile(fresh_before, fresh_after, 0.5),
                1000 * FreshnessQuantile(fresh_before, fresh_after, 0.99), cpu_percent,
                static_cast<long long>(model->View()->dictionary_size));
    std::fflush(stdout);
    ++phase_index;
  }
  std::printf(
      "(freshness figures are histogram bucket bounds: 'at most'; CPU %% is the whole "
      "process over the phase, %u hardware threads = %u%%)\n\n",
      std::thread::hardware_concurrency(), 100 * std::thread::hardware_concurrency());
  engine->Shutdown();
  std::filesystem::remove_all(dir);
}

void DurabilityCost() {
  const int reporters = absl::GetFlag(FLAGS_reporters);
  const double phase_seconds = absl::GetFlag(FLAGS_phase_seconds);
  const Items items = MakeItems(5);
  std::printf(
      "ReportReward under each fsync policy (in-process, %d closed-loop reporters, each "
      "round = SelectArm + ReportReward; %.0f s each; state under %s)\n",
      reporters, phase_seconds,
      absl::GetFlag(FLAGS_state_dir).empty() ? "/tmp" : absl::GetFlag(FLAGS_state_dir).c_str());
  std::printf("%-22s %12s %12s %12s %12s %12s\n", "sync", "rewards/s", "p50 ms", "p99 ms", "max ms",
              "fsyncs/s");
  struct Policy {
    const char* name;
    Durability::Sync sync;
  };
  for (const Policy& policy : {Policy{"every_record", Durability::Sync::kEveryRecord},
                               Policy{"group_commit (2 ms)", Durability::Sync::kGroupCommit},
                               Policy{"os (no fsync)", Durability::Sync::kOs}}) {
    const std::string dir = FreshDir(absl::GetFlag(FLAGS_state_dir), "sync");
    Durability durability;
    durability.sync = policy.sync;
    auto engine = Open(dir, durability);
    Model* model = *engine->FindModel("");
    const int64_t syncs_before = model->Stats().log_syncs;
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<double> latencies;
    std::vector<std::thread> threads;
    for (int t = 0; t < reporters; ++t) {
      threads.emplace_back([&, t] {
        std::vector<double> mine;
        for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
          const std::string user = absl::StrCat("u", (i + t) % 20);
          const std::string id = absl::StrCat("t", t, "-", i);
          auto d = engine->SelectArm(Request(items, user, id));
          if (!d.ok()) continue;
          const auto start = Clock::now();
          auto r = engine->ReportReward({id, 0.5, {}, ""});
          const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
          if (r.ok()) mine.push_back(ms);
        }
        std::lock_guard<std::mutex> lock(mu);
        latencies.insert(latencies.end(), mine.begin(), mine.end());
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(phase_seconds));
    stop = true;
    for (auto& t : threads) t.join();
    const double syncs = static_cast<double>(model->Stats().log_syncs - syncs_before);
    const double count = static_cast<double>(latencies.size());
    const LatencyStats latency = loadtest::SummariseLatencies(std::move(latencies));
    const double p50 = latency.p50, p99 = latency.p99, max = latency.count > 0 ? latency.max : 0;
    std::printf("%-22s %12.0f %12.3f %12.3f %12.2f %12.0f\n", policy.name, count / phase_seconds,
                p50, p99, max, syncs / phase_seconds);
    std::fflush(stdout);
    engine->Shutdown();
    engine.reset();
    std::filesystem::remove_all(dir);
  }
  std::printf("\n");
}

}  // namespace
}  // namespace graphbandit

namespace graphbandit {

// Mean and p99 (bucket bound) freshness between two readings, in milliseconds.
std::pair<double, double> FreshnessWindow(const FreshnessStats& before,
                                          const FreshnessStats& after) {
  const int64_t n = after.count - before.count;
  if (n <= 0) return {std::nan(""), std::nan("")};
  return {1e3 * (after.sum - before.sum) / static_cast<double>(n),
          1e3 * FreshnessQuantile(before, after, 0.99)};
}

// The ledger part of a snapshot (Model::TakeSnapshot captures it under the ledger lock and
// encodes the capture after releasing it).
void LedgerSnapshot() {
  std::printf("== ledger snapshot: capture (under the ledger lock), then encode (without) ==\n");
  std::printf("%10s %12s %10s %12s %10s\n", "decisions", "tombstones", "MB", "capture ms",
              "encode ms");
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_ledger_sizes), ',')) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(text, &n) || n < 1) {
      std::fprintf(stderr, "--ledger_sizes: bad size '%.*s'\n", static_cast<int>(text.size()),
                   text.data());
      std::exit(64);
    }
    DecisionLedger ledger(absl::Minutes(10), n, n, Aggregation::kFirst);
    Rng rng(7);
    const absl::Time start = absl::Now();
    for (int64_t i = 0; i < n; ++i) {
      auto entry = std::make_unique<LedgerEntry>();
      entry->event_id = absl::StrCat("event-", i);
      entry->user_id = absl::StrCat("user-", i % 1000);
      entry->created = start;
      LedgerArm arm;
      arm.arm_id = absl::StrCat("arm-", i % 5000);
      arm.features.resize(16);
      for (double& f : arm.features) f = rng.Uniform();
      entry->arms.push_back(std::move(arm));
      entry->unreported = 1;
      ChosenArm chosen;
      chosen.arm_id = entry->arms[0].arm_id;
      entry->decision.arms.push_back(chosen);
      LedgerEntry* stored = ledger.Insert(std::move(entry));
      ledger.Report(stored, 0, 1.0);
      ledger.RestoreTombstone(Tombstone{absl::StrCat("closed-", i), ClosedAs::kCompleted, start});
    }
    using Ms = std::chrono::duration<double, std::milli>;
    const auto t0 = std::chrono::steady_clock::now();
    const LedgerCapture capture = ledger.Capture();
    const auto t1 = std::chrono::steady_clock::now();
    const std::string encoded = EncodeLedger(capture);
    const auto t2 = std::chrono::steady_clock::now();
    std::printf("%10lld %12lld %10.1f %12.1f %10.1f\n", static_cast<long long>(ledger.size()),
                static_cast<long long>(ledger.tombstones()),
                static_cast<double>(encoded.size()) / 1e6, Ms(t1 - t0).count(),
                Ms(t2 - t1).count());
  }
  std::printf("\n");
}

void Aging() {
  const std::string dir = FreshDir(absl::GetFlag(FLAGS_state_dir), "aging");
  EngineOptions options;
  options.state_dir = dir;
  options.durability.sync = Durability::Sync::kOs;  // the writer's cost, not the disk's
  ModelOptions model;
  model.max_dictionary_size = absl::GetFlag(FLAGS_aging_dictionary);
  model.max_history = absl::GetFlag(FLAGS_aging_history);
  model.max_decisions = 200'000;
  options.models = {model};
  auto opened = Engine::Open(options);
  if (!opened.ok()) {
    std::fprintf(stderr, "cannot open the engine: %s\n", opened.status().ToString().c_str());
    std::exit(1);
  }
  std::unique_ptr<Engine> engine = *std::move(opened);
  Model* m = *engine->FindModel("");
  std::vector<int64_t> checkpoints;
  for (absl::string_view text : absl::StrSplit(absl::GetFlag(FLAGS_aging_checkpoints), ',')) {
    int64_t c = 0;
    if (!absl::SimpleAtoi(text, &c) || c <= 0) {
      std::fprintf(stderr, "bad --aging_checkpoints entry \"%s\"\n", std::string(text).c_str());
      std::exit(2);
    }
    checkpoints.push_back(c);
  }
  const int64_t events = absl::GetFlag(FLAGS_aging_events);
  const int64_t window = absl::GetFlag(FLAGS_aging_window);
  const int users = absl::GetFlag(FLAGS_users);
  // Items with 8 features on a circle and noise: a task that fills a small dictionary.
  Rng item_rng(3);
  Items items;
  for (int i = 0; i < 400; ++i) {
    items.ids.push_back(absl::StrCat("item", i));
    std::vector<double> f(8);
    for (double& x : f) x = item_rng.Normal() * 0.6;
    items.features.push_back(f);
  }
  const int candidates = absl::GetFlag(FLAGS_aging_candidates);
  const double rate = absl::GetFlag(FLAGS_aging_rate);
  if (!std::isfinite(rate) || !(rate == 0 || rate >= 1)) {
    std::fprintf(stderr, "--aging_rate must be 0 (closed loop) or at least 1 event/s\n");
    std::exit(2);
  }
  std::printf(
      "Learning cost as the model ages (in-process, EK-UCB, max_dictionary_size %d, max_history "
      "%lld, %d candidates, no fsync, %s): per checkpoint, the %lld rewards before it\n",
      model.max_dictionary_size, static_cast<long long>(model.max_history), candidates,
      rate > 0 ? absl::StrFormat("paced at %.0f events/s", rate).c_str() : "closed loop",
      static_cast<long long>(window));
  std::printf("%10s %8s %10s %16s %16s %12s\n", "events", "m", "history", "fresh mean ms",
              "fresh p99 ms <=", "events/s");
  std::atomic<int64_t> next{0};
  std::mutex mu;
  FreshnessStats window_start;
  auto window_clock = Clock::now();
  size_t checkpoint = 0;
  const int threads = std::max(1, absl::GetFlag(FLAGS_deciders));
  const Clock::time_point start = Clock::now();
  const OpenLoopSchedule schedule(start, rate > 0 ? rate : 1.0);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      Rng rng(100 + t);
      for (;;) {
        const int64_t i = next.fetch_add(1);
        if (i >= events) return;
        if (rate > 0) schedule.WaitFor(i);
        DecisionRequest request;
        request.user_id = absl::StrCat("u", rng.UniformInt(users));
        for (int c = 0; c < candidates; ++c) {
          const size_t k = rng.UniformInt(items.ids.size());
          request.candidates.push_back({items.ids[k], items.features[k]});
        }
        auto decision = engine->SelectArm(request);
        if (decision.ok()) {
          const size_t k = decision->arms[0].candidate_index;
          double reward = 0.0;
          for (double x : request.candidates[k].features) reward += x;
          reward = std::tanh(reward) + 0.1 * rng.Normal();
          engine->ReportReward({decision->event_id, reward, {}, ""}).IgnoreError();
        }
        const int64_t done = i + 1;
        std::lock_guard<std::mutex> lock(mu);
        if (checkpoint < checkpoints.size() && done == checkpoints[checkpoint] - window) {
          m->WaitForWriter();
          window_start = m->Stats().freshness;
          window_clock = Clock::now();
        }
        if (checkpoint < checkpoints.size() && done == checkpoints[checkpoint]) {
          m->WaitForWriter();
          const ModelStats stats = m->Stats();
          const auto [mean, p99] = FreshnessWindow(window_start, stats.freshness);
          const double seconds = std::chrono::duration<double>(Clock::now() - window_clock).count();
          std::printf("%10lld %8lld %10lld %16.3f %16.3f %12.0f\n", static_cast<long long>(done),
                      static_cast<long long>(stats.view.dictionary_size),
                      static_cast<long long>(stats.view.history_size), mean, p99,
                      static_cast<double>(window) / seconds);
          std::fflush(stdout);
          ++checkpoint;
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  std::printf("\n");
  engine.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace graphbandit

int main(int argc, char** argv) {
  graphbandit::ParseProgramCommandLine(
      argc, argv, "graphbandit-bench",
      "graphbandit-bench: measures SelectArm latency against the reward rate, and ReportReward\n"
      "cost per fsync policy.\n"
      "Usage: graphbandit-bench [--mode=MODE] [--phase_seconds=S] [...]\n"
      "Example: graphbandit-bench --mode=all --phase_seconds=4",
      {"bench/bench.cc"});
  graphbandit::SetLogSink([](absl::string_view message) {
    std::fprintf(stderr, "graphbandit-bench: %.*s\n", static_cast<int>(message.size()),
                 message.data());
  });
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "reward_rate" && mode != "durability" && mode != "refit" && mode != "aging" &&
      mode != "ledger_snapshot" && mode != "growth" && mode != "all") {
    std::fprintf(stderr,
                 "--mode must be reward_rate, durability, refit, aging, growth, ledger_snapshot "
                 "or all\n");
    return 64;
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("graphbandit-bench on %s, %u hardware threads\n\n", host,
              std::thread::hardware_concurrency());
  if (mode == "reward_rate" || mode == "all") graphbandit::RewardRate();
  if (mode == "durability" || mode == "all") graphbandit::DurabilityCost();
  if (mode == "refit" || mode == "all") graphbandit::RefitCost(absl::GetFlag(FLAGS_refit_history));
  if (mode == "ledger_snapshot" || mode == "all") graphbandit::LedgerSnapshot();
  if (mode == "aging") graphbandit::Aging();  // long: not part of "all"
  if (mode == "growth") {                     // long: not part of "all"
    graphbandit::GrowthCost(absl::GetFlag(FLAGS_growth_events), absl::GetFlag(FLAGS_growth_window),
                            absl::GetFlag(FLAGS_growth_dictionary));
  }
  return 0;
}
