// 2-D pooling on the pool2d and pool2d_backward kernels (kernels/lib/pool.c): max with indices,
// average (ceil_mode, count_include_pad, divisor_override), adaptive average and adaptive max,
// forward and backward, for 3-D (C, H, W) and 4-D (N, C, H, W) inputs in any layout
// (channels_last included). Structured ops run PyTorch's meta functions first, which check
// the arguments and size (and lay out) the outputs; the kernels take any strides.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <torch/library.h>

#include <array>
#include <optional>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

// Kernel op codes and flags (kernels/lib/pool.c).
constexpr int64_t kPoolMax = 1, kPoolAvg = 2;
constexpr int64_t kPoolAdaptive = 1, kPoolCountPad = 2;

struct Window {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

// One or two values of an int[2] argument (PyTorch's meta functions have checked the count);
// `fallback` when the list is empty (stride defaults to the kernel size).
std::array<int64_t, 2> pair_of(at::IntArrayRef v, std::array<int64_t, 2> fallback) {
  if (v.empty()) return fallback;
  return {v[0], v.size() == 1 ? v[0] : v[1]};
}

Window window_of(at::IntArrayRef kernel, at::IntArrayRef stride, at::IntArrayRef padding,
                 at::IntArrayRef dilation) {
  Window w;
  const auto k = pair_of(kernel, {1, 1});
  const auto s = pair_of(stride, k);
  const auto p = pair_of(padding, {0, 0});
  const auto d = pair_of(dilation, {1, 1});
  w.kh = k[0];
  w.kw = k[1];
  w.sh = s[0];
  w.sw = s[1];
  w.ph = p[0];
  w.pw = p[1];
  w.dh = d[0];
  w.dw = d[1];
  return w;
}

// A 3-D (C, H, W) or 4-D tensor's sizes and strides as N, C, H, W.
struct Nchw {
  std::array<int64_t, 4> size{1, 1, 1, 1}, stride{0, 0, 0, 0};
};
Nchw nchw(const Tensor& t) {
  Nchw v;
  const int64_t off = 4 - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) {
    v.size[size_t(d + off)] = t.size(d);
    v.stride[size_t(d + off)] = t.stride(d);
  }
  return v;
}

// Launches pool2d (forward: `a` the output, `b` the input) or pool2d_backward (`a`
// grad_input, `b` grad_output); `input` is the pooled input (its sizes), `out` the pooled
// output (its sizes). `indices` only for max.
void launch_pool(bool backward, int64_t op, int64_t flags, int64_t divisor, const Window& w,
                 const Tensor& a, const Tensor& b, const Tensor& indices, const Tensor& input,
                 const Tensor& out) {
  if (input.numel() == 0 || out.numel() == 0) {
    // No output: nothing to do. No window (an empty output of a non-empty input): the
    // gradient is zero.
    if (backward && a.numel() > 0) launch_fill(a, scalar_bits(0, a.scalar_type()));
    return;
  }
  const Nchw in = nchw(input), o = nchw(out), av = nchw(a), bv = nchw(b);
  const Nchw iv = indices.defined() ? nchw(indices) : av;
  const mtia::DevicePtr ap = tensor_address(a);
  std::vector<mtia::Arg> args{ap,
                              tensor_address(b),
                              indices.defined() ? tensor_address(indices) : ap,
                              dtype_arg(a.scalar_type()),
                              op,
                              flags,
                              in.size[0],
                              in.size[1],
                              in.size[2],
                              in.size[3],
                              o.size[2],
                              o.size[3],
                              w.kh,
                              w.kw,
                              w.sh,
                              w.sw,
                              w.ph,
                              w.pw,
                              w.dh,
                              w.dw,
                              divisor};
  // Forward: in, out, idx strides; backward: grad_in, grad_out, idx.
  const Nchw& first = backward ? av : bv;
  const Nchw& second = backward ? bv : av;
  for (int64_t s : first.stride) args.emplace_back(s);
  for (int64_t s : second.stride) args.emplace_back(s);
  for (int64_t s : iv.stride) args.emplace_back(s);
  launch(backward ? "pool2d_backward" : "pool2d",
         grid_for(backward ? input.numel() : out.numel(), 8192), args);
}

bool pool_dtype_ok(const Tensor& t) {
  return is_kernel_float(t.scalar_type());
}

// --- max_pool2d_with_indices -----------------------------------------------------------------

