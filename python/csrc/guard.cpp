// The device guard for MTIA: devices, streams and events as PyTorch's generic code sees them
// (torch.Stream and torch.Event, which torch.mtia.Stream and Event are; torch.accelerator;
// autograd's device threads; c10::DeviceGuard and StreamGuard; record_stream).
//
// Stream ids are host API stream ids of the stream's device (0: its default stream). An event
// belongs to the device of the stream it was first recorded on: the void* PyTorch keeps for it
// holds that device's index (high 32 bits) and the host API event id (low 32 bits, never 0).
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "caching_allocator.h"
#include "devices.h"
#include "on_device.h"
#include "torch_logger.h"

namespace mtia::torch_backend {

void CommonDevice::mismatch(c10::DeviceIndex other) const {
  TORCH_CHECK(false,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              c10::Device(kDeviceType, tensors_), " and ", c10::Device(kDeviceType, other),
              "! (torch_mtia_emu: the tensors of one op must be on one MTIA device; move them "
              "with .to(device) first)");
}

namespace {

struct EventHandle {
  c10::DeviceIndex device;
  mtia::Event event;
};

EventHandle decode(void* event) {
  const auto bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(event));
  return {static_cast<c10::DeviceIndex>(bits >> 32), mtia::Event{static_cast<uint32_t>(bits)}};
}

void* encode(c10::DeviceIndex device, mtia::Event e) {
  return reinterpret_cast<void*>(static_cast<uintptr_t>((uint64_t(uint8_t(device)) << 32) | e.id));
}

mtia::Device& device_of(const c10::Stream& s) {
  return Runtime::get().device(s.device_index());
}

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(d.index());
    return c10::Device(kDeviceType, old);
  }
  c10::Device getDevice() const override { return c10::Device(kDeviceType, current_device()); }
  void setDevice(c10::Device d) const override { set_current_device(d.index()); }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    // Only restores a device set (and checked) before; a bad index is left alone.
    if (d.index() >= 0 && d.index() < device_count_or_zero()) {
      try {
        set_current_device(d.index());
      } catch (const std::exception& e) {
        log::warn(c10::str("restoring the current device: ", e.what()));
      }
    }
  }

  c10::Stream getStream(c10::Device d) const noexcept override {
    return to_c10(d.index(), current_stream(d.index()));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return to_c10(resolve_device(d.index()), mtia::Stream{});
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override {
    const c10::DeviceIndex i = resolve_device(d.index());
    return to_c10(i, Runtime::get().context(i).pool_stream());
  }
  // torch.Stream(device="mtia"): a new stream of its own. The device has no stream
  // priorities; every priority gets an ordinary stream.
  c10::Stream getNewStream(c10::Device d, int) const override {
    const c10::DeviceIndex i = resolve_device(d.index());
    return to_c10(
        i, guarded("creating a stream", [&] { return Runtime::get().device(i).create_stream(); }));
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const c10::DeviceIndex i = s.device_index() < 0 ? current_device() : s.device_index();
    const mtia::Stream old = current_stream(i);
    try {
      set_current_stream(i, from_c10(s));
    } catch (const std::exception& e) {
      log::warn(c10::str("setting the current stream: ", e.what()));
    }
    return to_c10(i, old);
  }

  c10::DeviceIndex deviceCount() const noexcept override {
    return c10::DeviceIndex(device_count_or_zero());
  }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag) const override {
    const c10::DeviceIndex d = resolve_device(stream.device_index());
    TORCH_CHECK(index < 0 || index == d, "torch_mtia_emu: an event of ",
                c10::Device(kDeviceType, index), " cannot be recorded on a stream of ",
                c10::Device(kDeviceType, d));
    auto& dev = Runtime::get().device(d);
    if (*event == nullptr) {
      *event = encode(d, guarded("creating an event", [&] { return dev.create_event(); }));
    }
    const EventHandle h = decode(*event);
    TORCH_CHECK(h.device == d, "torch_mtia_emu: an event of ", c10::Device(kDeviceType, h.device),
                " cannot be recorded on a stream of ", c10::Device(kDeviceType, d));
    guarded("recording an event", [&] { dev.record(h.event, from_c10(stream)); });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    const EventHandle h = decode(event);
    const c10::DeviceIndex d = resolve_device(stream.device_index());
    if (h.device == d) {
      guarded("making a stream wait for an event",
              [&] { Runtime::get().device(d).wait_event(from_c10(stream), h.event); });
      return;
    }
    // An event of another device: the device waits for it (no host thread does).
    guarded("making a stream wait for an event of another device", [&] {
      Runtime::get().device(d).wait_event(from_c10(stream), Runtime::get().device(h.device),
                                          h.event);
    });
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const EventHandle h = decode(event);
    return guarded("querying an event",
                   [&] { return Runtime::get().device(h.device).query(h.event); });
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event == nullptr || Runtime::is_shut_down()) return;
    try {
      const EventHandle h = decode(event);
      if (DeviceContext* c = Runtime::get().opened(h.device)) c->device().destroy_event(h.event);
    } catch (const std::exception& e) {
      log::warn(c10::str("destroying an event: ", e.what()));
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    return guarded("querying a stream", [&] { return device_of(stream).query(from_c10(stream)); });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    guarded("synchronizing a stream", [&] { device_of(stream).synchronize(from_c10(stream)); });
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    const EventHandle h = decode(event);
    guarded("synchronizing an event",
            [&] { Runtime::get().device(h.device).synchronize(h.event); });
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = resolve_device(index);
    DeviceContext* c = Runtime::get().opened(d);
    if (c == nullptr) return;  // never opened: nothing queued
    guarded("synchronizing the device", [&] { c->device().synchronize(); });
  }

  // Simulated milliseconds between two recorded events (0 with the timing model off).
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start != nullptr && end != nullptr,
                "torch_mtia_emu: elapsed_time needs both events recorded first");
    const EventHandle a = decode(start), b = decode(end);
    TORCH_CHECK_VALUE(a.device == b.device, "torch_mtia_emu: elapsed_time of events on ",
                      c10::Device(kDeviceType, a.device), " and ",
                      c10::Device(kDeviceType, b.device),
                      ": the devices' simulated clocks are not comparable; time events of one "
                      "device");
    return guarded("timing events",
                   [&] { return Runtime::get().device(a.device).elapsed_ms(a.event, b.event); });
  }

  // torch.accelerator.get_device_capability(): the dtypes whose tensors can be allocated on the
  // device and converted to one another: the standard numeric dtypes, complex and float8. The
  // device's kernels compute in float32, float16, bfloat16, int8, int32, int64 and bool; the
  // others convert and compute through the CPU fallback. Quantized, bit-packed and sub-byte
  // dtypes are not supported (they have no copy on the device).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    (void)resolve_device(d.index());  // an index out of range is an error
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    auto& has = cap.capability_data.supported_scalar_types;
    has.has_Byte = has.has_Char = has.has_Short = has.has_Int = has.has_Long = 1;
    has.has_UInt16 = has.has_UInt32 = has.has_UInt64 = 1;
    has.has_Half = has.has_Float = has.has_Double = has.has_BFloat16 = has.has_Bool = 1;
    has.has_ComplexHalf = has.has_ComplexFloat = has.has_ComplexDouble = 1;
    has.has_Float8_e5m2 = has.has_Float8_e4m3fn = has.has_Float8_e5m2fnuz = 1;
    has.has_Float8_e4m3fnuz = has.has_Float8_e8m0fnu = 1;
    return cap;
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    DeviceAllocator::instance().record_stream(data.get_context(), stream);
  }
};

C10_REGISTER_GUARD_IMPL(MTIA, GuardImpl);

}  // namespace

}  // namespace mtia::torch_backend
