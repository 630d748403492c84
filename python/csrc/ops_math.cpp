// Math on the SE's function ops: the trigonometric, hyperbolic, exponential and logarithmic
// families, rounding, sign, pow, atan2, hypot, copysign, the remainders and floor division,
// shifts, logaddexp, xlogy, fmax/fmin and heaviside.
//
// Each is one launch of the unary or binary kernel (or a short pointwise program); fp16 and
// bf16 compute in fp32 inside the SE and round once. Integer division by zero raises, as it
// does on the CPU.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/acos_meta.h>
#include <ATen/ops/acosh_meta.h>
#include <ATen/ops/asin_meta.h>
#include <ATen/ops/asinh_meta.h>
#include <ATen/ops/atan2_meta.h>
#include <ATen/ops/atan_meta.h>
#include <ATen/ops/atanh_meta.h>
#include <ATen/ops/bitwise_left_shift_meta.h>
#include <ATen/ops/bitwise_right_shift_meta.h>
#include <ATen/ops/ceil_meta.h>
#include <ATen/ops/copysign_meta.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/cosh_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/erfc_meta.h>
#include <ATen/ops/exp2_meta.h>
#include <ATen/ops/expm1_meta.h>
#include <ATen/ops/floor_divide_ops.h>
#include <ATen/ops/floor_meta.h>
#include <ATen/ops/fmax_meta.h>
#include <ATen/ops/fmin_meta.h>
#include <ATen/ops/fmod_meta.h>
#include <ATen/ops/frac_meta.h>
#include <ATen/ops/heaviside_meta.h>
#include <ATen/ops/hypot_meta.h>
#include <ATen/ops/lgamma_meta.h>
#include <ATen/ops/log10_meta.h>
#include <ATen/ops/log1p_meta.h>
#include <ATen/ops/log2_meta.h>
#include <ATen/ops/logaddexp2_meta.h>
#include <ATen/ops/logaddexp_meta.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/remainder_meta.h>
#include <ATen/ops/round_meta.h>
#include <ATen/ops/sgn_meta.h>
#include <ATen/ops/sign_meta.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/sinh_meta.h>
#include <ATen/ops/tan_meta.h>
#include <ATen/ops/trunc_meta.h>
#include <ATen/ops/xlogy_meta.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

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

// --- unary -------------------------------------------------------------------------------------

MTIA_UNARY_FLOAT(sin, MTIA_PE_SE_SIN)
MTIA_UNARY_FLOAT(cos, MTIA_PE_SE_COS)
MTIA_UNARY_FLOAT(tan, MTIA_PE_SE_TAN)
MTIA_UNARY_FLOAT(asin, MTIA_PE_SE_ASIN)
MTIA_UNARY_FLOAT(acos, MTIA_PE_SE_ACOS)
MTIA_UNARY_FLOAT(atan, MTIA_PE_SE_ATAN)
MTIA_UNARY_FLOAT(sinh, MTIA_PE_SE_SINH)
MTIA_UNARY_FLOAT(cosh, MTIA_PE_SE_COSH)
MTIA_UNARY_FLOAT(asinh, MTIA_PE_SE_ASINH)
MTIA_UNARY_FLOAT(acosh, MTIA_PE_SE_ACOSH)
MTIA_UNARY_FLOAT(atanh, MTIA_PE_SE_ATANH)
MTIA_UNARY_FLOAT(expm1, MTIA_PE_SE_EXPM1)
MTIA_UNARY_FLOAT(log1p, MTIA_PE_SE_LOG1P)
MTIA_UNARY_FLOAT(log2, MTIA_PE_SE_LOG2)
MTIA_UNARY_FLOAT(log10, MTIA_PE_SE_LOG10)
MTIA_UNARY_FLOAT(exp2, MTIA_PE_SE_EXP2)
MTIA_UNARY_FLOAT(erfc, MTIA_PE_SE_ERFC)
MTIA_UNARY_FLOAT(lgamma, MTIA_PE_SE_LGAMMA)
MTIA_UNARY_FLOAT(reciprocal, MTIA_PE_SE_RECIPROCAL)

