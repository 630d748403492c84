// What a device is: read from the device's identity registers when it is opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mtia/host/wait.h"
#include "mtia/trace.h"

namespace mtia {

// How a host thread waits for the device (synchronize, synchronous copies, event waits) and
// the simulator thread for the host: auto, spin, yield or block, like CUDA's scheduling
// flags. Each spins and/or yields for a bounded time, then blocks; see mtia/host/wait.h.
using WaitPolicy = host::WaitPolicy;
using host::parse_wait_policy;
using host::wait_policy_name;

// How to open a device.
struct DeviceOptions {
  // Where the device runs: "inprocess" (the simulator on a thread of this process), "socket"
  // (a device server, `mtia-emu serve`, in its own process), or "" to choose from the
  // environment: $MTIA_EMU_SERVER (server socket paths, comma-separated, device i on the i-th),
  // else $MTIA_EMU_DEVICES=N (N servers this process starts itself), else "inprocess".
  std::string backend;
  // Backend "socket": the server's socket path; empty: start a server of its own for this
  // device (it exits when the device is closed or this process ends).
  std::string server;
  // Which of the environment's devices to open (0-based; device_count() of them).
  uint32_t index = 0;
  std::string preset = "mtia-v2";      // chip preset name ("mtia-v1", "mtia-v2") or file path
  std::vector<std::string> overrides;  // "key=value" preset overrides, applied in order
  bool timing = true;                  // false: functional only, simulated times stay 0
  // Performance trace (mtia/trace.h). Unset: $MTIA_EMU_TRACE (off, kernels or units), else off.
  std::optional<TraceLevel> trace;
  // Trace events kept at most; 0: $MTIA_EMU_TRACE_MAX_EVENTS, else kDefaultTraceMaxEvents.
  uint64_t trace_max_events = 0;
  // How waits are done. Unset: $MTIA_EMU_WAIT (auto, spin, yield or block), else auto.
  std::optional<WaitPolicy> wait;
  // How the emulator's PE grid uses the host machine; results and simulated times never depend
  // on these, only wall time does.
  // Host threads running unit math and PE DMA copies beside the simulator thread, 0..256
  // (0: all on the simulator thread). Unset: $MTIA_EMU_UNIT_THREADS, else host cores - 1, at
  // most 6.
  std::optional<uint32_t> unit_threads;
  // Operations estimated below this many ns of host work run on the simulator thread when their
  // PE has nothing queued, 0..10^9 (0: all to the helpers). Unset: $MTIA_EMU_INLINE_WORK_NS,
  // else 5,000.
  std::optional<uint64_t> inline_work_ns;
  // Leave local DMA loads in device memory until their bytes are needed. Unset:
  // $MTIA_EMU_LAZY_LOADS (0 or 1), else on.
  std::optional<bool> lazy_loads;
  // The device sanitizer (docs/sanitizer.md): a comma-separated list of checks ("memcheck",
  // "racecheck", "initcheck", "synccheck"), or "off". memcheck checks every PE DMA to or from
  // device memory against the live allocations and fails a launch with a bad access
  // (kDeviceFault, naming the kernel, PE, pc, access and allocation); racecheck fails a launch
  // in which two PEs touch the same device bytes by DMA between barriers, one of them writing;
  // initcheck one that reads device memory or local-store bytes nothing wrote; synccheck one
  // with a barrier that not every PE reaches or a wait on a tag never issued.
  // Unset: $MTIA_EMU_SANITIZE, else off. Only the in-process device runs it.
  std::optional<std::string> sanitize;
};

struct DeviceProperties {
  std::string backend;            // backend the device was opened through
  std::string name;               // preset name reported by the device, e.g. "mtia-v2"
  uint32_t generation = 0;        // 1 or 2
  uint64_t firmware_version = 0;  // major << 16 | minor
  uint64_t dram_bytes =
      0;  // DRAM this handle may use: the LPDDR, or a client's share of a served one
  uint64_t sram_bytes = 0;         // on-chip SRAM, bytes
  uint64_t local_store_bytes = 0;  // per-PE local store, bytes
  uint32_t pe_rows = 0;            // PE grid
  uint32_t pe_cols = 0;
  uint64_t clock_hz = 0;  // PE clock, Hz
  uint32_t dma_engines = 0;
  uint32_t hardware_queues = 0;         // command queues the firmware serves
  bool timing = true;                   // whether the timing model is on
  WaitPolicy wait = WaitPolicy::kAuto;  // the wait policy in effect (DeviceOptions::wait)
  std::string sanitize = "off";         // the sanitizer checks in effect (DeviceOptions::sanitize)
  // Launch limits (Device::launch). The argument block holds one 8-byte slot per argument:
  // at most 64, the kernel metadata's limit (kernel_meta.h, MTIA_KMETA_MAX_ARGS).
  uint32_t max_kernel_args = 64;
  // Distinct device allocations the pointer arguments of one launch may point into (a pointer
  // outside every allocation counts as its own buffer): 32, the emulator's model of the PE
  // DMA's buffer table. What TorchInductor's max_fusion_unique_io_buffers guards against.
  uint32_t max_kernel_buffers = 32;
};

}  // namespace mtia
