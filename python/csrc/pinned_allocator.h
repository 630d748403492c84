// Pinned host memory for the MTIA devices (Tensor.pin_memory()).
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace mtia::torch_backend {

// Pinned host memory (Device::host_alloc of the current device): CPU tensors the DMA engines of
// that device read and write in place, which makes non_blocking copies truly asynchronous
// (other devices copy them as pageable memory). It is PyTorch's host allocator for MTIA
// (at::getHostAllocator, Tensor.pin_memory(), torch.accelerator.empty_host_cache()).
//
// Caching. Sizes are rounded up to a power of two (at least 4 KiB). A freed block goes back to
// its device's cache, from which the next allocation of a size class it fits is served, once
// the asynchronous copies that used it are done: record_event() (called by the copies)
// records an event on the copy's stream, and a freed block with unfinished events waits until
// they complete. empty_cache() returns every cached block that no copy uses any more to the
// device (host_free).
class PinnedAllocator final : public at::HostAllocator {
 public:
  static PinnedAllocator& instance();
  c10::DataPtr allocate(size_t bytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // Marks the block of `ctx` (a pinned DataPtr's context) as used by work queued on `stream`
  // (a stream of any MTIA device): the block is not reused before that work is done. False
  // when `ctx` is not one of this allocator's blocks (then nothing is recorded).
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override;
  void empty_cache() override;
  at::HostStats get_stats() override;
  void reset_accumulated_stats() override;
  void reset_peak_stats() override;

 private:
  struct Block {
    void* ptr = nullptr;
    size_t size = 0;              // rounded
    c10::DeviceIndex device = 0;  // whose host_alloc made it
    bool allocated = false;       // held by a tensor
    // Events recorded on streams that used it (record_event): (device, event id).
    std::vector<std::pair<c10::DeviceIndex, uint32_t>> events;
  };
  static void delete_pinned(void* ctx);
  void free_block(Block* b);
  // Moves the freed blocks whose events have completed into the cache. Caller holds mu_.
  void process_events_locked();
  // Forgets cached blocks and returns them for host_free outside the lock. Caller holds mu_.
  std::vector<Block*> take_cached_locked();
  void release(const std::vector<Block*>& blocks);

  std::mutex mu_;
  std::map<void*, Block*> blocks_;  // every block held, by address
  // Free blocks ready for reuse, per device, by size.
  std::map<c10::DeviceIndex, std::multimap<size_t, Block*>> cache_;
  std::vector<Block*> pending_;  // freed, waiting for their events
  at::HostStats stats_;
};

}  // namespace mtia::torch_backend
