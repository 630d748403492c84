// Softmax, layer norm and the negative log-likelihood loss: _softmax and _log_softmax on their
// kernels along any dimension, native_layer_norm kept whole on the layer_norm kernel, their
// backward passes composed from device kernels (elementwise and reductions) in float32, and
// nll_loss and nll_loss2d, forward and backward, on the nll_loss kernels; mse_loss and its
// backward composed from elementwise kernels and a sum.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/mse_loss_backward_ops.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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

void launch_softmax(const char* kernel, const Tensor& out, const Tensor& in, int64_t dim) {
  if (in.numel() == 0) return;
  if (in.dim() == 0) {
    launch_softmax(kernel, out.reshape({1}), in.reshape({1}), 0);
    return;
  }
  std::vector<bool> along(size_t(in.dim()), false);
  along[size_t(at::maybe_wrap_dim(dim, in.dim()))] = true;
  const uint8_t dt = *kernel_dtype(in.scalar_type());
  reduce_views(
      in, {out}, along,
      [&](mtia::DevicePtr src, const std::vector<mtia::DevicePtr>& dst, const ReduceView& v) {
        std::vector<mtia::Arg> args{dst[0], src, mtia::Arg::dtype(dt), int64_t{3}};
        for (int64_t s : v.sizes) args.emplace_back(s);
        for (int64_t s : v.in_strides) args.emplace_back(s);
        for (int64_t s : v.out_strides[0]) args.emplace_back(s);
        launch(kernel, grid_for(v.sizes[0] * v.sizes[1] * v.sizes[2] * v.sizes[3], 32768), args);
      });
}

Tensor& softmax_out(const Tensor& self, int64_t dim, bool half_to_float, Tensor& out) {
  OutOf<at::meta::structured__softmax> m(out);
  m.meta(self, dim, half_to_float);
  if (!is_kernel_float(self.scalar_type()) || half_to_float ||
      out.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(_softmax, out)>(dtype_reason(self.scalar_type()), self, dim,
                                               half_to_float, out);
  }
  launch_softmax("softmax", out, self, dim);
  return out;
}

Tensor& log_softmax_out(const Tensor& self, int64_t dim, bool half_to_float, Tensor& out) {
  OutOf<at::meta::structured__log_softmax> m(out);
  m.meta(self, dim, half_to_float);
  if (!is_kernel_float(self.scalar_type()) || half_to_float ||
      out.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(_log_softmax, out)>(dtype_reason(self.scalar_type()), self, dim,
                                                   half_to_float, out);
  }
  launch_softmax("log_softmax", out, self, dim);
  return out;
}

// Sum along `dim` with keepdim, in float32.
Tensor sum_keepdim(const Tensor& x, int64_t dim) {
  std::vector<int64_t> sizes = x.sizes().vec();
  if (!sizes.empty()) sizes[size_t(dim)] = 1;
  Tensor s = empty_device(sizes, at::kFloat);
  reduce_into(ReduceOp::kSum, s, x, {dim}, true);
  return s;
}

// grad_input = y * (g - sum(g * y, dim))
Tensor& softmax_backward_out(const Tensor& grad, const Tensor& y, int64_t dim,
                             ScalarType input_dtype, Tensor& grad_input) {
  OutOf<at::meta::structured__softmax_backward_data> m(grad_input);
  m.meta(grad, y, dim, input_dtype);
  if (!is_kernel_float(grad.scalar_type()) || !is_kernel_float(y.scalar_type()) ||
      !is_kernel_float(grad_input.scalar_type())) {
    return run_on_cpu<ATEN_OP2(_softmax_backward_data, out)>(dtype_reason(grad.scalar_type()), grad,
                                                             y, dim, input_dtype, grad_input);
  }
  if (grad.numel() == 0) return grad_input;
  const int64_t d = grad.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, grad.dim());
  using namespace pw;
  const Tensor g = as_dtype(grad, at::kFloat);
  Tensor t = empty_device(grad.sizes(), at::kFloat);
  apply_binary(MTIA_PE_SE_MUL, t, g, y, at::kFloat, at::kFloat);
  const Tensor s = sum_keepdim(t, d);
  apply_pointwise(grad_input, {g, s, y}, at::kFloat,
                  {{MTIA_PE_SE_SUB, kT0, {kA, kB}}, {MTIA_PE_SE_MUL, kOut, {kT0, kC}}});
  return grad_input;
}

