// The MTIA hooks: what PyTorch's own torch.mtia, torch.accelerator and the generic device code
// call for the MTIA device type. Registering them (REGISTER_MTIA_HOOKS) is what turns
// PyTorch 2.13's built-in, device-less MTIA support into this emulator.
//
// PyTorch looks the hooks up once, on first use, so this module must be loaded before
// anything asks for them: the torch.backends entry point does that on `import torch`.
// Devices are mtia:0 .. device_count()-1; -1 means the calling thread's current device.
#include <ATen/detail/MTIAHooksInterface.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <torch/csrc/profiler/python/combined_traceback.h>

#include <mutex>
#include <string>

#include "caching_allocator.h"
#include "devices.h"
#include "graphs.h"
#include "hooks.h"
#include "pinned_allocator.h"
#include "random.h"
#include "torch_logger.h"

namespace py = pybind11;

namespace mtia::torch_backend {

py::dict device_properties_dict(c10::DeviceIndex index) {
  Runtime& rt = Runtime::get();
  const mtia::DeviceProperties& p = rt.device(resolve_device(index)).properties();
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

py::dict memory_stats_dict(c10::DeviceIndex index) {
  index = resolve_device(index);
  py::dict d;
  const AllocatorStats a = DeviceAllocator::instance().device(index).stats();
  d["allocated_bytes"] = a.allocated_bytes.current;
  d["requested_bytes"] = a.requested_bytes.current;
  d["peak_bytes"] = a.allocated_bytes.peak;
  d["cached_bytes"] = a.cached_bytes;
  d["reserved_bytes"] = a.reserved_bytes.current;
  d["peak_reserved_bytes"] = a.reserved_bytes.peak;
  d["num_allocs"] = a.allocation.allocated;
  d["num_frees"] = a.allocation.freed;
  d["num_cache_hits"] = a.cache_hits;
  d["num_device_mallocs"] = a.segment.allocated;
  d["num_device_frees"] = a.segment.freed;
  d["num_ooms"] = a.num_ooms;
  d["num_alloc_retries"] = a.num_alloc_retries;
  d["live_blocks"] = a.allocation.current;
  d["cached_blocks"] = a.cached_blocks;
  DeviceContext* c = Runtime::is_initialized() ? Runtime::get().opened(index) : nullptr;
  if (c != nullptr) {
    mtia::Device& dev = c->device();
    const mtia::MemoryStats m =
        guarded("reading memory statistics", [&] { return dev.memory_stats(); });
    d["device_free_bytes"] = m.free_bytes;
    d["device_largest_free_bytes"] = m.largest_free_bytes;
    d["device_total_bytes"] = dev.properties().dram_bytes;
    d["pinned_host_bytes"] = m.pinned_host_bytes;
  }
  return d;
}

void add_cuda_style_stats(py::dict& d, c10::DeviceIndex index) {
  const AllocatorStats a = DeviceAllocator::instance().device(resolve_device(index)).stats();
  const auto add = [&](const char* name, const Stat& s) {
    // CUDA splits each into small_pool and large_pool too; this allocator has one pool.
    const std::string prefix = std::string(name) + ".all.";
    d[py::str(prefix + "current")] = s.current;
    d[py::str(prefix + "peak")] = s.peak;
    d[py::str(prefix + "allocated")] = s.allocated;
    d[py::str(prefix + "freed")] = s.freed;
  };
  add("allocated_bytes", a.allocated_bytes);
  add("requested_bytes", a.requested_bytes);
  add("active_bytes", a.active_bytes);
  add("reserved_bytes", a.reserved_bytes);
  add("allocation", a.allocation);
  add("active", a.active);
  add("segment", a.segment);
  const Stat never_split;  // blocks are never split: CUDA's inactive_split stats stay 0
  add("inactive_split_bytes", never_split);
  add("inactive_split", never_split);
  d["num_alloc_retries"] = a.num_alloc_retries;
  d["num_ooms"] = a.num_ooms;
  d["num_device_alloc"] = a.segment.allocated;
  d["num_device_free"] = a.segment.freed;
  d["num_sync_all_streams"] = 0;
}

namespace {

const char* state_name(BlockInfo::State state) {
  switch (state) {
    case BlockInfo::State::kAllocated:
      return "active_allocated";
    case BlockInfo::State::kAwaitingFree:
      return "active_awaiting_free";
    case BlockInfo::State::kInactive:
      return "inactive";
  }
  return "unknown";
}

}  // namespace

py::dict memory_snapshot_dict() {
  // Every device whose allocator was used, in index order; device 0 always (an empty trace).
  std::vector<CachingAllocator*> devices = DeviceAllocator::instance().devices();
  if (devices.empty()) devices.push_back(&DeviceAllocator::instance().device(0));
  // Frames are symbolized at once at the end (shared frames are resolved once); each dict
  // whose "frames" must be filled is remembered with the traceback that fills it.
  std::vector<torch::CapturedTraceback*> to_symbolize;
  std::vector<py::dict> with_frames;
  const auto frames_for = [&](py::dict& target, const std::shared_ptr<c10::GatheredContext>& s) {
    target["frames"] = py::list();
    if (s == nullptr) return;
    to_symbolize.push_back(torch::getCapturedTracebackFromContext(s));
    with_frames.push_back(target);
  };

  py::list segments;
  py::list device_traces;
  for (size_t device = 0; device < devices.size(); ++device) {
    const AllocatorSnapshot snap =
        devices[device] != nullptr ? devices[device]->snapshot() : AllocatorSnapshot{};
    for (const BlockInfo& b : snap.blocks) {
      // A block is a whole driver allocation: one segment holding one block.
      const bool allocated = b.state == BlockInfo::State::kAllocated;
      const bool active = b.state != BlockInfo::State::kInactive;
      py::dict block;
      block["address"] = b.address;
      block["size"] = b.size;
      block["requested_size"] = b.requested;
      block["state"] = state_name(b.state);
      frames_for(block, b.stack);
      py::dict seg;
      seg["device"] = device;
      seg["address"] = b.address;
      seg["total_size"] = b.size;
      seg["allocated_size"] = allocated ? b.size : 0;
      seg["active_size"] = active ? b.size : 0;
      seg["requested_size"] = b.requested;
      seg["stream"] = b.stream;
      seg["segment_type"] = b.size > (uint64_t(1) << 20) ? "large" : "small";
      seg["segment_pool_id"] = py::make_tuple(b.pool.first, b.pool.second);
      seg["is_expandable"] = false;
      frames_for(seg, b.segment_stack);
      py::list blocks;
      blocks.append(block);
      seg["blocks"] = blocks;
      segments.append(seg);
    }

    py::list trace;
    for (const TraceEntry& e : snap.history) {
      py::dict entry;
      entry["action"] = action_name(e.action);
      entry["addr"] = e.address;
      entry["size"] = e.size;
      entry["stream"] = e.stream;
      entry["time_us"] = e.time_us;
      entry["pool_id"] = py::make_tuple(0, 0);
      if (e.action == TraceEntry::Action::kOom) entry["device_free"] = e.device_free;
      frames_for(entry, e.stack);
      trace.append(entry);
    }
    device_traces.append(trace);
  }

  if (!to_symbolize.empty()) {
    std::vector<py::object> frames = torch::py_symbolize(to_symbolize);
    for (size_t i = 0; i < frames.size(); ++i) with_frames[i]["frames"] = frames[i];
  }

  py::dict d;
  d["segments"] = segments;
  d["device_traces"] = device_traces;
  return d;
}

namespace {

// PyTorch creates the hooks by the name "MTIAHooks" from its registry (below).
struct MTIAHooks final : public at::MTIAHooksInterface {
  explicit MTIAHooks(at::MTIAHooksArgs = {}) {}

  // --- devices -------------------------------------------------------------------------------
  // PyTorch's lazy initialisation, before the first use of any mtia device. It reads the
  // configuration and the device count (raising on a malformed one) but opens no device:
  // each opens on its own first use, so a process that uses only mtia:1 never takes a share
  // of device 0's server.
  void init() const override {
    Runtime::get();
    (void)device_count();
  }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasMTIA() const override { return true; }
  c10::DeviceIndex deviceCount() const override { return c10::DeviceIndex(device_count()); }
  c10::DeviceIndex getDeviceCount() const override { return c10::DeviceIndex(device_count()); }
  bool hasPrimaryContext(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = resolve_device(index);
    return Runtime::is_initialized() && Runtime::get().opened(d) != nullptr;
  }
  void setCurrentDevice(c10::DeviceIndex index) const override { set_current_device(index); }
  c10::DeviceIndex getCurrentDevice() const override { return current_device(); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    set_current_device(index);
    return old;
  }
  // torch.mtia.device(i): -1 (None) leaves the current device as it is.
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex index) const override {
    const c10::DeviceIndex old = current_device();
    if (index >= 0) set_current_device(index);
    return old;
  }
  // A device address alone does not say which device it is on (every device's heap starts
  // at the same address); the current device is the best answer.
  c10::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kDeviceType, current_device());
  }
  // torch.mtia.synchronize(device): waits for every stream of that device (the current one by
  // default). A device never opened has nothing queued.
  void deviceSynchronize(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = resolve_device(index);
    py::gil_scoped_release no_gil;
    DeviceContext* c = Runtime::get().opened(d);
    if (c != nullptr) guarded("synchronize", [&] { c->device().synchronize(); });
  }
  std::string showConfig() const override {
    std::string s;
    const int count = device_count();
    for (c10::DeviceIndex i = 0; i < count; ++i) {
      const mtia::DeviceProperties& p = Runtime::get().device(i).properties();
      s += c10::str("mtia-emu: mtia:", int(i), ": emulated ", p.name, " (", p.pe_rows, "x",
                    p.pe_cols, " PEs, ", p.dram_bytes, " bytes of DRAM, timing model ",
                    p.timing ? "on" : "off", ", backend ", p.backend, ")\n");
    }
    return s;
  }

