// Elementwise device work on tensors: one call per library kernel (fill, copy, cast, unary,
// binary, binary_scalar, where, clamp, pointwise), plus the building blocks the ATen
// ops are made of.
//
// Every function takes tensors already on the device in a kernel dtype; inputs are broadcast
// to the output's sizes (stride 0). Callers choose dtypes; these only check and launch.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace mtia::torch_backend {

// SE op codes (enum mtia_pe_se_op) the unary/binary kernels take.
using SeOp = int64_t;

void launch_unary(SeOp op, const at::Tensor& out, const at::Tensor& a);
// out = a op b. a and b have one dtype; out has it too, or bool for comparisons and logical
// ops.
void launch_binary(SeOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b);
// One step of a pointwise program (the `pointwise` kernel): dst = op(src...), over the
// slots below; `imm` is the bit pattern, in the step's input dtype, that kImm sources read.
struct PwStep {
  SeOp op;
  int dst;
  std::array<int, 3> src{0, 0, 0};
  uint64_t imm = 0;
};
namespace pw {
constexpr int kA = 0, kB = 1, kC = 2, kD = 3, kE = 4;  // the inputs
constexpr int kT0 = 5, kT1 = 6, kT2 = 7;               // scratch
constexpr int kOut = 8, kImm = 15;                     // the output; the step's immediate
constexpr size_t kMaxInputs = 5, kMaxSteps = 6;
}  // namespace pw
// Runs up to pw::kMaxSteps SE steps over up to five inputs of out's dtype in one launch.
void launch_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs,
                      const std::vector<PwStep>& steps);
// out = a op scalar, the scalar given as a bit pattern of a's dtype.
void launch_binary_scalar(SeOp op, const at::Tensor& out, const at::Tensor& a, uint64_t bits);
void launch_cast(const at::Tensor& out, const at::Tensor& in);
void launch_where(const at::Tensor& out, const at::Tensor& cond, const at::Tensor& a,
                  const at::Tensor& b);
void launch_clamp(const at::Tensor& out, const at::Tensor& a, uint64_t lo_bits, uint64_t hi_bits);
void launch_fill(const at::Tensor& out, uint64_t bits);

// out <- in, same dtype, any strides, by device DMA on the current stream (in broadcasts).
void dma_copy(const at::Tensor& out, const at::Tensor& in);

// --- building blocks ---------------------------------------------------------------------

// A new device tensor like `t` (same sizes; dense strides following t's layout) of `dtype`.
at::Tensor empty_like_dtype(const at::Tensor& t, at::ScalarType dtype);
// A contiguous device tensor of `sizes` and `dtype`.
at::Tensor empty_device(at::IntArrayRef sizes, at::ScalarType dtype);
// t itself if it already has `dtype`, else a device cast of it.
at::Tensor as_dtype(const at::Tensor& t, at::ScalarType dtype);
// Writes `result` into `out` (same sizes): nothing when they are the same tensor, a DMA copy
// for equal dtypes, a cast otherwise.
void write_into(const at::Tensor& out, const at::Tensor& result);
// A 0-dim device tensor holding `value` as `dtype`.
at::Tensor device_scalar(const c10::Scalar& value, at::ScalarType dtype);

// out = op(in), computed in `compute` (in is cast on the device when its dtype differs), with
// the kernel's result dtype `result` (compute, or bool for logical_not); written into out
// through a cast when out's dtype differs.
void apply_unary(SeOp op, const at::Tensor& out, const at::Tensor& in, at::ScalarType compute,
                 at::ScalarType result);
// out = a op b, the same way; a or b may be a CPU scalar (0-dim CPU tensor), which becomes
// the kernel's immediate when it can (b, or a for a commutative/mirrored op).
void apply_binary(SeOp op, const at::Tensor& out, const at::Tensor& a, const at::Tensor& b,
                  at::ScalarType compute, at::ScalarType result);
// out = a pointwise program over `inputs`, the same way (inputs broadcast to out's sizes).
void apply_pointwise(const at::Tensor& out, const std::vector<at::Tensor>& inputs,
                     at::ScalarType compute, const std::vector<PwStep>& steps);
// out = a op scalar (in compute dtype).
void apply_binary_scalar(SeOp op, const at::Tensor& out, const at::Tensor& a,
                         const c10::Scalar& scalar, at::ScalarType compute);
// The dtype elementwise steps of a composed op run in: float32 for float16/bfloat16 (as the
// CPU kernels accumulate), the dtype itself otherwise.
at::ScalarType acc_dtype(at::ScalarType t);
// "dtype Double": why a device op runs on the CPU.
std::string dtype_reason(at::ScalarType t);

// A CPU 0-dim tensor PyTorch passes for a Python number next to a device tensor.
bool is_cpu_scalar(const at::Tensor& t);
// Checks that `t` is on the device (or a CPU scalar when allowed), naming the op.
void check_device(const at::Tensor& t, const char* op, bool allow_cpu_scalar = false);

}  // namespace mtia::torch_backend
