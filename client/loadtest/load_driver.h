// What the three load drivers share: graphbandit-loadtest (an environment played against a
// server), graphbandit-loadgen (the performance load on a server) and graphbandit-bench (the
// engine in-process). All three report latencies with the same statistics (nearest-rank
// percentiles, core/base/percentile.h); the two that pace requests in an open loop
// (graphbandit-loadgen's open mode and baseline, graphbandit-bench's reward stream and aging
// callers) use the same schedule; graphbandit-loadgen and graphbandit-bench read the same
// process CPU clock. So their figures mean the same thing.
#ifndef GRAPHBANDIT_CLIENT_LOADTEST_LOAD_DRIVER_H_
#define GRAPHBANDIT_CLIENT_LOADTEST_LOAD_DRIVER_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace graphbandit::loadtest {

using Clock = std::chrono::steady_clock;

// Seconds as a clock duration, and a clock duration as seconds.
Clock::duration ToDuration(double seconds);
double Seconds(Clock::duration d);

// CPU time (user + system, every thread) this process has used so far, in seconds; NaN if the
// system does not say.
double ProcessCpuSeconds();

// Open loop: request i is due at start + i / rate, whatever happened to the ones before it, so
// a slow server does not slow the load (no coordinated omission). rate > 0.
class OpenLoopSchedule {
 public:
  OpenLoopSchedule(Clock::time_point start, double rate) : start_(start), rate_(rate) {}
  Clock::time_point Due(int64_t i) const;
  // Sleeps until request i is due and returns when it was due.
  Clock::time_point WaitFor(int64_t i) const;
  // A request sent now is late: more than a millisecond after it was due (the driver could not
  // keep up, and a latency counted from `due` includes the wait).
  static bool Late(Clock::time_point due);

 private:
  Clock::time_point start_;
  double rate_;
};

// The distribution of a phase's latencies, in the unit they were given in. Every figure is
// NaN when there are none; NaN values are dropped first.
struct LatencyStats {
  int64_t count = 0;
  double p50 = NAN, p90 = NAN, p99 = NAN, p999 = NAN, max = NAN, mean = NAN;
};
LatencyStats SummariseLatencies(std::vector<double> values);

}  // namespace graphbandit::loadtest

#endif  // GRAPHBANDIT_CLIENT_LOADTEST_LOAD_DRIVER_H_
