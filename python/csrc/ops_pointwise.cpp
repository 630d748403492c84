// Pointwise ATen ops on the unary, binary, binary_scalar, where and clamp kernels: arithmetic,
// relu, comparisons, logical and bitwise ops, the clamp family, NaN handling, where, addcmul,
// addcdiv and lerp.
//
// Structured ops run their PyTorch meta function (shapes, broadcasting, type promotion,
// out= checks) through OutOf and then launch; a dtype the kernels do not take goes to the
// CPU fallback for that call.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/abs_ops.h>
#include <ATen/ops/add_meta.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/bitwise_and_meta.h>
#include <ATen/ops/bitwise_not_meta.h>
#include <ATen/ops/bitwise_or_meta.h>
#include <ATen/ops/bitwise_xor_meta.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/logical_and_ops.h>
#include <ATen/ops/logical_not_ops.h>
#include <ATen/ops/logical_or_ops.h>
#include <ATen/ops/logical_xor_ops.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/minimum_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/ne_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/relu_ops.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/where_ops.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>

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

bool int_or_bool(ScalarType t) {
  return is_kernel_int(t) || t == at::kBool;
}

// --- unary ---------------------------------------------------------------------------------

MTIA_UNARY_FLOAT(exp, MTIA_PE_SE_EXP)
MTIA_UNARY_FLOAT(log, MTIA_PE_SE_LOG)
MTIA_UNARY_FLOAT(sqrt, MTIA_PE_SE_SQRT)
MTIA_UNARY_FLOAT(rsqrt, MTIA_PE_SE_RSQRT)
MTIA_UNARY_FLOAT(tanh, MTIA_PE_SE_TANH)
MTIA_UNARY_FLOAT(erf, MTIA_PE_SE_ERF)
MTIA_UNARY_FLOAT(sigmoid, MTIA_PE_SE_SIGMOID)
MTIA_UNARY_FLOAT(silu, MTIA_PE_SE_SILU)

Tensor& neg_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_neg> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) return run_on_cpu<ATEN_OP2(neg, out)>(dtype_reason(dt), self, out);
  apply_unary(MTIA_PE_SE_NEG, out, m.input(0), dt, dt);
  return out;
}

Tensor& bitwise_not_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_bitwise_not> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (!int_or_bool(dt)) {
    return run_on_cpu<ATEN_OP2(bitwise_not, out)>(dtype_reason(dt), self, out);
  }
  apply_unary(MTIA_PE_SE_BNOT, out, m.input(0), dt, dt);
  return out;
}

Tensor& abs_out(const Tensor& self, Tensor& out) {
  check_device(self, "abs");
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_numeric(dt)) return run_on_cpu<ATEN_OP2(abs, out)>(dtype_reason(dt), self, out);
  at::native::resize_output(out, self.sizes());
  apply_unary(MTIA_PE_SE_ABS, out, self, dt, dt);
  return out;
}

Tensor& logical_not_out(const Tensor& self, Tensor& out) {
  check_device(self, "logical_not");
  const ScalarType dt = self.scalar_type();
  if (!kernel_supports(dt) || !kernel_supports(out.scalar_type())) {
    return run_on_cpu<ATEN_OP2(logical_not, out)>(dtype_reason(dt), self, out);
  }
  at::native::resize_output(out, self.sizes());
  apply_unary(MTIA_PE_SE_LNOT, out, self, dt, at::kBool);
  return out;
}

Tensor relu(const Tensor& self) {
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_numeric(dt)) return run_on_cpu<ATEN_OP(relu)>(dtype_reason(dt), self);
  Tensor out = empty_like_dtype(self, dt);
  apply_unary(MTIA_PE_SE_RELU, out, self, dt, dt);
  return out;
}

Tensor& relu_(Tensor& self) {
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_numeric(dt)) return run_on_cpu<ATEN_OP(relu_)>(dtype_reason(dt), self);
  apply_unary(MTIA_PE_SE_RELU, self, self, dt, dt);
  return self;
}

// --- binary --------------------------------------------------------------------------------

