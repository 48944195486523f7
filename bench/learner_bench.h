// graphbandit-bench's benchmarks of one learner, outside the engine (bench/bench.cc runs them):
// what a hyper-parameter fit and the rebuild with its values cost (--mode=refit), and what
// dictionary growth costs the writer per reward, whole pass against spread scan
// (--mode=growth). Each prints a table on stdout.
#ifndef GRAPHBANDIT_BENCH_LEARNER_BENCH_H_
#define GRAPHBANDIT_BENCH_LEARNER_BENCH_H_

#include <cstdint>
#include <string>

namespace graphbandit {

// A row per entry of `refit_history` (comma-separated observation counts, each >= 2; a bad
// entry exits with status 2): the fit's time, evaluations and memory, the rebuild's time, and
// whether the server would apply the fit.
void RefitCost(const std::string& refit_history);

// Both growth schemes learn `events` rewards with the dictionary capped at `dictionary`; a row
// per `window` rewards. Each must be >= 1 (else exits with status 2).
void GrowthCost(int64_t events, int64_t window, int dictionary);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_BENCH_LEARNER_BENCH_H_
