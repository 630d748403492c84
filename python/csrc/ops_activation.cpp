// More activations and their backward passes as pointwise programs on the SE: elu (so selu
// and celu), softplus, mish and logit; and native_dropout, whose mask comes from the device's
// generator (bernoulli_) and whose scaling runs on the device.
//
// Each program computes in fp32 for the narrow dtypes and rounds once. Operands are passed by
// name: the structured metas only check and size the output.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/elu_backward_meta.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/logit_backward_meta.h>
#include <ATen/ops/logit_ops.h>
#include <ATen/ops/mish_backward_ops.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/native_dropout_backward_ops.h>
#include <ATen/ops/native_dropout_ops.h>
#include <ATen/ops/softplus_backward_meta.h>
#include <ATen/ops/softplus_meta.h>
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, MTIA, m) {
  m.impl("elu.out", MTIA_FN(elu_into));
  m.impl("elu_backward.grad_input", MTIA_FN(elu_backward_into));
  m.impl("softplus.out", MTIA_FN(softplus_into));
  m.impl("softplus_backward.grad_input", MTIA_FN(softplus_backward_into));
  m.impl("mish.out", MTIA_FN(mish_into));
  m.impl("mish_backward", MTIA_FN(mish_backward));
  m.impl("logit", MTIA_FN(logit));
  m.impl("logit_", MTIA_FN(logit_));
  m.impl("logit.out", MTIA_FN(logit_into));
  m.impl("logit_backward.grad_input", MTIA_FN(logit_backward_into));
  m.impl("native_dropout", MTIA_FN(native_dropout));
  m.impl("native_dropout_backward", MTIA_FN(native_dropout_backward));
}

}  // namespace mtia::torch_backend
