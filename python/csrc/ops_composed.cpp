// Ops composed from device ops the library already has: vector norms (linalg_vector_norm,
// norm) and cdist on the elementwise and reduction kernels; var_mean, std_mean, nansum and
// equal on the reductions; roll as DMA copies; vdot and addbmm on the matmul kernels.
//
// Each step is an at:: call on mtia tensors, so it runs on its own device kernel; the float32
// steps keep the narrow dtypes' sums in float32 as the CPU kernels do.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_cdist_forward_ops.h>
#include <ATen/ops/addbmm_ops.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/nansum_ops.h>
#include <ATen/ops/norm_ops.h>
#include <ATen/ops/roll_ops.h>
#include <ATen/ops/std_mean_ops.h>
#include <ATen/ops/var_mean_ops.h>
#include <ATen/ops/vdot_ops.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

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

// The reduced dims of a reduction over `dim` (empty or none: every dim).
std::vector<int64_t> reduced_dims(const Tensor& t, at::OptionalIntArrayRef dim) {
  std::vector<int64_t> dims;
  if (dim.has_value() && !dim->empty()) {
    for (int64_t d : *dim) dims.push_back(at::maybe_wrap_dim(d, std::max<int64_t>(t.dim(), 1)));
  }
  return dims;
}

// --- vector norms --------------------------------------------------------------------------

// ||x||_ord over dims, in float32: sum |x|^ord then the ord-th root (ord 2: x*x and sqrt; 1:
// |x|; inf/-inf: amax/amin of |x|; 0: the count of non-zeros). `out` is sized by the meta.
void vector_norm_into(const Tensor& self, double ord, at::OptionalIntArrayRef dim, bool keepdim,
                      const Tensor& out) {
  if (out.numel() == 0) return;
  const ScalarType acc = at::kFloat;
  const std::vector<int64_t> dims = reduced_dims(self, dim);
  Tensor x = self.dim() == 0 ? self.reshape({1}) : self;
  Tensor r = empty_device(out.sizes(), acc);
  if (x.numel() == 0) {  // an empty sum: 0 (the meta refuses inf norms of empty inputs)
    launch_fill(out, 0);
    return;
  }
  Tensor a = empty_device(x.sizes(), acc);
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == 0) {
    Tensor nz = empty_device(x.sizes(), at::kBool);
    apply_binary(MTIA_PE_SE_NE, nz, x, at::scalar_tensor(0.0, at::kDouble), x.scalar_type(),
                 at::kBool);
    write_into(a, nz);
  } else if (ord == 2) {
    apply_binary(MTIA_PE_SE_MUL, a, x, x, acc, acc);
  } else {
    apply_unary(MTIA_PE_SE_ABS, a, x, acc, acc);
    if (ord != 1 && std::abs(ord) != inf) apply_binary_scalar(MTIA_PE_SE_POW, a, a, ord, acc);
  }
  const ReduceOp op = ord == inf ? ReduceOp::kAmax : ord == -inf ? ReduceOp::kAmin : ReduceOp::kSum;
  reduce_into(op, r, a, dims, keepdim);
  if (ord == 2) {
    apply_unary(MTIA_PE_SE_SQRT, r, r, acc, acc);
  } else if (ord != 0 && ord != 1 && std::abs(ord) != inf) {
    apply_binary_scalar(MTIA_PE_SE_POW, r, r, 1.0 / ord, acc);
  }
  write_into(out, r);
}

Tensor& linalg_vector_norm_into(const Tensor& self, const c10::Scalar& ord,
                                at::OptionalIntArrayRef dim, bool keepdim,
                                std::optional<ScalarType> dtype, Tensor& out) {
  OutOf<at::meta::structured_linalg_vector_norm> m(out);
  m.meta(self, ord, dim, keepdim, dtype);
  const ScalarType in = self.scalar_type();
  if (!is_kernel_float(in) || !is_kernel_float(out.scalar_type()) || ord.isComplex()) {
    return run_on_cpu<ATEN_OP2(linalg_vector_norm, out)>(dtype_reason(in), self, ord, dim, keepdim,
                                                         dtype, out);
  }
  vector_norm_into(self, ord.toDouble(), dim, keepdim, out);
  return out;
}

Tensor& norm_dim_into(const Tensor& self, const std::optional<c10::Scalar>& p, at::IntArrayRef dim,
                      bool keepdim, Tensor& out) {
  const ScalarType in = self.scalar_type();
  if (!is_kernel_float(in)) {
    return run_on_cpu<ATEN_OP2(norm, out)>(dtype_reason(in), self, p, dim, keepdim, out);
  }
  return at::linalg_vector_norm_out(out, self, p.value_or(2), dim, keepdim, std::nullopt);
}

