// Reductions on the sum, mean, amax, amin, var, max_dim and min_dim kernels: sum, mean, amax,
// amin, var (and std), max/min (full and along a dim, with indices), argmax/argmin, all/any.
//
// The kernels reduce one dimension of a 4-D view per launch. A set of reduced dimensions that
// are contiguous with each other becomes that one dimension; others are first gathered into a
// contiguous copy on the device. A full reduction of a large tensor runs in two stages (64
// partial results, then one) so that it uses the whole PE grid.
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/aminmax_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/sum_meta.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "ops.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::ScalarType;
using at::Tensor;

// `out` with the reduced dimensions put back as size 1, so it has in's rank.
Tensor keepdim_view(const Tensor& out, int64_t rank, const std::vector<bool>& reduced,
                    bool keepdim) {
  if (keepdim || out.dim() == rank) return out;
  std::vector<int64_t> sizes, strides;
  int64_t j = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[size_t(d)]) {
      sizes.push_back(1);
      strides.push_back(0);
    } else {
      sizes.push_back(out.size(j));
      strides.push_back(out.stride(j));
      ++j;
    }
  }
  return out.as_strided(sizes, strides, out.storage_offset());
}

}  // namespace

void reduce_views(const Tensor& in, const std::vector<Tensor>& outs,
                  const std::vector<bool>& reduced, const ReduceLauncher& launch) {
  const int64_t rank = in.dim();
  std::vector<int64_t> red, kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (in.size(d) == 1) continue;
    (reduced[size_t(d)] ? red : kept).push_back(d);
  }
  // The reduced dimensions must form one strided run.
  std::stable_sort(red.begin(), red.end(),
                   [&](int64_t a, int64_t b) { return in.stride(a) > in.stride(b); });
  bool one_run = true;
  for (size_t i = 0; i + 1 < red.size(); ++i) {
    one_run = one_run && in.stride(red[i]) == in.stride(red[i + 1]) * in.size(red[i + 1]);
  }
  if (!one_run) {
    // Gather: kept dimensions first, reduced last, contiguous; the outs follow the same order.
    std::vector<int64_t> perm;
    std::vector<bool> red2;
    for (int64_t d = 0; d < rank; ++d) {
      if (!reduced[size_t(d)]) perm.push_back(d);
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (reduced[size_t(d)]) perm.push_back(d);
    }
    for (int64_t d : perm) red2.push_back(reduced[size_t(d)]);
    const Tensor gathered = in.permute(perm).contiguous();
    std::vector<Tensor> outs2;
    for (const Tensor& o : outs) outs2.push_back(o.permute(perm));
    reduce_views(gathered, outs2, red2, launch);
    return;
  }
  int64_t R = 1;
  int64_t r_stride = 0;
  for (int64_t d : red) R *= in.size(d);
  if (!red.empty()) r_stride = in.stride(red.back());

  // Kept dimensions, outermost first by in's strides, merged where every operand continues.
  std::stable_sort(kept.begin(), kept.end(),
                   [&](int64_t a, int64_t b) { return in.stride(a) > in.stride(b); });
  struct Dim {
    int64_t size;
    std::vector<int64_t> stride;  // in, then each out
  };
  std::vector<Dim> dims;  // innermost first while building
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    Dim dm{in.size(*it), {in.stride(*it)}};
    for (const Tensor& o : outs) dm.stride.push_back(o.stride(*it));
    if (!dims.empty()) {
      Dim& inner = dims.back();
      bool ok = true;
      for (size_t k = 0; k < dm.stride.size() && ok; ++k) {
        ok = dm.stride[k] == inner.stride[k] * inner.size;
      }
      if (ok) {
        inner.size *= dm.size;
        continue;
      }
    }
    dims.push_back(std::move(dm));
  }
  std::reverse(dims.begin(), dims.end());
  const size_t extra = dims.size() > 3 ? dims.size() - 3 : 0;
  const size_t nk = dims.size() - extra;

  ReduceView v;
  v.out_strides.assign(outs.size(), {0, 0, 0, 0});
  for (size_t j = 0; j < nk; ++j) {
    const Dim& dm = dims[extra + j];
    const size_t slot = 3 - nk + j;
    v.sizes[slot] = dm.size;
    v.in_strides[slot] = dm.stride[0];
    for (size_t k = 0; k < outs.size(); ++k) v.out_strides[k][slot] = dm.stride[k + 1];
  }
  v.sizes[3] = R;
  v.in_strides[3] = r_stride;
  if (!red.empty()) {
    for (size_t k = 0; k < outs.size(); ++k) v.out_strides[k][3] = outs[k].stride(red.back());
  }

  const mtia::DevicePtr in_base = tensor_address(in);
  std::vector<mtia::DevicePtr> out_base;
  for (const Tensor& o : outs) out_base.push_back(tensor_address(o));
  std::vector<int64_t> idx(extra, 0);
  while (true) {
    int64_t in_off = 0;
    std::vector<mtia::DevicePtr> ptrs = out_base;
    for (size_t j = 0; j < extra; ++j) in_off += idx[j] * dims[j].stride[0];
    for (size_t k = 0; k < outs.size(); ++k) {
      int64_t off = 0;
      for (size_t j = 0; j < extra; ++j) off += idx[j] * dims[j].stride[k + 1];
      ptrs[k] = ptrs[k] + off * int64_t(outs[k].element_size());
    }
    launch(in_base + in_off * int64_t(in.element_size()), ptrs, v);
    size_t j = extra;
    while (j > 0) {
      --j;
      if (++idx[j] < dims[j].size) break;
      idx[j] = 0;
      if (j == 0) return;
    }
    if (extra == 0) return;
  }
}

