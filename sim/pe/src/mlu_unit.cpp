#include "mtia/sim/pe/mlu_unit.h"

#include <algorithm>
#include <cstring>

#include "mtia/sim/pe/descriptors.h"
#include "unit_math.h"

namespace mtia::sim::pe {
namespace {

template <typename E>
void transpose_tile(const uint8_t* src, uint8_t* dst, uint32_t rows, uint32_t cols, uint32_t ld_src,
                    uint32_t ld_dst) {
  // Blocked so that both the reads and the writes stay within a few cache lines per block.
  constexpr uint32_t kBlock = 32;
  for (uint32_t r0 = 0; r0 < rows; r0 += kBlock) {
    const uint32_t r1 = std::min(rows, r0 + kBlock);
    for (uint32_t c0 = 0; c0 < cols; c0 += kBlock) {
      const uint32_t c1 = std::min(cols, c0 + kBlock);
      for (uint32_t r = r0; r < r1; ++r) {
        for (uint32_t c = c0; c < c1; ++c) {
          E v;
          std::memcpy(&v, src + (size_t{r} * ld_src + c) * sizeof(E), sizeof(E));
          std::memcpy(dst + (size_t{c} * ld_dst + r) * sizeof(E), &v, sizeof(E));
        }
      }
    }
  }
}

}  // namespace

isa::Status MluUnit::validate(const mtia_pe_mlu_desc& d) const {
  return pe::validate(d, ls_.size());
}

UnitWork MluUnit::cost(const mtia_pe_mlu_desc& d) const {
  const uint64_t bytes = uint64_t{d.rows} * d.cols * d.elem_size;
  return {timing_.mlu_issue_cycles + detail::ceil_div(bytes, timing_.mlu_bytes_per_cycle), bytes};
}

Touched MluUnit::touched(const mtia_pe_mlu_desc& d) const {
  const bool transpose = d.op == MTIA_PE_MLU_TRANSPOSE;
  return {tile_extent(d.src - MTIA_PE_LS_BASE, d.rows, d.cols, d.ld_src, d.elem_size),
          tile_extent(d.dst - MTIA_PE_LS_BASE, transpose ? d.cols : d.rows,
                      transpose ? d.rows : d.cols, d.ld_dst, d.elem_size),
          Extent{}, Extent{}};
}

// Host copies: about 8 bytes/ns.
uint64_t MluUnit::host_cost_ns(const mtia_pe_mlu_desc& d) const {
  return uint64_t{d.rows} * d.cols * d.elem_size / 8;
}

void MluUnit::execute(const mtia_pe_mlu_desc& d) {
  const uint8_t* src = at(d.src);
  uint8_t* dst = at(d.dst);
  const size_t es = d.elem_size;
  if (d.op == MTIA_PE_MLU_COPY) {
    for (uint32_t r = 0; r < d.rows; ++r) {
      std::memcpy(dst + size_t{r} * d.ld_dst * es, src + size_t{r} * d.ld_src * es, d.cols * es);
    }
    return;
  }
  switch (d.elem_size) {
    case 1:
      return transpose_tile<uint8_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    case 2:
      return transpose_tile<uint16_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    case 4:
      return transpose_tile<uint32_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    default:
      return transpose_tile<uint64_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
  }
}

}  // namespace mtia::sim::pe
