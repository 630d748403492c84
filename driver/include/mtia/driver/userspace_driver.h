// The userspace driver's device: memory allocator, hardware queues and completions.
//
// Thread-safe: any number of host threads may allocate, submit and wait at once. Completions
// arrive by interrupt on the backend's thread, which wakes the waiting host threads. A waiting
// thread first spins or yields for a bounded time as BackendOptions::wait says (host/wait.h),
// then sleeps.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  uint32_t num_queues = 0;  // the queues this driver may use (a client's share on a served device)
  // The DRAM this driver may use, [dram_base, dram_base + dram_bytes): all of the chip's, or a
  // client's window on a shared device.
  uint64_t dram_base = 0;
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
  bool aborted = false;  // never ran: an earlier packet on its queue failed
  bool lost = false;     // never completed: the device was lost (Device::lost_reason())
  isa::ErrorCode error = isa::ErrorCode::kNone;
  uint64_t error_arg0 = 0;
  uint64_t error_arg1 = 0;
  std::string message;  // for people: what failed, where, and why (empty when ok)
  // The device's own account of a failure, from the queue's error record
  // (isa/error_record.h); `message` includes it. For a kernel fault it names the PE (index,
  // row, column), the pc and the fault. Empty when the device gave no reason.
  std::string reason;
  // A kernel that exited with a non-zero status (error kKernelFault): that status, whose
  // meaning for the kernel library is isa::kernel_status_name().
  std::optional<int64_t> exit_status;
};

using CompletionCallback = std::function<void(const Completion&)>;

class Device {
 public:
  // Opens a device through the named backend ("inprocess" by default). Fails with
  // kInvalidArgument for an unknown backend name or options the backend rejects (bad preset,
  // bad override), kDeviceUnavailable if the device cannot be built or does not answer as an
  // MTIA device of this release should. Destroy the Device only after every wait() has
  // returned; packets still in flight then are completed as aborted (their callbacks run)
  // during destruction.
  static isa::Result<std::unique_ptr<Device>> open(const std::string& backend_name,
                                                   const BackendOptions& options);
  virtual ~Device() = default;

  virtual const DeviceInfo& info() const = 0;
  // The device's simulated clock and trace (trace_channel.h), as its backend offers them.
  virtual TraceChannel& trace() = 0;

  // Device DRAM available to users (the driver keeps a small region for its rings).
  virtual Allocator& allocator() = 0;

  // The BAR memory window onto device memory: how the host API loads kernel images, argument
  // blocks, command buffers and fence slabs. Unordered with queued packets: write only memory
  // no packet in flight touches. 0 bytes does nothing. kInvalidArgument for a null buffer
  // with bytes > 0 or a range that runs past the end of the address space;
  // kDeviceAddressFault outside device memory; kDeviceLost, naming the cause, once the device
  // is lost.
  virtual isa::Status read_memory(uint64_t addr, void* dst, uint64_t bytes) = 0;
  virtual isa::Status write_memory(uint64_t addr, const void* src, uint64_t bytes) = 0;

  // Host memory the device can reach once mapped, from the backend (Backend::alloc_host):
  // page-aligned, contents unspecified. kInvalidArgument for 0 bytes, kOutOfMemory; free_host:
  // kInvalidPointer for a pointer alloc_host did not return.
  virtual isa::Result<void*> alloc_host(uint64_t bytes) = 0;
  virtual isa::Status free_host(void* ptr) = 0;

  // Host memory the device may DMA. map_host returns the bus address to put in packets. It
  // may fail with kUnsupported for memory not from alloc_host (Backend::map_host).
  virtual isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) = 0;
  virtual isa::Status unmap_host(uint64_t bus_addr) = 0;

  virtual uint32_t num_queues() const = 0;

  // Appends a packet to hardware queue `queue` and rings its doorbell. The driver sets the
  // header's opcode (from the packet's type), version, seq and the kPacketInterrupt flag; other
  // header fields are sent as given. kInvalidArgument for a queue that does not exist,
  // kDeviceLost once the device is lost.
  // Returns the packet's sequence number (per queue, starting at 1, strictly increasing). Blocks
  // while the ring is full. `on_complete`, if given, runs on the backend's thread once the packet
  // completes, fails or is aborted, in seq order per queue; it must not block, so it must not
  // call submit() or wait() (both can wait for that very thread). A failed packet halts its
  // queue: the driver completes every later packet already on it as aborted, resets the queue,
  // and later submissions run normally.
  virtual isa::Result<uint64_t> submit(uint32_t queue, const isa::Packet& packet,
                                       CompletionCallback on_complete = {}) = 0;

  // Blocks until packet `seq` of `queue` has completed, failed or been aborted; its callback
  // has run by then. Full details (times, errors) are kept for the last 4096 completions and
  // the last 4096 failures of each queue; an older successful packet yields ok with zero times
  // (use the callback to keep details of your own). kInvalidArgument for a queue that does not
  // exist or a seq never submitted to it.
  virtual isa::Result<Completion> wait(uint32_t queue, uint64_t seq) = 0;
  // Why the device was lost (its backend said so), or "" while it works. Once lost, every
  // packet in flight completes as failed with `lost` set, waits return at once, and submit()
  // fails with kDeviceLost naming the cause; close the Device and open a new one.
  virtual std::string lost_reason() const = 0;
  // True once packet `seq` of `queue` is no longer pending (and its callback has run).
  // kInvalidArgument as for wait().
  virtual isa::Result<bool> is_done(uint32_t queue, uint64_t seq) = 0;
  // Sequence number of the most recent submission to `queue` (0 if none).
  virtual isa::Result<uint64_t> last_submitted(uint32_t queue) = 0;
};

}  // namespace mtia::driver
