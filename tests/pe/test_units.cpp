// The PE units (DPE, SE, RE, MLU) of sim/pe/units.h: every op and dtype against a
// straightforward reference written here (ref_dtypes.h for the element types), every kind of
// rejected operand, the throughput model against hand-computed cycle counts, and the path
// from a kernel's unit instruction through RiscvCore and a UnitPort.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "core_harness.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/units.h"
#include "ref_dtypes.h"

namespace pe = mtia::sim::pe;
using pe::FunctionalUnits;
using pe::UnitKind;
using pe::UnitTiming;

namespace {

constexpr uint64_t L = MTIA_PE_LS_BASE;

const uint8_t kAllDtypes[] = {MTIA_PE_DT_FP32,  MTIA_PE_DT_FP16,  MTIA_PE_DT_BF16, MTIA_PE_DT_INT8,
                              MTIA_PE_DT_INT32, MTIA_PE_DT_INT64, MTIA_PE_DT_BOOL};

mtia_pe_desc_header header(uint8_t kind, uint16_t flags = 0) {
  return {MTIA_PE_DESC_VERSION, kind, flags, 0};
}

// A PE's local store (8-byte aligned) with its units.
struct Pe {
  static constexpr size_t kBytes = 384 * 1024;
  std::vector<uint64_t> words = std::vector<uint64_t>(kBytes / 8, 0);
  std::span<uint8_t> ls{reinterpret_cast<uint8_t*>(words.data()), kBytes};
  FunctionalUnits units;
  explicit Pe(const UnitTiming& t = UnitTiming{}) : units(ls, t) {}
  uint8_t* p(uint64_t off) { return ls.data() + off; }
};

uint64_t raw_at(const uint8_t* p, uint8_t dt, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, p + i * ref::bytes_of(dt), ref::bytes_of(dt));
  return v;
}

// ---- Value generators ----------------------------------------------------------------------

uint64_t float_bits(long double x, uint8_t dt) {
  ref::Value v;
  v.is_float = true;
  v.f = x;
  return ref::store_bits(v, dt);
}

// A value of dt: "tame" values are small and finite; otherwise a mix of special values, random
// bit patterns and tame values.
uint64_t gen(uint8_t dt, std::mt19937_64& rng, bool tame = false) {
  std::uniform_real_distribution<double> uni(-6.0, 6.0);
  const unsigned pick = tame ? 99 : static_cast<unsigned>(rng() % 4);
  if (ref::is_float(dt)) {
    if (pick == 0) {
      const long double inf = std::numeric_limits<long double>::infinity();
      const long double nan = std::numeric_limits<long double>::quiet_NaN();
      const long double specials[] = {0.0L, -0.0L, 1.0L,  -1.0L, 0.5L,    inf,      -inf,  nan,
                                      -nan, 3.0L,  1e-3L, 1e-6L, -1e-40L, 65504.0L, 1e30L, -2.5L};
      return float_bits(specials[rng() % std::size(specials)], dt);
    }
    if (pick == 1) return rng() & (dt == MTIA_PE_DT_FP32 ? 0xffffffffull : 0xffffull);
    return float_bits(uni(rng), dt);
  }
  if (dt == MTIA_PE_DT_BOOL) return rng() % 2;
  const unsigned bits = 8 * ref::bytes_of(dt);
  const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  if (pick == 0) {
    const int64_t min = bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
    const int64_t specials[] = {0, 1, -1, min, -(min + 1), 2, -2};
    return static_cast<uint64_t>(specials[rng() % std::size(specials)]) & mask;
  }
  if (pick == 1) return rng() & mask;
  return static_cast<uint64_t>(static_cast<int64_t>(rng() % 101) - 50) & mask;
}

// ---- Output comparison ---------------------------------------------------------------------

// Distance in units in the last place between two float bit patterns of dt (both finite or
// equal infinities).
int64_t ulp_distance(uint64_t a, uint64_t b, uint8_t dt) {
  const unsigned bits = 8 * ref::bytes_of(dt);
  auto ordered = [&](uint64_t x) -> int64_t {
    const uint64_t sign = uint64_t{1} << (bits - 1);
    return (x & sign) ? -static_cast<int64_t>(x & (sign - 1)) : static_cast<int64_t>(x);
  };
  return std::llabs(ordered(a) - ordered(b));
}

// ---- SE reference --------------------------------------------------------------------------

ref::Value fval(long double f) {
  ref::Value v;
  v.is_float = true;
  v.f = f;
  return v;
}
ref::Value ival(__int128 i) {
  ref::Value v;
  v.i = ref::wrap(i, 64);
  return v;
}

long double nan_ld() {
  return std::numeric_limits<long double>::quiet_NaN();
}

long double fmin_nan(long double a, long double b) {
  return std::isnan(a) || std::isnan(b) ? nan_ld() : (a < b ? a : b);
}
long double fmax_nan(long double a, long double b) {
  return std::isnan(a) || std::isnan(b) ? nan_ld() : (a > b ? a : b);
}

// Ops whose results come from the host's float functions (a few ulp) rather than one
// correctly rounded step.
bool is_approximate(uint8_t op) {
  return mtia_pe_se_info(op).cost == MTIA_PE_SE_COST_TRANSCENDENTAL || op == MTIA_PE_SE_SQRT ||
         op == MTIA_PE_SE_RSQRT || op == MTIA_PE_SE_RECIPROCAL || op == MTIA_PE_SE_REMAINDER ||
         op == MTIA_PE_SE_FLOOR_DIV || op == MTIA_PE_SE_HYPOT;
}

constexpr long double kPiL = 3.14159265358979323846264338327950288L;

long double floor_div_ld(long double a, long double b) {
  if (b == 0) return a / b;
  const long double m = std::fmod(a, b);
  long double q = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) q -= 1;
  if (q == 0) return std::copysign(0.0L, a / b);
  long double f = std::floor(q);
  if (q - f > 0.5L) f += 1;
  return f;
}

