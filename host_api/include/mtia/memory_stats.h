// Device memory statistics, as reported by Device::memory_stats().
#pragma once

#include <cstdint>

namespace mtia {

struct MemoryStats {
  uint64_t allocated_bytes = 0;       // bytes in live malloc() allocations, as requested
  uint64_t reserved_bytes = 0;        // device bytes those allocations take, incl. alignment
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes since open or reset_peak
  uint64_t allocations = 0;           // live malloc() allocations
  uint64_t total_allocations = 0;     // malloc() calls that succeeded since open
  uint64_t free_bytes = 0;            // device bytes still available to malloc()
  uint64_t largest_free_bytes = 0;    // largest single allocation malloc() can satisfy now
  uint64_t runtime_bytes = 0;         // device bytes the runtime itself holds (event fences)
  uint64_t pinned_host_bytes = 0;     // host bytes pinned by host_alloc() and host_register()
  uint64_t staging_host_bytes = 0;    // host bytes in idle staging buffers the runtime keeps
                                      // for async copies from pageable memory (at most 256 MiB)
};

}  // namespace mtia