namespace {

std::vector<bool> reduced_mask(const Tensor& in, at::IntArrayRef dims) {
  std::vector<bool> mask(size_t(in.dim()), dims.empty());
  for (int64_t d : dims) mask[size_t(at::maybe_wrap_dim(d, in.dim()))] = true;
  return mask;
}

void push_view(std::vector<mtia::Arg>& args, const ReduceView& v) {
  for (int64_t s : v.sizes) args.emplace_back(s);
  for (int64_t s : v.in_strides) args.emplace_back(s);
  for (const auto& st : v.out_strides) {
    for (int64_t s : st) args.emplace_back(s);
  }
}

mtia::Grid reduce_grid(const ReduceView& v) {
  return grid_for(v.sizes[0] * v.sizes[1] * v.sizes[2] * v.sizes[3], 32768);
}

uint8_t code(ScalarType t) {
  auto c = kernel_dtype(t);
  TORCH_INTERNAL_ASSERT(c.has_value(), "no kernel dtype for ", t);
  return *c;
}

const char* kernel_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
    case ReduceOp::kAmax:
      return "amax";
    case ReduceOp::kAmin:
      return "amin";
    case ReduceOp::kVar:
      return "var";
  }
  return "";
}

// One launch sequence of the single-stage path.
void reduce_once(ReduceOp op, const Tensor& out_k, const Tensor& in, const std::vector<bool>& mask,
                 int64_t correction) {
  const uint8_t in_dt = code(in.scalar_type());
  const uint8_t out_dt = code(out_k.scalar_type());
  reduce_views(
      in, {out_k}, mask,
      [&](mtia::DevicePtr src, const std::vector<mtia::DevicePtr>& dst, const ReduceView& v) {
        std::vector<mtia::Arg> args{dst[0], src};
        if (op == ReduceOp::kSum) {
          args.push_back(mtia::Arg::dtype(in_dt));
          args.push_back(mtia::Arg::dtype(out_dt));
        } else {
          args.push_back(mtia::Arg::dtype(in_dt));
          if (op == ReduceOp::kVar) args.emplace_back(correction);
        }
        args.emplace_back(int64_t{3});
        push_view(args, v);
        launch(kernel_name(op), reduce_grid(v), args);
      });
}

// PEs' worth of partial results for a large full reduction, or 0 when not worth it.
int64_t two_stage_parts(ReduceOp op, const Tensor& in, const Tensor& out) {
  constexpr int64_t kMinElements = 1 << 16;
  if (op == ReduceOp::kVar || out.numel() != 1 || in.numel() < kMinElements ||
      !in.is_contiguous()) {
    return 0;
  }
  for (int64_t p : {64, 32, 16, 8}) {
    if (in.numel() % p == 0) return p;
  }
  return 0;
}

}  // namespace

