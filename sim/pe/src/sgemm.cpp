#include "mtia/sim/pe/sgemm.h"

#include <cstdio>
#include <optional>
#include <string>

#include "mtia/settings/settings.h"

namespace mtia::sim::pe {

// The builds of sgemm_kernel.cpp, one per instruction set (see CMakeLists.txt).
void sgemm_baseline(bool, bool, uint32_t, uint32_t, uint32_t, const float*, size_t, const float*,
                    size_t, bool, float*, size_t);
void sgemm_avx2(bool, bool, uint32_t, uint32_t, uint32_t, const float*, size_t, const float*,
                size_t, bool, float*, size_t);
void sgemm_avx512(bool, bool, uint32_t, uint32_t, uint32_t, const float*, size_t, const float*,
                  size_t, bool, float*, size_t);

std::vector<SgemmBuild> sgemm_builds() {
  std::vector<SgemmBuild> builds;

#if defined(__x86_64__)
  __builtin_cpu_init();
#if defined(MTIA_HAVE_SGEMM_AVX512)
  // Eigen's AVX-512 kernel holds twice the accumulators: on cores with full-width AVX-512
  // units it runs about twice as fast as the AVX2 one, elsewhere about as fast.
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw")) {
    builds.push_back({"avx512", &sgemm_avx512});
  }
#endif
#if defined(MTIA_HAVE_SGEMM_AVX2)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    builds.push_back({"avx2+fma", &sgemm_avx2});
  }
#endif
#endif
  builds.push_back({"baseline", &sgemm_baseline});
  return builds;
}

namespace {

// MTIA_EMU_DPE_GEMM names a build to use instead of the fastest (for measurements); an unknown
// or unavailable name is reported and the fastest used.
SgemmBuild choose() {
  const std::vector<SgemmBuild> builds = sgemm_builds();
  const std::optional<std::string> choice = settings::read("MTIA_EMU_DPE_GEMM");
  if (!choice || *choice == "auto") return builds.front();
  const char* want = choice->c_str();
  std::string names;
  for (const SgemmBuild& b : builds) {
    if (want == std::string(b.name)) return b;
    names += std::string(" ") + b.name;
  }
  std::fprintf(stderr,
               "mtia-emu: MTIA_EMU_DPE_GEMM=%s is not one of this host's builds (auto%s); "
               "using %s\n",
               want, names.c_str(), builds.front().name);
  return builds.front();
}

const SgemmBuild chosen = choose();

}  // namespace

void sgemm(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float* a,
           size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  if (m == 0 || n == 0) return;
  chosen.fn(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
}

const char* sgemm_variant() {
  return chosen.name;
}

}  // namespace mtia::sim::pe