// grad_input = g - exp(y) * sum(g, dim)
Tensor& log_softmax_backward_out(const Tensor& grad, const Tensor& y, int64_t dim,
                                 ScalarType input_dtype, Tensor& grad_input) {
  OutOf<at::meta::structured__log_softmax_backward_data> m(grad_input);
  m.meta(grad, y, dim, input_dtype);
  if (!is_kernel_float(grad.scalar_type()) || !is_kernel_float(y.scalar_type()) ||
      !is_kernel_float(grad_input.scalar_type())) {
    return run_on_cpu<ATEN_OP2(_log_softmax_backward_data, out)>(
        dtype_reason(grad.scalar_type()), grad, y, dim, input_dtype, grad_input);
  }
  if (grad.numel() == 0) return grad_input;
  const int64_t d = grad.dim() == 0 ? 0 : at::maybe_wrap_dim(dim, grad.dim());
  using namespace pw;
  const Tensor g = as_dtype(grad, at::kFloat);
  const Tensor s = sum_keepdim(g, d);
  apply_pointwise(grad_input, {g, y, s}, at::kFloat,
                  {{MTIA_PE_SE_EXP, kT0, {kB}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kC}},
                   {MTIA_PE_SE_SUB, kOut, {kA, kT0}}});
  return grad_input;
}

// The statistics' shape: the input's leading dims, then 1 per normalized dim.
std::vector<int64_t> stat_shape(const Tensor& input, size_t normalized_dims) {
  std::vector<int64_t> shape;
  const size_t axis = size_t(input.dim()) - normalized_dims;
  for (size_t i = 0; i < size_t(input.dim()); ++i) shape.push_back(i < axis ? input.size(i) : 1);
  return shape;
}

std::tuple<Tensor, Tensor, Tensor> native_layer_norm(const Tensor& input,
                                                     at::IntArrayRef normalized_shape,
                                                     const c10::optional<Tensor>& weight_opt,
                                                     const c10::optional<Tensor>& bias_opt,
                                                     double eps) {
  const Tensor weight = weight_opt.value_or(Tensor());
  const Tensor bias = bias_opt.value_or(Tensor());
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const ScalarType dt = input.scalar_type();
  const bool ok = is_kernel_float(dt) && (!weight.defined() || weight.scalar_type() == dt) &&
                  (!bias.defined() || bias.scalar_type() == dt) && N > 0;
  if (!ok) {
    return run_on_cpu<ATEN_OP(native_layer_norm)>(dtype_reason(dt), input, normalized_shape,
                                                  weight_opt, bias_opt, eps);
  }
  const std::vector<int64_t> stats = stat_shape(input, normalized_shape.size());
  Tensor out =
      at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  Tensor mean = empty_device({M}, at::kFloat);
  Tensor rstd = empty_device({M}, at::kFloat);
  if (M > 0) {
    const Tensor x = input.reshape({M, N});  // a view when the layout allows, else a copy
    const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
    const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
    const int64_t flags = (w.defined() ? 1 : 0) | (b.defined() ? 2 : 0) | 4;
    const mtia::DevicePtr xp = tensor_address(x);
    launch("layer_norm", grid_for(M * N, 32768),
           {tensor_address(out), tensor_address(mean), tensor_address(rstd), xp,
            w.defined() ? tensor_address(w) : xp, b.defined() ? tensor_address(b) : xp,
            dtype_arg(dt), flags, float(eps), M, N, x.stride(0), x.stride(1), N, int64_t{1}});
  }
  // PyTorch's CPU kernel returns the statistics in the input's dtype.
  return {out, as_dtype(mean, dt).view(stats), as_dtype(rstd, dt).view(stats)};
}

