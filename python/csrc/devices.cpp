#include "devices.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "install_location.h"
#include "mtia/runtime.h"
#include "mtia/settings/settings.h"
#include "mtia/trace.h"
#include "profiler.h"
#include "torch_logger.h"

#ifndef MTIA_KERNEL_LIBRARY_ELF
#error "MTIA_KERNEL_LIBRARY_ELF must be defined by the build (python/CMakeLists.txt)"
#endif

namespace mtia::torch_backend {

namespace {

std::mutex g_mu;  // guards g_runtime and g_shut_down transitions
std::mutex g_hooks_mu;
std::vector<void (*)()>& shutdown_hooks() {
  static auto* hooks = new std::vector<void (*)()>();  // never destroyed: used at exit
  return *hooks;
}
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_shut_down{false};
thread_local c10::DeviceIndex t_device = 0;
// The current stream of each device, per thread (0: the default stream).
thread_local std::array<uint32_t, kMaxDevices> t_streams{};

std::string env_or(const char* name, const std::string& fallback) {
  return mtia::settings::read(name).value_or(fallback);
}

std::string find_kernel_library(const std::string& requested) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!requested.empty()) {
    TORCH_CHECK(fs::is_regular_file(requested, ec), "torch_mtia_emu: kernel library '", requested,
                "' is not a file; point MTIA_EMU_KERNELS (or init(kernels=...)) at "
                "build/kernels/mtia_kernels.elf");
    return requested;
  }
  // An installed extension uses its installation's library; one in the build tree, the tree's.
  if (const std::string& installed = installed_data_dir(); !installed.empty()) {
    return installed + "/mtia_kernels.elf";
  }
  TORCH_CHECK(fs::is_regular_file(MTIA_KERNEL_LIBRARY_ELF, ec),
              "torch_mtia_emu: the kernel library " MTIA_KERNEL_LIBRARY_ELF
              " does not exist; build it (scripts/build) or set MTIA_EMU_KERNELS to its path");
  return MTIA_KERNEL_LIBRARY_ELF;
}

// mtia::device_count() once per process: the count, or why it cannot be had.
struct DeviceCount {
  int count = 0;
  std::string error;
};

const DeviceCount& read_device_count() {
  static const DeviceCount c = [] {
    DeviceCount r;
    try {
      r.count = mtia::device_count();
    } catch (const mtia::Error& e) {
      r.error = e.what();
      return r;
    }
    if (r.count > kMaxDevices) {
      r.error = c10::str(r.count, " devices: the backend handles at most ", kMaxDevices);
      r.count = 0;
    }
    return r;
  }();
  return c;
}

bool same_device_options(const BackendOptions& a, const BackendOptions& b) {
  return a.preset == b.preset && a.timing == b.timing && a.overrides == b.overrides &&
         a.trace == b.trace;
}

}  // namespace

BackendOptions options_from_environment() {
  BackendOptions o;
  o.preset = env_or("MTIA_EMU_PRESET", o.preset);
  const std::string timing = env_or("MTIA_EMU_TIMING", "1");
  o.timing = !(timing == "0" || timing == "off" || timing == "false");
  std::stringstream overrides(env_or("MTIA_EMU_SET", ""));
  for (std::string kv; std::getline(overrides, kv, ',');) {
    if (!kv.empty()) o.overrides.push_back(kv);
  }
  o.kernel_library = env_or("MTIA_EMU_KERNELS", "");
  return o;
}

// --- devices and the current device ----------------------------------------------------------

int device_count() {
  const DeviceCount& c = read_device_count();
  TORCH_CHECK(c.error.empty(), "torch_mtia_emu: cannot count the MTIA devices: ", c.error,
              ". Set MTIA_EMU_DEVICES to a number of devices (each runs in a device server "
              "process this process starts), or unset it for one in-process device");
  return c.count;
}

int device_count_or_zero() noexcept {
  return read_device_count().count;
}

c10::DeviceIndex current_device() {
  return t_device;
}

c10::DeviceIndex resolve_device(c10::DeviceIndex index) {
  if (index == -1) return t_device;
  const int count = device_count();
  TORCH_CHECK(index >= 0 && index < count, "torch_mtia_emu: device index ", int(index),
              " does not exist: this process has ", count, " MTIA device", count == 1 ? "" : "s",
              " (mtia:0", count > 1 ? c10::str(" .. mtia:", count - 1) : std::string(),
              "). Start the process with MTIA_EMU_DEVICES=N for N emulated devices (each in a "
              "device server process of its own), or MTIA_EMU_SERVER=PATH,... to use running "
              "servers");
  return index;
}

void set_current_device(c10::DeviceIndex index) {
  t_device = resolve_device(index);
}

