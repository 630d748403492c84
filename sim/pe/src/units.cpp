#include "mtia/sim/pe/units.h"

#include <fmt/format.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "elements.h"
#include "log.h"
#include "mtia/sim/pe/descriptors.h"
#include "mtia/sim/pe/sgemm.h"
#include "vector_math.h"

namespace mtia::sim::pe {

using detail::BF16;
using detail::Bool;
using detail::F16;
using detail::F32;
using detail::I32;
using detail::I64;
using detail::I8;
using detail::kIsFloat;

const char* unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kDpe:
      return "dpe";
    case UnitKind::kSe:
      return "se";
    case UnitKind::kRe:
      return "re";
    case UnitKind::kMlu:
      return "mlu";
    default:
      return "invalid";
  }
}

namespace {

uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

void check_timing(const UnitTiming& t) {
  const std::pair<const char*, uint32_t> rates[] = {
      {"dpe_int8_macs_per_cycle", t.dpe_int8_macs_per_cycle},
      {"dpe_fp16_macs_per_cycle", t.dpe_fp16_macs_per_cycle},
      {"dpe_fp32_macs_per_cycle", t.dpe_fp32_macs_per_cycle},
      {"se_vector_bytes", t.se_vector_bytes},
      {"re_elements_per_cycle", t.re_elements_per_cycle},
      {"mlu_bytes_per_cycle", t.mlu_bytes_per_cycle},
  };
  for (const auto& [name, value] : rates) {
    if (value == 0) {
      throw std::invalid_argument(
          fmt::format("UnitTiming::{} is 0: a unit throughput must be at least 1", name));
    }
  }
}

// ---- The visitors of the dtype classes the SE rules name ---------------------------------------

template <typename F>
void visit_float(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
      return f(F32{});
    case MTIA_PE_DT_FP16:
      return f(F16{});
    case MTIA_PE_DT_BF16:
      return f(BF16{});
    default:
      detail::undefined_dtype(dt);
  }
}

template <typename F>
void visit_numeric(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_INT8:
      return f(I8{});
    case MTIA_PE_DT_INT32:
      return f(I32{});
    case MTIA_PE_DT_INT64:
      return f(I64{});
    default:
      return visit_float(dt, f);
  }
}

template <typename F>
void visit_int_or_bool(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_INT8:
      return f(I8{});
    case MTIA_PE_DT_INT32:
      return f(I32{});
    case MTIA_PE_DT_INT64:
      return f(I64{});
    case MTIA_PE_DT_BOOL:
      return f(Bool{});
    default:
      detail::undefined_dtype(dt);
  }
}

// ---- Scalar semantics (docs/pe-isa.md, "Numerics") ---------------------------------------------