// Rounding keeps the dtype; on integers it is a copy.
#define MTIA_ROUNDING(name, se_op)                                         \
  Tensor& name##_out(const Tensor& self, Tensor& out) {                    \
    OutOf<at::meta::structured_##name> m(out);                             \
    m.meta(self);                                                          \
    const ScalarType dt = m.common_dtype();                                \
    if (is_kernel_int(dt) || dt == at::kBool) {                            \
      write_into(out, m.input(0));                                         \
      return out;                                                          \
    }                                                                      \
    if (!is_kernel_float(dt)) {                                            \
      return run_on_cpu<ATEN_OP2(name, out)>(dtype_reason(dt), self, out); \
    }                                                                      \
    apply_unary(se_op, out, m.input(0), dt, dt);                           \
    return out;                                                            \
  }

MTIA_ROUNDING(floor, MTIA_PE_SE_FLOOR)
MTIA_ROUNDING(ceil, MTIA_PE_SE_CEIL)
MTIA_ROUNDING(trunc, MTIA_PE_SE_TRUNC)
MTIA_ROUNDING(round, MTIA_PE_SE_ROUND)
#undef MTIA_ROUNDING

// round(x * 10^d) / 10^d, in fp32 for the narrow dtypes (negative d: x / 10^-d, then times).
Tensor& round_decimals_out(const Tensor& self, int64_t decimals, Tensor& out) {
  OutOf<at::meta::structured_round_decimals> m(out);
  m.meta(self, decimals);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(round, decimals_out)>(dtype_reason(dt), self, decimals, out);
  }
  if (decimals == 0) return round_out(self, out);
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  const double scale = std::pow(10.0, double(std::abs(decimals)));
  const SeOp in = decimals > 0 ? SeOp(MTIA_PE_SE_MUL) : SeOp(MTIA_PE_SE_DIV);
  const SeOp back = decimals > 0 ? SeOp(MTIA_PE_SE_DIV) : SeOp(MTIA_PE_SE_MUL);
  apply_pointwise(out, {m.input(0)}, acc,
                  {{in, kT0, {kA, kImm}, scalar_bits(scale, acc)},
                   {MTIA_PE_SE_ROUND, kT0, {kT0}},
                   {back, kOut, {kT0, kImm}, scalar_bits(scale, acc)}});
  return out;
}

// x - trunc(x)
Tensor& frac_out(const Tensor& self, Tensor& out) {
  OutOf<at::meta::structured_frac> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) return run_on_cpu<ATEN_OP2(frac, out)>(dtype_reason(dt), self, out);
  using namespace pw;
  apply_pointwise(out, {m.input(0)}, dt,
                  {{MTIA_PE_SE_TRUNC, kT0, {kA}}, {MTIA_PE_SE_SUB, kOut, {kA, kT0}}});
  return out;
}

// sign and sgn (the same for real dtypes); on bool a copy.
template <class Meta, class Op>
Tensor& sign_impl(const Tensor& self, Tensor& out) {
  OutOf<Meta> m(out);
  m.meta(self);
  const ScalarType dt = m.common_dtype();
  if (dt == at::kBool) {
    write_into(out, m.input(0));
    return out;
  }
  if (!is_kernel_numeric(dt)) return run_on_cpu<Op>(dtype_reason(dt), self, out);
  apply_unary(MTIA_PE_SE_SIGN, out, m.input(0), dt, dt);
  return out;
}
Tensor& sign_out(const Tensor& self, Tensor& out) {
  return sign_impl<at::meta::structured_sign, ATEN_OP2(sign, out)>(self, out);
}
Tensor& sgn_out(const Tensor& self, Tensor& out) {
  return sign_impl<at::meta::structured_sgn, ATEN_OP2(sgn, out)>(self, out);
}

// --- binary ------------------------------------------------------------------------------------

