// AccountedAllocator: the host API's device-memory allocator, over the driver's, with its
// accounting: what malloc() handed out (sizes, peak, counts), the blocks the runtime keeps for
// itself (kernel images, fence slabs, the launch-argument arena, graph command buffers),
// recently freed addresses for messages, and the generation of each live allocation (graph
// replay).
//
// Locking: its own mutex guards the accounting. While holding it, it calls only the driver's
// allocator (which has its own lock) and never the rest of the runtime, so callers may hold
// Device::Impl::mu when they call it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "mtia/copy_plan.h"
#include "mtia/device_ptr.h"
#include "mtia/driver/allocator.h"
#include "mtia/memory_stats.h"

namespace mtia {

class AccountedAllocator {
 public:
  explicit AccountedAllocator(driver::Allocator& allocator) : allocator_(allocator) {}
  AccountedAllocator(const AccountedAllocator&) = delete;
  AccountedAllocator& operator=(const AccountedAllocator&) = delete;

  driver::Allocator& allocator() { return allocator_; }

  // malloc(bytes > 0): a new user allocation. Throws kOutOfMemory (or the allocator's error)
  // naming the request.
  uint64_t allocate(uint64_t bytes);
  // free(addr): throws kInvalidPointer for a runtime block, an unknown or a freed address.
  void free(uint64_t addr);

  // A user allocation of `bytes` becomes the runtime's (a kernel module's image): it leaves
  // malloc()'s counts and user calls may no longer address it.
  void make_runtime(uint64_t addr, uint64_t bytes);
  // A block the runtime took from the allocator itself, and its return to the books (the
  // caller frees the block).
  void add_runtime_block(uint64_t addr, uint64_t bytes);
  void remove_runtime_block(uint64_t addr, uint64_t bytes);

  // Device side of a transfer: checks that [base + span) lies in one live user allocation
  // and is aligned to the element size; throws kInvalidPointer / kInvalidArgument saying why.
  void check_span(DevicePtr base, const ByteRange& span, size_t elem_size, const char* side) const;

  // The live malloc() allocation holding `addr` and its generation, if there is one.
  struct Use {
    uint64_t address = 0;
    uint64_t generation = 0;
  };
  std::optional<Use> find_use(uint64_t addr) const;
  // True while the allocation at `address` is the one numbered `generation` (not freed since,
  // even if another allocation now has its address).
  bool is_live(uint64_t address, uint64_t generation) const;

  // Fills the device-memory fields of `s` (everything but the host bytes).
  void stats(MemoryStats& s) const;
  void reset_peak();

 private:
  driver::Allocator& allocator_;
  mutable std::mutex mu_;
  uint64_t allocated_ = 0, peak_ = 0, live_allocations_ = 0, total_allocations_ = 0;
  std::set<uint64_t> runtime_blocks_;  // allocator blocks the runtime owns
  uint64_t runtime_bytes_ = 0;
  std::map<uint64_t, uint64_t> recently_freed_;  // address -> bytes, for messages only
  std::deque<uint64_t> freed_order_;
  // Live malloc() allocations, numbered: a graph that captured one finds out at replay
  // whether it was freed (even if another allocation now has its address).
  std::map<uint64_t, uint64_t> generation_;
  uint64_t next_generation_ = 1;
};

}  // namespace mtia
