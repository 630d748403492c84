// The backend's devices: one mtia::Device per index, each opened on its first use, shared by
// every tensor on it, closed at exit.
//
// PyTorch sees them as its own MTIA devices, mtia:0 .. mtia:N-1, N = mtia::device_count(): 1
// (the in-process simulator) unless MTIA_EMU_DEVICES=N (N device servers this process starts)
// or MTIA_EMU_SERVER=PATH,... (running servers) says otherwise. Each host thread has a current
// device (0 until set) and a current stream per device. A device tensor's data pointer is its
// address on its own device (the driver's heap starts above 1 MiB, so it is never null); the
// same address on two devices is two different memories.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "mtia/device.h"
#include "mtia/error.h"

namespace mtia::torch_backend {

inline constexpr c10::DeviceType kDeviceType = c10::DeviceType::MTIA;
// The most devices the backend handles (the host API's limit for MTIA_EMU_DEVICES).
inline constexpr int kMaxDevices = 64;

// How the backend opens its devices. Unless init() was called first, the first use reads
// the environment: MTIA_EMU_PRESET (default mtia-v2), MTIA_EMU_TIMING (0/off: functional
// only), MTIA_EMU_SET (comma-separated key=value preset overrides) and MTIA_EMU_KERNELS (the
// kernel library; default: the build tree's build/kernels/mtia_kernels.elf). The trace level
// comes from MTIA_EMU_TRACE (off, kernels, units; read by the host API) unless `trace` names one.
// Every device of the process is opened with the same options.
struct BackendOptions {
  std::string preset = "mtia-v2";
  bool timing = true;
  std::vector<std::string> overrides;
  std::string kernel_library;
  std::string trace;  // "" (the environment's), "off", "kernels" or "units"
};

BackendOptions options_from_environment();

// How many MTIA devices this process has (mtia::device_count(), read once). Throws c10::Error
// naming the problem when MTIA_EMU_DEVICES or MTIA_EMU_SERVER is malformed.
int device_count();
// device_count(), or 0 when it cannot be read (for callers that must not throw).
int device_count_or_zero() noexcept;

// The calling thread's current device (0 until set).
c10::DeviceIndex current_device();
// -1 -> the current device; otherwise `index` after checking it names a device (a RuntimeError
// naming the count and how to get more devices otherwise).
c10::DeviceIndex resolve_device(c10::DeviceIndex index);
// Sets the calling thread's current device (checked as resolve_device does).
void set_current_device(c10::DeviceIndex index);

// Makes `index` (>= 0, checked) the thread's current device for its lifetime; -1 changes
// nothing. What an op runs under, so that its allocations, launches and copies go to the
// device of its tensors.
class DeviceScope {
 public:
  explicit DeviceScope(c10::DeviceIndex index);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  c10::DeviceIndex previous_ = -1;  // -1: nothing to restore
};

// One open device: the host API device, the kernel library loaded on it, its stream pool.
class DeviceContext {
 public:
  DeviceContext(c10::DeviceIndex index, const BackendOptions& options,
                const std::string& kernel_path);

  c10::DeviceIndex index() const { return index_; }
  mtia::Device& device() { return *device_; }
  std::vector<std::string> kernel_names() const { return module_.kernel_names(); }
  // A kernel of the library, loaded on this device, by name (docs/kernels.md).
  const mtia::Kernel& kernel(std::string_view name);
  // Streams handed out by the guard's getStreamFromGlobalPool: created on first use.
  mtia::Stream pool_stream();
  // Loads a kernel module built at run time (the compiler's generated kernels) from its ELF
  // bytes; returns its handle on this device. A malformed image is a c10::Error.
  int load_module(const std::string& elf);
  // Kernel `name` of module `handle` (load_module); a c10::Error for an unknown handle or name.
  const mtia::Kernel& module_kernel(int handle, std::string_view name);