DeviceScope::DeviceScope(c10::DeviceIndex index) {
  if (index < 0 || index == t_device) return;
  resolve_device(index);
  previous_ = t_device;
  t_device = index;
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) t_device = previous_;
}

// --- one device ------------------------------------------------------------------------------

DeviceContext::DeviceContext(c10::DeviceIndex index, const BackendOptions& options,
                             const std::string& kernel_path)
    : index_(index) {
  mtia::DeviceOptions dev;
  dev.index = uint32_t(index);
  dev.preset = options.preset;
  dev.timing = options.timing;
  dev.overrides = options.overrides;
  if (!options.trace.empty()) {
    dev.trace = mtia::parse_trace_level(options.trace);
    TORCH_CHECK_VALUE(dev.trace.has_value(), "torch_mtia_emu: '", options.trace,
                      "' is not a trace level; use off, kernels or units");
  }
  const std::string which = c10::str("mtia:", int(index));
  device_ = guarded("opening device " + which,
                    [&] { return std::make_unique<mtia::Device>(mtia::Device::open(dev)); });
  module_ = guarded("loading the kernel library " + kernel_path + " on " + which,
                    [&] { return device_->load_module(kernel_path); });
  log::debug(c10::str(which, ": device ", device_->properties().name, " open (backend ",
                      device_->properties().backend, ", timing ", options.timing ? "on" : "off",
                      "), kernel library ", kernel_path));
}

const mtia::Kernel& DeviceContext::kernel(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = kernels_.find(std::string(name));
  if (it != kernels_.end()) return *it->second;
  const mtia::Kernel& k = guarded("looking up a kernel in the kernel library",
                                  [&]() -> const mtia::Kernel& { return module_.kernel(name); });
  kernels_.emplace(std::string(name), &k);
  return k;
}

int DeviceContext::load_module(const std::string& elf) {
  mtia::KernelModule m = guarded("loading a generated kernel module",
                                 [&] { return device_->load_module(elf.data(), elf.size()); });
  std::lock_guard lock(mu_);
  modules_.push_back(std::move(m));
  return int(modules_.size() - 1);
}

const mtia::Kernel& DeviceContext::module_kernel(int handle, std::string_view name) {
  std::lock_guard lock(mu_);
  TORCH_CHECK_VALUE(handle >= 0 && size_t(handle) < modules_.size(), "kernel module handle ",
                    handle, " was not returned by load_module on mtia:", int(index_));
  return guarded("looking up a generated kernel",
                 [&]() -> const mtia::Kernel& { return modules_[size_t(handle)].kernel(name); });
}

mtia::Stream DeviceContext::pool_stream() {
  // A small fixed pool, like CUDA's: streams are cheap but hardware queues are few.
  constexpr size_t kPoolSize = 4;
  std::lock_guard lock(mu_);
  if (pool_.size() < kPoolSize) {
    pool_.push_back(guarded("creating a stream", [&] { return device_->create_stream(); }));
    return pool_.back();
  }
  return pool_[next_pool_++ % pool_.size()];
}

// --- the runtime -----------------------------------------------------------------------------

Runtime::Runtime(const BackendOptions& options)
    : options_(options), kernel_path_(find_kernel_library(options.kernel_library)) {}

Runtime& Runtime::get() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) return *r;
  std::lock_guard lock(g_mu);
  TORCH_CHECK(!g_shut_down.load(),
              "torch_mtia_emu: the device was closed (shutdown() or interpreter exit); "
              "start a new process to use it again");
  if (g_runtime.load() == nullptr) {
    g_runtime.store(new Runtime(options_from_environment()), std::memory_order_release);
  }
  return *g_runtime.load(std::memory_order_acquire);
}

bool Runtime::is_initialized() {
  const Runtime* r = g_runtime.load();
  return r != nullptr && r->any_open_.load();
}
bool Runtime::is_shut_down() {
  return g_shut_down.load();
}

void Runtime::init(const BackendOptions& options) {
  {
    std::lock_guard lock(g_mu);
    TORCH_CHECK(!g_shut_down.load(),
                "torch_mtia_emu: the device was closed (shutdown() or interpreter exit); "
                "start a new process to use it again");
    Runtime* r = g_runtime.load();
    if (r == nullptr) {
      g_runtime.store(new Runtime(options), std::memory_order_release);
    } else {
      std::lock_guard open_lock(r->open_mu_);
      if (!r->any_open_.load()) {
        // Made by a query that opened nothing: the options may still change.
        r->kernel_path_ = find_kernel_library(options.kernel_library);
        r->options_ = options;
      } else {
        // Another thread may have won the race to open; same options are fine.
        const BackendOptions& cur = r->options_;
        TORCH_CHECK(same_device_options(cur, options),
                    "torch_mtia_emu: the device is already open (preset ", cur.preset, ", timing ",
                    cur.timing ? "on" : "off",
                    "); call init() before the first use of the device, once per process");
      }
    }
  }
  Runtime::get().context(current_device());
}

