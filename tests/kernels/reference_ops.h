// CPU references for the kernel library, shared by the kernel tests on the PE interpreter
// (tests/kernels) and the ones through the whole emulated device
// (tests/host_api/test_kernel_library.cpp): element types and their rounding, the elementwise
// ops as docs/pe-isa.md defines them, reductions, softmax, layer_norm and matmul in double
// precision, and tolerant checks of an output once it is back on the host. How a tensor gets
// into device memory and back is each suite's own (a HostView is the part they share).
//
// The fp16/bf16 conversions are written here from the formats and share no code with the
// units' numerics (sim/pe), so that a rounding bug there cannot hide in the reference.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"

namespace kt {

// --- numerics of the reference: IEEE binary32 math, then one round-to-nearest-even -----------

inline uint16_t to_f16(float f) {
  const auto x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
  if (e == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (m != 0 ? 0x200u | (m >> 13) : 0));
  const int exp = static_cast<int>(e) - 127 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflows to infinity
  uint32_t r, rem, half;
  if (exp <= 0) {  // a subnormal half, or zero
    if (exp < -10) return sign;
    const uint32_t mant = m | 0x800000u;
    const int shift = 14 - exp;
    r = mant >> shift;
    rem = mant & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    r = (static_cast<uint32_t>(exp) << 10) | (m >> 13);
    rem = m & 0x1fffu;
    half = 0x1000u;
  }
  if (rem > half || (rem == half && (r & 1u) != 0)) ++r;  // a carry may reach infinity: right
  return static_cast<uint16_t>(sign | r);
}
inline float from_f16(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (m << 13));
  if (e == 0) return (sign != 0 ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(m), -24);
  return std::bit_cast<float>(sign | ((e - 15 + 127) << 23) | (m << 13));
}
inline uint16_t to_bf16(float f) {
  const auto x = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
inline float from_bf16(uint16_t h) {
  return std::bit_cast<float>(uint32_t{h} << 16);
}

// --- dtypes ----------------------------------------------------------------------------------

constexpr uint8_t kF32 = MTIA_PE_DT_FP32, kF16 = MTIA_PE_DT_FP16, kBF16 = MTIA_PE_DT_BF16,
                  kI8 = MTIA_PE_DT_INT8, kI32 = MTIA_PE_DT_INT32, kI64 = MTIA_PE_DT_INT64,
                  kBool = MTIA_PE_DT_BOOL;
inline const std::vector<uint8_t> kAllDtypes = {kF32, kF16, kBF16, kI8, kI32, kI64, kBool};
inline const std::vector<uint8_t> kFloatDtypes = {kF32, kF16, kBF16};

inline unsigned dt_size(uint8_t dt) {
  switch (dt) {
    case kF32:
    case kI32:
      return 4;
    case kF16:
    case kBF16:
      return 2;
    case kI8:
    case kBool:
      return 1;
    case kI64:
      return 8;
    default:
      return 0;
  }
}
inline bool dt_float(uint8_t dt) {
  return dt == kF32 || dt == kF16 || dt == kBF16;
}
inline bool dt_int(uint8_t dt) {
  return dt == kI8 || dt == kI32 || dt == kI64;
}
inline std::string dt_name(uint8_t dt) {
  static const char* const names[] = {"invalid", "fp32",  "fp16",  "bf16",
                                      "int8",    "int32", "int64", "bool"};
  return dt < MTIA_PE_DT_COUNT ? names[dt] : "invalid";
}

// The value of dtype dt nearest to v (floats: through binary32, as the device computes;
// integers: v is integral).
inline double round_to(uint8_t dt, double v) {
  switch (dt) {
    case kF32:
      return static_cast<float>(v);
    case kF16:
      return from_f16(to_f16(static_cast<float>(v)));
    case kBF16:
      return from_bf16(to_bf16(static_cast<float>(v)));
    case kBool:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

// Two's complement wrap of an integer to dtype dt.
inline double wrap(uint8_t dt, int64_t v) {
  switch (dt) {
    case kI8:
      return static_cast<int8_t>(static_cast<uint8_t>(v));
    case kI32:
      return static_cast<int32_t>(static_cast<uint32_t>(v));
    default:
      return static_cast<double>(v);
  }
}

// The bit pattern of value v in dtype dt (for fill values, clamp bounds, scalars).
inline uint64_t bits_of(uint8_t dt, double v) {
  switch (dt) {
    case kF32:
      return std::bit_cast<uint32_t>(static_cast<float>(v));
    case kF16:
      return to_f16(static_cast<float>(v));
    case kBF16:
      return to_bf16(static_cast<float>(v));
    case kI8:
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case kI32:
      return static_cast<uint32_t>(static_cast<int32_t>(v));
    case kI64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    case kBool:
      return v != 0;
    default:
      return 0;
  }
}

// Every value of every dtype is exact in double (int64: the tests keep them small).
inline double load_elem(uint8_t dt, const uint8_t* p) {
  uint64_t b = 0;
  std::memcpy(&b, p, dt_size(dt));
  switch (dt) {
    case kF32:
      return std::bit_cast<float>(static_cast<uint32_t>(b));
    case kF16:
      return from_f16(static_cast<uint16_t>(b));
    case kBF16:
      return from_bf16(static_cast<uint16_t>(b));
    case kI8:
      return static_cast<int8_t>(b);
    case kI32:
      return static_cast<int32_t>(b);
    case kI64:
      return static_cast<double>(static_cast<int64_t>(b));
    case kBool:
      return static_cast<double>(b);
    default:
      return 0;
  }
}

inline void store_elem(uint8_t dt, uint8_t* p, double v) {
  const uint64_t b = bits_of(dt, v);
  std::memcpy(p, &b, dt_size(dt));
}

// --- 4-D strided views -----------------------------------------------------------------------

using Shape = std::array<int64_t, 4>;

inline Shape contiguous(const Shape& size) {
  Shape st{};
  int64_t s = 1;
  for (int i = 3; i >= 0; --i) {
    st[i] = s;
    s *= std::max<int64_t>(size[i], 1);
  }
  return st;
}

// Strides of a tensor stored with its dimensions in `order` (outermost first), e.g.
// {3, 2, 1, 0} stores it fully transposed; `pad` extra elements per stored row.
inline Shape permuted(const Shape& size, const std::array<int, 4>& order, int64_t pad = 0) {
  Shape st{};
  int64_t s = 1;
  for (int i = 3; i >= 0; --i) {
    st[order[i]] = s;
    s *= std::max<int64_t>(size[order[i]], 1) + (i == 3 ? pad : 0);
  }
  return st;
}

inline void for_each(const Shape& size, const std::function<void(const Shape&)>& fn) {
  Shape i{};
  for (i[0] = 0; i[0] < size[0]; ++i[0])
    for (i[1] = 0; i[1] < size[1]; ++i[1])
      for (i[2] = 0; i[2] < size[2]; ++i[2])
        for (i[3] = 0; i[3] < size[3]; ++i[3]) fn(i);
}

inline std::string shape_str(const Shape& s) {
  std::ostringstream o;
  o << "[" << s[0] << "," << s[1] << "," << s[2] << "," << s[3] << "]";
  return o.str();
}

// "<where> got <got> want <want>", the numbers in their shortest exact form: a mismatch
// within a tight tolerance stays visible.
inline std::string mismatch_str(const std::string& where, double got, double want) {
  char g[32], w[32];
  std::ostringstream o;
  o << where << " got " << std::string_view(g, std::to_chars(g, g + sizeof g, got).ptr) << " want "
    << std::string_view(w, std::to_chars(w, w + sizeof w, want).ptr);
  return o.str();
}

constexpr uint8_t kGapByte = 0xA5;  // every byte of a tensor's storage before the launch

// A strided 4-D view of dtype dt over a host copy of a tensor's storage, gaps included.
struct HostView {
  uint8_t dt = kF32;
  Shape size{1, 1, 1, 1};
  Shape stride{1, 1, 1, 1};
  std::vector<uint8_t> host;

  int64_t offset(const Shape& i) const {
    return i[0] * stride[0] + i[1] * stride[1] + i[2] * stride[2] + i[3] * stride[3];
  }
  uint8_t* raw(const Shape& i) { return host.data() + offset(i) * dt_size(dt); }
  double at(const Shape& i) const { return load_elem(dt, host.data() + offset(i) * dt_size(dt)); }
  void set(const Shape& i, double v) { store_elem(dt, raw(i), v); }
};

// Random values of the view's dtype at every storage element: floats in [lo, hi) rounded to
// the dtype, integers in a range where sums do not overflow, bools 0/1.
inline void fill_random(HostView& t, std::mt19937& rng, double lo = -3, double hi = 3) {
  const unsigned es = dt_size(t.dt);
  for (size_t k = 0; k < t.host.size() / es; ++k) {
    double v;
    if (t.dt == kBool) {
      v = static_cast<double>(rng() & 1u);
    } else if (dt_float(t.dt)) {
      v = round_to(t.dt, std::uniform_real_distribution<double>(lo, hi)(rng));
    } else {
      const int64_t range = t.dt == kI8 ? 100 : 1000;
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(-range, range)(rng));
    }
    store_elem(t.dt, t.host.data() + k * es, v);
  }
}

// --- tolerances and checks -------------------------------------------------------------------

// Tolerance for results of dtype dt computed in fp32 and rounded once (relative to the
// magnitude of the expected value, plus an absolute floor).
struct Tol {
  double rel = 0, abs = 0;
};
inline Tol tol_for(uint8_t dt) {
  switch (dt) {
    case kF32:
      return {2e-5, 1e-5};
    case kF16:
      return {2e-3, 1e-3};
    case kBF16:
      return {1.6e-2, 8e-3};
    default:
      return {};
  }
}
// softmax and layer_norm: fp32 results come out of exp/log and a division, not one rounding.
inline Tol tol_norm(uint8_t dt) {
  return dt == kF32 ? Tol{2e-5, 2e-6} : tol_for(dt);
}
inline bool close(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= t.abs + t.rel * std::fabs(want);
}

// An output already back on the host: every element of its view must match want(index)
// within `tol`, and every byte of its storage outside the view must still be kGapByte.
inline void check_view(const HostView& out, const std::function<double(const Shape&)>& want,
                       Tol tol, const std::string& what) {
  const unsigned es = dt_size(out.dt);
  std::vector<bool> in_view(out.host.size() / es, false);
  int64_t bad = 0;
  std::string first;
  for_each(out.size, [&](const Shape& i) {
    in_view[static_cast<size_t>(out.offset(i))] = true;
    const double g = out.at(i), w = want(i);
    if (!close(g, w, tol) && bad++ == 0) {
      first = mismatch_str(shape_str(i), g, w);
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
  int64_t touched = 0;
  for (size_t k = 0; k < in_view.size(); ++k) {
    if (in_view[k]) continue;
    for (unsigned b = 0; b < es; ++b) touched += out.host[k * es + b] != kGapByte;
  }
  INFO(what << ": bytes written outside the output view");
  CHECK(touched == 0);
}

// --- elementwise ops (docs/pe-isa.md semantics, written independently of the units' code) ----

// Which dtypes an SE op takes and whether it writes bool: the table of isa/pe/se_ops.h.
inline bool se_op_takes(uint8_t op, uint8_t dt) {
  const bool f = dt_float(dt), i = dt_int(dt), b = dt == kBool;
  switch (mtia_pe_se_info(op).in_class) {
    case MTIA_PE_SE_IN_NUMERIC:
      return f || i;
    case MTIA_PE_SE_IN_FLOAT:
      return f;
    case MTIA_PE_SE_IN_INT_OR_BOOL:
      return i || b;
    case MTIA_PE_SE_IN_INT:
      return i;
    default:
      return true;
  }
}

inline bool se_op_bool_out(uint8_t op) {
  return mtia_pe_se_info(op).out_rule == MTIA_PE_SE_OUT_BOOL;
}

// The SE ops of one arity that the unary and binary kernels take (not select, clamp, cast).
inline std::vector<uint8_t> se_ops_of_arity(int arity) {
  std::vector<uint8_t> ops;
  for (uint8_t op = 1; op < MTIA_PE_SE_OP_COUNT; ++op) {
    if (op == MTIA_PE_SE_CAST) continue;
    if (mtia_pe_se_info(op).arity == arity) ops.push_back(op);
  }
  return ops;
}

inline double ref_cast(uint8_t from, uint8_t to, double v) {
  if (to == kBool) return v != 0 || std::isnan(v) ? 1 : 0;
  if (dt_float(to)) return round_to(to, v);
  if (dt_float(from)) {  // truncate toward zero, saturate, NaN -> 0
    if (std::isnan(v)) return 0;
    const double lo = to == kI8 ? -128.0 : to == kI32 ? -2147483648.0 : -9223372036854775808.0;
    const double hi = to == kI8 ? 127.0 : to == kI32 ? 2147483647.0 : 9223372036854775807.0;
    return std::min(std::max(std::trunc(v), lo), hi);
  }
  return wrap(to, static_cast<int64_t>(v));  // integers wrap
}

inline double ref_unary(uint8_t op, uint8_t dt, double a) {
  if (op == MTIA_PE_SE_LNOT) return a == 0 ? 1 : 0;
  if (dt_float(dt)) {
    const auto x = static_cast<float>(a);
    float r;
    switch (op) {
      case MTIA_PE_SE_ABS:
        r = std::fabs(x);
        break;
      case MTIA_PE_SE_NEG:
        r = -x;
        break;
      case MTIA_PE_SE_RELU:
        r = x > 0 ? x : 0.0f;
        break;
      case MTIA_PE_SE_EXP:
        r = std::exp(x);
        break;
      case MTIA_PE_SE_LOG:
        r = std::log(x);
        break;
      case MTIA_PE_SE_SQRT:
        r = std::sqrt(x);
        break;
      case MTIA_PE_SE_RSQRT:
        r = 1.0f / std::sqrt(x);
        break;
      case MTIA_PE_SE_TANH:
        r = std::tanh(x);
        break;
      case MTIA_PE_SE_ERF:
        r = std::erf(x);
        break;
      case MTIA_PE_SE_SIGMOID:
        r = 1.0f / (1.0f + std::exp(-x));
        break;
      case MTIA_PE_SE_SILU:
        r = x / (1.0f + std::exp(-x));
        break;
      default: {
        // The rest in double, rounded once.
        const double d = x;
        double v;
        switch (op) {
          case MTIA_PE_SE_SIN:
            v = std::sin(d);
            break;
          case MTIA_PE_SE_COS:
            v = std::cos(d);
            break;
          case MTIA_PE_SE_TAN:
            v = std::tan(d);
            break;
          case MTIA_PE_SE_ASIN:
            v = std::asin(d);
            break;
          case MTIA_PE_SE_ACOS:
            v = std::acos(d);
            break;
          case MTIA_PE_SE_ATAN:
            v = std::atan(d);
            break;
          case MTIA_PE_SE_SINH:
            v = std::sinh(d);
            break;
          case MTIA_PE_SE_COSH:
            v = std::cosh(d);
            break;
          case MTIA_PE_SE_ASINH:
            v = std::asinh(d);
            break;
          case MTIA_PE_SE_ACOSH:
            v = std::acosh(d);
            break;
          case MTIA_PE_SE_ATANH:
            v = std::atanh(d);
            break;
          case MTIA_PE_SE_EXPM1:
            v = std::expm1(d);
            break;
          case MTIA_PE_SE_LOG1P:
            v = std::log1p(d);
            break;
          case MTIA_PE_SE_LOG2:
            v = std::log2(d);
            break;
          case MTIA_PE_SE_LOG10:
            v = std::log10(d);
            break;
          case MTIA_PE_SE_EXP2:
            v = std::exp2(d);
            break;
          case MTIA_PE_SE_ERFC:
            v = std::erfc(d);
            break;
          case MTIA_PE_SE_LGAMMA:
            v = std::lgamma(d);
            break;
          case MTIA_PE_SE_FLOOR:
            v = std::floor(d);
            break;
          case MTIA_PE_SE_CEIL:
            v = std::ceil(d);
            break;
          case MTIA_PE_SE_ROUND:
            v = std::nearbyint(d);
            break;
          case MTIA_PE_SE_TRUNC:
            v = std::trunc(d);
            break;
          case MTIA_PE_SE_RECIPROCAL:
            v = 1.0 / d;
            break;
          case MTIA_PE_SE_SIGN:
            v = std::isnan(d) ? d : (d > 0) - (d < 0);
            break;
          case MTIA_PE_SE_GELU:
            v = d * 0.5 * (1.0 + std::erf(d / std::sqrt(2.0)));
            break;
          case MTIA_PE_SE_GELU_TANH:
            v = 0.5 * d * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (d + 0.044715 * d * d * d)));
            break;
          case MTIA_PE_SE_GELU_GRAD:
            v = 0.5 * (1.0 + std::erf(d / std::sqrt(2.0))) +
                d * std::exp(-0.5 * d * d) / std::sqrt(2.0 * M_PI);
            break;
          case MTIA_PE_SE_GELU_TANH_GRAD: {
            const double beta = std::sqrt(2.0 / M_PI), kappa = 0.044715;
            const double th = std::tanh(beta * (d + kappa * d * d * d));
            v = 0.5 * (1.0 + th) + 0.5 * d * (1.0 - th * th) * beta * (1.0 + 3.0 * kappa * d * d);
            break;
          }
          default:
            throw std::logic_error("no reference for unary op " + std::to_string(op));
        }
        return round_to(dt, v);
      }
    }
    return round_to(dt, r);
  }
  const auto v = static_cast<int64_t>(a);
  switch (op) {
    case MTIA_PE_SE_ABS:
      return wrap(dt, v < 0 ? -v : v);
    case MTIA_PE_SE_NEG:
      return wrap(dt, -v);
    case MTIA_PE_SE_RELU:
      return v > 0 ? static_cast<double>(v) : 0;
    case MTIA_PE_SE_BNOT:
      return dt == kBool ? (v == 0 ? 1 : 0) : wrap(dt, ~v);
    case MTIA_PE_SE_SIGN:
      return static_cast<double>((v > 0) - (v < 0));
    default:
      throw std::logic_error("no reference for unary op " + std::to_string(op));
  }
}

inline double ref_binary(uint8_t op, uint8_t dt, double a, double b) {
  switch (op) {
    case MTIA_PE_SE_EQ:
      return a == b;
    case MTIA_PE_SE_NE:
      return a != b;
    case MTIA_PE_SE_LT:
      return a < b;
    case MTIA_PE_SE_LE:
      return a <= b;
    case MTIA_PE_SE_GT:
      return a > b;
    case MTIA_PE_SE_GE:
      return a >= b;
    case MTIA_PE_SE_LAND:
      return a != 0 && b != 0;
    case MTIA_PE_SE_LOR:
      return a != 0 || b != 0;
    case MTIA_PE_SE_LXOR:
      return (a != 0) != (b != 0);
    default:
      break;
  }
  if (dt_float(dt)) {
    const auto x = static_cast<float>(a), y = static_cast<float>(b);
    float r;
    switch (op) {
      case MTIA_PE_SE_ADD:
        r = x + y;
        break;
      case MTIA_PE_SE_SUB:
        r = x - y;
        break;
      case MTIA_PE_SE_MUL:
        r = x * y;
        break;
      case MTIA_PE_SE_DIV:
        r = x / y;
        break;
      case MTIA_PE_SE_MIN:
        r = std::min(x, y);
        break;
      case MTIA_PE_SE_MAX:
        r = std::max(x, y);
        break;
      default: {
        const double p = x, q = y;
        double v;
        switch (op) {
          case MTIA_PE_SE_POW:
            v = std::pow(p, q);
            break;
          case MTIA_PE_SE_ATAN2:
            v = std::atan2(p, q);
            break;
          case MTIA_PE_SE_HYPOT:
            v = std::hypot(p, q);
            break;
          case MTIA_PE_SE_COPYSIGN:
            v = std::copysign(p, q);
            break;
          case MTIA_PE_SE_FMOD:
            v = std::fmod(p, q);
            break;
          case MTIA_PE_SE_REMAINDER:
            v = p - q * std::floor(p / q);
            break;
          case MTIA_PE_SE_FLOOR_DIV:
            v = std::floor(p / q);
            break;
          default:
            throw std::logic_error("no reference for binary op " + std::to_string(op));
        }
        return round_to(dt, v);
      }
    }
    return round_to(dt, r);
  }
  const auto x = static_cast<int64_t>(a), y = static_cast<int64_t>(b);
  switch (op) {
    case MTIA_PE_SE_ADD:
      return wrap(dt, x + y);
    case MTIA_PE_SE_SUB:
      return wrap(dt, x - y);
    case MTIA_PE_SE_MUL:
      return wrap(dt, x * y);
    case MTIA_PE_SE_DIV:
      return y == 0 ? -1 : wrap(dt, x / y);  // truncates toward zero; x / 0 is -1
    case MTIA_PE_SE_MIN:
      return static_cast<double>(std::min(x, y));
    case MTIA_PE_SE_MAX:
      return static_cast<double>(std::max(x, y));
    case MTIA_PE_SE_BAND:
      return static_cast<double>(x & y);
    case MTIA_PE_SE_BOR:
      return static_cast<double>(x | y);
    case MTIA_PE_SE_BXOR:
      return static_cast<double>(x ^ y);
    case MTIA_PE_SE_FMOD:
      return y == 0 ? 0 : static_cast<double>(x % y);
    case MTIA_PE_SE_REMAINDER: {
      if (y == 0) return 0;
      const int64_t m = x % y;
      return static_cast<double>(m != 0 && ((m < 0) != (y < 0)) ? m + y : m);
    }
    case MTIA_PE_SE_FLOOR_DIV: {
      if (y == 0) return 0;
      const int64_t q = x / y;
      return wrap(dt, (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q);
    }
    case MTIA_PE_SE_SHL:
      return y < 0 || y >= 64 ? 0 : wrap(dt, static_cast<int64_t>(static_cast<uint64_t>(x) << y));
    case MTIA_PE_SE_SHR:
      return y < 0 || y >= 64 ? (x < 0 ? -1 : 0) : static_cast<double>(x >> y);
    default:
      throw std::logic_error("no reference for binary op " + std::to_string(op));
  }
}

// --- reductions ------------------------------------------------------------------------------

inline Shape reduced(Shape s, int dim) {
  s[dim] = 1;
  return s;
}

// The values of `in` along `dim` at the output position o.
inline std::vector<double> along(const HostView& in, Shape o, int dim) {
  std::vector<double> v;
  for (int64_t r = 0; r < in.size[dim]; ++r) {
    o[dim] = r;
    v.push_back(in.at(o));
  }
  return v;
}

inline double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
inline double var_of(const std::vector<double>& v, int64_t correction) {
  const double m = sum_of(v) / static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(std::max<int64_t>(static_cast<int64_t>(v.size()) - correction, 0));
}

// The index of the first maximum (or minimum) of v; a NaN counts as the extreme.
inline size_t first_extreme(const std::vector<double>& v, bool is_max) {
  size_t best = 0;
  for (size_t r = 1; r < v.size(); ++r) {
    if (std::isnan(v[best])) break;
    if (std::isnan(v[r]) || (is_max ? v[r] > v[best] : v[r] < v[best])) best = r;
  }
  return best;
}

// Checks each element of a reduction output against ref(values along dim) with ok(got, want,
// mag), mag being the sum of the magnitudes added (their mean for an average): the scale of
// the fp32 accumulation error, as the device sums in its own order.
inline void check_reduction_view(const HostView& out, const HostView& in, int dim,
                                 const std::function<double(const std::vector<double>&)>& ref,
                                 bool average,
                                 const std::function<bool(double, double, double)>& ok,
                                 const std::string& what) {
  int64_t bad = 0;
  std::string first;
  for_each(out.size, [&](const Shape& o) {
    const auto v = along(in, o, dim);
    double mag = 0;
    for (double x : v) mag += std::fabs(x);
    if (average) mag /= static_cast<double>(v.size());
    const double want = ref(v), got = out.at(o);
    if (!ok(got, want, mag) && bad++ == 0) {
      first = mismatch_str(shape_str(o), got, want);
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
}

// --- softmax, layer_norm ---------------------------------------------------------------------

// softmax / log_softmax of `in` along `dim` in double precision: a function of the index,
// with each line's max and sum of exponentials computed once. `in` must outlive it.
inline std::function<double(const Shape&)> ref_softmax(const HostView& in, int dim, bool log_form) {
  Shape lines = in.size;
  lines[dim] = 1;
  auto stats = std::make_shared<std::vector<std::pair<double, double>>>();
  for_each(lines, [&](const Shape& line) {
    Shape o = line;
    double m = -INFINITY, s = 0;
    for (o[dim] = 0; o[dim] < in.size[dim]; ++o[dim]) m = std::max(m, in.at(o));
    for (o[dim] = 0; o[dim] < in.size[dim]; ++o[dim]) s += std::exp(in.at(o) - m);
    stats->push_back({m, s});
  });
  return [&in, dim, log_form, lines, stats](const Shape& i) {
    Shape o = i;
    o[dim] = 0;
    const int64_t line = ((o[0] * lines[1] + o[1]) * lines[2] + o[2]) * lines[3] + o[3];
    const auto [m, s] = (*stats)[static_cast<size_t>(line)];
    return log_form ? (in.at(i) - m) - std::log(s) : std::exp(in.at(i) - m) / s;
  };
}

// Mean and 1/sqrt(biased variance + eps) of each row of a [1, 1, rows, cols] view.
struct LayerNormStats {
  std::vector<double> mean, rstd;

  // The output at i: normalized, times weight (flag 1), plus bias (flag 2); both [cols].
  double out(const HostView& x, const HostView& weight, const HostView& bias, int64_t flags,
             const Shape& i) const {
    double y = (x.at(i) - mean[i[2]]) * rstd[i[2]];
    if (flags & 1) y *= weight.at({0, 0, 0, i[3]});
    if (flags & 2) y += bias.at({0, 0, 0, i[3]});
    return y;
  }
};
// Tolerances of layer_norm's output, and of the mean and rstd it saves with flag 4.
inline Tol tol_layer_norm(uint8_t dt) {
  return dt == kF32 ? Tol{1e-4, 1e-5} : tol_for(dt);
}
inline constexpr Tol kTolLayerNormMean{1e-5, 1e-6}, kTolLayerNormRstd{1e-4, 1e-6};
inline LayerNormStats layer_norm_stats(const HostView& x, double eps) {
  LayerNormStats r;
  const int64_t rows = x.size[2], cols = x.size[3];
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < cols; ++j) s += x.at({0, 0, i, j});
    const double m = s / static_cast<double>(cols);
    for (int64_t j = 0; j < cols; ++j) q += (x.at({0, 0, i, j}) - m) * (x.at({0, 0, i, j}) - m);
    r.mean.push_back(m);
    r.rstd.push_back(1.0 / std::sqrt(q / static_cast<double>(cols) + eps));
  }
  return r;
}

// --- matmul, bmm, addmm ----------------------------------------------------------------------

// Layouts of a [batch, rows, cols] operand, the view [1, batch, rows, cols].
enum class MatLayout { kRowMajor, kColMajor, kPadded };

inline Shape matrix_strides(const Shape& size, MatLayout l) {
  switch (l) {
    case MatLayout::kRowMajor:
      return contiguous(size);
    case MatLayout::kColMajor:
      return permuted(size, {0, 1, 3, 2});
    default: {
      // Padded rows and a column stride of 2: a layout the DPE flags cannot express.
      Shape st = permuted(size, {0, 1, 2, 3}, size[3] + 7);
      st[3] = 2;
      return st;
    }
  }
}

// out[b] = alpha * A[b] @ B[b] + beta * bias in double; an operand with batch size 1 is
// broadcast.
struct MatmulRef {
  const HostView* a;
  const HostView* b;
  const HostView* bias = nullptr;  // [1, 1, m or 1, n or 1]
  double alpha = 1, beta = 0;

  // *mag: the sum of the magnitudes of the terms, the scale of the accumulation error.
  double at(int64_t bi, int64_t i, int64_t j, double* mag) const {
    double s = 0, m = 0;
    const int64_t ab = a->size[1] == 1 ? 0 : bi, bb = b->size[1] == 1 ? 0 : bi;
    for (int64_t l = 0; l < a->size[3]; ++l) {
      const double p = a->at({0, ab, i, l}) * b->at({0, bb, l, j});
      s += p;
      m += std::fabs(p);
    }
    double v = alpha * s;
    m *= std::fabs(alpha);
    if (bias != nullptr && beta != 0) {
      const double bv = bias->at({0, 0, bias->size[2] == 1 ? 0 : i, bias->size[3] == 1 ? 0 : j});
      v += beta * bv;
      m += std::fabs(beta * bv);
    }
    *mag = m;
    return v;
  }
};

// An output already back on the host against `ref`: fp32 accumulation in any order, then one
// rounding to the output dtype; integer outputs (int8 -> int32) are exact.
inline void check_matmul_view(const HostView& c, const MatmulRef& ref, const std::string& what) {
  const Tol t = tol_for(c.dt);
  int64_t bad = 0;
  std::string first;
  for_each(c.size, [&](const Shape& i) {
    double mag;
    const double want = ref.at(i[1], i[2], i[3], &mag), got = c.at(i);
    const double allowed = dt_float(c.dt) ? t.abs + t.rel * std::fabs(want) + 4e-6 * mag : 0;
    if (std::fabs(got - want) > allowed && bad++ == 0) {
      first = mismatch_str(shape_str(i), got, want);
    }
  });
  INFO(what << ": " << bad << " mismatches, first " << first);
  CHECK(bad == 0);
}

}  // namespace kt
