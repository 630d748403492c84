// How much a device's performance trace records (docs/architecture.md, "Traces"). The one
// definition: the simulator records at this level, the driver carries it to a backend and the
// host API re-exports it as mtia::TraceLevel.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace mtia::trace {

// Detail of the trace. Each level includes the one before.
enum class TraceLevel : uint8_t {
  kOff = 0,      // nothing is recorded
  kKernels = 1,  // host API calls, packets, DMA jobs, kernel launches and their per-PE spans,
                 // bandwidth and queue-depth counters, per-launch statistics
  kUnits = 2,    // plus every PE unit operation: DPE, SE, RE, MLU and local DMA
};
const char* trace_level_name(TraceLevel level);  // "off", "kernels", "units"
// The inverse; nullopt for any other text.
std::optional<TraceLevel> parse_trace_level(std::string_view text);

inline constexpr uint64_t kDefaultTraceMaxEvents = 1'000'000;

struct TraceOptions {
  TraceLevel level = TraceLevel::kUnits;
  // Events kept at most (host calls and their packets included). Unit operations stop at three
  // quarters of it, so the packets, DMA jobs, launches and host calls the summary needs keep
  // the rest; whatever is dropped is counted.
  uint64_t max_events = kDefaultTraceMaxEvents;
};

}  // namespace mtia::trace