// a + alpha * b (sub: a - alpha * b): one pointwise launch when the dtype computes in itself
// (the product rounds before the sum); the narrow float dtypes compute in float32 and round
// once, as the CPU kernels do.
Tensor& add_sub(SeOp op, at::TensorIteratorBase& m, Tensor& out, const c10::Scalar& alpha) {
  const ScalarType dt = m.common_dtype();
  const Tensor& a = m.input(0);
  Tensor b = m.input(1);
  if (alpha.isIntegral(true) && alpha.to<int64_t>() == 1) {
    apply_binary(op, out, a, b, dt, dt);
    return out;
  }
  const ScalarType acc = acc_dtype(dt);
  if (acc == dt && !is_cpu_scalar(a) && !is_cpu_scalar(b)) {
    using namespace pw;
    apply_pointwise(
        out, {a, b}, dt,
        {{MTIA_PE_SE_MUL, kT0, {kB, kImm}, scalar_bits(alpha, dt)}, {op, kOut, {kA, kT0}}});
    return out;
  }
  if (is_cpu_scalar(b)) {
    b = c10::isIntegralType(dt, true)
            ? at::scalar_tensor(b.item().toLong() * alpha.toLong(), at::kLong)
            : at::scalar_tensor(b.item().toDouble() * alpha.toDouble(), at::kDouble);
  } else {
    Tensor scaled = empty_device(out.sizes(), acc);
    apply_binary_scalar(MTIA_PE_SE_MUL, scaled, b, alpha, acc);
    b = scaled;
  }
  Tensor r = acc == dt ? out : empty_device(out.sizes(), acc);
  apply_binary(op, r, a, b, acc, acc);
  write_into(out, r);
  return out;
}

Tensor& add_out(const Tensor& self, const Tensor& other, const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_add_Tensor> m(out);
  m.meta(self, other, alpha);
  if (m.common_dtype() == at::kBool && out.scalar_type() == at::kBool) {
    // bool + alpha * bool is logical or, or just self when alpha is False.
    if (alpha.toBool()) {
      apply_binary(MTIA_PE_SE_LOR, out, m.input(0), m.input(1), at::kBool, at::kBool);
    } else {
      write_into(out, m.input(0));
    }
    return out;
  }
  if (!is_kernel_numeric(m.common_dtype())) {
    return run_on_cpu<ATEN_OP2(add, out)>(dtype_reason(m.common_dtype()), self, other, alpha, out);
  }
  return add_sub(MTIA_PE_SE_ADD, m, out, alpha);
}

Tensor& sub_out(const Tensor& self, const Tensor& other, const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_sub_Tensor> m(out);
  m.meta(self, other, alpha);
  if (!is_kernel_numeric(m.common_dtype())) {
    return run_on_cpu<ATEN_OP2(sub, out)>(dtype_reason(m.common_dtype()), self, other, alpha, out);
  }
  return add_sub(MTIA_PE_SE_SUB, m, out, alpha);
}

Tensor rsub(const Tensor& self, const Tensor& other, const c10::Scalar& alpha) {
  return at::sub(other, self, alpha);
}

// Structured binary ops whose output dtype is the common dtype; on bool, mul and minimum are
// logical and, maximum logical or.
#define MTIA_BINARY(name, meta_cls, se_op, accepts, bool_op)                      \
  Tensor& name##_out(const Tensor& self, const Tensor& other, Tensor& out) {      \
    OutOf<at::meta::meta_cls> m(out);                                             \
    m.meta(self, other);                                                          \
    const ScalarType dt = m.common_dtype();                                       \
    if (dt == at::kBool && (bool_op) >= 0) {                                      \
      apply_binary(bool_op, out, m.input(0), m.input(1), dt, dt);                 \
      return out;                                                                 \
    }                                                                             \
    if (!accepts(dt)) {                                                           \
      return run_on_cpu<ATEN_OP2(name, out)>(dtype_reason(dt), self, other, out); \
    }                                                                             \
    apply_binary(se_op, out, m.input(0), m.input(1), dt, dt);                     \
    return out;                                                                   \
  }

MTIA_BINARY(mul, structured_mul_Tensor, MTIA_PE_SE_MUL, is_kernel_numeric, MTIA_PE_SE_LAND)
MTIA_BINARY(div, structured_div_Tensor, MTIA_PE_SE_DIV, is_kernel_float, -1)
MTIA_BINARY(maximum, structured_maximum, MTIA_PE_SE_MAX, is_kernel_numeric, MTIA_PE_SE_LOR)
MTIA_BINARY(minimum, structured_minimum, MTIA_PE_SE_MIN, is_kernel_numeric, MTIA_PE_SE_LAND)
#undef MTIA_BINARY

