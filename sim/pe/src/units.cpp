#include "mtia/sim/pe/units.h"

#include <fmt/format.h>

#include <cassert>
#include <stdexcept>
#include <utility>

#include "mtia/sim/pe/descriptors.h"
#include "pe_logger.h"

namespace mtia::sim::pe {

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kDpe:
      return "dpe";
    case UnitKind::kSe:
      return "se";
    case UnitKind::kRe:
      return "re";
    case UnitKind::kMlu:
      return "mlu";
    default:
      return "invalid";
  }
}

namespace {

void check_timing(const UnitTiming& t) {
  const std::pair<const char*, uint32_t> rates[] = {
      {"dpe_int8_macs_per_cycle", t.dpe_int8_macs_per_cycle},
      {"dpe_fp16_macs_per_cycle", t.dpe_fp16_macs_per_cycle},
      {"dpe_fp32_macs_per_cycle", t.dpe_fp32_macs_per_cycle},
      {"se_vector_bytes", t.se_vector_bytes},
      {"se_elements_per_cycle", t.se_elements_per_cycle},
      {"re_elements_per_cycle", t.re_elements_per_cycle},
      {"mlu_bytes_per_cycle", t.mlu_bytes_per_cycle},
  };
  for (const auto& [name, value] : rates) {
    if (value == 0) {
      throw std::invalid_argument(
          fmt::format("UnitTiming::{} is 0: a unit throughput must be at least 1", name));
    }
  }
}

}  // namespace

FunctionalUnits::FunctionalUnits(std::span<uint8_t> local_store, const UnitTiming& timing)
    : ls_(local_store),
      timing_(timing),
      dpe_(local_store, timing),
      se_(local_store, timing),
      re_(local_store, timing),
      mlu_(local_store, timing) {
  check_timing(timing_);
  // Our own wiring, not a user error: the PE model owns the local store.
  assert(reinterpret_cast<uintptr_t>(ls_.data()) % 8 == 0 && "local store must be 8-aligned");
  assert(ls_.size() <= MTIA_PE_LS_MAX_BYTES);
}

void FunctionalUnits::reset_counters() {
  for (auto& c : counters_) c = {};
}

UnitKind FunctionalUnits::unit_of(UnitOp op) {
  switch (op) {
    case UnitOp::kMatmul:
      return UnitKind::kDpe;
    case UnitOp::kEltwise:
      return UnitKind::kSe;
    case UnitOp::kReduce:
      return UnitKind::kRe;
    case UnitOp::kLayout:
      return UnitKind::kMlu;
    default:
      return UnitKind::kCount;
  }
}

UnitOutcome FunctionalUnits::finish(UnitKind kind, UnitOutcome outcome) {
  UnitCounters& c = counters_[static_cast<size_t>(kind)];
  if (outcome.ok()) {
    ++c.operations;
    c.work += outcome.value().work;
    c.busy_cycles += outcome.value().busy_cycles;
  } else {
    ++c.rejected;
    detail::logger()->debug("{} rejected an operation: {}", unit_kind_name(kind),
                            outcome.error().reason);
  }
  return outcome;
}

template <typename U>
UnitOutcome FunctionalUnits::apply(U& unit, const typename U::Descriptor& d) {
  if (isa::Status bad = unit.validate(d); !bad) return finish(unit.kind(), bad.error());
  unit.execute(d);
  return finish(unit.kind(), unit.cost(d));
}

UnitOutcome FunctionalUnits::matmul(const mtia_pe_matmul_desc& d) {
  return apply(dpe_, d);
}

UnitOutcome FunctionalUnits::eltwise(const mtia_pe_se_desc& d) {
  return apply(se_, d);
}

UnitOutcome FunctionalUnits::reduce(const mtia_pe_re_desc& d) {
  return apply(re_, d);
}

UnitOutcome FunctionalUnits::layout(const mtia_pe_mlu_desc& d) {
  return apply(mlu_, d);
}

UnitOutcome FunctionalUnits::execute(const RiscvCore& core, const UnitRequest& request) {
  assert(core.local_store().data() == ls_.data() && core.local_store().size() == ls_.size());
  switch (request.op) {
    case UnitOp::kMatmul:
      return issue_matmul(core, request.rs1);
    case UnitOp::kEltwise:
      return issue(se_, core, request.rs1);
    case UnitOp::kReduce:
      return issue(re_, core, request.rs1);
    case UnitOp::kLayout:
      return issue(mlu_, core, request.rs1);
    default:
      return isa::reject(isa::ErrorCode::kUnsupported,
                         fmt::format("{} is not a compute-unit instruction (DPE, SE, RE, MLU)",
                                     unit_op_name(request.op)));
  }
}

// Reads, checks and costs the descriptor now; runs the math now or hands it to defer_. The
// core's local store is this one, so the descriptor validates against it.
template <typename U>
UnitOutcome FunctionalUnits::issue(U& unit, const RiscvCore& core, uint64_t addr) {
  using Desc = typename U::Descriptor;
  Desc d;
  if (isa::Status bad = detail::read_descriptor_bytes(core, addr, &d, sizeof d); !bad) {
    return finish(unit.kind(), bad.error());
  }
  if (isa::Status bad = unit.validate(d); !bad) return finish(unit.kind(), bad.error());
  if (defer_) {
    defer_(unit.touched(d), unit.host_cost_ns(d), [&unit, d] { unit.execute(d); });
  } else {
    unit.execute(d);
  }
  return finish(unit.kind(), unit.cost(d));
}

// issue() for the DPE: as the others, but A and B may be read outside the local store.
UnitOutcome FunctionalUnits::issue_matmul(const RiscvCore& core, uint64_t addr) {
  mtia_pe_matmul_desc d;
  if (isa::Status bad = detail::read_descriptor_bytes(core, addr, &d, sizeof d); !bad) {
    return finish(UnitKind::kDpe, bad.error());
  }
  if (isa::Status bad = dpe_.validate(d); !bad) return finish(UnitKind::kDpe, bad.error());
  Touched touched = dpe_.touched(d);
  OperandView va, vb;
  if (operand_source_ && d.in_dtype == MTIA_PE_DT_FP32) {
    const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
    const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
    va = operand_source_(d.a - MTIA_PE_LS_BASE, ta ? d.k : d.m, uint64_t{ta ? d.m : d.k} * 4,
                         uint64_t{d.lda} * 4);
    vb = operand_source_(d.b - MTIA_PE_LS_BASE, tb ? d.n : d.k, uint64_t{tb ? d.k : d.n} * 4,
                         uint64_t{d.ldb} * 4);
    if (va.data != nullptr) touched[0] = Extent{};
    if (vb.data != nullptr) touched[1] = Extent{};
  }
  if (defer_) {
    defer_(touched, dpe_.host_cost_ns(d), [this, d, va, vb] { dpe_.execute(d, va, vb); });
  } else {
    dpe_.execute(d, va, vb);
  }
  return finish(UnitKind::kDpe, dpe_.cost(d));
}

}  // namespace mtia::sim::pe
