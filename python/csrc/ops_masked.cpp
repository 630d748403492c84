// Masks on the device: masked_fill, masked_select, masked_scatter_ and nonzero. masked_fill is
// the elementwise `where`; the others compact the selected positions with the index library's
// compact kernel (kernels/lib/index.c).
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <vector>

#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "index_checks.h"
#include "launch.h"
#include "on_device.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

Tensor& masked_fill_impl(Tensor& self, const Tensor& mask, const Tensor& value_dev) {
  launch_where(self, mask, value_dev, self);
  return self;
}

void check_mask(const Tensor& self, const Tensor& mask, const char* op) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, op,
              " only supports boolean masks, but got mask with dtype ", mask.scalar_type());
  TORCH_CHECK(at::is_expandable_to(mask.sizes(), self.sizes()), "The size of the mask ",
              mask.sizes(), " must be broadcastable to the size of the tensor ", self.sizes());
  check_device(mask, op);
}

Tensor& masked_fill_scalar(Tensor& self, const Tensor& mask, const c10::Scalar& value) {
  check_device(self, "masked_fill_");
  check_mask(self, mask, "masked_fill_");
  if (!kernel_supports(self.scalar_type())) {
    return run_on_cpu<ATEN_OP2(masked_fill_, Scalar)>(dtype_reason(self.scalar_type()), self, mask,
                                                      value);
  }
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  return masked_fill_impl(self, mask, device_scalar(value, self.scalar_type()));
}

Tensor& masked_fill_tensor(Tensor& self, const Tensor& mask, const Tensor& value) {
  TORCH_CHECK(value.dim() == 0,
              "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  check_device(self, "masked_fill_");
  check_mask(self, mask, "masked_fill_");
  if (!kernel_supports(self.scalar_type()) || !kernel_supports(value.scalar_type())) {
    return run_on_cpu<ATEN_OP2(masked_fill_, Tensor)>(dtype_reason(self.scalar_type()), self, mask,
                                                      value);
  }
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  Tensor v;
  if (value.device().type() == kDeviceType) {
    v = as_dtype(value, self.scalar_type());
  } else {
    v = device_scalar(value.item(), self.scalar_type());
  }
  return masked_fill_impl(self, mask, v);
}

// Rows of a <= 4-D view of `t` (padded with leading size-1 dims).
std::array<int64_t, 4> pad4(at::IntArrayRef v, int64_t fill) {
  std::array<int64_t, 4> r{fill, fill, fill, fill};
  for (size_t i = 0; i < v.size(); ++i) r[4 - v.size() + i] = v[i];
  return r;
}

// Compaction over the broadcast (<= 4-D) `mask`: each row's first output position from a
// device count of the row, then the `compact` kernel. Returns the number selected.
int64_t compact_into(Tensor* out, const Tensor& mask, const Tensor* src, int64_t ndim,
                     at::ScalarType out_dtype, int64_t out_cols) {
  const auto size = pad4(mask.sizes(), 1);
  const auto mst = pad4(mask.strides(), 0);
  const int64_t rows = size[0] * size[1] * size[2];
  // Per-row counts (device sum), their running sum (device cumsum); the total is read back.
  const Tensor m4 =
      mask.as_strided({size[0], size[1], size[2], size[3]}, {mst[0], mst[1], mst[2], mst[3]});
  const Tensor counts = at::sum(m4, {3}, false, at::kLong).reshape({rows});
  const Tensor ends = at::cumsum(counts, 0);
  const int64_t total = ends[rows - 1].item<int64_t>();
  *out =
      at::empty(out_cols >= 0 ? std::vector<int64_t>{total, out_cols} : std::vector<int64_t>{total},
                mask.options().dtype(out_dtype));
  if (total == 0) return 0;
  const Tensor starts = at::sub(ends, counts).contiguous();
  std::vector<mtia::Arg> args{tensor_address(*out),
                              src != nullptr ? tensor_address(*src) : tensor_address(mask),
                              tensor_address(mask),
                              tensor_address(starts),
                              dtype_arg(src != nullptr ? src->scalar_type() : at::kLong),
                              int64_t(src != nullptr ? 0 : 1),
                              ndim};
  push4(args, size);
  push4(args, src != nullptr ? pad4(src->strides(), 0) : std::array<int64_t, 4>{0, 0, 0, 0});
  push4(args, mst);
  launch("compact", grid_for(mask.numel(), 16384), args);
  return total;
}

Tensor masked_select_dev(const Tensor& self, const Tensor& mask) {
  check_device(self, "masked_select");
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask, got ",
              mask.scalar_type());
  check_device(mask, "masked_select");
  auto [s, m] = at::expand_outplace(self, mask);
  if (!kernel_supports(self.scalar_type()) || s->dim() > 4) {
    return run_on_cpu<ATEN_OP(masked_select)>(kernel_supports(self.scalar_type())
                                                  ? std::string("more than 4 dimensions")
                                                  : dtype_reason(self.scalar_type()),
                                              self, mask);
  }
  if (s->numel() == 0) return at::empty({0}, self.options());
  const Tensor ms = s->dim() == 0 ? m->reshape({1}) : *m;
  const Tensor ss = s->dim() == 0 ? s->reshape({1}) : *s;
  Tensor out;
  compact_into(&out, ms, &ss, 0, self.scalar_type(), -1);
  return out;
}

