// Strided copies and fills: validation, host memory handling, DMA packet submission.
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>

#include "device_impl.h"

namespace mtia {
namespace {

constexpr uint64_t kPageBytes = 4096;

// One side of a transfer as the packets see it.
struct Side {
  uint64_t base = 0;  // address of the layout's base pointer in `space` (may wrap; only
                      // base + piece offset, which lies inside the checked span, is used)
  isa::AddressSpace space = isa::AddressSpace::kDevice;
  std::shared_ptr<HostRegion> region;  // host memory the packets touch, if any
  const uint8_t* user = nullptr;       // bounce buffers: the caller's memory (base pointer)
  bool bounce_out = false;             // copy the bounce buffer back to `user` afterwards
};

void check_host_alignment(const void* p, const ByteRange& span, size_t elem, const char* side) {
  const auto lo = reinterpret_cast<uintptr_t>(p) + span.lo;
  if (lo % elem != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} host address {} is not aligned to the element size {}; DMA "
                            "moves naturally aligned elements",
                            side, reinterpret_cast<const void*>(lo), elem));
  }
}

}  // namespace

// The caller's pageable memory for one transfer: mapped in place for the duration of the
// call when possible, otherwise (or when the data must outlive the call) a pinned copy.
static Side pageable_side(Device::Impl& d, const uint8_t* p, const ByteRange& span, size_t elem,
                          bool is_source, bool keep_after_return) {
  Side side;
  side.space = isa::AddressSpace::kHost;
  auto r = std::make_shared<HostRegion>();
  r->bytes = span.size();
  if (!keep_after_return) {
    r->kind = HostRegion::Kind::kTemporary;
    r->ptr = const_cast<uint8_t*>(p + span.lo);  // the device writes here only for dst sides
    if (isa::Result<uint64_t> bus = d.dev->map_host(r->ptr, r->bytes); bus) {
      r->bus = bus.value();
      if (r->bus % elem == 0) {
        side.region = r;
        side.base = r->bus - span.lo;
        return side;
      }
      // The mapping broke the alignment: bounce instead.
      if (isa::Status unmapped = d.dev->unmap_host(r->bus); !unmapped) {
        d.log->error("unmapping {} failed: {}", static_cast<const void*>(r->ptr),
                     unmapped.error().reason);
      }
    } else {
      d.log->debug("mapping pageable memory {} + {} bytes failed ({}); using a bounce buffer",
                   static_cast<const void*>(r->ptr), r->bytes, bus.error().reason);
    }
  }
  // A pinned staging copy of the whole span. A destination is pre-filled with the caller's
  // bytes so that the gaps between its elements survive the copy back.
  r = d.take_staging(span.size());
  std::memcpy(r->ptr, p + span.lo, span.size());
  side.region = r;
  side.base = r->bus - span.lo;
  if (!is_source) {
    side.user = p;
    side.bounce_out = true;
  }
  return side;
}

isa::DmaCopyPacket copy_packet(const CopyPiece& piece, size_t elem, uint64_t src_base,
                               isa::AddressSpace src_space, uint64_t dst_base,
                               isa::AddressSpace dst_space) {
  isa::DmaCopyPacket pk{};
  pk.ndims = static_cast<uint8_t>(piece.ndims);
  pk.elem_size = static_cast<uint8_t>(elem);
  for (int k = 0; k < piece.ndims; ++k) {
    pk.sizes[k] = piece.sizes[k];
    pk.src.strides[k] = piece.src_strides[k];
    pk.dst.strides[k] = piece.dst_strides[k];
  }
  pk.src.addr = src_base + piece.src_offset;
  pk.src.space = static_cast<uint8_t>(src_space);
  pk.dst.addr = dst_base + piece.dst_offset;
  pk.dst.space = static_cast<uint8_t>(dst_space);
  return pk;
}

std::shared_ptr<HostRegion> Device::Impl::take_staging(uint64_t bytes) {
  const uint64_t capacity = std::bit_ceil(std::max(bytes, kPageBytes));
  if (auto cached = host.take_staging(capacity)) return cached;
  return alloc_mapped(capacity, HostRegion::Kind::kStaging,
                      fmt::format("a {}-byte staging buffer", capacity));
}

void Device::Impl::return_staging(const std::shared_ptr<HostRegion>& r) {
  if (host.cache_staging(r)) return;
  // Full (or the device is closing). Unmapping may not happen on the backend's thread: leave it to
  // the worker.
  defer([this, r] { release_region(r); });
}