void reduce_into(ReduceOp op, const Tensor& out, const Tensor& in_arg, at::IntArrayRef dims,
                 bool keepdim, int64_t correction) {
  if (out.numel() == 0) return;
  // The kernels write: sum any floating dtype for floating input, int32/int64 for integers;
  // the others the input's dtype. Anything else goes through a temporary and a cast.
  const ScalarType in_dt = in_arg.scalar_type();
  const ScalarType out_dt = out.scalar_type();
  const bool writable = op == ReduceOp::kSum
                            ? (is_kernel_float(in_dt) ? is_kernel_float(out_dt)
                                                      : (out_dt == at::kInt || out_dt == at::kLong))
                            : out_dt == in_dt;
  if (!writable) {
    const ScalarType tmp_dt =
        op == ReduceOp::kSum ? (is_kernel_float(in_dt) ? at::kFloat : at::kLong) : in_dt;
    Tensor tmp = empty_device(out.sizes(), tmp_dt);
    reduce_into(op, tmp, in_arg, dims, keepdim, correction);
    write_into(out, tmp);
    return;
  }
  const Tensor in = in_arg.dim() == 0 ? in_arg.reshape({1}) : in_arg;
  std::vector<bool> mask = reduced_mask(in, dims);
  int64_t R = 1;
  for (int64_t d = 0; d < in.dim(); ++d) {
    if (mask[size_t(d)]) R *= in.size(d);
  }
  if (R == 0) {
    // Nothing to reduce: sum 0, mean and var NaN (amax/amin reject this in their meta).
    launch_fill(out,
                scalar_bits(op == ReduceOp::kSum ? 0.0 : std::numeric_limits<double>::quiet_NaN(),
                            out.scalar_type()));
    return;
  }
  const bool keep = keepdim || in_arg.dim() == 0;
  const Tensor out_k =
      keepdim_view(in_arg.dim() == 0 ? out.reshape({1}) : out, in.dim(), mask, keep);

  if (const int64_t parts = two_stage_parts(op, in, out); parts > 0) {
    const Tensor x = in.view({parts, in.numel() / parts});
    const ScalarType dt = in.scalar_type();
    if (op == ReduceOp::kAmax || op == ReduceOp::kAmin) {
      Tensor partial = empty_device({parts, 1}, dt);
      reduce_once(op, partial, x, {false, true}, 0);
      reduce_once(op, out_k.reshape({1, 1}), partial, {true, true}, 0);
      return;
    }
    // sum and mean: partial sums in float32 (int64 for integers), then one more sum.
    const ScalarType acc = is_kernel_float(dt) ? at::kFloat : at::kLong;
    Tensor partial = empty_device({parts, 1}, acc);
    reduce_once(ReduceOp::kSum, partial, x, {false, true}, 0);
    Tensor total = empty_device({1, 1}, acc);
    reduce_once(ReduceOp::kSum, total, partial, {true, true}, 0);
    if (op == ReduceOp::kMean) {
      apply_binary_scalar(MTIA_PE_SE_DIV, total, total, double(in.numel()), acc);
    }
    write_into(out_k.reshape({1, 1}), total);
    return;
  }
  reduce_once(op, out_k, in, mask, correction);
}