Tensor& masked_select_out(const Tensor& self, const Tensor& mask, Tensor& out) {
  const Tensor r = masked_select_dev(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor nonzero_dev(const Tensor& self) {
  check_device(self, "nonzero");
  if (!kernel_supports(self.scalar_type()) || self.dim() > 4) {
    return run_on_cpu<ATEN_OP(nonzero)>(kernel_supports(self.scalar_type())
                                            ? std::string("more than 4 dimensions")
                                            : dtype_reason(self.scalar_type()),
                                        self);
  }
  const int64_t nd = self.dim();
  if (self.numel() == 0) return at::empty({0, nd}, self.options().dtype(at::kLong));
  const Tensor t = nd == 0 ? self.reshape({1}) : self;
  const Tensor mask = self.scalar_type() == at::kBool ? t : at::ne(t, 0);
  Tensor out;
  compact_into(&out, mask, nullptr, nd, at::kLong, nd);
  return out;
}

Tensor& nonzero_out(const Tensor& self, Tensor& out) {
  TORCH_CHECK(out.scalar_type() == at::kLong,
              "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  const Tensor r = nonzero_dev(self);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

Tensor& masked_scatter_(Tensor& self, const Tensor& mask, const Tensor& source) {
  check_device(self, "masked_scatter_");
  TORCH_CHECK(mask.scalar_type() == at::kBool,
              "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got",
              self.scalar_type(), " and ", source.scalar_type());
  if (!kernel_supports(self.scalar_type()) || self.dim() > 4) {
    return run_on_cpu<ATEN_OP(masked_scatter_)>(dtype_reason(self.scalar_type()), self, mask,
                                                source);
  }
  if (self.numel() == 0) return self;
  const Tensor m = mask.expand(self.sizes());
  const Tensor pos = nonzero_dev(m);
  const int64_t n = pos.size(0);
  TORCH_CHECK(n <= source.numel(), "masked_scatter: expected source to have at least ", n,
              " elements, got ", source.numel());
  if (n == 0) return self;
  c10::List<c10::optional<Tensor>> idx;
  const Tensor src = source.reshape({-1}).narrow(0, 0, n);
  if (self.dim() == 0) {
    self.copy_(src.reshape({}));
    return self;
  }
  for (int64_t d = 0; d < self.dim(); ++d) idx.push_back(pos.select(1, d));
  // The device's own _index_put_impl_ (ops_index.cpp), through the dispatcher.
  return at::_index_put_impl_(self, idx, src, false, false);
}

}  // namespace

#define MTIA_OPS_masked
#include "register_ops.inc"

}  // namespace mtia::torch_backend