void Device::Impl::copy(Dir dir, uint64_t dst, const Layout& dl, uint64_t src, const Layout& sl,
                        Stream stream, bool async) {
  ApiCall call(*trace, async ? "copy_async" : "copy");
  const char* what = dir == Dir::kHostToDevice   ? "host to device"
                     : dir == Dir::kDeviceToHost ? "device to host"
                                                 : "device to device";
  call.set_label(std::string("copy ") + what);
  // The host side's bursts cross PCIe, the slowest link: walk it contiguously.
  const CopyPlan plan = plan_copy(
      dl, sl,
      dir == Dir::kHostToDevice ? LoopOrder::kSourceContiguous : LoopOrder::kDestinationContiguous);
  auto s = stream_state(stream);
  if (dir != Dir::kDeviceToDevice) {
    refuse_in_capture(*s, "a copy between host and device memory",
                      "it reads or writes host memory");
  }
  if (!async) refuse_in_capture(*s, "a synchronous copy", "it waits for the stream");
  call.set_detail(
      fmt::format("{}, {} bytes, stream {}", what, plan.elements * plan.elem_size, s->id));
  if (plan.elements == 0) return;
  const size_t elem = plan.elem_size;
  const uint64_t npieces = plan.pieces.size();

  // Device sides first: they only need checking.
  Side dst_side, src_side;
  if (dir != Dir::kHostToDevice) {
    memory->check_span(DevicePtr(src), plan.src_span, elem, "src");
    src_side.base = src;
  }
  if (dir != Dir::kDeviceToHost) {
    memory->check_span(DevicePtr(dst), plan.dst_span, elem, "dst");
    dst_side.base = dst;
  }

  // The host side: pinned (refcounted for the copy's lifetime) or pageable.
  const bool h2d = dir == Dir::kHostToDevice;
  if (dir != Dir::kDeviceToDevice) {
    const auto* p = reinterpret_cast<const uint8_t*>(h2d ? src : dst);
    const ByteRange& span = h2d ? plan.src_span : plan.dst_span;
    const char* name = h2d ? "src" : "dst";
    check_host_alignment(p, span, elem, name);
    Side& side = h2d ? src_side : dst_side;
    side.space = isa::AddressSpace::kHost;
    // Registered memory the backend could not map comes back as nullptr: it is copied as
    // pageable memory is.
    side.region = host.acquire(p, span, name, npieces);
    if (side.region) {
      side.base = side.region->bus + static_cast<uint64_t>(p - side.region->ptr);
    } else {
      // Pageable: host->device async copies stage the data so the caller may reuse its
      // memory at once; everything else is done synchronously on mapped memory.
      const bool stage = h2d && async;
      if (!stage) async = false;
      side = pageable_side(*this, p, span, elem, h2d, stage);
      side.region->inflight = npieces;
    }
  }
  std::shared_ptr<HostRegion> region = h2d ? src_side.region : dst_side.region;

  // When the last packet touching a region completes: release staging buffers, and wake
  // host_free / host_unregister waiting for pinned memory to go quiet.
  auto done_with_region = [this, region](uint64_t n) {
    if (region && host.release(region, n)) return_staging(region);
  };
  const bool keep_region_for_caller =  // released below by this thread, not by a callback
      region && (region->kind == HostRegion::Kind::kTemporary ||
                 (region->kind == HostRegion::Kind::kStaging && !async));
  auto finish_with = [this](const std::shared_ptr<HostRegion>& r) {
    if (r->kind == HostRegion::Kind::kStaging) {
      return_staging(r);
    } else {
      release_region(r);
    }
  };

  uint64_t submitted = 0, last_seq = 0;
  try {
    for (const CopyPiece& piece : plan.pieces) {
      const isa::DmaCopyPacket pk =
          copy_packet(piece, elem, src_side.base, src_side.space, dst_side.base, dst_side.space);
      if (keep_region_for_caller) {
        last_seq = submit(s, pk, [this, region](const driver::Completion&) {
          (void)host.release(region, 1);  // this thread gives the region back afterwards
        });
      } else {
        last_seq =
            submit(s, pk, [done_with_region](const driver::Completion&) { done_with_region(1); });
      }
      ++submitted;
    }
  } catch (...) {
    // Nothing more will be submitted: give back the references of the pieces never sent.
    if (keep_region_for_caller) {
      wait_seq(*s, last_seq);
      finish_with(region);
    } else {
      done_with_region(npieces - submitted);
    }
    throw;
  }

  if (async) return;
  wait_seq(*s, last_seq);
  if (keep_region_for_caller) {
    const Side& host = h2d ? src_side : dst_side;
    if (host.bounce_out && !s->pending_error()) {
      const ByteRange& span = plan.dst_span;
      std::memcpy(const_cast<uint8_t*>(host.user) + span.lo, region->ptr, span.size());
    }
    finish_with(region);
  }
  throw_pending(*s);
}