// Integer arithmetic wraps: do it in uint64 (defined modulo 2^64), and the store to the
// narrower dtype keeps the low bits.
int64_t wrap(uint64_t v) {
  return static_cast<int64_t>(v);
}

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
// NaN propagates (the first NaN operand wins), as torch.minimum / maximum do.
template <typename C>
C min_nan(C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b < a ? b : a;
}
template <typename C>
C max_nan(C a, C b) {
  if constexpr (std::is_same_v<C, float>) {
    if (std::isnan(a)) return a;
    if (std::isnan(b)) return b;
  }
  return b > a ? b : a;
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
int64_t shift_left(int64_t a, int64_t b) {
  if (b < 0 || b >= 64) return 0;
  return static_cast<int64_t>(static_cast<uint64_t>(a) << b);
}
int64_t shift_right(int64_t a, int64_t b) {
  if (b < 0 || b >= 64) return a < 0 ? -1 : 0;
  return a >> b;
}

// GELU in forms that keep their accuracy for negative inputs, where 1 + erf(x) and
// 1 + tanh(x) would cancel: 0.5 a erfc(-a / sqrt 2), and a / (1 + exp(-2 inner)).
float gelu(float a) {
  return 0.5f * a * std::erfc(-a * 0.70710678118654752f);
}
float gelu_tanh(float a) {
  const float inner = 0.79788456080286536f * (a + 0.044715f * a * a * a);  // sqrt(2/pi)
  return a / (1.0f + std::exp(-2.0f * inner));
}

// Their derivatives: Phi(a) + a phi(a); and, with s = sigmoid(2 inner) = (1 + tanh(inner)) / 2,
// s + 2 a s (1 - s) inner'(a), which stays finite where tanh saturates.
float gelu_grad(float a) {
  const float cdf = 0.5f * std::erfc(-a * 0.70710678118654752f);
  const float pdf = 0.39894228040143268f * std::exp(-0.5f * a * a);  // 1/sqrt(2 pi)
  return cdf + a * pdf;
}
float gelu_tanh_grad(float a) {
  if (std::isinf(a)) return std::numeric_limits<float>::quiet_NaN();  // inf * 0, as PyTorch
  const float beta = 0.79788456080286536f, kappa = 0.044715f;
  const float inner = beta * (a + kappa * a * a * a);
  const float s = 1.0f / (1.0f + std::exp(-2.0f * inner));
  const float t = s * (1.0f - s);
  if (t == 0.0f) return s;  // saturated: the second term is 0 (a * a may be infinite)
  return s + 2.0f * a * t * beta * (1.0f + 3.0f * kappa * a * a);
}

// The float functions of one operand that have no special case in run_eltwise.
using FloatFn1 = float (*)(float);
FloatFn1 float_unary_fn(uint8_t op) {
  switch (op) {
    case MTIA_PE_SE_LOG:
      return [](float a) { return std::log(a); };
    case MTIA_PE_SE_SQRT:
      return [](float a) { return std::sqrt(a); };
    case MTIA_PE_SE_RSQRT:
      return [](float a) { return 1.0f / std::sqrt(a); };
    case MTIA_PE_SE_ERF:
      return [](float a) { return std::erf(a); };
    case MTIA_PE_SE_SIN:
      return [](float a) { return std::sin(a); };
    case MTIA_PE_SE_COS:
      return [](float a) { return std::cos(a); };
    case MTIA_PE_SE_TAN:
      return [](float a) { return std::tan(a); };
    case MTIA_PE_SE_ASIN:
      return [](float a) { return std::asin(a); };
    case MTIA_PE_SE_ACOS:
      return [](float a) { return std::acos(a); };
    case MTIA_PE_SE_ATAN:
      return [](float a) { return std::atan(a); };
    case MTIA_PE_SE_SINH:
      return [](float a) { return std::sinh(a); };
    case MTIA_PE_SE_COSH:
      return [](float a) { return std::cosh(a); };
    case MTIA_PE_SE_ASINH:
      return [](float a) { return std::asinh(a); };
    case MTIA_PE_SE_ACOSH:
      return [](float a) { return std::acosh(a); };
    case MTIA_PE_SE_ATANH:
      return [](float a) { return std::atanh(a); };
    case MTIA_PE_SE_EXPM1:
      return [](float a) { return std::expm1(a); };
    case MTIA_PE_SE_LOG1P:
      return [](float a) { return std::log1p(a); };
    case MTIA_PE_SE_LOG2:
      return [](float a) { return std::log2(a); };
    case MTIA_PE_SE_LOG10:
      return [](float a) { return std::log10(a); };
    case MTIA_PE_SE_EXP2:
      return [](float a) { return std::exp2(a); };
    case MTIA_PE_SE_ERFC:
      return [](float a) { return std::erfc(a); };
    case MTIA_PE_SE_LGAMMA:
      return [](float a) { return std::lgamma(a); };
    case MTIA_PE_SE_FLOOR:
      return [](float a) { return std::floor(a); };
    case MTIA_PE_SE_CEIL:
      return [](float a) { return std::ceil(a); };
    case MTIA_PE_SE_ROUND:  // the default rounding mode: to nearest, ties to even
      return [](float a) { return std::nearbyint(a); };
    case MTIA_PE_SE_TRUNC:
      return [](float a) { return std::trunc(a); };
    case MTIA_PE_SE_RECIPROCAL:
      return [](float a) { return 1.0f / a; };
    case MTIA_PE_SE_GELU:
      return gelu;
    case MTIA_PE_SE_GELU_TANH:
      return gelu_tanh;
    case MTIA_PE_SE_GELU_GRAD:
      return gelu_grad;
    case MTIA_PE_SE_GELU_TANH_GRAD:
      return gelu_tanh_grad;
    default:
      return nullptr;
  }
}

using FloatFn2 = float (*)(float, float);
FloatFn2 float_binary_fn(uint8_t op) {
  switch (op) {
    case MTIA_PE_SE_POW:
      return [](float a, float b) { return std::pow(a, b); };
    case MTIA_PE_SE_ATAN2:
      return [](float a, float b) { return std::atan2(a, b); };
    case MTIA_PE_SE_HYPOT:
      return [](float a, float b) { return std::hypot(a, b); };
    case MTIA_PE_SE_COPYSIGN:
      return [](float a, float b) { return std::copysign(a, b); };
    default:
      return nullptr;
  }
}

// ---- Element loops -----------------------------------------------------------------------------

// One SE operand: a pointer and a byte stride (0 for broadcast and immediate operands).
struct Operand {
  const uint8_t* p = nullptr;
  size_t stride = 0;
};

// SELECT: a bit copy of b or c (no conversion, NaN payloads kept), one U-sized element at a
// time. Both are read before the element is written, so dst may be b or c; reading both and
// picking without a branch keeps a random mask from costing a misprediction per element.
template <typename U>
void select_bits(const Operand* o, uint8_t* dst, uint32_t n) {
  const Operand cond = o[0], b = o[1], c = o[2];  // locals: dst's stores cannot alias them
  for (uint32_t i = 0; i < n; ++i) {
    U vb, vc;
    std::memcpy(&vb, b.p + i * b.stride, sizeof vb);
    std::memcpy(&vc, c.p + i * c.stride, sizeof vc);
    const U take_b = static_cast<U>(0) - static_cast<U>(cond.p[i * cond.stride] != 0);
    const U v = (vb & take_b) | (vc & ~take_b);
    std::memcpy(dst + size_t{i} * sizeof v, &v, sizeof v);
  }
}

// A float function of one operand that works on whole blocks (vector_math.h): the operand is
// gathered into a float buffer, transformed in place and rounded to the dtype on store.
template <typename T>
void map1_blocks(const Operand* o, uint8_t* dst, uint32_t n, void (*block)(float*, size_t)) {
  constexpr uint32_t kBlock = 1024;
  float buf[kBlock];
  const uint8_t* a = o[0].p;
  const size_t stride = o[0].stride;
  for (uint32_t i0 = 0; i0 < n; i0 += kBlock) {
    const uint32_t m = std::min(kBlock, n - i0);
    for (uint32_t i = 0; i < m; ++i) buf[i] = T::load(a + (i0 + i) * stride);
    block(buf, m);
    for (uint32_t i = 0; i < m; ++i) T::store(dst + size_t{i0 + i} * T::kBytes, buf[i]);
  }
}

// The loops take each operand's stride as a template argument where it is the element size
// (a vector) or 0 (a broadcast or immediate), so that the compiler can vectorize the common
// cases; any other stride takes the loop with run-time strides. Same results either way. The
// operand pointers are copied into locals first: stores through `dst` could alias `o` itself,
// which would make the compiler reload them every iteration and give up on vectorizing.
template <typename In, typename Out, typename F, typename S0>
void map1_loop(const Operand* o, uint8_t* dst, uint32_t n, F& f, S0 s0) {
  const uint8_t* a = o[0].p;
  for (uint32_t i = 0; i < n; ++i) {
    Out::store(dst + size_t{i} * Out::kBytes, f(In::load(a + i * size_t{s0})));
  }
}

template <typename In, typename Out, typename F>
void map1(const Operand* o, uint8_t* dst, uint32_t n, F f) {
  using Vec = std::integral_constant<size_t, In::kBytes>;
  if (o[0].stride == In::kBytes) return map1_loop<In, Out>(o, dst, n, f, Vec{});
  map1_loop<In, Out>(o, dst, n, f, o[0].stride);
}

template <typename In, typename Out, typename F, typename S0, typename S1>
void map2_loop(const Operand* o, uint8_t* dst, uint32_t n, F& f, S0 s0, S1 s1) {
  const uint8_t* pa = o[0].p;
  const uint8_t* pb = o[1].p;
  for (uint32_t i = 0; i < n; ++i) {
    const auto a = In::load(pa + i * size_t{s0});
    const auto b = In::load(pb + i * size_t{s1});
    Out::store(dst + size_t{i} * Out::kBytes, f(a, b));
  }
}

template <typename In, typename Out, typename F>
void map2(const Operand* o, uint8_t* dst, uint32_t n, F f) {
  using Vec = std::integral_constant<size_t, In::kBytes>;
  using Bcast = std::integral_constant<size_t, 0>;
  const size_t s0 = o[0].stride, s1 = o[1].stride;
  if (s0 == In::kBytes && s1 == In::kBytes) return map2_loop<In, Out>(o, dst, n, f, Vec{}, Vec{});
  if (s0 == In::kBytes && s1 == 0) return map2_loop<In, Out>(o, dst, n, f, Vec{}, Bcast{});
  if (s0 == 0 && s1 == In::kBytes) return map2_loop<In, Out>(o, dst, n, f, Bcast{}, Vec{});
  map2_loop<In, Out>(o, dst, n, f, s0, s1);
}

template <typename In, typename Out, typename F, typename S>
void map3_loop(const Operand* o, uint8_t* dst, uint32_t n, F& f, S s0, S s1, S s2) {
  const uint8_t* pa = o[0].p;
  const uint8_t* pb = o[1].p;
  const uint8_t* pc = o[2].p;
  for (uint32_t i = 0; i < n; ++i) {
    const auto a = In::load(pa + i * size_t{s0});
    const auto b = In::load(pb + i * size_t{s1});
    const auto c = In::load(pc + i * size_t{s2});
    Out::store(dst + size_t{i} * Out::kBytes, f(a, b, c));
  }
}

template <typename In, typename Out, typename F>
void map3(const Operand* o, uint8_t* dst, uint32_t n, F f) {
  using Vec = std::integral_constant<size_t, In::kBytes>;
  if (o[0].stride == In::kBytes && o[1].stride == In::kBytes && o[2].stride == In::kBytes) {
    return map3_loop<In, Out>(o, dst, n, f, Vec{}, Vec{}, Vec{});
  }
  map3_loop<In, Out>(o, dst, n, f, o[0].stride, o[1].stride, o[2].stride);
}

// Widens a stored rows x cols tile (leading dimension ld) of `dt` (fp16, bf16 or int8) into
// packed fp32. Exact for all three.
void widen_tile(uint8_t dt, const uint8_t* src, uint32_t rows, uint32_t cols, uint32_t ld,
                float* dst) {
  const size_t es = dtype_bytes(dt);
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + size_t{r} * ld * es;
    float* out = dst + size_t{r} * cols;
    if (dt == MTIA_PE_DT_FP16) {
      fp16_to_fp32(row, out, cols);
    } else if (dt == MTIA_PE_DT_BF16) {
      bf16_to_fp32(row, out, cols);
    } else {
      for (uint32_t c = 0; c < cols; ++c) out[c] = static_cast<int8_t>(row[c]);
    }
  }
}

