// The DPE (dot-product engine): C = A*B or C += A*B on tiles in the local store, fp32
// accumulation for fp32/fp16/bf16 inputs and wrapping int32 for int8 (docs/pe-isa.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "mtia/sim/pe/unit.h"

namespace mtia::sim::pe {

// An fp32 DPE operand read outside the local store (FunctionalUnits::set_operand_source): its
// elements and their leading dimension, in elements. {nullptr, 0}: read the local store.
struct MatmulOperandView {
  const float* data = nullptr;
  size_t ld = 0;
};

class DpeUnit final : public Unit<mtia_pe_matmul_desc> {
 public:
  using Unit::Unit;

  UnitKind kind() const override { return UnitKind::kDpe; }
  isa::Status validate(const mtia_pe_matmul_desc& d) const override;
  // dpe_issue_cycles + ceil(m*n*k / MACs per cycle of in_dtype); work = m*n*k MACs.
  UnitWork cost(const mtia_pe_matmul_desc& d) const override;
  void execute(const mtia_pe_matmul_desc& d) override { execute(d, {}, {}); }
  // As execute(d), with fp32 A and/or B read where `a` and `b` say instead (when set).
  void execute(const mtia_pe_matmul_desc& d, MatmulOperandView a, MatmulOperandView b);
  Touched touched(const mtia_pe_matmul_desc& d) const override;  // A, B, C
  uint64_t host_cost_ns(const mtia_pe_matmul_desc& d) const override;

 private:
  // Scratch, reused: A and B widened to fp32, and for int8 the fp32 partial products of one
  // k chunk and the wrapping int32 sums.
  std::vector<float> fa_, fb_, fc_;
  std::vector<uint32_t> acc_;
};

}  // namespace mtia::sim::pe
