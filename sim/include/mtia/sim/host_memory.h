// Host memory as the device sees it across PCIe: only ranges the driver registered.
#pragma once

#include <cstdint>

namespace mtia::sim {

class HostMemory {
 public:
  virtual ~HostMemory() = default;
  // A host pointer for [bus_addr, bus_addr + bytes) if that whole range lies in one
  // registered region, else nullptr (the DMA then fails with kHostAddressFault).
  virtual uint8_t* translate(uint64_t bus_addr, uint64_t bytes) = 0;
  // The same, for a queue in host `context` (isa/access_scope.h): context 0 reaches every
  // registered region, context c > 0 only the regions registered for c. Host memory that keeps
  // no contexts has only context 0's regions.
  virtual uint8_t* translate_in(uint32_t context, uint64_t bus_addr, uint64_t bytes) {
    return context == 0 ? translate(bus_addr, bytes) : nullptr;
  }
};

}  // namespace mtia::sim
