// The AVX2 build of the SE's transcendental blocks (vector_math.h): libmvec's AVX2 variants,
// eight float or four double lanes at a time, and the surrounding arithmetic in the same
// registers. Compiled with -mavx2 (no FMA, so every product and sum rounds as in the baseline
// build); vector_math.cpp calls these only on a CPU with AVX2.
#include <immintrin.h>

#include <cstring>

#include "vector_math.h"

extern "C" __m256 _ZGVdN8v_expf(__m256 x);
extern "C" __m256d _ZGVdN4v_exp(__m256d x);

namespace mtia::sim::pe::detail::avx2 {

namespace {

// Runs f over whole 8-lane vectors, then over the tail through a zero-padded vector, so that
// every element takes the same code whatever its position.
template <typename F>
void for_each_8(float* v, size_t n, F f) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(v + i, f(_mm256_loadu_ps(v + i)));
  if (i < n) {
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tail, v + i, (n - i) * sizeof(float));
    _mm256_storeu_ps(tail, f(_mm256_loadu_ps(tail)));
    std::memcpy(v + i, tail, (n - i) * sizeof(float));
  }
}

__m256 sigmoid8(__m256 a) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  // e^-|a| never overflows; a >= 0: 1 / (1 + e), otherwise e / (1 + e) (NaN takes the second).
  const __m256 e = _ZGVdN8v_expf(_mm256_or_ps(a, sign));
  const __m256 num = _mm256_blendv_ps(e, one, _mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_GE_OQ));
  return _mm256_div_ps(num, _mm256_add_ps(one, e));
}

}  // namespace

void exp_block(float* v, size_t n) {
  for_each_8(v, n, [](__m256 a) { return _ZGVdN8v_expf(a); });
}

void sigmoid_block(float* v, size_t n) {
  for_each_8(v, n, sigmoid8);
}

void silu_block(float* v, size_t n) {
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  for_each_8(v, n, [&](__m256 a) {
    const __m256 r = _mm256_mul_ps(a, sigmoid8(a));
    return _mm256_blendv_ps(r, _mm256_set1_ps(-0.0f), _mm256_cmp_ps(a, neg_inf, _CMP_EQ_OQ));
  });
}

void tanh_block(float* v, size_t n) {
  const __m256d sign = _mm256_set1_pd(-0.0);
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d two = _mm256_set1_pd(2.0);
  const __m256d cap = _mm256_set1_pd(9.5);
  const __m256d tiny = _mm256_set1_pd(0x1p-13);
  const __m256d big = _mm256_set1_pd(9.1);
  for_each_8(v, n, [&](__m256 a8) {
    __m128 out[2];
    for (int h = 0; h < 2; ++h) {
      const __m128 a = h == 0 ? _mm256_castps256_ps128(a8) : _mm256_extractf128_ps(a8, 1);
      const __m256d x = _mm256_cvtps_pd(a);
      const __m256d ax = _mm256_andnot_pd(sign, x);
      const __m256d e = _ZGVdN4v_exp(_mm256_mul_pd(two, _mm256_min_pd(ax, cap)));
      const __m256d q = _mm256_div_pd(_mm256_sub_pd(e, one), _mm256_add_pd(e, one));
      __m128 r = _mm256_cvtpd_ps(_mm256_or_pd(q, _mm256_and_pd(sign, x)));
      // Past 9.1 the result rounds to +-1; below 2^-13 to a itself, and NaN stays NaN.
      const __m128 unit = _mm_or_ps(_mm_set1_ps(1.0f), _mm_and_ps(_mm_set1_ps(-0.0f), a));
      r = _mm_blendv_ps(r, unit, _mm256_cvtpd_ps(_mm256_cmp_pd(ax, big, _CMP_GT_OQ)));
      const __m256d keep =
          _mm256_or_pd(_mm256_cmp_pd(ax, tiny, _CMP_LT_OQ), _mm256_cmp_pd(x, x, _CMP_UNORD_Q));
      out[h] = _mm_blendv_ps(r, a, _mm256_cvtpd_ps(keep));
    }
    return _mm256_set_m128(out[1], out[0]);
  });
}

}  // namespace mtia::sim::pe::detail::avx2
