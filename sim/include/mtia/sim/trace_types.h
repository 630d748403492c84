// What the device's trace records and how much of it (docs/architecture.md, "Traces").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mtia::sim {

// Detail of the trace. Each level includes the one before.
enum class TraceLevel : uint8_t {
  kOff = 0,      // nothing is recorded
  kKernels = 1,  // packets, DMA jobs, kernel launches and their per-PE spans, host API calls,
                 // bandwidth and queue-depth counters, per-launch statistics
  kUnits = 2,    // plus every PE unit operation (DPE, SE, RE, MLU, local DMA)
};
const char* trace_level_name(TraceLevel level);  // "off", "kernels", "units"
// The inverse; nullopt for any other text.
std::optional<TraceLevel> parse_trace_level(std::string_view text);

struct TraceOptions {
  TraceLevel level = TraceLevel::kUnits;
  // Events kept at most. Unit operations stop at three quarters of it,
  // so the packets, DMA jobs, launches and host calls the summary needs keep the rest.
  uint64_t max_events = 1'000'000;
};

// A packet a host API call submitted.
struct HostPacket {
  uint32_t queue = 0;
  uint64_t seq = 0;        // the driver's sequence number (echoed by the completion record)
  uint64_t submit_ps = 0;  // host clock at the doorbell (see HostCall)
  std::string label;       // launches: the kernel's name; otherwise what the packet does
};

// One host API call, recorded by the host API when the call returns.
//
// Host clock: a host thread cannot see simulated time advance except through completions it
// waits for, so its calls are stamped with the latest simulated time that thread has observed
// (the end time of every packet it waited for; 0 at first). That places the call no later than
// the device work it causes, and is the same on every run.
struct HostCall {
  uint32_t thread = 0;       // host thread number: 1 for the first thread that made a call
  uint64_t order = 0;        // calls are numbered as they start (orders calls at equal times)
  std::string name;          // the API function, e.g. "launch", "copy_async", "synchronize"
  std::string detail;        // e.g. "matmul on 8x8 PEs", "host to device, 4096 bytes"
  uint64_t start_ps = 0;     // host clock at entry
  uint64_t end_ps = 0;       // host clock at return (later if the call waited for the device)
  double wall_start_us = 0;  // host wall clock since the device opened (varies run to run)
  double wall_us = 0;        // host wall time the call took (varies run to run)
  std::string error;         // what the call threw, if it threw
  std::vector<HostPacket> packets;
};

}  // namespace mtia::sim