Tensor& norm_dtype_into(const Tensor& self, const std::optional<c10::Scalar>& p,
                        at::IntArrayRef dim, bool keepdim, ScalarType dtype, Tensor& out) {
  const ScalarType in = self.scalar_type();
  if (!is_kernel_float(in) || !is_kernel_float(dtype)) {
    return run_on_cpu<ATEN_OP2(norm, dtype_out)>(dtype_reason(is_kernel_float(in) ? dtype : in),
                                                 self, p, dim, keepdim, dtype, out);
  }
  return at::linalg_vector_norm_out(out, self, p.value_or(2), dim, keepdim, dtype);
}

// The p-norm distance between every row of x1 [..., P, M] and of x2 [..., R, M]: the
// differences broadcast to [..., P, R, M] on the device, then a vector norm over M.
Tensor cdist_forward(const Tensor& x1, const Tensor& x2, double p,
                     std::optional<int64_t> compute_mode) {
  check_device(x1, "cdist");
  check_device(x2, "cdist");
  const ScalarType dt = x1.scalar_type();
  if (!is_kernel_float(dt) || x2.scalar_type() != dt) {
    return run_on_cpu<ATEN_OP(_cdist_forward)>(dtype_reason(dt), x1, x2, p, compute_mode);
  }
  TORCH_CHECK(x1.dim() >= 2 && x2.dim() >= 2,
              "cdist only supports at least 2D tensors, X1 got: ", x1.dim(),
              "D, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1),
              "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
              " X2: ", x2.size(-1));
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  std::vector<int64_t> batch =
      at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  std::vector<int64_t> out_sizes = batch;
  out_sizes.push_back(x1.size(-2));
  out_sizes.push_back(x2.size(-2));
  Tensor out = at::empty(out_sizes, x1.options());
  if (out.numel() == 0) return out;
  if (x1.size(-1) == 0) {
    launch_fill(out, 0);
    return out;
  }
  // In float32 (the narrow dtypes round once, at the end).
  const Tensor a = as_dtype(x1, at::kFloat), b = as_dtype(x2, at::kFloat);
  // Euclidean distances through a matmul where the CPU takes that path (mode 1, or the
  // default for more than 25 rows): |a|^2 + |b|^2 - 2 a.b, clamped at 1e-30 before the sqrt.
  const int64_t mode = compute_mode.value_or(0);
  if (p == 2 && (mode == 1 || (mode == 0 && (x1.size(-2) > 25 || x2.size(-2) > 25)))) {
    Tensor na = at::sum(at::mul(a, a), -1, true);
    Tensor nb = at::sum(at::mul(b, b), -1, true);
    Tensor r =
        at::add(at::add(at::matmul(a, b.transpose(-1, -2)), na, -0.5), nb.transpose(-1, -2), -0.5);
    r = at::mul(r, -2.0);
    write_into(out, at::sqrt(at::clamp_min(r, 1e-30)));
    return out;
  }
  Tensor diff = at::sub(a.unsqueeze(-2), b.unsqueeze(-3));
  vector_norm_into(diff, p, at::IntArrayRef{-1}, false, out);
  return out;
}

// --- statistics ----------------------------------------------------------------------------

std::tuple<Tensor, Tensor> var_mean(const Tensor& self, at::OptionalIntArrayRef dim,
                                    const std::optional<c10::Scalar>& correction, bool keepdim) {
  check_device(self, "var_mean");
  if (!is_kernel_float(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(var_mean, correction)>(dtype_reason(self.scalar_type()), self, dim,
                                                      correction, keepdim);
  }
  return {at::var(self, dim, correction, keepdim), at::mean(self, dim, keepdim)};
}

std::tuple<Tensor, Tensor> std_mean(const Tensor& self, at::OptionalIntArrayRef dim,
                                    const std::optional<c10::Scalar>& correction, bool keepdim) {
  check_device(self, "std_mean");
  if (!is_kernel_float(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(std_mean, correction)>(dtype_reason(self.scalar_type()), self, dim,
                                                      correction, keepdim);
  }
  return {at::std(self, dim, correction, keepdim), at::mean(self, dim, keepdim)};
}

// sum with NaNs counted as 0
Tensor& nansum_into(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<ScalarType> dtype, Tensor& out) {
  check_device(self, "nansum");
  const ScalarType dt = self.scalar_type();
  if (!kernel_supports(dt)) {
    return run_on_cpu<ATEN_OP2(nansum, out)>(dtype_reason(dt), self, dim, keepdim, dtype, out);
  }
  Tensor clean = self;
  if (is_kernel_float(dt)) {
    clean = at::where(at::isnan(self), at::zeros({}, self.options()), self);
  }
  return at::sum_out(out, clean, dim, keepdim, dtype);
}

Tensor nansum(const Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
              std::optional<ScalarType> dtype) {
  Tensor out = at::empty(
      {0}, self.options().dtype(dtype.value_or(
               c10::isIntegralType(self.scalar_type(), true) ? at::kLong : self.scalar_type())));
  return nansum_into(self, dim, keepdim, dtype, out);
}

// Same sizes and every element equal (NaN is unequal), read back as one bool.
bool equal(const Tensor& self, const Tensor& other) {
  check_device(self, "equal");
  check_device(other, "equal");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "Expected object of scalar type ",
              self.scalar_type(), " but got scalar type ", other.scalar_type(),
              " for argument 'other'");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(equal)>(dtype_reason(self.scalar_type()), self, other);
  }
  if (!self.sizes().equals(other.sizes())) return false;
  if (self.numel() == 0) return true;
  return at::eq(self, other).all().item<bool>();
}

