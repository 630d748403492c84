// Matrix products on the matmul, bmm and addmm kernels: mm, addmm, bmm, baddbmm for float32,
// float16 and bfloat16 (the DPE accumulates in float32), and _int_mm for int8 (int32
// accumulation, exact). Operands keep their strides: the kernels load transposed operands as
// they lie (x @ W.T needs no copy).
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_int_mm_ops.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm_meta.h>
#include <torch/library.h>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::ScalarType;
using at::Tensor;

// Output elements per PE before another PE is worth it (a 64 x 128 tile).
constexpr int64_t kMatmulItemsPerPe = 8192;

bool matmul_dtypes_ok(const Tensor& a, const Tensor& b, const Tensor& out) {
  const ScalarType t = a.scalar_type();
  return is_kernel_float(t) && b.scalar_type() == t && out.scalar_type() == t;
}

// c[m, n] = a[m, k] @ b[k, n]; c may have another (kernel) dtype than a and b.
void launch_matmul(const Tensor& c, const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  if (m == 0 || n == 0) return;
  launch("matmul", grid_for(m * n, kMatmulItemsPerPe),
         {tensor_address(c), tensor_address(a), tensor_address(b), dtype_arg(a.scalar_type()),
          dtype_arg(c.scalar_type()), m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
          c.stride(0), c.stride(1)});
}

void launch_bmm(const Tensor& c, const Tensor& a, const Tensor& b) {
  const int64_t batch = a.size(0), m = a.size(1), k = a.size(2), n = b.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  launch("bmm", grid_for(batch * m * n, kMatmulItemsPerPe),
         {tensor_address(c), tensor_address(a), tensor_address(b), dtype_arg(a.scalar_type()),
          dtype_arg(c.scalar_type()), batch, m, n, k, a.stride(0), a.stride(1), a.stride(2),
          b.stride(0), b.stride(1), b.stride(2), c.stride(0), c.stride(1), c.stride(2)});
}

Tensor& mm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  OutOf<at::meta::structured_mm> m(out);
  m.meta(self, mat2);
  if (!matmul_dtypes_ok(self, mat2, out)) {
    return run_on_cpu<ATEN_OP2(mm, out)>(dtype_reason(self.scalar_type()), self, mat2, out);
  }
  launch_matmul(out, self, mat2);
  return out;
}

Tensor& addmm_out(const Tensor& self, const Tensor& mat1, const Tensor& mat2,
                  const c10::Scalar& beta, const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_addmm> meta(out);
  meta.meta(self, mat1, mat2, beta, alpha);
  if (!matmul_dtypes_ok(mat1, mat2, out) || !kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(addmm, out)>(dtype_reason(mat1.scalar_type()), self, mat1, mat2,
                                            beta, alpha, out);
  }
  const int64_t m = mat1.size(0), k = mat1.size(1), n = mat2.size(1);
  if (m == 0 || n == 0) return out;
  // The bias in the output's dtype, broadcast to [m, n] with zero strides.
  const Tensor bias = as_dtype(self, out.scalar_type()).expand({m, n});
  launch("addmm", grid_for(m * n, kMatmulItemsPerPe),
         {tensor_address(out), tensor_address(bias), tensor_address(mat1), tensor_address(mat2),
          dtype_arg(mat1.scalar_type()), dtype_arg(out.scalar_type()), m, n, k, alpha.to<float>(),
          beta.to<float>(), bias.stride(0), bias.stride(1), mat1.stride(0), mat1.stride(1),
          mat2.stride(0), mat2.stride(1), out.stride(0), out.stride(1)});
  return out;
}

// beta * self + alpha * (mat @ vec): addmm with n = 1.
Tensor& addmv_out(const Tensor& self, const Tensor& mat, const Tensor& vec, const c10::Scalar& beta,
                  const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_addmv> meta(out);
  meta.meta(self, mat, vec, beta, alpha);
  if (!matmul_dtypes_ok(mat, vec, out) || !kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(addmv, out)>(dtype_reason(mat.scalar_type()), self, mat, vec, beta,
                                            alpha, out);
  }
  const int64_t m = mat.size(0), k = mat.size(1);
  if (m == 0) return out;
  const Tensor bias = as_dtype(self, out.scalar_type()).expand({m});
  launch("addmm", grid_for(m, kMatmulItemsPerPe),
         {tensor_address(out), tensor_address(bias), tensor_address(mat), tensor_address(vec),
          dtype_arg(mat.scalar_type()), dtype_arg(out.scalar_type()), m, int64_t{1}, k,
          alpha.to<float>(), beta.to<float>(), bias.stride(0), int64_t{0}, mat.stride(0),
          mat.stride(1), vec.stride(0), int64_t{0}, out.stride(0), int64_t{0}});
  return out;
}