// Raises when an integer divisor holds a zero, as the CPU kernels do (one device reduction
// and a read-back: integer division is rare in models, and an error must not come late).
void check_no_zero_divisor(const Tensor& divisor, ScalarType dt) {
  if (!is_kernel_int(dt)) return;
  if (is_cpu_scalar(divisor)) {
    TORCH_CHECK(divisor.item().toLong() != 0, "ZeroDivisionError");
    return;
  }
  if (divisor.numel() == 0) return;
  Tensor zero = empty_like_dtype(divisor, at::kBool);
  apply_binary(MTIA_PE_SE_EQ, zero, divisor, at::scalar_tensor(0, at::kLong), dt, at::kBool);
  Tensor any = empty_device({}, at::kBool);
  reduce_into(ReduceOp::kAmax, any, zero, {}, false);
  TORCH_CHECK(!any.item().toBool(), "ZeroDivisionError");
}

// Structured binary ops whose output dtype is the common dtype.
#define MTIA_BINARY(name, aten, meta_cls, op2, se_op, accepts, divides)           \
  Tensor& name##_into(const Tensor& self, const Tensor& other, Tensor& out) {     \
    OutOf<at::meta::meta_cls> m(out);                                             \
    m.meta(self, other);                                                          \
    const ScalarType dt = m.common_dtype();                                       \
    if (!accepts(dt)) {                                                           \
      return run_on_cpu<ATEN_OP2(aten, op2)>(dtype_reason(dt), self, other, out); \
    }                                                                             \
    if (divides) check_no_zero_divisor(m.input(1), dt);                           \
    apply_binary(se_op, out, m.input(0), m.input(1), dt, dt);                     \
    return out;                                                                   \
  }

MTIA_BINARY(atan2, atan2, structured_atan2, out, MTIA_PE_SE_ATAN2, is_kernel_float, false)
MTIA_BINARY(hypot, hypot, structured_hypot, out, MTIA_PE_SE_HYPOT, is_kernel_float, false)
MTIA_BINARY(copysign, copysign, structured_copysign_Tensor, out, MTIA_PE_SE_COPYSIGN,
            is_kernel_float, false)
MTIA_BINARY(fmod, fmod, structured_fmod_Tensor, Tensor_out, MTIA_PE_SE_FMOD, is_kernel_numeric,
            true)
MTIA_BINARY(remainder, remainder, structured_remainder_Tensor, Tensor_out, MTIA_PE_SE_REMAINDER,
            is_kernel_numeric, true)
MTIA_BINARY(left_shift, bitwise_left_shift, structured_bitwise_left_shift_Tensor, Tensor_out,
            MTIA_PE_SE_SHL, is_kernel_int, false)
MTIA_BINARY(right_shift, bitwise_right_shift, structured_bitwise_right_shift_Tensor, Tensor_out,
            MTIA_PE_SE_SHR, is_kernel_int, false)
#undef MTIA_BINARY

Tensor& pow_tensor_tensor_out(const Tensor& self, const Tensor& exponent, Tensor& out) {
  OutOf<at::meta::structured_pow_Tensor_Tensor> m(out);
  m.meta(self, exponent);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(pow, Tensor_Tensor_out)>(dtype_reason(dt), self, exponent, out);
  }
  apply_binary(MTIA_PE_SE_POW, out, m.input(0), m.input(1), dt, dt);
  return out;
}

// x ** s: s = 2 is x * x, s = 1 a copy, s = 0.5 sqrt, s = -1 reciprocal, as the CPU kernels
// special-case them; otherwise pow with an immediate exponent.
Tensor& pow_tensor_scalar_out(const Tensor& self, const c10::Scalar& exponent, Tensor& out) {
  OutOf<at::meta::structured_pow_Tensor_Scalar> m(out);
  m.meta(self, exponent);
  const ScalarType dt = out.scalar_type();
  if (!is_kernel_float(dt) || exponent.isComplex() || self.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP2(pow, Tensor_Scalar_out)>(dtype_reason(dt), self, exponent, out);
  }
  const double e = exponent.toDouble();
  if (e == 1.0) {
    write_into(out, self);
  } else if (e == 2.0) {
    apply_binary(MTIA_PE_SE_MUL, out, self, self, dt, dt);
  } else if (e == 0.5) {
    apply_unary(MTIA_PE_SE_SQRT, out, self, dt, dt);
  } else if (e == -1.0) {
    apply_unary(MTIA_PE_SE_RECIPROCAL, out, self, dt, dt);
  } else {
    apply_binary_scalar(MTIA_PE_SE_POW, out, self, exponent, dt);
  }
  return out;
}