// dX = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dY * weight, xhat = (X - mean) * rstd;
// dW = sum over rows of dY * xhat; dB = sum over rows of dY. All in float32 on [M, N] views.
std::tuple<Tensor, Tensor, Tensor> native_layer_norm_backward(
    const Tensor& grad_out, const Tensor& input, at::IntArrayRef normalized_shape,
    const Tensor& mean, const Tensor& rstd, const c10::optional<Tensor>& weight_opt,
    const c10::optional<Tensor>& bias_opt, std::array<bool, 3> mask) {
  const Tensor weight = weight_opt.value_or(Tensor());
  const Tensor bias = bias_opt.value_or(Tensor());
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalized_shape, weight, bias);
  const ScalarType dt = input.scalar_type();
  if (!is_kernel_float(dt) || !is_kernel_float(grad_out.scalar_type()) ||
      !is_kernel_float(mean.scalar_type()) ||
      (weight.defined() && !is_kernel_float(weight.scalar_type()))) {
    return run_on_cpu<ATEN_OP(native_layer_norm_backward)>(dtype_reason(dt), grad_out, input,
                                                           normalized_shape, mean, rstd, weight_opt,
                                                           bias_opt, mask);
  }
  const auto f32 = at::kFloat;
  Tensor dX, dW, dB;
  // Like the CPU kernel: a parameter's gradient only when it was asked for and exists.
  if (mask[0]) dX = at::empty(input.sizes(), input.options());
  if (mask[1] && weight.defined()) dW = at::empty(weight.sizes(), weight.options());
  if (mask[2] && bias.defined()) dB = at::empty(bias.sizes(), bias.options());
  if (M == 0 || N == 0) {
    for (Tensor* t : {&dW, &dB}) {
      if (t->defined()) launch_fill(*t, scalar_bits(0, t->scalar_type()));
    }
    return {dX, dW, dB};
  }
  const Tensor x = as_dtype(input.reshape({M, N}), f32);
  const Tensor dy = as_dtype(grad_out.reshape({M, N}), f32);
  const Tensor mu = as_dtype(mean.reshape({M, 1}), f32);
  const Tensor rs = as_dtype(rstd.reshape({M, 1}), f32);
  using namespace pw;
  Tensor xhat = empty_device({M, N}, f32);
  apply_pointwise(xhat, {x, mu, rs}, f32,
                  {{MTIA_PE_SE_SUB, kT0, {kA, kB}}, {MTIA_PE_SE_MUL, kOut, {kT0, kC}}});
  if (dB.defined()) {
    Tensor s = empty_device({N}, f32);
    reduce_into(ReduceOp::kSum, s, dy, {0}, false);
    write_into(dB.view({N}), s);
  }
  Tensor t = empty_device({M, N}, f32);
  if (dW.defined()) {
    apply_binary(MTIA_PE_SE_MUL, t, dy, xhat, f32, f32);
    Tensor s = empty_device({N}, f32);
    reduce_into(ReduceOp::kSum, s, t, {0}, false);
    write_into(dW.view({N}), s);
  }
  if (dX.defined()) {
    Tensor g = dy;
    if (weight.defined()) {
      g = empty_device({M, N}, f32);
      apply_binary(MTIA_PE_SE_MUL, g, dy, weight.reshape({N}), f32, f32);
    }
    Tensor a = empty_device({M, 1}, f32);
    reduce_into(ReduceOp::kMean, a, g, {1}, true);
    apply_binary(MTIA_PE_SE_MUL, t, g, xhat, f32, f32);
    Tensor b = empty_device({M, 1}, f32);
    reduce_into(ReduceOp::kMean, b, t, {1}, true);
    // ((g - mean(g)) - xhat * mean(g * xhat)) * rstd
    apply_pointwise(dX.view({M, N}), {g, a, xhat, b, rs}, f32,
                    {{MTIA_PE_SE_SUB, kT0, {kA, kB}},
                     {MTIA_PE_SE_MUL, kT1, {kC, kD}},
                     {MTIA_PE_SE_SUB, kT0, {kT0, kT1}},
                     {MTIA_PE_SE_MUL, kOut, {kT0, kE}}});
  }
  return {dX, dW, dB};
}

// --- nll_loss and nll_loss2d -----------------------------------------------------------------
// On the nll_loss and nll_loss_backward kernels (kernels/lib/loss.c) over [N, C, S] views: S = 1
// for nll_loss's [N, C] (or [C]) input, S = H * W for nll_loss2d's [N, C, H, W]. The kernel picks
// each position's element, weighs it and, for the mean and the sum, leaves one (loss, weight)
// pair of fp32 sums per PE, which one `sum` launch adds up.

// Kernel flags (kernels/lib/loss.c).
constexpr int64_t kNllWeight = 1, kNllPerPos = 2, kNllSums = 4, kNllCheck = 8, kNllMean = 16,
                  kNllBox = 32;