#define MTIA_BITWISE(name, se_op)                                                        \
  Tensor& name##_out(const Tensor& self, const Tensor& other, Tensor& out) {             \
    OutOf<at::meta::structured_##name##_Tensor> m(out);                                  \
    m.meta(self, other);                                                                 \
    const ScalarType dt = m.common_dtype();                                              \
    if (!int_or_bool(dt)) {                                                              \
      return run_on_cpu<ATEN_OP2(name, Tensor_out)>(dtype_reason(dt), self, other, out); \
    }                                                                                    \
    apply_binary(se_op, out, m.input(0), m.input(1), dt, dt);                            \
    return out;                                                                          \
  }

MTIA_BITWISE(bitwise_and, MTIA_PE_SE_BAND)
MTIA_BITWISE(bitwise_or, MTIA_PE_SE_BOR)
MTIA_BITWISE(bitwise_xor, MTIA_PE_SE_BXOR)
#undef MTIA_BITWISE

// Comparisons: out bool (or a cast of it), compared in the common dtype.
#define MTIA_COMPARE(name, se_op)                                                        \
  Tensor& name##_tensor_out(const Tensor& self, const Tensor& other, Tensor& out) {      \
    OutOf<at::meta::structured_##name##_Tensor> m(out);                                  \
    m.meta(self, other);                                                                 \
    const ScalarType dt = m.common_dtype();                                              \
    if (!kernel_supports(dt) || !kernel_supports(out.scalar_type())) {                   \
      return run_on_cpu<ATEN_OP2(name, Tensor_out)>(dtype_reason(dt), self, other, out); \
    }                                                                                    \
    apply_binary(se_op, out, m.input(0), m.input(1), dt, at::kBool);                     \
    return out;                                                                          \
  }                                                                                      \
  Tensor& name##_scalar_out(const Tensor& self, const c10::Scalar& other, Tensor& out) { \
    OutOf<at::meta::structured_##name##_Scalar> m(out);                                  \
    m.meta(self, other);                                                                 \
    const ScalarType dt = m.common_dtype();                                              \
    if (!kernel_supports(dt) || !kernel_supports(out.scalar_type())) {                   \
      return run_on_cpu<ATEN_OP2(name, Scalar_out)>(dtype_reason(dt), self, other, out); \
    }                                                                                    \
    apply_binary(se_op, out, m.input(0), m.input(1), dt, at::kBool);                     \
    return out;                                                                          \
  }

MTIA_COMPARE(eq, MTIA_PE_SE_EQ)
MTIA_COMPARE(ne, MTIA_PE_SE_NE)
MTIA_COMPARE(lt, MTIA_PE_SE_LT)
MTIA_COMPARE(le, MTIA_PE_SE_LE)
MTIA_COMPARE(gt, MTIA_PE_SE_GT)
MTIA_COMPARE(ge, MTIA_PE_SE_GE)
#undef MTIA_COMPARE

// logical_and/or/xor are not structured: broadcasting and the out resize by hand. Operands are
// compared with zero in their common dtype.
template <class Op>
Tensor& logical_out(SeOp se_op, const Tensor& self, const Tensor& other, Tensor& out) {
  check_device(self, "logical op", true);
  check_device(other, "logical op", true);
  const ScalarType dt = at::result_type(self, other);
  if (!kernel_supports(dt) || !kernel_supports(out.scalar_type())) {
    return run_on_cpu<Op>(dtype_reason(dt), self, other, out);
  }
  at::native::resize_output(out, at::infer_size(self.sizes(), other.sizes()));
  apply_binary(se_op, out, self, other, dt, at::kBool);
  return out;
}

Tensor& logical_and_out(const Tensor& s, const Tensor& o, Tensor& out) {
  return logical_out<ATEN_OP2(logical_and, out)>(MTIA_PE_SE_LAND, s, o, out);
}
Tensor& logical_or_out(const Tensor& s, const Tensor& o, Tensor& out) {
  return logical_out<ATEN_OP2(logical_or, out)>(MTIA_PE_SE_LOR, s, o, out);
}
Tensor& logical_xor_out(const Tensor& s, const Tensor& o, Tensor& out) {
  return logical_out<ATEN_OP2(logical_xor, out)>(MTIA_PE_SE_LXOR, s, o, out);
}