// --- layout ---------------------------------------------------------------------------------

// Each rolled dim is two DMA copies: the tail of the input to the front, the rest after it.
Tensor roll(const Tensor& self, c10::SymIntArrayRef shifts_sym, at::IntArrayRef dims) {
  check_device(self, "roll");
  std::vector<int64_t> shifts;
  for (const c10::SymInt& s : shifts_sym) shifts.push_back(s.expect_int());
  if (dims.empty()) {
    TORCH_CHECK(shifts.size() == 1, "shifts and dimensions must align. shifts: ", shifts.size(),
                ", dims:", dims.size());
    return roll(self.flatten(), shifts_sym, {0}).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(),
              "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  Tensor cur = self;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = at::maybe_wrap_dim(dims[i], self.dim());
    const int64_t n = self.size(d);
    Tensor next = at::empty_like(self, at::MemoryFormat::Contiguous);
    if (next.numel() == 0) return next;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) {
      next.copy_(cur);
    } else {
      next.narrow(d, s, n - s).copy_(cur.narrow(d, 0, n - s));
      next.narrow(d, 0, s).copy_(cur.narrow(d, n - s, s));
    }
    cur = next;
  }
  return cur;
}

// --- matmul ----------------------------------------------------------------------------------

// Real vdot is dot.
Tensor vdot(const Tensor& self, const Tensor& other) {
  check_device(self, "vdot");
  if (at::isComplexType(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(vdot)>(dtype_reason(self.scalar_type()), self, other);
  }
  return at::dot(self, other);
}

// beta * self + alpha * sum_b batch1[b] @ batch2[b]: the batch folded into k, one addmm.
Tensor& addbmm_into(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                    const c10::Scalar& beta, const c10::Scalar& alpha, Tensor& out) {
  check_device(self, "addbmm");
  const ScalarType dt = batch1.scalar_type();
  if (!is_kernel_float(dt)) {
    return run_on_cpu<ATEN_OP2(addbmm, out)>(dtype_reason(dt), self, batch1, batch2, beta, alpha,
                                             out);
  }
  TORCH_CHECK(batch1.dim() == 3 && batch2.dim() == 3, "batch1 and batch2 must be 3D tensors");
  TORCH_CHECK(batch1.size(0) == batch2.size(0) && batch1.size(2) == batch2.size(1),
              "batch1 and batch2 shapes cannot be multiplied (", batch1.sizes(), " and ",
              batch2.sizes(), ")");
  const int64_t b = batch1.size(0), n = batch1.size(1), k = batch1.size(2), p = batch2.size(2);
  Tensor a = batch1.permute({1, 0, 2}).reshape({n, b * k});
  Tensor m = batch2.reshape({b * k, p});
  return at::addmm_out(out, self, a, m, beta, alpha);
}

Tensor addbmm_new(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                  const c10::Scalar& beta, const c10::Scalar& alpha) {
  Tensor out = at::empty({0}, batch1.options());
  return addbmm_into(self, batch1, batch2, beta, alpha, out);
}
Tensor& addbmm_(Tensor& self, const Tensor& batch1, const Tensor& batch2, const c10::Scalar& beta,
                const c10::Scalar& alpha) {
  Tensor r = addbmm_new(self, batch1, batch2, beta, alpha);
  self.copy_(r);
  return self;
}

}  // namespace

#define MTIA_OPS_composed
#include "register_ops.inc"

}  // namespace mtia::torch_backend
