// The functional math and the throughput model of a PE's fixed-function units: DPE (matrix
// multiply), SE (elementwise), RE (reductions) and MLU (copy / transpose), operating on the
// PE's local store as docs/pe-isa.md defines them.
//
// Each call checks its descriptor (descriptors.h), applies the whole operation to the local
// store at once and answers how many cycles the unit is busy with it; the PE model turns that
// into a completion time (and ignores it with the timing model off: the results never depend
// on timing). A bad descriptor is rejected before any byte is touched. Plain C++, no SystemC.
// Not thread-safe: one instance per PE, driven by the simulator thread; only deferred math
// (set_deferral) runs elsewhere, one operation at a time per instance.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/result.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_port.h"
#include "mtia/sim/pe/unit_task.h"

namespace mtia::sim::pe {

// Throughput and latency of the units, in PE clock cycles. The PE model fills it from the chip
// configuration (ChipConfig's dpe_*, se_*, re_*, mlu_* fields; the preset files say where each
// number comes from); the defaults are the mtia-v2 preset's.
//
// Busy cycles of one operation:
//   DPE  dpe_issue_cycles + ceil(m*n*k / MACs per cycle of in_dtype)
//   SE   se_issue_cycles + ceil(count / lanes) * cycles per vector of the op,
//        lanes = se_vector_bytes / (bytes of the widest element read or written)
//   RE   re_issue_cycles + ceil(rows*cols / re_elements_per_cycle)
//   MLU  mlu_issue_cycles + ceil(rows*cols*elem_size / mlu_bytes_per_cycle)
struct UnitTiming {
  // DPE: multiply-accumulates per cycle (one MAC = c += a*b) by input dtype.
  uint32_t dpe_int8_macs_per_cycle = 2048;
  uint32_t dpe_fp16_macs_per_cycle = 1024;  // fp16 and bf16
  uint32_t dpe_fp32_macs_per_cycle = 256;
  uint32_t dpe_issue_cycles = 16;  // descriptor decode, array fill and drain, per matmul

  // SE: bytes of vector processed per cycle (128 bytes = 32 fp32, 64 fp16/bf16, 128 int8
  // lanes), and cycles each vector takes by op class.
  uint32_t se_vector_bytes = 128;
  uint32_t se_simple_cycles = 1;          // arithmetic, compare, logic, select, clamp, cast
  uint32_t se_divide_cycles = 4;          // div, sqrt, rsqrt
  uint32_t se_transcendental_cycles = 8;  // exp, log, tanh, erf, sigmoid, silu
  uint32_t se_issue_cycles = 8;

  // RE: input elements consumed per cycle, any dtype.
  uint32_t re_elements_per_cycle = 32;
  uint32_t re_issue_cycles = 8;

  // MLU: bytes moved per cycle, copy and transpose alike.
  uint32_t mlu_bytes_per_cycle = 128;
  uint32_t mlu_issue_cycles = 8;
};

// What one unit operation cost.
struct UnitWork {
  uint64_t busy_cycles = 0;  // PE clock cycles the unit is busy, issue latency included
  uint64_t work = 0;         // MACs (DPE), elements (SE: outputs, RE: inputs), bytes (MLU)
};

using UnitOutcome = isa::Result<UnitWork>;

enum class UnitKind : uint8_t { kDpe = 0, kSe = 1, kRe = 2, kMlu = 3, kCount };
const char* unit_kind_name(UnitKind kind);  // "dpe", "se", "re", "mlu"

// Totals since construction (or reset_counters), per unit.
struct UnitCounters {
  uint64_t operations = 0;   // accepted operations
  uint64_t rejected = 0;     // operations rejected with a fault
  uint64_t work = 0;         // sum of UnitWork::work (units as above)
  uint64_t busy_cycles = 0;  // sum of UnitWork::busy_cycles, PE clock cycles
};

// An fp32 DPE operand read outside the local store (FunctionalUnits::set_operand_source): its
// elements and their leading dimension, in elements.
struct MatmulOperandView {
  const float* data = nullptr;
  size_t ld = 0;
};

class FunctionalUnits {
 public:
  // `local_store` is the PE's local store (MTIA_PE_LS_BASE maps to its first byte), shared
  // with the core; it must outlive this object and be 8-byte aligned.
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

  // The cost alone, for a descriptor that validates (no memory is touched).
  UnitWork cost(const mtia_pe_matmul_desc& d) const;
  UnitWork cost(const mtia_pe_se_desc& d) const;
  UnitWork cost(const mtia_pe_re_desc& d) const;
  UnitWork cost(const mtia_pe_mlu_desc& d) const;

  // Bytes of the local store an operation reads or writes: offsets [lo, hi) from its start.
  struct Extent {
    uint64_t lo = 0;
    uint64_t hi = 0;
  };
  // The bytes each operation reads or writes, at most four ranges; unused ones are empty
  // ({0, 0}, which overlaps nothing).
  using Touched = std::array<Extent, 4>;
  static Touched extents(const mtia_pe_matmul_desc& d);  // A, B, C
  static Touched extents(const mtia_pe_se_desc& d);      // a, b, c (in memory), out
  static Touched extents(const mtia_pe_re_desc& d);      // src, dst
  static Touched extents(const mtia_pe_mlu_desc& d);     // src, dst

  // About how long an operation's math takes the host, in nanoseconds: the PE model runs
  // cheap ones in place rather than pay a hand-off to a helper thread.
  static uint64_t host_cost_ns(const mtia_pe_matmul_desc& d);
  static uint64_t host_cost_ns(const mtia_pe_se_desc& d);
  static uint64_t host_cost_ns(const mtia_pe_re_desc& d);
  static uint64_t host_cost_ns(const mtia_pe_mlu_desc& d);

  // When set, execute() validates and costs an operation at once and hands its math to
  // `defer` instead of running it (the PE model runs it on a helper thread, UnitWorkers, in
  // order with the PE's other deferred work). The math only touches the `touched` bytes of the
  // local store and the instance's scratch buffers.
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

  const UnitTiming& timing() const { return timing_; }
  const UnitCounters& counters(UnitKind kind) const { return counters_[static_cast<size_t>(kind)]; }
  void reset_counters();

 private:
  UnitOutcome finish(UnitKind kind, UnitOutcome outcome);
  UnitOutcome execute_matmul(const RiscvCore& core, const UnitRequest& request);
  void run_matmul(const mtia_pe_matmul_desc& d, OperandView va, OperandView vb);
  void run_eltwise(const mtia_pe_se_desc& d);
  void run_reduce(const mtia_pe_re_desc& d);
  void run_layout(const mtia_pe_mlu_desc& d);
  uint8_t* at(uint64_t core_addr) const { return ls_.data() + (core_addr - MTIA_PE_LS_BASE); }

  std::span<uint8_t> ls_;
  UnitTiming timing_;
  UnitCounters counters_[static_cast<size_t>(UnitKind::kCount)];
  // DPE scratch, reused: A and B widened to fp32, and for int8 the fp32 partial products of
  // one k chunk and the wrapping int32 sums.
  std::vector<float> fa_, fb_, fc_;
  std::vector<uint32_t> acc_;
  Deferral defer_;
  OperandSource operand_source_;
};

}  // namespace mtia::sim::pe
