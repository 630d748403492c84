#include "mtia/sim/pe/sgemm.h"

namespace mtia::sim::pe {

// The AVX2 build of sgemm_kernel.cpp (the baseline one is declared in the header).
void sgemm_avx2(bool, bool, uint32_t, uint32_t, uint32_t, const float*, size_t, const float*,
                size_t, bool, float*, size_t);

namespace {

using Fn = decltype(&sgemm_baseline);

Fn choose() {
#if defined(__x86_64__) && defined(MTIA_HAVE_SGEMM_AVX2)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &sgemm_avx2;
#endif
  return &sgemm_baseline;
}

const Fn chosen = choose();

}  // namespace

void sgemm(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float* a,
           size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  chosen(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

const char* sgemm_variant() {
  return chosen == &sgemm_baseline ? "baseline" : "avx2+fma";
}

}  // namespace mtia::sim::pe