// The result of one SE lane, before the store to the output dtype. For SELECT the caller
// copies bits instead.
ref::Value ref_se(uint8_t op, uint8_t in, const ref::Value& a, const ref::Value& b,
                  const ref::Value& c) {
  const bool fl = ref::is_float(in);
  auto boolean = [](bool x) { return ival(x ? 1 : 0); };
  switch (op) {
    case MTIA_PE_SE_ADD:
      return fl ? fval(a.f + b.f) : ival(__int128{a.i} + b.i);
    case MTIA_PE_SE_SUB:
      return fl ? fval(a.f - b.f) : ival(__int128{a.i} - b.i);
    case MTIA_PE_SE_MUL:
      return fl ? fval(a.f * b.f) : ival(__int128{a.i} * b.i);
    case MTIA_PE_SE_DIV:
      if (fl) return fval(a.f / b.f);
      if (b.i == 0) return ival(-1);
      return ival(__int128{a.i} / b.i);  // MIN / -1 = -MIN, which wraps to MIN
    case MTIA_PE_SE_MIN:
      return fl ? fval(fmin_nan(a.f, b.f)) : ival(std::min(a.i, b.i));
    case MTIA_PE_SE_MAX:
      return fl ? fval(fmax_nan(a.f, b.f)) : ival(std::max(a.i, b.i));
    case MTIA_PE_SE_ABS:
      return fl ? fval(std::fabs(a.f)) : ival(a.i < 0 ? -__int128{a.i} : a.i);
    case MTIA_PE_SE_NEG:
      return fl ? fval(-a.f) : ival(-__int128{a.i});
    case MTIA_PE_SE_RELU:
      if (fl) return fval(std::isnan(a.f) ? a.f : (a.f > 0 ? a.f : 0.0L));
      return ival(a.i > 0 ? a.i : 0);
    case MTIA_PE_SE_EXP:
      return fval(std::exp(a.f));
    case MTIA_PE_SE_LOG:
      return fval(std::log(a.f));
    case MTIA_PE_SE_SQRT:
      return fval(std::sqrt(a.f));
    case MTIA_PE_SE_RSQRT:
      return fval(1.0L / std::sqrt(a.f));
    case MTIA_PE_SE_TANH:
      return fval(std::tanh(a.f));
    case MTIA_PE_SE_ERF:
      return fval(std::erf(a.f));
    case MTIA_PE_SE_SIGMOID:
      return fval(1.0L / (1.0L + std::exp(-a.f)));
    case MTIA_PE_SE_SILU:
      return fval(std::isinf(a.f) && a.f < 0 ? -0.0L : a.f / (1.0L + std::exp(-a.f)));
    case MTIA_PE_SE_EQ:
      return boolean(fl ? a.f == b.f : a.i == b.i);
    case MTIA_PE_SE_NE:
      return boolean(fl ? !(a.f == b.f) : a.i != b.i);
    case MTIA_PE_SE_LT:
      return boolean(fl ? a.f < b.f : a.i < b.i);
    case MTIA_PE_SE_LE:
      return boolean(fl ? a.f <= b.f : a.i <= b.i);
    case MTIA_PE_SE_GT:
      return boolean(fl ? a.f > b.f : a.i > b.i);
    case MTIA_PE_SE_GE:
      return boolean(fl ? a.f >= b.f : a.i >= b.i);
    case MTIA_PE_SE_LAND:
      return boolean(a.truthy() && b.truthy());
    case MTIA_PE_SE_LOR:
      return boolean(a.truthy() || b.truthy());
    case MTIA_PE_SE_LXOR:
      return boolean(a.truthy() != b.truthy());
    case MTIA_PE_SE_LNOT:
      return boolean(!a.truthy());
    case MTIA_PE_SE_BAND:
      return ival(a.i & b.i);
    case MTIA_PE_SE_BOR:
      return ival(a.i | b.i);
    case MTIA_PE_SE_BXOR:
      return ival(a.i ^ b.i);
    case MTIA_PE_SE_BNOT:
      return in == MTIA_PE_DT_BOOL ? ival(a.i == 0) : ival(~a.i);
    case MTIA_PE_SE_CLAMP:
      if (fl) return fval(fmin_nan(fmax_nan(a.f, b.f), c.f));
      return ival(std::min(std::max(a.i, b.i), c.i));
    case MTIA_PE_SE_CAST:
      return a;
    case MTIA_PE_SE_SIN:
      return fval(std::sin(a.f));
    case MTIA_PE_SE_COS:
      return fval(std::cos(a.f));
    case MTIA_PE_SE_TAN:
      return fval(std::tan(a.f));
    case MTIA_PE_SE_ASIN:
      return fval(std::asin(a.f));
    case MTIA_PE_SE_ACOS:
      return fval(std::acos(a.f));
    case MTIA_PE_SE_ATAN:
      return fval(std::atan(a.f));
    case MTIA_PE_SE_SINH:
      return fval(std::sinh(a.f));
    case MTIA_PE_SE_COSH:
      return fval(std::cosh(a.f));
    case MTIA_PE_SE_ASINH:
      return fval(std::asinh(a.f));
    case MTIA_PE_SE_ACOSH:
      return fval(std::acosh(a.f));
    case MTIA_PE_SE_ATANH:
      return fval(std::atanh(a.f));
    case MTIA_PE_SE_EXPM1:
      return fval(std::expm1(a.f));
    case MTIA_PE_SE_LOG1P:
      return fval(std::log1p(a.f));
    case MTIA_PE_SE_LOG2:
      return fval(std::log2(a.f));
    case MTIA_PE_SE_LOG10:
      return fval(std::log10(a.f));
    case MTIA_PE_SE_EXP2:
      return fval(std::exp2(a.f));
    case MTIA_PE_SE_ERFC:
      return fval(std::erfc(a.f));
    case MTIA_PE_SE_LGAMMA:
      return fval(std::lgamma(a.f));
    case MTIA_PE_SE_FLOOR:
      return fval(std::floor(a.f));
    case MTIA_PE_SE_CEIL:
      return fval(std::ceil(a.f));
    case MTIA_PE_SE_ROUND:
      return fval(std::nearbyint(a.f));
    case MTIA_PE_SE_TRUNC:
      return fval(std::trunc(a.f));
    case MTIA_PE_SE_RECIPROCAL:
      return fval(1.0L / a.f);
    case MTIA_PE_SE_SIGN:
      if (fl) return fval(std::isnan(a.f) ? a.f : (a.f > 0) - (a.f < 0));
      return ival((a.i > 0) - (a.i < 0));
    case MTIA_PE_SE_POW:
      return fval(std::pow(a.f, b.f));
    case MTIA_PE_SE_ATAN2:
      return fval(std::atan2(a.f, b.f));
    case MTIA_PE_SE_HYPOT:
      return fval(std::hypot(a.f, b.f));
    case MTIA_PE_SE_COPYSIGN:
      return fval(std::copysign(a.f, b.f));
    case MTIA_PE_SE_FMOD:
      if (fl) return fval(std::fmod(a.f, b.f));
      return ival(b.i == 0 ? 0 : __int128{a.i} % b.i);
    case MTIA_PE_SE_REMAINDER: {
      if (fl) {
        const long double m = std::fmod(a.f, b.f);
        return fval(m != 0 && ((b.f < 0) != (m < 0)) ? m + b.f : m);
      }
      if (b.i == 0) return ival(0);
      const __int128 m = __int128{a.i} % b.i;
      return ival(m != 0 && ((b.i < 0) != (m < 0)) ? m + b.i : m);
    }
    case MTIA_PE_SE_FLOOR_DIV: {
      if (fl) return fval(floor_div_ld(a.f, b.f));
      if (b.i == 0) return ival(0);
      __int128 q = __int128{a.i} / b.i;  // MIN / -1 = -MIN, which wraps to MIN
      if (__int128{a.i} % b.i != 0 && ((a.i < 0) != (b.i < 0))) q -= 1;
      return ival(q);
    }
    case MTIA_PE_SE_SHL:
      return ival(b.i < 0 || b.i >= 64 ? 0
                                       : static_cast<int64_t>(static_cast<uint64_t>(a.i) << b.i));
    case MTIA_PE_SE_SHR:
      return ival(b.i < 0 || b.i >= 64 ? (a.i < 0 ? -1 : 0) : a.i >> b.i);
    case MTIA_PE_SE_GELU:
      return fval(0.5L * a.f * std::erfc(-a.f / std::sqrt(2.0L)));
    case MTIA_PE_SE_GELU_TANH: {
      const long double inner = std::sqrt(2.0L / kPiL) * (a.f + 0.044715L * a.f * a.f * a.f);
      return fval(a.f / (1 + std::exp(-2 * inner)));
    }
    case MTIA_PE_SE_GELU_GRAD: {
      const long double pdf = std::exp(-a.f * a.f / 2) / std::sqrt(2 * kPiL);
      return fval(0.5L * std::erfc(-a.f / std::sqrt(2.0L)) + a.f * pdf);
    }
    case MTIA_PE_SE_GELU_TANH_GRAD: {
      const long double beta = std::sqrt(2 / kPiL), kappa = 0.044715L;
      const long double inner = beta * (a.f + kappa * a.f * a.f * a.f);
      const long double th = std::tanh(inner);
      return fval(0.5L * (1 + th) +
                  0.5L * a.f * (1 - th * th) * beta * (1 + 3 * kappa * a.f * a.f));
    }
    default:
      FAIL("no reference for SE op " << int(op));
      return {};
  }
}

int se_arity(uint8_t op) {
  return mtia_pe_se_info(op).arity;
}

// Input dtypes the SE table allows for an op.
std::vector<uint8_t> se_dtypes(uint8_t op) {
  const std::vector<uint8_t> fp = {MTIA_PE_DT_FP32, MTIA_PE_DT_FP16, MTIA_PE_DT_BF16};
  const std::vector<uint8_t> ints = {MTIA_PE_DT_INT8, MTIA_PE_DT_INT32, MTIA_PE_DT_INT64};
  std::vector<uint8_t> out;
  switch (mtia_pe_se_info(op).in_class) {
    case MTIA_PE_SE_IN_NUMERIC:
      out = fp;
      out.insert(out.end(), ints.begin(), ints.end());
      return out;
    case MTIA_PE_SE_IN_FLOAT:
      return fp;
    case MTIA_PE_SE_IN_INT_OR_BOOL:
      out = ints;
      out.push_back(MTIA_PE_DT_BOOL);
      return out;
    case MTIA_PE_SE_IN_INT:
      return ints;
    default:
      return {std::begin(kAllDtypes), std::end(kAllDtypes)};
  }
}

uint8_t se_out_dtype(uint8_t op, uint8_t in) {
  return mtia_pe_se_info(op).out_rule == MTIA_PE_SE_OUT_BOOL ? uint8_t{MTIA_PE_DT_BOOL} : in;
}

struct SeRun {
  uint8_t op = 0;
  uint8_t in = 0;
  uint8_t out = 0;
  uint32_t count = 257;
  std::array<uint8_t, 3> mode = {MTIA_PE_OPND_VECTOR, MTIA_PE_OPND_VECTOR, MTIA_PE_OPND_VECTOR};
  bool in_place = false;  // dst = operand a
  bool tame = false;
};

