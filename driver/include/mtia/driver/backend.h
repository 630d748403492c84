// How the driver reaches a device. Backends are chosen at run time by name: the in-process
// simulator ("inprocess", the default); others may register themselves the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mtia/driver/trace_channel.h"
#include "mtia/host/wait.h"
#include "mtia/isa/result.h"
#include "mtia/trace/level.h"

namespace mtia::driver {

// Options understood by every backend; a backend rejects what it cannot honour.
struct BackendOptions {
  std::string preset = "mtia-v2";      // chip preset name or path to a preset file
  std::vector<std::string> overrides;  // "key=value" preset overrides, applied in order
  // Backend "socket": the Unix-domain socket of a running device server (`mtia-emu serve`);
  // empty: the backend starts a server of its own, with the options above. Other backends
  // ignore it.
  std::string server;
  bool timing = true;         // false: functional only, simulated time stays 0
  trace::TraceOptions trace;  // the device's performance trace (docs/architecture.md, "Traces")
  // How host threads wait for completions and the device's thread for host requests
  // (host/wait.h); a backend without a thread of its own uses it for the host side only.
  host::WaitPolicy wait = host::WaitPolicy::kAuto;
  // How a simulating backend's PE grid uses the host (no effect on results or simulated
  // times). Unset: the backend's environment variables (MTIA_EMU_UNIT_THREADS,
  // MTIA_EMU_INLINE_WORK_NS, MTIA_EMU_LAZY_LOADS), else its defaults.
  std::optional<uint32_t> unit_threads;    // helper threads, 0..256
  std::optional<uint64_t> inline_work_ns;  // ns, 0..10^9
  std::optional<bool> lazy_loads;
  // The device sanitizer's checks (isa/sanitize.h SanitizeCheck bits; docs/sanitizer.md), 0 for
  // none. The driver switches them on through the device's registers and tells the device of
  // every allocation; a device that cannot run them fails the open (kUnsupported).
  uint64_t sanitize = 0;
};

// Every call that can fail answers with an isa::Result or isa::Status (isa/result.h); a backend
// never throws.
class Backend {
 public:
  virtual ~Backend() = default;

  // BAR0 registers (isa/registers.h). A read fails with the device's reason (kBadRegister),
  // or kDeviceLost once the device has stopped.
  virtual isa::Result<uint64_t> read_register(uint64_t offset) = 0;
  // Posted, in order; a write to a device that has stopped is dropped (and logged).
  virtual void write_register(uint64_t offset, uint64_t value) = 0;

  // The BAR memory window onto device memory. kDeviceAddressFault outside it.
  virtual isa::Status read_memory(uint64_t device_addr, void* dst, uint64_t bytes) = 0;
  virtual isa::Status write_memory(uint64_t device_addr, const void* src, uint64_t bytes) = 0;

  // The device-memory window as shared memory that another process may map (a device server
  // hands it to its client, as a PCIe BAR is mapped): `fd` (the backend's; it stays open while
  // the backend lives) holds `bytes` bytes of device memory from `device_addr` on.
  // kUnsupported for a backend that has no such window.
  struct SharedWindow {
    int fd = -1;
    uint64_t device_addr = 0;
    uint64_t bytes = 0;
  };
  virtual isa::Result<SharedWindow> shared_window() {
    return isa::reject(isa::ErrorCode::kUnsupported, "this backend shares no memory window");
  }
  // A window of its own onto DRAM range [device_addr, + bytes), page aligned: a file that shows
  // that range and nothing else (a device server gives each client its share this way, as a
  // PCIe virtual function's BAR shows only its part). Split windows before the device uses
  // their memory. kUnsupported for a backend that has no such windows.
  virtual isa::Result<SharedWindow> split_window(uint64_t /*device_addr*/, uint64_t /*bytes*/) {
    return isa::reject(isa::ErrorCode::kUnsupported, "this backend shares no memory window");
  }

  // Host memory that device DMA can reach once mapped: memory the backend shares with its
  // device (a device in another process reaches only memory shared with it). Page-aligned, at
  // least `bytes`, contents unspecified. kInvalidArgument for 0 bytes, kOutOfMemory when the
  // host has none left. Unmap it before free_host.
  virtual isa::Result<void*> alloc_host(uint64_t bytes) = 0;
  // kInvalidPointer when `ptr` is not a live pointer from alloc_host.
  virtual isa::Status free_host(void* ptr) = 0;

  // Makes [ptr, ptr + bytes) reachable by device DMA; returns its host bus address.
  // kInvalidArgument for a null, empty, wrapping or overlapping range. kUnsupported for memory
  // not from alloc_host on a backend that cannot reach arbitrary host memory (memory from
  // alloc_host always maps); the caller then copies through alloc_host memory instead.
  virtual isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) = 0;
  // map_host for the queues of one context (isa/access_scope.h): only they (and context 0, the
  // whole device) reach the range. A device server maps each client's memory in that client's
  // context. kUnsupported for context > 0 on a backend that keeps no contexts.
  virtual isa::Result<uint64_t> map_host_in_context(uint32_t context, void* ptr, uint64_t bytes) {
    if (context == 0) return map_host(ptr, bytes);
    return isa::reject(isa::ErrorCode::kUnsupported, "this backend keeps no host contexts");
  }
  // kInvalidPointer when `bus_addr` is not the start of a mapped range.
  virtual isa::Status unmap_host(uint64_t bus_addr) = 0;

  // Called from the backend's own thread on each interrupt; must not block.
  virtual void set_interrupt_handler(std::function<void(uint64_t queue_mask)> handler) = 0;
  // Called once if the device is lost (its simulator failed, its server died): nothing more
  // will complete. `why` names the cause. Called at once if the device is already lost. A
  // backend whose device cannot be lost never calls it.
  virtual void set_lost_handler(std::function<void(const std::string& why)> /*handler*/) {}

  // The device's simulated clock and trace (trace_channel.h): not part of a PCIe device, so
  // kept apart from the calls above. Lives as long as the backend.
  virtual TraceChannel& trace() = 0;
};

// Makes a backend, or says why not: kInvalidArgument for options it rejects (bad preset, bad
// override), kDeviceUnavailable when the device cannot be built or reached.
using BackendFactory = std::function<isa::Result<std::unique_ptr<Backend>>(const BackendOptions&)>;

// Registers a backend under `name` (a static registrar in the backend's library does this).
// kInvalidArgument for an empty name, no factory, or a name already taken.
isa::Status register_backend(const std::string& name, BackendFactory factory);
// Creates the named backend; kInvalidArgument naming the known ones if `name` is unknown.
isa::Result<std::unique_ptr<Backend>> create_backend(const std::string& name,
                                                     const BackendOptions& options);
std::vector<std::string> backend_names();

}  // namespace mtia::driver
