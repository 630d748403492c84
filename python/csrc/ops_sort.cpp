// Sorting and selection on the device (kernels/lib/sort.c): sort (so argsort and msort), topk,
// kthvalue, median and nanmedian (along a dim and over everything).
//
// Every op is one launch of the `sort` kernel: it sorts each line along `dim` stably (NaN
// largest, -0.0 == 0.0, ties in index order, as PyTorch's CPU stable sort) and writes a window
// of ranks: all of them (sort), the first k (topk; descending for largest), rank k-1
// (kthvalue) or the median's (median: a line's first NaN wins; nanmedian: the median of the
// non-NaN values). Lines longer than a local store are merged through a DRAM scratch buffer
// allocated here. The results are those of a stable sort, so where the CPU's selection
// algorithms (kthvalue, median, topk with sorted=False) leave the order or the index of equal
// values unspecified, the device gives the first in input order.
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorUtils.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/SortingUtils.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk_meta.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

// The kernel's flags.
constexpr int64_t kDescending = 1;
constexpr int64_t kNanWins = 2;   // median: a line with a NaN gives its first NaN
constexpr int64_t kNanSkip = 4;   // nanmedian: the median of the non-NaN values
constexpr int64_t kUnstable = 8;  // ties in the order of the CPU's std::sort

// Lines up to this length always fit in a PE's local store (mtia-v1's 128 KiB holds about
// 3800 of the kernel's 16-byte records); longer ones are merged through DRAM scratch, 32 bytes
// per element and PE.
constexpr int64_t kLocalLine = 2048;
// The most scratch one launch takes: fewer PEs sort very long lines.
constexpr int64_t kScratchBudget = int64_t(256) << 20;
// Elements per PE: the core sorts at some hundreds of instructions per element.
constexpr int64_t kElementsPerPe = 1024;

// The kernel's 4-D view: lines over sizes 0..2, the sorted dim last (3).
struct LinePlan {
  std::array<int64_t, 4> size{1, 1, 1, 1};
  std::array<int64_t, 4> in{0, 0, 0, 0}, values{0, 0, 0, 0}, indices{0, 0, 0, 0};
};

// Folds the dims other than `dim` of in, values and indices (same rank, same sizes but at
// `dim`) into at most 3 line dims: size-1 dims dropped, neighbours merged where every operand
// continues the inner one. nullopt when more than 3 remain.
std::optional<LinePlan> plan_lines(const Tensor& in, const Tensor& values, const Tensor& indices,
                                   int64_t dim) {
  struct Dim {
    int64_t size;
    std::array<int64_t, 3> st;
  };
  std::vector<Dim> merged;  // innermost first
  for (int64_t d = in.dim() - 1; d >= 0; --d) {
    if (d == dim || in.size(d) == 1) continue;
    const Dim cur{in.size(d), {in.stride(d), values.stride(d), indices.stride(d)}};
    if (!merged.empty()) {
      Dim& inner = merged.back();
      bool ok = true;
      for (size_t k = 0; k < 3; ++k) ok = ok && cur.st[k] == inner.st[k] * inner.size;
      if (ok) {
        inner.size *= cur.size;
        continue;
      }
    }
    merged.push_back(cur);
  }
  if (merged.size() > 3) return std::nullopt;
  LinePlan p;
  for (size_t j = 0; j < merged.size(); ++j) {
    const size_t slot = 2 - j;
    p.size[slot] = merged[j].size;
    p.in[slot] = merged[j].st[0];
    p.values[slot] = merged[j].st[1];
    p.indices[slot] = merged[j].st[2];
  }
  p.size[3] = in.size(dim);
  p.in[3] = in.stride(dim);
  p.values[3] = values.stride(dim);
  p.indices[3] = indices.stride(dim);
  return p;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  return at::get_overlap_status(a, b) != at::MemOverlapStatus::No;
}

