#include "vector_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>

// libmvec's SSE variants (x86-64 vector function ABI, "b" = SSE, N4/N2 lanes); glibc picks the
// best implementation for the CPU at load time.
extern "C" __m128 _ZGVbN4v_expf(__m128 x);
extern "C" __m128d _ZGVbN2v_exp(__m128d x);
#endif

namespace mtia::sim::pe::detail {

namespace {

// e^v over a block, four lanes at a time; the tail goes through a padded vector so that every
// element takes the same code.
void expf_lanes(float* v, size_t n) {
#if defined(__x86_64__)
  size_t i = 0;
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(v + i, _ZGVbN4v_expf(_mm_loadu_ps(v + i)));
  if (i < n) {
    float tail[4] = {0, 0, 0, 0};
    std::memcpy(tail, v + i, (n - i) * sizeof(float));
    _mm_storeu_ps(tail, _ZGVbN4v_expf(_mm_loadu_ps(tail)));
    std::memcpy(v + i, tail, (n - i) * sizeof(float));
  }
#else
  for (size_t i = 0; i < n; ++i) v[i] = std::exp(v[i]);
#endif
}

// e^v in double over a block of doubles, two lanes at a time.
void exp_lanes(double* v, size_t n) {
#if defined(__x86_64__)
  size_t i = 0;
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(v + i, _ZGVbN2v_exp(_mm_loadu_pd(v + i)));
  if (i < n) {
    double tail[2] = {v[i], 0};
    _mm_storeu_pd(tail, _ZGVbN2v_exp(_mm_loadu_pd(tail)));
    v[i] = tail[0];
  }
#else
  for (size_t i = 0; i < n; ++i) v[i] = std::exp(v[i]);
#endif
}

constexpr size_t kChunk = 256;  // elements per pass through a stack buffer

}  // namespace

namespace baseline {

void exp_block(float* v, size_t n) {
  expf_lanes(v, n);
}

void sigmoid_block(float* v, size_t n) {
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t m = std::min(kChunk, n - i0);
    float* a = v + i0;
    float e[kChunk];
    for (size_t i = 0; i < m; ++i) e[i] = -std::fabs(a[i]);  // e^-|a|: never overflows
    expf_lanes(e, m);
    for (size_t i = 0; i < m; ++i)
      a[i] = a[i] >= 0.0f ? 1.0f / (1.0f + e[i]) : e[i] / (1.0f + e[i]);
  }
}

void silu_block(float* v, size_t n) {
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t m = std::min(kChunk, n - i0);
    float* a = v + i0;
    float s[kChunk];
    std::memcpy(s, a, m * sizeof(float));
    sigmoid_block(s, m);
    for (size_t i = 0; i < m; ++i) a[i] = std::isinf(a[i]) && a[i] < 0 ? -0.0f : a[i] * s[i];
  }
}

void tanh_block(float* v, size_t n) {
  for (size_t i0 = 0; i0 < n; i0 += kChunk) {
    const size_t m = std::min(kChunk, n - i0);
    float* a = v + i0;
    double e[kChunk];
    for (size_t i = 0; i < m; ++i) e[i] = 2.0 * std::min(std::fabs(static_cast<double>(a[i])), 9.5);
    exp_lanes(e, m);
    for (size_t i = 0; i < m; ++i) {
      const double x = std::fabs(static_cast<double>(a[i]));
      // Below 2^-13 tanh(a) rounds to a; past 9.1 to +-1; NaN stays NaN, -0 stays -0.
      if (x < 0x1p-13 || std::isnan(a[i])) continue;
      if (x > 9.1) {
        a[i] = std::copysign(1.0f, a[i]);
        continue;
      }
      a[i] =
          static_cast<float>(std::copysign((e[i] - 1.0) / (e[i] + 1.0), static_cast<double>(a[i])));
    }
  }
}

}  // namespace baseline

namespace {

bool have_avx2() {
#if defined(MTIA_HAVE_VECTOR_MATH_AVX2)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
#else
  return false;
#endif
}

const bool kAvx2 = have_avx2();

}  // namespace

#if defined(MTIA_HAVE_VECTOR_MATH_AVX2)
#define MTIA_VECTOR_MATH_DISPATCH(name)                     \
  void name(float* v, size_t n) {                           \
    return kAvx2 ? avx2::name(v, n) : baseline::name(v, n); \
  }
#else
#define MTIA_VECTOR_MATH_DISPATCH(name) \
  void name(float* v, size_t n) {       \
    return baseline::name(v, n);        \
  }
#endif
MTIA_VECTOR_MATH_DISPATCH(exp_block)
MTIA_VECTOR_MATH_DISPATCH(sigmoid_block)
MTIA_VECTOR_MATH_DISPATCH(silu_block)
MTIA_VECTOR_MATH_DISPATCH(tanh_block)
#undef MTIA_VECTOR_MATH_DISPATCH

const char* vector_math_variant() {
  return kAvx2 ? "avx2" : "baseline";
}

}  // namespace mtia::sim::pe::detail
