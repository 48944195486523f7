// graphbandit-loadgen's report: what a run measured, the roofline it is set against, and the
// report itself as text on stdout, as JSON (--report_json) and as CSV (--report_csv).
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_LOADGEN_REPORT_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_LOADGEN_REPORT_H_

#include <cmath>
#include <cstdint>
#include <map>
#include <string>

#include "client/loadtest/call_summary.h"

namespace graphbandit::loadtest {

// A run's settings and figures (client/loadgen.cc says how each is measured). CPU figures are
// seconds, NaN when unknown (no --metrics_url, or a page that could not be read).
struct LoadgenReport {
  // The settings (the flags of the same names).
  std::string mode;  // "closed" or "open"
  int concurrency = 0, channels = 0, slate_size = 0;
  double rate = 0, baseline_rate = 0, reward_ratio = 0, reward_delay_ms = 0;
  std::string features;  // "dense" or "named"
  int c = 0;             // candidates per SelectArm
  int d = 0;             // the kernel's input: dense values, or the model's hashed slots

  // The model: its name, policy and dictionary size m after the run and at the start of the
  // measured interval.
  std::string model, policy;
  int64_t m = 0, m_start = 0;

  Summary baseline, select, rewards;  // a baseline of no calls was skipped
  double baseline_server_cpu = NAN, baseline_own_cpu = NAN;
  std::map<std::string, int64_t> outcomes;  // reward outcomes, warm-up included
  int64_t accepted = 0, learned = 0;        // rewards ACCEPTED, and learned of them
  double learn_wait = 0;                    // seconds waited for the learning after the run
  double fresh_p99 = NAN, fresh_count = 0;  // the freshness histogram over the measured interval
  // Over the measured interval (and the rewards due after it): the server's CPU and ours; the
  // server's again through the wait for the learning.
  double server_cpu = NAN, own_cpu = NAN, server_cpu_learned = NAN;

  // The roofline (AddRoofline): F flops per request, the product rate P, the ceiling Q0 (0
  // without a closed-loop baseline) and R = 1 / (1/Q0 + F/P).
  double flops = 0, product = NAN, q0 = 0, roofline = NAN;

  // CPU per call, in seconds.
  double server_cpu_per_select() const { return Per(server_cpu, select.calls); }
  double own_cpu_per_select() const { return Per(own_cpu, select.calls); }
  double health_cpu_per_call() const { return Per(baseline_server_cpu, baseline.calls); }
  double learned_cpu_per_select() const { return Per(server_cpu_learned, select.calls); }
  // Server CPU per rewarded decision (through learning) over server CPU per health call: what
  // the model costs in units of a bare gRPC round trip. Defined against a health call in the
  // closed loop (the service-level target); an open-loop baseline's health call costs more, so
  // NaN then.
  double cpu_ratio() const;

 private:
  static double Per(double cpu, int64_t calls) {
    return calls > 0 ? cpu / static_cast<double>(calls) : NAN;
  }
};

// Eigen's (m x m)(m x C) product on this thread: flops per second.
double ProductRate(int m, int c);

// Fills the roofline's figures from c, d, m and the baseline; `measure` false (--roofline=false)
// or m = 0 leaves P and R unknown.
void AddRoofline(bool measure, LoadgenReport* report);

// The text report on stdout.
void PrintLoadgenReport(const LoadgenReport& report);

// The JSON report, one object on one line; `http` is the HTTP phase's object or null.
void WriteLoadgenJson(const std::string& path, const LoadgenReport& report,
                      const json::Value& http);

// The CSV report: a row per RPC (baseline, SelectArm, ReportReward) that was called.
void WriteLoadgenCsv(const std::string& path, const LoadgenReport& report);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_LOADGEN_REPORT_H_
