// The in-process backend: the SystemC device (sim/) on its own thread inside this process.
//
// This is the only code that sees both the driver and the simulator. It registers itself as
// backend "inprocess" from a static registrar; the library is linked as a whole archive (see
// backends/CMakeLists.txt) so the registrar is kept even though nothing references it.
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <cassert>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>

#include "mtia/driver/backend.h"
#include "mtia/isa/access_scope.h"
#include "mtia/log/logger.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/emulated_device.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/host_memory.h"

namespace mtia::backends {
namespace {

constexpr uint64_t kHostPageBytes = 4096;  // alloc_host's alignment and size granule

isa::Failure bad_argument(std::string why) {
  return isa::reject(isa::ErrorCode::kInvalidArgument, std::move(why));
}

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("backend.inprocess");
  return log;
}

// Host memory the device may reach: the ranges registered with map_host, each in a context
// (0 unless a device server mapped it for a client). The bus address of a range is its host
// pointer value, so translation is a range lookup.
class RegisteredHostMemory final : public sim::HostMemory {
 public:
  isa::Result<uint64_t> map(void* ptr, uint64_t bytes, uint32_t context) {
    const auto start = reinterpret_cast<uint64_t>(ptr);
    if (ptr == nullptr) return bad_argument("map_host: the host pointer is null");
    if (bytes == 0) {
      return bad_argument(
          fmt::format("map_host: cannot register 0 bytes at host address 0x{:x}", start));
    }
    if (bytes > UINT64_MAX - start) {
      return bad_argument(fmt::format(
          "map_host: 0x{:x} + {} bytes runs past the end of the address space", start, bytes));
    }
    std::unique_lock lock(mu_);
    auto next = ranges_.lower_bound(start);
    auto overlap = [&](uint64_t s, uint64_t n) {
      return bad_argument(fmt::format(
          "map_host: host range 0x{:x} + {} bytes overlaps the registered range 0x{:x} + {} "
          "bytes; unmap it first or register one range covering both",
          start, bytes, s, n));
    };
    if (next != ranges_.end() && next->first < start + bytes) {
      return overlap(next->first, next->second.bytes);
    }
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.bytes > start) {
        return overlap(prev->first, prev->second.bytes);
      }
    }
    ranges_.emplace(start, Range{bytes, context});
    return start;
  }

  isa::Status unmap(uint64_t bus_addr) {
    std::unique_lock lock(mu_);
    if (ranges_.erase(bus_addr) == 0) {
      return isa::reject(
          isa::ErrorCode::kInvalidPointer,
          fmt::format("unmap_host: bus address 0x{:x} is not the start of a range registered "
                      "with map_host",
                      bus_addr));
    }
    return {};
  }

  uint8_t* translate(uint64_t bus_addr, uint64_t bytes) override {
    return translate_in(0, bus_addr, bytes);
  }

  uint8_t* translate_in(uint32_t context, uint64_t bus_addr, uint64_t bytes) override {
    std::shared_lock lock(mu_);
    auto next = ranges_.upper_bound(bus_addr);
    if (next == ranges_.begin()) return nullptr;
    const auto& [start, range] = *std::prev(next);
    const uint64_t offset = bus_addr - start;  // bus_addr >= start here
    if (offset >= range.bytes || bytes > range.bytes - offset) return nullptr;
    const isa::AccessScope scope{context, 0, 0};
    if (!scope.reaches_host(range.context)) return nullptr;
    return reinterpret_cast<uint8_t*>(bus_addr);
  }

 private:
  struct Range {
    uint64_t bytes = 0;
    uint32_t context = 0;
  };
  std::shared_mutex mu_;
  std::map<uint64_t, Range> ranges_;  // bus address -> range
};

isa::Result<sim::ChipConfig> make_config(const driver::BackendOptions& options) {
  MTIA_ASSIGN_OR_RETURN(sim::ChipConfig config, sim::load_preset(options.preset));
  for (const auto& assignment : options.overrides) {
    MTIA_RETURN_IF_ERROR(sim::apply_override(config, assignment));
  }
  config.timing = options.timing;
  MTIA_RETURN_IF_ERROR(sim::validate(config));
  return config;
}

sim::PeGridHostOptions grid_options(const driver::BackendOptions& options) {
  sim::PeGridHostOptions o;
  o.unit_threads = options.unit_threads;
  o.inline_work_ns = options.inline_work_ns;
  o.lazy_loads = options.lazy_loads;
  return o;
}

// Also the device's trace channel: the simulator has the clock and the trace.
class InProcessBackend final : public driver::Backend, private driver::TraceChannel {
 public:
  static isa::Result<std::unique_ptr<driver::Backend>> open(const driver::BackendOptions& options) {
    MTIA_ASSIGN_OR_RETURN(const sim::ChipConfig config, make_config(options));
    std::unique_ptr<InProcessBackend> backend(new InProcessBackend());
    InProcessBackend* self = backend.get();
    MTIA_ASSIGN_OR_RETURN(
        backend->device_,
        sim::Device::open(
            config, backend->host_memory_, [self](uint64_t mask) { self->deliver_interrupt(mask); },
            options.trace, options.wait, grid_options(options)));
    logger()->debug("in-process device '{}' started (timing {})", config.name,
                    config.timing ? "on" : "off");
    return std::unique_ptr<driver::Backend>(std::move(backend));
  }

