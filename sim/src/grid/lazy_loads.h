// The loads a PE's local store still owes: DMAs into it left in device memory until something
// needs their bytes. Private to sim/; one per PE (ProcessingElement).
//
// A DMA of at least kLazyLoadBytes from DRAM or SRAM into this local store, in rows that are
// contiguous on both sides, is a load: its copy waits until something needs the bytes in the
// local store, and a DPE operand that lies inside it is read where the load reads from (the
// copy of a GEMM's tile that is multiplied and then loaded over is never made). Everything
// else that touches a load's bytes copies it first (settle); a DMA that loads over the same
// rows drops it; a write to the device bytes it reads first copies it (flush, from the PE that
// writes: PeGrid::before_device_access). The core guards the hull of the loads' local-store
// bytes (RiscvCore::guard) and its PE settles them before it touches them.
//
// Threads. The PE's own thread calls everything; other PEs' threads (a DMA that writes the
// bytes a load reads, or reads this local store through its device window) call
// reads_device() and flush(). Every use of the loads is under the object's mutex, which the
// owner also holds while a unit reads a load's source (hold()), so a load is copied before
// anyone writes its source, whichever thread gets there first. The owner never holds its mutex
// while it takes another PE's. Only the owner moves the core's guard: a load copied by another
// thread stays guarded until the owner next settles.
//
// Results and simulated time never depend on this: only when the bytes are copied does.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/dpe_unit.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit.h"

namespace mtia::sim::detail {

// Totals of the loads left in device memory, over every PE (PeGrid's statistics).
struct LazyLoadStats {
  uint64_t loads = 0;          // local DMA loads left in device memory
  uint64_t copied = 0;         // ... of which copied into the local store later
  uint64_t operand_reads = 0;  // DPE operands read where a lazy load reads from
};

class LazyLoads {
 public:
  using Extent = sim::pe::Extent;
  using Touched = sim::pe::Touched;

  // For the PE whose `core` guards the bytes still owed; `enabled` false copies every load at
  // once; `stats` is counted into. Both must outlive this object.
  LazyLoads(sim::pe::RiscvCore& core, bool enabled, LazyLoadStats& stats);
  LazyLoads(const LazyLoads&) = delete;
  LazyLoads& operator=(const LazyLoads&) = delete;

  // ---- the PE's own thread ----------------------------------------------------------------
  // Copies the loads that fill any byte of `bytes` (local-store offsets), or of `touched`:
  // before anything else touches them.
  void settle(Extent bytes);
  void settle(const Touched& touched);
  // Copies every load and shrinks the core's guard to none: the local store then holds what
  // the program wrote to it.
  void settle_all();
  // Leaves the DMA `d` (planned as `plan`, its copy `bound`) that fills local-store bytes `ls`
  // in device memory when it is a load (see above); false when it is not one, and the caller
  // copies it.
  bool load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                   const BoundDma& bound);
  // Held by the owner while a unit operation runs: its operands may be read where a load
  // reads from (operand_view), and the loads into its bytes are copied (settle_held).
  std::unique_lock<std::mutex> hold() { return std::unique_lock<std::mutex>(mu_); }
  void settle_held(const Touched& touched);
  // Where a DPE operand (FunctionalUnits::OperandSource) lies when it is inside a live load:
  // in the load's source. {nullptr, 0} otherwise. Under hold().
  sim::pe::MatmulOperandView operand_view(uint64_t offset, uint64_t rows, uint64_t row_bytes,
                                          uint64_t ld_bytes);
  // After settle_held(), unlocked: the core's guard covers the live loads' bytes only.
  void refresh_guard();
  // Whether local-store bytes [lo, hi) are among those the core guards for the loads.
  bool guards(uint64_t lo, uint64_t hi) const { return lo < guard_.hi && guard_.lo < hi; }

  // ---- any thread -------------------------------------------------------------------------
  // Whether a load may still read device bytes [lo, hi): a write there must flush() first.
  bool reads_device(uint64_t lo, uint64_t hi);
  // Copies every load (the guard stays until the owner next settles).
  void flush();

 private:
  static constexpr uint64_t kLazyLoadBytes = 1024;
  struct LazyLoad {
    Extent ls;                                // local-store bytes it fills
    uint64_t src_lo = 0, src_hi = 0;          // device bytes it reads
    const uint8_t* src = nullptr;             // host address of src_lo
    uint64_t rows = 0, run = 0;               // rows of `run` bytes,
    uint64_t dst_stride = 0, src_stride = 0;  // these many bytes apart on each side
    BoundDma copy;
  };
  static constexpr Extent kNone{~0ull, 0};

  // Under mu_: copies the loads that fill any byte of `bytes` (all of them for kAll).
  void copy_locked(Extent bytes);
  // Under mu_: the hull of the loads' device bytes, published for reads_device().
  void publish_sources_locked();

  sim::pe::RiscvCore& core_;
  const bool enabled_;
  LazyLoadStats& stats_;
  std::mutex mu_;
  std::vector<LazyLoad> loads_;  // live ones, under mu_
  // The hull of the device bytes they read, readable without mu_ (a quick "no").
  std::atomic<uint64_t> src_lo_{~0ull}, src_hi_{0};
  Extent guard_ = kNone;  // owner only
};

}  // namespace mtia::sim::detail
