// Host memory for the tests: one buffer registered at a fixed bus address.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "mtia/sim/host_memory.h"

namespace test {

class HostBuffer : public mtia::sim::HostMemory {
 public:
  static constexpr uint64_t kBusBase = 0x7000'0000'0000;

  explicit HostBuffer(uint64_t bytes) : bytes_(bytes) {}

  uint8_t* translate(uint64_t bus_addr, uint64_t bytes) override {
    if (bus_addr < kBusBase) return nullptr;
    const uint64_t off = bus_addr - kBusBase;
    if (off >= bytes_.size() || bytes > bytes_.size() - off) return nullptr;
    return bytes_.data() + off;
  }

  uint8_t* data() { return bytes_.data(); }
  uint64_t size() const { return bytes_.size(); }
  // Shrinks the registered range (as if the driver unregistered the tail).
  void truncate(uint64_t bytes) { bytes_.resize(bytes); }

 private:
  std::vector<uint8_t> bytes_;
};

}  // namespace test
