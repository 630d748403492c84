// An independent reference for the PE element types, for the unit and numerics tests.
//
// It shares no code with sim/pe's numerics: values are decoded with ldexp from the bit fields,
// and rounded to a narrower format by scaling to an integer significand and calling nearbyint
// (the host's round-to-nearest-even) in long double, which holds every int64 and every
// fp32 sum/product exactly enough for single rounding.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "mtia/isa/pe/pe_ops.h"

namespace ref {

struct Format {
  int precision;  // significant bits, hidden bit included
  int emin;       // exponent of the smallest normal
  int emax;       // exponent of the largest finite
  int exp_bits;
};
inline constexpr Format kFp16{11, -14, 15, 5};
inline constexpr Format kBf16{8, -126, 127, 8};

inline long double decode(uint32_t bits, Format f) {
  const int mbits = f.precision - 1;
  const uint32_t mant = bits & ((1u << mbits) - 1);
  const uint32_t exp = (bits >> mbits) & ((1u << f.exp_bits) - 1);
  const bool neg = (bits >> (mbits + f.exp_bits)) & 1u;
  long double v;
  if (exp == (1u << f.exp_bits) - 1) {
    v = mant == 0 ? std::numeric_limits<long double>::infinity()
                  : std::numeric_limits<long double>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<long double>(mant), f.emin - mbits);
  } else {
    v = std::ldexp(static_cast<long double>(mant + (1u << mbits)),
                   static_cast<int>(exp) - (f.emax) - mbits);
  }
  return neg ? -v : v;
}

// Rounds x once to the format (nearest, ties to even), returning its bit pattern. NaN becomes
// the format's default quiet NaN with x's sign (tests compare NaNs as NaNs).
inline uint32_t encode(long double x, Format f) {
  const int mbits = f.precision - 1;
  const uint32_t sign = std::signbit(x) ? 1u << (mbits + f.exp_bits) : 0u;
  const uint32_t exp_ones = ((1u << f.exp_bits) - 1) << mbits;
  if (std::isnan(x)) return sign | exp_ones | (1u << (mbits - 1));
  const long double a = std::fabs(x);
  if (a == 0) return sign;
  // Largest finite plus half its ulp: from there on the result is infinity.
  const long double max_finite = std::ldexp(2.0L - std::ldexp(1.0L, 1 - f.precision), f.emax);
  if (a >= max_finite + std::ldexp(1.0L, f.emax - f.precision)) return sign | exp_ones;
  int e2;
  std::frexp(a, &e2);
  int e = e2 - 1;  // a in [2^e, 2^(e+1))
  if (e < f.emin) e = f.emin;
  const long double quantum = std::ldexp(1.0L, e - mbits);
  long double n = std::nearbyint(a / quantum);  // exact division by a power of two
  if (n == std::ldexp(1.0L, f.precision)) {     // rounded up into the next binade
    n /= 2;
    ++e;
  }
  const auto ni = static_cast<uint32_t>(n);
  if (ni < (1u << mbits)) return sign | ni;  // subnormal (e == emin)
  const auto biased = static_cast<uint32_t>(e + f.emax);
  return sign | (biased << mbits) | (ni - (1u << mbits));
}

inline long double decode_f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
// long double -> float rounds to nearest even (the host's conversion), once.
inline uint32_t encode_f32(long double x) {
  const auto f = static_cast<float>(x);
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

inline unsigned bytes_of(uint8_t dt) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
    case MTIA_PE_DT_INT32:
      return 4;
    case MTIA_PE_DT_FP16:
    case MTIA_PE_DT_BF16:
      return 2;
    case MTIA_PE_DT_INT64:
      return 8;
    default:
      return 1;
  }
}
inline bool is_float(uint8_t dt) {
  return dt == MTIA_PE_DT_FP32 || dt == MTIA_PE_DT_FP16 || dt == MTIA_PE_DT_BF16;
}

// A decoded element: floats as long double, integers and bool as int64.
struct Value {
  bool is_float = false;
  long double f = 0;
  int64_t i = 0;
  bool truthy() const { return is_float ? (f != 0 || std::isnan(f)) : i != 0; }
};

// Reads element `idx` of dtype dt from raw little-endian bytes.
inline Value load(const uint8_t* p, uint8_t dt, size_t idx = 0) {
  const unsigned es = bytes_of(dt);
  uint64_t raw = 0;
  std::memcpy(&raw, p + idx * es, es);
  Value v;
  switch (dt) {
    case MTIA_PE_DT_FP32:
      v.is_float = true;
      v.f = decode_f32(static_cast<uint32_t>(raw));
      break;
    case MTIA_PE_DT_FP16:
      v.is_float = true;
      v.f = decode(static_cast<uint32_t>(raw), kFp16);
      break;
    case MTIA_PE_DT_BF16:
      v.is_float = true;
      v.f = decode(static_cast<uint32_t>(raw), kBf16);
      break;
    case MTIA_PE_DT_INT8:
      v.i = static_cast<int8_t>(raw);
      break;
    case MTIA_PE_DT_INT32:
      v.i = static_cast<int32_t>(raw);
      break;
    case MTIA_PE_DT_INT64:
      v.i = static_cast<int64_t>(raw);
      break;
    default:  // bool
      v.i = raw != 0;
      break;
  }
  return v;
}

// Two's-complement wrap of an exact integer to `bits` bits.
inline int64_t wrap(__int128 v, unsigned bits) {
  const unsigned __int128 m = static_cast<unsigned __int128>(v);
  const uint64_t low = static_cast<uint64_t>(m);
  if (bits == 64) return static_cast<int64_t>(low);
  const uint64_t mask = (uint64_t{1} << bits) - 1;
  uint64_t x = low & mask;
  if (x >> (bits - 1)) x |= ~mask;  // sign-extend
  return static_cast<int64_t>(x);
}

// The bit pattern (low bytes) of `v` converted to dtype dt with the documented cast rules.
inline uint64_t store_bits(const Value& v, uint8_t dt) {
  if (dt == MTIA_PE_DT_BOOL) return v.truthy() ? 1 : 0;
  if (is_float(dt)) {
    const long double x = v.is_float ? v.f : static_cast<long double>(v.i);  // exact
    if (dt == MTIA_PE_DT_FP32) return encode_f32(x);
    return encode(x, dt == MTIA_PE_DT_FP16 ? kFp16 : kBf16);
  }
  const unsigned bits = 8 * bytes_of(dt);
  if (!v.is_float)
    return static_cast<uint64_t>(wrap(v.i, bits)) & (bits == 64 ? ~0ull : ((1ull << bits) - 1));
  // Floating -> integer: truncate, saturate, NaN -> 0.
  const long double lo = -std::ldexp(1.0L, static_cast<int>(bits) - 1);
  const long double hi = std::ldexp(1.0L, static_cast<int>(bits) - 1) - 1;
  int64_t r;
  if (std::isnan(v.f)) {
    r = 0;
  } else {
    const long double t = std::trunc(v.f);
    r = t <= lo   ? static_cast<int64_t>(lo)
        : t >= hi ? static_cast<int64_t>(hi)
                  : static_cast<int64_t>(t);
  }
  return static_cast<uint64_t>(r) & (bits == 64 ? ~0ull : ((1ull << bits) - 1));
}

inline void store(uint8_t* p, uint8_t dt, size_t idx, uint64_t bits) {
  std::memcpy(p + idx * bytes_of(dt), &bits, bytes_of(dt));
}

}  // namespace ref
