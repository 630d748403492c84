// Activations and their backward passes as pointwise programs on the SE: elu (so selu and
// celu), softplus, mish, logit, GELU, hardsigmoid, hardswish, hardtanh, leaky_relu,
// log_sigmoid, isneginf/isposinf, the tanh, sigmoid, silu and threshold (relu) backward
// formulas; and native_dropout, whose mask comes from the device's generator (bernoulli_) and
// whose scaling runs on the device.
//
// Each program computes in fp32 for the narrow dtypes and rounds once. Operands are passed by
// name: the structured metas only check and size the output.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/elu_backward_meta.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/hardsigmoid_backward_meta.h>
#include <ATen/ops/hardsigmoid_meta.h>
#include <ATen/ops/hardswish_backward_ops.h>
#include <ATen/ops/hardswish_ops.h>
#include <ATen/ops/hardtanh_backward_ops.h>
#include <ATen/ops/hardtanh_ops.h>
#include <ATen/ops/isneginf_meta.h>
#include <ATen/ops/isposinf_meta.h>
#include <ATen/ops/leaky_relu_backward_meta.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/log_sigmoid_backward_ops.h>
#include <ATen/ops/log_sigmoid_forward_ops.h>
#include <ATen/ops/logit_backward_meta.h>
#include <ATen/ops/logit_ops.h>
#include <ATen/ops/mish_backward_ops.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/silu_backward_native.h>
#include <ATen/ops/softplus_backward_meta.h>
#include <ATen/ops/softplus_meta.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <tuple>

#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::ScalarType;
using at::Tensor;
using namespace pw;

// x > 0 ? scale * x : alpha * scale * expm1(input_scale * x)
Tensor& elu_into(const Tensor& self, const c10::Scalar& alpha, const c10::Scalar& scale,
                 const c10::Scalar& input_scale, Tensor& out) {
  OutOf<at::meta::structured_elu> m(out);
  m.meta(self, alpha, scale, input_scale);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(elu, out)>(dtype_reason(dt), self, alpha, scale, input_scale, out);
  }
  const ScalarType acc = acc_dtype(dt);
  const double a = alpha.toDouble(), s = scale.toDouble();
  apply_pointwise(out, {self}, acc,
                  {{MTIA_PE_SE_MUL, kT0, {kA, kImm}, scalar_bits(input_scale, acc)},
                   {MTIA_PE_SE_EXPM1, kT0, {kT0}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kImm}, scalar_bits(a * s, acc)},
                   {MTIA_PE_SE_MUL, kT1, {kA, kImm}, scalar_bits(s, acc)},
                   {MTIA_PE_SE_GT, kT2, {kA, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT2, kT1, kT0}}});
  return out;
}

// grad * (x > 0 ? scale : input_scale * alpha * scale * exp(input_scale * x)); from the result
// y: grad * (y > 0 ? scale : input_scale * (y + alpha * scale)).
Tensor& elu_backward_into(const Tensor& grad, const c10::Scalar& alpha, const c10::Scalar& scale,
                          const c10::Scalar& input_scale, bool is_result,
                          const Tensor& self_or_result, Tensor& grad_input) {
  OutOf<at::meta::structured_elu_backward> m(grad_input);
  m.meta(grad, alpha, scale, input_scale, is_result, self_or_result);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(elu_backward, grad_input)>(
        dtype_reason(dt), grad, alpha, scale, input_scale, is_result, self_or_result, grad_input);
  }
  const ScalarType acc = acc_dtype(dt);
  const double a = alpha.toDouble(), s = scale.toDouble(), is = input_scale.toDouble();
  std::vector<PwStep> steps;
  if (is_result) {
    steps = {{MTIA_PE_SE_ADD, kT0, {kB, kImm}, scalar_bits(a * s, acc)},
             {MTIA_PE_SE_MUL, kT0, {kT0, kImm}, scalar_bits(is, acc)}};
  } else {
    steps = {{MTIA_PE_SE_MUL, kT0, {kB, kImm}, scalar_bits(is, acc)},
             {MTIA_PE_SE_EXP, kT0, {kT0}},
             {MTIA_PE_SE_MUL, kT0, {kT0, kImm}, scalar_bits(is * a * s, acc)}};
  }
  steps.push_back({MTIA_PE_SE_GT, kT1, {kB, kImm}, scalar_bits(0.0, acc)});
  steps.push_back({MTIA_PE_SE_SELECT, kT0, {kT1, kImm, kT0}, scalar_bits(s, acc)});
  steps.push_back({MTIA_PE_SE_MUL, kOut, {kT0, kA}});
  apply_pointwise(grad_input, {grad, self_or_result}, acc, steps);
  return grad_input;
}

