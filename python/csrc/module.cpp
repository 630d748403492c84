// torch_mtia_emu._C: the Python half's view of the backend. Loading this module registers the
// PrivateUse1 kernels, allocator, guard and fallback (static registrations in the other
// files); these bindings expose the device runtime to torch_mtia_emu/__init__.py, which wraps
// them into the torch.mtia-shaped API. Plain values only: tensors cross as data pointers.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <mutex>

#include "allocator.h"
#include "fallback.h"
#include "launch.h"
#include "random.h"
#include "runtime.h"

namespace py = pybind11;

namespace mtia::torch_backend {

namespace {

// Registers the allocator when the module loads (a static registrar would run before c10's
// allocator table is guaranteed to exist in some link orders).
void register_allocator() {
  c10::SetAllocator(kDeviceType, &DeviceAllocator::instance());
}

mtia::Device& dev() {
  return Runtime::get().device();
}

py::dict properties() {
  Runtime& rt = Runtime::get();
  const mtia::DeviceProperties& p = rt.device().properties();
  py::dict d;
  d["name"] = p.name;
  d["backend"] = p.backend;
  d["generation"] = p.generation;
  d["firmware_version"] = p.firmware_version;
  d["total_memory"] = p.dram_bytes;
  d["sram_bytes"] = p.sram_bytes;
  d["local_store_bytes"] = p.local_store_bytes;
  d["pe_rows"] = p.pe_rows;
  d["pe_cols"] = p.pe_cols;
  d["clock_hz"] = p.clock_hz;
  d["dma_engines"] = p.dma_engines;
  d["hardware_queues"] = p.hardware_queues;
  d["timing"] = p.timing;
  d["max_kernel_args"] = p.max_kernel_args;
  d["max_kernel_buffers"] = p.max_kernel_buffers;
  d["kernel_library"] = rt.kernel_library_path();
  return d;
}

py::dict memory_stats() {
  py::dict d;
  const AllocatorStats a = DeviceAllocator::instance().stats();
  d["allocated_bytes"] = a.allocated_bytes;
  d["requested_bytes"] = a.requested_bytes;
  d["peak_bytes"] = a.peak_bytes;
  d["cached_bytes"] = a.cached_bytes;
  d["reserved_bytes"] = a.reserved_bytes;
  d["num_allocs"] = a.allocations;
  d["num_frees"] = a.frees;
  d["num_cache_hits"] = a.cache_hits;
  d["num_device_mallocs"] = a.device_mallocs;
  d["num_device_frees"] = a.device_frees;
  d["num_ooms"] = a.ooms;
  d["live_blocks"] = a.live_blocks;
  d["cached_blocks"] = a.cached_blocks;
  if (Runtime::is_initialized()) {
    const mtia::MemoryStats m = dev().memory_stats();
    d["device_free_bytes"] = m.free_bytes;
    d["device_largest_free_bytes"] = m.largest_free_bytes;
    d["device_total_bytes"] = dev().properties().dram_bytes;
    d["pinned_host_bytes"] = m.pinned_host_bytes;
  }
  return d;
}

mtia::Arg to_arg(const py::tuple& t) {
  TORCH_CHECK_VALUE(t.size() == 2, "a kernel argument is a (kind, value) pair");
  const std::string kind = t[0].cast<std::string>();
  if (kind == "ptr") return mtia::DevicePtr(t[1].cast<uint64_t>());
  if (kind == "i64") return t[1].cast<int64_t>();
  if (kind == "f32") return t[1].cast<float>();
  if (kind == "f64") return t[1].cast<double>();
  if (kind == "dtype") return mtia::Arg::dtype(t[1].cast<uint8_t>());
  TORCH_CHECK_VALUE(false, "kernel argument kind '", kind, "' is not ptr, i64, f32, f64 or dtype");
}

py::bytes rng_state() {
  at::Generator& g = default_generator();
  std::lock_guard<std::mutex> lock(g.mutex());
  const at::Tensor state(g.get_state());
  return py::bytes(static_cast<const char*>(state.data_ptr()), size_t(state.numel()));
}

void set_rng_state(const py::bytes& bytes) {
  const std::string s = bytes;
  at::Tensor state = at::empty({int64_t(s.size())}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(state.data_ptr(), s.data(), s.size());
  at::Generator& g = default_generator();
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_state(state);
}

}  // namespace

}  // namespace mtia::torch_backend

PYBIND11_MODULE(_C, m) {
  using namespace mtia::torch_backend;
  using release = py::call_guard<py::gil_scoped_release>;
  m.doc() = "mtia-emu PyTorch backend (PrivateUse1): the native half of torch_mtia_emu";
  register_allocator();

  // c10 errors keep their Python meaning, without the C++ backtrace in the message.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::TypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
    } catch (const c10::ValueError& e) {
      PyErr_SetString(PyExc_ValueError, e.what_without_backtrace());
    } catch (const c10::NotImplementedError& e) {
      PyErr_SetString(PyExc_NotImplementedError, e.what_without_backtrace());
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });

  m.def(
      "_init",
      [](const std::string& preset, bool timing, std::vector<std::string> overrides,
         const std::string& kernels, const std::string& trace) {
        BackendOptions o;
        o.preset = preset;
        o.timing = timing;
        o.overrides = std::move(overrides);
        o.kernel_library = kernels;
        o.trace = trace;
        Runtime::init(o);
      },
      release());
  m.def("_default_options", [] {
    const BackendOptions o = options_from_environment();
    return py::make_tuple(o.preset, o.timing, o.overrides, o.kernel_library);
  });
  m.def(
      "_lazy_init", [] { Runtime::get(); }, release());
  m.def("_is_initialized", &Runtime::is_initialized);
  m.def("_shutdown", &Runtime::shutdown, release());
  m.def("_properties", &properties);
  m.def(
      "_synchronize", [] { guarded("synchronize", [] { dev().synchronize(); }); }, release());

  m.def(
      "_create_stream",
      [] { return guarded("creating a stream", [] { return dev().create_stream().id; }); },
      release());
  m.def("_current_stream", [] { return current_stream().id; });
  // torch.Stream's packed form of stream `id`, so Python streams are torch.Stream objects.
  m.def("_stream_cdata", [](uint32_t id) {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, 0), c10::StreamId(id)).pack();
  });
  m.def("_set_current_stream", [](uint32_t id) { set_current_stream(mtia::Stream{id}); });
  m.def(
      "_stream_synchronize",
      [](uint32_t id) {
        guarded("synchronizing a stream", [&] { dev().synchronize(mtia::Stream{id}); });
      },
      release());
  m.def(
      "_stream_query",
      [](uint32_t id) {
        return guarded("querying a stream", [&] { return dev().query(mtia::Stream{id}); });
      },
      release());
  m.def(
      "_stream_wait_event",
      [](uint32_t stream, uint32_t event) {
        guarded("waiting for an event",
                [&] { dev().wait_event(mtia::Stream{stream}, mtia::Event{event}); });
      },
      release());
  m.def("_hardware_queue", [](uint32_t id) { return dev().hardware_queue(mtia::Stream{id}); });

  m.def(
      "_create_event",
      [] { return guarded("creating an event", [] { return dev().create_event().id; }); },
      release());
  m.def(
      "_destroy_event",
      [](uint32_t id) {
        if (!Runtime::is_initialized()) return;
        guarded("destroying an event", [&] { dev().destroy_event(mtia::Event{id}); });
      },
      release());
  m.def(
      "_record_event",
      [](uint32_t event, uint32_t stream) {
        guarded("recording an event",
                [&] { dev().record(mtia::Event{event}, mtia::Stream{stream}); });
      },
      release());
  m.def(
      "_event_query",
      [](uint32_t id) {
        return guarded("querying an event", [&] { return dev().query(mtia::Event{id}); });
      },
      release());
  m.def(
      "_event_synchronize",
      [](uint32_t id) {
        guarded("synchronizing an event", [&] { dev().synchronize(mtia::Event{id}); });
      },
      release());
  m.def(
      "_event_elapsed_ms",
      [](uint32_t a, uint32_t b) {
        return guarded("timing events",
                       [&] { return dev().elapsed_ms(mtia::Event{a}, mtia::Event{b}); });
      },
      release());

  m.def("_memory_stats", &memory_stats);
  m.def(
      "_empty_cache", [] { DeviceAllocator::instance().empty_cache(); }, release());
  m.def("_reset_peak_memory_stats", [] {
    DeviceAllocator::instance().reset_peak();
    if (Runtime::is_initialized()) dev().reset_peak_memory_stats();
  });

  m.def("_set_quiet_fallbacks", &set_quiet_fallbacks);
  m.def("_fallback_counts", &fallback_counts);
  m.def("_reset_fallback_counts", &reset_fallback_counts);
  m.def("_set_fallback_mode",
        [](const std::string& mode) { set_fallback_mode(parse_fallback_mode(mode)); });
  m.def("_fallback_mode", [] {
    switch (fallback_mode()) {
      case FallbackMode::kWarn:
        return "warn";
      case FallbackMode::kSilent:
        return "silent";
      case FallbackMode::kError:
        return "error";
    }
    return "warn";
  });

  m.def("_manual_seed", [](uint64_t seed) {
    at::Generator& g = default_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    g.set_current_seed(seed);
  });
  m.def("_seed", [] {
    at::Generator& g = default_generator();
    std::lock_guard<std::mutex> lock(g.mutex());
    return g.seed();
  });
  m.def("_initial_seed", [] { return default_generator().current_seed(); });
  m.def("_get_rng_state", &rng_state);
  m.def("_set_rng_state", &set_rng_state);

  m.def("_launch", [](const std::string& kernel, uint32_t rows, uint32_t cols,
                      const std::vector<py::tuple>& args) {
    std::vector<mtia::Arg> a;
    for (const py::tuple& t : args) a.push_back(to_arg(t));
    py::gil_scoped_release no_gil;
    launch(kernel, mtia::Grid{rows, cols}, a);
  });
  m.def("_launch_counts", &launch_counts);
  m.def("_reset_launch_counts", &reset_launch_counts);
  m.def("_kernel_names", [] { return Runtime::get().kernel_names(); });
  m.def(
      "_now_ps", [] { return guarded("reading the time", [] { return dev().now_ps(); }); },
      release());
  m.def(
      "_write_artifacts",
      [](const std::string& dir) {
        guarded("writing the trace", [&] { dev().write_artifacts(dir); });
      },
      release());
  m.def("_config_json", [] { return dev().config_json(); });
  m.def("_trace_level", [] { return std::string(mtia::trace_level_name(dev().trace_level())); });
  m.def("_set_trace_level", [](const std::string& level) {
    const auto parsed = mtia::parse_trace_level(level);
    TORCH_CHECK_VALUE(parsed.has_value(), "torch_mtia_emu: '", level,
                      "' is not a trace level; use off, kernels or units");
    dev().set_trace_level(*parsed);
  });
}
