#include "core/storage/fault_injection.h"

#include <atomic>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"

namespace graphbandit::storage {
namespace {

std::atomic<bool> g_has_fault{false};
absl::Mutex g_mu;
std::function<int(LogIo, const std::string&)>* g_fault ABSL_GUARDED_BY(g_mu) = nullptr;

}  // namespace

void SetLogFaultForTesting(std::function<int(LogIo io, const std::string& path)> fault) {
  absl::MutexLock lock(&g_mu);
  delete g_fault;
  g_fault = fault ? new std::function<int(LogIo, const std::string&)>(std::move(fault)) : nullptr;
  g_has_fault.store(g_fault != nullptr, std::memory_order_relaxed);
}

int InjectedLogFault(LogIo io, const std::string& path) {
  if (!g_has_fault.load(std::memory_order_relaxed)) return 0;
  absl::MutexLock lock(&g_mu);
  return g_fault != nullptr ? (*g_fault)(io, path) : 0;
}

}  // namespace graphbandit::storage
