// racecheck (docs/sanitizer.md): the device bytes each PE of a launch reads and writes by DMA
// between two barriers, and the conflicts between them. Private to sim/.
//
// Each PE records its own accesses (RaceLog, written on the thread that runs the PE); the grid
// compares the PEs' logs on the simulator thread when every PE has stopped at a barrier and
// when the launch ends, so what is found depends only on what each PE did, not on the order in
// which the host ran them.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"

namespace mtia::sim::detail {

// One PE's accesses to device memory since its last barrier, as byte runs.
class RaceLog {
 public:
  // A run of bytes [lo, hi) read or written by the dma.start at `pc`.
  struct Run {
    uint64_t lo = 0, hi = 0;
    uint64_t pc = 0;
    bool write = false;
  };

  // One side of a DMA: the bytes at device address `addr` that `d`'s sizes and `strides` (in
  // bytes, two's complement for negative ones) reach, one run per row of the transfer. A
  // transfer of more than kMaxRunsPerDma rows is recorded coarser: its innermost dimensions
  // are merged into the span they cover until the rows are few enough.
  void add(uint64_t pc, bool write, uint64_t addr, const uint64_t* strides,
           const mtia_pe_dma_desc& d);
  // Forgets the runs (a new epoch).
  void clear();
  // The runs, merged: the runs of one dma.start site and direction that touch or overlap are
  // one run.
  std::span<const Run> merged();
  bool empty() const { return runs_.empty(); }

  static constexpr uint64_t kMaxRunsPerDma = 1u << 16;

 private:
  void compact();

  std::vector<Run> runs_;
  size_t compacted_ = 0;  // runs_.size() after the last compaction
};

// The first conflict between PEs' logs: the lowest address at which two PEs' runs overlap, at
// least one of them a write, and of those the lowest pair of PEs (by launch index).
struct Race {
  uint32_t pe_a = 0, pe_b = 0;  // pe_a < pe_b
  RaceLog::Run a, b;            // their runs
  uint64_t lo = 0, hi = 0;      // the bytes both runs touch
};
// `logs[i]` is launch PE i's log.
std::optional<Race> find_race(std::span<RaceLog* const> logs);

}  // namespace mtia::sim::detail
