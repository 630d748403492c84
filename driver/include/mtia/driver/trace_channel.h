// The device's trace and simulated clock, as a channel of its own beside the Backend: what a
// PCIe device offers (registers, doorbells, memory windows, interrupts) stays in Backend, and
// what only an emulated device has (a simulated clock, a trace, its configuration) comes here.
#pragma once

#include <cstdint>
#include <string>

#include "mtia/isa/result.h"
#include "mtia/trace/host_call.h"
#include "mtia/trace/level.h"

namespace mtia::driver {

// Every call that can fail answers with an isa::Result or isa::Status; a channel never throws.
// Thread-safe: any host thread may call any method.
class TraceChannel {
 public:
  virtual ~TraceChannel() = default;

  // Simulated time now, picoseconds (for placing host events on the device timeline).
  virtual uint64_t now_ps() = 0;
  // Writes the device's trace (trace.json), run summary (summary.json), statistics
  // (stats.json) and effective configuration (config.json) into `dir`.
  virtual isa::Status write_artifacts(const std::string& dir) = 0;
  // The effective device configuration as JSON text.
  virtual std::string config_json() = 0;
  // Changes what the trace records from now on. A channel without a trace ignores it.
  virtual isa::Status set_trace_level(trace::TraceLevel /*level*/) { return {}; }
  // Adds a host API call to the device's trace (any thread; ignored when tracing is off). The
  // record is the host API's, handed on as it is.
  virtual void trace_host_call(trace::HostCall /*call*/) {}
};

}  // namespace mtia::driver
