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

std::string JsonNumber(double x) { return std::isfinite(x) ? absl::StrFormat("%.9g", x) : "null"; }

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
  const auto num = JsonNumber;
  return absl::StrFormat(
      "{\"rpc\": \"%s\", \"seconds\": %s, \"calls\": %d, \"errors\": %d, \"late_sends\": %d, "
      "\"throughput_per_second\": %s, \"latency_seconds\": {\"p50\": %s, \"p90\": %s, \"p99\": %s, "
      "\"p99_9\": %s, \"max\": %s, \"mean\": %s}, \"codes\": {%s}}",
      s.rpc, num(s.seconds), s.calls, s.errors, s.late_sends, num(s.throughput), num(s.p50),
      num(s.p90), num(s.p99), num(s.p999), num(s.max), num(s.mean), codes);
}

}  // namespace graphbandit::loadtest
