// Device memory for tensors: a caching allocator over mtia::Device::malloc/free, and pinned
// host memory for fast and asynchronous copies.
//
// Caching. A freed tensor's block goes back to a free list of the stream it was allocated on
// (work on one stream runs in order, so the next allocation on that stream may reuse it at
// once, even while earlier kernels that used it are still queued). An allocation takes the
// smallest cached block of its stream that fits and is at most twice the rounded request;
// only when none fits does it call the driver. empty_cache() synchronizes and returns every
// cached block to the driver; an allocation the driver cannot satisfy does the same and
// retries once before reporting out of memory. A block used on another stream
// (record_stream) is only cached after that stream has finished its queued work.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "mtia/stream.h"

namespace mtia::torch_backend {

// Bytes, counted by the caching allocator.
struct AllocatorStats {
  uint64_t allocated_bytes = 0;      // in blocks that tensors hold (rounded sizes)
  uint64_t requested_bytes = 0;      // what those tensors asked for
  uint64_t peak_bytes = 0;           // highest allocated_bytes since start or reset_peak()
  uint64_t cached_bytes = 0;         // in free blocks kept for reuse
  uint64_t reserved_bytes = 0;       // allocated + cached: what the allocator holds from the driver
  uint64_t peak_reserved_bytes = 0;  // highest reserved_bytes since start or reset_peak()
  uint64_t total_allocated_bytes = 0;  // sum of every allocation's rounded size
  uint64_t total_freed_bytes = 0;      // sum of every freed block's rounded size
  uint64_t allocations = 0;            // allocate() calls that returned memory
  uint64_t frees = 0;                  // blocks given back by tensors
  uint64_t cache_hits = 0;             // allocations served from the cache, no driver call
  uint64_t device_mallocs = 0;         // driver allocations (Device::malloc)
  uint64_t device_frees = 0;           // driver frees (Device::free)
  uint64_t ooms = 0;                   // allocations that failed for want of memory
  uint64_t live_blocks = 0;            // blocks tensors hold now
  uint64_t cached_blocks = 0;          // free blocks in the cache now
};

// PyTorch's generic device-allocator interface (c10::DeviceAllocator) is what
// torch.accelerator's memory functions call; torch.mtia's go through the hooks (hooks.cpp).
class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  static DeviceAllocator& instance();

  c10::DataPtr allocate(size_t bytes) override;
  // Device-to-device copy of `count` bytes, in order on the current stream.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator, for device index 0 (the only one).
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Synchronizes the device and returns every cached block to the driver.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  // Marks the block whose DataPtr context is `context` as used by `stream`
  // (Tensor.record_stream).
  void record_stream(const void* context, mtia::Stream stream);
  // The device is closing: drop the cache without driver calls; blocks tensors still hold
  // become orphans that are forgotten when freed.
  void shutdown();

  // Rounds a request to the allocator's granule (512 bytes).
  static uint64_t round_size(uint64_t bytes);

 private:
  struct Block {
    uint64_t address = 0;
    uint64_t size = 0;              // rounded
    uint64_t requested = 0;         // as asked, for the stats
    uint32_t stream = 0;            // stream the block was allocated on
    std::vector<uint32_t> used_on;  // other streams that used it (record_stream)
  };
  static void delete_block(void* ctx);
  void free_block(Block* block);
  // Frees every cached block through the driver. Caller holds mu_.
  void release_cached_locked();

  mutable std::mutex mu_;
  // Free blocks per stream, by size.
  mutable std::map<uint32_t, std::multimap<uint64_t, Block*>> cache_;
  mutable AllocatorStats stats_;
  bool shut_down_ = false;
};

// Pinned host memory (Device::host_alloc): CPU tensors the DMA engines read and write in
// place, which makes non_blocking copies truly asynchronous.
class PinnedAllocator final : public c10::Allocator {
 public:
  static PinnedAllocator& instance();
  c10::DataPtr allocate(size_t bytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

 private:
  static void delete_pinned(void* ptr);
};

}  // namespace mtia::torch_backend
