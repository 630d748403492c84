// Triangles of matrices on the device: triu and tril, the library's tri kernel, one launch
// per batch of matrices whose leading dimensions fold.
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
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

Tensor& tri_out(bool lower, const Tensor& self, int64_t k, Tensor& out) {
  const int64_t r = self.dim();
  const int64_t rows = self.size(r - 2), cols = self.size(r - 1);
  if (self.numel() == 0) return out;
  // Leading dims: one batch dim per launch after folding what folds.
  const Tensor in = self, o = out;
  const int64_t batch = self.numel() / std::max<int64_t>(rows * cols, 1);
  auto folds = [&](const Tensor& t) {
    int64_t expect = t.stride(r - 3 >= 0 ? r - 3 : 0);
    for (int64_t d = r - 3; d >= 0; --d) {
      if (t.size(d) == 1) continue;
      if (t.stride(d) != expect) return false;
      expect = t.stride(d) * t.size(d);
    }
    return true;
  };
  if (r > 3 && !(folds(in) && folds(o))) {
    for (int64_t b = 0; b < self.size(0); ++b) {
      Tensor ob = out.select(0, b);
      tri_out(lower, self.select(0, b), k, ob);
    }
    return out;
  }
  const int64_t ibs = r >= 3 ? in.stride(r - 3) : 0, obs = r >= 3 ? o.stride(r - 3) : 0;
  launch("tri", grid_for(batch * rows * cols, 16384),
         {tensor_address(o), tensor_address(in), dtype_arg(self.scalar_type()),
          int64_t(lower ? 1 : 0), k, batch, rows, cols, ibs, in.stride(r - 2), in.stride(r - 1),
          obs, o.stride(r - 2), o.stride(r - 1)});
  return out;
}

Tensor& triu_out(const Tensor& self, int64_t diagonal, Tensor& out) {
  OutOf<at::meta::structured_triu> m(out);
  m.meta(self, diagonal);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(triu, out)>(dtype_reason(self.scalar_type()), self, diagonal, out);
  }
  return tri_out(false, self, diagonal, out);
}

Tensor& tril_out(const Tensor& self, int64_t diagonal, Tensor& out) {
  OutOf<at::meta::structured_tril> m(out);
  m.meta(self, diagonal);
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(tril, out)>(dtype_reason(self.scalar_type()), self, diagonal, out);
  }
  return tri_out(true, self, diagonal, out);
}

}  // namespace

#define MTIA_OPS_triangle
#include "register_ops.inc"

}  // namespace mtia::torch_backend