Tensor& pow_scalar_out(const c10::Scalar& base, const Tensor& exponent, Tensor& out) {
  OutOf<at::meta::structured_pow_Scalar> m(out);
  m.meta(base, exponent);
  const ScalarType dt = out.scalar_type();
  if (!is_kernel_float(dt) || base.isComplex()) {
    return run_on_cpu<ATEN_OP2(pow, Scalar_out)>(dtype_reason(dt), base, exponent, out);
  }
  apply_binary(MTIA_PE_SE_POW, out, at::scalar_tensor(base, at::kDouble), exponent, dt, dt);
  return out;
}

Tensor& fmod_scalar_out(const Tensor& self, const c10::Scalar& other, Tensor& out) {
  return fmod_into(self, at::native::wrapped_scalar_tensor(other), out);
}
Tensor& remainder_scalar_out(const Tensor& self, const c10::Scalar& other, Tensor& out) {
  return remainder_into(self, at::native::wrapped_scalar_tensor(other), out);
}
Tensor remainder_scalar_tensor(const c10::Scalar& self, const Tensor& other) {
  const ScalarType dt = at::result_type(self, other);
  Tensor out = at::empty({0}, other.options().dtype(dt));
  return remainder_into(at::native::wrapped_scalar_tensor(self), other, out);
}

// div with rounding_mode: "floor" is the SE's floor division, "trunc" a division then trunc
// (on integers the SE's division already truncates).
Tensor& div_mode_out(const Tensor& self, const Tensor& other, c10::optional<c10::string_view> mode,
                     Tensor& out) {
  OutOf<at::meta::structured_div_Tensor_mode> m(out);
  m.meta(self, other, mode);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(div, out_mode)>(dtype_reason(dt), self, other, mode, out);
  }
  if (!mode.has_value()) {
    TORCH_CHECK(is_kernel_float(dt), "div without a rounding mode promotes integers");
    apply_binary(MTIA_PE_SE_DIV, out, m.input(0), m.input(1), dt, dt);
    return out;
  }
  check_no_zero_divisor(m.input(1), dt);
  if (*mode == "floor") {
    apply_binary(MTIA_PE_SE_FLOOR_DIV, out, m.input(0), m.input(1), dt, dt);
  } else if (is_kernel_int(dt)) {
    apply_binary(MTIA_PE_SE_DIV, out, m.input(0), m.input(1), dt, dt);
  } else {
    // The quotient rounds to the dtype before trunc, as on the CPU.
    Tensor q = empty_device(out.sizes(), dt);
    apply_binary(MTIA_PE_SE_DIV, q, m.input(0), m.input(1), dt, dt);
    apply_unary(MTIA_PE_SE_TRUNC, out, q, dt, dt);
  }
  return out;
}

Tensor& floor_divide_into(const Tensor& self, const Tensor& other, Tensor& out) {
  return div_mode_out(self, other, c10::string_view("floor"), out);
}
Tensor floor_divide(const Tensor& self, const Tensor& other) {
  Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)));
  return floor_divide_into(self, other, out);
}
Tensor& floor_divide_(Tensor& self, const Tensor& other) {
  return floor_divide_into(self, other, self);
}

