// Convolutions: convolution_overrideable and convolution_backward_overrideable, the two ops
// PyTorch calls for a device of its own (conv1d/2d/3d, their transposed forms, groups,
// dilation, padding; autograd's ConvolutionBackward0 reaches the second through
// convolution_backward).
//
// Everything is the im2col kernel and one bmm on the DPE. Spatial dims are normalised to 3
// (conv1d and conv2d get size-1 leading ones). A convolution gathers its input's columns
// [G, Cg*K, N*L] and multiplies each group's weights [Cout/G, Cg*K] by them; the input
// gradient is the convolution of the (stride-dilated) output gradient with the kernel read
// backwards (im2col's negative dilation), with the weights transposed per group; the weight
// gradient is the output gradient [G, Cout/G, N*L] times the transposed columns. A transposed
// convolution's forward is the input gradient of the matching convolution, and its backward
// the convolution and its weight gradient with input and output swapped. Products accumulate
// in float32 and are rounded once into the result, the bias added before that rounding. Large
// batches go in chunks, so that a column matrix stays within a budget.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "mtia/settings/settings.h"
#include "on_device.h"
#include "ops.h"

namespace mtia::torch_backend {

namespace {

using at::IntArrayRef;
using at::ScalarType;
using at::Tensor;

using Dims3 = std::array<int64_t, 3>;

// Output elements per PE of a product, as for the other matrix products.
constexpr int64_t kMatmulItemsPerPe = 8192;

// The most bytes one column matrix may take before the batch is split into chunks (each a
// separate im2col and product): $MTIA_EMU_CONV_COLUMN_BYTES, else 256 MiB.
int64_t column_budget() {
  const std::optional<std::string> e = mtia::settings::read("MTIA_EMU_CONV_COLUMN_BYTES");
  const int64_t v = e ? std::atoll(e->c_str()) : 0;
  return v > 0 ? v : int64_t{256} << 20;
}

// Samples per chunk when one sample's columns take `per_sample` bytes: at least one.
int64_t batch_chunk(int64_t n, int64_t per_sample) {
  return std::clamp<int64_t>(column_budget() / std::max<int64_t>(per_sample, 1), 1,
                             std::max<int64_t>(n, 1));
}

// The parameters of one convolution, spatial dims normalised to 3 (leading ones padded).
struct ConvParams {
  int64_t spatial = 0;  // the caller's spatial dims: 1, 2 or 3
  Dims3 stride{1, 1, 1}, padding{0, 0, 0}, dilation{1, 1, 1}, output_padding{0, 0, 0};
  int64_t groups = 1;
  bool transposed = false;
};

// A parameter list of `spatial` entries (or one, repeated), padded in front with `fill`.
Dims3 dims3(IntArrayRef v, int64_t spatial, int64_t fill, const char* name) {
  TORCH_CHECK(int64_t(v.size()) == spatial || v.size() == 1, "convolution: expected ", name,
              " to have ", spatial, " elements (one per spatial dimension), but got ", v.size());
  Dims3 r{fill, fill, fill};
  for (int64_t i = 0; i < spatial; ++i) r[size_t(3 - spatial + i)] = v[v.size() == 1 ? 0 : i];
  return r;
}

// The tensor with size-1 spatial dims inserted after the channels, to 5 dims (a view).
Tensor to5d(const Tensor& t) {
  Tensor v = t;
  while (v.dim() < 5) v = v.unsqueeze(2);
  return v;
}

Dims3 spatial_sizes(const Tensor& t5) {
  return {t5.size(2), t5.size(3), t5.size(4)};
}

int64_t volume(const Dims3& d) {
  return d[0] * d[1] * d[2];
}

// Checks what every entry point shares and builds the parameters. `input` is the forward's
// input (a transposed convolution's too), `weight` its weight.
ConvParams check_params(const char* op, const Tensor& input, const Tensor& weight,
                        IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
                        bool transposed, IntArrayRef output_padding, int64_t groups) {
  TORCH_CHECK(input.defined() && weight.defined(), op, ": input and weight must be defined");
  TORCH_CHECK(weight.dim() >= 3 && weight.dim() <= 5, op,
              ": expected a weight of 3, 4 or 5 dimensions (1, 2 or 3 spatial), but got ",
              weight.dim());
  TORCH_CHECK(input.dim() == weight.dim(), op, ": expected a ", weight.dim(),
              "-dimensional input (batch, channels, spatial) for a ", weight.dim(),
              "-dimensional weight, but got an input of size ", input.sizes());
  ConvParams p;
  p.spatial = weight.dim() - 2;
  p.stride = dims3(stride, p.spatial, 1, "stride");
  p.padding = dims3(padding, p.spatial, 0, "padding");
  p.dilation = dims3(dilation, p.spatial, 1, "dilation");
  p.output_padding = dims3(output_padding, p.spatial, 0, "output_padding");
  p.groups = groups;
  p.transposed = transposed;
  for (int i = 0; i < 3; ++i) {
    TORCH_CHECK(p.stride[i] > 0, op, ": stride must be positive, got ", stride);
    TORCH_CHECK(p.padding[i] >= 0, op, ": padding must be non-negative, got ", padding);
    TORCH_CHECK(p.dilation[i] > 0, op, ": dilation must be positive, got ", dilation);
    TORCH_CHECK(p.output_padding[i] >= 0, op, ": output_padding must be non-negative, got ",
                output_padding);
    if (transposed) {
      TORCH_CHECK(p.output_padding[i] < p.stride[i] || p.output_padding[i] < p.dilation[i], op,
                  ": output padding must be smaller than either stride or dilation, got "
                  "output_padding ",
                  output_padding, ", stride ", stride, ", dilation ", dilation);
    } else {
      TORCH_CHECK(p.output_padding[i] == 0, op,
                  ": output_padding is only supported for transposed convolutions, got ",
                  output_padding);
    }
  }
  TORCH_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  const int64_t in_channels = input.size(1);
  if (transposed) {
    TORCH_CHECK(weight.size(0) % groups == 0, op, ": the weight's first dimension (",
                weight.size(0), ") must be divisible by groups (", groups, ")");
    TORCH_CHECK(in_channels == weight.size(0), op, ": expected an input with ", weight.size(0),
                " channels for weight of size ", weight.sizes(), ", but got ", in_channels);
  } else {
    TORCH_CHECK(weight.size(0) % groups == 0, op, ": the number of output channels (",
                weight.size(0), ") must be divisible by groups (", groups, ")");
    TORCH_CHECK(in_channels == weight.size(1) * groups, op, ": expected an input with ",
                weight.size(1) * groups, " channels (weight of size ", weight.sizes(), ", groups ",
                groups, "), but got ", in_channels);
  }
  for (int64_t d = 2; d < weight.dim(); ++d) {
    TORCH_CHECK(weight.size(d) > 0, op, ": the kernel size must be positive, got weight of size ",
                weight.sizes());
  }
  return p;
}

// The forward's output spatial sizes for an input of spatial sizes `in` (5-D weight `w5`).
Dims3 output_sizes(const char* op, const ConvParams& p, const Dims3& in, const Tensor& w5) {
  Dims3 out{};
  for (int i = 0; i < 3; ++i) {
    const int64_t k = w5.size(2 + i);
    const int64_t reach = p.dilation[i] * (k - 1) + 1;
    if (p.transposed) {
      out[i] = (in[i] - 1) * p.stride[i] - 2 * p.padding[i] + reach + p.output_padding[i];
    } else {
      const int64_t padded = in[i] + 2 * p.padding[i];
      TORCH_CHECK(padded >= reach, op,
                  ": the (padded) input is smaller than the kernel: spatial size ", in[i],
                  " with padding ", p.padding[i], " against a kernel reaching ", reach, " (size ",
                  k, ", dilation ", p.dilation[i], ")");
      out[i] = (padded - reach) / p.stride[i] + 1;
    }
    TORCH_CHECK(out[i] > 0, op, ": the computed output size ", out[i], " is too small (input ",
                "spatial size ", in[i], ")");
  }
  return out;
}

// An empty tensor of `sizes` (the caller's rank) in memory format `fmt` where it has that rank.
Tensor empty_in_format(IntArrayRef sizes, const Tensor& like, at::MemoryFormat fmt) {
  const bool fits = (fmt == at::MemoryFormat::ChannelsLast && sizes.size() == 4) ||
                    (fmt == at::MemoryFormat::ChannelsLast3d && sizes.size() == 5);
  return at::empty(sizes, like.options().memory_format(fits ? fmt : at::MemoryFormat::Contiguous));
}

// The column matrix of x5 [N, C, D, H, W] for kernel `k` and output `out`: contiguous
// [C*K, N*L] in x's dtype (im2col).
Tensor columns(const Tensor& x5, const Dims3& k, const Dims3& out, const Dims3& stride,
               const Dims3& origin, const Dims3& dil) {
  const int64_t N = x5.size(0), C = x5.size(1);
  const int64_t rows = C * volume(k), cols = N * volume(out);
  Tensor c = empty_device({rows, cols}, x5.scalar_type());
  if (c.numel() == 0) return c;
  if (x5.numel() == 0) {  // nothing to read: all padding
    launch_fill(c, 0);
    return c;
  }
  // One PE per 16 Ki elements, at most one per (row, batch) pair: the kernel's units.
  const int64_t units = rows * N;
  const int64_t per_pe = 16384;
  std::vector<mtia::Arg> args{tensor_address(c), tensor_address(x5), dtype_arg(x5.scalar_type()), N,
                              C};
  for (int64_t d = 2; d < 5; ++d) args.emplace_back(x5.size(d));
  for (int64_t d = 0; d < 5; ++d) args.emplace_back(x5.stride(d));
  for (const Dims3* v : {&k, &out, &stride, &origin, &dil}) {
    for (int64_t e : *v) args.emplace_back(e);
  }
  launch("im2col", grid_for(std::min(rows * cols, units * per_pe), per_pe), args);
  return c;
}

// c[G, M, P] (float32, contiguous) = a[G, M, R] @ b[G, R, P], a and b in one kernel dtype with
// any strides: one bmm launch, accumulated in float32.
Tensor grouped_product(const Tensor& a, const Tensor& b) {
  const int64_t G = a.size(0), M = a.size(1), R = a.size(2), P = b.size(2);
  Tensor c = empty_device({G, M, P}, at::kFloat);
  if (c.numel() == 0) return c;
  if (R == 0) {
    launch_fill(c, 0);
    return c;
  }
  launch("bmm", grid_for(G * M * P, kMatmulItemsPerPe),
         {tensor_address(c), tensor_address(a), tensor_address(b), dtype_arg(a.scalar_type()),
          mtia::Arg::dtype(MTIA_PE_DT_FP32), G, M, P, R, a.stride(0), a.stride(1), a.stride(2),
          b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1), c.stride(2)});
  return c;
}

// Writes a product [G, M, N*L] (float32) into out5 [N, G*M, spatial] (+ bias [G*M]), rounding
// once into out's dtype.
void write_result(const Tensor& out5, const Tensor& prod, const Tensor& bias) {
  const int64_t G = prod.size(0), M = prod.size(1), N = out5.size(0);
  const Tensor v = prod.view({G, M, N, out5.size(2), out5.size(3), out5.size(4)})
                       .permute({2, 0, 1, 3, 4, 5})
                       .reshape({N, G * M, out5.size(2), out5.size(3), out5.size(4)});
  if (bias.defined()) {
    apply_binary(MTIA_PE_SE_ADD, out5, v, bias.view({1, G * M, 1, 1, 1}), at::kFloat, at::kFloat);
  } else {
    write_into(out5, v);
  }
}

// out5 = conv(x5, w5) + bias: x5 [N, Cin, ...], w5 [Cout, Cin/G, K...], out5 [N, Cout, O...].
void conv_forward(const Tensor& out5, const Tensor& x5, const Tensor& w5, const Tensor& bias,
                  const ConvParams& p) {
  if (out5.numel() == 0) return;
  const int64_t G = p.groups, Cout = w5.size(0), Cg = w5.size(1), N = x5.size(0);
  const Dims3 k = spatial_sizes(w5), out = spatial_sizes(out5);
  const Dims3 origin{-p.padding[0], -p.padding[1], -p.padding[2]};
  const int64_t R = Cg * volume(k), L = volume(out);
  const Tensor wa = w5.reshape({G, Cout / G, R});
  const int64_t nb = batch_chunk(N, G * R * L * int64_t(x5.element_size()));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t len = std::min(nb, N - n0);
    const Tensor cols = columns(x5.narrow(0, n0, len), k, out, p.stride, origin, p.dilation);
    write_result(out5.narrow(0, n0, len), grouped_product(wa, cols.view({G, R, len * L})), bias);
  }
}

