// What one PE's local store still owes: the unit math and local DMA copies handed to helper
// threads (pe::UnitWorkers), and the loads left in device memory. Private to sim/; one per
// PE (ProcessingElement), driven by the simulator thread.
//
// Host-thread deferral. An operation's math (or a DMA's copy loop) runs here and now when it
// is cheap and nothing of this PE is queued; otherwise it queues behind the PE's queued work
// for the helper threads. Queued work runs in issue order, so only what reads the local store
// outside the queue (the core, descriptor reads, other PEs) has to settle it first: the core
// guards the hull of the queued bytes (RiscvCore::guard) and its PE flushes before it touches
// them.
//
// Loads left in device memory. A DMA of at least kLazyLoadBytes from DRAM or SRAM into this
// local store, in rows that are contiguous on both sides, is a load: its copy waits until
// something needs the bytes in the local store, and a DPE operand that lies inside it is read
// where the load reads from (the copy of a GEMM's tile that is multiplied and then loaded over
// is never made). Everything else that touches a load's bytes copies it first, in order with
// the PE's queued work; a DMA that loads over the same bytes drops it; a write to the device
// bytes it reads (or that its readers still queued read) first flushes this PE
// (PeGrid::before_device_access). A load that is no longer live stays listed until the queue
// drains, for that last check.
//
// Results and simulated time never depend on either: only when the bytes are copied does.
#pragma once

#include <cstdint>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/dpe_unit.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit.h"
#include "mtia/sim/pe/unit_task.h"
#include "mtia/sim/pe/unit_workers.h"

namespace mtia::sim::detail {

// Totals of the loads left in device memory, over every PE (PeGrid's statistics).
struct LazyLoadStats {
  uint64_t loads = 0;          // local DMA loads left in device memory
  uint64_t copied = 0;         // ... of which copied into the local store later
  uint64_t operand_reads = 0;  // DPE operands read where a lazy load reads from
};

class DeferredWork {
 public:
  using Extent = sim::pe::Extent;
  using Touched = sim::pe::Touched;

  struct Params {
    // An operation estimated to take the host less than this (ns) runs in place when the PE
    // has nothing queued; 0 hands every operation to the helpers.
    uint64_t inline_work_ns = 5'000;
    bool lazy_loads = true;  // leave loads in device memory (load_lazily); false copies at once
  };

  // For chip PE `pe`, whose work `workers` runs and whose `core` guards the bytes still owed;
  // `stats` is counted into. All must outlive this object.
  DeferredWork(sim::pe::UnitWorkers& workers, uint32_t pe, sim::pe::RiscvCore& core, Params params,
               LazyLoadStats& stats);
  DeferredWork(const DeferredWork&) = delete;
  DeferredWork& operator=(const DeferredWork&) = delete;

  // Runs `work`, which touches the `touched` local-store bytes, now or after the PE's queued
  // work (see above), copying the loads into those bytes first. `host_ns`: its estimated host
  // time. `device`: it reads or writes device memory (a DMA's copy), which other PEs may touch
  // after the next barrier.
  void run_or_defer(const Touched& touched, uint64_t host_ns, sim::pe::UnitTask&& work,
                    bool device);

  // Finishes this PE's deferred work that uses any byte of `bytes` (local-store offsets), and
  // the work queued before it, copying loads into those bytes first: before anything else
  // touches them.
  void settle(Extent bytes);
  // Finishes all the queued work (before simulated time moves on, and at the launch's end);
  // loads not copied yet stay so.
  void join();
  // Finishes the queued work that reads or writes device memory (and the work queued before
  // it), at a barrier: the unit math on the local store may run on.
  void join_device();
  // Copies every load and finishes all the work: the local store then holds what the program
  // wrote to it (for the core, other PEs, the end of the launch).
  void flush();
  // Queues the copies of every load not copied yet.
  void copy_loads() { materialize(Extent{0, ~0ull}); }
  // Whether local-store bytes [lo, hi) are among those the core guards for this work.
  bool guards(uint64_t lo, uint64_t hi) const { return lo < guard_.hi && guard_.lo < hi; }

  // Whether a load of this PE (copied or not) may still read device bytes [lo, hi): a write
  // there must wait for flush().
  // Inline, with the hull first: every PE DMA that writes device memory asks every PE.
  bool reads_device(uint64_t lo, uint64_t hi) const {
    return lo < loads_src_.hi && hi > loads_src_.lo && any_load_reads(lo, hi);
  }

  // Leaves the DMA `d` (planned as `plan`, its copy `bound`) that fills local-store bytes `ls`
  // in device memory when it is a load (see above); false when it is not one, and the caller
  // copies it (run_or_defer).
  bool load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                   const BoundDma& bound);

  // Where a DPE operand (FunctionalUnits::OperandSource) lies when it is inside a live load:
  // in the load's source. {nullptr, 0} otherwise.
  sim::pe::MatmulOperandView operand_view(uint64_t offset, uint64_t rows, uint64_t row_bytes,
                                          uint64_t ld_bytes);

 private:
  static constexpr uint64_t kLazyLoadBytes = 1024;
  struct LazyLoad {
    Extent ls;                                // local-store bytes it fills
    uint64_t src_lo = 0, src_hi = 0;          // device bytes it reads
    const uint8_t* src = nullptr;             // host address of src_lo
    uint64_t rows = 0, run = 0;               // rows of `run` bytes,
    uint64_t dst_stride = 0, src_stride = 0;  // these many bytes apart on each side
    BoundDma copy;
    bool live = true;  // not copied (or dropped) yet
  };
  // Deferred unit operations and DMA copies that may still be running, and the hull of their
  // local-store bytes, which the core guards.
  struct PendingOp {
    uint64_t number;  // UnitWorkers' number for it
    Touched touched;
    bool device;  // reads or writes device memory
  };
  static constexpr Extent kNoGuard{~0ull, 0};

  void enqueue(const Touched& touched, uint64_t host_ns, sim::pe::UnitTask&& work, bool device);
  // Whether one of the loads reads device bytes [lo, hi).
  bool any_load_reads(uint64_t lo, uint64_t hi) const;
  // Finishes the queued work up to UnitWorkers' number `upto` (none for 0).
  void join_upto(uint64_t upto);
  // Copies load l now (in order with the queued work).
  void materialize(LazyLoad& l);
  // Copies the loads that fill any byte of `bytes`.
  void materialize(Extent bytes);
  // The queue is empty: the loads no longer live are forgotten, and the core's guard shrinks to
  // the live ones.
  void queue_drained();

  sim::pe::UnitWorkers& workers_;
  uint32_t pe_;
  sim::pe::RiscvCore& core_;
  Params params_;
  LazyLoadStats& stats_;
  std::vector<PendingOp> pending_;
  Extent guard_ = kNoGuard;
  std::vector<LazyLoad> loads_;
  Extent loads_src_ = kNoGuard;  // the hull of the device bytes they read
};

}  // namespace mtia::sim::detail