// beta * x > threshold ? x : log1p(exp(beta * x)) / beta
Tensor& softplus_into(const Tensor& self, const c10::Scalar& beta, const c10::Scalar& threshold,
                      Tensor& out) {
  OutOf<at::meta::structured_softplus> m(out);
  m.meta(self, beta, threshold);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(softplus, out)>(dtype_reason(dt), self, beta, threshold, out);
  }
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {self}, acc,
                  {{MTIA_PE_SE_MUL, kT0, {kA, kImm}, scalar_bits(beta, acc)},
                   {MTIA_PE_SE_GT, kT1, {kT0, kImm}, scalar_bits(threshold, acc)},
                   {MTIA_PE_SE_EXP, kT0, {kT0}},
                   {MTIA_PE_SE_LOG1P, kT0, {kT0}},
                   {MTIA_PE_SE_DIV, kT0, {kT0, kImm}, scalar_bits(beta, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT1, kA, kT0}}});
  return out;
}

// grad * (beta * x > threshold ? 1 : sigmoid(beta * x))
Tensor& softplus_backward_into(const Tensor& grad, const Tensor& self, const c10::Scalar& beta,
                               const c10::Scalar& threshold, Tensor& grad_input) {
  OutOf<at::meta::structured_softplus_backward> m(grad_input);
  m.meta(grad, self, beta, threshold);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(softplus_backward, grad_input)>(dtype_reason(dt), grad, self, beta,
                                                               threshold, grad_input);
  }
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(grad_input, {grad, self}, acc,
                  {{MTIA_PE_SE_MUL, kT0, {kB, kImm}, scalar_bits(beta, acc)},
                   {MTIA_PE_SE_GT, kT1, {kT0, kImm}, scalar_bits(threshold, acc)},
                   {MTIA_PE_SE_SIGMOID, kT0, {kT0}},
                   {MTIA_PE_SE_SELECT, kT0, {kT1, kImm, kT0}, scalar_bits(1.0, acc)},
                   {MTIA_PE_SE_MUL, kOut, {kT0, kA}}});
  return grad_input;
}

// x * tanh(softplus(x))
Tensor& mish_into(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_mish> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) return run_on_cpu<ATEN_OP2(mish, out)>(dtype_reason(dt), self, out);
  apply_pointwise(out, {self}, acc_dtype(dt),
                  {{MTIA_PE_SE_EXP, kT0, {kA}},
                   {MTIA_PE_SE_LOG1P, kT0, {kT0}},
                   {MTIA_PE_SE_TANH, kT0, {kT0}},
                   {MTIA_PE_SE_MUL, kOut, {kT0, kA}}});
  return out;
}