// Bytes of one element of SE operand j (0..2): select's condition is bool.
unsigned se_operand_bytes(const mtia_pe_se_desc& d, int j) {
  return d.op == MTIA_PE_SE_SELECT && j == 0 ? 1 : dtype_bytes(d.in_dtype);
}

bool is_transcendental(uint8_t se_op) {
  return mtia_pe_se_info(se_op).cost == MTIA_PE_SE_COST_TRANSCENDENTAL;
}

// Bytes [lo, hi) of a rows x cols tile with row stride ld (elements) at local-store offset off.
FunctionalUnits::Extent tile_extent(uint64_t off, uint32_t rows, uint32_t cols, uint32_t ld,
                                    unsigned es) {
  return {off, off + (uint64_t{rows - 1} * ld + cols) * es};
}

}  // namespace

// ---- FunctionalUnits ---------------------------------------------------------------------------

FunctionalUnits::FunctionalUnits(std::span<uint8_t> local_store, const UnitTiming& timing)
    : ls_(local_store), timing_(timing) {
  check_timing(timing_);
  // Our own wiring, not a user error: the PE model owns the local store.
  assert(reinterpret_cast<uintptr_t>(ls_.data()) % 8 == 0 && "local store must be 8-aligned");
  assert(ls_.size() <= MTIA_PE_LS_MAX_BYTES);
}

void FunctionalUnits::reset_counters() {
  for (auto& c : counters_) c = {};
}

UnitKind FunctionalUnits::unit_of(UnitOp op) {
  switch (op) {
    case UnitOp::kMatmul:
      return UnitKind::kDpe;
    case UnitOp::kEltwise:
      return UnitKind::kSe;
    case UnitOp::kReduce:
      return UnitKind::kRe;
    case UnitOp::kLayout:
      return UnitKind::kMlu;
    default:
      return UnitKind::kCount;
  }
}

UnitOutcome FunctionalUnits::finish(UnitKind kind, UnitOutcome outcome) {
  UnitCounters& c = counters_[static_cast<size_t>(kind)];
  if (outcome.ok()) {
    ++c.operations;
    c.work += outcome.value().work;
    c.busy_cycles += outcome.value().busy_cycles;
  } else {
    ++c.rejected;
    detail::logger()->debug("{} rejected an operation: {}", unit_kind_name(kind),
                            outcome.error().reason);
  }
  return outcome;
}

UnitOutcome FunctionalUnits::matmul(const mtia_pe_matmul_desc& d) {
  if (auto bad = validate(d, ls_.size())) return finish(UnitKind::kDpe, *bad);
  run_matmul(d, {}, {});
  return finish(UnitKind::kDpe, cost(d));
}

UnitOutcome FunctionalUnits::eltwise(const mtia_pe_se_desc& d) {
  if (auto bad = validate(d, ls_.size())) return finish(UnitKind::kSe, *bad);
  run_eltwise(d);
  return finish(UnitKind::kSe, cost(d));
}

UnitOutcome FunctionalUnits::reduce(const mtia_pe_re_desc& d) {
  if (auto bad = validate(d, ls_.size())) return finish(UnitKind::kRe, *bad);
  run_reduce(d);
  return finish(UnitKind::kRe, cost(d));
}

