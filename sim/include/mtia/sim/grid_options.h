// How the PE grid uses the host machine (docs/architecture.md, "Host threads" and "Loads left
// in device memory"). None of these changes results or simulated times, only wall time; the
// grid's simulated parameters are the preset's (ChipConfig::pe_*).
//
// Each field left unset comes from its environment variable, a documented override for
// programs that do not set options (tests, benchmarks, the tensor layer), else its default:
//   unit_threads    $MTIA_EMU_UNIT_THREADS    host cores - 1, at most kDefaultMaxUnitThreads
//   inline_work_ns  $MTIA_EMU_INLINE_WORK_NS  5,000 ns
//   lazy_loads      $MTIA_EMU_LAZY_LOADS      1 (on)
#pragma once

#include <cstdint>
#include <optional>

#include "mtia/isa/result.h"

namespace mtia::sim {

// The default helper count stops here however many cores the host has. Every unit operation is
// issued from the one simulator thread, so more helpers mostly wait for it, and their
// hand-overs cost more than they save on small tiles. Measured on 16 cores (bench_gemm,
// docs/performance.md, 2026-11-27): 6 helpers against 15, v2 2048^3 47 against 54 ms and v1
// 2048^3 149 against 300 ms, with half the CPU time.
inline constexpr uint32_t kDefaultMaxUnitThreads = 6;

struct PeGridHostOptions {
  // Host threads that run the units' math and the PEs' DMA copies beside the simulator
  // thread, 0..256; 0 runs it all on the simulator thread. Every PE runs on the simulator
  // thread, which takes every decision that shares state or time.
  std::optional<uint32_t> unit_threads;
  // Nanoseconds, 0..10^9: an operation estimated to take the host less than this runs on the
  // simulator thread when its PE has nothing queued (handing it over would cost more); 0 hands
  // every operation to the helper threads.
  std::optional<uint64_t> inline_work_ns;
  // Leave a DMA's load into a local store in device memory until its bytes are needed, and let
  // the DPE read its operands there; false copies every load at once.
  std::optional<bool> lazy_loads;
};

// The values in effect.
struct PeGridHostSettings {
  uint32_t unit_threads = 0;
  uint64_t inline_work_ns = 5'000;
  bool lazy_loads = true;
};

// Each field: the option when set, else its environment variable when that holds a valid value
// (an invalid one is ignored with a warning), else the default. Fails (kInvalidArgument)
// naming the field for an option out of its range.
isa::Result<PeGridHostSettings> resolve(const PeGridHostOptions& options);

}  // namespace mtia::sim
