// Where core's warnings go. Core never writes to stderr or a file itself: the program that
// embeds it (the server, the benchmark, the simulator) installs a sink at start. The default
// sink drops every message, so a library user or a test that installs none sees nothing.
#ifndef GRAPHBANDIT_CORE_BASE_LOG_H_
#define GRAPHBANDIT_CORE_BASE_LOG_H_

#include <functional>

#include "absl/strings/string_view.h"

namespace graphbandit {

// Replaces the process-wide sink (null restores the default, which drops messages). The sink
// may be called from any thread, concurrently; it receives one message without a newline.
// Thread-safe; a message being delivered while the sink is replaced goes to either sink.
void SetLogSink(std::function<void(absl::string_view)> sink);

// A condition an operator should hear about that does not fail the call at hand (an operation
// that could not be applied, a failed snapshot or fit, a log that stopped being durable).
void LogWarning(absl::string_view message);

}  // namespace graphbandit

#endif  // GRAPHBANDIT_CORE_BASE_LOG_H_
