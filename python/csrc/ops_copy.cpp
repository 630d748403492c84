// Allocation and copies: empty/empty_strided on the caching allocator, _copy_from between
// the host and the device and on the device through the host API's strided copies (any
// sizes, strides and storage offsets on either side, broadcast sources included), dtype
// conversion, non_blocking, copies between two devices (peer copies), and reading one
// element back. Pinned memory comes through the MTIA hooks (hooks.cpp).
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "caching_allocator.h"
#include "devices.h"
#include "elementwise.h"
#include "launch.h"
#include "on_device.h"
#include "pinned_allocator.h"

namespace mtia::torch_backend {

namespace {

// The host API layout of `t` with the given (possibly broadcast) sizes and strides, relative
// to its first element. Elements wider than 8 bytes (complex128) become pairs of 8-byte words.
mtia::Layout layout_of(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides) {
  mtia::Layout l;
  l.sizes = sizes.vec();
  l.strides = strides.vec();
  l.offset = 0;
  size_t es = t.element_size();
  if (es > 8) {
    TORCH_CHECK(es % 8 == 0, "torch_mtia_emu: cannot copy elements of ", es, " bytes");
    const int64_t words = int64_t(es / 8);
    for (auto& s : l.strides) s *= words;
    l.sizes.push_back(words);
    l.strides.push_back(1);
    es = 8;
  }
  l.elem_size = es;
  return l;
}

bool on_device(const at::Tensor& t) {
  return t.device().type() == kDeviceType;
}

// Bytes from the first element to one past the last, for the pinned check.
size_t span_bytes(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return size_t(last + 1) * t.element_size();
}

// A non_blocking copy just queued on the current stream reads or writes `host` in place if it
// is pinned: its block is not reused before the copy is done.
void record_pinned_use(const at::Tensor& host) {
  const c10::DataPtr& data = host.storage().data_ptr();
  PinnedAllocator::instance().record_event(data.get(), data.get_context(),
                                           to_c10(current_device(), current_stream()));
}

// host `src` (dst's dtype, dst's sizes after broadcast) -> device `dst`, on dst's device.
void host_to_device(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const DeviceScope on(dst.device().index());
  auto& dev = Runtime::get().device();
  const mtia::Layout dl = layout_of(dst, dst.sizes(), dst.strides());
  const mtia::Layout sl = layout_of(src, dst.sizes(), src.strides());
  guarded("copying host to device", [&] {
    // As with CUDA, a blocking copy has landed when it returns, so any stream may use the
    // data at once. non_blocking returns once queued: pinned memory is read in place later,
    // pageable memory is staged by copy_async before it returns.
    if (non_blocking) {
      dev.copy_async(tensor_address(dst), dl, src.data_ptr(), sl, current_stream());
      record_pinned_use(src);
    } else {
      dev.copy(tensor_address(dst), dl, src.data_ptr(), sl, current_stream());
    }
  });
}

// device `src` -> host `dst`, same dtype and sizes, on src's device.
void device_to_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const DeviceScope on(src.device().index());
  auto& dev = Runtime::get().device();
  const mtia::Layout dl = layout_of(dst, dst.sizes(), dst.strides());
  const mtia::Layout sl = layout_of(src, dst.sizes(), src.strides());
  const bool pinned = dev.is_pinned(dst.data_ptr(), span_bytes(dst));
  guarded("copying device to host", [&] {
    if (non_blocking && pinned) {
      dev.copy_async(dst.data_ptr(), dl, tensor_address(src), sl, current_stream());
      record_pinned_use(dst);
    } else {
      dev.copy(dst.data_ptr(), dl, tensor_address(src), sl, current_stream());
    }
  });
}

at::Tensor expand_to(const at::Tensor& src, const at::Tensor& dst) {
  return src.sizes() == dst.sizes() ? src : src.expand(dst.sizes());
}

// src on one device -> dst on another, any strides: a peer copy (the host API's
// copy_peer_async: the source device DMAs into a host buffer both reach, the destination DMAs it
// in, no host staging here), after the work queued on both devices' current streams. As between
// CUDA devices, it returns once queued, whatever non_blocking says: later work on either
// current stream runs after its half of the copy, so the source's block, freed and reused by
// its stream, is overwritten only after it has been read. A dtype conversion happens on the
// destination, after the copy.
void device_to_device_across(const at::Tensor& dst, const at::Tensor& src) {
  if (src.scalar_type() != dst.scalar_type()) {
    const DeviceScope on(dst.device().index());
    at::Tensor same = at::empty(src.sizes(), src.options().device(dst.device()));
    device_to_device_across(same, src);
    if (kernel_supports(src.scalar_type()) && kernel_supports(dst.scalar_type())) {
      launch_cast(dst, same);
    } else {
      dst.copy_(same.cpu().to(dst.scalar_type()));
    }
    return;
  }
  const c10::DeviceIndex to = dst.device().index(), from = src.device().index();
  Runtime& rt = Runtime::get();
  mtia::Device& dst_dev = rt.device(to);
  mtia::Device& src_dev = rt.device(from);
  const mtia::Layout dl = layout_of(dst, dst.sizes(), dst.strides());
  const mtia::Layout sl = layout_of(src, dst.sizes(), src.strides());
  guarded(c10::str("copying from mtia:", int(from), " to mtia:", int(to)), [&] {
    dst_dev.copy_peer_async(tensor_address(dst), dl, src_dev, tensor_address(src), sl,
                            current_stream(to), current_stream(from));
  });
}

}  // namespace

