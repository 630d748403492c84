// The SE (SIMD engine): out[i] = op(a[i], b[i], c[i]) over `count` elements, each operand a
// vector, a broadcast element or an immediate (docs/pe-isa.md). Its ops, their arity, input
// dtypes, output rule and cost class are the table of isa/pe/se_ops.h, which this unit is built
// on: validation, the element loops and the cost all read it.
#pragma once

#include <cstdint>
#include <optional>

#include "mtia/sim/pe/unit.h"

namespace mtia::sim::pe {

class SeUnit final : public Unit<mtia_pe_se_desc> {
 public:
  using Unit::Unit;

  UnitKind kind() const override { return UnitKind::kSe; }
  isa::Status validate(const mtia_pe_se_desc& d) const override;
  // se_issue_cycles + ceil(count / lanes) * cycles per vector of the op's cost class;
  // work = count outputs.
  UnitWork cost(const mtia_pe_se_desc& d) const override;
  void execute(const mtia_pe_se_desc& d) override;
  Touched touched(const mtia_pe_se_desc& d) const override;  // a, b, c (in memory), out
  uint64_t host_cost_ns(const mtia_pe_se_desc& d) const override;
};

}  // namespace mtia::sim::pe