// grad * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)): t, then the factor, then
// the product.
Tensor mish_backward(const Tensor& grad, const Tensor& self) {
  check_device(grad, "mish_backward");
  check_device(self, "mish_backward");
  const ScalarType dt = at::result_type(grad, self);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(mish_backward)>(dtype_reason(dt), grad, self);
  }
  Tensor out = at::empty(at::infer_size(grad.sizes(), self.sizes()), grad.options().dtype(dt));
  if (out.numel() == 0) return out;
  const ScalarType acc = acc_dtype(dt);
  Tensor t = empty_device(self.sizes(), acc);
  apply_pointwise(t, {self}, acc,
                  {{MTIA_PE_SE_EXP, kT0, {kA}},
                   {MTIA_PE_SE_LOG1P, kT0, {kT0}},
                   {MTIA_PE_SE_TANH, kOut, {kT0}}});
  Tensor factor = empty_device(self.sizes(), acc);
  apply_pointwise(factor, {self, t}, acc,
                  {{MTIA_PE_SE_MUL, kT0, {kB, kB}},
                   {MTIA_PE_SE_SUB, kT0, {kImm, kT0}, scalar_bits(1.0, acc)},
                   {MTIA_PE_SE_SIGMOID, kT1, {kA}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kT1}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kA}},
                   {MTIA_PE_SE_ADD, kOut, {kT0, kB}}});
  apply_binary(MTIA_PE_SE_MUL, out, grad, factor, acc, acc);
  return out;
}

// log(z / (1 - z)), z = x clamped to [eps, 1 - eps] when eps is given
Tensor& logit_into(const Tensor& self, c10::optional<double> eps, Tensor& out) {
  check_device(self, "logit");
  const ScalarType dt = at::isFloatingType(self.scalar_type())
                            ? self.scalar_type()
                            : at::typeMetaToScalarType(c10::get_default_dtype());
  if (!is_kernel_float(dt) || out.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(logit, out)>(dtype_reason(dt), self, eps, out);
  }
  at::native::resize_output(out, self.sizes());
  const ScalarType acc = acc_dtype(dt);
  std::vector<PwStep> steps;
  int z = kA;
  if (eps.has_value()) {
    steps = {{MTIA_PE_SE_MAX, kT0, {kA, kImm}, scalar_bits(*eps, acc)},
             {MTIA_PE_SE_MIN, kT0, {kT0, kImm}, scalar_bits(1.0 - *eps, acc)}};
    z = kT0;
  }
  steps.push_back({MTIA_PE_SE_SUB, kT1, {kImm, z}, scalar_bits(1.0, acc)});
  steps.push_back({MTIA_PE_SE_DIV, kT1, {z, kT1}});
  steps.push_back({MTIA_PE_SE_LOG, kOut, {kT1}});
  apply_pointwise(out, {self}, acc, steps);
  return out;
}
Tensor logit(const Tensor& self, c10::optional<double> eps) {
  const ScalarType dt = at::isFloatingType(self.scalar_type())
                            ? self.scalar_type()
                            : at::typeMetaToScalarType(c10::get_default_dtype());
  Tensor out = at::empty({0}, self.options().dtype(dt));
  return logit_into(self, eps, out);
}
Tensor& logit_(Tensor& self, c10::optional<double> eps) {
  return logit_into(self, eps, self);
}

// grad / (x (1 - x)); with eps, 0 outside [eps, 1 - eps]
Tensor& logit_backward_into(const Tensor& grad, const Tensor& self, c10::optional<double> eps,
                            Tensor& grad_input) {
  OutOf<at::meta::structured_logit_backward> m(grad_input);
  m.meta(grad, self, eps);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(logit_backward, grad_input)>(dtype_reason(dt), grad, self, eps,
                                                            grad_input);
  }
  const ScalarType acc = acc_dtype(dt);
  const std::vector<PwStep> quotient = {{MTIA_PE_SE_SUB, kT0, {kImm, kB}, scalar_bits(1.0, acc)},
                                        {MTIA_PE_SE_MUL, kT0, {kT0, kB}},
                                        {MTIA_PE_SE_DIV, kOut, {kA, kT0}}};
  if (!eps.has_value() || *eps < 0) {
    apply_pointwise(grad_input, {grad, self}, acc, quotient);
    return grad_input;
  }
  Tensor q = empty_device(grad_input.sizes(), acc);
  apply_pointwise(q, {grad, self}, acc, quotient);
  apply_pointwise(grad_input, {q, self}, acc,
                  {{MTIA_PE_SE_GE, kT0, {kB, kImm}, scalar_bits(*eps, acc)},
                   {MTIA_PE_SE_LE, kT1, {kB, kImm}, scalar_bits(1.0 - *eps, acc)},
                   {MTIA_PE_SE_LAND, kT0, {kT0, kT1}},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kA, kImm}, scalar_bits(0.0, acc)}});
  return grad_input;
}

