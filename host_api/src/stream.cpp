// Streams, events and synchronisation.
//
// A stream is a hardware queue plus the seq of the last packet submitted for it. Events are
// fences: record() queues a SignalPacket that writes the event's next value into its 8-byte
// fence slot in device memory; wait_event() queues a WaitPacket (fence >= value) on the
// waiting stream's queue, so the device, not a host thread, holds the dependency. During a
// graph capture, records and waits are the graph's instead (graph.cpp).
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "device_impl.h"
#include "mtia/activity.h"
#include "mtia/raw_packet.h"

namespace mtia {
namespace {

constexpr uint64_t kFenceSlab = 4096;  // bytes of fence slots allocated at a time

}  // namespace

// --- handles ------------------------------------------------------------------------------

std::shared_ptr<StreamState> Device::Impl::stream_state(Stream s) const {
  std::lock_guard lock(mu);
  auto it = streams.find(s.id);
  if (it != streams.end()) return it->second;
  if (s.id < next_stream_id) {
    throw Error(
        ErrorKind::kInvalidHandle,
        fmt::format("stream {} was destroyed; create a new one with create_stream()", s.id));
  }
  throw Error(ErrorKind::kInvalidHandle,
              fmt::format("stream {} was never created on this device", s.id));
}

std::shared_ptr<EventState> Device::Impl::event_state(Event e) const {
  std::lock_guard lock(mu);
  auto it = events.find(e.id);
  if (it != events.end()) return it->second;
  if (e.id != 0 && e.id < next_event_id) {
    throw Error(ErrorKind::kInvalidHandle,
                fmt::format("event {} was destroyed; create a new one with create_event()", e.id));
  }
  throw Error(ErrorKind::kInvalidHandle,
              fmt::format("event {} was never created on this device (use create_event())", e.id));
}

// --- submission and waiting ---------------------------------------------------------------

namespace {

uint64_t region_bytes(uint8_t ndims, const uint64_t* sizes, uint64_t elem) {
  uint64_t n = elem;
  for (uint8_t i = 0; i < ndims && i < isa::kMaxDims; ++i) n *= sizes[i];
  return n;
}

// What an activity observer is told about a packet, before it runs; nullopt for the fences and
// waits the runtime queues for its own bookkeeping.
std::optional<DeviceActivity> describe_activity(const isa::Packet& packet) {
  DeviceActivity a;
  if (const auto* p = std::get_if<isa::LaunchPacket>(&packet)) {
    a.kind = ActivityKind::kLaunch;
    a.name = fmt::format("kernel@0x{:x}+0x{:x}", p->image_addr, p->entry_offset);
  } else if (const auto* p = std::get_if<isa::DmaCopyPacket>(&packet)) {
    a.kind = ActivityKind::kCopy;
    a.bytes = region_bytes(p->ndims, p->sizes, p->elem_size);
    const bool from_host = p->src.space != static_cast<uint8_t>(isa::AddressSpace::kDevice);
    const bool to_host = p->dst.space != static_cast<uint8_t>(isa::AddressSpace::kDevice);
    a.name = from_host ? "copy host to device"
             : to_host ? "copy device to host"
                       : "copy device to device";
  } else if (const auto* p = std::get_if<isa::FillPacket>(&packet)) {
    a.kind = ActivityKind::kFill;
    a.bytes = region_bytes(p->ndims, p->sizes, p->pattern_size);
    a.name = "fill";
  } else if (std::holds_alternative<isa::ExecBufferPacket>(packet)) {
    a.kind = ActivityKind::kGraph;
    a.name = "graph replay";
  } else if (const auto* p = std::get_if<isa::LinkTransferPacket>(&packet)) {
    a.kind = ActivityKind::kLink;
    a.bytes = p->bytes;
    a.name = p->direction == static_cast<uint8_t>(isa::LinkDirection::kSend) ? "link send"
                                                                             : "link receive";
  } else {
    return std::nullopt;
  }
  return a;
}

}  // namespace

uint64_t Device::Impl::submit(const std::shared_ptr<StreamState>& s, const isa::Packet& packet,
                              std::function<void(const driver::Completion&)> extra) {
  auto on_complete = [s, extra = std::move(extra)](const driver::Completion& c) {
    if (!c.ok) s->note_failure(c.message);
    // The driver marks a seq done only after its callback ran; a thread that sees an event
    // done (set in that callback) must also see the stream done, so the stream's own mark
    // goes first.
    uint64_t seen = s->done_seq.load(std::memory_order_relaxed);
    while (seen < c.seq &&
           !s->done_seq.compare_exchange_weak(seen, c.seq, std::memory_order_release)) {
    }
    if (extra) extra(c);
  };
  check_lost();
  if (capture_packet(*s, packet)) return 0;  // recorded into the stream's graph, not queued
  std::function<void(const driver::Completion&)> done = std::move(on_complete);
  std::shared_ptr<ActivityObserver> counted;  // told of the submission once it is queued
  if (std::shared_ptr<ActivityObserver> observer = trace->observer()) {
    if (std::optional<DeviceActivity> a = describe_activity(packet)) {
      const ApiCall::Observed call = ApiCall::observed_call();
      a->device = options.index;
      a->stream = s->id;
      a->queue = s->queue;
      a->call = call.id;
      a->tag = activity_tag();
      if (call.label != nullptr && !call.label->empty() && a->kind != ActivityKind::kGraph) {
        a->name = *call.label;
      }
      a->submit_ns = wall_clock_ns();
      counted = observer;
      done = [observer = std::move(observer), a = std::move(*a),
              inner = std::move(done)](const driver::Completion& c) mutable {
        inner(c);
        a.seq = c.seq;
        a.start_ps = c.start_ps;
        a.end_ps = std::max(c.start_ps, c.end_ps);
        a.ok = c.ok && !c.aborted && !c.lost;
        observer->on_device_activity(a);
      };
    }
  }
  isa::Result<uint64_t> submitted = dev->submit(s->queue, packet, std::move(done));
  if (!submitted) {
    check_lost();
    throw Error(ErrorKind::kDeviceUnavailable, fmt::format("cannot submit to hardware queue {}: {}",
                                                           s->queue, submitted.error().reason));
  }
  const uint64_t seq = submitted.value();
  if (counted != nullptr) counted->on_device_submitted();
  ApiCall::submitted(*trace, s->queue, seq);
  s->note_submitted(seq);
  return seq;
}

void Device::Impl::wait_seq(const StreamState& s, uint64_t seq) {
  if (seq == 0) return;
  // After the packet's callback ran.
  const isa::Result<driver::Completion> c = dev->wait(s.queue, seq);
  if (!c) {
    check_lost();
    throw Error(ErrorKind::kDeviceUnavailable,
                fmt::format("waiting for hardware queue {} failed: {}", s.queue, c.error().reason));
  }
  trace->observed(c.value().end_ps);  // the host clock of the trace (host_trace.h)
}

void Device::Impl::check_lost() const {
  const std::string why = dev->lost_reason();
  if (why.empty()) return;
  throw Error(ErrorKind::kDeviceLost,
              fmt::format("the device was lost: {}. Every call on it fails from now on: destroy "
                          "this mtia::Device and open a new one",
                          why));
}

void Device::Impl::throw_pending(StreamState& s) {
  check_lost();
  if (auto message = s.take_error()) {
    throw Error(ErrorKind::kDeviceFault, fmt::format("stream {}: {}", s.id, *message));
  }
}

void Device::Impl::drain_stream(const std::shared_ptr<StreamState>& s) {
  wait_seq(*s, s->last_seq());
}

// --- streams ------------------------------------------------------------------------------

Stream Device::create_stream() {
  impl_->check_lost();
  Impl& d = *impl_;
  std::lock_guard lock(d.mu);
  const uint32_t span = d.last_user_queue - d.first_user_queue + 1;
  auto s = std::make_shared<StreamState>(d.next_stream_id++,
                                         d.first_user_queue + d.next_stream_queue++ % span);
  d.streams.emplace(s->id, s);
  return Stream{s->id};
}

void Device::destroy_stream(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "destroy_stream");
  if (stream.is_default()) {
    throw Error(ErrorKind::kInvalidHandle, "the default stream (stream 0) cannot be destroyed");
  }
  auto s = d.stream_state(stream);
  d.refuse_in_capture(*s, "destroy_stream", "it waits for the stream");
  {
    std::lock_guard lock(d.mu);
    if (d.streams.erase(stream.id) == 0) {
      throw Error(ErrorKind::kInvalidHandle,
                  fmt::format("stream {} was destroyed (by another thread)", stream.id));
    }
  }
  d.drain_stream(s);
  if (auto error = s->pending_error()) {
    d.log->warn("stream {} was destroyed with an unreported device error: {}", s->id, *error);
  }
}

