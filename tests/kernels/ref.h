// Host-side tensors for the kernel tests: a 4-D strided view over a buffer in the fake device
// DRAM with a host mirror. The references and checks themselves are in reference_ops.h,
// shared with the tests that run the library through the whole device.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "kernel_harness.h"
#include "reference_ops.h"

namespace kt {

// A strided 4-D view over device memory with a host copy of its storage (elems() elements).
struct Tensor : HostView {
  uint64_t addr = 0;

  int64_t elems() const {
    int64_t span = 1;
    for (int i = 0; i < 4; ++i) {
      if (size[i] == 0) return 0;
      span += (size[i] - 1) * stride[i];
    }
    return span;
  }

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

// Allocates a tensor in device memory; the storage (gaps included) starts as kGapByte.
inline Tensor make_tensor(Device& d, uint8_t dt, const Shape& size, const Shape& stride) {
  Tensor t;
  t.dt = dt;
  t.size = size;
  t.stride = stride;
  const int64_t n = std::max<int64_t>(t.elems(), 1);
  t.addr = d.alloc(static_cast<uint64_t>(n) * dt_size(dt));
  t.host.assign(static_cast<size_t>(n) * dt_size(dt), kGapByte);
  return t;
}
inline Tensor make_tensor(Device& d, uint8_t dt, const Shape& size) {
  return make_tensor(d, dt, size, contiguous(size));
}

// Random values exactly representable in dt, at every storage element, uploaded.
inline void randomize(Device& d, Tensor& t, std::mt19937& rng, double lo = -3, double hi = 3) {
  fill_random(t, rng, lo, hi);
  t.upload(d);
}

}  // namespace kt