// Up to this many classes the kernels move whole [C, chunk] boxes and pick on the PE.
constexpr int64_t kNllBoxClasses = 256;
// Positions per PE: picking from a loaded box costs the core a few instructions a position; a
// single-element DMA per position (more classes) costs a DMA's latency, so those spread wider.
int64_t nll_positions_per_pe(int64_t C) {
  return C <= kNllBoxClasses ? 1024 : 64;
}
// The kernels' status for a target out of range (the index kernels' own).
constexpr int64_t kNllBadTarget = 16;

// A tensor's [N, C, S] (or [N, S]) view: its leading `lead` dims, then the rest folded.
struct NllView {
  Tensor t;  // the tensor itself, or a contiguous copy when its tail does not fold
  std::vector<int64_t> size, stride;
};

// The sizes and element strides of `t` with its dims from `from` on folded into one (sizes
// multiplied), or nullopt when they do not fold. A tensor of `from` dims gets a last dim of 1.
std::optional<NllView> fold_tail(const Tensor& t, int64_t from) {
  NllView v{t,
            {t.sizes().begin(), t.sizes().begin() + from},
            {t.strides().begin(), t.strides().begin() + from}};
  int64_t n = 1, st = 1;
  bool any = false;
  for (int64_t d = t.dim() - 1; d >= from; --d) {
    if (t.size(d) == 1) continue;
    if (!any) {
      st = t.stride(d);
      any = true;
    } else if (t.stride(d) != st * n) {
      return std::nullopt;
    }
    n *= t.size(d);
  }
  if (t.numel() == 0) {
    n = 1;
    for (int64_t d = from; d < t.dim(); ++d) n *= t.size(d);
  }
  v.size.push_back(n);
  v.stride.push_back(st);
  return v;
}

// `t` folded from dim `from` on, through a contiguous copy when its layout does not fold.
NllView folded(const Tensor& t, int64_t from) {
  if (auto v = fold_tail(t, from)) return *v;
  return *fold_tail(t.contiguous(), from);
}

bool nll_ok(const Tensor& self, const Tensor& target, const Tensor& weight) {
  return is_kernel_float(self.scalar_type()) && target.scalar_type() == at::kLong &&
         (!weight.defined() || weight.scalar_type() == self.scalar_type());
}

// The first target outside [0, C) that is not ignore_index, as PyTorch's CPU kernels word it.
std::string bad_target_message(const Tensor& target, int64_t C, int64_t ignore_index) {
  const Tensor h = target.cpu().contiguous();
  const int64_t* p = h.data_ptr<int64_t>();
  for (int64_t i = 0; i < h.numel(); ++i) {
    if (p[i] != ignore_index && (p[i] < 0 || p[i] >= C)) {
      return c10::str("Target ", p[i], " is out of bounds.");
    }
  }
  return "a target is out of bounds.";
}

// With S = 1 (the plain loss) the kernels would take one position a chunk: the positions go along
// s instead, [N, ..., 1] becoming [1, ..., N].
NllView along_s(NllView v) {
  if (v.size.back() != 1 || v.size[0] <= 1) return v;
  v.size.back() = v.size[0];
  v.stride.back() = v.stride[0];
  v.size[0] = 1;
  v.stride[0] = 0;
  return v;
}

