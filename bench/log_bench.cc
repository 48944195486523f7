// graphbandit-logbench: what making a record durable costs a writer, on the local log against a
// NATS JetStream stream of three replicas (cluster mode's log), with the same payloads
// and the same number of concurrent writers, measured in one run. Prints, per writer count and
// per log: appends per second, and the latency of one append until it is durable (local: the
// write and an fdatasync that concurrent writers share, as a reward waits for it; JetStream: the
// publish until a majority of the replicas stored it).
//
//   graphbandit-logbench --nats_servers=nats://127.0.0.1:4222,nats://127.0.0.1:4223,...
//       [--writers=1,4,16] [--appends=4000] [--payload_bytes=200] [--dir=/var/tmp]
//
// Without --nats_servers only the local log is measured. The stream (GB_logbench) is made with
// 3 replicas if missing; each run appends records with fresh ids, so runs can repeat.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/sync.h"
#include "core/model/operation_log.h"
#include "server/cluster/jetstream_log.h"

ABSL_FLAG(std::string, nats_servers, "",
          "Comma-separated NATS URLs of a JetStream cluster; empty: the local log only.");
ABSL_FLAG(std::string, writers, "1,4,16", "Concurrent writers, one run each.");
ABSL_FLAG(int32_t, appends, 4000, "Appends per run (split over the writers).");
ABSL_FLAG(int32_t, payload_bytes, 200, "Bytes per record (a reward record is about 100-300).");
ABSL_FLAG(std::string, dir, "/var/tmp",
          "Directory for the local log's segment (on the disk the server's state would use).");

namespace graphbandit {
namespace {

struct Figures {
  double per_second = 0.0;
  double p50_ms = 0.0, p99_ms = 0.0, max_ms = 0.0;
  int failures = 0;
};

// Runs `writers` threads that together make `appends` calls of `append` (which returns false on
// failure) and measures each call.
template <typename Append>
Figures Measure(int writers, int appends, Append append) {
  std::vector<std::vector<double>> latencies(writers);
  std::atomic<int> failures{0};
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      const int count = appends / writers + (w < appends % writers ? 1 : 0);
      latencies[w].reserve(count);
      for (int i = 0; i < count; ++i) {
        const absl::Time t0 = absl::Now();
        if (!append(w, i)) ++failures;
        latencies[w].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Figures f;
  f.failures = failures.load();
  if (all.empty()) return f;
  f.per_second = static_cast<double>(all.size()) / seconds;
  f.p50_ms = all[all.size() / 2];
  f.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  f.max_ms = all.back();
  return f;
}

void Print(const char* log, int writers, const Figures& f) {
  std::printf("%-22s %7d %12.0f %9.3f %9.3f %9.3f %8d\n", log, writers, f.per_second, f.p50_ms,
              f.p99_ms, f.max_ms, f.failures);
  std::fflush(stdout);
}

// The local log as the model drives it: appends in sequence order under one lock, then each
// writer waits until its record is durable (fdatasync per record, shared).
Figures LocalLog(int writers, int appends, const std::string& payload, const std::string& dir) {
  Mutex mu;
  uint64_t last = 0;
  OperationLog log("logbench", Durability{});
  const std::string path = absl::StrCat(dir, "/graphbandit-logbench-", ::getpid(), ".log");
  if (absl::Status s = log.StartSegment(path, 0); !s.ok()) {
    std::fprintf(stderr, "local log: %s\n", std::string(s.message()).c_str());
    return Figures{};
  }
  log.StartThreads();
  Figures f = Measure(writers, appends, [&](int, int) {
    uint64_t seq = 0;
    {
      MutexLock lock(&mu);
      if (!log.Append(1, payload).ok()) return false;
      seq = ++last;
    }
    return log.WaitDurable(seq, absl::InfiniteFuture()).ok();
  });
  {
    MutexLock lock(&mu);
    log.Close(last);
  }
  log.StopThreads();
  std::filesystem::remove(path);
  return f;
}

Figures JetStream(cluster::JetStreamLog& log, int writers, int appends, const std::string& payload,
                  const std::string& run) {
  return Measure(writers, appends, [&](int w, int i) {
    return log.Append(payload, absl::StrCat(run, "/", w, "/", i)).ok();
  });
}

int Main() {
  std::vector<int> writer_counts;
  for (absl::string_view w : absl::StrSplit(absl::GetFlag(FLAGS_writers), ',')) {
    int n = 0;
    if (!absl::SimpleAtoi(w, &n) || n < 1) {
      std::fprintf(stderr, "--writers: not a positive count: %s\n", std::string(w).c_str());
      return 2;
    }
    writer_counts.push_back(n);
  }
  const int appends = absl::GetFlag(FLAGS_appends);
  const int payload_bytes = absl::GetFlag(FLAGS_payload_bytes);
  if (appends < 1 || payload_bytes < 1) {
    std::fprintf(stderr, "--appends and --payload_bytes must be positive\n");
    return 2;
  }
  std::string payload(static_cast<size_t>(payload_bytes), '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 131 + 7);

  std::unique_ptr<cluster::JetStreamLog> stream;
  const std::string servers = absl::GetFlag(FLAGS_nats_servers);
  if (!servers.empty()) {
    cluster::JetStreamLog::Options options;
    options.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
    options.stream = "GB_logbench";
    options.subject = "graphbandit.logbench.ops";
    options.replicas = 3;
    auto opened = cluster::JetStreamLog::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "JetStream: %s\n", opened.status().ToString().c_str());
      return 1;
    }
    stream = *std::move(opened);
  }
  std::printf("graphbandit-logbench: %d appends of %d bytes per run; local log in %s%s\n", appends,
              payload_bytes, absl::GetFlag(FLAGS_dir).c_str(),
              stream ? "; JetStream stream GB_logbench, 3 replicas" : "; no JetStream");
  std::printf("%-22s %7s %12s %9s %9s %9s %8s\n", "log", "writers", "appends/s", "p50 ms", "p99 ms",
              "max ms", "failed");
  const std::string run = absl::StrFormat("%d-%d", ::getpid(), absl::ToUnixMillis(absl::Now()));
  for (int writers : writer_counts) {
    Print("local, fdatasync", writers,
          LocalLog(writers, appends, payload, absl::GetFlag(FLAGS_dir)));
    if (stream) {
      Print("JetStream, R3", writers,
            JetStream(*stream, writers, appends, payload, absl::StrCat(run, "/", writers)));
    }
  }
  return 0;
}

}  // namespace
}  // namespace graphbandit

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return graphbandit::Main();
}
