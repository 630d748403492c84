// Tensor plumbing for the device: views (metadata only), resize_ and set_ (storage
// management, used by out= ops and torch.load), fill_/zero_ on the fill kernel, cat on device
// copies, arange, record_stream, and the random ops with the device's generator.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Functions.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>

#include "caching_allocator.h"
#include "devices.h"
#include "elementwise.h"
#include "fallback.h"
#include "graphs.h"
#include "launch.h"
#include "on_device.h"
#include "random.h"
#include "structured.h"

namespace mtia::torch_backend {

namespace {

using at::Tensor;

// --- storage ---------------------------------------------------------------------------------

// Grows t's storage (keeping its bytes) so that its sizes, strides and offset fit.
void ensure_storage(const Tensor& t) {
  if (t.numel() == 0) return;
  const size_t needed = at::detail::computeStorageNbytes(t.sizes(), t.strides(),
                                                         t.dtype().itemsize(), t.storage_offset());
  const c10::Storage& storage = t.storage();
  if (needed <= storage.nbytes()) return;
  TORCH_CHECK(storage.resizable(), "Trying to resize storage that is not resizable");
  c10::DataPtr fresh = DeviceAllocator::instance().allocate(needed);
  const size_t keep = std::min(storage.nbytes(), needed);
  if (keep > 0) {
    guarded("copying a resized storage", [&] {
      Runtime::get().device().copy_async(device_ptr(fresh.get()), device_ptr(storage.data()), keep,
                                         current_stream());
    });
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(needed);
}

const Tensor& resize_(const Tensor& self, at::IntArrayRef size,
                      c10::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, c10::nullopt, /*resize_storage=*/false);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format Preserve");
    impl->empty_tensor_restride(*memory_format);
  }
  ensure_storage(self);
  return self;
}

Tensor& set_storage(Tensor& self, c10::Storage source, int64_t offset, at::IntArrayRef size,
                    at::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  const at::OptionalIntArrayRef st =
      stride.data() != nullptr ? at::OptionalIntArrayRef(stride) : c10::nullopt;
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, st, /*resize_storage=*/false);
  // A storage too small for the view is an error, never a silent out-of-bounds view.
  at::native::checkInBoundsForStorage(self.sizes(), self.strides(), offset, self.dtype(), source);
  return self;
}

Tensor& set_source_storage(Tensor& self, c10::Storage source) {
  const int64_t n = int64_t(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {n}, {});
}

Tensor& set_empty(Tensor& self) {
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, &DeviceAllocator::instance(), true);
  return set_storage(self, std::move(empty), 0, {0}, {});
}

void record_stream(Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kDeviceType, "torch_mtia_emu: record_stream on a ",
              stream.device_type(), " stream");
  DeviceAllocator::instance().record_stream(self.storage().data_ptr().get_context(), stream);
}

// --- fill ------------------------------------------------------------------------------------

Tensor& fill_scalar(Tensor& self, const c10::Scalar& value) {
  at::assert_no_internal_overlap(self);
  if (self.numel() == 0) return self;
  const at::ScalarType dt = self.scalar_type();
  if (kernel_supports(dt)) {
    launch_fill(self, scalar_bits(value, dt));
    return self;
  }
  const size_t es = self.element_size();
  if (!self.is_complex() && (es == 1 || es == 2 || es == 4 || es == 8)) {
    // Other dtypes (float64, uint8, int16): the element's bits from the CPU, then a DMA fill.
    const Tensor one = at::scalar_tensor(value, self.options().device(at::kCPU));
    uint64_t bits = 0;
    std::memcpy(&bits, one.data_ptr(), es);
    mtia::Layout l;
    l.sizes = self.sizes().vec();
    l.strides = self.strides().vec();
    l.elem_size = es;
    guarded("filling a tensor", [&] {
      Runtime::get().device().fill_async(tensor_address(self), l, bits, current_stream());
    });
    return self;
  }
  return run_on_cpu<ATEN_OP2(fill_, Scalar)>(dtype_reason(dt), self, value);
}

Tensor& fill_tensor(Tensor& self, const Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return fill_scalar(self, value.item());
}

Tensor& zero_(Tensor& self) {
  return fill_scalar(self, 0);
}