// Runs the nll_loss kernel on x ([N, C, S]) and t ([N, S]): per-position losses into `out`
// ([N, S] view) when it is given, else the fp32 (loss sum, weight sum) pair, returned. A target
// out of range raises (IndexError for nll_loss, RuntimeError for nll_loss2d, as on the CPU)
// unless the stream is capturing a graph, where the host cannot wait for the check.
Tensor nll_forward_kernel(const NllView& x_in, const NllView& t_in, const Tensor& weight,
                          int64_t ignore_index, const NllView* out_in, const Tensor& target,
                          bool index_error) {
  const NllView x = along_s(x_in), t = along_s(t_in);
  const std::optional<NllView> out_v =
      out_in ? std::optional<NllView>(along_s(*out_in)) : std::nullopt;
  const NllView* out = out_v ? &*out_v : nullptr;
  const int64_t N = x.size[0], C = x.size[1], S = x.size[2];
  const at::ScalarType dt = x.t.scalar_type();
  const mtia::Grid grid = grid_for(N * S, nll_positions_per_pe(C));
  const int64_t pes = int64_t(grid.rows) * grid.cols;
  Tensor sums = out ? Tensor() : empty_device({pes, 2}, at::kFloat);
  const bool check = !Runtime::get().device().is_capturing(current_stream());
  const int64_t flags = (weight.defined() ? kNllWeight : 0) | (out ? kNllPerPos : kNllSums) |
                        (check ? kNllCheck : 0) | (C <= kNllBoxClasses ? kNllBox : 0);
  const mtia::DevicePtr xp = tensor_address(x.t);
  launch("nll_loss", grid,
         {out ? tensor_address(out->t) : xp, out ? xp : tensor_address(sums), xp,
          tensor_address(t.t), weight.defined() ? tensor_address(weight) : xp, dtype_arg(dt), flags,
          ignore_index, N, C, S, x.stride[0], x.stride[1], x.stride[2], t.stride[0], t.stride[1],
          out ? out->stride[0] : int64_t{0}, out ? out->stride[1] : int64_t{0},
          weight.defined() ? weight.stride(0) : int64_t{0}});
  if (check) {
    try {
      Runtime::get().device().synchronize(current_stream());
    } catch (const mtia::Error& e) {
      const std::string what = e.what();
      const bool ours = what.find("kernel 'nll_loss'") != std::string::npos &&
                        what.find(c10::str("returned status ", kNllBadTarget)) != std::string::npos;
      if (ours && index_error)
        TORCH_CHECK_INDEX(false, bad_target_message(target, C, ignore_index));
      TORCH_CHECK(!ours, bad_target_message(target, C, ignore_index));
      rethrow(e, "running kernel 'nll_loss'");
    }
  }
  if (out) return Tensor();
  Tensor total = empty_device({2}, at::kFloat);
  reduce_into(ReduceOp::kSum, total, sums, {0}, false);
  return total;
}

// output (a scalar) and total_weight from the kernel's sums: the sum, or the mean (the sum over
// the picked weights; 0 / 0 when nothing was picked, as on the CPU).
void write_reduced(const Tensor& total, bool mean, const Tensor& output,
                   const Tensor& total_weight) {
  const Tensor loss = total.select(0, 0), tw = total.select(0, 1);
  write_into(total_weight, tw);
  if (mean) {
    Tensor m = empty_device({}, at::kFloat);
    apply_binary(MTIA_PE_SE_DIV, m, loss, tw, at::kFloat, at::kFloat);
    write_into(output, m);
  } else {
    write_into(output, loss);
  }
}

// Runs nll_loss_backward: `gi` is a view of grad_input (already sized) as [N, C, ...], `g`
// grad_output as [N, ...] when `per_pos`, else its one element.
void nll_backward_kernel(const Tensor& gi, const Tensor& g, bool per_pos, const NllView& t_in,
                         const Tensor& weight, int64_t reduction, int64_t ignore_index,
                         const Tensor& total_weight) {
  const at::ScalarType dt = gi.scalar_type();
  const int64_t C = gi.size(1);
  // With few classes the kernel writes every element of grad_input, else only the picked ones.
  const bool box = C <= kNllBoxClasses;
  if (!box || t_in.t.numel() == 0) launch_fill(gi, scalar_bits(0, dt));
  if (t_in.t.numel() == 0 || gi.numel() == 0) return;
  std::optional<NllView> gv = fold_tail(gi, 2);
  if (!gv) {
    gv = fold_tail(empty_device(gi.sizes(), dt), 2);
    if (!box) launch_fill(gv->t, scalar_bits(0, dt));
  }
  const NllView go = along_s(per_pos ? folded(g, 1) : NllView{g.reshape({}), {1, 1}, {0, 0}});
  const NllView t = along_s(t_in);
  const Tensor gi_t = gv->t;
  gv = along_s(*gv);
  const int64_t N = gv->size[0], S = gv->size[2];
  const int64_t flags = (weight.defined() ? kNllWeight : 0) | (per_pos ? kNllPerPos : 0) |
                        (reduction == at::Reduction::Mean ? kNllMean : 0) | (box ? kNllBox : 0);
  const mtia::DevicePtr gp = tensor_address(gv->t);
  launch(
      "nll_loss_backward", grid_for(N * S, nll_positions_per_pe(C)),
      {gp, tensor_address(go.t), tensor_address(t.t),
       weight.defined() ? tensor_address(weight) : gp, tensor_address(total_weight), dtype_arg(dt),
       flags, ignore_index, N, C, S, gv->stride[0], gv->stride[1], gv->stride[2], go.stride[0],
       go.stride[1], t.stride[0], t.stride[1], weight.defined() ? weight.stride(0) : int64_t{0}});
  if (!gi_t.is_same(gi)) write_into(gi, gi_t);
}

