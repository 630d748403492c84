// The MLU (memory layout unit): copies or transposes a tile of 1, 2, 4 or 8-byte elements
// inside the local store (docs/pe-isa.md).
#pragma once

#include <cstdint>
#include <optional>

#include "mtia/sim/pe/unit.h"

namespace mtia::sim::pe {

class MluUnit final : public Unit<mtia_pe_mlu_desc> {
 public:
  using Unit::Unit;

  UnitKind kind() const override { return UnitKind::kMlu; }
  isa::Status validate(const mtia_pe_mlu_desc& d) const override;
  // mlu_issue_cycles + ceil(rows*cols*elem_size / mlu_bytes_per_cycle); work = those bytes.
  UnitWork cost(const mtia_pe_mlu_desc& d) const override;
  void execute(const mtia_pe_mlu_desc& d) override;
  Touched touched(const mtia_pe_mlu_desc& d) const override;  // src, dst
  uint64_t host_cost_ns(const mtia_pe_mlu_desc& d) const override;
};

}  // namespace mtia::sim::pe