UnitOutcome FunctionalUnits::layout(const mtia_pe_mlu_desc& d) {
  if (auto bad = validate(d, ls_.size())) return finish(UnitKind::kMlu, *bad);
  run_layout(d);
  return finish(UnitKind::kMlu, cost(d));
}

UnitOutcome FunctionalUnits::execute(const RiscvCore& core, const UnitRequest& request) {
  assert(core.local_store().data() == ls_.data() && core.local_store().size() == ls_.size());
  // Reads, checks and costs the descriptor now; runs the math now or hands it to defer_.
  // read_descriptor validates against the core's local store, which is this one.
  auto run = [&](UnitKind kind, auto tag, auto math) -> UnitOutcome {
    using Desc = decltype(tag);
    auto d = read_descriptor<Desc>(core, request.rs1);
    if (!d) return finish(kind, d.error());
    const Desc desc = d.value();
    if (defer_) {
      defer_(extents(desc), host_cost_ns(desc), [this, desc, math] { (this->*math)(desc); });
    } else {
      (this->*math)(desc);
    }
    return finish(kind, cost(desc));
  };
  switch (request.op) {
    case UnitOp::kMatmul:
      return execute_matmul(core, request);
    case UnitOp::kEltwise:
      return run(UnitKind::kSe, mtia_pe_se_desc{}, &FunctionalUnits::run_eltwise);
    case UnitOp::kReduce:
      return run(UnitKind::kRe, mtia_pe_re_desc{}, &FunctionalUnits::run_reduce);
    case UnitOp::kLayout:
      return run(UnitKind::kMlu, mtia_pe_mlu_desc{}, &FunctionalUnits::run_layout);
    default:
      return isa::reject(isa::ErrorCode::kUnsupported,
                         fmt::format("{} is not a compute-unit instruction (DPE, SE, RE, MLU)",
                                     unit_op_name(request.op)));
  }
}

// execute() for the DPE: as the others, but A and B may be read outside the local store.
UnitOutcome FunctionalUnits::execute_matmul(const RiscvCore& core, const UnitRequest& request) {
  auto read = read_descriptor<mtia_pe_matmul_desc>(core, request.rs1);
  if (!read) return finish(UnitKind::kDpe, read.error());
  const mtia_pe_matmul_desc d = read.value();
  Touched touched = extents(d);
  OperandView va, vb;
  if (operand_source_ && d.in_dtype == MTIA_PE_DT_FP32) {
    const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
    const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
    va = operand_source_(d.a - MTIA_PE_LS_BASE, ta ? d.k : d.m, uint64_t{ta ? d.m : d.k} * 4,
                         uint64_t{d.lda} * 4);
    vb = operand_source_(d.b - MTIA_PE_LS_BASE, tb ? d.n : d.k, uint64_t{tb ? d.k : d.n} * 4,
                         uint64_t{d.ldb} * 4);
    if (va.data != nullptr) touched[0] = Extent{};
    if (vb.data != nullptr) touched[1] = Extent{};
  }
  if (defer_) {
    defer_(touched, host_cost_ns(d), [this, d, va, vb] { run_matmul(d, va, vb); });
  } else {
    run_matmul(d, va, vb);
  }
  return finish(UnitKind::kDpe, cost(d));
}

FunctionalUnits::Touched FunctionalUnits::extents(const mtia_pe_matmul_desc& d) {
  const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
  const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
  const unsigned ies = dtype_bytes(d.in_dtype), oes = dtype_bytes(d.out_dtype);
  return {tile_extent(d.a - MTIA_PE_LS_BASE, ta ? d.k : d.m, ta ? d.m : d.k, d.lda, ies),
          tile_extent(d.b - MTIA_PE_LS_BASE, tb ? d.n : d.k, tb ? d.k : d.n, d.ldb, ies),
          tile_extent(d.c - MTIA_PE_LS_BASE, d.m, d.n, d.ldc, oes), Extent{}};
}

FunctionalUnits::Touched FunctionalUnits::extents(const mtia_pe_se_desc& d) {
  Touched t{};
  for (int j = 0; j < 3; ++j) {
    if (d.mode[j] == MTIA_PE_OPND_IMMEDIATE || d.src[j] < MTIA_PE_LS_BASE) continue;
    const unsigned es = se_operand_bytes(d, j);
    const uint64_t n = d.mode[j] == MTIA_PE_OPND_BROADCAST ? 1 : d.count;
    t[j] = {d.src[j] - MTIA_PE_LS_BASE, d.src[j] - MTIA_PE_LS_BASE + n * es};
  }
  t[3] = {d.dst - MTIA_PE_LS_BASE,
          d.dst - MTIA_PE_LS_BASE + uint64_t{d.count} * dtype_bytes(d.out_dtype)};
  return t;
}

FunctionalUnits::Touched FunctionalUnits::extents(const mtia_pe_re_desc& d) {
  const uint64_t results = d.axis == 1 ? d.rows : d.cols;
  const uint64_t dst = d.dst - MTIA_PE_LS_BASE;
  return {tile_extent(d.src - MTIA_PE_LS_BASE, d.rows, d.cols, d.ld_src, dtype_bytes(d.in_dtype)),
          Extent{dst, dst + results * dtype_bytes(d.out_dtype)}, Extent{}, Extent{}};
}

FunctionalUnits::Touched FunctionalUnits::extents(const mtia_pe_mlu_desc& d) {
  const bool transpose = d.op == MTIA_PE_MLU_TRANSPOSE;
  return {tile_extent(d.src - MTIA_PE_LS_BASE, d.rows, d.cols, d.ld_src, d.elem_size),
          tile_extent(d.dst - MTIA_PE_LS_BASE, transpose ? d.cols : d.rows,
                      transpose ? d.rows : d.cols, d.ld_dst, d.elem_size),
          Extent{}, Extent{}};
}

// Rough host speeds: packed fp32 GEMM ~32 MACs/ns, copies ~8 bytes/ns, simple elementwise
// ~2 elements/ns, transcendental ~0.2 elements/ns. Only the order of magnitude matters.
uint64_t FunctionalUnits::host_cost_ns(const mtia_pe_matmul_desc& d) {
  return uint64_t{d.m} * d.n * d.k / 32;
}

uint64_t FunctionalUnits::host_cost_ns(const mtia_pe_se_desc& d) {
  return is_transcendental(d.op) ? uint64_t{d.count} * 5 : d.count / 2;
}

