// Host-side tensors for the kernel tests: a 4-D strided view over a buffer in the fake device
// DRAM with a host mirror, element access as double (every test value is exact in double),
// random contents by dtype, and tolerant comparison. fp16/bf16 conversions are the numerics
// helpers of the units (round to nearest even), so the references round like the device.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "harness.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/numerics.h"

namespace kt {

using Shape = std::array<int64_t, 4>;

inline unsigned dt_size(uint8_t dt) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
    case MTIA_PE_DT_INT32:
      return 4;
    case MTIA_PE_DT_FP16:
    case MTIA_PE_DT_BF16:
      return 2;
    case MTIA_PE_DT_INT8:
    case MTIA_PE_DT_BOOL:
      return 1;
    case MTIA_PE_DT_INT64:
      return 8;
    default:
      return 0;
  }
}
inline bool dt_float(uint8_t dt) {
  return dt == MTIA_PE_DT_FP32 || dt == MTIA_PE_DT_FP16 || dt == MTIA_PE_DT_BF16;
}
inline const char* dt_name(uint8_t dt) {
  static const char* const names[] = {"invalid", "fp32",  "fp16",  "bf16",
                                      "int8",    "int32", "int64", "bool"};
  return dt < MTIA_PE_DT_COUNT ? names[dt] : "invalid";
}

constexpr uint8_t kF32 = MTIA_PE_DT_FP32, kF16 = MTIA_PE_DT_FP16, kBF16 = MTIA_PE_DT_BF16,
                  kI8 = MTIA_PE_DT_INT8, kI32 = MTIA_PE_DT_INT32, kI64 = MTIA_PE_DT_INT64,
                  kBool = MTIA_PE_DT_BOOL;
inline const std::vector<uint8_t> kAllDtypes = {kF32, kF16, kBF16, kI8, kI32, kI64, kBool};
inline const std::vector<uint8_t> kFloatDtypes = {kF32, kF16, kBF16};

// The value of dtype dt nearest to v (round to nearest even; integers: v is integral).
inline double round_to(uint8_t dt, double v) {
  namespace n = mtia::sim::pe;
  switch (dt) {
    case MTIA_PE_DT_FP32:
      return static_cast<float>(v);
    case MTIA_PE_DT_FP16:
      return n::fp16_to_fp32(n::fp32_to_fp16(static_cast<float>(v)));
    case MTIA_PE_DT_BF16:
      return n::bf16_to_fp32(n::fp32_to_bf16(static_cast<float>(v)));
    case MTIA_PE_DT_BOOL:
      return v != 0 ? 1 : 0;
    default:
      return v;
  }
}

// The bit pattern of value v in dtype dt (for fill values, clamp bounds, scalars).
inline uint64_t bits_of(uint8_t dt, double v) {
  namespace n = mtia::sim::pe;
  switch (dt) {
    case MTIA_PE_DT_FP32: {
      const float f = static_cast<float>(v);
      uint32_t b;
      std::memcpy(&b, &f, 4);
      return b;
    }
    case MTIA_PE_DT_FP16:
      return n::fp32_to_fp16(static_cast<float>(v));
    case MTIA_PE_DT_BF16:
      return n::fp32_to_bf16(static_cast<float>(v));
    case MTIA_PE_DT_INT8:
      return static_cast<uint8_t>(static_cast<int8_t>(v));
    case MTIA_PE_DT_INT32:
      return static_cast<uint32_t>(static_cast<int32_t>(v));
    case MTIA_PE_DT_INT64:
      return static_cast<uint64_t>(static_cast<int64_t>(v));
    case MTIA_PE_DT_BOOL:
      return v != 0;
    default:
      return 0;
  }
}

inline double load_elem(uint8_t dt, const uint8_t* p) {
  namespace n = mtia::sim::pe;
  switch (dt) {
    case MTIA_PE_DT_FP32: {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    case MTIA_PE_DT_FP16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return n::fp16_to_fp32(h);
    }
    case MTIA_PE_DT_BF16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      return n::bf16_to_fp32(h);
    }
    case MTIA_PE_DT_INT8:
      return static_cast<int8_t>(*p);
    case MTIA_PE_DT_INT32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case MTIA_PE_DT_INT64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case MTIA_PE_DT_BOOL:
      return *p;
    default:
      return 0;
  }
}