// Runs one SE operation on random operands and checks every lane against ref_se.
void check_se(Pe& pe, const SeRun& r, std::mt19937_64& rng) {
  const int arity = se_arity(r.op);
  const uint64_t kOperandBytes = 64 * 1024;
  mtia_pe_se_desc d{};
  d.hdr = header(MTIA_PE_DESC_SE);
  d.op = r.op;
  d.in_dtype = r.in;
  d.out_dtype = r.out;
  d.count = r.count;
  std::vector<uint8_t> host[3];
  uint8_t dts[3] = {r.in, r.in, r.in};
  if (r.op == MTIA_PE_SE_SELECT) dts[0] = MTIA_PE_DT_BOOL;
  for (int j = 0; j < arity; ++j) {
    const uint8_t dt = dts[j];
    const size_t n = r.mode[j] == MTIA_PE_OPND_VECTOR ? r.count : 1;
    host[j].assign(n * 8, 0);
    for (size_t i = 0; i < n; ++i) {
      uint64_t v = gen(dt, rng, r.tame);
      // A bool in memory may hold any non-zero byte: it is true.
      if (dt == MTIA_PE_DT_BOOL && r.mode[j] != MTIA_PE_OPND_IMMEDIATE && rng() % 8 == 0) v = 2;
      // Keep divisions by zero and by -1 frequent.
      const bool divides = r.op == MTIA_PE_SE_DIV || r.op == MTIA_PE_SE_FMOD ||
                           r.op == MTIA_PE_SE_REMAINDER || r.op == MTIA_PE_SE_FLOOR_DIV;
      if (divides && j == 1 && !ref::is_float(dt) && rng() % 8 == 0) {
        v = rng() % 2 ? 0 : (~0ull >> (64 - 8 * ref::bytes_of(dt)));
      }
      // Shift counts mostly inside the width, some negative or past it.
      if ((r.op == MTIA_PE_SE_SHL || r.op == MTIA_PE_SE_SHR) && j == 1 && rng() % 4 != 0) {
        v = static_cast<uint64_t>(static_cast<int64_t>(rng() % 70) - 3) &
            (~0ull >> (64 - 8 * ref::bytes_of(dt)));
      }
      ref::store(host[j].data(), dt, i, v);
    }
    d.mode[j] = r.mode[j];
    if (r.mode[j] == MTIA_PE_OPND_IMMEDIATE) {
      std::memcpy(&d.imm[j], host[j].data(), ref::bytes_of(dt));
    } else {
      const uint64_t off = 4096 + j * kOperandBytes;
      std::memcpy(pe.p(off), host[j].data(), n * ref::bytes_of(dt));
      d.src[j] = L + off;
    }
  }
  const uint64_t dst_off = r.in_place ? 4096 : 4096 + 3 * kOperandBytes;
  const unsigned oes = ref::bytes_of(r.out);
  if (!r.in_place) std::memset(pe.p(dst_off), 0xee, (r.count + 1) * oes);
  d.dst = L + dst_off;

  auto outcome = pe.units.eltwise(d);
  INFO("SE op " << int(r.op) << " " << pe::dtype_name(r.in) << " -> " << pe::dtype_name(r.out)
                << " modes " << int(r.mode[0]) << int(r.mode[1]) << int(r.mode[2])
                << (r.in_place ? " in place" : ""));
  REQUIRE(outcome.ok());

  for (uint32_t i = 0; i < r.count; ++i) {
    ref::Value v[3];
    uint64_t raw[3] = {};
    for (int j = 0; j < arity; ++j) {
      const size_t idx = r.mode[j] == MTIA_PE_OPND_VECTOR ? i : 0;
      v[j] = ref::load(host[j].data(), dts[j], idx);
      raw[j] = raw_at(host[j].data(), dts[j], idx);
    }
    const uint64_t got = raw_at(pe.p(dst_off), r.out, i);
    INFO("lane " << i << " a=" << raw[0] << " b=" << raw[1] << " c=" << raw[2] << " got " << got);
    if (r.op == MTIA_PE_SE_SELECT) {
      REQUIRE(got == (v[0].truthy() ? raw[1] : raw[2]));  // a bit copy, NaN payloads too
      continue;
    }
    const ref::Value want = ref_se(r.op, r.in, v[0], v[1], v[2]);
    const uint64_t want_bits = ref::store_bits(want, r.out);
    if (!ref::is_float(r.out)) {
      REQUIRE(got == want_bits);
      continue;
    }
    const ref::Value g = ref::load(pe.p(dst_off), r.out, i);
    if (want.is_float && std::isnan(want.f)) {
      REQUIRE(std::isnan(g.f));
    } else if (is_approximate(r.op)) {
      // Host float functions: a few ulp in fp32 (or tiny absolute error where fp32 itself is
      // subnormal); at most one ulp after rounding to fp16/bf16. GELU is composed of fp32 steps
      // whose rounding its steep tail amplifies: 1e-4 relative. lgamma in fp32 loses digits
      // near its zeros: 1e-6 absolute.
      const int64_t ulps = ulp_distance(got, want_bits, r.out);
      const long double wantv = ref::load(reinterpret_cast<const uint8_t*>(&want_bits), r.out).f;
      const long double err = std::fabs(g.f - wantv);
      bool ok = r.out == MTIA_PE_DT_FP32 ? (ulps <= 4 || err <= 0x1p-126L) : ulps <= 1;
      if (r.op == MTIA_PE_SE_GELU || r.op == MTIA_PE_SE_GELU_TANH || r.op == MTIA_PE_SE_GELU_GRAD ||
          r.op == MTIA_PE_SE_GELU_TANH_GRAD) {
        ok = ok || err <= 1e-4L * std::fabs(wantv) || err <= 0x1p-126L;
      }
      if (r.op == MTIA_PE_SE_LGAMMA) ok = ok || err <= 1e-6L;
      REQUIRE(ok);
    } else if (r.op == MTIA_PE_SE_MIN || r.op == MTIA_PE_SE_MAX || r.op == MTIA_PE_SE_CLAMP) {
      REQUIRE(g.f == ref::load(reinterpret_cast<const uint8_t*>(&want_bits), r.out).f);
    } else {
      REQUIRE(got == want_bits);  // correctly rounded, signed zeros included
    }
  }
  if (!r.in_place) {
    CHECK(raw_at(pe.p(dst_off), r.out, r.count) ==
          raw_at(std::vector<uint8_t>(8, 0xee).data(), r.out, 0));
  }
}

}  // namespace

// ================================ DPE ==========================================================

namespace {

struct MmRun {
  uint8_t in = MTIA_PE_DT_FP32;
  uint32_t m = 1, n = 1, k = 1;
  uint16_t flags = 0;
  uint32_t pad = 0;  // extra elements per row of every leading dimension
};

void check_matmul(const MmRun& r, std::mt19937_64& rng) {
  Pe pe;
  const bool ta = r.flags & MTIA_PE_MM_TRANS_A, tb = r.flags & MTIA_PE_MM_TRANS_B;
  const bool acc = r.flags & MTIA_PE_MM_ACCUMULATE;
  const uint8_t out = r.in == MTIA_PE_DT_INT8 ? MTIA_PE_DT_INT32 : MTIA_PE_DT_FP32;
  const unsigned ie = ref::bytes_of(r.in);
  const uint32_t a_rows = ta ? r.k : r.m, a_cols = ta ? r.m : r.k;
  const uint32_t b_rows = tb ? r.n : r.k, b_cols = tb ? r.k : r.n;
  const uint32_t lda = a_cols + r.pad, ldb = b_cols + r.pad, ldc = r.n + r.pad;
  const uint64_t a_off = 0;
  const uint64_t b_off = (a_off + uint64_t{a_rows} * lda * ie + 63) / 64 * 64;
  const uint64_t c_off = (b_off + uint64_t{b_rows} * ldb * ie + 63) / 64 * 64;
  REQUIRE(c_off + uint64_t{r.m} * ldc * 4 <= Pe::kBytes);

  // Operands in place, with random bits in the padding too (it must not be read).
  for (uint64_t i = 0; i < uint64_t{a_rows} * lda; ++i) {
    ref::store(pe.p(a_off), r.in, i, r.in == MTIA_PE_DT_INT8 ? rng() & 0xff : gen(r.in, rng, true));
  }
  for (uint64_t i = 0; i < uint64_t{b_rows} * ldb; ++i) {
    ref::store(pe.p(b_off), r.in, i, r.in == MTIA_PE_DT_INT8 ? rng() & 0xff : gen(r.in, rng, true));
  }
  for (uint64_t i = 0; i < uint64_t{r.m} * ldc; ++i) {
    // Overwrite must not read C: fill it with NaN then.
    const uint64_t c0 = out == MTIA_PE_DT_INT32 ? rng() & 0xffffffff
                        : acc                   ? gen(out, rng, true)
                                                : 0x7fc00000;
    ref::store(pe.p(c_off), out, i, c0);
  }
  const std::vector<uint8_t> before(pe.ls.begin(), pe.ls.end());

  mtia_pe_matmul_desc d{};
  d.hdr = header(MTIA_PE_DESC_MATMUL, r.flags);
  d.in_dtype = r.in;
  d.out_dtype = out;
  d.m = r.m;
  d.n = r.n;
  d.k = r.k;
  d.lda = lda;
  d.ldb = ldb;
  d.ldc = ldc;
  d.a = L + a_off;
  d.b = L + b_off;
  d.c = L + c_off;
  auto outcome = pe.units.matmul(d);
  INFO(pe::dtype_name(r.in) << " m n k " << r.m << " " << r.n << " " << r.k << " flags " << r.flags
                            << " pad " << r.pad);
  REQUIRE(outcome.ok());

  // Naive triple loop: long double for floats, __int128 for int8.
  auto a_at = [&](uint32_t i, uint32_t l) {
    return ref::load(before.data() + a_off, r.in, ta ? size_t{l} * lda + i : size_t{i} * lda + l);
  };
  auto b_at = [&](uint32_t l, uint32_t j) {
    return ref::load(before.data() + b_off, r.in, tb ? size_t{j} * ldb + l : size_t{l} * ldb + j);
  };
  for (uint32_t i = 0; i < r.m; ++i) {
    for (uint32_t j = 0; j < ldc; ++j) {
      const size_t ci = size_t{i} * ldc + j;
      if (j >= r.n) {  // padding of C is untouched
        REQUIRE(raw_at(pe.p(c_off), out, ci) == raw_at(before.data() + c_off, out, ci));
        continue;
      }
      const ref::Value c0 = ref::load(before.data() + c_off, out, ci);
      if (r.in == MTIA_PE_DT_INT8) {
        __int128 s = acc ? c0.i : 0;
        for (uint32_t l = 0; l < r.k; ++l) s += __int128{a_at(i, l).i} * b_at(l, j).i;
        REQUIRE(static_cast<int32_t>(raw_at(pe.p(c_off), out, ci)) == ref::wrap(s, 32));
      } else {
        long double s = acc ? c0.f : 0, mag = acc ? std::fabs(c0.f) : 0;
        for (uint32_t l = 0; l < r.k; ++l) {
          const long double p = a_at(i, l).f * b_at(l, j).f;
          s += p;
          mag += std::fabs(p);
        }
        const long double got = ref::load(pe.p(c_off), out, ci).f;
        // fp32 accumulation of k + 1 terms: each partial sum rounds once.
        REQUIRE(std::fabs(got - s) <= (r.k + 2) * 0x1p-24L * mag);
      }
    }
  }
}

}  // namespace

TEST_CASE("DPE matmul: every dtype, transpose flags, accumulate, odd shapes, padded lds",
          "[units][dpe]") {
  std::mt19937_64 rng(1);
  const std::array<uint32_t, 3> shapes[] = {{1, 1, 1},    {7, 13, 5},  {33, 17, 65},
                                            {64, 64, 64}, {3, 100, 1}, {100, 2, 37}};
  for (uint8_t in : {MTIA_PE_DT_FP32, MTIA_PE_DT_FP16, MTIA_PE_DT_BF16, MTIA_PE_DT_INT8}) {
    for (const auto& s : shapes) {
      for (uint16_t flags = 0; flags < 8; ++flags) {
        check_matmul({in, s[0], s[1], s[2], flags, (flags & 1) ? 3u : 0u}, rng);
      }
    }
  }
}