bool Device::query(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "query");
  auto s = d.stream_state(stream);
  call.set_detail(fmt::format("stream {}", s->id));
  d.refuse_in_capture(*s, "query(stream)", "it asks whether the stream's work has run");
  const uint64_t last = s->last_seq();
  if (last != 0) {
    const bool done = value_or_raise(d.dev->is_done(s->queue, last));
    // Not done but handled: its completion callbacks are running now (the stream's mark is set
    // before them). Wait the moment they take, so that an event recorded last on the stream
    // is done too whenever the stream is.
    if (!done && s->done_seq.load(std::memory_order_acquire) < last) return false;
    if (!done || call.active()) {
      const driver::Completion c = value_or_raise(d.dev->wait(s->queue, last));
      if (call.active()) d.trace->observed(c.end_ps);
    }
  }
  d.throw_pending(*s);
  return true;
}

void Device::synchronize(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "synchronize");
  auto s = d.stream_state(stream);
  call.set_detail(fmt::format("stream {}", s->id));
  d.refuse_in_capture(*s, "synchronize(stream)", "it waits for the stream");
  d.drain_stream(s);
  d.throw_pending(*s);
}

uint32_t Device::hardware_queue(Stream stream) const {
  return impl_->stream_state(stream)->queue;
}

void Device::synchronize() {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "synchronize");
  call.set_detail("every stream");
  std::vector<std::shared_ptr<StreamState>> all;
  {
    std::lock_guard lock(d.mu);
    for (auto& [id, s] : d.streams) all.push_back(s);
  }
  for (auto& s : all) d.refuse_in_capture(*s, "synchronize()", "it waits for every stream");
  for (auto& s : all) d.drain_stream(s);
  d.check_lost();
  // Report every stream's pending error at once, so none is lost.
  std::string message;
  for (auto& s : all) {
    if (auto error = s->take_error()) {
      message += fmt::format("{}stream {}: {}", message.empty() ? "" : "; ", s->id, *error);
    }
  }
  if (!message.empty()) throw Error(ErrorKind::kDeviceFault, message);
}

