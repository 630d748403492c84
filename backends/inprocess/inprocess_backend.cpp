// The in-process backend: the SystemC device (sim/) on its own thread inside this process.
//
// This is the only code that sees both the driver and the simulator. It registers itself as
// backend "inprocess" from a static registrar; the library is linked as a whole archive (see
// backends/CMakeLists.txt) so the registrar is kept even though nothing references it.
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>

#include "mtia/driver/backend.h"
#include "mtia/log/logger.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/device.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/host_memory.h"

namespace mtia::backends {
namespace {

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("backend.inprocess");
  return log;
}

// Host memory the device may reach: the ranges registered with map_host. The bus address of a
// range is its host pointer value, so translation is a range lookup.
class RegisteredHostMemory final : public sim::HostMemory {
 public:
  uint64_t map(void* ptr, uint64_t bytes) {
    const auto start = reinterpret_cast<uint64_t>(ptr);
    if (ptr == nullptr) throw std::invalid_argument("map_host: the host pointer is null");
    if (bytes == 0) {
      throw std::invalid_argument(
          fmt::format("map_host: cannot register 0 bytes at host address 0x{:x}", start));
    }
    if (bytes > UINT64_MAX - start) {
      throw std::invalid_argument(fmt::format(
          "map_host: 0x{:x} + {} bytes runs past the end of the address space", start, bytes));
    }
    std::unique_lock lock(mu_);
    auto next = ranges_.lower_bound(start);
    auto overlap = [&](uint64_t s, uint64_t n) {
      return std::invalid_argument(fmt::format(
          "map_host: host range 0x{:x} + {} bytes overlaps the registered range 0x{:x} + {} "
          "bytes; unmap it first or register one range covering both",
          start, bytes, s, n));
    };
    if (next != ranges_.end() && next->first < start + bytes) {
      throw overlap(next->first, next->second);
    }
    if (next != ranges_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second > start) throw overlap(prev->first, prev->second);
    }
    ranges_.emplace(start, bytes);
    return start;
  }

  void unmap(uint64_t bus_addr) {
    std::unique_lock lock(mu_);
    if (ranges_.erase(bus_addr) == 0) {
      throw std::invalid_argument(fmt::format(
          "unmap_host: bus address 0x{:x} is not the start of a range registered with map_host",
          bus_addr));
    }
  }

  uint8_t* translate(uint64_t bus_addr, uint64_t bytes) override {
    std::shared_lock lock(mu_);
    auto next = ranges_.upper_bound(bus_addr);
    if (next == ranges_.begin()) return nullptr;
    const auto& [start, len] = *std::prev(next);
    const uint64_t offset = bus_addr - start;  // bus_addr >= start here
    if (offset >= len || bytes > len - offset) return nullptr;
    return reinterpret_cast<uint8_t*>(bus_addr);
  }

 private:
  std::shared_mutex mu_;
  std::map<uint64_t, uint64_t> ranges_;  // bus address -> bytes
};

sim::ChipConfig make_config(const driver::BackendOptions& options) {
  sim::ChipConfig config;
  try {
    config = sim::load_preset(options.preset);
  } catch (const std::runtime_error& e) {
    // A preset that cannot be loaded is a bad argument of the caller's.
    throw std::invalid_argument(e.what());
  }
  for (const auto& assignment : options.overrides) sim::apply_override(config, assignment);
  config.timing = options.timing;
  sim::validate(config);
  return config;
}

sim::PeGridHostOptions grid_options(const driver::BackendOptions& options) {
  sim::PeGridHostOptions o;
  o.unit_threads = options.unit_threads;
  o.inline_work_ns = options.inline_work_ns;
  o.lazy_loads = options.lazy_loads;
  return o;
}

class InProcessBackend final : public driver::Backend {
 public:
  explicit InProcessBackend(const driver::BackendOptions& options)
      : device_(
            make_config(options), host_memory_, [this](uint64_t mask) { deliver_interrupt(mask); },
            options.trace, options.wait, grid_options(options)) {
    logger()->debug("in-process device '{}' started (timing {})", device_.config().name,
                    device_.config().timing ? "on" : "off");
  }

  uint64_t read_register(uint64_t offset) override {
    auto r = device_.read_register(offset);
    if (!r) {
      throw std::runtime_error(
          fmt::format("register read at BAR0 offset 0x{:x} failed: {}", offset, r.error().reason));
    }
    return r.value();
  }

  void write_register(uint64_t offset, uint64_t value) override {
    device_.write_register(offset, value);
  }

  void read_memory(uint64_t device_addr, void* dst, uint64_t bytes) override {
    if (!device_.read_memory(device_addr, dst, bytes)) {
      throw std::out_of_range(fmt::format(
          "memory window read of 0x{:x} + {} bytes is outside device memory", device_addr, bytes));
    }
  }

  void write_memory(uint64_t device_addr, const void* src, uint64_t bytes) override {
    if (!device_.write_memory(device_addr, src, bytes)) {
      throw std::out_of_range(fmt::format(
          "memory window write of 0x{:x} + {} bytes is outside device memory", device_addr, bytes));
    }
  }

  uint64_t map_host(void* ptr, uint64_t bytes) override { return host_memory_.map(ptr, bytes); }
  void unmap_host(uint64_t bus_addr) override { host_memory_.unmap(bus_addr); }

  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    // Waits for a handler that is running right now, so the old one is never called after this.
    std::lock_guard lock(handler_mu_);
    handler_ = std::move(handler);
  }

  uint64_t now_ps() override { return device_.now_ps(); }
  void write_artifacts(const std::string& dir) override { device_.write_artifacts(dir); }
  std::string config_json() override { return sim::to_json(device_.config()); }
  void set_trace_level(trace::TraceLevel level) override { device_.set_trace_level(level); }
  void trace_host_call(trace::HostCall call) override { device_.trace_host_call(std::move(call)); }

  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    {
      std::lock_guard lock(handler_mu_);
      lost_handler_ = std::move(handler);
    }
    // The simulator tells us (on its thread, as it ends) and tells a late handler at once.
    device_.set_lost_handler([this](const std::string& why) { deliver_lost(why); });
  }

 private:
  void deliver_lost(const std::string& why) {
    std::lock_guard lock(handler_mu_);
    if (lost_handler_) lost_handler_(why);
  }

  // On the simulator thread.
  void deliver_interrupt(uint64_t mask) {
    std::lock_guard lock(handler_mu_);
    if (handler_) handler_(mask);
  }

  // Declared before device_: the device's thread uses them until the device is destroyed.
  RegisteredHostMemory host_memory_;
  std::mutex handler_mu_;
  std::function<void(uint64_t)> handler_;
  std::function<void(const std::string&)> lost_handler_;
  sim::Device device_;
};

// Registers the backend when the program starts.
const bool registered = [] {
  driver::register_backend("inprocess", [](const driver::BackendOptions& options) {
    return std::make_unique<InProcessBackend>(options);
  });
  return true;
}();

}  // namespace
}  // namespace mtia::backends
