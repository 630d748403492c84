// A PE's fixed-function units together: DPE (matrix multiply), SE (elementwise), RE
// (reductions) and MLU (copy / transpose), each a Unit (unit.h) in a file of its own, operating
// on the PE's local store as docs/pe-isa.md defines them.
//
// Each call checks its descriptor, applies the whole operation to the local store at once and
// answers how many cycles the unit is busy with it; the PE model turns that into a completion
// time (and ignores it with the timing model off: the results never depend on timing). A bad
// descriptor is rejected before any byte is touched. Plain C++, no SystemC. Not thread-safe:
// one instance per PE, driven by the simulator thread; only deferred math (set_deferral) runs
// elsewhere, one operation at a time per instance.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/result.h"
#include "mtia/sim/pe/dpe_unit.h"
#include "mtia/sim/pe/mlu_unit.h"
#include "mtia/sim/pe/re_unit.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/se_unit.h"
#include "mtia/sim/pe/unit.h"
#include "mtia/sim/pe/unit_port.h"
#include "mtia/sim/pe/unit_task.h"
#include "mtia/sim/pe/unit_timing.h"

namespace mtia::sim::pe {

// Totals since construction (or reset_counters), per unit.
struct UnitCounters {
  uint64_t operations = 0;   // accepted operations
  uint64_t rejected = 0;     // operations rejected with a fault
  uint64_t work = 0;         // sum of UnitWork::work (units as above)
  uint64_t busy_cycles = 0;  // sum of UnitWork::busy_cycles, PE clock cycles
};

class FunctionalUnits {
 public:
  using Extent = pe::Extent;
  using Touched = pe::Touched;

  // `local_store` is the PE's local store (MTIA_PE_LS_BASE maps to its first byte), shared
  // with the core; it must outlive this object and be 8-byte aligned. Throws
  // std::invalid_argument for a throughput of 0 in `timing`.
  explicit FunctionalUnits(std::span<uint8_t> local_store, const UnitTiming& timing = {});

  // Each validates `d` against this local store, then applies it and returns its cost, or
  // returns the rejection (nothing written).
  UnitOutcome matmul(const mtia_pe_matmul_desc& d);
  UnitOutcome eltwise(const mtia_pe_se_desc& d);
  UnitOutcome reduce(const mtia_pe_re_desc& d);
  UnitOutcome layout(const mtia_pe_mlu_desc& d);

  // For the PE model's UnitPort: reads the descriptor at core address request.rs1 (the
  // descriptor of request.op: kMatmul, kEltwise, kReduce or kLayout), validates and applies
  // it. Any other op is rejected. `core` must use this object's local store.
  UnitOutcome execute(const RiscvCore& core, const UnitRequest& request);
  static UnitKind unit_of(UnitOp op);  // kMatmul -> kDpe, ...; other ops: kCount

  // When set, execute() validates and costs an operation at once and hands its math to
  // `defer` instead of running it (the PE model runs it on a helper thread, UnitWorkers, in
  // order with the PE's other deferred work). The math only touches the `touched` bytes of the
  // local store and the unit's scratch buffers.
  using Deferral = std::function<void(const Touched& touched, uint64_t host_ns, UnitTask&& math)>;
  void set_deferral(Deferral defer) { defer_ = std::move(defer); }

  // Where an fp32 DPE operand's elements are when they are not in the local store yet: the
  // PE model may leave a tile that a DMA loads in device memory until something needs its
  // local-store bytes, and the DPE then reads it there. Asked, when set, for A and B of each
  // fp32 matmul that execute() runs: `rows` rows of `row_bytes` bytes, `ld_bytes` apart, at
  // local-store offset `offset`. {nullptr, 0} means "read the local store"; otherwise the
  // elements and their leading dimension (elements), which must stay as they are until the
  // operation has run. An operand read there is left out of the touched bytes.
  using OperandView = MatmulOperandView;
  using OperandSource = std::function<OperandView(uint64_t offset, uint64_t rows,
                                                  uint64_t row_bytes, uint64_t ld_bytes)>;
  void set_operand_source(OperandSource source) { operand_source_ = std::move(source); }

  // The units themselves (validate, cost, execute one descriptor: unit.h).
  DpeUnit& dpe() { return dpe_; }
  SeUnit& se() { return se_; }
  ReUnit& re() { return re_; }
  MluUnit& mlu() { return mlu_; }

  const UnitTiming& timing() const { return timing_; }
  const UnitCounters& counters(UnitKind kind) const { return counters_[static_cast<size_t>(kind)]; }
  void reset_counters();

 private:
  UnitOutcome finish(UnitKind kind, UnitOutcome outcome);
  // Validates, runs at once and costs `d` on `unit`.
  template <typename U>
  UnitOutcome apply(U& unit, const typename U::Descriptor& d);
  // Reads the descriptor at `addr`, validates and costs it, and runs or defers its math.
  template <typename U>
  UnitOutcome issue(U& unit, const RiscvCore& core, uint64_t addr);
  UnitOutcome issue_matmul(const RiscvCore& core, uint64_t addr);

  std::span<uint8_t> ls_;
  UnitTiming timing_;
  DpeUnit dpe_;
  SeUnit se_;
  ReUnit re_;
  MluUnit mlu_;
  UnitCounters counters_[static_cast<size_t>(UnitKind::kCount)];
  Deferral defer_;
  OperandSource operand_source_;
};

}  // namespace mtia::sim::pe