void Device::wait_event(Stream stream, Event event) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "wait_event");
  auto s = d.stream_state(stream);
  auto ev = d.event_state(event);
  call.set_detail(fmt::format("stream {} waits for event {}", s->id, ev->id));
  if (d.capture_wait(s, *ev)) return;  // a fork or a dependency inside a graph (graph.cpp)
  isa::WaitPacket w{};
  {
    std::lock_guard lock(ev->mu);
    // Never recorded: nothing to wait for. Same queue: in-order execution already waits.
    if (!ev->recorded || ev->queue == s->queue) return;
    w.addr = ev->slot.addr;
    w.value = ev->value;
    w.condition = static_cast<uint8_t>(isa::WaitCondition::kGreaterEqual);
  }
  // Not between the parts of a graph's replay (graph.cpp, replay).
  std::lock_guard order(d.order_mu);
  d.submit(s, w);
}

// --- events -------------------------------------------------------------------------------

FenceSlot Device::Impl::take_fence_slot() {
  if (auto slot = fence_slots.take()) return *slot;
  isa::Result<uint64_t> slab = memory->allocator().allocate(kFenceSlab);
  if (!slab) {
    throw Error(
        ErrorKind::kOutOfMemory,
        fmt::format("create_event: no device memory for event fences: {}", slab.error().reason));
  }
  const uint64_t base = slab.value();
  // Fences start at zero; nothing refers to the new slab yet, so a direct write is ordered.
  static const std::vector<uint8_t> zeros(kFenceSlab, 0);
  if (isa::Status zeroed = dev->write_memory(base, zeros.data(), zeros.size()); !zeroed) {
    (void)memory->allocator().free(base);  // it was just allocated
    throw Error(
        ErrorKind::kDeviceUnavailable,
        fmt::format("create_event: cannot initialise event fences: {}", zeroed.error().reason));
  }
  memory->add_runtime_block(base, kFenceSlab);
  for (uint64_t off = kFenceSlab; off > 8; off -= 8) fence_slots.give({base + off - 8, 0});
  return FenceSlot{base, 0};
}

