// Devices working together: peer copies and waits for another device's events.
//
// Two devices share nothing but the host, as two cards on a PCIe bus do without a direct
// link. So a peer copy is a device-to-host copy on the source device into a buffer that both
// devices can reach, then a host-to-device copy on the destination. Each half is timed on
// its own device's PCIe model. The order between the devices is kept without a host thread
// blocking:
//  * the destination stream gets a WaitPacket on a fence word of its own device;
//  * when the source side (a copy, or an event's record) completes, the source's completion
//    hands a task to the destination's worker thread;
//  * that task writes the fence with a SignalPacket on the destination's repair queue, which
//    lets the stream go on.
#include <spdlog/fmt/fmt.h>

#include "device_impl.h"

namespace mtia {

HostFence Device::Impl::hold_stream_for_host(const std::shared_ptr<StreamState>& s) {
  HostFence f;
  f.slot = take_fence_slot();
  f.value = ++f.slot.value;
  isa::WaitPacket w{};
  w.addr = f.slot.addr;
  w.value = f.value;
  w.condition = static_cast<uint8_t>(isa::WaitCondition::kGreaterEqual);
  try {
    submit(s, w);
  } catch (...) {
    fence_slots.give(f.slot);
    throw;
  }
  return f;
}

void Device::Impl::release_host_fence(const HostFence& f, const std::shared_ptr<StreamState>& s,
                                      const std::string& failure) {
  if (!failure.empty()) s->note_failure(failure);
  isa::SignalPacket sig{};
  sig.addr = f.slot.addr;
  sig.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  sig.value = f.value;
  // The slot goes back once the fence is written: later values only grow, so a wait still
  // queued for this one can never be held by its reuse.
  auto give_back = [this, f](const driver::Completion& c) {
    if (!c.ok && !c.lost) log->error("releasing a held stream failed: {}", c.message);
    fence_slots.give(f.slot);
  };
  if (isa::Result<uint64_t> submitted = dev->submit(repair_queue, sig, give_back); !submitted) {
    // Only a lost device refuses; its streams end with the loss.
    log->error("cannot release a held stream: {}", submitted.error().reason);
  }
}

void Device::Impl::run_on_worker_of(const std::shared_ptr<ImplLife>& life,
                                    std::function<void(Impl&)> task) {
  // Held only to queue the task (defer never blocks): the closing device waits for nothing.
  std::lock_guard lock(life->mu);
  if (life->impl == nullptr) return;  // closed; its streams drained long ago
  Impl* impl = life->impl;
  impl->defer([impl, task = std::move(task)] { task(*impl); });
}

namespace {

// Both Impls of a pair of devices, and whether they are one device.
bool same_device(const Device::Impl& a, const Device::Impl& b) {
  return &a == &b;
}

}  // namespace

void Device::wait_event(Stream stream, Device& event_device, Event event) {
  Impl& d = *impl_;
  Impl& other = *event_device.impl_;
  if (same_device(d, other)) return wait_event(stream, event);
  ApiCall call(*d.trace, "wait_event");
  auto s = d.stream_state(stream);
  auto ev = other.event_state(event);
  call.set_detail(
      fmt::format("stream {} waits for event {} of device {}", s->id, ev->id, other.options.index));
  d.refuse_in_capture(*s, "a wait for another device's event",
                      "a graph's dependencies are on its own device");
  other.refuse_captured_event(*ev, "wait_event");
  uint64_t target = 0;
  {
    std::lock_guard lock(ev->mu);
    if (!ev->recorded || ev->done_value >= ev->value) return;  // nothing left to wait for
    target = ev->value;
  }
  const HostFence fence = d.hold_stream_for_host(s);
  auto release = [life = d.life, fence, s, ev, target] {
    Impl::run_on_worker_of(life, [fence, s, ev, target](Impl& impl) {
      std::string failure;
      {
        std::lock_guard lock(ev->mu);
        if (ev->value == target && ev->failed) failure = ev->failure;
      }
      impl.release_host_fence(fence, s, failure);
    });
  };
  std::unique_lock lock(ev->mu);
  if (ev->done_value >= target) {
    lock.unlock();
    release();
    return;
  }
  ev->watchers.emplace_back(target, std::move(release));
}

void Device::copy_peer_async(DevicePtr dst, const Layout& dst_layout, Device& src_device,
                             DevicePtr src, const Layout& src_layout, Stream stream,
                             Stream src_stream) {
  Impl& d = *impl_;
  Impl& a = *src_device.impl_;
  if (same_device(d, a)) {
    // One device: an ordinary device-to-device copy, after the source stream's work.
    if (src_stream.id != stream.id) synchronize(src_stream);
    return copy_async(dst, dst_layout, src, src_layout, stream);
  }
  ApiCall call(*d.trace, "copy_peer_async");
  call.set_label("peer copy");
  const CopyPlan check = plan_copy(dst_layout, src_layout, LoopOrder::kDestinationContiguous);
  auto s = d.stream_state(stream);
  auto as = a.stream_state(src_stream);
  d.refuse_in_capture(*s, "a copy between devices", "it goes through host memory");
  a.refuse_in_capture(*as, "a copy between devices", "it goes through host memory");
  const size_t elem = check.elem_size;
  const uint64_t bytes = check.elements * elem;
  call.set_detail(fmt::format("{} bytes from device {} stream {} to stream {}", bytes,
                              a.options.index, as->id, s->id));
  if (check.elements == 0) return;
  a.memory->check_span(src, check.src_span, elem, "src");
  d.memory->check_span(dst, check.dst_span, elem, "dst");
  d.check_lost();
  a.check_lost();

  // The bounce buffer: this device's staging memory, mapped for the source device too.
  std::shared_ptr<HostRegion> bounce = d.take_staging(bytes);
  isa::Result<uint64_t> src_bus = a.dev->map_host(bounce->ptr, bounce->bytes);
  if (!src_bus) {
    d.return_staging(bounce);
    raise(src_bus.error(), "copy_peer_async: the source device cannot reach the bounce buffer: ");
  }
  // The same elements, packed in order, on the host.
  const Layout packed = Layout::contiguous(dst_layout.sizes, elem);
  const CopyPlan down = plan_copy(packed, src_layout, LoopOrder::kDestinationContiguous);
  const CopyPlan up = plan_copy(dst_layout, packed, LoopOrder::kSourceContiguous);

  // The source half may fail; the destination half then still runs (its stream must not stay
  // held) and reports the source's failure as its own.
  auto source_failure = std::make_shared<std::string>();
  const HostFence fence = d.hold_stream_for_host(s);
  const uint64_t a_bus = src_bus.value();
  // Unmapping is a call to the source device: made on its worker (never while holding a
  // lock its completions need).
  auto cleanup = [a_life = a.life, bounce, a_bus](Impl& impl) {
    Impl::run_on_worker_of(a_life, [a_bus](Impl& src_impl) {
      if (isa::Status un = src_impl.dev->unmap_host(a_bus); !un) {
        src_impl.log->warn("unmapping a peer copy's bounce buffer: {}", un.error().reason);
      }
    });
    impl.return_staging(bounce);
  };
  uint64_t n = 0;
  for (const CopyPiece& piece : up.pieces) {
    const bool last = ++n == up.pieces.size();
    d.submit(s,
             copy_packet(piece, elem, bounce->bus, isa::AddressSpace::kHost, dst.address(),
                         isa::AddressSpace::kDevice),
             last ? std::function<void(const driver::Completion&)>(
                        [life = d.life, cleanup](const driver::Completion&) {
                          Impl::run_on_worker_of(life, cleanup);
                        })
                  : nullptr);
  }
  n = 0;
  const int src_index = static_cast<int>(a.options.index);
  for (const CopyPiece& piece : down.pieces) {
    const bool last = ++n == down.pieces.size();
    std::function<void(const driver::Completion&)> on_done;
    if (last) {
      on_done = [life = d.life, fence, s, src_index](const driver::Completion& c) {
        std::string failure;
        if (!c.ok) {
          failure = fmt::format("peer copy: its source half on device {} failed: {}", src_index,
                                c.message);
        }
        Impl::run_on_worker_of(
            life, [fence, s, failure](Impl& impl) { impl.release_host_fence(fence, s, failure); });
      };
    }
    a.submit(as,
             copy_packet(piece, elem, src.address(), isa::AddressSpace::kDevice, a_bus,
                         isa::AddressSpace::kHost),
             on_done);
  }
}

void Device::copy_peer(DevicePtr dst, const Layout& dst_layout, Device& src_device, DevicePtr src,
                       const Layout& src_layout, Stream stream, Stream src_stream) {
  copy_peer_async(dst, dst_layout, src_device, src, src_layout, stream, src_stream);
  synchronize(stream);
}

void Device::copy_peer(DevicePtr dst, Device& src_device, DevicePtr src, uint64_t bytes,
                       Stream stream, Stream src_stream) {
  if (bytes > static_cast<uint64_t>(INT64_MAX)) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("copy_peer of {} bytes is larger than any memory", bytes));
  }
  const Layout l = Layout::contiguous({static_cast<int64_t>(bytes)}, 1);
  copy_peer(dst, l, src_device, src, l, stream, src_stream);
}

}  // namespace mtia
