#include "mtia/sim/pe/se_unit.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "elements.h"
#include "mtia/isa/pe/se_ops.h"
#include "mtia/sim/pe/descriptors.h"
#include "se_math.h"
#include "unit_math.h"
#include "vector_math.h"

namespace mtia::sim::pe {
namespace {

using detail::Bool;

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

// ---- One kernel per op, from the op table ---------------------------------------------------

// Calls f(T{}) with the traits of `dt`, one of the dtypes of input class InClass.
template <int InClass, typename F>
void visit_in_class(uint8_t dt, F&& f) {
  if constexpr (InClass == MTIA_PE_SE_IN_ANY) {
    detail::visit_dtype(dt, f);
  } else if constexpr (InClass == MTIA_PE_SE_IN_NUMERIC) {
    detail::visit_numeric(dt, f);
  } else if constexpr (InClass == MTIA_PE_SE_IN_FLOAT) {
    detail::visit_float(dt, f);
  } else if constexpr (InClass == MTIA_PE_SE_IN_INT_OR_BOOL) {
    detail::visit_int_or_bool(dt, f);
  } else {
    static_assert(InClass == MTIA_PE_SE_IN_INT, "unknown SE input class");
    detail::visit_int(dt, f);
  }
}

// The fp32 block function (vector_math.h) of the ops computed a block at a time, or nullptr.
// Whether an op runs through a whole-block vector function. A separate test, because a
// function's address compared with nullptr is not a constant expression in every build (not
// under GCC's sanitizers).
constexpr bool has_block_fn(int op) {
  return op == MTIA_PE_SE_EXP || op == MTIA_PE_SE_TANH || op == MTIA_PE_SE_SIGMOID ||
         op == MTIA_PE_SE_SILU;
}

void (*block_fn(int op))(float*, size_t) {
  switch (op) {
    case MTIA_PE_SE_EXP:
      return detail::exp_block;
    case MTIA_PE_SE_TANH:
      return detail::tanh_block;
    case MTIA_PE_SE_SIGMOID:
      return detail::sigmoid_block;
    case MTIA_PE_SE_SILU:  // silu = a * sigmoid(a), whose limit at -Inf is -0
      return detail::silu_block;
    default:
      return nullptr;
  }
}

// Op `Op` over `n` elements, with the arity, input class and output rule of its table row.
template <int Op, int Arity, int InClass, int OutRule>
void run_op(const mtia_pe_se_desc& d, const Operand* o, uint8_t* dst) {
  const uint32_t n = d.count;
  if constexpr (Op == MTIA_PE_SE_SELECT) {
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
  } else if constexpr (OutRule == MTIA_PE_SE_OUT_ANY) {  // CAST
    static_assert(Arity == 1);
    visit_in_class<InClass>(d.in_dtype, [&](auto in) {
      using In = decltype(in);
      detail::visit_dtype(d.out_dtype, [&](auto out) {
        using Out = decltype(out);
        map1<In, Out>(o, dst, n, [](typename In::C a) { return detail::cast_value<In, Out>(a); });
      });
    });
  } else if constexpr (has_block_fn(Op)) {
    // Whole blocks in fp32, rounded once to the dtype on store.
    static_assert(Arity == 1 && InClass == MTIA_PE_SE_IN_FLOAT);
    detail::visit_float(d.in_dtype,
                        [&](auto t) { map1_blocks<decltype(t)>(o, dst, n, block_fn(Op)); });
  } else {
    visit_in_class<InClass>(d.in_dtype, [&](auto t) {
      using T = decltype(t);
      using Out = std::conditional_t<OutRule == MTIA_PE_SE_OUT_BOOL, Bool, T>;
      const auto f = detail::se_fn<Op, T>();
      if constexpr (Arity == 1) {
        map1<T, Out>(o, dst, n, f);
      } else if constexpr (Arity == 2) {
        map2<T, Out>(o, dst, n, f);
      } else {
        map3<T, Out>(o, dst, n, f);
      }
    });
  }
}

using SeKernel = void (*)(const mtia_pe_se_desc& d, const Operand* o, uint8_t* dst);

// Indexed by op code; nullptr for a code that is not an op (validate rejects those).
constexpr std::array<SeKernel, 256> make_kernels() {
  std::array<SeKernel, 256> k{};
#define MTIA_SE_KERNEL(NAME_, code_, arity_, in_, out_, cost_, name_) \
  k[code_] = &run_op<code_, arity_, MTIA_PE_SE_IN_##in_, MTIA_PE_SE_OUT_##out_>;
  MTIA_PE_SE_OPS(MTIA_SE_KERNEL)
#undef MTIA_SE_KERNEL
  return k;
}
constexpr std::array<SeKernel, 256> kKernels = make_kernels();

// Bytes of one element of SE operand j (0..2): select's condition is bool.
unsigned se_operand_bytes(const mtia_pe_se_desc& d, int j) {
  return d.op == MTIA_PE_SE_SELECT && j == 0 ? 1 : dtype_bytes(d.in_dtype);
}

}  // namespace

isa::Status SeUnit::validate(const mtia_pe_se_desc& d) const {
  return pe::validate(d, ls_.size());
}

UnitWork SeUnit::cost(const mtia_pe_se_desc& d) const {
  const unsigned widest = std::max(dtype_bytes(d.in_dtype), dtype_bytes(d.out_dtype));
  const uint64_t lanes = std::max(
      1u, std::min(timing_.se_elements_per_cycle, timing_.se_vector_bytes / std::max(1u, widest)));
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
  return {timing_.se_issue_cycles + detail::ceil_div(d.count, lanes) * per_vector, d.count};
}

Touched SeUnit::touched(const mtia_pe_se_desc& d) const {
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

// Host elementwise math: about 2 elements/ns, transcendental functions about 0.2.
uint64_t SeUnit::host_cost_ns(const mtia_pe_se_desc& d) const {
  const bool transcendental = mtia_pe_se_info(d.op).cost == MTIA_PE_SE_COST_TRANSCENDENTAL;
  return transcendental ? uint64_t{d.count} * 5 : d.count / 2;
}

void SeUnit::execute(const mtia_pe_se_desc& d) {
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
  kKernels[d.op](d, o, at(d.dst));
}

}  // namespace mtia::sim::pe