// A mask drawn from the device's generator (keep with probability 1 - p), and
// input * mask / (1 - p).
std::tuple<Tensor, Tensor> native_dropout(const Tensor& input, double p,
                                          c10::optional<bool> train) {
  check_device(input, "native_dropout");
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  const ScalarType dt = input.scalar_type();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(native_dropout)>(dtype_reason(dt), input, p, train);
  }
  Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  Tensor out = at::empty_like(input);
  if (input.numel() == 0) return {out, mask};
  if (train.has_value() && !*train) {  // eval: the input, all kept
    write_into(out, input);
    launch_fill(mask, 1);
    return {out, mask};
  }
  if (p == 1) {
    launch_fill(mask, 0);
    launch_fill(out, 0);
    return {out, mask};
  }
  mask.bernoulli_(1 - p);
  const ScalarType acc = acc_dtype(dt);
  Tensor scaled = empty_device(input.sizes(), acc);
  apply_binary_scalar(MTIA_PE_SE_MUL, scaled, input, 1.0 / (1.0 - p), acc);
  Tensor r = acc == dt ? out : empty_like_dtype(out, acc);
  launch_where(r, mask, scaled, device_scalar(0.0, acc));
  write_into(out, r);
  return {out, mask};
}

// grad * mask * scale
Tensor native_dropout_backward(const Tensor& grad, const Tensor& mask, double scale) {
  check_device(grad, "native_dropout_backward");
  check_device(mask, "native_dropout_backward");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type, but got ",
              mask.scalar_type());
  const ScalarType dt = grad.scalar_type();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(native_dropout_backward)>(dtype_reason(dt), grad, mask, scale);
  }
  Tensor out = at::empty(at::infer_size(grad.sizes(), mask.sizes()), grad.options());
  if (out.numel() == 0) return out;
  const ScalarType acc = acc_dtype(dt);
  Tensor scaled = empty_device(grad.sizes(), acc);
  apply_binary_scalar(MTIA_PE_SE_MUL, scaled, grad, scale, acc);
  Tensor r = acc == dt ? out : empty_like_dtype(out, acc);
  launch_where(r, mask.expand(out.sizes()), scaled.expand(out.sizes()), device_scalar(0.0, acc));
  write_into(out, r);
  return out;
}

// --- activations -------------------------------------------------------------------------------

bool gelu_tanh(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh",
              "approximate argument must be either none or tanh, got '", approximate, "'");
  return approximate == "tanh";
}

Tensor& gelu_out(const Tensor& self, c10::string_view approximate, Tensor& out) {
  OutOf<at::meta::structured_gelu> m(out);
  m.meta(self, approximate);
  const ScalarType dt = m.common_dtype();
  const bool tanh_form = gelu_tanh(approximate);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(gelu, out)>(dtype_reason(dt), self, approximate, out);
  }
  apply_unary(tanh_form ? MTIA_PE_SE_GELU_TANH : MTIA_PE_SE_GELU, out, m.input(0), dt, dt);
  return out;
}

// grad * gelu'(x), one launch.
Tensor& gelu_backward_out(const Tensor& grad, const Tensor& self, c10::string_view approximate,
                          Tensor& grad_input) {
  OutOf<at::meta::structured_gelu_backward> m(grad_input);
  m.meta(grad, self, approximate);
  const ScalarType dt = m.common_dtype();
  const bool tanh_form = gelu_tanh(approximate);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(gelu_backward, grad_input)>(dtype_reason(dt), grad, self,
                                                           approximate, grad_input);
  }
  using namespace pw;
  apply_pointwise(grad_input, {m.input(0), m.input(1)}, acc_dtype(dt),
                  {{tanh_form ? MTIA_PE_SE_GELU_TANH_GRAD : MTIA_PE_SE_GELU_GRAD, kT0, {kB}},
                   {MTIA_PE_SE_MUL, kOut, {kA, kT0}}});
  return grad_input;
}