std::tuple<Tensor&, Tensor&> nll_loss_forward_out(const Tensor& self, const Tensor& target,
                                                  const c10::optional<Tensor>& weight_opt,
                                                  int64_t reduction, int64_t ignore_index,
                                                  Tensor& output, Tensor& total_weight) {
  OutOf<at::meta::structured_nll_loss_forward, 2> m(output, total_weight);
  const Tensor weight = weight_opt.value_or(Tensor());
  m.meta(self, target, weight.defined() ? at::OptionalTensorRef(weight) : at::OptionalTensorRef(),
         reduction, ignore_index);
  if (!nll_ok(self, target, weight) || self.dim() > 2) {
    return run_on_cpu<ATEN_OP2(nll_loss_forward, output)>(dtype_reason(self.scalar_type()), self,
                                                          target, weight_opt, reduction,
                                                          ignore_index, output, total_weight);
  }
  const at::ScalarType dt = self.scalar_type();
  const Tensor x2 = self.dim() == 1 ? self.reshape({1, -1}) : self;
  const Tensor t1 = target.reshape({-1});
  if (t1.numel() == 0) {
    // No position: an empty output, a zero sum, a mean of 0 / 0.
    if (output.numel() > 0) {
      launch_fill(output, scalar_bits(reduction == at::Reduction::Mean ? NAN : 0., dt));
    }
    launch_fill(total_weight, scalar_bits(0, dt));
    return {output, total_weight};
  }
  const NllView x = folded(x2.unsqueeze(2), 2);
  const NllView t = folded(t1.unsqueeze(1), 1);
  if (reduction == at::Reduction::None && self.dim() == 2) {
    std::optional<NllView> ov = fold_tail(output.unsqueeze(1), 1);
    nll_forward_kernel(x, t, weight, ignore_index, &*ov, target, true);
    launch_fill(total_weight, scalar_bits(0, dt));
    return {output, total_weight};
  }
  // The sum and the mean; a [C] input's loss without reduction is its one position's.
  const Tensor total = nll_forward_kernel(x, t, weight, ignore_index, nullptr, target, true);
  write_reduced(total, reduction == at::Reduction::Mean, output, total_weight);
  return {output, total_weight};
}

Tensor& nll_loss_backward_out(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                              const c10::optional<Tensor>& weight_opt, int64_t reduction,
                              int64_t ignore_index, const Tensor& total_weight,
                              Tensor& grad_input) {
  OutOf<at::meta::structured_nll_loss_backward> m(grad_input);
  const Tensor weight = weight_opt.value_or(Tensor());
  m.meta(grad_output, self, target,
         weight.defined() ? at::OptionalTensorRef(weight) : at::OptionalTensorRef(), reduction,
         ignore_index, total_weight);
  const at::ScalarType dt = self.scalar_type();
  if (!nll_ok(self, target, weight) || self.dim() > 2 || grad_output.scalar_type() != dt ||
      total_weight.scalar_type() != dt || grad_input.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(nll_loss_backward, grad_input)>(
        dtype_reason(self.scalar_type()), grad_output, self, target, weight_opt, reduction,
        ignore_index, total_weight, grad_input);
  }
  const bool per_pos = reduction == at::Reduction::None && self.dim() == 2;
  const NllView t = folded(target.reshape({-1}).unsqueeze(1), 1);
  const Tensor gi = (self.dim() == 1 ? grad_input.unsqueeze(0) : grad_input).unsqueeze(2);
  const Tensor g = per_pos ? grad_output.unsqueeze(1) : grad_output;
  nll_backward_kernel(gi, g, per_pos, t, weight, reduction, ignore_index, total_weight);
  return grad_input;
}

