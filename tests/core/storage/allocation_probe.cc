#include "tests/core/storage/allocation_probe.h"

#include <cstdlib>
#include <new>

namespace graphbandit::storage::log_test {

std::atomic<bool> g_probe_armed{false};
std::atomic<size_t> g_largest_allocation{0};

namespace {

void* ProbedAlloc(size_t n) {
  if (g_probe_armed.load(std::memory_order_relaxed)) {
    size_t prev = g_largest_allocation.load(std::memory_order_relaxed);
    while (n > prev && !g_largest_allocation.compare_exchange_weak(prev, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}

}  // namespace
}  // namespace graphbandit::storage::log_test

using graphbandit::storage::log_test::ProbedAlloc;

void* operator new(size_t n) { return ProbedAlloc(n); }
void* operator new[](size_t n) { return ProbedAlloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
