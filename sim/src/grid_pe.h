// One PE of the grid (PeGrid::Pe): its RISC-V core, its units, its tags and its local DMA, and
// the unit work it has deferred to helper threads. Private to sim/; see pe_grid.h for the
// timing model it implements.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_port.h"
#include "mtia/sim/pe/unit_task.h"
#include "mtia/sim/pe/units.h"
#include "pe_grid.h"

namespace mtia::sim::detail {

namespace pe = mtia::sim::pe;

class PeGrid::Pe : public pe::UnitPort {
  using UnitOp = pe::UnitOp;
  using UnitResponse = pe::UnitResponse;
  using Extent = pe::FunctionalUnits::Extent;
  using Touched = pe::FunctionalUnits::Touched;

 public:
  Pe(PeGrid& grid, uint32_t chip_index, std::span<uint8_t> local_store,
     const pe::UnitTiming& timing);

  // Runs an operation's math (or a DMA's copy loop) here and now when it is cheap and nothing
  // of this PE is queued; otherwise queues it behind the PE's queued work for the helper
  // threads. Queued work runs in issue order, so only what reads the local store outside the
  // queue (the core, descriptor reads, other PEs) has to settle it first. Loads that have
  // not been copied yet into the bytes it touches are copied first.
  void run_or_defer(const Touched& touched, uint64_t host_ns, pe::UnitTask&& work, bool device);

  // `device`: the work reads or writes device memory (a DMA's copy), which other PEs may touch
  // after the next barrier.
  void enqueue(const Touched& touched, uint64_t host_ns, pe::UnitTask&& work, bool device);

  // Finishes this PE's deferred unit work that uses any byte of `bytes` (local-store offsets),
  // and the work queued before it, copying loads into those bytes first: before anything
  // else touches them.
  void settle(Extent bytes);
  // Finishes the queued work up to UnitWorkers' number `upto` (none for 0).
  void join_upto(uint64_t upto);
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

  void guarded_access(pe::RiscvCore&) override { flush(); }

  // Whether a load of this PE (copied or not) may still read device bytes [lo, hi): a write
  // there must wait for flush().
  bool reads_device(uint64_t lo, uint64_t hi) const;

  uint32_t chip_index() const { return chip_index_; }

  // Forgets the previous launch's tags; `t0_ps` is the launch's start (its cycle 0).
  void begin(uint64_t t0_ps);

  pe::RiscvCore& core() { return core_; }
  bool at_barrier = false;
  uint64_t barrier_arrival = 0;  // core cycle at which it reached the barrier

  UnitResponse issue(pe::RiscvCore& core, const pe::UnitRequest& r) override;

 private:
  uint64_t add_tag(uint64_t done_cycle);

  // A core address in this PE's local store, as a device address (its window in DeviceMemory).
  uint64_t device_address(uint8_t space, uint64_t addr) const;

  // The bytes of this PE's local store that one side of a DMA touches (empty if none). A side
  // in another PE's local store (through its device window) first finishes that PE's queued
  // work: its queue is not ordered with this one.
  Extent dma_side(uint8_t space, uint64_t addr, const uint64_t* strides, const mtia_pe_dma_desc& d);

  UnitResponse dma(pe::RiscvCore& core, const pe::UnitRequest& r);

  // ---- Loads left in device memory ------------------------------------------------------------
  // A DMA of at least kLazyLoadBytes from DRAM or SRAM into this local store, in rows that are
  // contiguous on both sides, is a load: its copy waits until something needs the bytes in the
  // local store, and a DPE operand that lies inside it is read where the load reads from (the
  // copy of a GEMM's tile that is multiplied and then loaded over is never made). Everything
  // else that touches a load's bytes copies it first, in order with the PE's queued work; a
  // DMA that loads over the same bytes drops it; a write to the device bytes it reads (or that
  // its readers still queued read) first flushes this PE (PeGrid::before_device_access). A load
  // that is no longer live stays listed until the queue drains, for that last check.
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

  bool load_lazily(const mtia_pe_dma_desc& d, Extent ls, const DmaPlan& plan,
                   const BoundDma& bound);

  // Copies load l now (in order with the queued work).
  void materialize(LazyLoad& l);
  // Copies the loads that fill any byte of `bytes`.
  void materialize(Extent bytes);

  // Where a DPE operand lies when it is inside a live load: in the load's source.
  pe::FunctionalUnits::OperandView operand_view(uint64_t offset, uint64_t rows, uint64_t row_bytes,
                                                uint64_t ld_bytes);

  // The queue is empty: the loads no longer live are forgotten, and the core's guard shrinks to
  // the live ones.
  void queue_drained();

  PeGrid& grid_;
  uint32_t chip_index_;
  uint64_t ls_device_base_;
  pe::FunctionalUnits units_;
  pe::RiscvCore core_;
  uint64_t t0_ps_ = 0;
  std::vector<uint64_t> tag_done_;  // completion cycle of tag i + 1
  uint64_t all_done_ = 0;
  uint64_t unit_free_[static_cast<size_t>(pe::UnitKind::kCount)] = {};
  // Deferred unit operations and DMA copies that may still be running, and the hull of their
  // local-store bytes, which the core guards.
  struct PendingOp {
    uint64_t number;  // UnitWorkers' number for it
    Touched touched;
    bool device;  // reads or writes device memory
  };
  static constexpr Extent kNoGuard{~0ull, 0};
  std::vector<PendingOp> pending_;
  Extent guard_ = kNoGuard;
  std::vector<LazyLoad> loads_;
  Extent loads_src_ = kNoGuard;  // the hull of the device bytes they read
};

}  // namespace mtia::sim::detail
