// The MTIA hooks: what PyTorch's own torch.mtia, torch.accelerator and the generic device code
// call for the MTIA device type. Registering them (REGISTER_MTIA_HOOKS) is what turns
// PyTorch 2.13's built-in, device-less MTIA support into this emulator.
//
// PyTorch looks the hooks up once, on first use, so this module must be loaded before
// anything asks for them: the torch.backends entry point does that on `import torch`.
// One device: index 0 (or -1, "the current one") is the only valid index.
#include <ATen/detail/MTIAHooksInterface.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <string>

#include "allocator.h"
#include "hooks.h"
#include "random.h"
#include "runtime.h"

namespace py = pybind11;

namespace mtia::torch_backend {

namespace {

[[noreturn]] void not_supported(const char* what) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, "torch_mtia_emu: ", what,
                              " is not supported by the emulator yet (docs/tensor-layer.md, "
                              "\"torch.mtia\")");
}

}  // namespace

py::dict device_properties_dict() {
  Runtime& rt = Runtime::get();
  const mtia::DeviceProperties& p = rt.device().properties();
  py::dict d;
  d["name"] = p.name;
  d["backend"] = p.backend;
  d["generation"] = p.generation;
  d["major"] = p.generation;
  d["minor"] = 0;
  d["firmware_version"] = p.firmware_version;
  d["total_memory"] = p.dram_bytes;
  d["sram_bytes"] = p.sram_bytes;
  d["local_store_bytes"] = p.local_store_bytes;
  d["pe_rows"] = p.pe_rows;
  d["pe_cols"] = p.pe_cols;
  d["multi_processor_count"] = p.pe_rows * p.pe_cols;
  d["clock_hz"] = p.clock_hz;
  d["dma_engines"] = p.dma_engines;
  d["hardware_queues"] = p.hardware_queues;
  d["timing"] = p.timing;
  d["max_kernel_args"] = p.max_kernel_args;
  d["max_kernel_buffers"] = p.max_kernel_buffers;
  d["kernel_library"] = rt.kernel_library_path();
  return d;
}

py::dict memory_stats_dict() {
  py::dict d;
  const AllocatorStats a = DeviceAllocator::instance().stats();
  d["allocated_bytes"] = a.allocated_bytes;
  d["requested_bytes"] = a.requested_bytes;
  d["peak_bytes"] = a.peak_bytes;
  d["cached_bytes"] = a.cached_bytes;
  d["reserved_bytes"] = a.reserved_bytes;
  d["peak_reserved_bytes"] = a.peak_reserved_bytes;
  d["num_allocs"] = a.allocations;
  d["num_frees"] = a.frees;
  d["num_cache_hits"] = a.cache_hits;
  d["num_device_mallocs"] = a.device_mallocs;
  d["num_device_frees"] = a.device_frees;
  d["num_ooms"] = a.ooms;
  d["live_blocks"] = a.live_blocks;
  d["cached_blocks"] = a.cached_blocks;
  if (Runtime::is_initialized()) {
    mtia::Device& dev = Runtime::get().device();
    const mtia::MemoryStats m =
        guarded("reading memory statistics", [&] { return dev.memory_stats(); });
    d["device_free_bytes"] = m.free_bytes;
    d["device_largest_free_bytes"] = m.largest_free_bytes;
    d["device_total_bytes"] = dev.properties().dram_bytes;
    d["pinned_host_bytes"] = m.pinned_host_bytes;
  }
  return d;
}

namespace {

// PyTorch creates the hooks by the name "MTIAHooks" from its registry (below).
struct MTIAHooks final : public at::MTIAHooksInterface {
  explicit MTIAHooks(at::MTIAHooksArgs = {}) {}

  // --- devices -------------------------------------------------------------------------------
  void init() const override { Runtime::get(); }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasMTIA() const override { return true; }
  c10::DeviceIndex deviceCount() const override { return 1; }
  c10::DeviceIndex getDeviceCount() const override { return 1; }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    check_device_index(index);
    return Runtime::is_initialized();
  }
  void setCurrentDevice(c10::DeviceIndex index) const override { check_device_index(index); }
  c10::DeviceIndex getCurrentDevice() const override { return 0; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    check_device_index(index);
    return 0;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    check_device_index(index);
    return 0;
  }
  c10::Device getDeviceFromPtr(void*) const override { return c10::Device(kDeviceType, 0); }
  void deviceSynchronize(c10::DeviceIndex index) const override {
    check_device_index(index);
    py::gil_scoped_release no_gil;
    guarded("synchronize", [] { Runtime::get().device().synchronize(); });
  }
  std::string showConfig() const override {
    const mtia::DeviceProperties& p = Runtime::get().device().properties();
    return c10::str("mtia-emu: emulated ", p.name, " (", p.pe_rows, "x", p.pe_cols, " PEs, ",
                    p.dram_bytes, " bytes of DRAM, timing model ", p.timing ? "on" : "off",
                    ", backend ", p.backend, ")\n");
  }