// --- clamp -----------------------------------------------------------------------------------

// The bit pattern of the lowest (or highest) value of `t`: -inf/+inf for floats.
uint64_t bound_bits(ScalarType t, bool high) {
  switch (t) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16: {
      const double inf = std::numeric_limits<double>::infinity();
      return scalar_bits(high ? inf : -inf, t);
    }
    case at::kChar:
      return scalar_bits(high ? 127 : -128, t);
    case at::kInt:
      return scalar_bits(
          high ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::min(), t);
    default:
      return scalar_bits(
          high ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min(), t);
  }
}

bool is_nan(const c10::optional<c10::Scalar>& s) {
  return s.has_value() && s->isFloatingPoint() && std::isnan(s->toDouble());
}

void clamp_impl(at::TensorIteratorBase& m, const Tensor& out, const c10::optional<c10::Scalar>& lo,
                const c10::optional<c10::Scalar>& hi) {
  const ScalarType dt = m.common_dtype();
  const uint64_t lo_bits = lo ? scalar_bits(*lo, dt) : bound_bits(dt, false);
  const uint64_t hi_bits = hi ? scalar_bits(*hi, dt) : bound_bits(dt, true);
  const Tensor a = as_dtype(m.input(0), dt);
  const Tensor target = out.scalar_type() == dt ? out : empty_like_dtype(out, dt);
  launch_clamp(target, a, lo_bits, hi_bits);
  write_into(out, target);
}

Tensor& clamp_out(const Tensor& self, const c10::optional<c10::Scalar>& lo,
                  const c10::optional<c10::Scalar>& hi, Tensor& out) {
  OutOf<at::meta::structured_clamp> m(out);
  m.meta(self, lo ? at::OptionalScalarRef(&*lo) : at::OptionalScalarRef(),
         hi ? at::OptionalScalarRef(&*hi) : at::OptionalScalarRef());
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt) || is_nan(lo) || is_nan(hi)) {
    // A NaN bound makes every result NaN; the CPU kernel has that rule.
    return run_on_cpu<ATEN_OP2(clamp, out)>(
        is_kernel_numeric(dt) ? std::string("a NaN bound") : dtype_reason(dt), self, lo, hi, out);
  }
  clamp_impl(m, out, lo, hi);
  return out;
}

Tensor& clamp_min_out(const Tensor& self, const c10::Scalar& lo, Tensor& out) {
  OutOf<at::meta::structured_clamp_min> m(out);
  m.meta(self, lo);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt) || is_nan(lo)) {
    return run_on_cpu<ATEN_OP2(clamp_min, out)>(dtype_reason(dt), self, lo, out);
  }
  clamp_impl(m, out, lo, c10::nullopt);
  return out;
}

Tensor& clamp_max_out(const Tensor& self, const c10::Scalar& hi, Tensor& out) {
  OutOf<at::meta::structured_clamp_max> m(out);
  m.meta(self, hi);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt) || is_nan(hi)) {
    return run_on_cpu<ATEN_OP2(clamp_max, out)>(dtype_reason(dt), self, hi, out);
  }
  clamp_impl(m, out, c10::nullopt, hi);
  return out;
}

// Tensor bounds: max with the lower, then min with the upper (NaN propagates through both).
Tensor& clamp_tensor_out(const Tensor& self, const c10::optional<Tensor>& lo,
                         const c10::optional<Tensor>& hi, Tensor& out) {
  OutOf<at::meta::structured_clamp_Tensor> m(out);
  m.meta(self, lo ? at::OptionalTensorRef(*lo) : at::OptionalTensorRef(),
         hi ? at::OptionalTensorRef(*hi) : at::OptionalTensorRef());
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(clamp, Tensor_out)>(dtype_reason(dt), self, lo, hi, out);
  }
  Tensor acc = empty_device(out.sizes(), dt);
  write_into(acc, self);
  if (lo && lo->defined()) apply_binary(MTIA_PE_SE_MAX, acc, acc, *lo, dt, dt);
  if (hi && hi->defined()) apply_binary(MTIA_PE_SE_MIN, acc, acc, *hi, dt, dt);
  write_into(out, acc);
  return out;
}

