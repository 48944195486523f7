#include "client/loadtest/call_summary.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_format.h"
#include "client/loadtest/load_driver.h"

namespace graphbandit::loadtest {

Summary Summarise(const std::string& rpc, Tally tally, double seconds) {
  Summary s;
  s.rpc = rpc;
  s.seconds = seconds;
  s.calls = tally.calls();
  s.errors = tally.errors();
  s.late_sends = tally.late_sends;
  s.codes = tally.codes;
  const LatencyStats latency = SummariseLatencies(std::move(tally.latencies));
  s.throughput = seconds > 0 ? static_cast<double>(latency.count) / seconds : 0;
  s.p50 = latency.p50;
  s.p90 = latency.p90;
  s.p99 = latency.p99;
  s.p999 = latency.p999;
  s.max = latency.max;
  s.mean = latency.mean;
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