inline void store_elem(uint8_t dt, uint8_t* p, double v) {
  const uint64_t b = bits_of(dt, v);
  std::memcpy(p, &b, dt_size(dt));
}

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

// A strided 4-D view over device memory with a host copy of its storage.
struct Tensor {
  uint8_t dt = MTIA_PE_DT_FP32;
  Shape size{1, 1, 1, 1};
  Shape stride{1, 1, 1, 1};
  uint64_t addr = 0;
  std::vector<uint8_t> host;  // the storage: elems() elements

  int64_t elems() const {
    int64_t span = 1;
    for (int i = 0; i < 4; ++i) {
      if (size[i] == 0) return 0;
      span += (size[i] - 1) * stride[i];
    }
    return span;
  }
  int64_t offset(const Shape& i) const {
    return i[0] * stride[0] + i[1] * stride[1] + i[2] * stride[2] + i[3] * stride[3];
  }
  double at(const Shape& i) const { return load_elem(dt, host.data() + offset(i) * dt_size(dt)); }
  void set(const Shape& i, double v) { store_elem(dt, host.data() + offset(i) * dt_size(dt), v); }
  uint8_t* raw(const Shape& i) { return host.data() + offset(i) * dt_size(dt); }

  void upload(Device& d) const { d.write(addr, host.data(), host.size()); }
  void download(Device& d) { d.read(addr, host.data(), host.size()); }

  // Arguments: the four sizes, the four strides.
  std::vector<Arg> size_args() const {
    return {i64(size[0]), i64(size[1]), i64(size[2]), i64(size[3])};
  }
  std::vector<Arg> stride_args() const {
    return {i64(stride[0]), i64(stride[1]), i64(stride[2]), i64(stride[3])};
  }
};

// Allocates a tensor in device memory; the storage (gaps included) starts as 0xA5 bytes.
inline Tensor make_tensor(Device& d, uint8_t dt, const Shape& size, const Shape& stride) {
  Tensor t;
  t.dt = dt;
  t.size = size;
  t.stride = stride;
  const int64_t n = std::max<int64_t>(t.elems(), 1);
  t.addr = d.alloc(static_cast<uint64_t>(n) * dt_size(dt));
  t.host.assign(static_cast<size_t>(n) * dt_size(dt), 0xA5);
  return t;
}
inline Tensor make_tensor(Device& d, uint8_t dt, const Shape& size) {
  return make_tensor(d, dt, size, contiguous(size));
}

// Random values exactly representable in dt, at every storage element, uploaded.
inline void randomize(Device& d, Tensor& t, std::mt19937& rng, double lo = -3, double hi = 3) {
  const unsigned es = dt_size(t.dt);
  for (size_t k = 0; k < t.host.size() / es; ++k) {
    double v;
    if (t.dt == MTIA_PE_DT_BOOL) {
      v = static_cast<double>(rng() & 1u);
    } else if (dt_float(t.dt)) {
      v = round_to(t.dt, std::uniform_real_distribution<double>(lo, hi)(rng));
    } else {
      const int64_t range = t.dt == MTIA_PE_DT_INT8 ? 100 : 1000;
      v = static_cast<double>(std::uniform_int_distribution<int64_t>(-range, range)(rng));
    }
    store_elem(t.dt, t.host.data() + k * es, v);
  }
  t.upload(d);
}

// Tolerance for results of dtype dt computed in fp32 and rounded once (relative to the
// magnitude of the expected value, plus an absolute floor).
struct Tol {
  double rel, abs;
};
inline Tol tol_for(uint8_t dt) {
  switch (dt) {
    case MTIA_PE_DT_FP32:
      return {2e-5, 1e-5};
    case MTIA_PE_DT_FP16:
      return {2e-3, 1e-3};
    case MTIA_PE_DT_BF16:
      return {1.6e-2, 8e-3};
    default:
      return {0, 0};
  }
}
inline bool close(double got, double want, Tol t) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= t.abs + t.rel * std::fabs(want);
}

}  // namespace kt