// Writes ranks [first, first + count) of every line of `self` along `dim` into values and
// indices, which have self's rank with size `count` at `dim` (0-dim tensors are one line).
void launch_sort(const Tensor& self_arg, int64_t dim, const Tensor& values_arg,
                 const Tensor& indices_arg, int64_t flags, int64_t first, int64_t count) {
  const Tensor self = self_arg.dim() == 0 ? self_arg.reshape({1}) : self_arg;
  const Tensor values = values_arg.dim() == 0 ? values_arg.view({1}) : values_arg;
  const Tensor indices = indices_arg.dim() == 0 ? indices_arg.view({1}) : indices_arg;
  if (values.numel() == 0 || count == 0) return;
  const auto plan = plan_lines(self, values, indices, dim);
  if (!plan || overlaps(self, values) || overlaps(self, indices) || overlaps(values, indices)) {
    // More than 3 line dims, or outputs over the input: sort a contiguous copy with the dim
    // last into contiguous results, then copy those into place.
    const Tensor in = self.movedim(dim, -1).clone(at::MemoryFormat::Contiguous);
    std::vector<int64_t> shape = in.sizes().vec();
    shape.back() = count;
    const Tensor v = empty_device(shape, self.scalar_type());
    const Tensor i = empty_device(shape, at::kLong);
    launch_sort(in, in.dim() - 1, v, i, flags, first, count);
    values.movedim(dim, -1).copy_(v);
    indices.movedim(dim, -1).copy_(i);
    return;
  }
  const LinePlan& p = *plan;
  const int64_t len = p.size[3], lines = p.size[0] * p.size[1] * p.size[2];
  int64_t want = std::min(lines, (self.numel() + kElementsPerPe - 1) / kElementsPerPe);
  if (len > kLocalLine) want = std::min(want, std::max<int64_t>(1, kScratchBudget / (len * 32)));
  const mtia::Grid grid = grid_for(std::max<int64_t>(want, 1), 1);
  Tensor scratch;
  if (len > kLocalLine) {
    scratch = empty_device({int64_t(grid.rows * grid.cols) * len * 32}, at::kByte);
  }
  const uint8_t dt = *kernel_dtype(self.scalar_type());
  std::vector<mtia::Arg> args{tensor_address(values),
                              tensor_address(indices),
                              tensor_address(self),
                              scratch.defined() ? tensor_address(scratch) : mtia::DevicePtr(),
                              mtia::Arg::dtype(dt),
                              flags,
                              first,
                              count,
                              scratch.defined() ? scratch.numel() : int64_t(0)};
  for (const auto* v : {&p.size, &p.in, &p.values, &p.indices}) {
    for (int64_t x : *v) args.emplace_back(x);
  }
  launch("sort", grid, args);
}

// --- sort ----------------------------------------------------------------------------------

std::tuple<Tensor&, Tensor&> sort_stable_out(const Tensor& self, std::optional<bool> stable,
                                             int64_t dim, bool descending, Tensor& values,
                                             Tensor& indices) {
  OutOf<at::meta::structured_sort_stable, 2> m(values, indices);
  m.meta(self, stable, dim, descending);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(sort, values_stable)>(dtype_reason(self.scalar_type()), self, stable,
                                                     dim, descending, values, indices);
  }
  dim = at::maybe_wrap_dim(dim, self.dim());
  const int64_t len = self.dim() == 0 ? 1 : self.size(dim);
  // stable=False is the CPU's std::sort, whose order of equal values the kernel reproduces;
  // the CPU leaves lines with a zero stride (all equal) in index order.
  const bool unstable = !stable.value_or(false) && self.dim() > 0 && self.stride(dim) != 0;
  launch_sort(self, dim, values, indices,
              (descending ? kDescending : 0) | (unstable ? kUnstable : 0), 0, len);
  return {values, indices};
}

// --- topk ----------------------------------------------------------------------------------

std::tuple<Tensor&, Tensor&> topk_out(const Tensor& self, int64_t k, int64_t dim, bool largest,
                                      bool sorted, Tensor& values, Tensor& indices) {
  OutOf<at::meta::structured_topk, 2> m(values, indices);
  m.meta(self, k, dim, largest, sorted);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(topk, values)>(dtype_reason(self.scalar_type()), self, k, dim,
                                              largest, sorted, values, indices);
  }
  TORCH_CHECK(self.scalar_type() != at::kBool, "topk does not support bool dtypes on the device");
  dim = at::maybe_wrap_dim(dim, self.dim(), /*wrap_scalar=*/true);
  // sorted=False: the CPU leaves the order unspecified; the device keeps it sorted.
  launch_sort(self, dim, values, indices, largest ? kDescending : 0, 0, k);
  return {values, indices};
}

// --- kthvalue, median, nanmedian -------------------------------------------------------------

// One rank per line: values/indices already sized with `dim` kept (keepdim form).
void select_rank(const Tensor& self, int64_t dim, const Tensor& values, const Tensor& indices,
                 int64_t flags, int64_t rank) {
  launch_sort(self, dim, values, indices, flags, rank, 1);
}