// __lshift__ / __rshift__ and their in-place forms: the bitwise shifts on integers; floating
// tensors (x * 2^s) go to the CPU.
template <bool left>
Tensor shift(const Tensor& self, const Tensor& other) {
  const ScalarType dt = at::result_type(self, other);
  Tensor out = at::empty({0}, self.options().dtype(dt));
  if (!is_kernel_int(dt)) {
    if (left) return run_on_cpu<ATEN_OP2(__lshift__, Tensor)>(dtype_reason(dt), self, other);
    return run_on_cpu<ATEN_OP2(__rshift__, Tensor)>(dtype_reason(dt), self, other);
  }
  return left ? left_shift_into(self, other, out) : right_shift_into(self, other, out);
}
template <bool left>
Tensor shift_scalar(const Tensor& self, const c10::Scalar& other) {
  return shift<left>(self, at::native::wrapped_scalar_tensor(other));
}
template <bool left>
Tensor& shift_(Tensor& self, const Tensor& other) {
  const ScalarType dt = self.scalar_type();
  if (!is_kernel_int(dt)) {
    if (left) return run_on_cpu<ATEN_OP2(__ilshift__, Tensor)>(dtype_reason(dt), self, other);
    return run_on_cpu<ATEN_OP2(__irshift__, Tensor)>(dtype_reason(dt), self, other);
  }
  return left ? left_shift_into(self, other, self) : right_shift_into(self, other, self);
}
template <bool left>
Tensor& shift_scalar_(Tensor& self, const c10::Scalar& other) {
  return shift_<left>(self, at::native::wrapped_scalar_tensor(other));
}

// --- binary functions composed on the SE ------------------------------------------------------

// log(exp(a) + exp(b)) (base 2: log2(2^a + 2^b)) = max + log1p(exp(min - max)), and a itself
// where a and b are the same infinity (min - max would be NaN), as the CPU kernels do.
template <class Meta, class Op>
Tensor& logaddexp_impl(const Tensor& self, const Tensor& other, Tensor& out, bool base2) {
  OutOf<Meta> m(out);
  m.meta(self, other);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) return run_on_cpu<Op>(dtype_reason(dt), self, other, out);
  if (out.numel() == 0) return out;
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  const Tensor& a = m.input(0);
  const Tensor& b = m.input(1);
  Tensor d = empty_device(out.sizes(), acc);
  apply_pointwise(d, {a, b}, acc,
                  {{MTIA_PE_SE_MAX, kT0, {kA, kB}},
                   {MTIA_PE_SE_MIN, kT1, {kA, kB}},
                   {MTIA_PE_SE_SUB, kOut, {kT1, kT0}}});
  Tensor r = empty_device(out.sizes(), acc);
  std::vector<PwStep> steps = {{base2 ? MTIA_PE_SE_EXP2 : MTIA_PE_SE_EXP, kT0, {kA}},
                               {MTIA_PE_SE_LOG1P, kT0, {kT0}}};
  if (base2)
    steps.push_back({MTIA_PE_SE_MUL, kT0, {kT0, kImm}, scalar_bits(1 / std::log(2.0), acc)});
  steps.push_back({MTIA_PE_SE_MAX, kT1, {kB, kC}});
  steps.push_back({MTIA_PE_SE_ADD, kOut, {kT0, kT1}});
  apply_pointwise(r, {d, a, b}, acc, steps);
  const double inf = std::numeric_limits<double>::infinity();
  apply_pointwise(out, {r, a, b}, acc,
                  {{MTIA_PE_SE_EQ, kT0, {kB, kC}},
                   {MTIA_PE_SE_ABS, kT1, {kB}},
                   {MTIA_PE_SE_EQ, kT2, {kT1, kImm}, scalar_bits(inf, acc)},
                   {MTIA_PE_SE_LAND, kT0, {kT0, kT2}},
                   {MTIA_PE_SE_SELECT, kOut, {kT0, kB, kA}}});
  return out;
}
Tensor& logaddexp_into(const Tensor& self, const Tensor& other, Tensor& out) {
  return logaddexp_impl<at::meta::structured_logaddexp, ATEN_OP2(logaddexp, out)>(self, other, out,
                                                                                  false);
}
Tensor& logaddexp2_into(const Tensor& self, const Tensor& other, Tensor& out) {
  return logaddexp_impl<at::meta::structured_logaddexp2, ATEN_OP2(logaddexp2, out)>(self, other,
                                                                                    out, true);
}

