// The element types of the PE units and their conversions, as docs/pe-isa.md ("Numerics")
// defines them:
//   - fp16 is IEEE binary16 (subnormals kept), bf16 the upper 16 bits of binary32;
//   - narrowing to fp16/bf16 rounds to nearest, ties to even; overflow gives infinity;
//   - a NaN stays a NaN through every conversion, keeping its sign and the top bits of its
//     payload; narrowing conversions return it quiet, widening ones are exact bit extensions;
//   - integer -> floating rounds to nearest even once (never through a wider float first);
//   - floating -> integer truncates toward zero and saturates, NaN becomes 0;
//   - integer -> integer wraps (two's complement);
//   - -> bool is 1 for any non-zero value (NaN included), bool -> anything is 0 or 1.
// The scalar conversions are inline: the units call them per element.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "mtia/isa/pe/pe_ops.h"

namespace mtia::sim::pe {

// ---- fp16 <-> fp32 -------------------------------------------------------------------------

// Exact: every binary16 value is a binary32 value.
inline float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf, or NaN with its payload
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: mant * 2^-24, normal in binary32. Shift the leading one into the hidden bit.
    const int shift = std::countl_zero(mant) - 21;  // mant has 10 bits; bit 10 is the hidden one
    const uint32_t m = (mant << shift) & 0x3ffu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (m << 13);
  }
  return std::bit_cast<float>(bits);
}

// Round to nearest, ties to even; overflow to infinity; subnormal results kept.
inline uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) {
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));  // quiet NaN
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 (max + half ulp) rounds to Inf
  if (abs >= 0x38800000u) {
    // Normal result (>= 2^-14): drop 13 mantissa bits with RNE. A carry out of the mantissa
    // correctly bumps the exponent.
    const uint32_t rebased = abs - (112u << 23);
    const uint32_t round = 0xfffu + ((rebased >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rebased + round) >> 13));
  }
  if (abs < 0x33000000u) return sign;  // < 2^-25 (half the smallest subnormal): +-0
  // Subnormal result: value = m * 2^-24 with m the rounded (abs / 2^-24).
  const uint32_t exp = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24: 2^-24 ulp against the 2^(exp-150) ulp
  const uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  const uint32_t up = rest > half || (rest == half && (kept & 1u));
  return static_cast<uint16_t>(sign | (kept + up));  // 0x400 carries into the smallest normal
}

// ---- bf16 <-> fp32 -------------------------------------------------------------------------

inline float bf16_to_fp32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

inline uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  // RNE of the upper half; a carry into the exponent gives the next binade or Inf.
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// ---- integer -> floating ---------------------------------------------------------------------

// `v` rounded once, to nearest even, to `precision` significant bits (1..24), as a float (exact
// for such values: |v| < 2^64 is always in range). The building block of every integer ->
// fp32/fp16/bf16 conversion, so that none rounds twice.
inline float int_to_float_rounded(int64_t v, int precision) {
  const bool neg = v < 0;
  uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const int width = 64 - std::countl_zero(mag);
  if (width > precision) {
    const int drop = width - precision;
    const uint64_t rest = mag & ((uint64_t{1} << drop) - 1);
    const uint64_t half = uint64_t{1} << (drop - 1);
    uint64_t kept = mag >> drop;
    if (rest > half || (rest == half && (kept & 1u))) ++kept;  // may become 2^precision: exact
    const float r = std::ldexp(static_cast<float>(kept), drop);
    return neg ? -r : r;
  }
  const float r = static_cast<float>(mag);  // at most 24 bits: exact
  return neg ? -r : r;
}

inline float int_to_fp32(int64_t v) {
  return int_to_float_rounded(v, 24);
}
inline uint16_t int_to_fp16(int64_t v) {
  return fp32_to_fp16(int_to_float_rounded(v, 11));  // exact, or Inf beyond 65504
}
inline uint16_t int_to_bf16(int64_t v) {
  return fp32_to_bf16(int_to_float_rounded(v, 8));  // exact
}

// ---- floating -> integer ---------------------------------------------------------------------

// Truncates toward zero and saturates to [lo, hi]; NaN gives 0.
inline int64_t float_to_int_saturating(float f, int64_t lo, int64_t hi) {
  if (std::isnan(f)) return 0;
  const double t = std::trunc(static_cast<double>(f));
  // 2^63 is exact in double; every float in (-2^63, 2^63) converts without overflow.
  if (t >= 9223372036854775808.0) return hi;
  if (t < -9223372036854775808.0) return lo;
  const auto i = static_cast<int64_t>(t);
  return i < lo ? lo : (i > hi ? hi : i);
}

// ---- dtype facts -----------------------------------------------------------------------------

constexpr bool dtype_is_float(uint8_t dt) {
  return dt == MTIA_PE_DT_FP32 || dt == MTIA_PE_DT_FP16 || dt == MTIA_PE_DT_BF16;
}
constexpr bool dtype_is_int(uint8_t dt) {
  return dt == MTIA_PE_DT_INT8 || dt == MTIA_PE_DT_INT32 || dt == MTIA_PE_DT_INT64;
}

// Converts `count` elements of dtype `from` at `src` into dtype `to` at `dst`, with the cast
// semantics above (SE CAST). The buffers must not overlap unless src == dst and both dtypes
// have the same size. Unaligned buffers are fine. Both dtypes must be defined (checked: an
// undefined dtype is our own bug, the validators reject it first).
void convert(uint8_t from, const void* src, uint8_t to, void* dst, size_t count);

// Bulk widening of fp16 / bf16 to fp32 (the DPE's input path): the same results as the
// scalar functions, bit for bit, faster. `src` holds `count` little-endian 16-bit values (any
// alignment); the buffers must not overlap.
void fp16_to_fp32(const void* src, float* dst, size_t count);
void bf16_to_fp32(const void* src, float* dst, size_t count);

}  // namespace mtia::sim::pe
