// A test hook for the log's I/O: lets a test make the next writes, syncs or truncations of a
// model's log fail with an errno (ENOSPC, EIO) where a small filesystem cannot be mounted.
// Unset (the default, and always in production), it costs one relaxed atomic load per call.
#ifndef GRAPHBANDIT_CORE_STORAGE_FAULT_INJECTION_H_
#define GRAPHBANDIT_CORE_STORAGE_FAULT_INJECTION_H_

#include <functional>
#include <string>

namespace graphbandit::storage {

enum class LogIo { kWrite, kSync, kTruncate };

// `fault(io, path)` returns the errno the operation fails with, or 0 to let it run. Null
// removes the hook. Thread-safe; the hook may be called from any thread.
void SetLogFaultForTesting(std::function<int(LogIo io, const std::string& path)> fault);

// The errno the hook injects for this operation (0: none, or no hook).
int InjectedLogFault(LogIo io, const std::string& path);

}  // namespace graphbandit::storage

#endif  // GRAPHBANDIT_CORE_STORAGE_FAULT_INJECTION_H_