void reduce_with_indices(bool max, const Tensor& values, const Tensor& indices,
                         const Tensor& in_arg, int64_t dim, bool keepdim) {
  if (values.numel() == 0) return;
  const Tensor in = in_arg.dim() == 0 ? in_arg.reshape({1}) : in_arg;
  dim = at::maybe_wrap_dim(dim, in.dim());
  std::vector<bool> mask(size_t(in.dim()), false);
  mask[size_t(dim)] = true;
  const bool keep = keepdim || in_arg.dim() == 0;
  const Tensor v =
      keepdim_view(in_arg.dim() == 0 ? values.reshape({1}) : values, in.dim(), mask, keep);
  const Tensor i =
      keepdim_view(in_arg.dim() == 0 ? indices.reshape({1}) : indices, in.dim(), mask, keep);
  const uint8_t dt = code(in.scalar_type());
  reduce_views(
      in, {v, i}, mask,
      [&](mtia::DevicePtr src, const std::vector<mtia::DevicePtr>& dst, const ReduceView& view) {
        std::vector<mtia::Arg> args{dst[0], dst[1], src, mtia::Arg::dtype(dt), int64_t{3}};
        push_view(args, view);
        launch(max ? "max_dim" : "min_dim", reduce_grid(view), args);
      });
}

namespace {

std::vector<int64_t> dim_list(at::OptionalIntArrayRef dim) {
  return dim.has_value() ? dim->vec() : std::vector<int64_t>{};
}

Tensor& sum_out(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                c10::optional<ScalarType> dtype, Tensor& out) {
  OutOf<at::meta::structured_sum_dim_IntList> m(out);
  m.meta(self, dim, keepdim, dtype);
  const ScalarType in_dt = self.scalar_type();
  const ScalarType out_dt = out.scalar_type();
  // Summing in the output's kind: floats for a floating output, integers otherwise.
  const bool ok = kernel_supports(in_dt) &&
                  (is_kernel_float(out_dt) || out_dt == at::kInt || out_dt == at::kLong);
  if (!ok) {
    return run_on_cpu<ATEN_OP2(sum, IntList_out)>(dtype_reason(ok ? out_dt : in_dt), self, dim,
                                                  keepdim, dtype, out);
  }
  const Tensor in =
      is_kernel_float(out_dt) != is_kernel_float(in_dt) ? as_dtype(self, out_dt) : self;
  reduce_into(ReduceOp::kSum, out, in, dim_list(dim), keepdim);
  return out;
}

Tensor& mean_out(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                 c10::optional<ScalarType> dtype, Tensor& out) {
  OutOf<at::meta::structured_mean_dim> m(out);
  m.meta(self, dim, keepdim, dtype);
  const ScalarType dt = out.scalar_type();
  if (!is_kernel_float(dt) || !kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(mean, out)>(dtype_reason(dt), self, dim, keepdim, dtype, out);
  }
  reduce_into(ReduceOp::kMean, out, as_dtype(self, dt), dim_list(dim), keepdim);
  return out;
}

Tensor& amax_out(const Tensor& self, at::IntArrayRef dim, bool keepdim, Tensor& out) {
  OutOf<at::meta::structured_amax> m(out);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type()) || out.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(amax, out)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                           out);
  }
  reduce_into(ReduceOp::kAmax, out, self, dim, keepdim);
  return out;
}

Tensor& amin_out(const Tensor& self, at::IntArrayRef dim, bool keepdim, Tensor& out) {
  OutOf<at::meta::structured_amin> m(out);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type()) || out.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(amin, out)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                           out);
  }
  reduce_into(ReduceOp::kAmin, out, self, dim, keepdim);
  return out;
}

// Full max/min: the amax/amin of everything, as a 0-dim tensor.
Tensor max_all(const Tensor& self) {
  TORCH_CHECK(self.numel() > 0,
              "max(): Expected reduction dim to be specified for input.numel() == 0. Specify "
              "the reduction dim with the 'dim' argument.");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(max)>(dtype_reason(self.scalar_type()), self);
  }
  Tensor out = empty_device({}, self.scalar_type());
  reduce_into(ReduceOp::kAmax, out, self, {}, false);
  return out;
}

Tensor min_all(const Tensor& self) {
  TORCH_CHECK(self.numel() > 0,
              "min(): Expected reduction dim to be specified for input.numel() == 0. Specify "
              "the reduction dim with the 'dim' argument.");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(min)>(dtype_reason(self.scalar_type()), self);
  }
  Tensor out = empty_device({}, self.scalar_type());
  reduce_into(ReduceOp::kAmin, out, self, {}, false);
  return out;
}

