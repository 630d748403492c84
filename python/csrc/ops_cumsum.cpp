// Running sums on the device: cumsum, the library's cumsum kernel over [outer, len, inner]
// views of its input and output.
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cumsum_meta.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

Tensor& cumsum_out(const Tensor& self, int64_t dim, c10::optional<at::ScalarType> dtype,
                   Tensor& out) {
  OutOf<at::meta::structured_cumsum> m(out);
  m.meta(self, dim, dtype);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (!kernel_supports(self.scalar_type()) || !kernel_supports(out.scalar_type()) ||
      out.scalar_type() == at::kBool) {
    return run_on_cpu<ATEN_OP2(cumsum, out)>(
        dtype_reason(kernel_supports(self.scalar_type()) ? out.scalar_type() : self.scalar_type()),
        self, dim, dtype, out);
  }
  if (self.numel() == 0) return out;
  // [outer, len, inner] views: the dims before `dim` fold into outer when both tensors allow,
  // else one launch per outer index (loop below).
  const Tensor in = self.dim() == 0 ? self.reshape({1}) : self;
  Tensor o = out.dim() == 0 ? out.reshape({1}) : out;
  const Tensor inc = in.contiguous();
  const bool direct = o.is_contiguous();
  const Tensor res = direct ? o : at::empty(in.sizes(), out.options());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= in.size(d);
  for (int64_t d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const int64_t len = in.size(dim);
  std::vector<mtia::Arg> args{tensor_address(res),
                              tensor_address(inc),
                              dtype_arg(in.scalar_type()),
                              dtype_arg(out.scalar_type()),
                              outer,
                              len,
                              inner};
  for (int k = 0; k < 2; ++k) {
    args.emplace_back(len * inner);
    args.emplace_back(inner);
    args.emplace_back(int64_t(1));
  }
  launch("cumsum", grid_for(outer * inner * 64, 16384), args);
  if (!direct) o.copy_(res);
  return out;
}

}  // namespace

#define MTIA_OPS_cumsum
#include "register_ops.inc"

}  // namespace mtia::torch_backend
