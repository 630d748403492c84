// The emulated device: a SystemC model running on its own host thread.
//
// Thread contract (docs/architecture.md, "simulated time"): the simulator thread owns every
// SystemC object. Host threads reach it only through the members below, which are safe to
// call concurrently; register accesses travel through a primitive channel
// (async_request_update) and the thread sleeps when the device has no work.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mtia/host/wait.h"
#include "mtia/isa/result.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/host_memory.h"
#include "mtia/trace/host_call.h"
#include "mtia/trace/level.h"

namespace mtia::sim {

// Called on the simulator thread when the firmware raises the host interrupt. It must not
// block and must not call back into Device except read_memory / write_memory.
using InterruptHandler = std::function<void(uint64_t queue_mask)>;
// Called once if the simulator stops on a failure (an exception or SystemC error escaped a
// model process): the device is lost, nothing more will complete. `why` names the cause.
// Runs on the simulator thread as it ends, or at once in set_lost_handler() if it already has.
using LostHandler = std::function<void(const std::string& why)>;

class Device {
 public:
  // Builds the model for `config` and starts the simulator thread. Only one Device may exist
  // per process at a time (SystemC has one global simulation context): opening a second one
  // fails with kDeviceUnavailable, as does a model that cannot be built (SystemC's error, or
  // host address space refused). `trace` sets what the trace records (docs/architecture.md,
  // "Traces"); `wait` how the simulator thread waits for host requests and host threads for
  // its answers (isa/wait.h); `grid` how the PE grid uses the host (grid_options.h: unset
  // fields come from the environment, else the defaults). A config that does not validate or
  // a grid option out of range fails with kInvalidArgument.
  static isa::Result<std::unique_ptr<Device>> open(const ChipConfig& config,
                                                   HostMemory& host_memory,
                                                   InterruptHandler on_interrupt,
                                                   trace::TraceOptions trace = {},
                                                   host::WaitPolicy wait = host::WaitPolicy::kAuto,
                                                   const PeGridHostOptions& grid = {});
  ~Device();  // stops the simulator thread and releases device memory
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // BAR0 register access. Writes are posted (they return once queued, in order); reads wait
  // for the simulator thread to answer.
  void write_register(uint64_t offset, uint64_t value);
  isa::Result<uint64_t> read_register(uint64_t offset);

  // Direct access to device memory (DRAM, SRAM, local stores) through the BAR memory window.
  // A range that is not device memory fails with kDeviceAddressFault. Callers order these
  // with doorbells.
  isa::Status read_memory(uint64_t addr, void* dst, uint64_t bytes);
  isa::Status write_memory(uint64_t addr, const void* src, uint64_t bytes);

  // DRAM as a memfd that another process may map MAP_SHARED (the BAR memory window a device
  // server shares with its client): byte 0 of the file is `device_addr`. The fd is the
  // device's; dup it to keep it past the Device.
  struct MemoryWindow {
    int fd = -1;
    uint64_t device_addr = 0;
    uint64_t bytes = 0;
  };
  MemoryWindow dram_window() const;
  // DRAM range [device_addr, + bytes) as a memory file of its own (DeviceMemory::split_dram):
  // one client's window on a shared device, which shows it nothing else. Call before the device
  // uses the range. kInvalidArgument for a range that is not page-aligned DRAM or overlaps an
  // earlier one.
  isa::Result<MemoryWindow> split_dram_window(uint64_t device_addr, uint64_t bytes);

  // Sets (or, with an empty function, clears) the handler told when the device is lost.
  void set_lost_handler(LostHandler handler);
  // Why the simulator stopped on a failure, or "" while it runs (or after a normal stop).
  std::string lost_reason() const;

  // Simulated time of the most recent event the simulator processed, picoseconds.
  uint64_t now_ps() const;

  const ChipConfig& config() const;

  // Writes trace.json (Chrome trace events), summary.json (the run summary, computed from the
  // recorded events), stats.json and config.json into `dir` (created if missing). Waits for
  // the simulator thread to snapshot its state. Fails with kInvalidArgument naming a file
  // that cannot be written, kDeviceLost once the simulator has stopped.
  isa::Status write_artifacts(const std::string& dir);
  // Changes the trace's detail from now on (waits for the simulator thread).
  isa::Status set_trace_level(trace::TraceLevel level);
  trace::TraceLevel trace_level() const;
  // Adds a host API call to the trace (any thread; dropped when tracing is off).
  void trace_host_call(trace::HostCall call);
  // The statistics of every module as JSON text (units and descriptions included).
  isa::Result<std::string> stats_json();

 private:
  Device() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mtia::sim