// out5 = the input gradient of conv(x, w5) for the output gradient g5 [N, Cout, O...]
// (+ bias): out5 [N, Cin, I...]. A transposed convolution's forward.
void conv_input_grad(const Tensor& out5, const Tensor& g5, const Tensor& w5, const Tensor& bias,
                     const ConvParams& p) {
  if (out5.numel() == 0) return;
  const int64_t G = p.groups, Cout = w5.size(0), Cg = w5.size(1), N = g5.size(0);
  const Dims3 k = spatial_sizes(w5), in = spatial_sizes(out5);
  const int64_t Kv = volume(k), L = volume(in);
  // Per group, the weights as [Cg, Cout/G * K]: (c, (co, k)) = w[g*Cout/G + co, c, k].
  const Tensor wt =
      w5.reshape({G, Cout / G, Cg, Kv}).permute({0, 2, 1, 3}).reshape({G, Cg, Cout / G * Kv});
  // Output position i and kernel offset k read the gradient at i + padding - k * dilation.
  const Dims3 neg_dil{-p.dilation[0], -p.dilation[1], -p.dilation[2]};
  const bool strided = p.stride[0] > 1 || p.stride[1] > 1 || p.stride[2] > 1;
  const int64_t nb = batch_chunk(N, Cout * Kv * L * int64_t(g5.element_size()));
  for (int64_t n0 = 0; n0 < N; n0 += nb) {
    const int64_t len = std::min(nb, N - n0);
    Tensor src = g5.narrow(0, n0, len);
    if (strided) {
      // With a stride, the gradient's elements sit `stride` apart, zeros between them.
      std::vector<int64_t> sizes{len, Cout};
      for (int i = 0; i < 3; ++i) sizes.push_back((g5.size(2 + i) - 1) * p.stride[i] + 1);
      Tensor spread = empty_device(sizes, g5.scalar_type());
      launch_fill(spread, 0);
      dma_copy(spread.slice(2, 0, sizes[2], p.stride[0])
                   .slice(3, 0, sizes[3], p.stride[1])
                   .slice(4, 0, sizes[4], p.stride[2]),
               src);
      src = spread;
    }
    const Tensor cols = columns(src, k, in, Dims3{1, 1, 1}, p.padding, neg_dil);
    write_result(out5.narrow(0, n0, len),
                 grouped_product(wt, cols.view({G, Cout / G * Kv, len * L})), bias);
  }
}