void dma_copy(const at::Tensor& out, const at::Tensor& in) {
  TORCH_INTERNAL_ASSERT(out.scalar_type() == in.scalar_type());
  if (out.numel() == 0) return;
  const at::Tensor src = expand_to(in, out);
  const mtia::Layout dl = layout_of(out, out.sizes(), out.strides());
  const mtia::Layout sl = layout_of(src, out.sizes(), src.strides());
  auto& dev = Runtime::get().device();
  guarded("copying on the device", [&] {
    dev.copy_async(tensor_address(out), dl, tensor_address(src), sl, current_stream());
  });
}

namespace {

at::Tensor empty_memory_format(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                               c10::optional<at::Layout> layout,
                               c10::optional<at::Device> /*device: made current by MTIA_FN*/,
                               c10::optional<bool> pin_memory,
                               c10::optional<at::MemoryFormat> memory_format) {
  TORCH_CHECK(!pin_memory.value_or(false),
              "torch_mtia_emu: pin_memory applies to CPU tensors, not device tensors");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "torch_mtia_emu: only strided tensors live on the device");
  return at::detail::empty_generic(size, &DeviceAllocator::instance(),
                                   c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor empty_strided(at::IntArrayRef size, at::IntArrayRef stride,
                         c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                         c10::optional<at::Device> /*device: made current by MTIA_FN*/,
                         c10::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false),
              "torch_mtia_emu: pin_memory applies to CPU tensors, not device tensors");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              "torch_mtia_emu: only strided tensors live on the device");
  return at::detail::empty_strided_generic(size, stride, &DeviceAllocator::instance(),
                                           c10::DispatchKeySet(c10::DispatchKey::MTIA),
                                           c10::dtype_or_default(dtype));
}

// self -> dst for tensors without conjugate or negative bits.
void copy_values(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor src = expand_to(self, dst);
  at::assert_no_internal_overlap(dst);

  if (on_device(src) && on_device(dst) && src.device() != dst.device()) {
    device_to_device_across(dst, src);
  } else if (on_device(src) && on_device(dst)) {
    const DeviceScope on(dst.device().index());
    at::assert_no_partial_overlap(dst, src);
    if (src.scalar_type() == dst.scalar_type()) {
      dma_copy(dst, src);
    } else if (kernel_supports(src.scalar_type()) && kernel_supports(dst.scalar_type())) {
      launch_cast(dst, src);
    } else {
      // A dtype the cast kernel does not take (float64, uint8, ...): convert on the host.
      at::Tensor host = at::empty(dst.sizes(), dst.options().device(at::kCPU));
      at::Tensor staged = at::empty(src.sizes(), src.options().device(at::kCPU));
      device_to_host(staged, src, false);
      host.copy_(staged);
      host_to_device(dst, host, false);
    }
  } else if (on_device(dst)) {
    // Convert on the host first: the host has the data and the CPU converts every dtype.
    if (src.scalar_type() != dst.scalar_type()) src = src.to(dst.scalar_type());
    host_to_device(dst, src, non_blocking);
  } else if (on_device(src)) {
    if (src.scalar_type() == dst.scalar_type()) {
      device_to_host(dst, src, non_blocking);
    } else {
      at::Tensor staged = at::empty(dst.sizes(), src.options().device(at::kCPU));
      device_to_host(staged, src, false);
      dst.copy_(staged);
    }
  } else {
    dst.copy_(src);
  }
}

// The same memory as `t` without its conjugate and negative bits: the values as stored.
at::Tensor stored_values(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg()) return t;
  at::Tensor raw = at::empty({0}, t.options());
  raw.set_(t.storage(), t.storage_offset(), t.sizes(), t.strides());
  return raw;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.layout() == at::kStrided && dst.layout() == at::kStrided,
              "torch_mtia_emu: copies take strided tensors");
  if (dst.numel() == 0) return dst;
  if (!self.is_conj() && !self.is_neg() && !dst.is_conj() && !dst.is_neg()) {
    copy_values(self, dst, non_blocking);
    return dst;
  }
  // Conjugate and negative views (torch.fft's, Tensor.conj()) come here with their bits (the
  // fallthroughs below): PyTorch's generic fallback for them would copy through this very op
  // and never end. dst's stored values must be self's stored values conjugated (negated) when
  // exactly one of the two is a conjugate (negative) view; that is applied on the host, where
  // the CPU has the kernels.
  at::Tensor values = at::empty(self.sizes(), self.options().device(at::kCPU));
  copy_values(stored_values(self), values, false);
  if (self.is_conj() != dst.is_conj()) values.conj_physical_();
  if (self.is_neg() != dst.is_neg()) values.neg_();
  copy_values(values, stored_values(dst), false);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

c10::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor host = at::empty(self.sizes(), self.options().device(at::kCPU));
  device_to_host(host, self, false);
  return host.item();
}

}  // namespace

#define MTIA_OPS_copy
#include "register_ops.inc"

// Copies of conjugate and negative views reach _copy_from with their bits (op_table.def).
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace mtia::torch_backend