uint64_t FunctionalUnits::host_cost_ns(const mtia_pe_re_desc& d) {
  return uint64_t{d.rows} * d.cols / 2;
}

uint64_t FunctionalUnits::host_cost_ns(const mtia_pe_mlu_desc& d) {
  return uint64_t{d.rows} * d.cols * d.elem_size / 8;
}

// ---- Costs -------------------------------------------------------------------------------------

UnitWork FunctionalUnits::cost(const mtia_pe_matmul_desc& d) const {
  // m*n*k <= 2^60: each pair of m, n, k spans a tile that fits the local store.
  const uint64_t macs = uint64_t{d.m} * d.n * d.k;
  const uint32_t rate = d.in_dtype == MTIA_PE_DT_INT8   ? timing_.dpe_int8_macs_per_cycle
                        : d.in_dtype == MTIA_PE_DT_FP32 ? timing_.dpe_fp32_macs_per_cycle
                                                        : timing_.dpe_fp16_macs_per_cycle;
  return {timing_.dpe_issue_cycles + ceil_div(macs, rate), macs};
}

UnitWork FunctionalUnits::cost(const mtia_pe_se_desc& d) const {
  const unsigned widest = std::max(dtype_bytes(d.in_dtype), dtype_bytes(d.out_dtype));
  const uint64_t lanes = std::max(1u, timing_.se_vector_bytes / std::max(1u, widest));
  uint32_t per_vector = timing_.se_simple_cycles;
  switch (mtia_pe_se_info(d.op).cost) {
    case MTIA_PE_SE_COST_DIVIDE:
      per_vector = timing_.se_divide_cycles;
      break;
    case MTIA_PE_SE_COST_TRANSCENDENTAL:
      per_vector = timing_.se_transcendental_cycles;
      break;
    default:
      break;
  }
  return {timing_.se_issue_cycles + ceil_div(d.count, lanes) * per_vector, d.count};
}

UnitWork FunctionalUnits::cost(const mtia_pe_re_desc& d) const {
  const uint64_t elements = uint64_t{d.rows} * d.cols;
  return {timing_.re_issue_cycles + ceil_div(elements, timing_.re_elements_per_cycle), elements};
}

UnitWork FunctionalUnits::cost(const mtia_pe_mlu_desc& d) const {
  const uint64_t bytes = uint64_t{d.rows} * d.cols * d.elem_size;
  return {timing_.mlu_issue_cycles + ceil_div(bytes, timing_.mlu_bytes_per_cycle), bytes};
}

// ---- DPE ---------------------------------------------------------------------------------------

void FunctionalUnits::run_matmul(const mtia_pe_matmul_desc& d, OperandView va, OperandView vb) {
  const bool ta = (d.hdr.flags & MTIA_PE_MM_TRANS_A) != 0;
  const bool tb = (d.hdr.flags & MTIA_PE_MM_TRANS_B) != 0;
  const bool accumulate = (d.hdr.flags & MTIA_PE_MM_ACCUMULATE) != 0;
  // Stored shapes of A and B (rows x cols, row-major).
  const uint32_t a_rows = ta ? d.k : d.m, a_cols = ta ? d.m : d.k;
  const uint32_t b_rows = tb ? d.n : d.k, b_cols = tb ? d.k : d.n;
  const uint8_t* a = at(d.a);
  const uint8_t* b = at(d.b);
  uint8_t* c = at(d.c);

  if (d.in_dtype == MTIA_PE_DT_INT8) {
    // int8 -> int32 on the same sgemm, exactly: every product has |a*b| <= 2^14, so a sum of
    // at most 1024 of them is an integer of magnitude <= 2^24, which fp32 holds exactly
    // whatever the summation order. Longer k is split into such chunks, whose fp32 results are
    // added in uint32 (wrapping modulo 2^32, as the spec says).
    constexpr uint32_t kExactK = 1024;
    const uint32_t m = d.m, n = d.n;
    fa_.resize(size_t{a_rows} * a_cols);
    fb_.resize(size_t{b_rows} * b_cols);
    fc_.resize(size_t{m} * n);
    acc_.resize(size_t{m} * n);
    widen_tile(d.in_dtype, a, a_rows, a_cols, d.lda, fa_.data());
    widen_tile(d.in_dtype, b, b_rows, b_cols, d.ldb, fb_.data());
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        const uint8_t* cp = c + (size_t{i} * d.ldc + j) * 4;
        acc_[size_t{i} * n + j] = accumulate ? static_cast<uint32_t>(I32::load(cp)) : 0u;
      }
    }
    for (uint32_t k0 = 0; k0 < d.k; k0 += kExactK) {
      const uint32_t kc = std::min(kExactK, d.k - k0);
      // The chunk's columns of A (rows, when A is stored transposed) and rows of B.
      const float* ak = fa_.data() + (ta ? size_t{k0} * a_cols : k0);
      const float* bk = fb_.data() + (tb ? k0 : size_t{k0} * b_cols);
      sgemm(ta, tb, m, n, kc, ak, a_cols, bk, b_cols, false, fc_.data(), n);
      for (size_t t = 0; t < fc_.size(); ++t) {
        acc_[t] += static_cast<uint32_t>(static_cast<int32_t>(fc_[t]));
      }
    }
    for (uint32_t i = 0; i < m; ++i) {
      for (uint32_t j = 0; j < n; ++j) {
        I32::store(c + (size_t{i} * d.ldc + j) * 4, static_cast<int32_t>(acc_[size_t{i} * n + j]));
      }
    }
    return;
  }

  // Floating: one cblas_sgemm on the whole tile. fp16/bf16 are widened to fp32 first (exact),
  // so every product is exact and the sums are fp32, as the spec says.
  const float* fa = nullptr;
  const float* fb = nullptr;
  size_t lda = 0, ldb = 0;
  if (d.in_dtype == MTIA_PE_DT_FP32) {
    fa = va.data != nullptr ? va.data : reinterpret_cast<const float*>(a);
    fb = vb.data != nullptr ? vb.data : reinterpret_cast<const float*>(b);
    lda = va.data != nullptr ? va.ld : d.lda;
    ldb = vb.data != nullptr ? vb.ld : d.ldb;
  } else {
    fa_.resize(size_t{a_rows} * a_cols);
    fb_.resize(size_t{b_rows} * b_cols);
    widen_tile(d.in_dtype, a, a_rows, a_cols, d.lda, fa_.data());
    widen_tile(d.in_dtype, b, b_rows, b_cols, d.ldb, fb_.data());
    fa = fa_.data();
    fb = fb_.data();
    lda = a_cols;
    ldb = b_cols;
  }
  // Overwriting never reads C, so stale NaNs in an overwritten C do not leak into the result.
  sgemm(ta, tb, d.m, d.n, d.k, fa, lda, fb, ldb, accumulate, reinterpret_cast<float*>(c), d.ldc);
}

