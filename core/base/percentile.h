// The one percentile definition of the project's reports: the load generator's latency
// percentiles (client/loadtest) and the benchmark's (bench/bench.cc).
//
// Nearest rank: the q-quantile of n values is the smallest value x such that at least a
// fraction q of the values are <= x, i.e. the ceil(q n)-th smallest (1-based), and the smallest
// value for q = 0. It is always one of the values (no interpolation), so a p99 of 100 samples is
// the 99th smallest and a p50 of 4 samples is the 2nd smallest. NaN for no values. The values
// must not hold NaN (drop them first).
#ifndef GRAPHBANDIT_CORE_BASE_PERCENTILE_H_
#define GRAPHBANDIT_CORE_BASE_PERCENTILE_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "absl/types/span.h"

namespace graphbandit {

// The 0-based index of the q-quantile (0 <= q <= 1, clamped) among n >= 1 sorted values.
inline size_t NearestRankIndex(size_t n, double q) {
  const double rank = std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(n));
  return std::min(n - 1, rank < 1.0 ? size_t{0} : static_cast<size_t>(rank) - 1);
}

// The q-quantile of values sorted in ascending order.
inline double PercentileOfSorted(absl::Span<const double> sorted, double q) {
  if (sorted.empty()) return NAN;
  return sorted[NearestRankIndex(sorted.size(), q)];
}

// The q-quantile of unsorted values, in O(n); reorders them (std::nth_element).
inline double Percentile(std::vector<double>* values, double q) {
  if (values->empty()) return NAN;
  const auto nth =
      values->begin() + static_cast<std::ptrdiff_t>(NearestRankIndex(values->size(), q));
  std::nth_element(values->begin(), nth, values->end());
  return *nth;
}

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_PERCENTILE_H_
