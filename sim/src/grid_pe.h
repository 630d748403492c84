// One PE of the grid (PeGrid::Pe): its RISC-V core, its units, its tags and its local DMA, and
// the work its local store still owes (DeferredWork). Private to sim/; see pe_grid.h for the
// timing model it implements.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deferred_work.h"
#include "local_dma.h"
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

  // The PE's deferred work (DeferredWork): finish all of it; finish what reaches device
  // memory (at a barrier); copy the loads and finish all (before another reader of the local
  // store); queue the copies of the loads; whether a load may still read device bytes [lo, hi).
  void join() { work_.join(); }
  void join_device() { work_.join_device(); }
  void flush() { work_.flush(); }
  void copy_loads() { work_.copy_loads(); }
  bool reads_device(uint64_t lo, uint64_t hi) const { return work_.reads_device(lo, hi); }

  // The core touched bytes that unit work still owes: finish it first.
  void guarded_access(pe::RiscvCore&) override { work_.flush(); }

  uint32_t chip_index() const { return chip_index_; }

  // Forgets the previous launch's tags; `t0_ps` is the launch's start (its cycle 0).
  void begin(uint64_t t0_ps);

  pe::RiscvCore& core() { return core_; }
  bool at_barrier = false;
  uint64_t barrier_arrival = 0;  // core cycle at which it reached the barrier

  UnitResponse issue(pe::RiscvCore& core, const pe::UnitRequest& r) override;

 private:
  uint64_t add_tag(uint64_t done_cycle);

  // The bytes of this PE's local store that one side of a DMA touches (empty if none). A side
  // in another PE's local store (through its device window) first finishes that PE's queued
  // work: its queue is not ordered with this one.
  Extent dma_side(uint8_t space, uint64_t addr, const uint64_t* strides, const mtia_pe_dma_desc& d);

  UnitResponse dma(pe::RiscvCore& core, const pe::UnitRequest& r);

  PeGrid& grid_;
  uint32_t chip_index_;
  uint64_t ls_device_base_;
  pe::FunctionalUnits units_;  // DPE, SE, RE, MLU
  LocalDma dma_;
  pe::RiscvCore core_;
  uint64_t t0_ps_ = 0;
  std::vector<uint64_t> tag_done_;  // completion cycle of tag i + 1
  uint64_t all_done_ = 0;
  uint64_t unit_free_[static_cast<size_t>(pe::UnitKind::kCount)] = {};
  DeferredWork work_;  // after core_, which it guards
};

}  // namespace mtia::sim::detail