 private:
  c10::DeviceIndex index_;
  std::unique_ptr<mtia::Device> device_;
  mtia::KernelModule module_;
  std::mutex mu_;
  std::unordered_map<std::string, const mtia::Kernel*> kernels_;
  std::vector<mtia::KernelModule> modules_;  // load_module's, by handle
  std::vector<mtia::Stream> pool_;
  size_t next_pool_ = 0;
};

class Runtime {
 public:
  // The runtime, made on the first call with the environment's options; it opens no device
  // (context() does). Throws c10::Error after shutdown() or when the kernel library is missing.
  static Runtime& get();
  // True once a device has been opened.
  static bool is_initialized();
  // Sets the options and opens the current device with them. Throws if a device is already
  // open with other options.
  static void init(const BackendOptions& options);
  // Waits for outstanding work, returns cached memory and closes every device. Tensors that are
  // still alive keep their (now dead) addresses; freeing them afterwards does nothing.
  static void shutdown();
  static bool is_shut_down();
  // Adds work that shutdown() runs after the devices are synchronized and before they close
  // (the caching allocator returns its blocks then), in the order added.
  static void on_shutdown(void (*hook)());

  // Device `index` (-1: the current one; checked), opened on first use.
  DeviceContext& context(c10::DeviceIndex index);
  // Device `index` if it has been opened, else null; never opens one.
  DeviceContext* opened(c10::DeviceIndex index) const;
  // The current device's host API device and kernels (the device an op runs on).
  mtia::Device& device() { return context(current_device()).device(); }
  mtia::Device& device(c10::DeviceIndex index) { return context(index).device(); }
  const mtia::Kernel& kernel(std::string_view name) {
    return context(current_device()).kernel(name);
  }

  const BackendOptions& options() const { return options_; }
  const std::string& kernel_library_path() const { return kernel_path_; }

 private:
  explicit Runtime(const BackendOptions& options);
  DeviceContext& open(c10::DeviceIndex index);
  void close_all();
  // Set before the first device opens (init() may still replace them until then).
  BackendOptions options_;
  std::string kernel_path_;
  std::mutex open_mu_;  // one device opens at a time
  std::atomic<bool> any_open_{false};
  std::array<std::atomic<DeviceContext*>, kMaxDevices> contexts_{};
};

// The calling thread's current stream on device `index` (the current device by default; the
// default stream until set).
mtia::Stream current_stream();
mtia::Stream current_stream(c10::DeviceIndex index);
void set_current_stream(c10::DeviceIndex index, mtia::Stream stream);

// A host API stream of device `index` as PyTorch's c10::Stream of mtia:index, and back
// (from_c10 checks the type).
c10::Stream to_c10(c10::DeviceIndex index, mtia::Stream s);
mtia::Stream from_c10(const c10::Stream& s);

// A new event of `dev` recorded on stream `s`: done once the work queued there so far is. The
// event is destroyed again if recording it fails (the host API's error propagates).
mtia::Event record_new_event(mtia::Device& dev, mtia::Stream s);

// Device addresses as the void* PyTorch stores in a DataPtr, and back.
inline mtia::DevicePtr device_ptr(const void* data) {
  return mtia::DevicePtr(reinterpret_cast<uint64_t>(data));
}
inline void* data_pointer(mtia::DevicePtr ptr) {
  return reinterpret_cast<void*>(ptr.address());
}

// Rethrows a host API error as the c10 error Python maps to the right exception:
// out of memory -> torch.cuda.OutOfMemoryError (a RuntimeError), everything else ->
// RuntimeError; `context` says what the backend was doing.
[[noreturn]] void rethrow(const mtia::Error& error, std::string_view context);

// Runs `fn`, translating host API errors (see rethrow).
template <class Fn>
decltype(auto) guarded(std::string_view context, Fn&& fn) {
  try {
    return fn();
  } catch (const mtia::Error& e) {
    rethrow(e, context);
  }
}

}  // namespace mtia::torch_backend
