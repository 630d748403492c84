#include "runtime.h"

#include <c10/util/Exception.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "allocator.h"
#include "install_location.h"
#include "log.h"
#include "mtia/trace.h"

#ifndef MTIA_KERNEL_LIBRARY_ELF
#error "MTIA_KERNEL_LIBRARY_ELF must be defined by the build (python/CMakeLists.txt)"
#endif

namespace mtia::torch_backend {

namespace {

std::mutex g_mu;  // guards g_runtime and g_shut_down transitions
std::atomic<Runtime*> g_runtime{nullptr};
std::atomic<bool> g_shut_down{false};
thread_local uint32_t t_stream = 0;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && v[0] != '\0') ? std::string(v) : fallback;
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

Runtime::Runtime(const BackendOptions& options) : options_(options) {
  kernel_path_ = find_kernel_library(options.kernel_library);
  mtia::DeviceOptions dev;
  dev.preset = options.preset;
  dev.timing = options.timing;
  dev.overrides = options.overrides;
  if (!options.trace.empty()) {
    dev.trace = mtia::parse_trace_level(options.trace);
    TORCH_CHECK_VALUE(dev.trace.has_value(), "torch_mtia_emu: '", options.trace,
                      "' is not a trace level; use off, kernels or units");
  }
  device_ = guarded("opening the device",
                    [&] { return std::make_unique<mtia::Device>(mtia::Device::open(dev)); });
  module_ = guarded("loading the kernel library " + kernel_path_,
                    [&] { return device_->load_module(kernel_path_); });
  log::debug(c10::str("device ", device_->properties().name, " open (timing ",
                      options.timing ? "on" : "off", "), kernel library ", kernel_path_));
}

Runtime& Runtime::get() {
  if (Runtime* r = g_runtime.load(std::memory_order_acquire)) return *r;
  init(options_from_environment());
  return *g_runtime.load(std::memory_order_acquire);
}

bool Runtime::is_initialized() {
  return g_runtime.load() != nullptr;
}
bool Runtime::is_shut_down() {
  return g_shut_down.load();
}

void Runtime::init(const BackendOptions& options) {
  std::lock_guard lock(g_mu);
  TORCH_CHECK(!g_shut_down.load(),
              "torch_mtia_emu: the device was closed (shutdown() or interpreter exit); "
              "start a new process to use it again");
  if (g_runtime.load() != nullptr) {
    // Another thread may have won the race in get(); same options are fine.
    const BackendOptions& cur = g_runtime.load()->options();
    TORCH_CHECK(cur.preset == options.preset && cur.timing == options.timing &&
                    cur.overrides == options.overrides && cur.trace == options.trace,
                "torch_mtia_emu: the device is already open (preset ", cur.preset, ", timing ",
                cur.timing ? "on" : "off",
                "); call init() before the first use of the device, once per process");
    return;
  }
  g_runtime.store(new Runtime(options), std::memory_order_release);
}

void Runtime::shutdown() {
  std::lock_guard lock(g_mu);
  Runtime* r = g_runtime.load();
  g_shut_down.store(true);
  if (r == nullptr) return;
  try {
    r->device_->synchronize();
  } catch (const mtia::Error& e) {
    log::warn(c10::str("device error reported at shutdown: ", e.what()));
  }
  DeviceAllocator::instance().shutdown();
  g_runtime.store(nullptr);
  delete r;  // closes the device
}

const mtia::Kernel& Runtime::kernel(std::string_view name) {
  std::lock_guard lock(mu_);
  auto it = kernels_.find(std::string(name));
  if (it != kernels_.end()) return *it->second;
  const mtia::Kernel& k = guarded("looking up a kernel in " + kernel_path_,
                                  [&]() -> const mtia::Kernel& { return module_.kernel(name); });
  kernels_.emplace(std::string(name), &k);
  return k;
}

mtia::Stream Runtime::pool_stream() {
  // A small fixed pool, like CUDA's: streams are cheap but hardware queues are few.
  constexpr size_t kPoolSize = 4;
  std::lock_guard lock(mu_);
  if (pool_.size() < kPoolSize) {
    pool_.push_back(guarded("creating a stream", [&] { return device_->create_stream(); }));
    return pool_.back();
  }
  return pool_[next_pool_++ % pool_.size()];
}

mtia::Stream current_stream() {
  return mtia::Stream{t_stream};
}
void set_current_stream(mtia::Stream stream) {
  t_stream = stream.id;
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