Event Device::create_event() {
  impl_->check_lost();
  Impl& d = *impl_;
  auto ev = std::make_shared<EventState>();
  ev->slot = d.take_fence_slot();
  ev->value = ev->done_value = ev->slot.value;
  ev->done_published.store(ev->done_value, std::memory_order_relaxed);
  std::lock_guard lock(d.mu);
  ev->id = d.next_event_id++;
  d.events.emplace(ev->id, ev);
  return Event{ev->id};
}

void Device::destroy_event(Event event) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "destroy_event");
  auto ev = d.event_state(event);
  {
    std::lock_guard lock(d.mu);
    if (d.events.erase(event.id) == 0) {
      throw Error(ErrorKind::kInvalidHandle,
                  fmt::format("event {} was destroyed (by another thread)", event.id));
    }
  }
  // The slot is reused only once its last fence write has landed (values keep growing).
  std::unique_lock lock(ev->mu);
  ev->done_cv.wait(lock, [&] { return ev->done_value >= ev->value; });
  ev->slot.value = ev->value;
  d.fence_slots.give(ev->slot);
}

void Device::Impl::repair_fence(std::shared_ptr<EventState> ev, uint64_t value,
                                std::string failure) {
  // The record's SignalPacket never ran: write the fence from the repair queue so streams
  // waiting on the event move on, then mark the record done (and failed).
  isa::SignalPacket sig{};
  sig.addr = ev->slot.addr;
  sig.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  sig.value = value;
  auto finish = [this, ev, value, failure](const driver::Completion& c) {
    if (!c.ok && !c.lost) log->error("event {}: repairing its fence failed: {}", ev->id, c.message);
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard lock(ev->mu);
      ev->done_value = std::max(ev->done_value, value);
      ev->done_published.store(ev->done_value, std::memory_order_release);
      if (value == ev->value) {
        ev->time_ps = 0;
        ev->failed = true;
        ev->failure = failure;
      }
      ready = ev->take_ready_watchers();
    }
    ev->done_cv.notify_all();
    for (auto& fn : ready) fn();
  };
  if (isa::Result<uint64_t> submitted = dev->submit(repair_queue, sig, finish); !submitted) {
    // The repair cannot run (on a lost device nothing can; waiters learn of the loss from
    // check_lost()): the record ends failed all the same.
    driver::Completion failed;
    failed.ok = false;
    failed.lost = !dev->lost_reason().empty();
    failed.message = "cannot submit a fence repair: " + submitted.error().reason;
    finish(failed);
  }
}

void Device::Impl::record(Event event, Stream stream) {
  ApiCall call(*trace, "record");
  auto s = stream_state(stream);
  auto ev = event_state(event);
  call.set_detail(fmt::format("event {} on stream {}", ev->id, s->id));
  if (capture_record(*s, *ev)) return;  // into the stream's graph (graph.cpp)
  std::unique_lock lock(ev->mu);
  // Fence values must only grow. A new record on another queue could overtake the pending
  // one and be overwritten by it, so wait for the pending one first (rare in practice).
  if (ev->recorded && ev->queue != s->queue) {
    ev->done_cv.wait(lock, [&] { return ev->done_value >= ev->value; });
  }
  const uint64_t value = ++ev->value;
  ev->recorded = true;
  ev->queue = s->queue;
  ev->stream_id = s->id;
  lock.unlock();

  isa::SignalPacket sig{};
  sig.addr = ev->slot.addr;
  sig.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  sig.value = value;
  submit(s, sig, [this, ev, value](const driver::Completion& c) {
    if (!c.ok) {
      defer([this, ev, value, msg = c.message] { repair_fence(ev, value, msg); });
      return;
    }
    std::vector<std::function<void()>> ready;
    {
      std::lock_guard lock(ev->mu);
      ev->done_value = std::max(ev->done_value, value);
      ev->done_published.store(ev->done_value, std::memory_order_release);
      if (value == ev->value) {
        ev->time_ps = c.end_ps;
        ev->failed = false;
        ev->failure.clear();
      }
      ready = ev->take_ready_watchers();
    }
    // After the unlock, so the woken thread does not run straight into the held lock.
    ev->done_cv.notify_all();
    for (auto& fn : ready) fn();
  });
}

