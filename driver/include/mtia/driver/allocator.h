// Device memory allocator: first fit over an address range, coalescing free ranges.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>

#include "mtia/isa/result.h"

namespace mtia::driver {

struct AllocatorStats {
  uint64_t allocated_bytes = 0;       // bytes handed out in live allocations (as requested)
  uint64_t reserved_bytes = 0;        // bytes taken from the heap incl. alignment padding
  uint64_t peak_allocated_bytes = 0;  // highest allocated_bytes since the last reset_peak
  uint64_t allocations = 0;           // live allocations
  uint64_t total_allocations = 0;     // allocations ever made
  uint64_t largest_free_bytes = 0;    // largest free range
  uint64_t free_bytes = 0;            // sum of free ranges
};

// A live allocation: [address, address + bytes) as requested by the user.
struct Allocation {
  uint64_t address = 0;
  uint64_t bytes = 0;
};

class Allocator {
 public:
  // Manages [base, base + bytes). alignment: a power of two, the default for allocate().
  // kInvalidArgument for an alignment that is not a power of two or a range past 2^64.
  static isa::Result<std::unique_ptr<Allocator>> create(uint64_t base, uint64_t bytes,
                                                        uint64_t alignment = 256);

  // kOutOfMemory naming the request and the free and largest free bytes; kInvalidArgument
  // for zero bytes or a bad alignment.
  isa::Result<uint64_t> allocate(uint64_t bytes, uint64_t alignment = 0);
  // kInvalidPointer if `address` is not the start of a live allocation (says whether it was
  // freed already, lies inside another allocation, or was never allocated).
  isa::Status free(uint64_t address);

  // The live allocation containing [address, address + bytes), if any.
  std::optional<Allocation> find(uint64_t address, uint64_t bytes = 1) const;

  AllocatorStats stats() const;
  void reset_peak();

  // Told of every allocation (live: true, its requested bytes) and free (live: false), in the
  // order they happen, under the allocator's lock: it must not call back into the allocator.
  // The driver tells the device's sanitizer this way (docs/sanitizer.md). Set it before the
  // first allocation.
  using Observer = std::function<void(uint64_t address, uint64_t bytes, bool live)>;
  void set_observer(Observer observer);

 private:
  Allocator(uint64_t base, uint64_t bytes, uint64_t alignment);

  struct Block {
    uint64_t reserved_start;  // start of the range taken from the heap
    uint64_t reserved_bytes;  // including alignment padding
    uint64_t bytes;           // as requested
  };
  mutable std::mutex mu_;
  uint64_t size_, alignment_;
  std::map<uint64_t, uint64_t> free_;   // start -> bytes
  std::map<uint64_t, Block> live_;      // user address -> block
  std::map<uint64_t, uint64_t> freed_;  // recently freed user addresses -> bytes (for messages)
  AllocatorStats stats_;
  Observer observer_;
};

}  // namespace mtia::driver