Tensor& clamp_min_tensor_out(const Tensor& self, const Tensor& lo, Tensor& out) {
  OutOf<at::meta::structured_clamp_min_Tensor> m(out);
  m.meta(self, lo);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(clamp_min, Tensor_out)>(dtype_reason(dt), self, lo, out);
  }
  apply_binary(MTIA_PE_SE_MAX, out, m.input(0), m.input(1), dt, dt);
  return out;
}

Tensor& clamp_max_tensor_out(const Tensor& self, const Tensor& hi, Tensor& out) {
  OutOf<at::meta::structured_clamp_max_Tensor> m(out);
  m.meta(self, hi);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(clamp_max, Tensor_out)>(dtype_reason(dt), self, hi, out);
  }
  apply_binary(MTIA_PE_SE_MIN, out, m.input(0), m.input(1), dt, dt);
  return out;
}

// --- NaN handling --------------------------------------------------------------------------

// isnan: x != x (only a NaN is unequal to itself); never true for integers and bool.
Tensor isnan_device(const Tensor& self) {
  Tensor out = empty_like_dtype(self, at::kBool);
  const ScalarType dt = self.scalar_type();
  if (is_kernel_float(dt)) {
    apply_binary(MTIA_PE_SE_NE, out, self, self, dt, at::kBool);
  } else if (kernel_supports(dt)) {
    launch_fill(out, 0);
  } else {
    return run_on_cpu<ATEN_OP(isnan)>(dtype_reason(dt), self);
  }
  return out;
}

// The largest finite value of a floating kernel dtype.
double finite_max(ScalarType t) {
  switch (t) {
    case at::kHalf:
      return double(std::numeric_limits<c10::Half>::max());
    case at::kBFloat16:
      return double(std::numeric_limits<c10::BFloat16>::max());
    default:
      return double(std::numeric_limits<float>::max());
  }
}

// NaN -> nan, +inf -> posinf, -inf -> neginf (defaults 0 and the dtype's finite extremes):
// a mask and a select for each.
Tensor& nan_to_num_out(const Tensor& self, c10::optional<double> nan, c10::optional<double> posinf,
                       c10::optional<double> neginf, Tensor& out) {
  check_device(self, "nan_to_num");
  const ScalarType dt = self.scalar_type();
  if (!kernel_supports(dt) || out.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(nan_to_num, out)>(dtype_reason(dt), self, nan, posinf, neginf, out);
  }
  at::native::resize_output(out, self.sizes());
  if (!is_kernel_float(dt)) {
    write_into(out, self);
    return out;
  }
  Tensor acc = empty_like_dtype(self, dt);
  write_into(acc, self);
  launch_where(acc, isnan_device(self), device_scalar(nan.value_or(0.0), dt), acc);
  const double inf = std::numeric_limits<double>::infinity();
  const std::pair<double, double> infinities[] = {{inf, posinf.value_or(finite_max(dt))},
                                                  {-inf, neginf.value_or(-finite_max(dt))}};
  Tensor mask = empty_like_dtype(self, at::kBool);
  for (const auto& [value, replacement] : infinities) {
    apply_binary(MTIA_PE_SE_EQ, mask, self, at::scalar_tensor(value, at::kDouble), dt, at::kBool);
    launch_where(acc, mask, device_scalar(replacement, dt), acc);
  }
  write_into(out, acc);
  return out;
}

// --- where, addcmul, addcdiv -----------------------------------------------------------------

