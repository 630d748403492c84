// What one queue's work may reach: a context's share of the device (docs/device-server.md,
// "Several clients"). The firmware keeps one per queue (isa/registers.h: kQueueContext,
// kQueueWindowBase, kQueueWindowBytes) and hands it with every DMA job and launch it starts.
#pragma once

#include <cstdint>

namespace mtia::isa {

struct AccessScope {
  // Host memory: a queue in context c > 0 reaches only the host ranges mapped for context c;
  // context 0 (the whole device, the in-process driver's) reaches every mapped range.
  uint32_t context = 0;
  // Device memory: [window_base, window_base + window_bytes). 0 bytes: all of device memory.
  uint64_t window_base = 0;
  uint64_t window_bytes = 0;

  bool restricted() const { return window_bytes != 0; }

  // Whether device range [addr, addr + bytes) lies in the window (always, unrestricted).
  // Written so that no sum can overflow.
  bool covers(uint64_t addr, uint64_t bytes) const {
    if (!restricted()) return true;
    if (addr < window_base) return false;
    const uint64_t offset = addr - window_base;
    return offset < window_bytes && bytes <= window_bytes - offset;
  }

  // Whether a host range mapped for `mapped_context` is reachable.
  bool reaches_host(uint32_t mapped_context) const {
    return context == 0 || context == mapped_context;
  }
};

}  // namespace mtia::isa