std::tuple<Tensor&, Tensor&> kthvalue_out(const Tensor& self, int64_t k, int64_t dim_, bool keepdim,
                                          Tensor& values, Tensor& indices) {
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(kthvalue, values)>(dtype_reason(self.scalar_type()), self, k, dim_,
                                                  keepdim, values, indices);
  }
  // The CPU kernel's checks, in its order.
  const int64_t dim = at::maybe_wrap_dim(dim_, self.dim(), /*wrap_scalar=*/true);
  const int64_t slicesize = self.dim() == 0 ? 1 : self.size(dim);
  at::native::zero_numel_check_dims(self, dim, "kthvalue()");
  TORCH_CHECK(k >= 1 && k <= slicesize, "kthvalue(): selected number k out of range for dimension ",
              dim);
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool,
                              "\"kthvalue\" not implemented for 'Bool'");
  at::assert_no_overlap(self, values);
  at::native::_reduction_with_indices_allocate_or_resize_output(values, indices, self, dim_,
                                                                keepdim);
  select_rank(self, dim, values, indices, 0, k - 1);
  if (!keepdim && self.dim() > 0) {
    values.squeeze_(dim);
    indices.squeeze_(dim);
  }
  return {values, indices};
}

std::tuple<Tensor&, Tensor&> median_dim_impl(const Tensor& self, int64_t dim, bool keepdim,
                                             Tensor& values, Tensor& indices, bool ignore_nan) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  at::native::zero_numel_check_dims(self, dim, "median()");
  at::checkDeviceType("median", {values, indices}, self.device().type());
  at::checkScalarType("median", {indices, "indices", 1}, at::kLong);
  at::checkSameType("median", {values, "values", 0}, {self, "self", 2});
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool,
                              "\"median_out\" not implemented for 'Bool'");
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) {
    if (keepdim) {
      shape[size_t(dim)] = 1;
    } else {
      shape.erase(shape.begin() + dim);
    }
  }
  at::native::resize_output(values, shape);
  at::native::resize_output(indices, shape);
  if (values.numel() == 0) return {values, indices};
  const bool keep = keepdim || self.dim() == 0;
  const Tensor v = keep ? values : values.unsqueeze(dim);
  const Tensor i = keep ? indices : indices.unsqueeze(dim);
  const int64_t len = self.dim() == 0 ? 1 : self.size(dim);
  if (ignore_nan) {
    select_rank(self, dim, v, i, kNanSkip, 0);
  } else {
    select_rank(self, dim, v, i, kNanWins, (len - 1) / 2);
  }
  return {values, indices};
}

std::tuple<Tensor&, Tensor&> median_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                            Tensor& values, Tensor& indices) {
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(median, dim_values)>(dtype_reason(self.scalar_type()), self, dim,
                                                    keepdim, values, indices);
  }
  return median_dim_impl(self, dim, keepdim, values, indices, false);
}

std::tuple<Tensor&, Tensor&> nanmedian_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                               Tensor& values, Tensor& indices) {
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(nanmedian, dim_values)>(dtype_reason(self.scalar_type()), self, dim,
                                                       keepdim, values, indices);
  }
  return median_dim_impl(self, dim, keepdim, values, indices, true);
}

// median() / nanmedian() of every element: the lower median, NaN for an empty tensor.
Tensor median_all_impl(const Tensor& self, bool ignore_nan) {
  if (self.numel() == 0) {
    // The CPU's result, converted to the dtype on the host.
    return at::full({}, std::numeric_limits<float>::quiet_NaN(), at::kFloat).to(self.options());
  }
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool,
                              "\"median\" not implemented for 'Bool'");
  Tensor out = empty_device({}, self.scalar_type());
  Tensor idx = empty_device({1}, at::kLong);
  const Tensor flat = self.reshape({-1});
  if (ignore_nan) {
    select_rank(flat, 0, out.view({1}), idx, kNanSkip, 0);
  } else {
    select_rank(flat, 0, out.view({1}), idx, kNanWins, (flat.numel() - 1) / 2);
  }
  return out;
}

Tensor median_all(const Tensor& self) {
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(median)>(dtype_reason(self.scalar_type()), self);
  }
  return median_all_impl(self, false);
}

Tensor nanmedian_all(const Tensor& self) {
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(nanmedian)>(dtype_reason(self.scalar_type()), self);
  }
  return median_all_impl(self, true);
}

}  // namespace

#define MTIA_OPS_sort
#include "register_ops.inc"

}  // namespace mtia::torch_backend
