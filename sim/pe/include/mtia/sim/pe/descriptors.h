// Validating readers for the unit descriptors of mtia/isa/pe/pe_ops.h.
//
// A unit model calls read_descriptor<T>(core, rs1) when the core issues an instruction; a
// rejection becomes UnitResponse::fault(reason), so the kernel fails with the reason instead
// of the unit touching memory it should not. The rules are the ones docs/pe-isa.md states:
// version, kind, reserved fields, enums, dtype combinations, shapes, alignment, and every
// local-store operand inside this PE's local store. Device-side DMA addresses are checked
// only for overflow here; whether they exist is the memory system's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/result.h"
#include "mtia/sim/pe/riscv_core.h"

namespace mtia::sim::pe {

// Bytes per element of an mtia_pe_dtype, or 0 for an undefined dtype.
unsigned dtype_bytes(uint8_t dtype);
// "fp32", "bf16", ...; "invalid" for an undefined dtype.
const char* dtype_name(uint8_t dtype);

// Each returns nothing when the descriptor is valid for a local store of `ls_bytes` bytes.
isa::Status validate(const mtia_pe_dma_desc& d, uint64_t ls_bytes);
isa::Status validate(const mtia_pe_matmul_desc& d, uint64_t ls_bytes);
isa::Status validate(const mtia_pe_se_desc& d, uint64_t ls_bytes);
isa::Status validate(const mtia_pe_re_desc& d, uint64_t ls_bytes);
isa::Status validate(const mtia_pe_mlu_desc& d, uint64_t ls_bytes);

namespace detail {
// Copies `bytes` bytes at core address `addr` into dst, or says why it cannot.
isa::Status read_descriptor_bytes(const RiscvCore& core, uint64_t addr, void* dst, size_t bytes);
}  // namespace detail

// Reads the descriptor at core address `addr` (8-byte aligned, mapped) and validates it.
template <typename Desc>
isa::Result<Desc> read_descriptor(const RiscvCore& core, uint64_t addr) {
  Desc d;
  if (isa::Status bad = detail::read_descriptor_bytes(core, addr, &d, sizeof d); !bad) {
    return bad.error();
  }
  if (isa::Status bad = validate(d, core.local_store().size()); !bad) return bad.error();
  return d;
}

}  // namespace mtia::sim::pe
