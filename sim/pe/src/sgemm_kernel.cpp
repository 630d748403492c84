// One build of the DPE's fp32 GEMM (sgemm.h). CMake compiles this file twice, with different
// instruction sets, and MTIA_SGEMM_NAME naming each build's function; sgemm.cpp picks one.
#define EIGEN_DONT_PARALLELIZE  // the PE grid decides which host thread runs each matmul
// Each build gets Eigen under its own namespace name: otherwise the linker keeps one copy of
// each template instance for both builds, and the AVX2 build may run baseline code (or the
// baseline build AVX2 code, on a CPU without it).
#ifndef MTIA_EIGEN_NS
#error "MTIA_EIGEN_NS must name this build's Eigen namespace"
#endif
#define Eigen MTIA_EIGEN_NS
#include <Eigen/Core>

#include <cstddef>
#include <cstdint>

#ifndef MTIA_SGEMM_NAME
#error "MTIA_SGEMM_NAME must name this build's function"
#endif

namespace mtia::sim::pe {

void MTIA_SGEMM_NAME(bool trans_a, bool trans_b, uint32_t m, uint32_t n, uint32_t k, const float* a,
                     size_t lda, const float* b, size_t ldb, bool accumulate, float* c,
                     size_t ldc) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Stride = Eigen::OuterStride<>;
  using In = Eigen::Map<const Matrix, Eigen::Unaligned, Stride>;
  using Out = Eigen::Map<Matrix, Eigen::Unaligned, Stride>;
  const Eigen::Index M = m, N = n, K = k;
  const auto lda_ = static_cast<Eigen::Index>(lda), ldb_ = static_cast<Eigen::Index>(ldb);
  Out C(c, M, N, Stride(static_cast<Eigen::Index>(ldc)));
  // Four shapes, so that Eigen sees plain (transposed) maps and picks its packed GEMM.
  auto run = [&](const auto& A, const auto& B) {
    if (accumulate) {
      C.noalias() += A * B;
    } else {
      C.noalias() = A * B;
    }
  };
  if (!trans_a && !trans_b) run(In(a, M, K, Stride(lda_)), In(b, K, N, Stride(ldb_)));
  if (!trans_a && trans_b) run(In(a, M, K, Stride(lda_)), In(b, N, K, Stride(ldb_)).transpose());
  if (trans_a && !trans_b) run(In(a, K, M, Stride(lda_)).transpose(), In(b, K, N, Stride(ldb_)));
  if (trans_a && trans_b) {
    run(In(a, K, M, Stride(lda_)).transpose(), In(b, N, K, Stride(ldb_)).transpose());
  }
}

}  // namespace mtia::sim::pe