// ---- SE ----------------------------------------------------------------------------------------

void FunctionalUnits::run_eltwise(const mtia_pe_se_desc& d) {
  const uint8_t op = d.op;
  const uint32_t n = d.count;
  uint8_t* dst = at(d.dst);

  // Operands: memory (stride = element size, or 0 to broadcast) or the immediate's bytes
  // (little-endian: the value's bit pattern is in the low bytes).
  uint8_t imm[3][8];
  Operand o[3];
  for (int j = 0; j < 3; ++j) {
    const unsigned es = se_operand_bytes(d, j);
    const bool in_memory = d.src[j] >= MTIA_PE_LS_BASE;  // unused operands are all zero
    switch (d.mode[j]) {
      case MTIA_PE_OPND_VECTOR:
        if (in_memory) o[j] = {at(d.src[j]), es};
        break;
      case MTIA_PE_OPND_BROADCAST:
        o[j] = {at(d.src[j]), 0};
        break;
      default:  // immediate
        std::memcpy(imm[j], &d.imm[j], 8);
        o[j] = {imm[j], 0};
        break;
    }
  }

  switch (op) {
    case MTIA_PE_SE_ADD:
    case MTIA_PE_SE_SUB:
    case MTIA_PE_SE_MUL:
    case MTIA_PE_SE_DIV:
    case MTIA_PE_SE_MIN:
    case MTIA_PE_SE_MAX:
      return visit_numeric(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        switch (op) {
          case MTIA_PE_SE_ADD:
            return map2<T, T>(o, dst, n, [](C a, C b) { return add(a, b); });
          case MTIA_PE_SE_SUB:
            return map2<T, T>(o, dst, n, [](C a, C b) { return sub(a, b); });
          case MTIA_PE_SE_MUL:
            return map2<T, T>(o, dst, n, [](C a, C b) { return mul(a, b); });
          case MTIA_PE_SE_DIV:
            return map2<T, T>(o, dst, n, [](C a, C b) { return div(a, b); });
          case MTIA_PE_SE_MIN:
            return map2<T, T>(o, dst, n, [](C a, C b) { return min_nan(a, b); });
          default:
            return map2<T, T>(o, dst, n, [](C a, C b) { return max_nan(a, b); });
        }
      });
    case MTIA_PE_SE_ABS:
    case MTIA_PE_SE_NEG:
    case MTIA_PE_SE_RELU:
      return visit_numeric(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        if (op == MTIA_PE_SE_ABS) return map1<T, T>(o, dst, n, [](C a) { return abs_value(a); });
        if (op == MTIA_PE_SE_NEG) return map1<T, T>(o, dst, n, [](C a) { return neg(a); });
        return map1<T, T>(o, dst, n, [](C a) { return relu(a); });
      });
    case MTIA_PE_SE_EXP:
    case MTIA_PE_SE_TANH:
    case MTIA_PE_SE_SIGMOID:
    case MTIA_PE_SE_SILU:
      // Whole blocks in fp32 (vector_math.h), rounded once to the dtype on store.
      return visit_float(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        switch (op) {
          case MTIA_PE_SE_EXP:
            return map1_blocks<T>(o, dst, n, detail::exp_block);
          case MTIA_PE_SE_TANH:
            return map1_blocks<T>(o, dst, n, detail::tanh_block);
          case MTIA_PE_SE_SIGMOID:
            return map1_blocks<T>(o, dst, n, detail::sigmoid_block);
          default:  // silu = a * sigmoid(a), whose limit at -Inf is -0
            return map1_blocks<T>(o, dst, n, detail::silu_block);
        }
      });
    case MTIA_PE_SE_SIGN:
      return visit_numeric(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        map1<T, T>(o, dst, n, [](C a) { return sign(a); });
      });
    case MTIA_PE_SE_FMOD:
    case MTIA_PE_SE_REMAINDER:
    case MTIA_PE_SE_FLOOR_DIV:
      return visit_numeric(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        if (op == MTIA_PE_SE_FMOD)
          return map2<T, T>(o, dst, n, [](C a, C b) { return fmod_value(a, b); });
        if (op == MTIA_PE_SE_REMAINDER) {
          return map2<T, T>(o, dst, n, [](C a, C b) { return remainder_value(a, b); });
        }
        return map2<T, T>(o, dst, n, [](C a, C b) { return floor_div(a, b); });
      });
    case MTIA_PE_SE_SHL:
    case MTIA_PE_SE_SHR:
      return visit_int_or_bool(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        if (op == MTIA_PE_SE_SHL) return map2<T, T>(o, dst, n, shift_left);
        return map2<T, T>(o, dst, n, shift_right);
      });
    case MTIA_PE_SE_EQ:
    case MTIA_PE_SE_NE:
    case MTIA_PE_SE_LT:
    case MTIA_PE_SE_LE:
    case MTIA_PE_SE_GT:
    case MTIA_PE_SE_GE:
      // IEEE comparisons on the exact values (fp16/bf16 widen exactly): NaN is unordered.
      return detail::visit_dtype(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        switch (op) {
          case MTIA_PE_SE_EQ:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a == b; });
          case MTIA_PE_SE_NE:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a != b; });
          case MTIA_PE_SE_LT:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a < b; });
          case MTIA_PE_SE_LE:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a <= b; });
          case MTIA_PE_SE_GT:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a > b; });
          default:
            return map2<T, Bool>(o, dst, n, [](C a, C b) -> int64_t { return a >= b; });
        }
      });
    case MTIA_PE_SE_LAND:
    case MTIA_PE_SE_LOR:
    case MTIA_PE_SE_LXOR:
    case MTIA_PE_SE_LNOT:
      // Non-zero is true; NaN is non-zero, -0.0 is zero.
      return detail::visit_dtype(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        switch (op) {
          case MTIA_PE_SE_LAND:
            return map2<T, Bool>(o, dst, n,
                                 [](C a, C b) -> int64_t { return (a != 0) && (b != 0); });
          case MTIA_PE_SE_LOR:
            return map2<T, Bool>(o, dst, n,
                                 [](C a, C b) -> int64_t { return (a != 0) || (b != 0); });
          case MTIA_PE_SE_LXOR:
            return map2<T, Bool>(o, dst, n,
                                 [](C a, C b) -> int64_t { return (a != 0) != (b != 0); });
          default:
            return map1<T, Bool>(o, dst, n, [](C a) -> int64_t { return a == 0; });
        }
      });
    case MTIA_PE_SE_BAND:
    case MTIA_PE_SE_BOR:
    case MTIA_PE_SE_BXOR:
    case MTIA_PE_SE_BNOT:
      return visit_int_or_bool(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        switch (op) {
          case MTIA_PE_SE_BAND:
            return map2<T, T>(o, dst, n, [](int64_t a, int64_t b) { return a & b; });
          case MTIA_PE_SE_BOR:
            return map2<T, T>(o, dst, n, [](int64_t a, int64_t b) { return a | b; });
          case MTIA_PE_SE_BXOR:
            return map2<T, T>(o, dst, n, [](int64_t a, int64_t b) { return a ^ b; });
          default:
            // On bool, bitwise not is logical not (~true is false), as in PyTorch.
            if constexpr (std::is_same_v<T, Bool>) {
              return map1<T, T>(o, dst, n, [](int64_t a) -> int64_t { return a == 0; });
            } else {
              return map1<T, T>(o, dst, n, [](int64_t a) { return ~a; });
            }
        }
      });
    case MTIA_PE_SE_SELECT:
      switch (dtype_bytes(d.in_dtype)) {
        case 1:
          return select_bits<uint8_t>(o, dst, n);
        case 2:
          return select_bits<uint16_t>(o, dst, n);
        case 4:
          return select_bits<uint32_t>(o, dst, n);
        default:
          return select_bits<uint64_t>(o, dst, n);
      }
    case MTIA_PE_SE_CLAMP:
      return visit_numeric(d.in_dtype, [&](auto t) {
        using T = decltype(t);
        using C = typename T::C;
        map3<T, T>(o, dst, n, [](C a, C lo, C hi) { return min_nan(max_nan(a, lo), hi); });
      });
    case MTIA_PE_SE_CAST:
      return detail::visit_dtype(d.in_dtype, [&](auto in) {
        using In = decltype(in);
        detail::visit_dtype(d.out_dtype, [&](auto out) {
          using Out = decltype(out);
          map1<In, Out>(o, dst, n, [](typename In::C a) { return detail::cast_value<In, Out>(a); });
        });
      });
    default:
      // In fp32 with the host's float functions, rounded once to the dtype on store.
      if (const FloatFn1 f = float_unary_fn(op)) {
        return visit_float(d.in_dtype,
                           [&](auto t) { map1<decltype(t), decltype(t)>(o, dst, n, f); });
      }
      if (const FloatFn2 f = float_binary_fn(op)) {
        return visit_float(d.in_dtype,
                           [&](auto t) { map2<decltype(t), decltype(t)>(o, dst, n, f); });
      }
      assert(false && "SE op validated");
  }
}