Tensor& where_out(const Tensor& cond, const Tensor& self, const Tensor& other, Tensor& out) {
  check_device(cond, "where", true);
  check_device(self, "where", true);
  check_device(other, "where", true);
  const ScalarType dt = at::result_type(self, other);
  if (!kernel_supports(dt) || !kernel_supports(cond.scalar_type()) ||
      !kernel_supports(out.scalar_type())) {
    return run_on_cpu<ATEN_OP2(where, self_out)>(dtype_reason(dt), cond, self, other, out);
  }
  TORCH_CHECK(cond.scalar_type() == at::kBool || cond.scalar_type() == at::kByte,
              "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              cond.scalar_type());
  at::native::resize_output(
      out, at::infer_size(at::infer_size(cond.sizes(), self.sizes()), other.sizes()));
  if (out.numel() == 0) return out;
  auto dev = [&](const Tensor& t, ScalarType d) {
    return is_cpu_scalar(t) ? device_scalar(t.item(), d) : as_dtype(t, d);
  };
  const Tensor c = dev(cond, at::kBool);
  const Tensor target = out.scalar_type() == dt ? out : empty_like_dtype(out, dt);
  launch_where(target, c, dev(self, dt), dev(other, dt));
  write_into(out, target);
  return out;
}

Tensor where_self(const Tensor& cond, const Tensor& self, const Tensor& other) {
  const ScalarType dt = at::result_type(self, other);
  Tensor out = empty_device({0}, dt);
  return where_out(cond, self, other, out);
}

// self + value * t1 op t2, op = mul or div, in float32 for the narrow dtypes.
void addc_impl(SeOp op, at::TensorIteratorBase& m, const Tensor& out, const c10::Scalar& value) {
  const ScalarType acc = acc_dtype(m.common_dtype());
  Tensor prod = empty_device(out.sizes(), acc);
  apply_binary_scalar(MTIA_PE_SE_MUL, prod, m.input(1), value, acc);
  apply_binary(op, prod, prod, m.input(2), acc, acc);
  apply_binary(MTIA_PE_SE_ADD, prod, m.input(0), prod, acc, acc);
  write_into(out, prod);
}

Tensor& addcmul_out(const Tensor& self, const Tensor& t1, const Tensor& t2,
                    const c10::Scalar& value, Tensor& out) {
  OutOf<at::meta::structured_addcmul> m(out);
  m.meta(self, t1, t2, value);
  if (!is_kernel_numeric(m.common_dtype())) {
    return run_on_cpu<ATEN_OP2(addcmul, out)>(dtype_reason(m.common_dtype()), self, t1, t2, value,
                                              out);
  }
  addc_impl(MTIA_PE_SE_MUL, m, out, value);
  return out;
}

Tensor& addcdiv_out(const Tensor& self, const Tensor& t1, const Tensor& t2,
                    const c10::Scalar& value, Tensor& out) {
  OutOf<at::meta::structured_addcdiv> m(out);
  m.meta(self, t1, t2, value);
  if (!is_kernel_float(m.common_dtype())) {
    return run_on_cpu<ATEN_OP2(addcdiv, out)>(dtype_reason(m.common_dtype()), self, t1, t2, value,
                                              out);
  }
  addc_impl(MTIA_PE_SE_DIV, m, out, value);
  return out;
}

// --- lerp (one pointwise launch; Adam's and AdamW's moment updates) -----------------------

// self + w * (end - self) for |w| < 0.5, else end - (end - self) * (1 - w): the two forms
// PyTorch's kernels use, each exact at its end of the interval.
Tensor& lerp_scalar_out(const Tensor& self, const Tensor& end, const c10::Scalar& weight,
                        Tensor& out) {
  OutOf<at::meta::structured_lerp_Scalar> m(out);
  m.meta(self, end, weight);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(lerp, Scalar_out)>(dtype_reason(dt), self, end, weight, out);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  const double w = weight.toDouble();
  const bool from_self = std::abs(w) < 0.5;
  apply_pointwise(out, {self, end}, acc,
                  {{MTIA_PE_SE_SUB, kT0, {kB, kA}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kImm}, scalar_bits(from_self ? w : 1.0 - w, acc)},
                   from_self ? PwStep{MTIA_PE_SE_ADD, kOut, {kA, kT0}}
                             : PwStep{MTIA_PE_SE_SUB, kOut, {kB, kT0}}});
  return out;
}

// self + weight * (end - self), with a tensor of weights.
Tensor& lerp_tensor_out(const Tensor& self, const Tensor& end, const Tensor& weight, Tensor& out) {
  OutOf<at::meta::structured_lerp_Tensor> m(out);
  m.meta(self, end, weight);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(lerp, Tensor_out)>(dtype_reason(dt), self, end, weight, out);
  }
  using namespace pw;
  apply_pointwise(out, {self, end, weight}, acc_dtype(dt),
                  {{MTIA_PE_SE_SUB, kT0, {kB, kA}},
                   {MTIA_PE_SE_MUL, kT0, {kT0, kC}},
                   {MTIA_PE_SE_ADD, kOut, {kA, kT0}}});
  return out;
}

}  // namespace

#define MTIA_OPS_pointwise
#include "register_ops.inc"

}  // namespace mtia::torch_backend
