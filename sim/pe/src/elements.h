// Private to the unit models: one traits type per element dtype, so that every op is written
// once over a "compute" type (float for the floating dtypes, int64 for integers and bool) and
// instantiated per dtype. Loads and stores go through memcpy: local-store operands are aligned
// by the validators, and memcpy keeps the compiler's aliasing rules out of the way.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/numerics.h"

namespace mtia::sim::pe::detail {

struct F32 {
  static constexpr uint8_t kId = MTIA_PE_DT_FP32;
  static constexpr unsigned kBytes = 4;
  static constexpr int kPrecision = 24;  // significant bits
  using C = float;
  static C load(const uint8_t* p) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  static void store(uint8_t* p, C v) { std::memcpy(p, &v, 4); }
};

struct F16 {
  static constexpr uint8_t kId = MTIA_PE_DT_FP16;
  static constexpr unsigned kBytes = 2;
  static constexpr int kPrecision = 11;
  using C = float;
  static C load(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return fp16_to_fp32(v);
  }
  static void store(uint8_t* p, C v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(p, &h, 2);
  }
};

struct BF16 {
  static constexpr uint8_t kId = MTIA_PE_DT_BF16;
  static constexpr unsigned kBytes = 2;
  static constexpr int kPrecision = 8;
  using C = float;
  static C load(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return bf16_to_fp32(v);
  }
  static void store(uint8_t* p, C v) {
    const uint16_t h = fp32_to_bf16(v);
    std::memcpy(p, &h, 2);
  }
};

template <typename S, uint8_t Id>
struct Int {
  static constexpr uint8_t kId = Id;
  static constexpr unsigned kBytes = sizeof(S);
  static constexpr int64_t kMin = std::numeric_limits<S>::min();
  static constexpr int64_t kMax = std::numeric_limits<S>::max();
  using C = int64_t;
  static C load(const uint8_t* p) {
    S v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  // Narrowing integer conversion is modular (C++20): this is the wrap of docs/pe-isa.md.
  static void store(uint8_t* p, C v) {
    const S s = static_cast<S>(v);
    std::memcpy(p, &s, sizeof s);
  }
};
using I8 = Int<int8_t, MTIA_PE_DT_INT8>;
using I32 = Int<int32_t, MTIA_PE_DT_INT32>;
using I64 = Int<int64_t, MTIA_PE_DT_INT64>;

struct Bool {
  static constexpr uint8_t kId = MTIA_PE_DT_BOOL;
  static constexpr unsigned kBytes = 1;
  static constexpr int64_t kMin = 0;
  static constexpr int64_t kMax = 1;
  using C = int64_t;
  // A byte other than 0/1 (memory the kernel wrote itself) reads as true.
  static C load(const uint8_t* p) { return *p != 0; }
  static void store(uint8_t* p, C v) { *p = v != 0; }
};

template <typename T>
inline constexpr bool kIsFloat = std::is_same_v<typename T::C, float>;

[[noreturn]] inline void undefined_dtype(uint8_t dt) {
  // The validators reject undefined dtypes before any unit runs: reaching this is our bug.
  throw std::logic_error("PE unit model: undefined dtype " + std::to_string(dt) +
                         " reached the functional path");
}

// Calls f(T{}) with the traits of `dt`.
template <typename F>
decltype(auto) visit_dtype(uint8_t dt, F&& f) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
      return f(F32{});
    case MTIA_PE_DT_FP16:
      return f(F16{});
    case MTIA_PE_DT_BF16:
      return f(BF16{});
    case MTIA_PE_DT_INT8:
      return f(I8{});
    case MTIA_PE_DT_INT32:
      return f(I32{});
    case MTIA_PE_DT_INT64:
      return f(I64{});
    case MTIA_PE_DT_BOOL:
      return f(Bool{});
    default:
      undefined_dtype(dt);
  }
}

// One value of dtype From as dtype To's compute type, with the cast rules of numerics.h;
// To::store then does the final rounding (floating) or wrap (integer).
template <typename From, typename To>
typename To::C cast_value(typename From::C v) {
  if constexpr (std::is_same_v<To, Bool>) {
    return v != 0;  // NaN != 0 is true; -0.0 is false
  } else if constexpr (kIsFloat<From> && kIsFloat<To>) {
    return v;  // fp16/bf16 values are exact in float: To::store rounds once
  } else if constexpr (kIsFloat<From>) {
    return float_to_int_saturating(v, To::kMin, To::kMax);
  } else if constexpr (kIsFloat<To>) {
    return int_to_float_rounded(v, To::kPrecision);  // To::store is then exact
  } else {
    return v;  // integer -> integer: To::store wraps
  }
}

}  // namespace mtia::sim::pe::detail