// relu6(x + 3) / 6
Tensor& hardsigmoid_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_hardsigmoid> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(hardsigmoid, out)>(dtype_reason(dt), self, out);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {m.input(0)}, acc,
                  {{MTIA_PE_SE_ADD, kT0, {kA, kImm}, scalar_bits(3.0, acc)},
                   {MTIA_PE_SE_MAX, kT0, {kT0, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_MIN, kT0, {kT0, kImm}, scalar_bits(6.0, acc)},
                   {MTIA_PE_SE_DIV, kOut, {kT0, kImm}, scalar_bits(6.0, acc)}});
  return out;
}

// grad / 6 where -3 < x < 3, else 0
Tensor& hardsigmoid_backward_out(const Tensor& grad, const Tensor& self, Tensor& grad_input) {
  OutOf<at::meta::structured_hardsigmoid_backward> m(grad_input);
  m.meta(grad, self);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(hardsigmoid_backward, grad_input)>(dtype_reason(dt), grad, self,
                                                                  grad_input);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(grad_input, {m.input(0), m.input(1)}, acc,
                  {{MTIA_PE_SE_GT, kT0, {kB, kImm}, scalar_bits(-3.0, acc)},
                   {MTIA_PE_SE_LT, kT1, {kB, kImm}, scalar_bits(3.0, acc)},
                   {MTIA_PE_SE_LAND, kT0, {kT0, kT1}},
                   {MTIA_PE_SE_DIV, kT2, {kA, kImm}, scalar_bits(6.0, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kT2, kImm}, scalar_bits(0.0, acc)}});
  return grad_input;
}

// x * relu6(x + 3) / 6
Tensor& hardswish_into(const Tensor& self, Tensor& out) {
  check_device(self, "hardswish");
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_float(dt) || out.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(hardswish, out)>(dtype_reason(dt), self, out);
  }
  at::native::resize_output(out, self.sizes());
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {self}, acc,
                  {{MTIA_PE_SE_ADD, kT0, {kA, kImm}, scalar_bits(3.0, acc)},
                   {MTIA_PE_SE_MAX, kT0, {kT0, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_MIN, kT0, {kT0, kImm}, scalar_bits(6.0, acc)},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kA}},
                   {MTIA_PE_SE_DIV, kOut, {kT0, kImm}, scalar_bits(6.0, acc)}});
  return out;
}
Tensor hardswish(const Tensor& self) {
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return hardswish_into(self, out);
}
Tensor& hardswish_(Tensor& self) {
  return hardswish_into(self, self);
}

// grad * (0 for x < -3, x / 3 + 0.5 up to 3, 1 above): the factor, then the product.
Tensor hardswish_backward(const Tensor& grad, const Tensor& self) {
  check_device(grad, "hardswish_backward");
  check_device(self, "hardswish_backward");
  const ScalarType dt = at::result_type(grad, self);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(hardswish_backward)>(dtype_reason(dt), grad, self);
  }
  const std::vector<int64_t> sizes = at::infer_size(grad.sizes(), self.sizes());
  Tensor out = at::empty(sizes, grad.options().dtype(dt));
  if (out.numel() == 0) return out;
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  Tensor factor = empty_device(self.sizes(), acc);
  apply_pointwise(factor, {self}, acc,
                  {{MTIA_PE_SE_LT, kT0, {kA, kImm}, scalar_bits(-3.0, acc)},
                   {MTIA_PE_SE_GT, kT1, {kA, kImm}, scalar_bits(3.0, acc)},
                   {MTIA_PE_SE_DIV, kT2, {kA, kImm}, scalar_bits(3.0, acc)},
                   {MTIA_PE_SE_ADD, kT2, {kT2, kImm}, scalar_bits(0.5, acc)},
                   {MTIA_PE_SE_SELECT, kT2, {kT1, kImm, kT2}, scalar_bits(1.0, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kImm, kT2}, scalar_bits(0.0, acc)}});
  apply_binary(MTIA_PE_SE_MUL, out, grad, factor, acc, acc);
  return out;
}

