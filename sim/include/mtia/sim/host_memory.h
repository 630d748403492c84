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
};

}  // namespace mtia::sim