TEST_CASE("DPE matmul: fp16/bf16 products are exact in fp32", "[units][dpe]") {
  for (uint8_t in : {MTIA_PE_DT_FP16, MTIA_PE_DT_BF16}) {
    Pe pe;
    // (1 + 2^-10)^2 = 1 + 2^-9 + 2^-20 (fp16); (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 (bf16): exact
    // in fp32, lost if the product were rounded to the input type.
    const long double e = in == MTIA_PE_DT_FP16 ? 0x1p-10L : 0x1p-7L;
    ref::store(pe.p(0), in, 0, float_bits(1 + e, in));
    ref::store(pe.p(64), in, 0, float_bits(1 + e, in));
    mtia_pe_matmul_desc d{};
    d.hdr = header(MTIA_PE_DESC_MATMUL);
    d.in_dtype = in;
    d.out_dtype = MTIA_PE_DT_FP32;
    d.m = d.n = d.k = 1;
    d.lda = d.ldb = d.ldc = 1;
    d.a = L;
    d.b = L + 64;
    d.c = L + 128;
    REQUIRE(pe.units.matmul(d).ok());
    CHECK(ref::load(pe.p(128), MTIA_PE_DT_FP32).f == 1 + 2 * e + e * e);
  }
}

TEST_CASE("DPE matmul: int8 sums wrap modulo 2^32", "[units][dpe]") {
  Pe pe;
  // 131073 products of (-128)(-128) = 16384 * 131073 = 2^31 + 16384, which wraps to
  // -2^31 + 16384 in int32.
  constexpr uint32_t k = 131073;
  std::memset(pe.p(0), 0x80, k);
  std::memset(pe.p(140000), 0x80, k);
  mtia_pe_matmul_desc d{};
  d.hdr = header(MTIA_PE_DESC_MATMUL, MTIA_PE_MM_TRANS_B);  // B stored n x k = 1 x k
  d.in_dtype = MTIA_PE_DT_INT8;
  d.out_dtype = MTIA_PE_DT_INT32;
  d.m = d.n = 1;
  d.k = k;
  d.lda = d.ldb = k;
  d.ldc = 1;
  d.a = L;
  d.b = L + 140000;
  d.c = L + 280000;
  REQUIRE(pe.units.matmul(d).ok());
  int32_t c;
  std::memcpy(&c, pe.p(280000), 4);
  CHECK(c == -2147483648 + 16384);
  // Accumulating onto INT32_MAX wraps as well.
  d.hdr.flags |= MTIA_PE_MM_ACCUMULATE;
  const int32_t max = INT32_MAX;
  std::memcpy(pe.p(280000), &max, 4);
  REQUIRE(pe.units.matmul(d).ok());
  std::memcpy(&c, pe.p(280000), 4);
  CHECK(c == static_cast<int32_t>(static_cast<uint32_t>(INT32_MAX) + 2147483648u + 16384u));
}

TEST_CASE("DPE matmul: a one-row operand may have any leading dimension", "[units][dpe]") {
  Pe pe;
  const float a[3] = {1, 2, 3};
  const float b[3] = {4, 5, 6};
  std::memcpy(pe.p(0), a, sizeof a);
  std::memcpy(pe.p(64), b, sizeof b);
  mtia_pe_matmul_desc d{};
  d.hdr = header(MTIA_PE_DESC_MATMUL, MTIA_PE_MM_TRANS_B);
  d.in_dtype = d.out_dtype = MTIA_PE_DT_FP32;
  d.m = 1;
  d.n = 1;
  d.k = 3;
  d.lda = 4000000000u;  // never used: A has one row
  d.ldb = 3'000'000'000u;
  d.ldc = 4'000'000'000u;
  d.a = L;
  d.b = L + 64;
  d.c = L + 128;
  REQUIRE(pe.units.matmul(d).ok());
  CHECK(ref::load(pe.p(128), MTIA_PE_DT_FP32).f == 32);
}

TEST_CASE("DPE matmul: bad operands are rejected and nothing is written", "[units][dpe]") {
  Pe pe;
  mtia_pe_matmul_desc good{};
  good.hdr = header(MTIA_PE_DESC_MATMUL);
  good.in_dtype = MTIA_PE_DT_FP16;
  good.out_dtype = MTIA_PE_DT_FP32;
  good.m = good.n = good.k = 8;
  good.lda = good.ldb = good.ldc = 8;
  good.a = L;
  good.b = L + 1024;
  good.c = L + 2048;
  REQUIRE(pe.units.matmul(good).ok());
  for (size_t i = 0; i < 4096; ++i) pe.ls[i] = static_cast<uint8_t>(i * 7);
  const std::vector<uint8_t> before(pe.ls.begin(), pe.ls.end());

  struct Bad {
    const char* what;
    void (*mutate)(mtia_pe_matmul_desc&);
    const char* says;
  };
  const Bad bads[] = {
      {"bf16 -> bf16",
       [](mtia_pe_matmul_desc& d) {
         d.in_dtype = MTIA_PE_DT_BF16;
         d.out_dtype = MTIA_PE_DT_BF16;
       },
       "not supported"},
      {"int8 -> fp32", [](mtia_pe_matmul_desc& d) { d.in_dtype = MTIA_PE_DT_INT8; }, "int8"},
      {"C beyond the local store", [](mtia_pe_matmul_desc& d) { d.c = L + Pe::kBytes - 64; },
       "local store"},
      {"A below the local store", [](mtia_pe_matmul_desc& d) { d.a = L - 128; }, "local store"},
      {"C overlaps A", [](mtia_pe_matmul_desc& d) { d.c = L + 64; }, "overlap"},
      {"lda too small", [](mtia_pe_matmul_desc& d) { d.lda = 7; }, "lda"},
      {"k = 0", [](mtia_pe_matmul_desc& d) { d.k = 0; }, ">= 1"},
      {"misaligned C", [](mtia_pe_matmul_desc& d) { d.c = L + 2050; }, "aligned"},
      {"undefined flag", [](mtia_pe_matmul_desc& d) { d.hdr.flags = 0x8; }, "flag"},
      {"wrong kind", [](mtia_pe_matmul_desc& d) { d.hdr.kind = MTIA_PE_DESC_SE; }, "SE"},
  };
  for (const Bad& b : bads) {
    mtia_pe_matmul_desc d = good;
    b.mutate(d);
    auto r = pe.units.matmul(d);
    INFO(b.what);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains(b.says));
    REQUIRE(std::equal(before.begin(), before.end(), pe.ls.begin()));
  }
  CHECK(pe.units.counters(UnitKind::kDpe).rejected == std::size(bads));
  CHECK(pe.units.counters(UnitKind::kDpe).operations == 1);
}

// ================================ SE ===========================================================

TEST_CASE("SE: every op with every allowed dtype, against the reference", "[units][se]") {
  std::mt19937_64 rng(2);
  Pe pe;
  for (uint8_t op = 1; op < MTIA_PE_SE_OP_COUNT; ++op) {
    if (op == MTIA_PE_SE_CAST) continue;  // its own test: every pair
    for (uint8_t in : se_dtypes(op)) {
      SeRun r;
      r.op = op;
      r.in = in;
      r.out = se_out_dtype(op, in);
      check_se(pe, r, rng);
      r.tame = true;  // and ordinary values, where the wild ones are mostly NaN or Inf
      check_se(pe, r, rng);
    }
  }
}

TEST_CASE("SE: cast between every pair of dtypes", "[units][se]") {
  std::mt19937_64 rng(3);
  Pe pe;
  for (uint8_t in : kAllDtypes) {
    for (uint8_t out : kAllDtypes) {
      SeRun r;
      r.op = MTIA_PE_SE_CAST;
      r.in = in;
      r.out = out;
      r.count = 513;
      check_se(pe, r, rng);
    }
  }
}

TEST_CASE("SE: broadcast and immediate operands, and exactly in place", "[units][se]") {
  std::mt19937_64 rng(4);
  Pe pe;
  const uint8_t V = MTIA_PE_OPND_VECTOR, B = MTIA_PE_OPND_BROADCAST, I = MTIA_PE_OPND_IMMEDIATE;
  const std::array<uint8_t, 3> modes2[] = {{V, B, 0}, {B, V, 0}, {V, I, 0}, {I, V, 0}, {B, I, 0}};
  for (uint8_t in : {MTIA_PE_DT_FP32, MTIA_PE_DT_BF16, MTIA_PE_DT_INT8, MTIA_PE_DT_INT64}) {
    for (uint8_t op : {MTIA_PE_SE_ADD, MTIA_PE_SE_DIV, MTIA_PE_SE_LT, MTIA_PE_SE_MAX}) {
      for (const auto& m : modes2) {
        SeRun r;
        r.op = op;
        r.in = in;
        r.out = se_out_dtype(op, in);
        r.mode = m;
        r.count = 100;
        check_se(pe, r, rng);
      }
    }
    // Clamp with scalar bounds, select with a broadcast condition or scalar branches.
    const std::array<uint8_t, 3> modes3[] = {{V, I, I}, {V, B, V}, {B, V, V}, {I, V, B}, {V, I, B}};
    for (uint8_t op : {MTIA_PE_SE_CLAMP, MTIA_PE_SE_SELECT}) {
      for (const auto& m : modes3) {
        SeRun r;
        r.op = op;
        r.in = in;
        r.out = in;
        r.mode = m;
        r.count = 100;
        check_se(pe, r, rng);
      }
    }
  }
  // Exactly in place: out over a, same element size (also a cast between 4-byte dtypes).
  for (auto [op, in, out] : {std::tuple{MTIA_PE_SE_ADD, MTIA_PE_DT_FP16, MTIA_PE_DT_FP16},
                             std::tuple{MTIA_PE_SE_EXP, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32},
                             std::tuple{MTIA_PE_SE_CAST, MTIA_PE_DT_FP32, MTIA_PE_DT_INT32},
                             std::tuple{MTIA_PE_SE_NEG, MTIA_PE_DT_INT8, MTIA_PE_DT_INT8}}) {
    SeRun r;
    r.op = static_cast<uint8_t>(op);
    r.in = static_cast<uint8_t>(in);
    r.out = static_cast<uint8_t>(out);
    r.in_place = true;
    check_se(pe, r, rng);
  }
}

