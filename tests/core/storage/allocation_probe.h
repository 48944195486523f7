// Allocation probe for the storage tests: lets a test assert that decoding a hostile length
// field did not allocate anything near the declared size. allocation_probe.cc replaces the
// global operator new and delete of the test executable it is linked into (only counting while
// a probe is armed, so the rest of the binary is unaffected apart from the indirection).
#ifndef GRAPHBANDIT_TESTS_CORE_STORAGE_ALLOCATION_PROBE_H_
#define GRAPHBANDIT_TESTS_CORE_STORAGE_ALLOCATION_PROBE_H_

#include <atomic>
#include <cstddef>

namespace graphbandit::storage::log_test {

extern std::atomic<bool> g_probe_armed;
extern std::atomic<size_t> g_largest_allocation;

// Armed from construction to destruction; largest() is the largest allocation seen meanwhile.
class AllocationProbe {
 public:
  AllocationProbe() {
    g_largest_allocation.store(0);
    g_probe_armed.store(true);
  }
  ~AllocationProbe() { g_probe_armed.store(false); }
  size_t largest() const { return g_largest_allocation.load(); }
};

}  // namespace graphbandit::storage::log_test

#endif  // GRAPHBANDIT_TESTS_CORE_STORAGE_ALLOCATION_PROBE_H_
