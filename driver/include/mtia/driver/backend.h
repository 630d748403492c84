// How the driver reaches a device. Backends are chosen at run time by name: the in-process
// simulator ("inprocess", the default); others may register themselves the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mtia::driver {

// Options understood by every backend; a backend rejects what it cannot honour.
struct BackendOptions {
  std::string preset = "mtia-v2";      // chip preset name or path to a preset file
  std::vector<std::string> overrides;  // "key=value" preset overrides, applied in order
  bool timing = true;                  // false: functional only, simulated time stays 0
};

class Backend {
 public:
  virtual ~Backend() = default;

  // BAR0 registers (isa/registers.h). Errors throw std::runtime_error with the reason.
  virtual uint64_t read_register(uint64_t offset) = 0;
  virtual void write_register(uint64_t offset, uint64_t value) = 0;  // posted, in order

  // The BAR memory window onto device memory. Throws std::out_of_range outside it.
  virtual void read_memory(uint64_t device_addr, void* dst, uint64_t bytes) = 0;
  virtual void write_memory(uint64_t device_addr, const void* src, uint64_t bytes) = 0;

  // Makes [ptr, ptr + bytes) reachable by device DMA; returns its host bus address.
  virtual uint64_t map_host(void* ptr, uint64_t bytes) = 0;
  virtual void unmap_host(uint64_t bus_addr) = 0;

  // Called from the backend's own thread on each interrupt; must not block.
  virtual void set_interrupt_handler(std::function<void(uint64_t queue_mask)> handler) = 0;

  // Simulated time now, picoseconds (for placing host events on the device timeline).
  virtual uint64_t now_ps() = 0;
  // Writes the device's trace, statistics and effective configuration into `dir`.
  virtual void write_artifacts(const std::string& dir) = 0;
  // The effective device configuration as JSON text.
  virtual std::string config_json() = 0;
};

using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;

// Registers a backend under `name` (a static registrar in the backend's library does this).
void register_backend(const std::string& name, BackendFactory factory);
// Creates the named backend; throws std::invalid_argument naming the known ones if unknown.
std::unique_ptr<Backend> create_backend(const std::string& name, const BackendOptions& options);
std::vector<std::string> backend_names();

}  // namespace mtia::driver
