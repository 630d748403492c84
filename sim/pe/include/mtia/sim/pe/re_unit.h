// The RE (reduction engine): sum, sum of squares, max, min, argmax or argmin of a tile along
// one axis, optionally combined with what the destination holds (docs/pe-isa.md).
#pragma once

#include <cstdint>
#include <optional>

#include "mtia/sim/pe/unit.h"

namespace mtia::sim::pe {

class ReUnit final : public Unit<mtia_pe_re_desc> {
 public:
  using Unit::Unit;

  UnitKind kind() const override { return UnitKind::kRe; }
  isa::Status validate(const mtia_pe_re_desc& d) const override;
  // re_issue_cycles + ceil(rows*cols / re_elements_per_cycle); work = rows*cols inputs.
  UnitWork cost(const mtia_pe_re_desc& d) const override;
  void execute(const mtia_pe_re_desc& d) override;
  Touched touched(const mtia_pe_re_desc& d) const override;  // src, dst
  uint64_t host_cost_ns(const mtia_pe_re_desc& d) const override;
};

}  // namespace mtia::sim::pe
