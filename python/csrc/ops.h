// Device building blocks shared by the op files: reductions along any set of dimensions.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "mtia/device_ptr.h"

namespace mtia::torch_backend {

// One launch's view for the kernels that work along one dimension (reductions, softmax,
// max/min with indices): [k0, k1, k2, r], the dimension worked along is 3.
struct ReduceView {
  std::array<int64_t, 4> sizes{1, 1, 1, 1};
  std::array<int64_t, 4> in_strides{0, 0, 0, 0};
  std::vector<std::array<int64_t, 4>> out_strides;  // one per output
};
using ReduceLauncher = std::function<void(
    mtia::DevicePtr in, const std::vector<mtia::DevicePtr>& outs, const ReduceView& view)>;

// Calls `launch` for `in` and `outs` (all of in's rank; an output's size is 1 in a reduced
// dimension, or in's size for softmax) working along the dimensions marked in `reduced`.
// They must merge into one run in `in`, or `in` is first gathered into a contiguous copy (the
// outs permuted to match); the kept dimensions are merged where every operand allows, and
// more than 3 of them take one launch per index of the outer ones.
void reduce_views(const at::Tensor& in, const std::vector<at::Tensor>& outs,
                  const std::vector<bool>& reduced, const ReduceLauncher& launch);

enum class ReduceOp { kSum, kMean, kAmax, kAmin, kVar };

// out = op over `dims` of `in` (empty: every dimension), on the reduction kernels. `out` is
// already sized (keepdim or not, as `keepdim` says) and has a dtype the kernel writes for
// `in`'s dtype: sum: float32/float16/bfloat16 for floating inputs, int32/int64 for integer
// and bool inputs; the others: in's dtype. var divides by max(N - correction, 0).
// Dimensions that cannot be merged into one reduced dimension are first gathered into a
// contiguous copy on the device; more than 3 kept dimensions take several launches.
void reduce_into(ReduceOp op, const at::Tensor& out, const at::Tensor& in, at::IntArrayRef dims,
                 bool keepdim, int64_t correction = 1);

// values/indices of the max (or min) along `dim`: the first extreme, a NaN counting as one.
void reduce_with_indices(bool max, const at::Tensor& values, const at::Tensor& indices,
                         const at::Tensor& in, int64_t dim, bool keepdim);

}  // namespace mtia::torch_backend
