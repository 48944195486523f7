#include "client/loadtest/load_driver.h"

#include <sys/resource.h>

#include <algorithm>
#include <thread>

#include "core/base/percentile.h"

namespace graphbandit::loadtest {

Clock::duration ToDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double ProcessCpuSeconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return NAN;
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

Clock::time_point OpenLoopSchedule::Due(int64_t i) const {
  return start_ + ToDuration(static_cast<double>(i) / rate_);
}

Clock::time_point OpenLoopSchedule::WaitFor(int64_t i) const {
  const Clock::time_point due = Due(i);
  std::this_thread::sleep_until(due);
  return due;
}

bool OpenLoopSchedule::Late(Clock::time_point due) {
  return Clock::now() - due > std::chrono::milliseconds(1);
}

LatencyStats SummariseLatencies(std::vector<double> values) {
  values.erase(std::remove_if(values.begin(), values.end(), [](double v) { return std::isnan(v); }),
               values.end());
  LatencyStats s;
  s.count = static_cast<int64_t>(values.size());
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.p50 = PercentileOfSorted(values, 0.50);
  s.p90 = PercentileOfSorted(values, 0.90);
  s.p99 = PercentileOfSorted(values, 0.99);
  s.p999 = PercentileOfSorted(values, 0.999);
  s.max = values.back();
  double sum = 0.0;
  for (const double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  return s;
}

}  // namespace graphbandit::loadtest