// x * log(y): 0 where x is 0, NaN where y is NaN
Tensor& xlogy_into(const Tensor& self, const Tensor& other, Tensor& out) {
  OutOf<at::meta::structured_xlogy_Tensor> m(out);
  m.meta(self, other);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(xlogy, OutTensor)>(dtype_reason(dt), self, other, out);
  }
  using namespace pw;
  const ScalarType acc = acc_dtype(dt);
  apply_pointwise(out, {m.input(0), m.input(1)}, acc,
                  {{MTIA_PE_SE_LOG, kT0, {kB}},
                   {MTIA_PE_SE_MUL, kT0, {kA, kT0}},
                   {MTIA_PE_SE_EQ, kT1, {kA, kImm}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_SELECT, kT0, {kT1, kImm, kT0}, scalar_bits(0.0, acc)},
                   {MTIA_PE_SE_NE, kT1, {kB, kB}},
                   {MTIA_PE_SE_SELECT, kOut, {kT1, kB, kT0}}});
  return out;
}

// max/min that ignore a NaN operand (NaN only when both are)
template <class Meta, class Op>
Tensor& fmax_fmin(const Tensor& self, const Tensor& other, Tensor& out, bool max) {
  OutOf<Meta> m(out);
  m.meta(self, other);
  const ScalarType dt = m.common_dtype();
  if (is_kernel_int(dt)) {
    apply_binary(max ? MTIA_PE_SE_MAX : MTIA_PE_SE_MIN, out, m.input(0), m.input(1), dt, dt);
    return out;
  }
  if (!is_kernel_float(dt)) return run_on_cpu<Op>(dtype_reason(dt), self, other, out);
  using namespace pw;
  apply_pointwise(out, {m.input(0), m.input(1)}, dt,
                  {{max ? MTIA_PE_SE_MAX : MTIA_PE_SE_MIN, kT0, {kA, kB}},
                   {MTIA_PE_SE_NE, kT1, {kB, kB}},
                   {MTIA_PE_SE_SELECT, kT0, {kT1, kA, kT0}},
                   {MTIA_PE_SE_NE, kT1, {kA, kA}},
                   {MTIA_PE_SE_SELECT, kOut, {kT1, kB, kT0}}});
  return out;
}
Tensor& fmax_into(const Tensor& self, const Tensor& other, Tensor& out) {
  return fmax_fmin<at::meta::structured_fmax, ATEN_OP2(fmax, out)>(self, other, out, true);
}
Tensor& fmin_into(const Tensor& self, const Tensor& other, Tensor& out) {
  return fmax_fmin<at::meta::structured_fmin, ATEN_OP2(fmin, out)>(self, other, out, false);
}

// x == 0 ? values : (x > 0 ? 1 : 0)
Tensor& heaviside_into(const Tensor& self, const Tensor& values, Tensor& out) {
  OutOf<at::meta::structured_heaviside> m(out);
  m.meta(self, values);
  const ScalarType dt = m.common_dtype();
  if (!is_kernel_numeric(dt)) {
    return run_on_cpu<ATEN_OP2(heaviside, out)>(dtype_reason(dt), self, values, out);
  }
  using namespace pw;
  apply_pointwise(out, {m.input(0), m.input(1)}, dt,
                  {{MTIA_PE_SE_GT, kT0, {kA, kImm}, scalar_bits(0, dt)},
                   {MTIA_PE_SE_SELECT, kT1, {kT0, kImm, kB}, scalar_bits(1, dt)},
                   {MTIA_PE_SE_EQ, kT2, {kA, kImm}, scalar_bits(0, dt)},
                   {MTIA_PE_SE_LOR, kT2, {kT2, kT0}},
                   {MTIA_PE_SE_SELECT, kOut, {kT2, kT1, kImm}, scalar_bits(0, dt)}});
  return out;
}

}  // namespace

#define MTIA_OPS_math
#include "register_ops.inc"

}  // namespace mtia::torch_backend