DeviceContext& Runtime::context(c10::DeviceIndex index) {
  if (index >= 0 && index < kMaxDevices) {
    if (DeviceContext* c = contexts_[size_t(index)].load(std::memory_order_acquire)) return *c;
  }
  return open(resolve_device(index));
}

DeviceContext* Runtime::opened(c10::DeviceIndex index) const {
  if (index < 0 || index >= kMaxDevices) return nullptr;
  return contexts_[size_t(index)].load(std::memory_order_acquire);
}

DeviceContext& Runtime::open(c10::DeviceIndex index) {
  std::lock_guard lock(open_mu_);
  TORCH_CHECK(!g_shut_down.load(),
              "torch_mtia_emu: the device was closed (shutdown() or interpreter exit); "
              "start a new process to use it again");
  std::atomic<DeviceContext*>& slot = contexts_[size_t(index)];
  if (DeviceContext* c = slot.load()) return *c;
  auto* c = new DeviceContext(index, options_, kernel_path_);
  profiler_device_opened(c->device());  // a profile in progress observes it too
  slot.store(c, std::memory_order_release);
  any_open_.store(true);
  return *c;
}

void Runtime::close_all() {
  for (auto& slot : contexts_) {
    DeviceContext* c = slot.exchange(nullptr);
    delete c;  // closes the device
  }
}

void Runtime::on_shutdown(void (*hook)()) {
  std::lock_guard lock(g_hooks_mu);
  shutdown_hooks().push_back(hook);
}

void Runtime::shutdown() {
  std::lock_guard lock(g_mu);
  Runtime* r = g_runtime.load();
  g_shut_down.store(true);
  if (r == nullptr) return;
  for (c10::DeviceIndex i = 0; i < kMaxDevices; ++i) {
    DeviceContext* c = r->opened(i);
    if (c == nullptr) continue;
    try {
      c->device().synchronize();
    } catch (const mtia::Error& e) {
      log::warn(c10::str("mtia:", int(i), ": device error reported at shutdown: ", e.what()));
    }
  }
  std::vector<void (*)()> hooks;
  {
    std::lock_guard hooks_lock(g_hooks_mu);
    hooks = shutdown_hooks();
  }
  for (void (*hook)() : hooks) hook();
  std::lock_guard open_lock(r->open_mu_);
  g_runtime.store(nullptr);
  r->close_all();
  delete r;
}

// --- streams ---------------------------------------------------------------------------------

mtia::Stream current_stream() {
  return mtia::Stream{t_streams[size_t(t_device)]};
}
mtia::Stream current_stream(c10::DeviceIndex index) {
  // Callers pass a checked index or -1; anything else reads the current device's.
  const bool valid = index >= 0 && index < kMaxDevices;
  return mtia::Stream{t_streams[size_t(valid ? index : t_device)]};
}
void set_current_stream(c10::DeviceIndex index, mtia::Stream stream) {
  t_streams[size_t(resolve_device(index))] = stream.id;
}

c10::Stream to_c10(c10::DeviceIndex index, mtia::Stream s) {
  const bool valid = index >= 0 && index < kMaxDevices;
  return c10::Stream(c10::Stream::UNSAFE, c10::Device(kDeviceType, valid ? index : t_device),
                     static_cast<c10::StreamId>(s.id));
}

mtia::Stream from_c10(const c10::Stream& s) {
  TORCH_CHECK_VALUE(s.device_type() == kDeviceType, "torch_mtia_emu: ", s,
                    " is not a stream of the mtia device");
  return mtia::Stream{static_cast<uint32_t>(s.id())};
}

mtia::Event record_new_event(mtia::Device& dev, mtia::Stream s) {
  const mtia::Event ev = dev.create_event();
  try {
    dev.record(ev, s);
  } catch (...) {
    dev.destroy_event(ev);
    throw;
  }
  return ev;
}

void rethrow(const mtia::Error& error, std::string_view context) {
  std::string msg = "torch_mtia_emu: ";
  if (!context.empty()) msg += std::string(context) + ": ";
  // The host API's messages usually start with their kind ("device fault: ..."); say it once.
  const std::string kind = mtia::error_kind_name(error.kind());
  const std::string what = error.what();
  if (what.rfind(kind, 0) != 0) msg += kind + ": ";
  msg += what;
  if (error.kind() == mtia::ErrorKind::kOutOfMemory) {
    TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  }
  TORCH_CHECK(false, msg);
}

}  // namespace mtia::torch_backend
