// torch_mtia_emu._C: loading this module registers the MTIA hooks, device guard, kernels and
// CPU fallback (static registrations in the other files) and the allocator. torch.mtia reaches
// the device through the hooks; these bindings are what is emulator-specific (options, traces,
// fallback counts, kernel launches), for torch_mtia_emu/__init__.py. Plain values only:
// tensors cross as data pointers.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/csrc/Generator.h>

#include <execinfo.h>
#include <unistd.h>

#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "caching_allocator.h"
#include "devices.h"
#include "fallback.h"
#include "hooks.h"
#include "install_location.h"
#include "launch.h"
#include "mtia/settings/settings.h"
#include "op_table.h"
#include "profiler.h"
#include "random.h"

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

// std::terminate (a joinable std::thread destroyed, an exception out of a noexcept function)
// ends the process with one line that names no place. This handler first writes the native
// stack to stderr, so that such an abort - in this extension, in PyTorch or in a library below
// - says where it happened; then it hands over to the handler it replaced.
std::terminate_handler g_previous_terminate = nullptr;

[[noreturn]] void terminate_with_stack() {
  static const char kHeader[] = "torch_mtia_emu: std::terminate called; native stack:\n";
  (void)!::write(STDERR_FILENO, kHeader, sizeof kHeader - 1);
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, n, STDERR_FILENO);
  if (g_previous_terminate != nullptr) g_previous_terminate();
  std::abort();
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

}  // namespace

}  // namespace mtia::torch_backend

