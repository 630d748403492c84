// The DPE's fp32 GEMM on libxsmm's JIT kernels, a build that MTIA_EMU_DPE_GEMM=libxsmm selects
// (sgemm.cpp; bench/dpe_gemm_bench.cpp and docs/performance.md say why it is not the default).
// libxsmm 1.17 makes kernels for a plain or transposed second column-major operand only;
// sgemm_libxsmm() returns false for the shapes it has no kernel for, and the caller runs them on
// Eigen.
#include <libxsmm.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mtia::sim::pe {
namespace {

struct Key {
  uint32_t m, n, k, flags;
  size_t lda, ldb, ldc;
  bool operator==(const Key& o) const {
    return m == o.m && n == o.n && k == o.k && flags == o.flags && lda == o.lda && ldb == o.ldb &&
           ldc == o.ldc;
  }
};

// The kernels a thread used last: a DPE runs the same few shapes over and over, and
// libxsmm's own registry lookup costs about as much as an 8 x 8 x 8 product.
struct Recent {
  static constexpr size_t kSize = 8;
  std::array<Key, kSize> keys{};
  std::array<libxsmm_smmfunction, kSize> fns{};
  size_t next = 0;
};

libxsmm_smmfunction kernel_for(const Key& key) {
  thread_local Recent recent;
  for (size_t i = 0; i < Recent::kSize; ++i) {
    if (recent.fns[i] != nullptr && recent.keys[i] == key) return recent.fns[i];
  }
  // Row-major C = A.B is column-major C^T = B^T.A^T: B is the kernel's first operand.
  const libxsmm_blasint M = key.n, N = key.m, K = key.k;
  const libxsmm_blasint la = static_cast<libxsmm_blasint>(key.ldb);
  const libxsmm_blasint lb = static_cast<libxsmm_blasint>(key.lda);
  const libxsmm_blasint lc = static_cast<libxsmm_blasint>(key.ldc);
  const float alpha = 1.0f, beta = (key.flags & LIBXSMM_GEMM_FLAG_BETA_0) ? 0.0f : 1.0f;
  const int flags = static_cast<int>(key.flags);
  const libxsmm_smmfunction fn =
      libxsmm_smmdispatch(M, N, K, &la, &lb, &lc, &alpha, &beta, &flags, nullptr);
  if (fn != nullptr) {  // a shape without a kernel asks again: rare, and cheap next to Eigen
    recent.keys[recent.next] = key;
    recent.fns[recent.next] = fn;
    recent.next = (recent.next + 1) % Recent::kSize;
  }
  return fn;
}

// C += S, row by row: built for AVX-512 and AVX2 as well (chosen at load time), vectorised.
__attribute__((target_clones("avx512f", "avx2", "default"))) void add_rows(
    float* __restrict c, size_t ldc, const float* __restrict s, uint32_t m, uint32_t n) {
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) c[i * ldc + j] += s[size_t{i} * n + j];
  }
}

// The shortest k for which an accumulating product goes to libxsmm (see sgemm_libxsmm).
constexpr uint32_t kMinAccumulateK = 64;

}  // namespace

// Whether libxsmm's JIT targets at least AVX2 on this host. It was measured against Eigen on
// AVX-512 only; below AVX2 sgemm.cpp keeps Eigen, whose baseline build always works.
bool sgemm_libxsmm_usable() {
  libxsmm_init();
  return libxsmm_get_target_archid() >= LIBXSMM_X86_AVX2;
}

bool sgemm_libxsmm(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float* a,
                   size_t lda, const float* b, size_t ldb, bool accumulate, float* c, size_t ldc) {
  // The kernel's A is our B: a transposed B needs TRANS_A, which libxsmm 1.17 does not JIT.
  if (trans_b || k == 0) return false;
  const uint32_t flags = (trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0) | LIBXSMM_GEMM_FLAG_BETA_0;
  if (!accumulate) {
    const libxsmm_smmfunction fn = kernel_for({m, n, k, flags, lda, ldb, ldc});
    if (fn == nullptr) return false;
    fn(b, a, c);
    return true;
  }
  // C += A.B as C + (A.B): the products summed first, then added to C once, as Eigen does.
  // Summing them into C itself (libxsmm's beta = 1) adds each product to the running total:
  // over a GEMM's k-steps its rounding error grows several times larger (a 128 x 128 x 128
  // accumulated 32 times: 3e-5 relative instead of 4e-6). The extra pass over C costs too
  // much next to a short k (in the emulator, where C is cold, it made mtia-v1's 128 x 64 x 32
  // k-steps slower than Eigen's, which adds inside its kernel): those go to Eigen.
  if (k < kMinAccumulateK) return false;
  const libxsmm_smmfunction fn = kernel_for({m, n, k, flags, lda, ldb, n});
  if (fn == nullptr) return false;
  thread_local std::vector<float> scratch;
  if (scratch.size() < size_t{m} * n) scratch.resize(size_t{m} * n);
  fn(b, a, scratch.data());
  add_rows(c, ldc, scratch.data(), m, n);
  return true;
}

}  // namespace mtia::sim::pe

// libxsmm.a refers to the Fortran BLAS for its own fallback path (libxsmm_sgemm and friends),
// which the emulator never takes: it calls JIT kernels only. These definitions satisfy the
// linker without pulling a BLAS into every program; hidden, so that in a program that links a
// real BLAS too (bench_gemm) nothing but libxsmm sees them.
#define MTIA_NO_BLAS(name)                                                  \
  extern "C" __attribute__((visibility("hidden"))) void name() {            \
    std::fprintf(stderr, "mtia-emu: libxsmm called the BLAS routine " #name \
                         ", which the "                                     \
                         "emulator does not link\n");                       \
    std::abort();                                                           \
  }
MTIA_NO_BLAS(sgemm_)
MTIA_NO_BLAS(dgemm_)
MTIA_NO_BLAS(sgemv_)
MTIA_NO_BLAS(dgemv_)