  // --- streams -------------------------------------------------------------------------------
  c10::Stream getCurrentStream(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = resolve_device(index);
    return to_c10(d, current_stream(d));
  }
  int64_t getCurrentRawStream(c10::DeviceIndex index) const override {
    return current_stream(resolve_device(index)).id;
  }
  c10::Stream getDefaultStream(c10::DeviceIndex index) const override {
    return to_c10(resolve_device(index), mtia::Stream{});
  }
  // The current stream of the stream's device (the current device stays as it is).
  void setCurrentStream(const c10::Stream& stream) const override {
    set_current_stream(stream.device_index(), from_c10(stream));
  }

  // --- memory --------------------------------------------------------------------------------
  bool isPinnedPtr(const void* data) const override {
    if (data == nullptr || !Runtime::is_initialized()) return false;
    for (c10::DeviceIndex i = 0; i < kMaxDevices; ++i) {
      const DeviceContext* c = Runtime::get().opened(i);
      if (c != nullptr && const_cast<DeviceContext*>(c)->device().is_pinned(data, 1)) return true;
    }
    return false;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &PinnedAllocator::instance(); }
  PyObject* memoryStats(c10::DeviceIndex index) const override {
    py::dict d;
    d["dram"] = memory_stats_dict(index);
    add_cuda_style_stats(d, index);
    return d.release().ptr();
  }
  // torch.mtia.empty_cache() (no device argument, as torch.cuda's): every device's cache.
  void emptyCache() const override {
    py::gil_scoped_release no_gil;
    DeviceAllocator::instance().empty_cache();
  }
  void resetPeakMemoryStats(c10::DeviceIndex index) const override {
    const c10::DeviceIndex d = resolve_device(index);
    DeviceAllocator::instance().device(d).reset_peak();
    DeviceContext* c = Runtime::is_initialized() ? Runtime::get().opened(d) : nullptr;
    if (c != nullptr) c->device().reset_peak_memory_stats();
  }
  void recordMemoryHistory(const std::optional<std::string>& enabled, const std::string& stacks,
                           size_t max_entries) const override {
    HistoryMode mode = HistoryMode::kOff;
    if (enabled.has_value()) {
      TORCH_CHECK_VALUE(*enabled == "all" || *enabled == "state",
                        "torch.mtia.record_memory_history: enabled must be \"all\" (stacks and "
                        "the history of actions), \"state\" (stacks of the blocks held) or None "
                        "(stop), not \"",
                        *enabled, "\"");
      mode = *enabled == "all" ? HistoryMode::kAll : HistoryMode::kState;
    }
    TORCH_CHECK_VALUE(stacks == "python" || stacks == "cpp" || stacks == "all",
                      "torch.mtia.record_memory_history: stacks must be \"python\" (Python "
                      "frames), \"cpp\" (C++ frames) or \"all\" (both), not \"",
                      stacks, "\"");
    // Python frames are read through PyTorch's traceback recorder; it needs this interpreter's
    // unwinder installed once.
    static std::once_flag python_unwinder;
    std::call_once(python_unwinder, [] { torch::installCapturedTracebackPython(); });
    HistoryStacks s;
    s.python = stacks != "cpp";
    s.cpp = stacks != "python";
    DeviceAllocator::instance().record_history(mode, s, max_entries);
  }
  PyObject* memorySnapshot(const std::optional<std::string>& local_path) const override {
    // PyTorch 2.13's binding passes no path; torch.mtia.snapshot() returns the dictionary.
    TORCH_CHECK_NOT_IMPLEMENTED(!local_path.has_value(),
                                "torch_mtia_emu: memorySnapshot does not write files; pickle "
                                "the dictionary torch.mtia.snapshot() returns");
    return memory_snapshot_dict().release().ptr();
  }
  void attachOutOfMemoryObserver(PyObject* observer) const override {
    // PyTorch's binding already checks the type; this guards direct C++ callers.
    TORCH_CHECK_TYPE(observer != nullptr && PyCallable_Check(observer),
                     "torch.mtia.attach_out_of_memory_observer: the observer must be callable "
                     "as fn(device, alloc_bytes, device_total_bytes, device_free_bytes)");
    // Kept for the life of the process (the allocator is never destroyed).
    auto fn = std::make_shared<py::object>(py::reinterpret_borrow<py::object>(observer));
    DeviceAllocator::instance().attach_oom_observer(
        [fn](int64_t device, uint64_t alloc, uint64_t total, uint64_t free) {
          py::gil_scoped_acquire gil;
          try {
            (*fn)(device, alloc, total, free);
          } catch (py::error_already_set& e) {
            // The out-of-memory error is raised anyway; an observer's own error is reported.
            log::warn(c10::str("an out-of-memory observer raised: ", e.what()));
          }
        });
  }