  ~InProcessBackend() override {
    device_.reset();  // stops the simulator thread before the handlers and host memory go
    for (void* p : host_allocations_) std::free(p);  // the caller's leak; the memory goes too
  }

  isa::Result<uint64_t> read_register(uint64_t offset) override {
    auto r = device_->read_register(offset);
    if (!r) {
      return isa::with_context(r.error(),
                               fmt::format("register read at BAR0 offset 0x{:x} failed: ", offset));
    }
    return r;
  }

  void write_register(uint64_t offset, uint64_t value) override {
    device_->write_register(offset, value);
  }

  isa::Status read_memory(uint64_t device_addr, void* dst, uint64_t bytes) override {
    return device_->read_memory(device_addr, dst, bytes);
  }

  isa::Status write_memory(uint64_t device_addr, const void* src, uint64_t bytes) override {
    return device_->write_memory(device_addr, src, bytes);
  }

  isa::Result<SharedWindow> shared_window() override {
    const sim::Device::MemoryWindow w = device_->dram_window();
    return SharedWindow{w.fd, w.device_addr, w.bytes};
  }

  isa::Result<SharedWindow> split_window(uint64_t device_addr, uint64_t bytes) override {
    MTIA_ASSIGN_OR_RETURN(const sim::Device::MemoryWindow w,
                          device_->split_dram_window(device_addr, bytes));
    return SharedWindow{w.fd, w.device_addr, w.bytes};
  }

  // The device shares this process's memory: any host memory maps, this included.
  isa::Result<void*> alloc_host(uint64_t bytes) override {
    if (bytes == 0) return bad_argument("alloc_host: cannot allocate 0 bytes of host memory");
    if (bytes > UINT64_MAX - (kHostPageBytes - 1)) {
      return isa::reject(isa::ErrorCode::kOutOfMemory,
                         fmt::format("alloc_host: {} bytes is more than any host has", bytes));
    }
    const uint64_t size = (bytes + kHostPageBytes - 1) / kHostPageBytes * kHostPageBytes;
    void* p = std::aligned_alloc(kHostPageBytes, size);
    if (p == nullptr) {
      return isa::reject(isa::ErrorCode::kOutOfMemory,
                         fmt::format("alloc_host: the host is out of memory for {} bytes", bytes));
    }
    std::lock_guard lock(host_alloc_mu_);
    host_allocations_.insert(p);
    return p;
  }

  isa::Status free_host(void* ptr) override {
    {
      std::lock_guard lock(host_alloc_mu_);
      if (host_allocations_.erase(ptr) == 0) {
        return isa::reject(isa::ErrorCode::kInvalidPointer,
                           fmt::format("free_host({}): not a live pointer from alloc_host", ptr));
      }
    }
    std::free(ptr);
    return {};
  }

  isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) override {
    return host_memory_.map(ptr, bytes, 0);
  }
  isa::Result<uint64_t> map_host_in_context(uint32_t context, void* ptr, uint64_t bytes) override {
    return host_memory_.map(ptr, bytes, context);
  }
  isa::Status unmap_host(uint64_t bus_addr) override { return host_memory_.unmap(bus_addr); }

  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    // Waits for a handler that is running right now, so the old one is never called after this.
    std::lock_guard lock(handler_mu_);
    handler_ = std::move(handler);
  }

  driver::TraceChannel& trace() override { return *this; }

  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    {
      std::lock_guard lock(handler_mu_);
      lost_handler_ = std::move(handler);
    }
    // The simulator tells us (on its thread, as it ends) and tells a late handler at once.
    device_->set_lost_handler([this](const std::string& why) { deliver_lost(why); });
  }

 private:
  InProcessBackend() = default;

  // TraceChannel: the simulator's clock, trace and configuration.
  uint64_t now_ps() override { return device_->now_ps(); }
  isa::Status write_artifacts(const std::string& dir) override {
    return device_->write_artifacts(dir);
  }
  std::string config_json() override { return sim::to_json(device_->config()); }
  isa::Status set_trace_level(trace::TraceLevel level) override {
    return device_->set_trace_level(level);
  }
  void trace_host_call(trace::HostCall call) override { device_->trace_host_call(std::move(call)); }

  void deliver_lost(const std::string& why) {
    std::lock_guard lock(handler_mu_);
    if (lost_handler_) lost_handler_(why);
  }

  // On the simulator thread.
  void deliver_interrupt(uint64_t mask) {
    std::lock_guard lock(handler_mu_);
    if (handler_) handler_(mask);
  }

  std::mutex host_alloc_mu_;
  std::set<void*> host_allocations_;  // live alloc_host pointers

  // Declared before device_: the device's thread uses them until the device is destroyed.
  RegisteredHostMemory host_memory_;
  std::mutex handler_mu_;
  std::function<void(uint64_t)> handler_;
  std::function<void(const std::string&)> lost_handler_;
  std::unique_ptr<sim::Device> device_;
};

// Registers the backend when the program starts.
const bool registered = [] {
  const isa::Status added = driver::register_backend("inprocess", InProcessBackend::open);
  assert(added && "backend 'inprocess' is registered once");
  return added.ok();
}();

}  // namespace
}  // namespace mtia::backends
