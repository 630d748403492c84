// The userspace driver's device: memory allocator, hardware queues and completions.
//
// Thread-safe: any number of host threads may allocate, submit and wait at once. Completions
// arrive by interrupt on the backend's thread, which wakes the waiting host threads; nothing
// here busy-waits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mtia/driver/allocator.h"
#include "mtia/driver/backend.h"
#include "mtia/isa/decode.h"

namespace mtia::driver {

// Properties read from the device's identity registers.
struct DeviceInfo {
  std::string preset_name;
  uint32_t generation = 0;
  uint64_t firmware_version = 0;
  uint32_t num_queues = 0;
  uint64_t dram_bytes = 0;
  uint64_t sram_bytes = 0;
  uint64_t local_store_bytes = 0;
  uint32_t pe_rows = 0;
  uint32_t pe_cols = 0;
  uint64_t clock_hz = 0;
  uint32_t dma_engines = 0;
};

// What became of one submitted packet.
struct Completion {
  uint64_t seq = 0;
  uint64_t start_ps = 0;  // simulated time the device started it
  uint64_t end_ps = 0;    // simulated time the device finished it
  bool ok = true;
  bool aborted = false;   // never ran: an earlier packet on its queue failed
  isa::ErrorCode error = isa::ErrorCode::kNone;
  uint64_t error_arg0 = 0;
  uint64_t error_arg1 = 0;
  std::string message;    // for people: what failed, where, and why (empty when ok)
};

using CompletionCallback = std::function<void(const Completion&)>;

class Device {
 public:
  // Opens a device through the named backend ("inprocess" by default). Throws
  // std::runtime_error if the backend cannot be created or the device does not answer.
  static std::unique_ptr<Device> open(const std::string& backend_name,
                                      const BackendOptions& options);
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  virtual Backend& backend() = 0;

  // Device DRAM available to users (the driver keeps a small region for its rings).
  virtual Allocator& allocator() = 0;

  // Host memory the device may DMA. map_host returns the bus address to put in packets.
  virtual uint64_t map_host(void* ptr, uint64_t bytes) = 0;
  virtual void unmap_host(uint64_t bus_addr) = 0;

  virtual uint32_t num_queues() const = 0;

  // Appends a packet to hardware queue `queue` and rings its doorbell. The header's seq and
  // flags are set by the driver. Returns the packet's sequence number (per queue, starting
  // at 1, strictly increasing). Blocks while the ring is full. `on_complete`, if given, runs
  // on the backend's thread once the packet completes, fails or is aborted; it must not block.
  virtual uint64_t submit(uint32_t queue, const isa::Packet& packet,
                          CompletionCallback on_complete = {}) = 0;

  // Blocks until packet `seq` of `queue` has completed, failed or been aborted.
  virtual Completion wait(uint32_t queue, uint64_t seq) = 0;
  // True once packet `seq` of `queue` is no longer pending.
  virtual bool is_done(uint32_t queue, uint64_t seq) = 0;
  // Sequence number of the most recent submission to `queue` (0 if none).
  virtual uint64_t last_submitted(uint32_t queue) = 0;
};

}  // namespace mtia::driver
