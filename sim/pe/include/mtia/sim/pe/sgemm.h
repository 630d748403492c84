// The DPE's floating-point math: C = A.B (or C += A.B) on fp32 row-major tiles, on the calling
// thread only. Eigen does the work; the host's vector units are chosen at run time (an
// AVX-512 build, else an AVX2/FMA build when the CPU has them, a baseline x86-64 build
// otherwise), so one binary runs everywhere and is fast where it can be (MTIA_EMU_DPE_GEMM names
// any build of sgemm_builds()). No global state: safe to call from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mtia::sim::pe {

// A is m x k (k x m stored when trans_a), B is k x n (n x k stored when trans_b), C is m x n;
// ld* are row strides in elements. Without `accumulate` C is overwritten and never read.
void sgemm(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float* a,
           size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc);

using SgemmFn = void (*)(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k,
                         const float* a, size_t lda, const float* b, size_t ldb, bool accumulate,
                         float* c, size_t ldc);

struct SgemmBuild {
  const char* name;  // "avx512", "avx2+fma" or "baseline"
  SgemmFn fn;
};

// The builds this binary holds that the host can run: Eigen's, widest first, the baseline
// last. sgemm() uses the first unless MTIA_EMU_DPE_GEMM names another.
// (Tests run each of them.)
std::vector<SgemmBuild> sgemm_builds();

// The name of the build sgemm() uses on this host.
const char* sgemm_variant();

}  // namespace mtia::sim::pe
