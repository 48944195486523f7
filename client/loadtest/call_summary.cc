#include "client/loadtest/call_summary.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/percentile.h"

namespace graphbandit::loadtest {

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

json::Value JsonSummary(const Summary& s) {
  json::Value codes = json::Object({});
  for (const auto& [code, n] : s.codes) json::Set(&codes, code, json::Integer(n));
  return json::Object({
      {"rpc", json::Text(s.rpc)},
      {"seconds", json::Number(s.seconds)},
      {"calls", json::Integer(s.calls)},
      {"errors", json::Integer(s.errors)},
      {"late_sends", json::Integer(s.late_sends)},
      {"throughput_per_second", json::Number(s.throughput)},
      {"latency_seconds", json::Object({{"p50", json::Number(s.p50)},
                                        {"p90", json::Number(s.p90)},
                                        {"p99", json::Number(s.p99)},
                                        {"p99_9", json::Number(s.p999)},
                                        {"max", json::Number(s.max)},
                                        {"mean", json::Number(s.mean)}})},
      {"codes", std::move(codes)},
  });
}

}  // namespace graphbandit::loadtest