// --- cat, arange -----------------------------------------------------------------------------

Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, Tensor& out) {
  OutOf<at::meta::structured_cat> m(out);
  const auto pre = m.meta(tensors, dim);
  const int64_t d = pre.dim;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    // Legacy empty tensors ([0]) take no part, as in PyTorch's CPU kernel.
    if (t.dim() == 1 && t.size(0) == 0) continue;
    check_device(t, "cat");
    const int64_t len = t.size(d);
    if (len > 0) out.narrow(d, offset, len).copy_(t);
    offset += len;
  }
  return out;
}

// Values are computed on the host (a factory has no input to read) and land with one DMA.
Tensor& arange_out(const c10::Scalar& start, const c10::Scalar& end, const c10::Scalar& step,
                   Tensor& out) {
  Tensor host = at::empty({0}, out.options().device(at::kCPU));
  at::arange_out(host, start, end, step);
  at::native::resize_output(out, host.sizes());
  out.copy_(host);
  return out;
}

Tensor& linspace_out(const c10::Scalar& start, const c10::Scalar& end, int64_t steps, Tensor& out) {
  Tensor host = at::empty({0}, out.options().device(at::kCPU));
  at::linspace_out(host, start, end, steps);
  at::native::resize_output(out, host.sizes());
  out.copy_(host);
  return out;
}

// --- random ----------------------------------------------------------------------------------

// Eager: drawn on the host with the CPU generator inside the device's generator (the default
// one, or the caller's mtia or CPU generator), then one copy to the device: the same numbers as
// the CPU gives for the same generator state.
//
// Inside a graph capture the host cannot draw: a replay must draw new numbers without it. The
// device draws there, from Philox words (the `philox` kernel) keyed by a seed that each replay
// writes (graphs::captured_draw), and the distribution is computed from them on the device.
// The distributions are PyTorch's; the numbers are not the eager ones.

bool capturing() {
  return Runtime::get().device().is_capturing(current_stream());
}

// `n` Philox values for the graph that captures on the current stream: int32 words, or with
// `uniform` float32 values in [0, 1) made from 24 bits of a word each, as PyTorch's CPU kernel
// makes them (the `philox` kernel's modes 0 and 1).
Tensor captured_philox(const c10::optional<at::Generator>& gen, int64_t n, bool uniform) {
  const std::optional<graphs::CapturedDraw> d = graphs::captured_draw(host_generator(gen));
  TORCH_CHECK(d.has_value(),
              "torch_mtia_emu: a random op on a stream that captures work outside "
              "torch.mtia.MTIAGraph cannot draw (its replays would not get new seeds); capture "
              "with torch.mtia.graph or MTIAGraph.capture_begin()");
  Tensor out = at::empty({n}, at::TensorOptions()
                                  .dtype(uniform ? at::kFloat : at::kInt)
                                  .device(kDeviceType, current_device()));
  if (n > 0) {
    launch("philox", grid_for(n, 1024),
           {tensor_address(out), d->seed, n, d->stream, int64_t{uniform ? 1 : 0}});
  }
  return out;
}
Tensor captured_words(const c10::optional<at::Generator>& gen, int64_t n) {
  return captured_philox(gen, n, false);
}
Tensor captured_unit(const c10::optional<at::Generator>& gen, int64_t n) {
  return captured_philox(gen, n, true);
}

// `n` int64 values uniform in [0, range), 0 < range <= 2^63: one word below 2^32, two above.
// A range of 2^64 (the whole int64 line) has wrapped to 0.
Tensor captured_below(const c10::optional<at::Generator>& gen, int64_t n, uint64_t range) {
  TORCH_CHECK_VALUE(range > 0 && range <= (uint64_t(1) << 63),
                    "torch_mtia_emu: random_() in an MTIA graph draws from ranges of up to 2^63 "
                    "values; this one has ",
                    range == 0 ? std::string("2^64") : std::to_string(range));
  Tensor v;
  if (range <= (uint64_t(1) << 32)) {
    v = at::bitwise_and(captured_words(gen, n).to(at::kLong), 0xFFFFFFFFLL);
  } else {
    const Tensor w = captured_words(gen, 2 * n).to(at::kLong);
    v = at::bitwise_or(at::bitwise_and(w.slice(0, 0, n), 0x7FFFFFFFLL).bitwise_left_shift(32),
                       at::bitwise_and(w.slice(0, n, 2 * n), 0xFFFFFFFFLL));
  }
  return range == (uint64_t(1) << 63) ? v : at::remainder(v, static_cast<int64_t>(range));
}