void Device::record(Event event, Stream stream) {
  impl_->record(event, stream);
}

void Device::Impl::wait_event_done(EventState& ev, std::unique_lock<std::mutex>& lock) {
  if (ev.done_value >= ev.value) return;
  // Spin or yield first (the wait policy), then sleep until the record's completion.
  const uint64_t want = ev.value;
  lock.unlock();
  host::poll_before_block(props.wait, host::WaitSide::kHost, [&] {
    return ev.done_published.load(std::memory_order_acquire) >= want;
  });
  lock.lock();
  ev.done_cv.wait(lock, [&] { return ev.done_value >= want; });
}

bool Device::query(Event event) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "query");
  auto ev = d.event_state(event);
  call.set_detail(fmt::format("event {}", ev->id));
  d.refuse_captured_event(*ev, "query(event)");
  uint64_t time_ps = 0;
  {
    std::unique_lock lock(ev->mu);
    if (ev->done_value < ev->value) {
      // The host learns that a record ran from the device's completion report, which can still
      // be on its way when later work is seen done (a stream that waited for this event, on
      // another queue, whose report came first). The fence in device memory is the device's
      // own answer: once the record has written it, its report is due, so wait for that.
      const uint64_t want = ev->value;
      lock.unlock();
      uint64_t fence = 0;
      if (!d.dev->read_memory(ev->slot.addr, &fence, sizeof fence) || fence < want) return false;
      lock.lock();
      d.wait_event_done(*ev, lock);
    }
    time_ps = ev->time_ps;
  }
  d.trace->observed(time_ps);
  return true;
}

void Device::synchronize(Event event) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "synchronize");
  auto ev = d.event_state(event);
  if (call.active()) call.set_detail(fmt::format("event {}", ev->id));
  d.refuse_captured_event(*ev, "synchronize(event)");
  std::unique_lock lock(ev->mu);
  d.wait_event_done(*ev, lock);
  const uint64_t time_ps = ev->time_ps;
  lock.unlock();
  d.trace->observed(time_ps);
  d.check_lost();
  lock.lock();
  if (ev->failed) {
    throw Error(ErrorKind::kDeviceFault,
                fmt::format("event {} recorded on stream {} did not complete normally: {}", ev->id,
                            ev->stream_id, ev->failure));
  }
}

int64_t Device::elapsed_ps(Event start, Event end) {
  Impl& d = *impl_;
  auto a = d.event_state(start);
  auto b = d.event_state(end);
  for (const auto& ev : {a, b}) d.refuse_captured_event(*ev, "elapsed time");
  for (const auto& ev : {a, b}) {
    std::lock_guard lock(ev->mu);
    if (!ev->recorded) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("elapsed time: event {} was never recorded; record() both events "
                              "first",
                              ev->id));
    }
  }
  synchronize(start);
  synchronize(end);
  auto time_of = [](EventState& ev) {
    std::lock_guard lock(ev.mu);
    return ev.time_ps;
  };
  return static_cast<int64_t>(time_of(*b) - time_of(*a));
}

double Device::elapsed_ms(Event start, Event end) {
  return static_cast<double>(elapsed_ps(start, end)) * 1e-9;
}

}  // namespace mtia

// --- raw packets (raw_packet.h) -----------------------------------------------------------

namespace mtia {

namespace detail {
struct DeviceAccess {
  static Device::Impl& impl(Device& d) { return *d.impl_; }
};
}  // namespace detail

void submit_raw_packet(Device& device, Stream stream, const isa::Packet& packet) {
  Device::Impl& d = detail::DeviceAccess::impl(device);
  d.submit(d.stream_state(stream), packet);
}

void set_activity_observer(Device& device, std::shared_ptr<ActivityObserver> observer) {
  detail::DeviceAccess::impl(device).trace->set_observer(std::move(observer));
}

}  // namespace mtia
