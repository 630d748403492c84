// Batch norm and group norm: per-channel statistics and gradient sums on the channel_moments
// and channel_grad_sums kernels (kernels/lib/norm.c), per-channel coefficients as small device
// ops, and one pointwise pass over the input, as PyTorch's CPU kernels compute them:
//   forward   y  = x * alpha[c] + beta[c], alpha = invstd * w, beta = b - mean * alpha
//   backward  dx = (dy - sum_dy / n - (x - mean) * dotp * invstd^2 / n) * invstd * w (training)
// Batch norm's channels are dim 1 over (N, spatial); group norm's "channels" are the (n, g)
// rows of the [N * G, C / G * HxW] view.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <array>
#include <limits>
#include <optional>
#include <tuple>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"

namespace mtia::torch_backend {

namespace {

using at::ScalarType;
using at::Tensor;

constexpr int64_t kSubMean = 1;  // channel_grad_sums: subtract the mean from x
constexpr auto f32 = at::kFloat;

Tensor opt(const std::optional<Tensor>& t) {
  return t.has_value() ? *t : Tensor();
}

// An [N, C, S] view of x (channels = dim 1, S = the dims after it), as the kernels take it:
// a spatial fold that needs a copy gets one; N folds into S where the layout allows.
struct ChannelView {
  Tensor t;  // keeps a copy alive
  int64_t n = 1, c = 1, s = 1;
  std::array<int64_t, 3> st{0, 0, 0};
};
ChannelView channel_view(const Tensor& x) {
  ChannelView v;
  const int64_t N = x.size(0), C = x.size(1);
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  v.t = x.reshape({N, C, S});  // a view when the spatial dims merge, else a device copy
  v.n = N;
  v.c = C;
  v.s = v.t.size(2);
  v.st = {v.t.stride(0), v.t.stride(1), v.t.stride(2)};
  if (v.s == 1) {
    v.s = N;
    v.n = 1;
    v.st[2] = v.st[0];
  } else if (v.n > 1 && v.st[0] == v.s * v.st[2]) {
    v.s *= N;
    v.n = 1;
  }
  return v;
}

// Per-channel mean and biased variance (fp32, [C]) of an [N, C, S] view with N * S > 0.
std::tuple<Tensor, Tensor> moments(const ChannelView& v) {
  Tensor mean = empty_device({v.c}, f32), var = empty_device({v.c}, f32);
  if (v.c == 0) return {mean, var};
  launch("channel_moments", grid_for(v.n * v.c * v.s, 32768),
         {tensor_address(mean), tensor_address(var), tensor_address(v.t),
          dtype_arg(v.t.scalar_type()), v.n, v.c, v.s, v.st[0], v.st[1], v.st[2]});
  return {mean, var};
}

// Per-channel sum(dy) and sum(dy * (x - mean)) (mean: fp32 [C], or undefined for 0).
std::tuple<Tensor, Tensor> grad_sums(const ChannelView& dy, const ChannelView& x,
                                     const Tensor& mean) {
  Tensor s1 = empty_device({dy.c}, f32), s2 = empty_device({dy.c}, f32);
  if (dy.c == 0) return {s1, s2};
  if (dy.n * dy.s == 0) {
    launch_fill(s1, 0);
    launch_fill(s2, 0);
    return {s1, s2};
  }
  // Both views must walk (n, s) alike; they do when both folded the same way.
  const bool same = dy.n == x.n && dy.s == x.s;
  const ChannelView xv = same ? x : channel_view(x.t.contiguous());
  const ChannelView dv = same ? dy : channel_view(dy.t.contiguous());
  const mtia::DevicePtr mp = mean.defined() ? tensor_address(mean) : tensor_address(s1);
  launch("channel_grad_sums", grid_for(dv.n * dv.c * dv.s, 32768),
         {tensor_address(s1), tensor_address(s2), tensor_address(dv.t), tensor_address(xv.t), mp,
          dtype_arg(dv.t.scalar_type()), mean.defined() ? kSubMean : 0, dv.n, dv.c, dv.s, dv.st[0],
          dv.st[1], dv.st[2], xv.st[0], xv.st[1], xv.st[2]});
  return {s1, s2};
}

// A [C] vector as [1, C, 1, ...] for broadcasting against a tensor of `rank` dims.
Tensor per_channel(const Tensor& v, int64_t rank) {
  std::vector<int64_t> shape(size_t(rank), 1);
  shape[1] = v.numel();
  return v.reshape(shape);
}

// out = x * alpha[c] + beta[c] over x's channels (dim 1), in fp32, rounded once.
void affine_pass(const Tensor& out, const Tensor& x, const Tensor& alpha, const Tensor& beta) {
  if (x.numel() == 0) return;
  using namespace pw;
  apply_pointwise(out, {x, per_channel(alpha, x.dim()), per_channel(beta, x.dim())}, f32,
                  {{MTIA_PE_SE_MUL, kT0, {kA, kB}}, {MTIA_PE_SE_ADD, kOut, {kT0, kC}}});
}

Tensor f32_of(const Tensor& t) {
  return as_dtype(t, f32);
}

// The dtype of the statistics and parameter gradients: the input's, or float32 when a
// float16/bfloat16 input comes with float32 parameters (PyTorch's mixed type).
ScalarType param_dtype(const Tensor& input, const Tensor& weight, const Tensor& running_mean) {
  const bool reduced = input.scalar_type() == at::kHalf || input.scalar_type() == at::kBFloat16;
  const Tensor& p = weight.defined() ? weight : running_mean;
  return reduced && p.defined() && p.scalar_type() == at::kFloat ? at::kFloat : input.scalar_type();
}

bool floats_ok(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts) {
    if (t->defined() && !is_kernel_float(t->scalar_type())) return false;
  }
  return true;
}

void check_bn_args(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                   const Tensor& running_mean, const Tensor& running_var) {
  check_device(input, op);
  TORCH_CHECK(input.dim() >= 2, op,
              ": expected an input with at least 2 dimensions (N, C, ...), "
              "got sizes ",
              input.sizes());
  const int64_t C = input.size(1);
  const std::pair<const char*, const Tensor*> params[] = {{"weight", &weight},
                                                          {"bias", &bias},
                                                          {"running_mean", &running_mean},
                                                          {"running_var", &running_var}};
  for (const auto& [name, t] : params) {
    if (!t->defined()) continue;
    check_device(*t, op);
    TORCH_CHECK(t->numel() == C, op, ": ", name, " should contain ", C, " elements not ",
                t->numel());
  }
}

// --- batch norm ------------------------------------------------------------------------------

// Training: statistics of the batch, running statistics updated in place (momentum, unbiased
// variance). Evaluation: the running statistics. Returns (out, save_mean, save_invstd).
std::tuple<Tensor, Tensor, Tensor> batch_norm_forward(const Tensor& input, const Tensor& weight,
                                                      const Tensor& bias,
                                                      const Tensor& running_mean,
                                                      const Tensor& running_var, bool training,
                                                      double momentum, double eps) {
  const int64_t C = input.size(1);
  const ScalarType pdt = param_dtype(input, weight, running_mean);
  Tensor out =
      at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  Tensor mean, invstd;
  if (training) {
    TORCH_CHECK(
        input.numel() > 0,
        "input tensor must have at least one element, but got input_sizes = ", input.sizes());
    const ChannelView v = channel_view(input);
    Tensor var;
    std::tie(mean, var) = moments(v);
    invstd = at::rsqrt(at::add(var, eps));
    const int64_t n = v.n * v.s;
    using namespace pw;
    if (running_mean.defined()) {
      apply_pointwise(running_mean, {f32_of(running_mean), mean}, f32,
                      {{MTIA_PE_SE_MUL, kT0, {kA, kImm}, scalar_bits(1 - momentum, f32)},
                       {MTIA_PE_SE_MUL, kT1, {kB, kImm}, scalar_bits(momentum, f32)},
                       {MTIA_PE_SE_ADD, kOut, {kT0, kT1}}});
    }
    if (running_var.defined()) {
      // The unbiased variance: var * n / (n - 1) (infinite for n == 1, as on the CPU).
      const double unbias =
          n > 1 ? double(n) / double(n - 1) : std::numeric_limits<double>::infinity();
      apply_pointwise(running_var, {f32_of(running_var), var}, f32,
                      {{MTIA_PE_SE_MUL, kT0, {kA, kImm}, scalar_bits(1 - momentum, f32)},
                       {MTIA_PE_SE_MUL, kT1, {kB, kImm}, scalar_bits(unbias, f32)},
                       {MTIA_PE_SE_MUL, kT1, {kT1, kImm}, scalar_bits(momentum, f32)},
                       {MTIA_PE_SE_ADD, kOut, {kT0, kT1}}});
    }
  } else {
    TORCH_CHECK(running_mean.defined() && running_var.defined(),
                "batch_norm: running_mean and running_var must be defined in evaluation mode");
    mean = f32_of(running_mean);
    invstd = at::rsqrt(at::add(f32_of(running_var), eps));
  }
  if (C > 0) {
    const Tensor alpha = weight.defined() ? at::mul(invstd, f32_of(weight)) : invstd;
    Tensor beta = at::mul(mean, alpha);
    beta = bias.defined() ? at::sub(f32_of(bias), beta) : at::neg(beta);
    affine_pass(out, input, alpha, beta);
  }
  if (!training) {
    return {out, at::empty({0}, input.options().dtype(pdt)),
            at::empty({0}, input.options().dtype(pdt))};
  }
  return {out, as_dtype(mean, pdt), as_dtype(invstd, pdt)};
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm(const Tensor& input,
                                                     const std::optional<Tensor>& weight_opt,
                                                     const std::optional<Tensor>& bias_opt,
                                                     const std::optional<Tensor>& running_mean_opt,
                                                     const std::optional<Tensor>& running_var_opt,
                                                     bool training, double momentum, double eps) {
  const Tensor w = opt(weight_opt), b = opt(bias_opt), rm = opt(running_mean_opt),
               rv = opt(running_var_opt);
  check_bn_args("native_batch_norm", input, w, b, rm, rv);
  if (!floats_ok({&input, &w, &b, &rm, &rv})) {
    return run_on_cpu<ATEN_OP(native_batch_norm)>(dtype_reason(input.scalar_type()), input,
                                                  weight_opt, bias_opt, running_mean_opt,
                                                  running_var_opt, training, momentum, eps);
  }
  return batch_norm_forward(input, w, b, rm, rv, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit(const Tensor& input,
                                                           const std::optional<Tensor>& weight_opt,
                                                           const std::optional<Tensor>& bias_opt,
                                                           Tensor& running_mean,
                                                           Tensor& running_var, bool training,
                                                           double momentum, double eps) {
  const Tensor w = opt(weight_opt), b = opt(bias_opt);
  check_bn_args("_native_batch_norm_legit", input, w, b, running_mean, running_var);
  if (!floats_ok({&input, &w, &b, &running_mean, &running_var})) {
    return run_on_cpu<ATEN_OP(_native_batch_norm_legit)>(dtype_reason(input.scalar_type()), input,
                                                         weight_opt, bias_opt, running_mean,
                                                         running_var, training, momentum, eps);
  }
  return batch_norm_forward(input, w, b, running_mean, running_var, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit_no_stats(
    const Tensor& input, const std::optional<Tensor>& weight_opt,
    const std::optional<Tensor>& bias_opt, bool training, double momentum, double eps) {
  const Tensor w = opt(weight_opt), b = opt(bias_opt);
  check_bn_args("_native_batch_norm_legit", input, w, b, Tensor(), Tensor());
  if (!floats_ok({&input, &w, &b})) {
    return run_on_cpu<ATEN_OP2(_native_batch_norm_legit, no_stats)>(
        dtype_reason(input.scalar_type()), input, weight_opt, bias_opt, training, momentum, eps);
  }
  return batch_norm_forward(input, w, b, Tensor(), Tensor(), training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> batch_norm_with_update(
    const Tensor& input, const std::optional<Tensor>& weight_opt,
    const std::optional<Tensor>& bias_opt, Tensor& running_mean, Tensor& running_var,
    double momentum, double eps) {
  const Tensor w = opt(weight_opt), b = opt(bias_opt);
  check_bn_args("_batch_norm_with_update", input, w, b, running_mean, running_var);
  if (!floats_ok({&input, &w, &b, &running_mean, &running_var})) {
    return run_on_cpu<ATEN_OP(_batch_norm_with_update)>(dtype_reason(input.scalar_type()), input,
                                                        weight_opt, bias_opt, running_mean,
                                                        running_var, momentum, eps);
  }
  auto [out, mean, invstd] =
      batch_norm_forward(input, w, b, running_mean, running_var, true, momentum, eps);
  // No backend-specific state: the reserve is empty, as on the CPU.
  return {out, mean, invstd, at::empty({0}, input.options().dtype(at::kByte))};
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward_impl(
    const char* op, const Tensor& grad_out, const Tensor& input, const Tensor& weight,
    const Tensor& running_mean, const Tensor& running_var, const Tensor& save_mean,
    const Tensor& save_invstd, bool train, double eps, std::array<bool, 3> mask) {
  check_bn_args(op, input, weight, Tensor(), running_mean, running_var);
  check_device(grad_out, op);
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": grad_out of size ", grad_out.sizes(),
              " does not match input of size ", input.sizes());
  const int64_t C = input.size(1);
  const ScalarType pdt = param_dtype(input, weight, running_mean);
  Tensor mean, invstd;
  if (train) {
    TORCH_CHECK(save_mean.defined() && save_invstd.defined() && save_mean.numel() == C &&
                    save_invstd.numel() == C,
                op, ": training needs save_mean and save_invstd of ", C, " elements");
    mean = f32_of(save_mean.reshape({C}));
    invstd = f32_of(save_invstd.reshape({C}));
  } else {
    TORCH_CHECK(running_mean.defined() && running_var.defined(), op,
                ": running_mean and running_var must be defined in evaluation mode");
    mean = f32_of(running_mean);
    invstd = at::rsqrt(at::add(f32_of(running_var), eps));
  }
  const ChannelView dv = channel_view(grad_out), xv = channel_view(input);
  auto [sum_dy, dotp] = grad_sums(dv, xv, mean);
  Tensor dx, dw, db;
  if (mask[0]) {
    dx = at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
    const Tensor s = weight.defined() ? at::mul(invstd, f32_of(weight)) : invstd;
    const int64_t n = dv.n * dv.s;
    if (input.numel() == 0) {
      // nothing to write
    } else if (train) {
      // dx = (dy - x * k - (sum_dy / n - mean * k)) * s, k = dotp * invstd^2 / n
      const Tensor k = at::div(at::mul(dotp, at::mul(invstd, invstd)), double(n));
      const Tensor q = at::sub(at::div(sum_dy, double(n)), at::mul(mean, k));
      using namespace pw;
      const int64_t r = input.dim();
      apply_pointwise(
          dx, {grad_out, input, per_channel(k, r), per_channel(q, r), per_channel(s, r)}, f32,
          {{MTIA_PE_SE_MUL, kT0, {kB, kC}},
           {MTIA_PE_SE_SUB, kT0, {kA, kT0}},
           {MTIA_PE_SE_SUB, kT0, {kT0, kD}},
           {MTIA_PE_SE_MUL, kOut, {kT0, kE}}});
    } else {
      apply_binary(MTIA_PE_SE_MUL, dx, grad_out, per_channel(s, input.dim()), f32, f32);
    }
  }
  if (mask[1]) {
    dw = at::empty({C}, input.options().dtype(pdt));
    write_into(dw, at::mul(dotp, invstd));
  }
  if (mask[2]) {
    db = at::empty({C}, input.options().dtype(pdt));
    write_into(db, sum_dy);
  }
  return {dx, dw, db};
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const std::optional<Tensor>& weight_opt,
    const std::optional<Tensor>& running_mean_opt, const std::optional<Tensor>& running_var_opt,
    const std::optional<Tensor>& save_mean_opt, const std::optional<Tensor>& save_invstd_opt,
    bool train, double eps, std::array<bool, 3> mask) {
  const Tensor w = opt(weight_opt), rm = opt(running_mean_opt), rv = opt(running_var_opt),
               sm = opt(save_mean_opt), si = opt(save_invstd_opt);
  if (!floats_ok({&grad_out, &input, &w, &rm, &rv, &sm, &si}) ||
      grad_out.scalar_type() != input.scalar_type()) {
    return run_on_cpu<ATEN_OP(native_batch_norm_backward)>(
        dtype_reason(input.scalar_type()), grad_out, input, weight_opt, running_mean_opt,
        running_var_opt, save_mean_opt, save_invstd_opt, train, eps, mask);
  }
  return batch_norm_backward_impl("native_batch_norm_backward", grad_out, input, w, rm, rv, sm, si,
                                  train, eps, mask);
}

std::tuple<Tensor, Tensor, Tensor> batch_norm_backward(
    const Tensor& grad_out, const Tensor& input, const Tensor& weight,
    const std::optional<Tensor>& running_mean_opt, const std::optional<Tensor>& running_var_opt,
    const std::optional<Tensor>& save_mean_opt, const std::optional<Tensor>& save_var_opt,
    bool update, double eps, std::array<bool, 3> mask, const Tensor& reserve) {
  const Tensor rm = opt(running_mean_opt), rv = opt(running_var_opt), sm = opt(save_mean_opt),
               si = opt(save_var_opt);
  if (!floats_ok({&grad_out, &input, &weight, &rm, &rv, &sm, &si}) ||
      grad_out.scalar_type() != input.scalar_type()) {
    return run_on_cpu<ATEN_OP(batch_norm_backward)>(
        dtype_reason(input.scalar_type()), grad_out, input, weight, running_mean_opt,
        running_var_opt, save_mean_opt, save_var_opt, update, eps, mask, reserve);
  }
  // save_var is the saved invstd (what _batch_norm_with_update returns), as on the CPU.
  return batch_norm_backward_impl("batch_norm_backward", grad_out, input, weight, rm, rv, sm, si,
                                  update, eps, mask);
}

// --- group norm ------------------------------------------------------------------------------

void check_gn_args(const char* op, const Tensor& input, const Tensor& weight, const Tensor& bias,
                   int64_t N, int64_t C, int64_t HxW, int64_t group) {
  check_device(input, op);
  TORCH_CHECK(group > 0, op, ": expected the number of groups to be greater than 0, got ", group);
  TORCH_CHECK(N >= 0 && C >= 0 && HxW >= 0, op, ": negative size N=", N, " C=", C, " HxW=", HxW);
  TORCH_CHECK(C % group == 0, op,
              ": expected the number of channels in the input to be divisible "
              "by num_groups, but got C=",
              C, " and num_groups=", group);
  TORCH_CHECK(input.numel() == N * C * HxW, op,
              ": expected an input of N * C * HxW = ", N * C * HxW, " elements, got sizes ",
              input.sizes());
  TORCH_CHECK(input.dim() >= 2 && input.size(0) == N && input.size(1) == C, op,
              ": expected input of sizes (N, C, ...) = (", N, ", ", C, ", ...), got ",
              input.sizes());
  for (const Tensor* t : {&weight, &bias}) {
    if (!t->defined()) continue;
    check_device(*t, op);
    TORCH_CHECK(t->numel() == C, op, ": expected weight and bias of ", C, " elements, got ",
                t->numel());
  }
}

std::tuple<Tensor, Tensor, Tensor> native_group_norm(const Tensor& input,
                                                     const std::optional<Tensor>& weight_opt,
                                                     const std::optional<Tensor>& bias_opt,
                                                     c10::SymInt N_, c10::SymInt C_,
                                                     c10::SymInt HxW_, int64_t group, double eps) {
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  const Tensor w = opt(weight_opt), b = opt(bias_opt);
  check_gn_args("native_group_norm", input, w, b, N, C, HxW, group);
  if (!floats_ok({&input, &w, &b})) {
    return run_on_cpu<ATEN_OP(native_group_norm)>(dtype_reason(input.scalar_type()), input,
                                                  weight_opt, bias_opt, N, C, HxW, group, eps);
  }
  const ScalarType pdt = param_dtype(input, w, Tensor());
  const int64_t G = group, D = C / G;
  Tensor out =
      at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  Tensor mean = empty_device({N, G}, f32), rstd = empty_device({N, G}, f32);
  if (N * G > 0 && D * HxW == 0) {
    // Groups over no elements: mean 0, rstd NaN (0 / 0), as on the CPU.
    launch_fill(mean, 0);
    launch_fill(rstd, scalar_bits(std::numeric_limits<double>::quiet_NaN(), f32));
  } else if (N * G > 0) {
    ChannelView v;
    v.t = input.reshape({N * G, D * HxW});
    v.n = 1;
    v.c = N * G;
    v.s = D * HxW;
    v.st = {0, v.t.stride(0), v.t.stride(1)};
    auto [m, var] = moments(v);
    mean = m.view({N, G});
    rstd = at::rsqrt(at::add(var, eps)).view({N, G});
    // scale[n, c] = rstd[n, g] * w[c]; shift[n, c] = b[c] - mean[n, g] * scale[n, c]
    Tensor scale = rstd.view({N, G, 1}).expand({N, G, D});
    if (w.defined()) scale = at::mul(scale, f32_of(w).view({1, G, D}));
    scale = scale.contiguous().view({N, C, 1});
    Tensor shift =
        at::mul(mean.view({N, G, 1}).expand({N, G, D}).contiguous().view({N, C, 1}), scale);
    shift = b.defined() ? at::sub(f32_of(b).view({1, C, 1}), shift) : at::neg(shift);
    using namespace pw;
    apply_pointwise(out.view({N, C, HxW}), {input.reshape({N, C, HxW}), scale, shift}, f32,
                    {{MTIA_PE_SE_MUL, kT0, {kA, kB}}, {MTIA_PE_SE_ADD, kOut, {kT0, kC}}});
  }
  return {out, as_dtype(mean, pdt), as_dtype(rstd, pdt)};
}

std::tuple<Tensor, Tensor, Tensor> native_group_norm_backward(
    const Tensor& grad_out, const Tensor& input, const Tensor& mean_in, const Tensor& rstd_in,
    const std::optional<Tensor>& weight_opt, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
    int64_t group, std::array<bool, 3> mask) {
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  const Tensor w = opt(weight_opt);
  check_gn_args("native_group_norm_backward", input, w, Tensor(), N, C, HxW, group);
  check_device(grad_out, "native_group_norm_backward");
  TORCH_CHECK(grad_out.sizes() == input.sizes(), "native_group_norm_backward: grad_out of size ",
              grad_out.sizes(), " does not match input of size ", input.sizes());
  const int64_t G = group, D = C / G;
  TORCH_CHECK(mean_in.numel() == N * G && rstd_in.numel() == N * G,
              "native_group_norm_backward: expected mean and rstd of N * group = ", N * G,
              " elements, got ", mean_in.numel(), " and ", rstd_in.numel());
  if (!floats_ok({&grad_out, &input, &mean_in, &rstd_in, &w}) ||
      grad_out.scalar_type() != input.scalar_type()) {
    return run_on_cpu<ATEN_OP(native_group_norm_backward)>(dtype_reason(input.scalar_type()),
                                                           grad_out, input, mean_in, rstd_in,
                                                           weight_opt, N, C, HxW, group, mask);
  }
  const ScalarType pdt = param_dtype(input, w, Tensor());
  Tensor dx, dw, db;
  if (mask[0]) {
    dx = at::empty(input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  }
  const auto param_grad = [&](bool wanted) {
    return wanted ? at::empty({C}, input.options().dtype(w.defined() ? w.scalar_type() : pdt))
                  : Tensor();
  };
  dw = param_grad(mask[1]);
  db = param_grad(mask[2]);
  if (N * C * HxW == 0) {
    // An empty batch (or groups over no elements): zero parameter gradients.
    for (Tensor* t : {&dw, &db}) {
      if (t->defined() && t->numel() > 0) launch_fill(*t, scalar_bits(0, t->scalar_type()));
    }
    return {dx, dw, db};
  }
  // The [1, N * C, HxW] views of dy and x.
  ChannelView dv, xv;
  for (auto [v, t] : {std::pair<ChannelView*, const Tensor*>{&dv, &grad_out}, {&xv, &input}}) {
    v->t = t->reshape({N * C, HxW});
    v->n = 1;
    v->c = N * C;
    v->s = HxW;
    v->st = {0, v->t.stride(0), v->t.stride(1)};
  }
  // Per (n, c): dbs = sum_s dy and ds = sum_s dy * (x - mean[n, g]) (centred, so the
  // coefficients below need no difference of large sums).
  const Tensor mean = f32_of(mean_in).reshape({N, G, 1});
  const Tensor rstd = f32_of(rstd_in).reshape({N, G, 1});
  auto [dbs, ds] = grad_sums(dv, xv, mean.expand({N, G, D}).contiguous().view({N * C}));
  const Tensor gamma = w.defined() ? f32_of(w).view({1, G, D}) : Tensor();
  const Tensor ds3 = ds.view({N, G, D}), db3 = dbs.view({N, G, D});
  if (dx.defined()) {
    // dx = c1 * dy + c2 * x + c3, c1 = rstd * gamma, c2 = -ds_g * rstd^3 / (D * HxW),
    // c3 = -c2 * mean - db_g * rstd / (D * HxW), with ds_g, db_g the gamma-weighted sums over
    // the group's channels
    const Tensor ds_g = at::sum(gamma.defined() ? at::mul(ds3, gamma) : ds3, {2}, true);
    const Tensor db_g = at::sum(gamma.defined() ? at::mul(db3, gamma) : db3, {2}, true);
    const double s = 1.0 / double(D * HxW);
    const Tensor r3 = at::mul(at::mul(rstd, rstd), rstd);
    const Tensor c2 = at::mul(at::mul(ds_g, r3), -s);
    const Tensor c3 = at::sub(at::neg(at::mul(c2, mean)), at::mul(at::mul(db_g, rstd), s));
    Tensor c1 = rstd.expand({N, G, D});
    if (gamma.defined()) c1 = at::mul(c1, gamma);
    const auto per_nc = [&](const Tensor& t) {
      return t.expand({N, G, D}).contiguous().view({N, C, 1});
    };
    using namespace pw;
    apply_pointwise(dx.view({N, C, HxW}),
                    {grad_out.reshape({N, C, HxW}), per_nc(c1), input.reshape({N, C, HxW}),
                     per_nc(c2), per_nc(c3)},
                    f32,
                    {{MTIA_PE_SE_MUL, kT0, {kA, kB}},
                     {MTIA_PE_SE_MUL, kT1, {kC, kD}},
                     {MTIA_PE_SE_ADD, kT0, {kT0, kT1}},
                     {MTIA_PE_SE_ADD, kOut, {kT0, kE}}});
  }
  if (dw.defined()) {
    // dgamma[c] = sum_n ds[n, c] * rstd[n, g]
    const Tensor t = at::mul(ds3, rstd);
    write_into(dw, at::sum(t.reshape({N, C}), {0}, false));
  }
  if (db.defined()) write_into(db, at::sum(dbs.view({N, C}), {0}, false));
  return {dx, dw, db};
}

}  // namespace

#define MTIA_OPS_norm
#include "register_ops.inc"

}  // namespace mtia::torch_backend