  // --- streams -------------------------------------------------------------------------------
  c10::Stream getCurrentStream(c10::DeviceIndex index) const override {
    check_device_index(index);
    return to_c10(current_stream());
  }
  int64_t getCurrentRawStream(c10::DeviceIndex index) const override {
    check_device_index(index);
    return current_stream().id;
  }
  c10::Stream getDefaultStream(c10::DeviceIndex index) const override {
    check_device_index(index);
    return to_c10(mtia::Stream{});
  }
  void setCurrentStream(const c10::Stream& stream) const override {
    set_current_stream(from_c10(stream));
  }

  // --- memory --------------------------------------------------------------------------------
  bool isPinnedPtr(const void* data) const override {
    if (data == nullptr || !Runtime::is_initialized()) return false;
    return Runtime::get().device().is_pinned(data, 1);
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::instance(); }
  PyObject* memoryStats(c10::DeviceIndex index) const override {
    check_device_index(index);
    py::dict d;
    d["dram"] = memory_stats_dict();
    return d.release().ptr();
  }
  void emptyCache() const override {
    py::gil_scoped_release no_gil;
    DeviceAllocator::instance().empty_cache();
  }
  void resetPeakMemoryStats(c10::DeviceIndex index) const override {
    check_device_index(index);
    DeviceAllocator::instance().reset_peak();
    if (Runtime::is_initialized()) Runtime::get().device().reset_peak_memory_stats();
  }
  void recordMemoryHistory(const std::optional<std::string>&, const std::string&,
                           size_t) const override {
    not_supported("torch.mtia.record_memory_history");
  }
  PyObject* memorySnapshot(const std::optional<std::string>&) const override {
    not_supported("torch.mtia.snapshot");
  }
  void attachOutOfMemoryObserver(PyObject*) const override {
    not_supported("torch.mtia.attach_out_of_memory_observer");
  }

  // --- device information --------------------------------------------------------------------
  PyObject* getDeviceCapability(c10::DeviceIndex index) const override {
    check_device_index(index);
    const uint32_t generation = Runtime::get().device().properties().generation;
    return py::make_tuple(generation, 0).release().ptr();
  }
  PyObject* getDeviceProperties(c10::DeviceIndex index) const override {
    check_device_index(index);
    return device_properties_dict().release().ptr();
  }

  // --- random --------------------------------------------------------------------------------
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    check_device_index(index);
    return default_generator();
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    check_device_index(index);
    return new_generator();
  }

  // --- graphs --------------------------------------------------------------------------------
  int64_t mtiagraphCreate(bool) const override { not_supported("torch.mtia.MTIAGraph"); }
  void mtiagraphDestroy(int64_t) const override {}
  void mtiagraphCaptureBegin(int64_t, c10::MempoolId_t) const override {
    not_supported("torch.mtia.MTIAGraph");
  }
  void mtiagraphCaptureEnd(int64_t) const override { not_supported("torch.mtia.MTIAGraph"); }
  void mtiagraphInstantiate(int64_t) const override { not_supported("torch.mtia.MTIAGraph"); }
  void mtiagraphReplay(int64_t) const override { not_supported("torch.mtia.MTIAGraph"); }
  void mtiagraphReset(int64_t) const override { not_supported("torch.mtia.MTIAGraph"); }
  c10::MempoolId_t mtiagraphPool(int64_t) const override { not_supported("torch.mtia.MTIAGraph"); }
  c10::MempoolId_t graphPoolHandle() const override {
    not_supported("torch.mtia.graph_pool_handle");
  }
};

}  // namespace

}  // namespace mtia::torch_backend

namespace at {
// REGISTER_MTIA_HOOKS, spelled out: the registry lives in namespace at and the hooks here.
C10_REGISTER_TYPED_CLASS(MTIAHooksRegistry, "MTIAHooks", mtia::torch_backend::MTIAHooks)
}  // namespace at