namespace {

// One SE op on immediate operands (bit patterns), one lane; returns the result's bits.
uint64_t se_on_immediates(Pe& pe, uint8_t op, uint8_t in, uint8_t out, uint64_t a, uint64_t b = 0) {
  mtia_pe_se_desc d{};
  d.hdr = header(MTIA_PE_DESC_SE);
  d.op = op;
  d.in_dtype = in;
  d.out_dtype = out;
  d.count = 1;
  d.mode[0] = MTIA_PE_OPND_IMMEDIATE;
  d.imm[0] = a;
  if (se_arity(op) == 2) {
    d.mode[1] = MTIA_PE_OPND_IMMEDIATE;
    d.imm[1] = b;
  }
  d.dst = L;
  REQUIRE(pe.units.eltwise(d).ok());
  return raw_at(pe.p(0), out, 0);
}

}  // namespace

TEST_CASE("SE: hand-computed special cases", "[units][se]") {
  Pe pe;
  auto run1 = [&](uint8_t op, uint8_t in, uint8_t out, uint64_t a, uint64_t b = 0) {
    return se_on_immediates(pe, op, in, out, a, b);
  };
  const uint8_t I8 = MTIA_PE_DT_INT8, I32 = MTIA_PE_DT_INT32, I64 = MTIA_PE_DT_INT64;
  // Integer division: truncation, x/0 = -1, MIN/-1 = MIN.
  CHECK(run1(MTIA_PE_SE_DIV, I32, I32, static_cast<uint32_t>(-7), 2) == static_cast<uint32_t>(-3));
  CHECK(run1(MTIA_PE_SE_DIV, I32, I32, 5, 0) == 0xffffffffu);
  CHECK(run1(MTIA_PE_SE_DIV, I8, I8, 0x80, 0xff) == 0x80);
  CHECK(run1(MTIA_PE_SE_DIV, I64, I64, 1ull << 63, ~0ull) == 1ull << 63);
  // Wrapping arithmetic.
  CHECK(run1(MTIA_PE_SE_ADD, I8, I8, 127, 1) == 0x80);
  CHECK(run1(MTIA_PE_SE_MUL, I32, I32, 0x10000, 0x10000) == 0);
  CHECK(run1(MTIA_PE_SE_ABS, I8, I8, 0x80) == 0x80);
  CHECK(run1(MTIA_PE_SE_NEG, I64, I64, 1ull << 63) == 1ull << 63);
  // fp16: 1 + 2^-10 + 2^-11 rounds (tie) to even 1 + 2^-9.
  CHECK(run1(MTIA_PE_SE_ADD, MTIA_PE_DT_FP16, MTIA_PE_DT_FP16, 0x3c01, 0x1000) == 0x3c02);
  // NaN propagates through min/max; comparisons with NaN are false except ne.
  const uint64_t nan32 = 0x7fc00000, one32 = 0x3f800000;
  CHECK(std::isnan(ref::decode_f32(static_cast<uint32_t>(
      run1(MTIA_PE_SE_MIN, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, one32, nan32)))));
  CHECK(std::isnan(ref::decode_f32(static_cast<uint32_t>(
      run1(MTIA_PE_SE_MAX, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, nan32, one32)))));
  CHECK(run1(MTIA_PE_SE_EQ, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, nan32, nan32) == 0);
  CHECK(run1(MTIA_PE_SE_NE, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, nan32, nan32) == 1);
  CHECK(run1(MTIA_PE_SE_LE, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, nan32, one32) == 0);
  // Truthiness: NaN is true, -0.0 is false.
  CHECK(run1(MTIA_PE_SE_LNOT, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, nan32) == 0);
  CHECK(run1(MTIA_PE_SE_LNOT, MTIA_PE_DT_FP32, MTIA_PE_DT_BOOL, 0x80000000) == 1);
  // Bitwise not of bool is logical not; of int8 the complement.
  CHECK(run1(MTIA_PE_SE_BNOT, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL, 1) == 0);
  CHECK(run1(MTIA_PE_SE_BNOT, I8, I8, 0x0f) == 0xf0);
  // relu(-0) = +0, relu(NaN) = NaN; sigmoid and silu at the extremes.
  CHECK(run1(MTIA_PE_SE_RELU, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0x80000000) == 0);
  CHECK(run1(MTIA_PE_SE_SIGMOID, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0xff800000) == 0);
  CHECK(run1(MTIA_PE_SE_SIGMOID, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0x7f800000) == one32);
  CHECK(run1(MTIA_PE_SE_SILU, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, 0x7f800000) == 0x7f800000);
  // Casts: saturate, NaN -> 0, to bool any non-zero.
  CHECK(run1(MTIA_PE_SE_CAST, MTIA_PE_DT_FP32, I8, 0x43960000) == 0x7f);  // 300.0 -> 127
  CHECK(run1(MTIA_PE_SE_CAST, MTIA_PE_DT_FP32, I32, nan32) == 0);
  CHECK(run1(MTIA_PE_SE_CAST, I32, MTIA_PE_DT_BOOL, 256) == 1);
  CHECK(run1(MTIA_PE_SE_CAST, I32, I8, 256) == 0);  // integer casts wrap
  CHECK(run1(MTIA_PE_SE_CAST, MTIA_PE_DT_FP32, MTIA_PE_DT_BF16, 0x3f808000) == 0x3f80);
}

TEST_CASE("SE: fp32 tanh is correctly rounded over a sweep of inputs", "[units][se]") {
  // Every 4099th fp32 bit pattern (both signs, tiny, subnormal and huge values) against the
  // long double tanh rounded once to float; then the special values.
  Pe pe;
  constexpr uint32_t kStep = 4099, kLanes = 1024;
  std::vector<float> in;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += kStep) {
    const float f = ref::decode_f32(static_cast<uint32_t>(bits));
    if (!std::isnan(f)) in.push_back(f);
  }
  uint64_t mismatches = 0;
  for (size_t base = 0; base < in.size(); base += kLanes) {
    const uint32_t n = static_cast<uint32_t>(std::min<size_t>(kLanes, in.size() - base));
    std::memcpy(pe.p(4096), in.data() + base, n * 4);
    mtia_pe_se_desc d{};
    d.hdr = header(MTIA_PE_DESC_SE);
    d.op = MTIA_PE_SE_TANH;
    d.in_dtype = d.out_dtype = MTIA_PE_DT_FP32;
    d.count = n;
    d.mode[0] = MTIA_PE_OPND_VECTOR;
    d.src[0] = L + 4096;
    d.dst = L + 4096 + 8 * kLanes;
    REQUIRE(pe.units.eltwise(d).ok());
    for (uint32_t i = 0; i < n; ++i) {
      float got;
      std::memcpy(&got, pe.p(4096 + 8 * kLanes + 4 * i), 4);
      const float want = static_cast<float>(std::tanh(static_cast<long double>(in[base + i])));
      if (std::memcmp(&got, &want, 4) != 0) {
        ++mismatches;
        UNSCOPED_INFO("tanh(" << in[base + i] << ") = " << got << ", want " << want);
      }
    }
  }
  CHECK(in.size() > 1000000);
  CHECK(mismatches == 0);
  auto tanh1 = [&](uint32_t bits) {
    return static_cast<uint32_t>(
        se_on_immediates(pe, MTIA_PE_SE_TANH, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32, bits));
  };
  CHECK(tanh1(0x80000000) == 0x80000000);  // -0 stays -0
  CHECK(tanh1(0x7f800000) == 0x3f800000);  // +Inf -> 1
  CHECK(tanh1(0xff800000) == 0xbf800000);  // -Inf -> -1
  CHECK(std::isnan(ref::decode_f32(tanh1(0x7fc00000))));
}

TEST_CASE("SE: operands the doc does not allow are rejected", "[units][se]") {
  Pe pe;
  const std::vector<uint8_t> before(pe.ls.begin(), pe.ls.end());
  auto desc = [](uint8_t op, uint8_t in, uint8_t out) {
    mtia_pe_se_desc d{};
    d.hdr = header(MTIA_PE_DESC_SE);
    d.op = op;
    d.in_dtype = in;
    d.out_dtype = out;
    d.count = 16;
    for (int j = 0; j < se_arity(op); ++j) {
      d.mode[j] = MTIA_PE_OPND_VECTOR;
      d.src[j] = L + 1024 * (j + 1);
    }
    d.dst = L + 8192;
    return d;
  };
  const mtia_pe_se_desc bads[] = {
      desc(MTIA_PE_SE_EXP, MTIA_PE_DT_INT32, MTIA_PE_DT_INT32),    // transcendental on int
      desc(MTIA_PE_SE_ADD, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL),      // arithmetic on bool
      desc(MTIA_PE_SE_BAND, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32),     // bitwise on float
      desc(MTIA_PE_SE_LT, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32),       // comparison not to bool
      desc(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP16),      // mixed arithmetic
      desc(MTIA_PE_SE_CAST, MTIA_PE_DT_FP32, 9),                   // undefined dtype
      desc(MTIA_PE_SE_OP_COUNT, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32)  // undefined op
  };
  for (const auto& d : bads) {
    INFO("op " << int(d.op) << " in " << int(d.in_dtype) << " out " << int(d.out_dtype));
    auto r = pe.units.eltwise(d);
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(r.error().reason.empty());
  }
  // Overlap that is not exactly in place, an operand outside the local store.
  auto overlap = desc(MTIA_PE_SE_ADD, MTIA_PE_DT_FP32, MTIA_PE_DT_FP32);
  overlap.dst = overlap.src[1] + 4;
  CHECK_THAT(pe.units.eltwise(overlap).error().reason, Catch::Contains("overlaps"));
  auto outside = desc(MTIA_PE_SE_NEG, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64);
  outside.src[0] = L + Pe::kBytes - 8;
  CHECK_THAT(pe.units.eltwise(outside).error().reason, Catch::Contains("local store"));
  auto wide_imm = desc(MTIA_PE_SE_ADD, MTIA_PE_DT_INT8, MTIA_PE_DT_INT8);
  wide_imm.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  wide_imm.src[1] = 0;
  wide_imm.imm[1] = 0x100;
  CHECK_THAT(pe.units.eltwise(wide_imm).error().reason, Catch::Contains("immediate"));
  CHECK(std::equal(before.begin(), before.end(), pe.ls.begin()));
  CHECK(pe.units.counters(UnitKind::kSe).operations == 0);
}

