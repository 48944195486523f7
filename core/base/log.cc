#include "core/base/log.h"

#include <memory>
#include <utility>

#include "core/base/sync.h"

namespace graphbandit {
namespace {

using Sink = std::function<void(absl::string_view)>;

Mutex& SinkMutex() {
  static Mutex* mu = new Mutex;
  return *mu;
}

// Guarded by SinkMutex(); a copy is taken to call it without the lock.
std::shared_ptr<const Sink>& CurrentSink() {
  static auto* sink = new std::shared_ptr<const Sink>;
  return *sink;
}

}  // namespace

void SetLogSink(Sink sink) {
  auto next = sink ? std::make_shared<const Sink>(std::move(sink)) : nullptr;
  MutexLock lock(&SinkMutex());
  CurrentSink() = std::move(next);
}

void LogWarning(absl::string_view message) {
  std::shared_ptr<const Sink> sink;
  {
    MutexLock lock(&SinkMutex());
    sink = CurrentSink();
  }
  if (sink != nullptr) (*sink)(message);
}

}  // namespace graphbandit
