// Private to the SE unit (se_unit.cpp): the scalar semantics of every SE op (docs/pe-isa.md,
// "Numerics"), and se_fn<Op, T>(), the function one element of op Op computes over dtype T's
// compute type (float for the floating dtypes, int64 for integers and bool). The loops, the
// dtypes and the arity come from the op table (isa/pe/se_ops.h); this file only says what
// each op does to one element.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "elements.h"
#include "mtia/isa/pe/pe_ops.h"
#include "unit_math.h"

namespace mtia::sim::pe::detail {

template <typename C>
C add(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return a + b;
  else
    return wrap(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
template <typename C>
C sub(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return a - b;
  else
    return wrap(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
template <typename C>
C mul(C a, C b) {
  if constexpr (std::is_same_v<C, float>)
    return a * b;
  else
    return wrap(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}
template <typename C>
C neg(C a) {
  if constexpr (std::is_same_v<C, float>)
    return -a;
  else
    return wrap(0 - static_cast<uint64_t>(a));
}
// Truncating division with the core's DIV rules: x/0 = -1, MIN/-1 = MIN (the negation wraps
// in the destination width, since the int64 compute value of a narrower MIN negates to
// 2^(w-1), which the store wraps back to MIN).
template <typename C>
C div(C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    return a / b;
  } else {
    if (b == 0) return -1;
    if (b == -1) return neg(a);
    return a / b;
  }
}
template <typename C>
C abs_value(C a) {
  if constexpr (std::is_same_v<C, float>)
    return std::fabs(a);
  else
    return a < 0 ? neg(a) : a;  // abs(MIN) wraps to MIN
}
template <typename C>
C relu(C a) {
  if constexpr (std::is_same_v<C, float>)
    return (a > 0.0f || std::isnan(a)) ? a : 0.0f;
  else
    return a > 0 ? a : 0;
}

template <typename C>
C sign(C a) {
  if constexpr (std::is_same_v<C, float>) {
    if (std::isnan(a)) return a;
    return static_cast<float>((a > 0.0f) - (a < 0.0f));
  } else {
    return (a > 0) - (a < 0);
  }
}
// C's fmod: the remainder has the dividend's sign. An integer divisor of 0 gives 0 (the host
// raises before launching, as PyTorch does on the CPU).
template <typename C>
C fmod_value(C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    return std::fmod(a, b);
  } else {
    if (b == 0 || b == -1) return 0;  // -1: MIN % -1 would trap
    return a % b;
  }
}
// Python's modulo: the remainder has the divisor's sign.
template <typename C>
C remainder_value(C a, C b) {
  const C m = fmod_value(a, b);
  if constexpr (std::is_same_v<C, float>) {
    if (b == 0.0f) return m;  // NaN
  }
  return (m != 0 && ((b < 0) != (m < 0))) ? m + b : m;
}
// Division rounded toward negative infinity.
template <typename C>
C floor_div(C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    if (b == 0.0f) return a / b;
    // From the exact remainder, so that a quotient just below an integer is not rounded up.
    const float m = std::fmod(a, b);
    float q = (a - m) / b;
    if (m != 0.0f && ((b < 0.0f) != (m < 0.0f))) q -= 1.0f;
    if (q == 0.0f) return std::copysign(0.0f, a / b);
    float f = std::floor(q);
    if (q - f > 0.5f) f += 1.0f;
    return f;
  } else {
    if (b == 0) return 0;
    if (b == -1) return neg(a);
    C q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
  }
}
// Shifts in 64 bits (the store wraps to the dtype): a count outside [0, 64) gives 0 to the left
// and the sign to the right.
inline int64_t shift_left(int64_t a, int64_t b) {
  if (b < 0 || b >= 64) return 0;
  return static_cast<int64_t>(static_cast<uint64_t>(a) << b);
}
inline int64_t shift_right(int64_t a, int64_t b) {
  if (b < 0 || b >= 64) return a < 0 ? -1 : 0;
  return a >> b;
}

// GELU in forms that keep their accuracy for negative inputs, where 1 + erf(x) and
// 1 + tanh(x) would cancel: 0.5 a erfc(-a / sqrt 2), and a / (1 + exp(-2 inner)).
inline float gelu(float a) {
  return 0.5f * a * std::erfc(-a * 0.70710678118654752f);
}
inline float gelu_tanh(float a) {
  const float inner = 0.79788456080286536f * (a + 0.044715f * a * a * a);  // sqrt(2/pi)
  return a / (1.0f + std::exp(-2.0f * inner));
}

// Their derivatives: Phi(a) + a phi(a); and, with s = sigmoid(2 inner) = (1 + tanh(inner)) / 2,
// s + 2 a s (1 - s) inner'(a), which stays finite where tanh saturates.
inline float gelu_grad(float a) {
  const float cdf = 0.5f * std::erfc(-a * 0.70710678118654752f);
  const float pdf = 0.39894228040143268f * std::exp(-0.5f * a * a);  // 1/sqrt(2 pi)
  return cdf + a * pdf;
}
inline float gelu_tanh_grad(float a) {
  if (std::isinf(a)) return std::numeric_limits<float>::quiet_NaN();  // inf * 0, as PyTorch
  const float beta = 0.79788456080286536f, kappa = 0.044715f;
  const float inner = beta * (a + kappa * a * a * a);
  const float s = 1.0f / (1.0f + std::exp(-2.0f * inner));
  const float t = s * (1.0f - s);
  if (t == 0.0f) return s;  // saturated: the second term is 0 (a * a may be infinite)
  return s + 2.0f * a * t * beta * (1.0f + 3.0f * kappa * a * a);
}

// The function of one element of op `Op` on dtype T: takes the op's arity of T::C values and
// returns the output's compute value (int64 0/1 for a bool output). The ops whose elements are
// not computed one by one (the fp32 block functions, SELECT, CAST) are se_unit.cpp's.
template <int Op, typename T>
auto se_fn() {
  using C = typename T::C;
  // clang-format off
  if constexpr (Op == MTIA_PE_SE_ADD) return [](C a, C b) { return add(a, b); };
  else if constexpr (Op == MTIA_PE_SE_SUB) return [](C a, C b) { return sub(a, b); };
  else if constexpr (Op == MTIA_PE_SE_MUL) return [](C a, C b) { return mul(a, b); };
  else if constexpr (Op == MTIA_PE_SE_DIV) return [](C a, C b) { return div(a, b); };
  else if constexpr (Op == MTIA_PE_SE_MIN) return [](C a, C b) { return min_nan(a, b); };
  else if constexpr (Op == MTIA_PE_SE_MAX) return [](C a, C b) { return max_nan(a, b); };
  else if constexpr (Op == MTIA_PE_SE_ABS) return [](C a) { return abs_value(a); };
  else if constexpr (Op == MTIA_PE_SE_NEG) return [](C a) { return neg(a); };
  else if constexpr (Op == MTIA_PE_SE_RELU) return [](C a) { return relu(a); };
  else if constexpr (Op == MTIA_PE_SE_SIGN) return [](C a) { return sign(a); };
  else if constexpr (Op == MTIA_PE_SE_FMOD) return [](C a, C b) { return fmod_value(a, b); };
  else if constexpr (Op == MTIA_PE_SE_REMAINDER) return [](C a, C b) { return remainder_value(a, b); };
  else if constexpr (Op == MTIA_PE_SE_FLOOR_DIV) return [](C a, C b) { return floor_div(a, b); };
  else if constexpr (Op == MTIA_PE_SE_CLAMP) return [](C a, C lo, C hi) { return min_nan(max_nan(a, lo), hi); };
  // Shifts in 64 bits; the store wraps to the dtype.
  else if constexpr (Op == MTIA_PE_SE_SHL) return shift_left;
  else if constexpr (Op == MTIA_PE_SE_SHR) return shift_right;
  // IEEE comparisons on the exact values (fp16/bf16 widen exactly): NaN is unordered.
  else if constexpr (Op == MTIA_PE_SE_EQ) return [](C a, C b) -> int64_t { return a == b; };
  else if constexpr (Op == MTIA_PE_SE_NE) return [](C a, C b) -> int64_t { return a != b; };
  else if constexpr (Op == MTIA_PE_SE_LT) return [](C a, C b) -> int64_t { return a < b; };
  else if constexpr (Op == MTIA_PE_SE_LE) return [](C a, C b) -> int64_t { return a <= b; };
  else if constexpr (Op == MTIA_PE_SE_GT) return [](C a, C b) -> int64_t { return a > b; };
  else if constexpr (Op == MTIA_PE_SE_GE) return [](C a, C b) -> int64_t { return a >= b; };
  // Logical: non-zero is true; NaN is non-zero, -0.0 is zero.
  else if constexpr (Op == MTIA_PE_SE_LAND) return [](C a, C b) -> int64_t { return (a != 0) && (b != 0); };
  else if constexpr (Op == MTIA_PE_SE_LOR) return [](C a, C b) -> int64_t { return (a != 0) || (b != 0); };
  else if constexpr (Op == MTIA_PE_SE_LXOR) return [](C a, C b) -> int64_t { return (a != 0) != (b != 0); };
  else if constexpr (Op == MTIA_PE_SE_LNOT) return [](C a) -> int64_t { return a == 0; };
  else if constexpr (Op == MTIA_PE_SE_BAND) return [](int64_t a, int64_t b) { return a & b; };
  else if constexpr (Op == MTIA_PE_SE_BOR) return [](int64_t a, int64_t b) { return a | b; };
  else if constexpr (Op == MTIA_PE_SE_BXOR) return [](int64_t a, int64_t b) { return a ^ b; };
  // On bool, bitwise not is logical not (~true is false), as in PyTorch.
  else if constexpr (Op == MTIA_PE_SE_BNOT && std::is_same_v<T, Bool>) return [](int64_t a) -> int64_t { return a == 0; };
  else if constexpr (Op == MTIA_PE_SE_BNOT) return [](int64_t a) { return ~a; };
  // Floating functions: in fp32 with the host's functions, rounded once to the dtype on store.
  else if constexpr (Op == MTIA_PE_SE_LOG) return [](float a) { return std::log(a); };
  else if constexpr (Op == MTIA_PE_SE_SQRT) return [](float a) { return std::sqrt(a); };
  else if constexpr (Op == MTIA_PE_SE_RSQRT) return [](float a) { return 1.0f / std::sqrt(a); };
  else if constexpr (Op == MTIA_PE_SE_ERF) return [](float a) { return std::erf(a); };
  else if constexpr (Op == MTIA_PE_SE_SIN) return [](float a) { return std::sin(a); };
  else if constexpr (Op == MTIA_PE_SE_COS) return [](float a) { return std::cos(a); };
  else if constexpr (Op == MTIA_PE_SE_TAN) return [](float a) { return std::tan(a); };
  else if constexpr (Op == MTIA_PE_SE_ASIN) return [](float a) { return std::asin(a); };
  else if constexpr (Op == MTIA_PE_SE_ACOS) return [](float a) { return std::acos(a); };
  else if constexpr (Op == MTIA_PE_SE_ATAN) return [](float a) { return std::atan(a); };
  else if constexpr (Op == MTIA_PE_SE_SINH) return [](float a) { return std::sinh(a); };
  else if constexpr (Op == MTIA_PE_SE_COSH) return [](float a) { return std::cosh(a); };
  else if constexpr (Op == MTIA_PE_SE_ASINH) return [](float a) { return std::asinh(a); };
  else if constexpr (Op == MTIA_PE_SE_ACOSH) return [](float a) { return std::acosh(a); };
  else if constexpr (Op == MTIA_PE_SE_ATANH) return [](float a) { return std::atanh(a); };
  else if constexpr (Op == MTIA_PE_SE_EXPM1) return [](float a) { return std::expm1(a); };
  else if constexpr (Op == MTIA_PE_SE_LOG1P) return [](float a) { return std::log1p(a); };
  else if constexpr (Op == MTIA_PE_SE_LOG2) return [](float a) { return std::log2(a); };
  else if constexpr (Op == MTIA_PE_SE_LOG10) return [](float a) { return std::log10(a); };
  else if constexpr (Op == MTIA_PE_SE_EXP2) return [](float a) { return std::exp2(a); };
  else if constexpr (Op == MTIA_PE_SE_ERFC) return [](float a) { return std::erfc(a); };
  else if constexpr (Op == MTIA_PE_SE_LGAMMA) return [](float a) { return std::lgamma(a); };
  else if constexpr (Op == MTIA_PE_SE_FLOOR) return [](float a) { return std::floor(a); };
  else if constexpr (Op == MTIA_PE_SE_CEIL) return [](float a) { return std::ceil(a); };
  // The default rounding mode: to nearest, ties to even.
  else if constexpr (Op == MTIA_PE_SE_ROUND) return [](float a) { return std::nearbyint(a); };
  else if constexpr (Op == MTIA_PE_SE_TRUNC) return [](float a) { return std::trunc(a); };
  else if constexpr (Op == MTIA_PE_SE_RECIPROCAL) return [](float a) { return 1.0f / a; };
  else if constexpr (Op == MTIA_PE_SE_GELU) return gelu;
  else if constexpr (Op == MTIA_PE_SE_GELU_TANH) return gelu_tanh;
  else if constexpr (Op == MTIA_PE_SE_GELU_GRAD) return gelu_grad;
  else if constexpr (Op == MTIA_PE_SE_GELU_TANH_GRAD) return gelu_tanh_grad;
  else if constexpr (Op == MTIA_PE_SE_POW) return [](float a, float b) { return std::pow(a, b); };
  else if constexpr (Op == MTIA_PE_SE_ATAN2) return [](float a, float b) { return std::atan2(a, b); };
  else if constexpr (Op == MTIA_PE_SE_HYPOT) return [](float a, float b) { return std::hypot(a, b); };
  else if constexpr (Op == MTIA_PE_SE_COPYSIGN) return [](float a, float b) { return std::copysign(a, b); };
  else static_assert(Op < 0, "an SE op of isa/pe/se_ops.h has no element function here");
  // clang-format on
}

}  // namespace mtia::sim::pe::detail