// ================================ RE ===========================================================

namespace {

struct ReRun {
  uint8_t op, in, out, axis;
  bool acc;
  uint32_t rows, cols, ld;
};

void check_reduce(Pe& pe, const ReRun& r, std::mt19937_64& rng) {
  const uint32_t outputs = r.axis == 1 ? r.rows : r.cols;
  const uint64_t src_off = 0, dst_off = 200 * 1024;
  const bool sums = r.op == MTIA_PE_RE_SUM || r.op == MTIA_PE_RE_SUMSQ;
  const bool arg = r.op == MTIA_PE_RE_ARGMAX || r.op == MTIA_PE_RE_ARGMIN;
  for (size_t i = 0; i < size_t{r.rows} * r.ld; ++i) {
    uint64_t v;
    if (sums) {
      v = gen(r.in, rng, true);
    } else if (rng() % 3 == 0) {
      v = gen(r.in, rng);  // specials: NaN, Inf, MIN, MAX...
    } else {
      // Few distinct values, so ties (first extreme wins) are common.
      ref::Value x;
      x.is_float = ref::is_float(r.in);
      x.f = static_cast<long double>(rng() % 5) - 2;
      x.i = static_cast<int64_t>(rng() % 5) - 2;
      v = ref::store_bits(x, r.in);
    }
    ref::store(pe.p(src_off), r.in, i, v);
  }
  for (uint32_t o = 0; o <= outputs; ++o) {
    ref::store(pe.p(dst_off), r.out, o, (r.acc && o < outputs) ? gen(r.out, rng, true) : 0xee);
  }
  const std::vector<uint8_t> before(pe.ls.begin(), pe.ls.end());

  mtia_pe_re_desc d{};
  d.hdr = header(MTIA_PE_DESC_RE, r.acc ? MTIA_PE_RE_ACCUMULATE : 0);
  d.op = r.op;
  d.in_dtype = r.in;
  d.out_dtype = r.out;
  d.axis = r.axis;
  d.rows = r.rows;
  d.cols = r.cols;
  d.ld_src = r.ld;
  d.src = L + src_off;
  d.dst = L + dst_off;
  INFO("RE op " << int(r.op) << " " << pe::dtype_name(r.in) << " -> " << pe::dtype_name(r.out)
                << " axis " << int(r.axis) << (r.acc ? " acc" : "") << " " << r.rows << "x"
                << r.cols << " ld " << r.ld);
  REQUIRE(pe.units.reduce(d).ok());

  const uint32_t along = r.axis == 1 ? r.cols : r.rows;
  for (uint32_t o = 0; o < outputs; ++o) {
    auto x_at = [&](uint32_t t) {
      const uint32_t row = r.axis == 1 ? o : t, col = r.axis == 1 ? t : o;
      return ref::load(before.data() + src_off, r.in, size_t{row} * r.ld + col);
    };
    const ref::Value prev = ref::load(before.data() + dst_off, r.out, o);
    const ref::Value got = ref::load(pe.p(dst_off), r.out, o);
    INFO("output " << o);
    if (sums && ref::is_float(r.in)) {
      long double s = 0, mag = 0;
      for (uint32_t t = 0; t < along; ++t) {
        const long double x = x_at(t).f;
        s += r.op == MTIA_PE_RE_SUMSQ ? x * x : x;
        mag += r.op == MTIA_PE_RE_SUMSQ ? x * x : std::fabs(x);
      }
      if (r.acc) {
        s += prev.f;
        mag += std::fabs(prev.f);
      }
      // fp32 partial sums, then one rounding to the output (2^-8 relative for bf16).
      // (plus half the smallest subnormal of the output, for sums that cancel to tiny values).
      const long double out_eps = r.out == MTIA_PE_DT_FP32   ? 0x1p-24L
                                  : r.out == MTIA_PE_DT_FP16 ? 0x1p-11L
                                                             : 0x1p-8L;
      const long double out_tiny = r.out == MTIA_PE_DT_FP32   ? 0x1p-150L
                                   : r.out == MTIA_PE_DT_FP16 ? 0x1p-25L
                                                              : 0x1p-134L;
      REQUIRE(std::fabs(got.f - s) <=
              (along + 2) * 0x1p-24L * mag + out_eps * std::fabs(s) + out_tiny);
    } else if (sums) {
      __int128 s = r.acc ? prev.i : 0;
      for (uint32_t t = 0; t < along; ++t) s += x_at(t).i;
      REQUIRE(raw_at(pe.p(dst_off), r.out, o) == ref::store_bits(ival(s), r.out));
    } else {
      const bool is_max = r.op == MTIA_PE_RE_MAX || r.op == MTIA_PE_RE_ARGMAX;
      ref::Value best = x_at(0);
      int64_t index = 0;
      for (uint32_t t = 1; t < along; ++t) {
        const ref::Value x = x_at(t);
        bool take;
        if (best.is_float) {
          take = !std::isnan(best.f) && (std::isnan(x.f) || (is_max ? x.f > best.f : x.f < best.f));
        } else {
          take = is_max ? x.i > best.i : x.i < best.i;
        }
        if (take) {
          best = x;
          index = t;
        }
      }
      if (arg) {
        REQUIRE(got.i == index);
      } else {
        if (r.acc) {
          if (best.is_float) {
            best.f = is_max ? fmax_nan(prev.f, best.f) : fmin_nan(prev.f, best.f);
          } else {
            best.i = is_max ? std::max(prev.i, best.i) : std::min(prev.i, best.i);
          }
        }
        if (best.is_float && std::isnan(best.f)) {
          REQUIRE(std::isnan(got.f));
        } else if (best.is_float) {
          REQUIRE(got.f == best.f);
        } else {
          REQUIRE(got.i == best.i);
        }
      }
    }
  }
  // Nothing past the outputs.
  CHECK(raw_at(pe.p(dst_off), r.out, outputs) == raw_at(before.data() + dst_off, r.out, outputs));
}

}  // namespace

TEST_CASE("RE: every op, dtype, axis and accumulate mode against the reference", "[units][re]") {
  std::mt19937_64 rng(5);
  Pe pe;
  const std::array<uint32_t, 3> shapes[] = {{1, 1, 1}, {5, 70, 73}, {37, 3, 3}, {64, 64, 80}};
  for (const auto& s : shapes) {
    for (uint8_t axis : {0, 1}) {
      for (uint8_t in : kAllDtypes) {
        std::vector<ReRun> runs;
        const bool fl = ref::is_float(in);
        for (bool acc : {false, true}) {
          if (fl) {
            for (uint8_t out : {uint8_t{MTIA_PE_DT_FP32}, in}) {
              runs.push_back({MTIA_PE_RE_SUM, in, out, axis, acc, s[0], s[1], s[2]});
              runs.push_back({MTIA_PE_RE_SUMSQ, in, out, axis, acc, s[0], s[1], s[2]});
            }
          } else {
            for (uint8_t out : {MTIA_PE_DT_INT32, MTIA_PE_DT_INT64}) {
              runs.push_back({MTIA_PE_RE_SUM, in, out, axis, acc, s[0], s[1], s[2]});
            }
          }
          runs.push_back({MTIA_PE_RE_MAX, in, in, axis, acc, s[0], s[1], s[2]});
          runs.push_back({MTIA_PE_RE_MIN, in, in, axis, acc, s[0], s[1], s[2]});
        }
        for (uint8_t out : {MTIA_PE_DT_INT32, MTIA_PE_DT_INT64}) {
          runs.push_back({MTIA_PE_RE_ARGMAX, in, out, axis, false, s[0], s[1], s[2]});
          runs.push_back({MTIA_PE_RE_ARGMIN, in, out, axis, false, s[0], s[1], s[2]});
        }
        for (const auto& r : runs) check_reduce(pe, r, rng);
      }
    }
  }
}

TEST_CASE("RE: hand-computed NaN, Inf and wrap cases", "[units][re]") {
  Pe pe;
  auto reduce_row = [&](uint8_t op, uint8_t in, uint8_t out, const std::vector<uint64_t>& xs) {
    for (size_t i = 0; i < xs.size(); ++i) ref::store(pe.p(0), in, i, xs[i]);
    mtia_pe_re_desc d{};
    d.hdr = header(MTIA_PE_DESC_RE);
    d.op = op;
    d.in_dtype = in;
    d.out_dtype = out;
    d.axis = 1;
    d.rows = 1;
    d.cols = d.ld_src = static_cast<uint32_t>(xs.size());
    d.src = L;
    d.dst = L + 4096;
    REQUIRE(pe.units.reduce(d).ok());
    return raw_at(pe.p(4096), out, 0);
  };
  const uint64_t one = 0x3f800000, two = 0x40000000, nan = 0x7fc00000, inf = 0x7f800000;
  const uint8_t F = MTIA_PE_DT_FP32;
  CHECK(std::isnan(
      ref::decode_f32(static_cast<uint32_t>(reduce_row(MTIA_PE_RE_MAX, F, F, {one, nan, two})))));
  CHECK(std::isnan(
      ref::decode_f32(static_cast<uint32_t>(reduce_row(MTIA_PE_RE_MIN, F, F, {nan, one})))));
  CHECK(reduce_row(MTIA_PE_RE_ARGMAX, F, MTIA_PE_DT_INT32, {one, two, nan, nan, two}) == 2);
  CHECK(reduce_row(MTIA_PE_RE_ARGMIN, F, MTIA_PE_DT_INT64, {two, one, one, nan}) == 3);
  CHECK(reduce_row(MTIA_PE_RE_ARGMAX, F, MTIA_PE_DT_INT32, {one, two, one, two}) == 1);
  CHECK(reduce_row(MTIA_PE_RE_SUM, F, F, {one, inf, two}) == inf);
  CHECK(std::isnan(
      ref::decode_f32(static_cast<uint32_t>(reduce_row(MTIA_PE_RE_SUM, F, F, {inf, 0xff800000})))));
  // fp16 sums accumulate in fp32: 2048 + 1 + 1 is 2050 (fp16 alone would stay at 2048).
  CHECK(reduce_row(MTIA_PE_RE_SUM, MTIA_PE_DT_FP16, MTIA_PE_DT_FP16, {0x6800, 0x3c00, 0x3c00}) ==
        0x6801);
  // int64 sums wrap, and wrap again into int32.
  CHECK(reduce_row(MTIA_PE_RE_SUM, MTIA_PE_DT_INT64, MTIA_PE_DT_INT64, {uint64_t{INT64_MAX}, 1}) ==
        uint64_t{1} << 63);
  CHECK(reduce_row(MTIA_PE_RE_SUM, MTIA_PE_DT_INT32, MTIA_PE_DT_INT32, {0x7fffffff, 1}) ==
        0x80000000);
  CHECK(reduce_row(MTIA_PE_RE_SUM, MTIA_PE_DT_INT32, MTIA_PE_DT_INT64, {0x7fffffff, 1}) ==
        0x80000000);
  CHECK(reduce_row(MTIA_PE_RE_SUM, MTIA_PE_DT_BOOL, MTIA_PE_DT_INT32, {1, 0, 1, 1}) == 3);
  CHECK(reduce_row(MTIA_PE_RE_MAX, MTIA_PE_DT_BOOL, MTIA_PE_DT_BOOL, {0, 1, 0}) == 1);
}