  // --- device information --------------------------------------------------------------------
  PyObject* getDeviceCapability(c10::DeviceIndex index) const override {
    const uint32_t generation =
        Runtime::get().device(resolve_device(index)).properties().generation;
    return py::make_tuple(generation, 0).release().ptr();
  }
  PyObject* getDeviceProperties(c10::DeviceIndex index) const override {
    return device_properties_dict(index).release().ptr();
  }

  // --- random --------------------------------------------------------------------------------
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(resolve_device(index));
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    return new_generator(resolve_device(index));
  }

  // --- graphs --------------------------------------------------------------------------------
  int64_t mtiagraphCreate(bool keep_graph) const override { return graphs::create(keep_graph); }
  void mtiagraphDestroy(int64_t handle) const override { graphs::destroy(handle); }
  void mtiagraphCaptureBegin(int64_t handle, c10::MempoolId_t pool) const override {
    graphs::capture_begin(handle, pool);
  }
  void mtiagraphCaptureEnd(int64_t handle) const override { graphs::capture_end(handle); }
  void mtiagraphInstantiate(int64_t handle) const override { graphs::instantiate(handle); }
  void mtiagraphReplay(int64_t handle) const override {
    py::gil_scoped_release no_gil;
    graphs::replay(handle);
  }
  void mtiagraphReset(int64_t handle) const override {
    py::gil_scoped_release no_gil;
    graphs::reset(handle);
  }
  c10::MempoolId_t mtiagraphPool(int64_t handle) const override { return graphs::pool(handle); }
  c10::MempoolId_t graphPoolHandle() const override { return graphs::new_pool_handle(); }
};

}  // namespace

}  // namespace mtia::torch_backend

namespace at {
// REGISTER_MTIA_HOOKS, spelled out: the registry lives in namespace at and the hooks here.
C10_REGISTER_TYPED_CLASS(MTIAHooksRegistry, "MTIAHooks", mtia::torch_backend::MTIAHooks)
}  // namespace at