// ---- RE ----------------------------------------------------------------------------------------

namespace {

// The reduction loops over a rows x cols tile, along `axis`, calling f(out_index, value) in
// order along the axis for every element.
template <typename T, typename F>
void for_each_along(const uint8_t* src, uint32_t rows, uint32_t cols, uint32_t ld, uint8_t axis,
                    F f) {
  for (uint32_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + size_t{r} * ld * T::kBytes;
    for (uint32_t c = 0; c < cols; ++c) f(axis == 1 ? r : c, T::load(row + size_t{c} * T::kBytes));
  }
}

// Floating sums: the RE adds the reduced axis a vector at a time into kReLanes fp32
// accumulators (element t into lane t % kReLanes), then folds the lanes pairwise (lane k + w
// into lane k, for w = 16, 8, ..., 1), as an adder tree does. Far more accurate than one chain
// of additions (a 9216-element sum: about 2e-8 relative error instead of 1e-6), and the same on
// every preset.
constexpr uint32_t kReLanes = 32;

float fold_lanes(float* lane) {
  for (uint32_t w = kReLanes / 2; w >= 1; w /= 2) {
    for (uint32_t k = 0; k < w; ++k) lane[k] += lane[k + w];
  }
  return lane[0];
}

template <typename T>
void sum_float(const uint8_t* src, uint32_t rows, uint32_t cols, uint32_t ld, uint8_t axis,
               bool squares, float* acc) {
  auto value = [&](uint32_t r, uint32_t c) {
    const float x = T::load(src + (size_t{r} * ld + c) * T::kBytes);
    return squares ? x * x : x;
  };
  if (axis == 1) {
    for (uint32_t r = 0; r < rows; ++r) {
      float lane[kReLanes] = {};
      for (uint32_t c0 = 0; c0 < cols; c0 += kReLanes) {
        const uint32_t n = std::min(kReLanes, cols - c0);
        for (uint32_t j = 0; j < n; ++j) lane[j] += value(r, c0 + j);
      }
      acc[r] = fold_lanes(lane);
    }
    return;
  }
  // Along the columns: lane l of column c holds rows l, l + kReLanes, ...
  std::vector<float> lanes(size_t{kReLanes} * cols, 0.0f);
  for (uint32_t r = 0; r < rows; ++r) {
    float* lane_row = lanes.data() + size_t{r % kReLanes} * cols;
    for (uint32_t c = 0; c < cols; ++c) lane_row[c] += value(r, c);
  }
  for (uint32_t c = 0; c < cols; ++c) {
    float lane[kReLanes];
    for (uint32_t l = 0; l < kReLanes; ++l) lane[l] = lanes[size_t{l} * cols + c];
    acc[c] = fold_lanes(lane);
  }
}

}  // namespace

