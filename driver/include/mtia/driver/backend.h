// How the driver reaches a device. Backends are chosen at run time by name: the in-process
// simulator ("inprocess", the default); others may register themselves the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mtia/isa/wait.h"

namespace mtia::driver {

// The device's performance trace (docs/architecture.md, "Traces"): how much it records.
enum class TraceLevel : uint8_t {
  kOff = 0,      // nothing
  kKernels = 1,  // packets, DMA jobs, launches, per-PE kernel spans, host calls, counters
  kUnits = 2,    // plus every PE unit operation
};
struct TraceOptions {
  TraceLevel level = TraceLevel::kUnits;
  uint64_t max_events = 1'000'000;  // events kept at most (the rest are counted as dropped)
};

// A host API call for the device's trace: the host API records it when the call returns.
// Times are the calling thread's host clock in simulated picoseconds (the latest simulated
// time that thread has observed through completions it waited for).
struct HostTracePacket {
  uint32_t queue = 0;
  uint64_t seq = 0;        // as submit() returned it
  uint64_t submit_ps = 0;  // host clock at the doorbell
  std::string label;       // launches: the kernel's name (names the launch in the trace)
};
struct HostTraceCall {
  uint32_t thread = 0;  // host thread number, 1 for the first thread that made a call
  uint64_t order = 0;   // calls are numbered as they start (orders calls at equal times)
  std::string name;     // API function
  std::string detail;   // its arguments, for people
  uint64_t start_ps = 0;
  uint64_t end_ps = 0;
  double wall_start_us = 0;  // host wall clock since the device opened
  double wall_us = 0;        // host wall time of the call
  std::string error;         // what it threw, if anything
  std::vector<HostTracePacket> packets;
};

// Options understood by every backend; a backend rejects what it cannot honour.
struct BackendOptions {
  std::string preset = "mtia-v2";      // chip preset name or path to a preset file
  std::vector<std::string> overrides;  // "key=value" preset overrides, applied in order
  bool timing = true;                  // false: functional only, simulated time stays 0
  TraceOptions trace;
  // How host threads wait for completions and the device's thread for host requests
  // (isa/wait.h); a backend without a thread of its own uses it for the host side only.
  isa::WaitPolicy wait = isa::WaitPolicy::kAuto;
  // How a simulating backend's PE grid uses the host (no effect on results or simulated
  // times). Unset: the backend's environment variables (MTIA_EMU_UNIT_THREADS,
  // MTIA_EMU_INLINE_WORK_NS, MTIA_EMU_LAZY_LOADS), else its defaults.
  std::optional<uint32_t> unit_threads;    // helper threads, 0..256
  std::optional<uint64_t> inline_work_ns;  // ns, 0..10^9
  std::optional<bool> lazy_loads;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // BAR0 registers (isa/registers.h). Errors throw std::runtime_error with the reason.
  virtual uint64_t read_register(uint64_t offset) = 0;
  virtual void write_register(uint64_t offset, uint64_t value) = 0;  // posted, in order

  // The BAR memory window onto device memory. Throws std::out_of_range outside it.
  virtual void read_memory(uint64_t device_addr, void* dst, uint64_t bytes) = 0;
  virtual void write_memory(uint64_t device_addr, const void* src, uint64_t bytes) = 0;

  // Makes [ptr, ptr + bytes) reachable by device DMA; returns its host bus address.
  virtual uint64_t map_host(void* ptr, uint64_t bytes) = 0;
  virtual void unmap_host(uint64_t bus_addr) = 0;

  // Called from the backend's own thread on each interrupt; must not block.
  virtual void set_interrupt_handler(std::function<void(uint64_t queue_mask)> handler) = 0;
  // Called once if the device is lost (its simulator failed, its server died): nothing more
  // will complete. `why` names the cause. Called at once if the device is already lost. A
  // backend whose device cannot be lost never calls it.
  virtual void set_lost_handler(std::function<void(const std::string& why)> /*handler*/) {}

  // Simulated time now, picoseconds (for placing host events on the device timeline).
  virtual uint64_t now_ps() = 0;
  // Writes the device's trace, statistics and effective configuration into `dir`.
  virtual void write_artifacts(const std::string& dir) = 0;
  // The effective device configuration as JSON text.
  virtual std::string config_json() = 0;
  // Changes what the trace records from now on. A backend without a trace ignores it.
  virtual void set_trace_level(TraceLevel /*level*/) {}
  // Adds a host API call to the device's trace (any thread; ignored when tracing is off).
  virtual void trace_host_call(const HostTraceCall& /*call*/) {}
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;

// Registers a backend under `name` (a static registrar in the backend's library does this).
void register_backend(const std::string& name, BackendFactory factory);
// Creates the named backend; throws std::invalid_argument naming the known ones if unknown.
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options);
std::vector<std::string> backend_names();

}  // namespace mtia::driver
