#include "mtia/sim/pe/dpe_unit.h"

#include <algorithm>

#include "elements.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/numerics.h"
#include "mtia/sim/pe/sgemm.h"
#include "unit_math.h"

namespace mtia::sim::pe {
namespace {

// Widens a stored rows x cols tile (leading dimension ld) of `dt` (fp16, bf16 or int8) into
// packed fp32. Exact for all three.
void widen_tile(uint8_t dt, const uint8_t* src, uint32_t rows, uint32_t cols, uint32_t ld,
                float* dst) {
  const size_t es = dtype_bytes(dt);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + size_t{r} * ld * es;
    float* out = dst + size_t{r} * cols;
    if (dt == MTIA_PE_DT_FP16) {
      fp16_to_fp32(row, out, cols);
    } else if (dt == MTIA_PE_DT_BF16) {
      bf16_to_fp32(row, out, cols);
    } else {
      for (uint32_t c = 0; c < cols; ++c) out[c] = static_cast<int8_t>(row[c]);
    }
  }
}

}  // namespace

isa::Status DpeUnit::validate(const mtia_pe_matmul_desc& d) const {
  return pe::validate(d, ls_.size());
}

UnitWork DpeUnit::cost(const mtia_pe_matmul_desc& d) const {
  // m*n*k <= 2^60: each pair of m, n, k spans a tile that fits the local store.
  const uint64_t macs = uint64_t{d.m} * d.n * d.k;
  const uint32_t rate = d.in_dtype == MTIA_PE_DT_INT8   ? timing_.dpe_int8_macs_per_cycle
                        : d.in_dtype == MTIA_PE_DT_FP32 ? timing_.dpe_fp32_macs_per_cycle
                                                        : timing_.dpe_fp16_macs_per_cycle;
  return {timing_.dpe_issue_cycles + detail::ceil_div(macs, rate), macs};
}

Touched DpeUnit::touched(const mtia_pe_matmul_desc& d) const {
  const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
  const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
  const unsigned ies = dtype_bytes(d.in_dtype), oes = dtype_bytes(d.out_dtype);
  return {tile_extent(d.a - MTIA_PE_LS_BASE, ta ? d.k : d.m, ta ? d.m : d.k, d.lda, ies),
          tile_extent(d.b - MTIA_PE_LS_BASE, tb ? d.n : d.k, tb ? d.k : d.n, d.ldb, ies),
          tile_extent(d.c - MTIA_PE_LS_BASE, d.m, d.n, d.ldc, oes), Extent{}};
}

// Packed fp32 GEMM on the host: about 32 MACs/ns.
uint64_t DpeUnit::host_cost_ns(const mtia_pe_matmul_desc& d) const {
  return uint64_t{d.m} * d.n * d.k / 32;
}

void DpeUnit::execute(const mtia_pe_matmul_desc& d, MatmulOperandView va, MatmulOperandView vb) {
  using detail::I32;
  const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
  const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
  const bool accumulate = (d.hdr.flags & MTIA_PE_MM_ACCUMULATE) != 0;
  // Stored shapes of A and B (rows x cols, row-major).
  const uint32_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
  const uint32_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
  const uint8_t* a = at(d.a);
  const uint8_t* b = at(d.b);
  uint8_t* c = at(d.c);

  if (d.in_dtype == MTIA_PE_DT_INT8) {
    // int8 -> int32 on the same sgemm, exactly: every product has |a*b| <= 2^14, so a sum of
    // at most 1024 of them is an integer of magnitude <= 2^24, which fp32 holds exactly
    // whatever the summation order. Longer k is split into such chunks, whose fp32 results are
    // added in uint32 (wrapping modulo 2^32, as the spec says).
    constexpr uint32_t kExactK = 1024;
    const uint32_t m = d.m, n = d.n;
    fa_.resize(size_t{a_rows} * a_cols);
    fb_.resize(size_t{b_rows} * b_cols);
    fc_.resize(size_t{m} * n);
    acc_.resize(size_t{m} * n);
    widen_tile(d.in_dtype, a, a_rows, a_cols, d.lda, fa_.data());
    widen_tile(d.in_dtype, b, b_rows, b_cols, d.ldb, fb_.data());
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        const uint8_t* cp = c + (size_t{i} * d.ldc + j) * 4;
        acc_[size_t{i} * n + j] = accumulate ? static_cast<uint32_t>(I32::load(cp)) : 0u;
      }
    }
    for (uint32_t k0 = 0; k0 < d.k; k0 += kExactK) {
      const uint32_t kc = std::min(kExactK, d.k - k0);
      // The chunk's columns of A (rows, when A is stored transposed) and rows of B.
      const float* ak = fa_.data() + (ta ? size_t{k0} * a_cols : k0);
      const float* bk = fb_.data() + (tb ? k0 : size_t{k0} * b_cols);
      sgemm(ta, tb, m, n, kc, ak, a_cols, bk, b_cols, false, fc_.data(), n);
      for (size_t t = 0; t < fc_.size(); ++t) {
        acc_[t] += static_cast<uint32_t>(static_cast<int32_t>(fc_[t]));
      }
    }
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        I32::store(c + (size_t{i} * d.ldc + j) * 4, static_cast<int32_t>(acc_[size_t{i} * n + j]));
      }
    }
    return;
  }

  // Floating: one cblas_sgemm on the whole tile. fp16/bf16 are widened to fp32 first (exact),
  // so every product is exact and the sums are fp32, as the spec says.
  const float* fa = nullptr;
  const float* fb = nullptr;
  size_t lda = 0, ldb = 0;
  if (d.in_dtype == MTIA_PE_DT_FP32) {
    fa = va.data != nullptr ? va.data : reinterpret_cast<const float*>(a);
    fb = vb.data != nullptr ? vb.data : reinterpret_cast<const float*>(b);
    lda = va.data != nullptr ? va.ld : d.lda;
    ldb = vb.data != nullptr ? vb.ld : d.ldb;
  } else {
    fa_.resize(size_t{a_rows} * a_cols);
    fb_.resize(size_t{b_rows} * b_cols);
    widen_tile(d.in_dtype, a, a_rows, a_cols, d.lda, fa_.data());
    widen_tile(d.in_dtype, b, b_rows, b_cols, d.ldb, fb_.data());
    fa = fa_.data();
    fb = fb_.data();
    lda = a_cols;
    ldb = b_cols;
  }
  // Overwriting never reads C, so stale NaNs in an overwritten C do not leak into the result.
  sgemm(ta, tb, d.m, d.n, d.k, fa, lda, fb, ldb, accumulate, reinterpret_cast<float*>(c), d.ldc);
}

}  // namespace mtia::sim::pe