PYBIND11_MODULE(_C, m) {
  using namespace mtia::torch_backend;
  using release = py::call_guard<py::gil_scoped_release>;
  m.doc() = "mtia-emu PyTorch backend (the MTIA device): the native half of torch_mtia_emu";
  register_allocator();
  register_profiler();  // torch.profiler's ProfilerActivity.MTIA (docs/profiling.md)
  g_previous_terminate = std::set_terminate(terminate_with_stack);

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
      "_lazy_init", [] { Runtime::get().context(current_device()); }, release());
  m.def("_is_initialized", &Runtime::is_initialized);
  m.def("_shutdown", &Runtime::shutdown, release());
  m.def("_preset_dir", [] {
    const std::string& installed = installed_data_dir();
    return installed.empty() ? std::string(MTIA_PRESET_DIR) : installed + "/presets";
  });
  // What a generated kernel is compiled for: the flags of the build's own kernels.
  m.def("_kernel_target_flags", [] { return std::string(MTIA_KERNEL_TARGET_FLAGS); });
  // The package's Python code reads MTIA_EMU_* variables through this, so that every read goes
  // through the one table (mtia/settings/settings.h).
  m.def("_setting", [](const std::string& name) {
    TORCH_CHECK_VALUE(mtia::settings::find(name) != nullptr, "torch_mtia_emu: ", name,
                      " is not a setting of the emulator (`mtia-emu info --env` lists them)");
    return mtia::settings::read(name);
  });
  m.def("_device_count", [] { return device_count(); });
  m.def(
      "_properties", [](int index) { return device_properties_dict(c10::DeviceIndex(index)); },
      py::arg("index") = -1);
  m.def(
      "_memory_stats", [](int index) { return memory_stats_dict(c10::DeviceIndex(index)); },
      py::arg("index") = -1);
  // Device `index`'s default MTIA generator as a torch.Generator, for
  // torch.mtia.default_generators.
  m.def("_default_generator", [](int index) {
    TORCH_CHECK_VALUE(index >= 0 && index < kMaxDevices, "torch_mtia_emu: no device ", index);
    return py::reinterpret_steal<py::object>(
        THPGenerator_initDefaultGenerator(default_generator(c10::DeviceIndex(index))));
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

  m.def("_launch", [](const std::string& kernel, uint32_t rows, uint32_t cols,
                      const std::vector<py::tuple>& args) {
    std::vector<mtia::Arg> a;
    for (const py::tuple& t : args) a.push_back(to_arg(t));
    py::gil_scoped_release no_gil;
    launch(kernel, mtia::Grid{rows, cols}, a);
  });
  // The compiler's generated kernels: a module's ELF bytes load once per device; launches name
  // the module's handle and the kernel.
  m.def("_load_module", [](const py::bytes& elf) {
    std::string bytes = elf;
    py::gil_scoped_release no_gil;
    return Runtime::get().context(current_device()).load_module(bytes);
  });
  m.def("_launch_module", [](int handle, const std::string& kernel, uint32_t rows, uint32_t cols,
                             const std::vector<py::tuple>& args) {
    std::vector<mtia::Arg> a;
    a.reserve(args.size());
    for (const py::tuple& t : args) a.push_back(to_arg(t));
    py::gil_scoped_release no_gil;
    const mtia::Kernel& k = Runtime::get().context(current_device()).module_kernel(handle, kernel);
    launch(k, mtia::Grid{rows, cols}, a);
  });
  m.def("_op_table", [] {
    std::vector<std::tuple<std::string, std::string, std::string>> rows;
    for (const OpRow& r : op_table()) rows.emplace_back(r.overload, r.family, r.kind);
    return rows;
  });
  m.def("_op_families", [] {
    std::vector<std::pair<std::string, std::string>> families;
    for (const OpFamily& f : op_families()) families.emplace_back(f.name, f.kernels);
    return families;
  });
  m.def("_launch_counts", &launch_counts);
  m.def("_reset_launch_counts", &reset_launch_counts);
  m.def("_kernel_names", [] { return Runtime::get().context(current_device()).kernel_names(); });
  m.def(
      "_now_ps", [] { return guarded("reading the time", [] { return dev().now_ps(); }); },
      release());
  m.def(
      "_write_artifacts",
      [](const std::string& dir) {
        guarded("writing the trace", [&] { dev().write_artifacts(dir); });
      },
      release());
  m.def("_is_current_stream_capturing", [] {
    // Not open yet: nothing can be capturing (and asking does not open the device).
    if (!Runtime::is_initialized() || Runtime::is_shut_down()) return false;
    return guarded("asking whether the current stream captures",
                   [] { return dev().is_capturing(current_stream()); });
  });
  // Link transfers on the current stream (mtia::Device::link_send / link_receive_async): the
  // c10d backend's data path between ranks. Pointers: the device tensor's data_ptr and the
  // pinned host tensor's.
  m.def(
      "_link_send",
      [](uint64_t staging, uint64_t src, uint64_t bytes, uint32_t link, uint32_t peer) {
        return guarded("link send", [&] {
          return dev().link_send(reinterpret_cast<void*>(staging), mtia::DevicePtr(src), bytes,
                                 link, peer, current_stream());
        });
      },
      release());
  m.def(
      "_link_receive",
      [](uint64_t dst, uint64_t staging, uint64_t bytes, uint32_t link, uint32_t peer,
         uint64_t sent_ps) {
        guarded("link receive", [&] {
          dev().link_receive_async(mtia::DevicePtr(dst), reinterpret_cast<const void*>(staging),
                                   bytes, link, peer, sent_ps, current_stream());
        });
      },
      release());
  m.def("_profiler_synchronize", &synchronize_open_devices, release());
  m.def("_profiler_counts", [] {
    const ProfilerCounts c = profiler_counts();
    return py::make_tuple(c.recording, c.device_activities, c.runtime_calls, c.dropped);
  });
  m.def("_config_json", [] { return dev().config_json(); });
  m.def("_trace_level", [] { return std::string(mtia::trace_level_name(dev().trace_level())); });
  m.def("_set_trace_level", [](const std::string& level) {
    const auto parsed = mtia::parse_trace_level(level);
    TORCH_CHECK_VALUE(parsed.has_value(), "torch_mtia_emu: '", level,
                      "' is not a trace level; use off, kernels or units");
    dev().set_trace_level(*parsed);
  });
}