std::tuple<Tensor&, Tensor&> max_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                         Tensor& values, Tensor& indices) {
  OutOf<at::meta::structured_max_dim, 2> m(values, indices);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(max, dim_max)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                              values, indices);
  }
  reduce_with_indices(true, values, indices, self, dim, keepdim);
  return {values, indices};
}

std::tuple<Tensor&, Tensor&> min_dim_out(const Tensor& self, int64_t dim, bool keepdim,
                                         Tensor& values, Tensor& indices) {
  OutOf<at::meta::structured_min_dim, 2> m(values, indices);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(min, dim_min)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                              values, indices);
  }
  reduce_with_indices(false, values, indices, self, dim, keepdim);
  return {values, indices};
}

// argmax/argmin: the indices of max_dim/min_dim; with dim=None over the flattened tensor.
template <class Meta, class Op>
Tensor& arg_out(bool max, const Tensor& self, c10::optional<int64_t> dim, bool keepdim,
                Tensor& out) {
  OutOf<Meta> m(out);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<Op>(dtype_reason(self.scalar_type()), self, dim, keepdim, out);
  }
  if (out.numel() == 0) return out;
  if (dim.has_value()) {
    Tensor values = empty_device(out.sizes(), self.scalar_type());
    reduce_with_indices(max, values, out, self, *dim, keepdim);
  } else {
    const Tensor flat = self.reshape({-1});
    Tensor values = empty_device({}, self.scalar_type());
    reduce_with_indices(max, values, out.view(at::IntArrayRef{}), flat, 0, false);
  }
  return out;
}

Tensor& argmax_out(const Tensor& self, c10::optional<int64_t> dim, bool keepdim, Tensor& out) {
  return arg_out<at::meta::structured_argmax, ATEN_OP2(argmax, out)>(true, self, dim, keepdim, out);
}
Tensor& argmin_out(const Tensor& self, c10::optional<int64_t> dim, bool keepdim, Tensor& out) {
  return arg_out<at::meta::structured_argmin, ATEN_OP2(argmin, out)>(false, self, dim, keepdim,
                                                                     out);
}

// all/any: (x != 0) reduced with amin/amax over bool.
void all_any(bool all, const Tensor& self, at::IntArrayRef dims, bool keepdim, const Tensor& out) {
  Tensor b = self;
  if (self.scalar_type() != at::kBool) {
    b = empty_like_dtype(self, at::kBool);
    apply_binary(MTIA_PE_SE_NE, b, self, at::scalar_tensor(0, self.scalar_type()),
                 self.scalar_type(), at::kBool);
  }
  if (self.numel() == 0) {
    launch_fill(out, all ? 1 : 0);
    return;
  }
  reduce_into(all ? ReduceOp::kAmin : ReduceOp::kAmax, out, b, dims, keepdim);
}

bool all_any_ok(const Tensor& self, const Tensor& out) {
  return kernel_supports(self.scalar_type()) && out.scalar_type() == at::kBool;
}

Tensor& all_all_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_all> m(out);
  m.meta(self);
  if (!all_any_ok(self, out)) {
    return run_on_cpu<ATEN_OP2(all, all_out)>(dtype_reason(self.scalar_type()), self, out);
  }
  all_any(true, self, {}, false, out);
  return out;
}

Tensor& all_dim_out(const Tensor& self, int64_t dim, bool keepdim, Tensor& out) {
  OutOf<at::meta::structured_all_dim> m(out);
  m.meta(self, dim, keepdim);
  if (!all_any_ok(self, out)) {
    return run_on_cpu<ATEN_OP2(all, out)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                          out);
  }
  const int64_t d = self.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, self.dim());
  all_any(true, self, {d}, keepdim, out);
  return out;
}

Tensor& any_all_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_any> m(out);
  m.meta(self);
  if (!all_any_ok(self, out)) {
    return run_on_cpu<ATEN_OP2(any, all_out)>(dtype_reason(self.scalar_type()), self, out);
  }
  all_any(false, self, {}, false, out);
  return out;
}

