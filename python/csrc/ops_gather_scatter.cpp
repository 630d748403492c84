// gather, scatter and scatter_add on the device (kernels/lib/index.c): each works on lines of
// its index along `dim`, with every tensor seen as at most four dimensions; what does not fit
// takes the CPU. Out-of-range indices are IndexErrors at the call (index_checks.h).
#include <ATen/Functions.h>
#include <ATen/WrapDimUtils.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "index_checks.h"
#include "launch.h"
#include "on_device.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

// t with `dim` moved last and padded to 4 dims with leading size-1 dims (nullopt above 4).
std::optional<std::pair<std::array<int64_t, 4>, std::array<int64_t, 4>>> lines4(const Tensor& t,
                                                                                int64_t dim) {
  const int64_t r = std::max<int64_t>(t.dim(), 1);
  if (r > 4) return std::nullopt;
  std::array<int64_t, 4> size{1, 1, 1, 1}, st{0, 0, 0, 0};
  if (t.dim() == 0) return std::make_pair(size, std::array<int64_t, 4>{0, 0, 0, 1});
  int64_t slot = 4 - r;
  for (int64_t d = 0; d < r; ++d) {
    if (d == dim) continue;
    size[size_t(slot)] = t.size(d);
    st[size_t(slot)] = t.stride(d);
    ++slot;
  }
  size[3] = t.size(dim);
  st[3] = t.stride(dim);
  return std::make_pair(size, st);
}

std::string explain_lines(const Tensor& index, int64_t size, int64_t dim) {
  return bad_index_message(index, size, dim, false);
}

Tensor& gather_out(const Tensor& self, int64_t dim, const Tensor& index, bool sparse_grad,
                   Tensor& out) {
  OutOf<at::meta::structured_gather> m(out);
  m.meta(self, dim, index, sparse_grad);
  dim = at::maybe_wrap_dim(dim, self.dim());
  const auto li = lines4(index, dim), ls = lines4(self, dim), lo = lines4(out, dim);
  if (!kernel_supports(self.scalar_type()) || !li) {
    return run_on_cpu<ATEN_OP2(gather, out)>(
        li ? dtype_reason(self.scalar_type()) : std::string("more than 4 dimensions"), self, dim,
        index, sparse_grad, out);
  }
  if (index.numel() == 0) return out;
  const Tensor idx = index_operand(index, "gather");
  const auto lidx = lines4(idx, dim);
  std::vector<mtia::Arg> args{tensor_address(out), tensor_address(self), tensor_address(idx),
                              dtype_arg(self.scalar_type()), dtype_arg(idx.scalar_type())};
  push4(args, li->first);
  args.emplace_back(self.dim() == 0 ? int64_t(1) : self.size(dim));
  push4(args, lo->second);
  push4(args, ls->second);
  push4(args, lidx->second);
  launch_checked("gather_lines", grid_for(index.numel(), 4096), args,
                 [&] { return explain_lines(idx, self.dim() == 0 ? 1 : self.size(dim), dim); });
  return out;
}

// scatter/scatter_add into out (already holding self): mode 0 assign, 1 add.
void scatter_into(const char* op, Tensor& out, int64_t dim, const Tensor& index, const Tensor* src,
                  const c10::Scalar* value, int64_t mode) {
  if (index.numel() == 0) return;
  const Tensor idx = index_operand(index, op);
  const auto li = lines4(idx, dim), lo = lines4(out, dim);
  std::array<int64_t, 4> sst{0, 0, 0, 0};
  if (src != nullptr) sst = lines4(*src, dim)->second;
  std::vector<mtia::Arg> args{
      tensor_address(out),
      src != nullptr ? tensor_address(*src) : tensor_address(out),
      tensor_address(idx),
      dtype_arg(out.scalar_type()),
      dtype_arg(idx.scalar_type()),
      mode,
      int64_t(src != nullptr ? 0 : 1),
      int64_t(value != nullptr ? scalar_bits(*value, out.scalar_type()) : 0)};
  push4(args, li->first);
  args.emplace_back(out.dim() == 0 ? int64_t(1) : out.size(dim));
  push4(args, lo->second);
  push4(args, sst);
  push4(args, li->second);
  launch_checked("scatter_lines", grid_for(index.numel(), 4096), args,
                 [&] { return explain_lines(idx, out.dim() == 0 ? 1 : out.size(dim), dim); });
}

// Scatter lines are kept whole in a PE's local store: longer destination lines take the CPU.
bool scatter_fits(const Tensor& out, int64_t dim) {
  const int64_t len = out.dim() == 0 ? 1 : out.size(dim);
  const int64_t per = int64_t(out.element_size()) + (is_kernel_float(out.scalar_type()) ? 4 : 8);
  return len * per <= 48 * 1024;
}

std::optional<std::string> scatter_reason(const Tensor& self, const Tensor& out, int64_t dim,
                                          bool add) {
  if (!kernel_supports(self.scalar_type())) return dtype_reason(self.scalar_type());
  if (add && self.scalar_type() == at::kBool) return dtype_reason(self.scalar_type());
  if (self.dim() > 4) return std::string("more than 4 dimensions");
  if (!scatter_fits(out, dim)) return std::string("a destination line longer than the local store");
  return std::nullopt;
}

Tensor& scatter_src_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        Tensor& out) {
  OutOf<at::meta::structured_scatter_src> m(out);
  m.meta(self, dim, index, src);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, false)) {
    return run_on_cpu<ATEN_OP2(scatter, src_out)>(*why, self, dim, index, src, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter", out, dim, index, &src, nullptr, 0);
  return out;
}

Tensor& scatter_value_out(const Tensor& self, int64_t dim, const Tensor& index,
                          const c10::Scalar& value, Tensor& out) {
  OutOf<at::meta::structured_scatter_value> m(out);
  m.meta(self, dim, index, value);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, false)) {
    return run_on_cpu<ATEN_OP2(scatter, value_out)>(*why, self, dim, index, value, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter", out, dim, index, nullptr, &value, 0);
  return out;
}

Tensor& scatter_add_out(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src,
                        Tensor& out) {
  OutOf<at::meta::structured_scatter_add> m(out);
  m.meta(self, dim, index, src);
  dim = at::maybe_wrap_dim(dim, self.dim());
  if (auto why = scatter_reason(self, out, dim, true)) {
    return run_on_cpu<ATEN_OP2(scatter_add, out)>(*why, self, dim, index, src, out);
  }
  if (!out.is_same(self)) out.copy_(self);
  scatter_into("scatter_add", out, dim, index, &src, nullptr, 1);
  return out;
}

}  // namespace

#define MTIA_OPS_gather_scatter
#include "register_ops.inc"

}  // namespace mtia::torch_backend
