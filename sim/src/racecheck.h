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

// Calls fn(lo, hi) for each row of one side of a DMA, in the transfer's order: the bytes
// [lo, hi) at device or core address `addr` that `d`'s sizes and `strides` (in bytes, two's
// complement for negative ones) reach, one run per index of the outer dimensions (the innermost
// dimensions whose elements follow each other make one row). A transfer of more than
// `max_rows` rows is described coarser: its innermost dimensions are merged into the span they
// cover until the rows are few enough. An empty transfer has no rows.
template <typename Fn>
void for_each_dma_row(uint64_t addr, const uint64_t* strides, const mtia_pe_dma_desc& d,
                      uint64_t max_rows, Fn&& fn) {
  const int nd = d.ndims < MTIA_PE_DMA_MAX_DIMS ? int{d.ndims} : MTIA_PE_DMA_MAX_DIMS;
  for (int i = 0; i < nd; ++i) {
    if (d.sizes[i] == 0) return;
  }
  int k = nd - 1;
  for (uint64_t run = d.elem_size; k >= 0; --k) {
    if (d.sizes[k] <= 1) continue;
    if (strides[k] != run) break;
    run *= d.sizes[k];
  }
  auto rows_of = [&](int last) {
    uint64_t rows = 1;
    for (int i = 0; i <= last; ++i) {
      if (d.sizes[i] > max_rows) return max_rows + 1;
      rows = rows * d.sizes[i] < max_rows + 1 ? rows * d.sizes[i] : max_rows + 1;
    }
    return rows;
  };
  while (k >= 0 && rows_of(k) > max_rows) --k;
  // The bytes one row covers, relative to its first element.
  __int128 lo = 0, hi = d.elem_size;
  for (int i = k + 1; i < nd; ++i) {
    const __int128 ext = static_cast<__int128>(d.sizes[i] - 1) * static_cast<int64_t>(strides[i]);
    (ext < 0 ? lo : hi) += ext;
  }
  const uint64_t row_lo = static_cast<uint64_t>(static_cast<int64_t>(lo));
  const uint64_t row_bytes = static_cast<uint64_t>(hi - lo);
  uint64_t index[MTIA_PE_DMA_MAX_DIMS] = {};
  for (;;) {
    uint64_t off = 0;
    for (int i = 0; i <= k; ++i) off += index[i] * strides[i];  // wraps for negative strides
    const uint64_t start = addr + off + row_lo;
    fn(start, start + row_bytes);
    int i = k;
    for (; i >= 0; --i) {
      if (++index[i] < d.sizes[i]) break;
      index[i] = 0;
    }
    if (i < 0) break;
  }
}

// One PE's accesses to device memory since its last barrier, as byte runs.
class RaceLog {
 public:
  // A run of bytes [lo, hi) read or written by the dma.start at `pc`, issued with return
  // address `ra` (reports name the line that called the function holding pc).
  struct Run {
    uint64_t lo = 0, hi = 0;
    uint64_t pc = 0;
    uint64_t ra = 0;
    bool write = false;
  };

  // One side of a DMA: the bytes at device address `addr` that `d`'s sizes and `strides` (in
  // bytes, two's complement for negative ones) reach, one run per row of the transfer. A
  // transfer of more than kMaxRunsPerDma rows is recorded coarser: its innermost dimensions
  // are merged into the span they cover until the rows are few enough.
  void add(uint64_t pc, uint64_t ra, bool write, uint64_t addr, const uint64_t* strides,
           const mtia_pe_dma_desc& d);
  // Forgets the runs (a new epoch).
  void clear();
  // The runs, merged: the runs of one dma.start site (pc and ra) and direction that touch or
  // overlap are one run.
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