// clamp(x, min, max) on the clamp kernel.
Tensor& hardtanh_into(const Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi,
                      Tensor& out) {
  check_device(self, "hardtanh");
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_numeric(dt) || out.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(hardtanh, out)>(dtype_reason(dt), self, lo, hi, out);
  }
  at::native::resize_output(out, self.sizes());
  if (out.numel() == 0) return out;
  launch_clamp(out, self, scalar_bits(lo, dt), scalar_bits(hi, dt));
  return out;
}
Tensor hardtanh(const Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  Tensor out = at::empty_like(self);
  return hardtanh_into(self, lo, hi, out);
}
Tensor& hardtanh_(Tensor& self, const c10::Scalar& lo, const c10::Scalar& hi) {
  return hardtanh_into(self, lo, hi, self);
}

// grad where lo < x < hi, else 0
Tensor& hardtanh_backward_into(const Tensor& grad, const Tensor& self, const c10::Scalar& lo,
                               const c10::Scalar& hi, Tensor& grad_input) {
  check_device(grad, "hardtanh_backward");
  check_device(self, "hardtanh_backward");
  const ScalarType dt = at::result_type(grad, self);
  if (!is_kernel_float(dt) || grad_input.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(hardtanh_backward, grad_input)>(dtype_reason(dt), grad, self, lo, hi,
                                                               grad_input);
  }
  at::native::resize_output(grad_input, at::infer_size(grad.sizes(), self.sizes()));
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(grad_input, {grad, self}, acc,
                  {{MTIA_PE_SE_GT, kT0, {kB, kImm}, scalar_bits(lo, acc)},
                   {MTIA_PE_SE_LT, kT1, {kB, kImm}, scalar_bits(hi, acc)},
                   {MTIA_PE_SE_LAND, kT0, {kT0, kT1}},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kA, kImm}, scalar_bits(0.0, acc)}});
  return grad_input;
}
Tensor hardtanh_backward(const Tensor& grad, const Tensor& self, const c10::Scalar& lo,
                         const c10::Scalar& hi) {
  Tensor out = at::empty({0}, grad.options().dtype(at::result_type(grad, self)));
  return hardtanh_backward_into(grad, self, lo, hi, out);
}

// x > 0 ? x : slope * x
Tensor& leaky_relu_into(const Tensor& self, const c10::Scalar& slope, Tensor& out) {
  OutOf<at::meta::structured_leaky_relu> m(out);
  m.meta(self, slope);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(leaky_relu, out)>(dtype_reason(dt), self, slope, out);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {m.input(0)}, acc,
                  {{MTIA_PE_SE_GT, kT0, {kA, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_MUL, kT1, {kA, kImm}, scalar_bits(slope, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kA, kT1}}});
  return out;
}

// grad where x > 0, else slope * grad (x may be the forward's result: the same signs)
Tensor& leaky_relu_backward_into(const Tensor& grad, const Tensor& self, const c10::Scalar& slope,
                                 bool self_is_result, Tensor& grad_input) {
  // Its meta iterates (self, grad): the operands are passed by name.
  OutOf<at::meta::structured_leaky_relu_backward> m(grad_input);
  m.meta(grad, self, slope, self_is_result);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(leaky_relu_backward, grad_input)>(dtype_reason(dt), grad, self,
                                                                 slope, self_is_result, grad_input);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(grad_input, {grad, self}, acc,
                  {{MTIA_PE_SE_GT, kT0, {kB, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_MUL, kT1, {kA, kImm}, scalar_bits(slope, acc)},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kA, kT1}}});
  return grad_input;
}