TEST_CASE("RE: bad operands are rejected", "[units][re]") {
  Pe pe;
  mtia_pe_re_desc good{};
  good.hdr = header(MTIA_PE_DESC_RE);
  good.op = MTIA_PE_RE_SUM;
  good.in_dtype = MTIA_PE_DT_FP16;
  good.out_dtype = MTIA_PE_DT_FP32;
  good.axis = 0;
  good.rows = 4;
  good.cols = 8;
  good.ld_src = 8;
  good.src = L;
  good.dst = L + 1024;
  REQUIRE(pe.units.reduce(good).ok());
  const std::vector<uint8_t> before(pe.ls.begin(), pe.ls.end());
  std::vector<mtia_pe_re_desc> bads(8, good);
  // argmax cannot accumulate
  bads[0].hdr.flags = MTIA_PE_RE_ACCUMULATE;
  bads[0].op = MTIA_PE_RE_ARGMAX;
  bads[0].out_dtype = MTIA_PE_DT_INT32;
  bads[1].out_dtype = MTIA_PE_DT_BF16;  // fp16 summed into bf16
  // sum of squares of integers
  bads[2].op = MTIA_PE_RE_SUMSQ;
  bads[2].in_dtype = MTIA_PE_DT_INT32;
  bads[2].out_dtype = MTIA_PE_DT_INT32;
  bads[3].axis = 2;
  bads[4].ld_src = 7;                 // less than cols
  bads[5].dst = L + 32;               // overlaps the source
  bads[6].src = L + Pe::kBytes - 16;  // outside the local store
  // max may not change the dtype
  bads[7].op = MTIA_PE_RE_MAX;
  bads[7].out_dtype = MTIA_PE_DT_FP32;
  for (size_t i = 0; i < bads.size(); ++i) {
    INFO("bad descriptor " << i);
    auto r = pe.units.reduce(bads[i]);
    REQUIRE_FALSE(r.ok());
    CHECK_FALSE(r.error().reason.empty());
  }
  CHECK(std::equal(before.begin(), before.end(), pe.ls.begin()));
}

// ================================ MLU ==========================================================

