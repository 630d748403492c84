// A PE's local DMA (dma.start), the fifth unit beside the compute units of sim/pe (unit.h),
// with the same three steps. Its cost is not a formula of the descriptor: the job goes
// through the shared MemorySystem as a host DMA packet would, so it gets the same address
// checks, a schedule on the same bandwidth timelines (contending with the other PEs and the
// host DMA engines) and the same copy loops. Private to sim/; one per PE (ProcessingElement).
#pragma once

#include <cstdint>

#include "deferred_work.h"
#include "mtia/isa/access_scope.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/result.h"
#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit.h"

namespace mtia::sim::detail {

class LocalDma {
 public:
  // A planned job: its schedule (end_ps, the bytes it reserved) and its copy.
  struct Job {
    DmaPlan plan;
    BoundDma copy;
  };

  // For the PE whose local store is at device address `ls_device_base`.
  LocalDma(MemorySystem& memory, uint64_t ls_device_base);

  // The descriptor at core address `addr`, read and checked (descriptors.h), or why not
  // ("dma.start rejected: ...").
  isa::Result<mtia_pe_dma_desc> validate(const sim::pe::RiscvCore& core, uint64_t addr) const;
  // Checks a valid `d` issued at simulated time `now_ps` and binds its copy, or says why its
  // device ranges are not memory the launch may reach (`scope`: its queue's window, and the
  // launch scratch: local stores and SRAM). Its plan reserves no bandwidth until reserve().
  isa::Result<Job> check(const mtia_pe_dma_desc& d, uint64_t now_ps,
                         const isa::AccessScope& scope) const;
  // Takes the checked job's turn on the shared memory timelines (sets plan.end_ps), in the
  // grid's sequential order (pe_grid.h).
  void reserve(DmaPlan& plan, uint64_t now_ps) { memory_.reserve(plan, now_ps); }
  // Copies `job`, whose local-store bytes are `touched` (source, destination): left in device
  // memory when it is a load, else now or on a helper thread, in order with `work`.
  void execute(const mtia_pe_dma_desc& d, const Job& job, const sim::pe::Touched& touched,
               DeferredWork& work);

  // A core address of `space` as a device address (a local-store address: its window in
  // DeviceMemory).
  uint64_t device_address(uint8_t space, uint64_t addr) const;
  uint64_t ls_device_base() const { return ls_device_base_; }

 private:
  MemorySystem& memory_;
  uint64_t ls_device_base_;
};

}  // namespace mtia::sim::detail