std::tuple<Tensor&, Tensor&> max_pool2d_with_indices_out(const Tensor& self,
                                                         at::IntArrayRef kernel_size,
                                                         at::IntArrayRef stride,
                                                         at::IntArrayRef padding,
                                                         at::IntArrayRef dilation, bool ceil_mode,
                                                         Tensor& out, Tensor& indices) {
  check_device(self, "max_pool2d_with_indices");
  OutOf<at::meta::structured_max_pool2d_with_indices, 2> m(out, indices);
  m.meta(self, kernel_size, stride, padding, dilation, ceil_mode);
  // Integers are compared on the device too (their padding is the type's minimum).
  if (!pool_dtype_ok(self) && !is_kernel_int(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(max_pool2d_with_indices, out)>(dtype_reason(self.scalar_type()),
                                                              self, kernel_size, stride, padding,
                                                              dilation, ceil_mode, out, indices);
  }
  launch_pool(false, kPoolMax, 0, 0, window_of(kernel_size, stride, padding, dilation), out, self,
              indices, self, out);
  return {out, indices};
}

Tensor& max_pool2d_with_indices_backward_out(const Tensor& grad_output, const Tensor& self,
                                             at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                             at::IntArrayRef padding, at::IntArrayRef dilation,
                                             bool ceil_mode, const Tensor& indices,
                                             Tensor& grad_input) {
  check_device(grad_output, "max_pool2d_with_indices_backward");
  check_device(indices, "max_pool2d_with_indices_backward");
  OutOf<at::meta::structured_max_pool2d_with_indices_backward> m(grad_input);
  m.meta(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices);
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "max_pool2d_with_indices_backward: indices must be int64, got ",
              indices.scalar_type());
  TORCH_CHECK(indices.sizes() == grad_output.sizes(),
              "max_pool2d_with_indices_backward: indices of size ", indices.sizes(),
              " do not match grad_output of size ", grad_output.sizes());
  if (!pool_dtype_ok(grad_output) || grad_output.scalar_type() != grad_input.scalar_type()) {
    return run_on_cpu<ATEN_OP2(max_pool2d_with_indices_backward, grad_input)>(
        dtype_reason(grad_output.scalar_type()), grad_output, self, kernel_size, stride, padding,
        dilation, ceil_mode, indices, grad_input);
  }
  launch_pool(true, kPoolMax, 0, 0, window_of(kernel_size, stride, padding, dilation), grad_input,
              grad_output, indices, self, grad_output);
  return grad_input;
}

// --- avg_pool2d ------------------------------------------------------------------------------

Window avg_window(at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding) {
  return window_of(kernel_size, stride, padding, {});
}

int64_t avg_flags(bool count_include_pad) {
  return count_include_pad ? kPoolCountPad : 0;
}

Tensor& avg_pool2d_out(const Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                       at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                       std::optional<int64_t> divisor_override, Tensor& out) {
  check_device(self, "avg_pool2d");
  OutOf<at::meta::structured_avg_pool2d> m(out);
  m.meta(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override);
  if (!pool_dtype_ok(self)) {
    return run_on_cpu<ATEN_OP2(avg_pool2d, out)>(dtype_reason(self.scalar_type()), self,
                                                 kernel_size, stride, padding, ceil_mode,
                                                 count_include_pad, divisor_override, out);
  }
  launch_pool(false, kPoolAvg, avg_flags(count_include_pad), divisor_override.value_or(0),
              avg_window(kernel_size, stride, padding), out, self, Tensor(), self, out);
  return out;
}

Tensor& avg_pool2d_backward_out(const Tensor& grad_output, const Tensor& self,
                                at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                                std::optional<int64_t> divisor_override, Tensor& grad_input) {
  check_device(grad_output, "avg_pool2d_backward");
  OutOf<at::meta::structured_avg_pool2d_backward> m(grad_input);
  m.meta(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
         divisor_override);
  if (!pool_dtype_ok(grad_output) || grad_output.scalar_type() != grad_input.scalar_type()) {
    return run_on_cpu<ATEN_OP2(avg_pool2d_backward, grad_input)>(
        dtype_reason(grad_output.scalar_type()), grad_output, self, kernel_size, stride, padding,
        ceil_mode, count_include_pad, divisor_override, grad_input);
  }
  launch_pool(true, kPoolAvg, avg_flags(count_include_pad), divisor_override.value_or(0),
              avg_window(kernel_size, stride, padding), grad_input, grad_output, Tensor(), self,
              grad_output);
  return grad_input;
}

// --- adaptive pooling ------------------------------------------------------------------------

void check_adaptive_input(const Tensor& self, const char* op) {
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, op, "(): Expected 3D or 4D tensor, but got ",
              self.sizes());
  for (int64_t i = 1; i < self.dim(); ++i) {
    TORCH_CHECK(self.size(i) > 0, op,
                "(): Expected input to have non-zero size for non-batch dimensions, but input "
                "has sizes ",
                self.sizes(), " with dimension ", i, " being empty");
  }
}

// The output of an adaptive pooling: the input's leading dims, then output_size, laid out
// like the input (channels_last stays channels_last).
Tensor adaptive_output(const Tensor& self, int64_t oh, int64_t ow, at::ScalarType dtype) {
  std::vector<int64_t> sizes(self.sizes().begin(), self.sizes().end() - 2);
  sizes.push_back(oh);
  sizes.push_back(ow);
  return at::empty(sizes, self.options().dtype(dtype).memory_format(self.suggest_memory_format()));
}