void check_nll2d_args(const Tensor& self, const Tensor& target, const Tensor& weight) {
  TORCH_CHECK(target.dim() == 3,
              "only batches of spatial targets supported (3D tensors) but got targets of "
              "dimension: ",
              target.dim());
  TORCH_CHECK(self.dim() == 4,
              "only batches of spatial inputs supported (4D tensors), but got input of "
              "dimension: ",
              self.dim());
  TORCH_CHECK(!weight.defined() || weight.numel() == self.size(1),
              "weight tensor should be defined either for all or no classes");
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) &&
                  self.size(3) == target.size(2),
              "input and target batch or spatial sizes don't match: target ", target.sizes(),
              ", input ", self.sizes());
}

std::tuple<Tensor&, Tensor&> nll_loss2d_forward_out(const Tensor& self, const Tensor& target,
                                                    const c10::optional<Tensor>& weight_opt,
                                                    int64_t reduction, int64_t ignore_index,
                                                    Tensor& output, Tensor& total_weight) {
  check_device(self, "nll_loss2d_forward");
  check_device(target, "nll_loss2d_forward");
  const Tensor weight = weight_opt.value_or(Tensor());
  if (weight.defined()) check_device(weight, "nll_loss2d_forward");
  check_nll2d_args(self, target, weight);
  if (!nll_ok(self, target, weight) || output.scalar_type() != self.scalar_type() ||
      total_weight.scalar_type() != self.scalar_type()) {
    return run_on_cpu<ATEN_OP2(nll_loss2d_forward, output)>(dtype_reason(self.scalar_type()), self,
                                                            target, weight_opt, reduction,
                                                            ignore_index, output, total_weight);
  }
  const at::ScalarType dt = self.scalar_type();
  const bool none = reduction == at::Reduction::None;
  at::native::resize_output(output, none ? at::IntArrayRef(target.sizes()) : at::IntArrayRef{});
  at::native::resize_output(total_weight, {});
  if (target.numel() == 0) {
    // Nothing picked: an empty output, a zero sum, a mean of 0 / 0.
    if (!none) {
      launch_fill(output, scalar_bits(reduction == at::Reduction::Mean ? NAN : 0., dt));
    }
    launch_fill(total_weight, scalar_bits(0, dt));
    return {output, total_weight};
  }
  const NllView x = folded(self, 2);
  const NllView t = folded(target, 1);
  if (none) {
    std::optional<NllView> ov = fold_tail(output, 1);
    if (!ov) ov = fold_tail(empty_device(target.sizes(), dt), 1);
    nll_forward_kernel(x, t, weight, ignore_index, &*ov, target, false);
    if (!ov->t.is_same(output)) write_into(output, ov->t);
    launch_fill(total_weight, scalar_bits(0, dt));
    return {output, total_weight};
  }
  const Tensor total = nll_forward_kernel(x, t, weight, ignore_index, nullptr, target, false);
  write_reduced(total, reduction == at::Reduction::Mean, output, total_weight);
  return {output, total_weight};
}

