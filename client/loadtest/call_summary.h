// What graphbandit-loadgen measures of one RPC kind in one phase (the calls' latencies and
// status codes) and what it reports of them: throughput and nearest-rank latency percentiles,
// as a line of text or as a JSON object.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_CALL_SUMMARY_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_CALL_SUMMARY_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "proto/json.h"

namespace graphbandit::loadtest {

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

Summary Summarise(const std::string& rpc, Tally tally, double seconds);

// Seconds as milliseconds with three decimals.
std::string Ms(double seconds);

// One line (and one more per status code other than OK) on stdout.
void PrintSummary(const Summary& s);

// The summary as a JSON object (rpc, seconds, calls, errors, late_sends,
// throughput_per_second, latency_seconds {p50, p90, p99, p99_9, max, mean}, codes); a figure
// that is not defined (no calls) is null.
json::Value JsonSummary(const Summary& s);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_CALL_SUMMARY_H_