// The weight gradient of conv(x5, w) for the output gradient g5 [N, Cout, O...], written into
// gw5 [Cout, Cin/G, K...].
void conv_weight_grad(const Tensor& gw5, const Tensor& x5, const Tensor& g5, const ConvParams& p) {
  if (gw5.numel() == 0) return;
  const int64_t G = p.groups, Cout = gw5.size(0), Cg = gw5.size(1), N = x5.size(0);
  const Dims3 k = spatial_sizes(gw5), out = spatial_sizes(g5);
  const int64_t L = volume(out), R = Cg * volume(k);
  const Dims3 origin{-p.padding[0], -p.padding[1], -p.padding[2]};
  const int64_t nb = batch_chunk(N, G * R * L * int64_t(x5.element_size()));
  Tensor total;  // float32 [G, Cout/G, R], summed over the chunks
  for (int64_t n0 = 0; n0 < N || n0 == 0; n0 += nb) {
    const int64_t len = std::min(nb, N - n0);
    const Tensor cols =
        columns(x5.narrow(0, n0, len), k, out, p.stride, origin, p.dilation).view({G, R, len * L});
    // The gradient as [G, Cout/G, len*L] (a copy: N and the spatial dims are not adjacent).
    const Tensor ga = g5.narrow(0, n0, len).transpose(0, 1).reshape({G, Cout / G, len * L});
    const Tensor prod = grouped_product(ga, cols.transpose(1, 2));
    if (total.defined()) {
      apply_binary(MTIA_PE_SE_ADD, total, total, prod, at::kFloat, at::kFloat);
    } else {
      total = prod;
    }
  }
  write_into(gw5, total.view({Cout, Cg, gw5.size(2), gw5.size(3), gw5.size(4)}));
}