Tensor& any_dim_out(const Tensor& self, int64_t dim, bool keepdim, Tensor& out) {
  OutOf<at::meta::structured_any_dim> m(out);
  m.meta(self, dim, keepdim);
  if (!all_any_ok(self, out)) {
    return run_on_cpu<ATEN_OP2(any, out)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                          out);
  }
  const int64_t d = self.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, self.dim());
  all_any(false, self, {d}, keepdim, out);
  return out;
}

// aminmax: amin and amax, over one dim or everything.
std::tuple<Tensor&, Tensor&> aminmax_out(const Tensor& self, c10::optional<int64_t> dim,
                                         bool keepdim, Tensor& min, Tensor& max) {
  OutOf<at::meta::structured_aminmax, 2> m(min, max);
  m.meta(self, dim, keepdim);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(aminmax, out)>(dtype_reason(self.scalar_type()), self, dim, keepdim,
                                              min, max);
  }
  std::vector<int64_t> dims;
  if (dim.has_value() && self.dim() > 0) dims.push_back(at::maybe_wrap_dim(*dim, self.dim()));
  // Without a dim, keepdim keeps every dimension as size 1.
  reduce_into(ReduceOp::kAmin, min, self, dims, keepdim);
  reduce_into(ReduceOp::kAmax, max, self, dims, keepdim);
  return {min, max};
}

// var is not structured: sizes by hand.
std::vector<int64_t> reduced_sizes(const Tensor& self, at::IntArrayRef dims, bool keepdim) {
  const std::vector<bool> mask = reduced_mask(self, dims);
  std::vector<int64_t> sizes;
  for (int64_t d = 0; d < self.dim(); ++d) {
    if (!mask[size_t(d)]) {
      sizes.push_back(self.size(d));
    } else if (keepdim) {
      sizes.push_back(1);
    }
  }
  return sizes;
}

Tensor& var_out(const Tensor& self, at::OptionalIntArrayRef dim,
                const std::optional<at::Scalar>& correction, bool keepdim, Tensor& out) {
  check_device(self, "var");
  if (!is_kernel_float(self.scalar_type()) || out.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(var, correction_out)>(dtype_reason(self.scalar_type()), self, dim,
                                                     correction, keepdim, out);
  }
  // The kernel divides by N - correction for a whole correction. A fractional one (or one
  // beyond N) takes the population variance (correction 0) times N / max(N - c, 0), as
  // PyTorch's own kernels scale it.
  const double c = correction.has_value() ? correction->toDouble() : 1.0;
  const std::vector<int64_t> dims = dim_list(dim);
  at::native::resize_output(out, reduced_sizes(self, dims, keepdim));
  const int64_t n = out.numel() == 0 ? 0 : self.numel() / out.numel();
  if (c == std::floor(c) && c >= 0 && c < double(n)) {
    reduce_into(ReduceOp::kVar, out, self, dims, keepdim, int64_t(c));
    return out;
  }
  reduce_into(ReduceOp::kVar, out, self, dims, keepdim, 0);
  const double divisor = std::max(double(n) - c, 0.0);
  if (out.numel() > 0) out.mul_(double(n) / divisor);
  return out;
}

Tensor var(const Tensor& self, at::OptionalIntArrayRef dim,
           const std::optional<at::Scalar>& correction, bool keepdim) {
  Tensor out = empty_device({0}, self.scalar_type());
  return var_out(self, dim, correction, keepdim, out);
}

Tensor& std_out(const Tensor& self, at::OptionalIntArrayRef dim,
                const std::optional<at::Scalar>& correction, bool keepdim, Tensor& out) {
  var_out(self, dim, correction, keepdim, out);
  if (out.device().type() == kDeviceType && is_kernel_float(out.scalar_type())) {
    apply_unary(MTIA_PE_SE_SQRT, out, out, out.scalar_type(), out.scalar_type());
  } else {
    out.sqrt_();
  }
  return out;
}

Tensor std(const Tensor& self, at::OptionalIntArrayRef dim,
           const std::optional<at::Scalar>& correction, bool keepdim) {
  Tensor out = empty_device({0}, self.scalar_type());
  return std_out(self, dim, correction, keepdim, out);
}

}  // namespace

#define MTIA_OPS_reduce
#include "register_ops.inc"

}  // namespace mtia::torch_backend