// x == -inf (+inf): never for integers and bool.
template <class Meta, class Op>
Tensor& isinf_sign_into(const Tensor& self, Tensor& out, double value) {
  OutOf<Meta> m(out);
  m.meta(self);
  const ScalarType dt = self.scalar_type();
  if (is_kernel_int(dt) || dt == at::kBool) {
    if (out.numel() > 0) launch_fill(out, 0);
    return out;
  }
  if (!is_kernel_float(dt)) return run_on_cpu<Op>(dtype_reason(dt), self, out);
  apply_binary(MTIA_PE_SE_EQ, out, self, at::scalar_tensor(value, at::kDouble), dt, at::kBool);
  return out;
}
Tensor& isneginf_into(const Tensor& self, Tensor& out) {
  return isinf_sign_into<at::meta::structured_isneginf, ATEN_OP2(isneginf, out)>(
      self, out, -std::numeric_limits<double>::infinity());
}
Tensor& isposinf_into(const Tensor& self, Tensor& out) {
  return isinf_sign_into<at::meta::structured_isposinf, ATEN_OP2(isposinf, out)>(
      self, out, std::numeric_limits<double>::infinity());
}

// log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable at both ends. The buffer the CPU
// kernel fills is not needed by the backward here: it stays empty, as on CUDA.
std::tuple<Tensor, Tensor> log_sigmoid_forward(const Tensor& self) {
  check_device(self, "log_sigmoid_forward");
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(log_sigmoid_forward)>(dtype_reason(dt), self);
  }
  Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  Tensor buffer = at::empty({0}, self.options());
  if (out.numel() == 0) return {out, buffer};
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {self}, acc,
                  {{MTIA_PE_SE_ABS, kT0, {kA}},
                   {MTIA_PE_SE_NEG, kT0, {kT0}},
                   {MTIA_PE_SE_EXP, kT0, {kT0}},
                   {MTIA_PE_SE_LOG1P, kT0, {kT0}},
                   {MTIA_PE_SE_MIN, kT1, {kA, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_SUB, kOut, {kT1, kT0}}});
  return {out, buffer};
}

// grad * sigmoid(-x)
Tensor log_sigmoid_backward(const Tensor& grad, const Tensor& self, const Tensor& /*buffer*/) {
  check_device(grad, "log_sigmoid_backward");
  check_device(self, "log_sigmoid_backward");
  const ScalarType dt = at::result_type(grad, self);
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP(log_sigmoid_backward)>(dtype_reason(dt), grad, self,
                                                     at::empty({0}, self.options()));
  }
  Tensor out = at::empty(at::infer_size(grad.sizes(), self.sizes()), grad.options().dtype(dt));
  if (out.numel() == 0) return out;
  using namespace pw;
  apply_pointwise(out, {grad, self}, acc_dtype(dt),
                  {{MTIA_PE_SE_NEG, kT0, {kB}},
                   {MTIA_PE_SE_SIGMOID, kT0, {kT0}},
                   {MTIA_PE_SE_MUL, kOut, {kA, kT0}}});
  return out;
}

// --- activation backward (one pointwise launch, in float32 for the narrow dtypes) --------------

Tensor& tanh_backward_out(const Tensor& grad, const Tensor& y, Tensor& grad_input) {
  OutOf<at::meta::structured_tanh_backward> m(grad_input);
  m.meta(grad, y);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(tanh_backward, grad_input)>(dtype_reason(dt), grad, y, grad_input);
  }
  // grad * (1 - y^2), one launch
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  const uint64_t one = scalar_bits(1.0, acc);
  apply_pointwise(grad_input, {grad, y}, acc,
                  {{MTIA_PE_SE_MUL, kT0, {kB, kB}},
                   {MTIA_PE_SE_SUB, kT0, {kImm, kT0}, one},
                   {MTIA_PE_SE_MUL, kOut, {kA, kT0}}});
  return grad_input;
}