Tensor adaptive_avg_pool2d(const Tensor& self, c10::SymIntArrayRef output_size_sym) {
  check_device(self, "adaptive_avg_pool2d");
  TORCH_CHECK(output_size_sym.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  const int64_t oh = output_size_sym[0].guard_int(__FILE__, __LINE__);
  const int64_t ow = output_size_sym[1].guard_int(__FILE__, __LINE__);
  TORCH_CHECK(oh >= 0 && ow >= 0,
              "adaptive_avg_pool2d: elements of output_size must be greater than or equal to 0 "
              "but received {",
              oh, ", ", ow, "}");
  check_adaptive_input(self, "adaptive_avg_pool2d");
  if (!pool_dtype_ok(self)) {
    const std::array<int64_t, 2> size{oh, ow};
    return run_on_cpu<ATEN_OP(_adaptive_avg_pool2d)>(dtype_reason(self.scalar_type()), self,
                                                     at::IntArrayRef(size));
  }
  Tensor out = adaptive_output(self, oh, ow, self.scalar_type());
  launch_pool(false, kPoolAvg, kPoolAdaptive, 0, Window{}, out, self, Tensor(), self, out);
  return out;
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_output, const Tensor& self) {
  check_device(grad_output, "adaptive_avg_pool2d_backward");
  check_device(self, "adaptive_avg_pool2d_backward");
  check_adaptive_input(self, "adaptive_avg_pool2d_backward");
  TORCH_CHECK(grad_output.dim() == self.dim(),
              "adaptive_avg_pool2d_backward(): grad_output and input must have the same number "
              "of dimensions, got ",
              grad_output.sizes(), " and ", self.sizes());
  for (int64_t i = 0; i < self.dim() - 2; ++i) {
    TORCH_CHECK(grad_output.size(i) == self.size(i),
                "adaptive_avg_pool2d_backward(): grad_output of size ", grad_output.sizes(),
                " does not match input of size ", self.sizes());
  }
  TORCH_CHECK(self.scalar_type() == grad_output.scalar_type(), "expected dtype ", self.dtype(),
              " for `grad_output` but got dtype ", grad_output.dtype());
  if (!pool_dtype_ok(grad_output)) {
    return run_on_cpu<ATEN_OP(_adaptive_avg_pool2d_backward)>(
        dtype_reason(grad_output.scalar_type()), grad_output, self);
  }
  Tensor grad_input =
      at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  launch_pool(true, kPoolAvg, kPoolAdaptive, 0, Window{}, grad_input, grad_output, Tensor(), self,
              grad_output);
  return grad_input;
}

std::tuple<Tensor&, Tensor&> adaptive_max_pool2d_out(const Tensor& self,
                                                     at::IntArrayRef output_size, Tensor& out,
                                                     Tensor& indices) {
  check_device(self, "adaptive_max_pool2d");
  OutOf<at::meta::structured_adaptive_max_pool2d, 2> m(out, indices);
  m.meta(self, output_size);
  if (!pool_dtype_ok(self)) {
    return run_on_cpu<ATEN_OP2(adaptive_max_pool2d, out)>(dtype_reason(self.scalar_type()), self,
                                                          output_size, out, indices);
  }
  launch_pool(false, kPoolMax, kPoolAdaptive, 0, Window{}, out, self, indices, self, out);
  return {out, indices};
}

Tensor& adaptive_max_pool2d_backward_out(const Tensor& grad_output, const Tensor& self,
                                         const Tensor& indices, Tensor& grad_input) {
  check_device(grad_output, "adaptive_max_pool2d_backward");
  check_device(indices, "adaptive_max_pool2d_backward");
  OutOf<at::meta::structured_adaptive_max_pool2d_backward> m(grad_input);
  m.meta(grad_output, self, indices);
  TORCH_CHECK(indices.scalar_type() == at::kLong,
              "adaptive_max_pool2d_backward: indices must be int64, got ", indices.scalar_type());
  TORCH_CHECK(indices.sizes() == grad_output.sizes(),
              "adaptive_max_pool2d_backward: indices of size ", indices.sizes(),
              " do not match grad_output of size ", grad_output.sizes());
  if (!pool_dtype_ok(grad_output) || grad_output.scalar_type() != grad_input.scalar_type()) {
    return run_on_cpu<ATEN_OP2(adaptive_max_pool2d_backward, grad_input)>(
        dtype_reason(grad_output.scalar_type()), grad_output, self, indices, grad_input);
  }
  launch_pool(true, kPoolMax, kPoolAdaptive, 0, Window{}, grad_input, grad_output, indices, self,
              grad_output);
  return grad_input;
}

}  // namespace

#define MTIA_OPS_pool
#include "register_ops.inc"

}  // namespace mtia::torch_backend