// The inner product of two vectors: a 1 x k by k x 1 matmul.
Tensor dot(const Tensor& self, const Tensor& other) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(),
              "D and ", other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(),
              "dot : expected both vectors to have same dtype, but found ", self.scalar_type(),
              " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [",
              self.numel(), "] and src [", other.numel(),
              "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
  if (!is_kernel_float(self.scalar_type())) {
    return run_on_cpu<ATEN_OP(dot)>(dtype_reason(self.scalar_type()), self, other);
  }
  Tensor out = empty_device({}, self.scalar_type());
  const int64_t k = self.numel();
  launch("matmul", mtia::Grid{1, 1},
         {tensor_address(out), tensor_address(self), tensor_address(other),
          dtype_arg(self.scalar_type()), dtype_arg(out.scalar_type()), int64_t{1}, int64_t{1}, k,
          int64_t{0}, self.stride(0), other.stride(0), int64_t{0}, int64_t{0}, int64_t{0}});
  return out;
}

Tensor& bmm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  OutOf<at::meta::structured_bmm> m(out);
  m.meta(self, mat2);
  if (!matmul_dtypes_ok(self, mat2, out)) {
    return run_on_cpu<ATEN_OP2(bmm, out)>(dtype_reason(self.scalar_type()), self, mat2, out);
  }
  launch_bmm(out, self, mat2);
  return out;
}

// beta * self + alpha * (batch1 @ batch2), the product accumulated in float32.
Tensor& baddbmm_out(const Tensor& self, const Tensor& batch1, const Tensor& batch2,
                    const c10::Scalar& beta, const c10::Scalar& alpha, Tensor& out) {
  OutOf<at::meta::structured_baddbmm> m(out);
  m.meta(self, batch1, batch2, beta, alpha);
  if (!matmul_dtypes_ok(batch1, batch2, out) || !kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(baddbmm, out)>(dtype_reason(batch1.scalar_type()), self, batch1,
                                              batch2, beta, alpha, out);
  }
  if (out.numel() == 0) return out;
  Tensor prod = empty_device(out.sizes(), at::kFloat);
  launch_bmm(prod, batch1, batch2);
  if (!(alpha.isIntegral(true) && alpha.toLong() == 1)) {
    apply_binary_scalar(MTIA_PE_SE_MUL, prod, prod, alpha, at::kFloat);
  }
  if (beta.toComplexDouble() != 0.0) {
    Tensor scaled = empty_device(out.sizes(), at::kFloat);
    apply_binary_scalar(MTIA_PE_SE_MUL, scaled, self, beta, at::kFloat);
    apply_binary(MTIA_PE_SE_ADD, prod, prod, scaled, at::kFloat, at::kFloat);
  }
  write_into(out, prod);
  return out;
}

// int8 @ int8 -> int32 on the DPE's int8 path: torch._int_mm, which int8 linear layers
// (dynamic quantization in torch.ao and torchao) call. uint8 operands take the CPU.
Tensor& int_mm_out(const Tensor& self, const Tensor& mat2, Tensor& out) {
  TORCH_CHECK(self.dim() == 2, "_int_mm: expected self to be of dimension 2 but got ", self.dim());
  TORCH_CHECK(mat2.dim() == 2, "_int_mm: expected mat2 to be of dimension 2 but got ", mat2.dim());
  TORCH_CHECK(self.size(1) == mat2.size(0), "_int_mm: self.size(1) needs to match mat2.size(0) ",
              "but got ", self.size(1), " and ", mat2.size(0));
  TORCH_CHECK(out.scalar_type() == at::kInt, "_int_mm: expected out to be int32 but got ",
              out.scalar_type());
  if (self.scalar_type() != at::kChar || mat2.scalar_type() != at::kChar) {
    TORCH_CHECK(self.scalar_type() == mat2.scalar_type() &&
                    (self.scalar_type() == at::kChar || self.scalar_type() == at::kByte),
                "_int_mm: expected int8 or uint8 operands of one dtype but got ",
                self.scalar_type(), " and ", mat2.scalar_type());
    return run_on_cpu<ATEN_OP2(_int_mm, out)>(dtype_reason(self.scalar_type()), self, mat2, out);
  }
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  if (self.size(1) == 0) {
    if (out.numel() > 0) launch_fill(out, 0);
    return out;
  }
  launch_matmul(out, self, mat2);
  return out;
}

Tensor int_mm(const Tensor& self, const Tensor& mat2) {
  Tensor out = empty_device({0}, at::kInt);
  int_mm_out(self, mat2, out);
  return out;
}

}  // namespace

#define MTIA_OPS_matmul
#include "register_ops.inc"

}  // namespace mtia::torch_backend