Tensor& sigmoid_backward_out(const Tensor& grad, const Tensor& y, Tensor& grad_input) {
  OutOf<at::meta::structured_sigmoid_backward> m(grad_input);
  m.meta(grad, y);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(sigmoid_backward, grad_input)>(dtype_reason(dt), grad, y,
                                                              grad_input);
  }
  // grad * (1 - y) * y, one launch
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(grad_input, {grad, y}, acc,
                  {{MTIA_PE_SE_SUB, kT0, {kImm, kB}, scalar_bits(1.0, acc)},
                   {MTIA_PE_SE_MUL, kT0, {kA, kT0}},
                   {MTIA_PE_SE_MUL, kOut, {kT0, kB}}});
  return grad_input;
}

Tensor& silu_backward_out(const Tensor& grad, const Tensor& x, Tensor& grad_input) {
  OutOf<at::meta::structured_silu_backward> m(grad_input);
  m.meta(grad, x);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(silu_backward, grad_input)>(dtype_reason(dt), grad, x, grad_input);
  }
  // grad * s * (1 + x * (1 - s)), s = sigmoid(x), one launch
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  const uint64_t one = scalar_bits(1.0, acc);
  apply_pointwise(grad_input, {grad, x}, acc,
                  {{MTIA_PE_SE_SIGMOID, kT0, {kB}},
                   {MTIA_PE_SE_SUB, kT1, {kImm, kT0}, one},
                   {MTIA_PE_SE_MUL, kT1, {kB, kT1}},
                   {MTIA_PE_SE_ADD, kT1, {kT1, kImm}, one},
                   {MTIA_PE_SE_MUL, kT0, {kA, kT0}},
                   {MTIA_PE_SE_MUL, kOut, {kT0, kT1}}});
  return grad_input;
}

Tensor silu_backward_device(const Tensor& grad, const Tensor& x) {
  const ScalarType dt = at::result_type(grad, x);
  Tensor grad_input = at::empty(at::infer_size(grad.sizes(), x.sizes()), grad.options().dtype(dt));
  return silu_backward_out(grad, x, grad_input);
}

// The functional form has a CompositeImplicitAutograd kernel (six ops) that PyTorch 2.13 also
// uses as the autograd kernel of every device but the CPU, so a kernel under MTIA alone is
// never reached. Under AutogradMTIA: the one-launch kernel when no gradient of it is wanted,
// the differentiable composition (double backward) when one is. Through the dispatcher, not
// a direct call: under torch.compile's tracing the tensors are fake and must reach their
// handler, not the device.
Tensor silu_backward_autograd(const Tensor& grad, const Tensor& x) {
  if (at::GradMode::is_enabled() && (grad.requires_grad() || x.requires_grad())) {
    return at::native::math_silu_backward(grad, x);
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return at::silu_backward(grad, x);
}

Tensor& threshold_backward_out(const Tensor& grad, const Tensor& self, const c10::Scalar& threshold,
                               Tensor& grad_input) {
  OutOf<at::meta::structured_threshold_backward> m(grad_input);
  m.meta(grad, self, threshold);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(threshold_backward, grad_input)>(dtype_reason(dt), grad, self,
                                                                threshold, grad_input);
  }
  // where(self <= threshold, 0, grad), one launch
  using namespace pw;
  apply_pointwise(grad_input, {grad, self}, dt,
                  {{MTIA_PE_SE_LE, kT0, {kB, kImm}, scalar_bits(threshold, dt)},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kImm, kA}, scalar_bits(0, dt)}});
  return grad_input;
}

}  // namespace

#define MTIA_OPS_activation
#include "register_ops.inc"

TORCH_LIBRARY_IMPL(aten, AutogradMTIA, m) {
  m.impl("silu_backward", MTIA_FN(silu_backward_autograd));
}

}  // namespace mtia::torch_backend
