// Private to the unit models: the dtype-class visitors and the scalar semantics that more than
// one unit uses (docs/pe-isa.md, "Numerics").
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "elements.h"
#include "mtia/isa/pe/pe_ops.h"

namespace mtia::sim::pe::detail {

inline uint64_t ceil_div(uint64_t a, uint64_t b) {
  return (a + b - 1) / b;
}

// ---- Visitors of the dtype classes of isa/pe/se_ops.h: f(T{}) with the traits of `dt` ------

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
      undefined_dtype(dt);
  }
}

template <typename F>
void visit_int(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_INT8:
      return f(I8{});
    case MTIA_PE_DT_INT32:
      return f(I32{});
    case MTIA_PE_DT_INT64:
      return f(I64{});
    default:
      undefined_dtype(dt);
  }
}

template <typename F>
void visit_numeric(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_INT8:
    case MTIA_PE_DT_INT32:
    case MTIA_PE_DT_INT64:
      return visit_int(dt, f);
    default:
      return visit_float(dt, f);
  }
}

template <typename F>
void visit_int_or_bool(uint8_t dt, F&& f) {
  if (dt == MTIA_PE_DT_BOOL) return f(Bool{});
  visit_int(dt, f);
}

// ---- Scalar semantics -----------------------------------------------------------------------

// Integer arithmetic wraps: do it in uint64 (defined modulo 2^64), and the store to the
// narrower dtype keeps the low bits.
inline int64_t wrap(uint64_t v) {
  return static_cast<int64_t>(v);
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

}  // namespace mtia::sim::pe::detail