std::tuple<Tensor, Tensor> nll_loss2d_forward(const Tensor& self, const Tensor& target,
                                              const c10::optional<Tensor>& weight_opt,
                                              int64_t reduction, int64_t ignore_index) {
  Tensor output = at::empty({0}, self.options());
  Tensor total_weight = at::empty({}, self.options());
  nll_loss2d_forward_out(self, target, weight_opt, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

Tensor& nll_loss2d_backward_out(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                                const c10::optional<Tensor>& weight_opt, int64_t reduction,
                                int64_t ignore_index, const Tensor& total_weight,
                                Tensor& grad_input) {
  check_device(grad_output, "nll_loss2d_backward");
  check_device(self, "nll_loss2d_backward");
  check_device(target, "nll_loss2d_backward");
  const Tensor weight = weight_opt.value_or(Tensor());
  if (weight.defined()) check_device(weight, "nll_loss2d_backward");
  check_nll2d_args(self, target, weight);
  TORCH_CHECK(total_weight.numel() == 1,
              "expected total_weight to be a single element tensor, got: ", total_weight.sizes(),
              " (", total_weight.numel(), " elements)");
  const bool none = reduction == at::Reduction::None;
  if (none) {
    TORCH_CHECK(grad_output.dim() == 3 && grad_output.sizes() == target.sizes(),
                "grad_output must have the size of target ", target.sizes(), ", got ",
                grad_output.sizes());
  } else {
    TORCH_CHECK(grad_output.numel() == 1,
                "Expected a single element grad_output tensor, but got: ", grad_output.sizes());
  }
  const at::ScalarType dt = self.scalar_type();
  if (!nll_ok(self, target, weight) || grad_output.scalar_type() != dt ||
      total_weight.scalar_type() != dt || grad_input.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(nll_loss2d_backward, grad_input)>(
        dtype_reason(dt), grad_output, self, target, weight_opt, reduction, ignore_index,
        total_weight, grad_input);
  }
  at::native::resize_output(grad_input, self.sizes());
  nll_backward_kernel(grad_input, grad_output, none, folded(target, 1), weight, reduction,
                      ignore_index, total_weight);
  return grad_input;
}

Tensor nll_loss2d_backward(const Tensor& grad_output, const Tensor& self, const Tensor& target,
                           const c10::optional<Tensor>& weight_opt, int64_t reduction,
                           int64_t ignore_index, const Tensor& total_weight) {
  Tensor grad_input = at::empty(self.sizes(), self.options());
  nll_loss2d_backward_out(grad_output, self, target, weight_opt, reduction, ignore_index,
                          total_weight, grad_input);
  return grad_input;
}

// --- mse_loss --------------------------------------------------------------------------------

// Not through the structured meta: it sizes the output to the broadcast shape before
// shrinking it to a scalar, which would warn about resizing the caller's out tensor.
Tensor& mse_loss_out(const Tensor& self, const Tensor& target, int64_t reduction, Tensor& out) {
  check_device(self, "mse_loss");
  check_device(target, "mse_loss");
  const ScalarType dt = at::result_type(self, target);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(mse_loss, out)>(dtype_reason(dt), self, target, reduction, out);
  }
  TORCH_CHECK(out.scalar_type() == dt, "Expected out tensor to have dtype ", dt, ", but got ",
              out.scalar_type(), " instead");
  const std::vector<int64_t> sizes = at::infer_size(self.sizes(), target.sizes());
  const ScalarType acc = acc_dtype(dt);
  Tensor d = empty_device(sizes, acc);
  apply_binary(MTIA_PE_SE_SUB, d, self, target, acc, acc);
  apply_binary(MTIA_PE_SE_MUL, d, d, d, acc, acc);
  if (reduction == at::Reduction::None) {
    at::native::resize_output(out, sizes);
    write_into(out, d);
  } else {
    at::native::resize_output(out, {});
    reduce_into(reduction == at::Reduction::Mean ? ReduceOp::kMean : ReduceOp::kSum, out, d, {},
                false);
  }
  return out;
}

Tensor mse_loss(const Tensor& self, const Tensor& target, int64_t reduction) {
  Tensor out = empty_device({0}, at::result_type(self, target));
  return mse_loss_out(self, target, reduction, out);
}

Tensor& mse_loss_backward_out(const Tensor& grad, const Tensor& self, const Tensor& target,
                              int64_t reduction, Tensor& grad_input) {
  check_device(grad, "mse_loss_backward", true);
  check_device(self, "mse_loss_backward");
  check_device(target, "mse_loss_backward");
  const ScalarType dt = at::result_type(self, target);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(mse_loss_backward, grad_input)>(dtype_reason(dt), grad, self, target,
                                                               reduction, grad_input);
  }
  // norm * (self - target) * grad, norm = 2 (sum) or 2 / numel (mean)
  const double norm = reduction == at::Reduction::Mean ? 2.0 / double(self.numel()) : 2.0;
  at::native::resize_output(grad_input, self.sizes());
  const ScalarType acc = acc_dtype(dt);
  Tensor d = empty_device(self.sizes(), acc);
  apply_binary(MTIA_PE_SE_SUB, d, self, target, acc, acc);
  apply_binary_scalar(MTIA_PE_SE_MUL, d, d, norm, acc);
  apply_binary(MTIA_PE_SE_MUL, d, d, grad, acc, acc);
  write_into(grad_input, d);
  return grad_input;
}

Tensor mse_loss_backward(const Tensor& grad, const Tensor& self, const Tensor& target,
                         int64_t reduction) {
  Tensor out = empty_device({0}, self.scalar_type());
  return mse_loss_backward_out(grad, self, target, reduction, out);
}

}  // namespace

#define MTIA_OPS_nn
#include "register_ops.inc"

}  // namespace mtia::torch_backend