// Sum of g over every dim but the channels, into gb [C].
void bias_grad(const Tensor& gb, const Tensor& g) {
  if (gb.numel() == 0) return;
  if (g.numel() == 0) {
    launch_fill(gb, 0);
    return;
  }
  Tensor acc = empty_device({gb.size(0)}, at::kFloat);
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
  reduce_into(ReduceOp::kSum, acc, g, dims, false);
  write_into(gb, acc);
}

void check_device_dtypes(const char* op, const std::vector<const Tensor*>& ts) {
  const ScalarType dt = ts[0]->scalar_type();
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    TORCH_CHECK(t->device().type() == kDeviceType, op, ": expected every tensor on the ",
                "mtia device, but got one on ", t->device());
    TORCH_CHECK(t->scalar_type() == dt, op, ": expected every tensor to have dtype ", dt,
                " (the input's), but got ", t->scalar_type());
  }
}

Tensor convolution(const Tensor& input, const Tensor& weight, const c10::optional<Tensor>& bias_opt,
                   IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, bool transposed,
                   IntArrayRef output_padding, int64_t groups) {
  const char* op = "convolution";
  const Tensor bias = bias_opt.value_or(Tensor());
  const ConvParams p = check_params(op, input, weight, stride, padding, dilation, transposed,
                                    output_padding, groups);
  check_device_dtypes(op, {&input, &weight, &bias});
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  if (bias.defined()) {
    TORCH_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, op, ": expected a bias of size [",
                out_channels, "], but got ", bias.sizes());
  }
  if (!is_kernel_float(input.scalar_type())) {
    // The CPU has no convolution_overrideable: the CPU's own convolution.
    return run_on_cpu<ATEN_OP(convolution)>(dtype_reason(input.scalar_type()), input, weight,
                                            bias_opt, stride, padding, dilation, transposed,
                                            output_padding, groups);
  }
  const Tensor x5 = to5d(input), w5 = to5d(weight);
  const Dims3 out = output_sizes(op, p, spatial_sizes(x5), w5);
  std::vector<int64_t> sizes{input.size(0), out_channels};
  for (int64_t i = 3 - p.spatial; i < 3; ++i) sizes.push_back(out[size_t(i)]);
  Tensor output = empty_in_format(sizes, input, input.suggest_memory_format());
  const Tensor out5 = to5d(output);
  if (transposed) {
    conv_input_grad(out5, x5, w5, bias, p);
  } else {
    conv_forward(out5, x5, w5, bias, p);
  }
  return output;
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward(const Tensor& grad_output,
                                                        const Tensor& input, const Tensor& weight,
                                                        IntArrayRef stride, IntArrayRef padding,
                                                        IntArrayRef dilation, bool transposed,
                                                        IntArrayRef output_padding, int64_t groups,
                                                        std::array<bool, 3> mask) {
  const char* op = "convolution_backward";
  const ConvParams p = check_params(op, input, weight, stride, padding, dilation, transposed,
                                    output_padding, groups);
  check_device_dtypes(op, {&input, &weight, &grad_output});
  TORCH_CHECK(grad_output.dim() == input.dim(), op, ": expected grad_output of ", input.dim(),
              " dimensions, but got ", grad_output.sizes());
  const int64_t out_channels = transposed ? weight.size(1) * groups : weight.size(0);
  const Tensor w5 = to5d(weight), x5 = to5d(input), g5 = to5d(grad_output);
  const Dims3 out = output_sizes(op, p, spatial_sizes(x5), w5);
  TORCH_CHECK(grad_output.size(0) == input.size(0) && grad_output.size(1) == out_channels &&
                  spatial_sizes(g5) == out,
              op, ": grad_output of size ", grad_output.sizes(),
              " does not match the convolution's output for input ", input.sizes(), " and weight ",
              weight.sizes());
  if (!is_kernel_float(input.scalar_type())) {
    std::optional<std::vector<int64_t>> bias_sizes;
    if (mask[2]) bias_sizes = std::vector<int64_t>{out_channels};
    return run_on_cpu<ATEN_OP(convolution_backward)>(
        dtype_reason(input.scalar_type()), grad_output, input, weight,
        bias_sizes ? at::OptionalIntArrayRef(*bias_sizes) : at::OptionalIntArrayRef(), stride,
        padding, dilation, transposed, output_padding, groups, mask);
  }
  Tensor gi, gw, gb;
  if (mask[0]) {
    gi = empty_in_format(input.sizes(), input, input.suggest_memory_format());
    if (transposed) {
      conv_forward(to5d(gi), g5, w5, Tensor(), p);
    } else {
      conv_input_grad(to5d(gi), g5, w5, Tensor(), p);
    }
  }
  if (mask[1]) {
    gw = empty_in_format(weight.sizes(), weight, weight.suggest_memory_format());
    if (transposed) {
      conv_weight_grad(to5d(gw), g5, x5, p);  // input and output swap roles
    } else {
      conv_weight_grad(to5d(gw), x5, g5, p);
    }
  }
  if (mask[2]) {
    gb = at::empty({out_channels}, weight.options());
    bias_grad(gb, grad_output);
  }
  return {gi, gw, gb};
}

}  // namespace

#define MTIA_OPS_conv
#include "register_ops.inc"

}  // namespace mtia::torch_backend