void Device::Impl::fill(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream stream,
                        bool async) {
  ApiCall call(*trace, async ? "fill_async" : "fill");
  call.set_label("fill");
  const CopyPlan plan = plan_fill(layout);
  if (plan.elem_size < 8 && (pattern >> (8 * plan.elem_size)) != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("fill: pattern 0x{:x} does not fit in the element size of {} "
                            "bytes; pass only the element's bits",
                            pattern, plan.elem_size));
  }
  auto s = stream_state(stream);
  if (!async) refuse_in_capture(*s, "a synchronous fill", "it waits for the stream");
  call.set_detail(fmt::format("{} bytes at 0x{:x}, stream {}", plan.elements * plan.elem_size,
                              dst.address(), s->id));
  if (plan.elements == 0) return;
  memory->check_span(dst, plan.dst_span, plan.elem_size, "dst");
  uint64_t last_seq = 0;
  for (const CopyPiece& piece : plan.pieces) {
    isa::FillPacket pk{};
    pk.ndims = static_cast<uint8_t>(piece.ndims);
    pk.pattern_size = static_cast<uint8_t>(plan.elem_size);
    pk.pattern = pattern;
    for (int k = 0; k < piece.ndims; ++k) {
      pk.sizes[k] = piece.sizes[k];
      pk.dst.strides[k] = piece.dst_strides[k];
    }
    pk.dst.addr = dst.address() + piece.dst_offset;
    pk.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
    last_seq = submit(s, pk);
  }
  if (async) return;
  wait_seq(*s, last_seq);
  throw_pending(*s);
}

// --- public entry points ------------------------------------------------------------------

namespace {

uint64_t host_addr(const void* p) {
  return reinterpret_cast<uint64_t>(p);
}

Layout bytes_layout(uint64_t bytes) {
  if (bytes > static_cast<uint64_t>(INT64_MAX)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("copy of {} bytes is larger than any memory", bytes));
  }
  return Layout::contiguous({static_cast<int64_t>(bytes)}, 1);
}

}  // namespace

using Dir = Device::Impl::Dir;

void Device::copy(DevicePtr dst, const Layout& dl, const void* src, const Layout& sl, Stream s) {
  impl_->copy(Dir::kHostToDevice, dst.address(), dl, host_addr(src), sl, s, false);
}
void Device::copy(void* dst, const Layout& dl, DevicePtr src, const Layout& sl, Stream s) {
  impl_->copy(Dir::kDeviceToHost, host_addr(dst), dl, src.address(), sl, s, false);
}
void Device::copy(DevicePtr dst, const Layout& dl, DevicePtr src, const Layout& sl, Stream s) {
  impl_->copy(Dir::kDeviceToDevice, dst.address(), dl, src.address(), sl, s, false);
}
void Device::copy_async(DevicePtr dst, const Layout& dl, const void* src, const Layout& sl,
                        Stream s) {
  impl_->copy(Dir::kHostToDevice, dst.address(), dl, host_addr(src), sl, s, true);
}
void Device::copy_async(void* dst, const Layout& dl, DevicePtr src, const Layout& sl, Stream s) {
  impl_->copy(Dir::kDeviceToHost, host_addr(dst), dl, src.address(), sl, s, true);
}
void Device::copy_async(DevicePtr dst, const Layout& dl, DevicePtr src, const Layout& sl,
                        Stream s) {
  impl_->copy(Dir::kDeviceToDevice, dst.address(), dl, src.address(), sl, s, true);
}

void Device::copy(DevicePtr dst, const void* src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy(dst, l, src, l, s);
}
void Device::copy(void* dst, DevicePtr src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy(dst, l, src, l, s);
}
void Device::copy(DevicePtr dst, DevicePtr src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy(dst, l, src, l, s);
}
void Device::copy_async(DevicePtr dst, const void* src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy_async(dst, l, src, l, s);
}
void Device::copy_async(void* dst, DevicePtr src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy_async(dst, l, src, l, s);
}
void Device::copy_async(DevicePtr dst, DevicePtr src, uint64_t bytes, Stream s) {
  const Layout l = bytes_layout(bytes);
  copy_async(dst, l, src, l, s);
}

void Device::fill(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream s) {
  impl_->fill(dst, layout, pattern, s, false);
}
void Device::fill_async(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream s) {
  impl_->fill(dst, layout, pattern, s, true);
}

namespace {

// memset as the widest fill the address and length allow: fewer, larger elements.
std::pair<Layout, uint64_t> memset_fill(DevicePtr dst, uint8_t value, uint64_t bytes) {
  if (bytes > static_cast<uint64_t>(INT64_MAX)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("memset of {} bytes is larger than any memory", bytes));
  }
  size_t elem = 8;
  while (elem > 1 && (dst.address() % elem != 0 || bytes % elem != 0)) elem /= 2;
  uint64_t pattern = 0;
  for (size_t i = 0; i < elem; ++i) pattern |= uint64_t{value} << (8 * i);
  return {Layout::contiguous({static_cast<int64_t>(bytes / elem)}, elem), pattern};
}

}  // namespace

void Device::memset(DevicePtr dst, uint8_t value, uint64_t bytes, Stream s) {
  auto [layout, pattern] = memset_fill(dst, value, bytes);
  fill(dst, layout, pattern, s);
}
void Device::memset_async(DevicePtr dst, uint8_t value, uint64_t bytes, Stream s) {
  auto [layout, pattern] = memset_fill(dst, value, bytes);
  fill_async(dst, layout, pattern, s);
}

}  // namespace mtia
