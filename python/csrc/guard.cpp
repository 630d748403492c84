// The device guard for MTIA: devices, streams and events as PyTorch's generic code sees them
// (torch.Stream and torch.Event, which torch.mtia.Stream and Event are; torch.accelerator;
// autograd's device threads; c10::StreamGuard; record_stream).
//
// Stream ids are host API stream ids (0: the default stream). An event is the host API event
// id stored in the void* PyTorch keeps for it, created on its first record.
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "allocator.h"
#include "log.h"
#include "runtime.h"

namespace mtia::torch_backend {

void check_device_index(c10::DeviceIndex index) {
  TORCH_CHECK(index == 0 || index == -1, "torch_mtia_emu: device index ", int(index),
              " does not exist: the in-process emulator has one device, mtia:0");
}

namespace {

mtia::Event to_event(void* event) {
  return mtia::Event{static_cast<uint32_t>(reinterpret_cast<uintptr_t>(event))};
}

}  // namespace

c10::Stream to_c10(mtia::Stream s) {
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, 0),
                     static_cast<c10::StreamId>(s.id));
}

mtia::Stream from_c10(const c10::Stream& s) {
  TORCH_CHECK_VALUE(s.device_type() == kDeviceType, "torch_mtia_emu: ", s,
                    " is not a stream of the mtia device");
  return mtia::Stream{static_cast<uint32_t>(s.id())};
}

namespace {

struct GuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kDeviceType; }

  c10::Device exchangeDevice(c10::Device d) const override {
    check_device_index(d.index());
    return c10::Device(kDeviceType, 0);
  }
  c10::Device getDevice() const override { return c10::Device(kDeviceType, 0); }
  void setDevice(c10::Device d) const override { check_device_index(d.index()); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}

  c10::Stream getStream(c10::Device) const noexcept override { return to_c10(current_stream()); }
  c10::Stream getDefaultStream(c10::Device) const override { return to_c10(mtia::Stream{}); }
  c10::Stream getStreamFromGlobalPool(c10::Device, bool) const override {
    return to_c10(Runtime::get().pool_stream());
  }
  // torch.Stream(device="mtia"): a new stream of its own. The device has no stream
  // priorities; every priority gets an ordinary stream.
  c10::Stream getNewStream(c10::Device d, int) const override {
    check_device_index(d.index());
    return to_c10(
        guarded("creating a stream", [] { return Runtime::get().device().create_stream(); }));
  }
  c10::Stream exchangeStream(c10::Stream s) const noexcept override {
    const mtia::Stream old = current_stream();
    set_current_stream(from_c10(s));
    return to_c10(old);
  }

  c10::DeviceIndex deviceCount() const noexcept override { return 1; }

  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex index,
              const c10::EventFlag) const override {
    check_device_index(index);
    auto& dev = Runtime::get().device();
    if (*event == nullptr) {
      const mtia::Event e = guarded("creating an event", [&] { return dev.create_event(); });
      *event = reinterpret_cast<void*>(static_cast<uintptr_t>(e.id));
    }
    const mtia::Event e = to_event(*event);
    guarded("recording an event", [&] { dev.record(e, from_c10(stream)); });
  }

  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) return;
    const mtia::Event e = to_event(event);
    guarded("making a stream wait for an event",
            [&] { Runtime::get().device().wait_event(from_c10(stream), e); });
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) return true;
    const mtia::Event e = to_event(event);
    return guarded("querying an event", [&] { return Runtime::get().device().query(e); });
  }

  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event == nullptr || !Runtime::is_initialized()) return;
    try {
      Runtime::get().device().destroy_event(
          mtia::Event{static_cast<uint32_t>(reinterpret_cast<uintptr_t>(event))});
    } catch (const std::exception& e) {
      log::warn(c10::str("destroying an event: ", e.what()));
    }
  }

  bool queryStream(const c10::Stream& stream) const override {
    return guarded("querying a stream",
                   [&] { return Runtime::get().device().query(from_c10(stream)); });
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    guarded("synchronizing a stream",
            [&] { Runtime::get().device().synchronize(from_c10(stream)); });
  }

  void synchronizeEvent(void* event) const override {
    if (event == nullptr) return;
    guarded("synchronizing an event",
            [&] { Runtime::get().device().synchronize(to_event(event)); });
  }

  void synchronizeDevice(const c10::DeviceIndex index) const override {
    check_device_index(index);
    guarded("synchronizing the device", [] { Runtime::get().device().synchronize(); });
  }

  // Simulated milliseconds between two recorded events (0 with the timing model off).
  double elapsedTime(void* start, void* end, const c10::DeviceIndex index) const override {
    check_device_index(index);
    TORCH_CHECK(start != nullptr && end != nullptr,
                "torch_mtia_emu: elapsed_time needs both events recorded first");
    return guarded("timing events", [&] {
      return Runtime::get().device().elapsed_ms(to_event(start), to_event(end));
    });
  }

  void recordDataPtrOnStream(const c10::DataPtr& data, const c10::Stream& stream) const override {
    DeviceAllocator::instance().record_stream(data.get_context(), from_c10(stream));
  }
};

C10_REGISTER_GUARD_IMPL(MTIA, GuardImpl);

}  // namespace

}  // namespace mtia::torch_backend