TEST_CASE("MLU: copy and transpose for 1-, 2-, 4- and 8-byte elements", "[units][mlu]") {
  std::mt19937_64 rng(6);
  Pe pe;
  for (uint8_t es : {1, 2, 4, 8}) {
    for (uint8_t op : {MTIA_PE_MLU_COPY, MTIA_PE_MLU_TRANSPOSE}) {
      for (auto [rows, cols] :
           {std::pair{1u, 1u}, std::pair{3u, 70u}, std::pair{67u, 33u}, std::pair{64u, 64u}}) {
        const bool tr = op == MTIA_PE_MLU_TRANSPOSE;
        const uint32_t ld_src = cols + 5, dst_rows = tr ? cols : rows, dst_cols = tr ? rows : cols;
        const uint32_t ld_dst = dst_cols + 3;
        const uint64_t src_off = 0, dst_off = 128 * 1024;
        for (size_t i = 0; i < size_t{rows} * ld_src * es; ++i) pe.ls[src_off + i] = rng() & 0xff;
        for (size_t i = 0; i < size_t{dst_rows} * ld_dst * es; ++i) pe.ls[dst_off + i] = 0x5a;
        mtia_pe_mlu_desc d{};
        d.hdr = header(MTIA_PE_DESC_MLU);
        d.op = op;
        d.elem_size = es;
        d.rows = rows;
        d.cols = cols;
        d.ld_src = ld_src;
        d.ld_dst = ld_dst;
        d.src = L + src_off;
        d.dst = L + dst_off;
        INFO("op " << int(op) << " elem " << int(es) << " " << rows << "x" << cols);
        REQUIRE(pe.units.layout(d).ok());
        for (uint32_t i = 0; i < dst_rows; ++i) {
          for (uint32_t j = 0; j < ld_dst; ++j) {
            const uint8_t* got = pe.p(dst_off + (size_t{i} * ld_dst + j) * es);
            if (j >= dst_cols) {  // padding untouched
              for (unsigned b = 0; b < es; ++b) REQUIRE(got[b] == 0x5a);
              continue;
            }
            const size_t si = tr ? size_t{j} * ld_src + i : size_t{i} * ld_src + j;
            REQUIRE(std::memcmp(got, pe.p(src_off + si * es), es) == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("MLU: bad operands are rejected", "[units][mlu]") {
  Pe pe;
  mtia_pe_mlu_desc good{};
  good.hdr = header(MTIA_PE_DESC_MLU);
  good.op = MTIA_PE_MLU_TRANSPOSE;
  good.elem_size = 4;
  good.rows = 8;
  good.cols = 16;
  good.ld_src = 16;
  good.ld_dst = 8;
  good.src = L;
  good.dst = L + 4096;
  REQUIRE(pe.units.layout(good).ok());
  std::vector<mtia_pe_mlu_desc> bads(6, good);
  bads[0].elem_size = 3;
  bads[1].ld_dst = 7;     // transposed rows have 8 elements
  bads[2].dst = L + 256;  // overlaps the source
  bads[3].dst = L + Pe::kBytes - 64;
  bads[4].op = 3;
  bads[5].src = L + 2;  // misaligned
  for (size_t i = 0; i < bads.size(); ++i) {
    INFO("bad descriptor " << i);
    REQUIRE_FALSE(pe.units.layout(bads[i]).ok());
  }
  CHECK(pe.units.counters(UnitKind::kMlu).rejected == bads.size());
}

// ================================ Timing =======================================================

// The mtia-v1 preset's unit figures (presets/mtia-v1.json); the defaults are mtia-v2's.
UnitTiming v1_timing() {
  UnitTiming t;
  t.dpe_int8_macs_per_cycle = 1024;
  t.dpe_fp16_macs_per_cycle = 512;
  t.dpe_fp32_macs_per_cycle = 128;
  t.se_vector_bytes = 64;
  t.se_elements_per_cycle = 64;
  t.re_elements_per_cycle = 16;
  t.mlu_bytes_per_cycle = 64;
  return t;
}

TEST_CASE("unit timing: hand-computed busy cycles on both presets", "[units][timing]") {
  Pe v2(UnitTiming{});
  Pe v1(v1_timing());
  mtia_pe_matmul_desc mm{};
  mm.hdr = header(MTIA_PE_DESC_MATMUL);
  mm.in_dtype = MTIA_PE_DT_FP16;
  mm.out_dtype = MTIA_PE_DT_FP32;
  mm.m = mm.n = mm.k = 64;
  mm.lda = mm.ldb = mm.ldc = 64;
  mm.a = L;
  mm.b = L + 16384;
  mm.c = L + 32768;
  // 64^3 = 262144 MACs / 1024 fp16 MACs per cycle = 256, + 16 issue (v2); v1: / 512 = 512.
  auto r = v2.units.matmul(mm);
  REQUIRE(r.ok());
  CHECK(r.value().busy_cycles == 256 + 16);
  CHECK(r.value().work == 262144);
  CHECK(v1.units.matmul(mm).value().busy_cycles == 512 + 16);
  // int8: 2048 (v2) and 1024 (v1) MACs per cycle.
  mm.in_dtype = MTIA_PE_DT_INT8;
  mm.out_dtype = MTIA_PE_DT_INT32;
  CHECK(v2.units.matmul(mm).value().busy_cycles == 128 + 16);
  CHECK(v1.units.matmul(mm).value().busy_cycles == 256 + 16);
  // fp32: a quarter of the fp16 rate: 256 (v2), 128 (v1).
  mm.in_dtype = MTIA_PE_DT_FP32;
  mm.out_dtype = MTIA_PE_DT_FP32;
  CHECK(v2.units.matmul(mm).value().busy_cycles == 1024 + 16);
  CHECK(v1.units.matmul(mm).value().busy_cycles == 2048 + 16);
  // A partial tile still takes a whole cycle: 7*13*5 = 455 MACs.
  mm.in_dtype = MTIA_PE_DT_BF16;
  mm.m = 7;
  mm.n = 13;
  mm.k = 5;
  CHECK(v2.units.matmul(mm).value().busy_cycles == 1 + 16);

  mtia_pe_se_desc se{};
  se.hdr = header(MTIA_PE_DESC_SE);
  se.op = MTIA_PE_SE_ADD;
  se.in_dtype = se.out_dtype = MTIA_PE_DT_FP32;
  se.count = 1000;
  se.mode[0] = se.mode[1] = MTIA_PE_OPND_VECTOR;
  se.src[0] = L;
  se.src[1] = L + 4096;
  se.dst = L + 8192;
  // v2: 64 lanes whatever the dtype (256-byte vector, 64-lane limit); v1: a 64-byte vector,
  // 16 fp32 / 32 fp16 / 64 int8 lanes.
  // 1000 fp32 / 64 per cycle = 15.6 -> 16 vectors, + 8 issue; v1 16 lanes: 63 + 8.
  CHECK(v2.units.eltwise(se).value().busy_cycles == 16 + 8);
  CHECK(v1.units.eltwise(se).value().busy_cycles == 63 + 8);
  // Division: 4 cycles per vector.
  se.op = MTIA_PE_SE_DIV;
  CHECK(v2.units.eltwise(se).value().busy_cycles == 16 * 4 + 8);
  // exp on 100 fp16: 64 lanes -> 2 vectors x 8 cycles + 8; v1 32 lanes: 4 x 8 + 8.
  se.op = MTIA_PE_SE_EXP;
  se.in_dtype = se.out_dtype = MTIA_PE_DT_FP16;
  se.count = 100;
  se.mode[1] = 0;
  se.src[1] = 0;
  CHECK(v2.units.eltwise(se).value().busy_cycles == 2 * 8 + 8);
  CHECK(v1.units.eltwise(se).value().busy_cycles == 4 * 8 + 8);
  // A cast int8 -> fp32 runs at the fp32 width: 129 / 64 -> 3 vectors + 8; v1 129 / 16 -> 9.
  se.op = MTIA_PE_SE_CAST;
  se.in_dtype = MTIA_PE_DT_INT8;
  se.out_dtype = MTIA_PE_DT_FP32;
  se.count = 129;
  CHECK(v2.units.eltwise(se).value().busy_cycles == 3 + 8);
  CHECK(v1.units.eltwise(se).value().busy_cycles == 9 + 8);
  // int8 add: the 256-byte vector would hold 256 lanes, the lane limit keeps 64: 129 -> 3
  // vectors + 8 (the same rate as fp32); v1 64 lanes: 3 + 8.
  se.op = MTIA_PE_SE_ADD;
  se.out_dtype = MTIA_PE_DT_INT8;
  se.mode[1] = MTIA_PE_OPND_BROADCAST;
  se.src[1] = L + 4096;
  CHECK(v2.units.eltwise(se).value().busy_cycles == 3 + 8);
  CHECK(v1.units.eltwise(se).value().busy_cycles == 3 + 8);

  mtia_pe_re_desc re{};
  re.hdr = header(MTIA_PE_DESC_RE);
  re.op = MTIA_PE_RE_SUM;
  re.in_dtype = re.out_dtype = MTIA_PE_DT_FP32;
  re.rows = 100;
  re.cols = 33;
  re.ld_src = 40;
  re.src = L;
  re.dst = L + 32768;
  // 3300 elements / 32 per cycle = 103.1 -> 104, + 8; v1 / 16 = 206.25 -> 207, + 8.
  CHECK(v2.units.reduce(re).value().busy_cycles == 104 + 8);
  CHECK(v1.units.reduce(re).value().busy_cycles == 207 + 8);

  mtia_pe_mlu_desc mlu{};
  mlu.hdr = header(MTIA_PE_DESC_MLU);
  mlu.op = MTIA_PE_MLU_TRANSPOSE;
  mlu.elem_size = 4;
  mlu.rows = mlu.cols = mlu.ld_src = mlu.ld_dst = 64;
  mlu.src = L;
  mlu.dst = L + 65536;
  // 16384 bytes / 128 per cycle = 128, + 8; v1 / 64 = 256, + 8.
  CHECK(v2.units.layout(mlu).value().busy_cycles == 128 + 8);
  CHECK(v1.units.layout(mlu).value().busy_cycles == 256 + 8);

  // The counters add it all up, with units.
  const auto& dpe = v2.units.counters(UnitKind::kDpe);
  CHECK(dpe.operations == 4);
  CHECK(dpe.work == 3 * 262144 + 455);
  CHECK(dpe.busy_cycles == 272 + 144 + 1040 + 17);
  v2.units.reset_counters();
  CHECK(v2.units.counters(UnitKind::kDpe).operations == 0);
}

TEST_CASE("unit timing: the defaults are mtia-v2's, and zero rates are refused",
          "[units][timing]") {
  // 354 TOPS int8 and 177 TFLOPS fp16 over 64 PEs at 1.35 GHz.
  CHECK(UnitTiming{}.dpe_int8_macs_per_cycle == 2048);
  CHECK(UnitTiming{}.dpe_fp16_macs_per_cycle == 1024);
  // The SIMD Engine's 5.5 TOPS for every dtype: 64 lanes of up to 4 bytes.
  CHECK(UnitTiming{}.se_vector_bytes == 256);
  CHECK(UnitTiming{}.se_elements_per_cycle == 64);
  std::vector<uint64_t> mem(16);
  UnitTiming t;
  t.se_vector_bytes = 0;
  CHECK_THROWS_WITH(
      FunctionalUnits(std::span<uint8_t>(reinterpret_cast<uint8_t*>(mem.data()), 128), t),
      Catch::Contains("se_vector_bytes"));
  t = UnitTiming{};
  t.se_elements_per_cycle = 0;
  CHECK_THROWS_WITH(
      FunctionalUnits(std::span<uint8_t>(reinterpret_cast<uint8_t*>(mem.data()), 128), t),
      Catch::Contains("se_elements_per_cycle"));
}

// ================================ Through the core ============================================

TEST_CASE("units behind a UnitPort: a kernel's se.op and dpe.matmul run, bad ones fault",
          "[units][core]") {
  using namespace pe_test;
  Machine m;
  FunctionalUnits units(m.ls, UnitTiming{});
  uint64_t tag = 0;
  m.port.answer = [&](pe::RiscvCore& core, const pe::UnitRequest& req) {
    auto r = units.execute(core, req);
    if (!r.ok()) return pe::UnitResponse::fault(r.error().reason);
    return pe::UnitResponse::done(++tag);
  };
  // x10 = tag of se.op (a1 = descriptor), x11 = tag of dpe.matmul (a2 = descriptor).
  const std::vector<uint32_t> prog = {unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_SE, 10, 11),
                                      unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MATMUL, 11, 12), kEcall};
  // se.op: out[i] = a[i] * 2 (immediate), fp32, 4 lanes.
  mtia_pe_se_desc se{};
  se.hdr = header(MTIA_PE_DESC_SE);
  se.op = MTIA_PE_SE_MUL;
  se.in_dtype = se.out_dtype = MTIA_PE_DT_FP32;
  se.count = 4;
  se.mode[0] = MTIA_PE_OPND_VECTOR;
  se.src[0] = L + 0x100;
  se.mode[1] = MTIA_PE_OPND_IMMEDIATE;
  se.imm[1] = 0x40000000;  // 2.0f
  se.dst = L + 0x200;
  const float a[4] = {1, -2.5f, 3, 0.25f};
  std::memcpy(m.ls.data() + 0x100, a, sizeof a);
  std::memcpy(m.ls.data() + 0x1000, &se, sizeof se);
  // dpe.matmul: [1 x 4] * [4 x 1] of the SE output and a, fp32.
  mtia_pe_matmul_desc mm{};
  mm.hdr = header(MTIA_PE_DESC_MATMUL);
  mm.in_dtype = mm.out_dtype = MTIA_PE_DT_FP32;
  mm.m = 1;
  mm.n = 1;
  mm.k = 4;
  mm.lda = 4;
  mm.ldb = 1;
  mm.ldc = 1;
  mm.a = L + 0x200;
  mm.b = L + 0x100;
  mm.c = L + 0x300;
  std::memcpy(m.ls.data() + 0x1100, &mm, sizeof mm);

  auto& core = m.load(prog);
  core.set_reg(11, L + 0x1000);
  core.set_reg(12, L + 0x1100);
  auto run = core.run(100);
  REQUIRE(run.reason == pe::StopReason::kExit);
  CHECK(core.reg(10) == 1);
  CHECK(core.reg(11) == 2);
  float out[4], c;
  std::memcpy(out, m.ls.data() + 0x200, sizeof out);
  CHECK(out[0] == 2);
  CHECK(out[1] == -5);
  CHECK(out[2] == 6);
  CHECK(out[3] == 0.5f);
  std::memcpy(&c, m.ls.data() + 0x300, 4);
  CHECK(c == 2 * (1 + 6.25f + 9 + 0.0625f));
  CHECK(units.counters(UnitKind::kSe).operations == 1);
  CHECK(units.counters(UnitKind::kDpe).operations == 1);

  // A descriptor with a bad dtype pair faults the kernel with the unit's reason.
  mm.out_dtype = MTIA_PE_DT_FP16;
  std::memcpy(m.ls.data() + 0x1100, &mm, sizeof mm);
  auto& core2 = m.load(prog);
  core2.set_reg(11, L + 0x1000);
  core2.set_reg(12, L + 0x1100);
  REQUIRE(core2.run(100).reason == pe::StopReason::kFault);
  CHECK(core2.fault().kind == pe::FaultKind::kUnit);
  CHECK_THAT(core2.fault().reason, Catch::Contains("dpe.matmul rejected") &&
                                       Catch::Contains("fp32 -> fp16 is not supported"));

  // The wrong descriptor kind, an unmapped or misaligned descriptor address, a non-unit op.
  pe::UnitRequest req;
  req.op = pe::UnitOp::kReduce;
  req.rs1 = L + 0x1000;  // the SE descriptor
  CHECK_THAT(units.execute(core2, req).error().reason, Catch::Contains("SE descriptor"));
  req.rs1 = 0x5000'0000;
  CHECK_THAT(units.execute(core2, req).error().reason, Catch::Contains("mapped"));
  req.rs1 = L + 0x1004;
  CHECK_THAT(units.execute(core2, req).error().reason, Catch::Contains("aligned"));
  req.op = pe::UnitOp::kDma;
  CHECK_THAT(units.execute(core2, req).error().reason, Catch::Contains("not a compute-unit"));
  CHECK(FunctionalUnits::unit_of(pe::UnitOp::kLayout) == UnitKind::kMlu);
  CHECK(FunctionalUnits::unit_of(pe::UnitOp::kWait) == UnitKind::kCount);
}