void FunctionalUnits::run_reduce(const mtia_pe_re_desc& d) {
  const uint8_t* src = at(d.src);
  uint8_t* dst = at(d.dst);
  const bool accumulate = (d.hdr.flags & MTIA_PE_RE_ACCUMULATE) != 0;
  const uint32_t outputs = d.axis == 1 ? d.rows : d.cols;

  detail::visit_dtype(d.in_dtype, [&](auto t) {
    using T = decltype(t);
    using C = typename T::C;
    switch (d.op) {
      case MTIA_PE_RE_SUM:
      case MTIA_PE_RE_SUMSQ: {
        const bool squares = d.op == MTIA_PE_RE_SUMSQ;
        if constexpr (kIsFloat<T>) {
          // fp32 lanes folded by a tree, rounded once to the output dtype.
          std::vector<float> acc(outputs, 0.0f);
          sum_float<T>(src, d.rows, d.cols, d.ld_src, d.axis, squares, acc.data());
          visit_float(d.out_dtype, [&](auto out) {
            using Out = decltype(out);
            for (uint32_t i = 0; i < outputs; ++i) {
              uint8_t* p = dst + size_t{i} * Out::kBytes;
              Out::store(p, accumulate ? Out::load(p) + acc[i] : acc[i]);
            }
          });
        } else {
          // Integers and bool: int64 accumulation (wrapping), wrapped to the output.
          std::vector<uint64_t> acc(outputs, 0);
          for_each_along<T>(src, d.rows, d.cols, d.ld_src, d.axis,
                            [&](uint32_t i, int64_t x) { acc[i] += static_cast<uint64_t>(x); });
          auto write = [&](auto out) {
            using Out = decltype(out);
            for (uint32_t i = 0; i < outputs; ++i) {
              uint8_t* p = dst + size_t{i} * Out::kBytes;
              uint64_t v = acc[i];
              if (accumulate) v += static_cast<uint64_t>(Out::load(p));
              Out::store(p, wrap(v));
            }
          };
          if (d.out_dtype == MTIA_PE_DT_INT32)
            write(I32{});
          else
            write(I64{});
        }
        return;
      }
      case MTIA_PE_RE_MAX:
      case MTIA_PE_RE_MIN: {
        const bool is_max = d.op == MTIA_PE_RE_MAX;
        std::vector<C> best(outputs);
        std::vector<uint8_t> seen(outputs, 0);
        for_each_along<T>(src, d.rows, d.cols, d.ld_src, d.axis, [&](uint32_t i, C x) {
          if (!seen[i]) {
            best[i] = x;
            seen[i] = 1;
          } else {
            best[i] = is_max ? max_nan(best[i], x) : min_nan(best[i], x);
          }
        });
        for (uint32_t i = 0; i < outputs; ++i) {
          uint8_t* p = dst + size_t{i} * T::kBytes;
          C v = best[i];
          if (accumulate) v = is_max ? max_nan(T::load(p), v) : min_nan(T::load(p), v);
          T::store(p, v);  // exact: v is a value of T
        }
        return;
      }
      default: {  // ARGMAX, ARGMIN: the first extreme; a NaN is the extreme, the first one wins
        const bool is_max = d.op == MTIA_PE_RE_ARGMAX;
        std::vector<C> best(outputs);
        std::vector<int64_t> index(outputs, -1);
        std::vector<int64_t> pos(outputs, 0);
        for_each_along<T>(src, d.rows, d.cols, d.ld_src, d.axis, [&](uint32_t i, C x) {
          const int64_t here = pos[i]++;
          bool take = index[i] < 0;
          if (!take) {
            const C cur = best[i];
            bool cur_nan = false, x_nan = false;
            if constexpr (kIsFloat<T>) {
              cur_nan = std::isnan(cur);
              x_nan = std::isnan(x);
            }
            take = !cur_nan && (x_nan || (is_max ? x > cur : x < cur));
          }
          if (take) {
            best[i] = x;
            index[i] = here;
          }
        });
        auto write = [&](auto out) {
          using Out = decltype(out);
          for (uint32_t i = 0; i < outputs; ++i)
            Out::store(dst + size_t{i} * Out::kBytes, index[i]);
        };
        if (d.out_dtype == MTIA_PE_DT_INT32)
          write(I32{});
        else
          write(I64{});
        return;
      }
    }
  });
}

// ---- MLU ---------------------------------------------------------------------------------------

namespace {

template <typename E>
void transpose_tile(const uint8_t* src, uint8_t* dst, uint32_t rows, uint32_t cols, uint32_t ld_src,
                    uint32_t ld_dst) {
  // Blocked so that both the reads and the writes stay within a few cache lines per block.
  constexpr uint32_t kBlock = 32;
  for (uint32_t r0 = 0; r0 < rows; r0 += kBlock) {
    const uint32_t r1 = std::min(rows, r0 + kBlock);
    for (uint32_t c0 = 0; c0 < cols; c0 += kBlock) {
      const uint32_t c1 = std::min(cols, c0 + kBlock);
      for (uint32_t r = r0; r < r1; ++r) {
        for (uint32_t c = c0; c < c1; ++c) {
          E v;
          std::memcpy(&v, src + (size_t{r} * ld_src + c) * sizeof(E), sizeof(E));
          std::memcpy(dst + (size_t{c} * ld_dst + r) * sizeof(E), &v, sizeof(E));
        }
      }
    }
  }
}

}  // namespace

void FunctionalUnits::run_layout(const mtia_pe_mlu_desc& d) {
  const uint8_t* src = at(d.src);
  uint8_t* dst = at(d.dst);
  const size_t es = d.elem_size;
  if (d.op == MTIA_PE_MLU_COPY) {
    for (uint32_t r = 0; r < d.rows; ++r) {
      std::memcpy(dst + size_t{r} * d.ld_dst * es, src + size_t{r} * d.ld_src * es, d.cols * es);
    }
    return;
  }
  switch (d.elem_size) {
    case 1:
      return transpose_tile<uint8_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    case 2:
      return transpose_tile<uint16_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    case 4:
      return transpose_tile<uint32_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
    default:
      return transpose_tile<uint64_t>(src, dst, d.rows, d.cols, d.ld_src, d.ld_dst);
  }
}

}  // namespace mtia::sim::pe
