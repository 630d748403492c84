// The backend's one device: opened on first use, shared by every tensor, closed at exit.
//
// PyTorch sees the device as its own MTIA device, index 0 ("mtia:0"). The in-process
// simulator hosts one device per process, so device_count() is 1. A device tensor's data
// pointer is its device address (the driver's heap starts above 1 MiB, so it is never null).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/Stream.h>

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

// How the backend opens its device. Unless init() was called first, the first use reads
// the environment: MTIA_EMU_PRESET (default mtia-v2), MTIA_EMU_TIMING (0/off: functional
// only), MTIA_EMU_SET (comma-separated key=value preset overrides) and MTIA_EMU_KERNELS (the
// kernel library; default: the build tree's build/kernels/mtia_kernels.elf). The trace level
// comes from MTIA_EMU_TRACE (off, kernels, units; read by the host API) unless `trace` names one.
struct BackendOptions {
  std::string preset = "mtia-v2";
  bool timing = true;
  std::vector<std::string> overrides;
  std::string kernel_library;
  std::string trace;  // "" (the environment's), "off", "kernels" or "units"
};

BackendOptions options_from_environment();

class Runtime {
 public:
  // The open device; opens it on the first call. Throws c10::Error when it cannot be opened
  // or after shutdown().
  static Runtime& get();
  static bool is_initialized();
  // Opens the device with `options`. Throws if it is already open.
  static void init(const BackendOptions& options);
  // Waits for outstanding work, returns cached memory and closes the device. Tensors that are
  // still alive keep their (now dead) addresses; freeing them afterwards does nothing.
  static void shutdown();
  static bool is_shut_down();

  mtia::Device& device() { return *device_; }
  const BackendOptions& options() const { return options_; }
  const std::string& kernel_library_path() const { return kernel_path_; }
  std::vector<std::string> kernel_names() const { return module_.kernel_names(); }
  // A kernel of the library by name (docs/kernels.md).
  const mtia::Kernel& kernel(std::string_view name);

  // Streams handed out by the guard's getStreamFromGlobalPool: created on first use.
  mtia::Stream pool_stream();

 private:
  Runtime(const BackendOptions& options);
  BackendOptions options_;
  std::string kernel_path_;
  std::unique_ptr<mtia::Device> device_;
  mtia::KernelModule module_;
  std::mutex mu_;
  std::unordered_map<std::string, const mtia::Kernel*> kernels_;
  std::vector<mtia::Stream> pool_;
  size_t next_pool_ = 0;
};

// The calling thread's current stream (the default stream until set).
mtia::Stream current_stream();
void set_current_stream(mtia::Stream stream);

// A host API stream as PyTorch's c10::Stream of mtia:0, and back (from_c10 checks the type).
c10::Stream to_c10(mtia::Stream s);
mtia::Stream from_c10(const c10::Stream& s);
// Throws RuntimeError unless `index` is 0 or -1 (the current device).
void check_device_index(c10::DeviceIndex index);

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