// Writes `values` (numel elements, any shape) into self in self's shape and dtype.
Tensor& store(Tensor& self, const Tensor& values) {
  self.copy_(values.view(self.sizes()));
  return self;
}

template <class Draw>
Tensor& draw(Tensor& self, const c10::optional<at::Generator>& gen, Draw&& fn) {
  const at::Generator g = host_generator(gen);
  Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  fn(host, g);
  self.copy_(host);
  return self;
}

Tensor& uniform_(Tensor& self, double from, double to, c10::optional<at::Generator> gen) {
  if (capturing()) {
    return store(self, captured_unit(gen, self.numel()).mul_(to - from).add_(from));
  }
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.uniform_(from, to, g); });
}
Tensor& normal_(Tensor& self, double mean, double std, c10::optional<at::Generator> gen) {
  if (capturing()) {
    // Box-Muller: sqrt(-2 ln(1 - u1)) cos(2 pi u2), with 1 - u1 in (0, 1].
    const int64_t n = self.numel();
    const Tensor u = captured_unit(gen, 2 * n);
    const Tensor radius = at::log1p(u.slice(0, 0, n).neg()).mul_(-2.0).sqrt_();
    const Tensor angle = u.slice(0, n, 2 * n).mul(2.0 * M_PI).cos_();
    return store(self, radius.mul_(angle).mul_(std).add_(mean));
  }
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.normal_(mean, std, g); });
}
// random_() takes [0, 2^digits] for floating dtypes (every integer they hold exactly) and
// [0, max] for integer ones, as PyTorch does.
uint64_t random_range(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return (uint64_t(1) << 24) + 1;
    case at::kHalf:
      return (uint64_t(1) << 11) + 1;
    case at::kBFloat16:
      return (uint64_t(1) << 8) + 1;
    case at::kBool:
      return 2;
    case at::kChar:
      return uint64_t(1) << 7;
    case at::kByte:
      return uint64_t(1) << 8;
    case at::kShort:
      return uint64_t(1) << 15;
    case at::kInt:
      return uint64_t(1) << 31;
    default:
      return uint64_t(1) << 63;
  }
}
Tensor& random_(Tensor& self, c10::optional<at::Generator> gen) {
  if (capturing())
    return store(self, captured_below(gen, self.numel(), random_range(self.scalar_type())));
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.random_(g); });
}
Tensor& random_from(Tensor& self, int64_t from, c10::optional<int64_t> to,
                    c10::optional<at::Generator> gen) {
  if (capturing()) {
    const uint64_t range = to.has_value() ? uint64_t(*to) - uint64_t(from)
                                          : random_range(self.scalar_type()) - uint64_t(from);
    TORCH_CHECK_VALUE(!to.has_value() || from < *to,
                      "random_ expects 'from' to be less than "
                      "'to', but got from=",
                      from, " >= to=", *to);
    return store(self, captured_below(gen, self.numel(), range).add_(from));
  }
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.random_(from, to, g); });
}
Tensor& random_to(Tensor& self, int64_t to, c10::optional<at::Generator> gen) {
  if (capturing()) return random_from(self, 0, to, gen);
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.random_(to, g); });
}
Tensor& bernoulli_float(Tensor& self, double p, c10::optional<at::Generator> gen) {
  if (capturing()) {
    TORCH_CHECK_VALUE(p >= 0 && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
    return store(self, at::lt(captured_unit(gen, self.numel()), p));
  }
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.bernoulli_(p, g); });
}
Tensor& bernoulli_tensor(Tensor& self, const Tensor& p, c10::optional<at::Generator> gen) {
  if (capturing()) {
    // p on the device, broadcast to self (its range is not checked: that reads it on the host).
    return store(self, at::lt(captured_unit(gen, self.numel()).view(self.sizes()),
                              p.to(self.device(), at::kFloat)));
  }
  const Tensor hp = p.cpu();
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.bernoulli_(hp, g); });
}
Tensor& exponential_(Tensor& self, double lambd, c10::optional<at::Generator> gen) {
  if (capturing()) {
    TORCH_CHECK_VALUE(lambd > 0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
    return store(self, at::log1p(captured_unit(gen, self.numel()).neg_()).mul_(-1.0 / lambd));
  }
  return draw(self, gen, [&](Tensor& h, const at::Generator& g) { h.exponential_(lambd, g); });
}

}  // namespace

#define MTIA_OPS_tensor
#include "register_ops.inc"

}  // namespace mtia::torch_backend
