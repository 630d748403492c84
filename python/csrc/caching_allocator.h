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
//
// Under the device sanitizer's memcheck or initcheck (docs/sanitizer.md) the allocator caches
// nothing, so that the checks see tensors, not blocks: each tensor is its own driver
// allocation of exactly the bytes it asked for, and its free waits for the streams that used
// it and returns the memory to the driver. Graph pools keep their blocks as before (a graph's
// addresses must stay reserved for its replays).
//
// Accounting and history. The allocator keeps CUDA's caching-allocator statistics
// (AllocatorStats) and, when asked (record_history), the stack that allocated each block and a
// history of its actions, which hooks.cpp turns into torch.cuda.memory._snapshot()'s
// structure. Out-of-memory observers are called before an out-of-memory error is raised.
#pragma once

#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "devices.h"
#include "mtia/stream.h"

namespace mtia::torch_backend {

// One quantity as PyTorch's CUDA caching allocator reports it (memory_stats()'s
// "<name>.all.<field>" keys).
struct Stat {
  int64_t current = 0;    // now
  int64_t peak = 0;       // highest `current` since start or the last reset_peak()
  int64_t allocated = 0;  // sum of increases since start or the last reset_accumulated()
  int64_t freed = 0;      // sum of decreases since start or the last reset_accumulated()

  void increase(int64_t n);
  void decrease(int64_t n);
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

// What the caching allocator counts. Every block is one driver allocation (a "segment" in
// CUDA's terms: the allocator never splits one), so segment counts are block counts.
// A block is allocated from allocate() to its tensor's free; it stays active after that until
// the streams that used it (record_stream) are past the use, and then it is cached (inactive).
struct AllocatorStats {
  Stat allocated_bytes;            // rounded sizes of the blocks tensors hold
  Stat requested_bytes;            // what those tensors asked for
  Stat active_bytes;               // allocated plus freed blocks other streams may still use
  Stat reserved_bytes;             // held from the driver: active plus cached
  Stat allocation;                 // blocks tensors hold
  Stat active;                     // active blocks
  Stat segment;                    // driver allocations held
  uint64_t cached_bytes = 0;       // in inactive blocks kept for reuse
  uint64_t cached_blocks = 0;      // inactive blocks
  uint64_t cache_hits = 0;         // allocations served from the cache, no driver call
  uint64_t num_alloc_retries = 0;  // driver allocations retried after returning the cache
  uint64_t num_ooms = 0;           // allocations that failed for want of memory
};

// What record_memory_history() asks for.
enum class HistoryMode {
  kOff,    // nothing recorded
  kState,  // each block remembers the stack that allocated it (snapshot()'s block frames)
  kAll,    // that, and the history of allocator actions (snapshot()'s device_traces)
};
// Which stacks a recorded action keeps.
struct HistoryStacks {
  bool python = true;  // Python (and TorchScript) frames
  bool cpp = false;    // C++ frames (symbolized when a snapshot is taken: slow)
};

// One recorded allocator action (CUDA's TraceEntry).
struct TraceEntry {
  enum class Action {
    kAlloc,
    kFreeRequested,
    kFreeCompleted,
    kSegmentAlloc,
    kSegmentFree,
    kOom,
    kSnapshot
  };
  Action action = Action::kAlloc;
  uint64_t address = 0;      // block address (0 for kOom and kSnapshot)
  uint64_t size = 0;         // bytes: the rounded block size; for kOom the rounded request
  uint32_t stream = 0;       // stream of the block or request
  int64_t time_us = 0;       // wall clock, microseconds since the Unix epoch
  uint64_t device_free = 0;  // kOom only: bytes the device had free
  std::shared_ptr<c10::GatheredContext> stack;  // may be null (not recorded)
};
const char* action_name(TraceEntry::Action action);

// One block as snapshot() shows it.
struct BlockInfo {
  enum class State { kAllocated, kAwaitingFree, kInactive };
  uint64_t address = 0;
  uint64_t size = 0;       // rounded
  uint64_t requested = 0;  // as asked (0 when inactive)
  uint32_t stream = 0;
  State state = State::kInactive;
  std::shared_ptr<c10::GatheredContext> stack;          // of the allocation holding it
  std::shared_ptr<c10::GatheredContext> segment_stack;  // of the allocation that made it
  c10::MempoolId_t pool{0, 0};                          // its graph pool, or {0, 0}
};

struct AllocatorSnapshot {
  std::vector<BlockInfo> blocks;    // by address
  std::vector<TraceEntry> history;  // oldest first
};

// Called on every out-of-memory error, before it is raised: (device index, requested bytes,
// device memory in bytes, bytes free on the device).
using OutOfMemoryObserver = std::function<void(int64_t, uint64_t, uint64_t, uint64_t)>;

// One device's caching allocator: its blocks, cache, graph pools, statistics and history.
// Never destroyed (tensors may outlive the device).
class CachingAllocator {
 public:
  explicit CachingAllocator(c10::DeviceIndex index) : index_(index) {}
  c10::DeviceIndex index() const { return index_; }

  c10::DataPtr allocate(size_t bytes);

  // Synchronizes the device and returns every cached block to the driver.
  void empty_cache();
  AllocatorStats stats() const;
  void reset_peak();
  void reset_accumulated();

  // Starts, changes or stops (kOff) recording. Recording again starts a new history;
  // stopping keeps the one recorded for snapshots. max_entries bounds the history (the oldest
  // go first); 0: no bound.
  void record_history(HistoryMode mode, HistoryStacks stacks, size_t max_entries);
  // The blocks held now and the recorded history (a kSnapshot action is recorded first).
  AllocatorSnapshot snapshot();

  // Graph memory pools. While `stream` captures a graph into `pool`, its allocations come
  // from, and its frees go back to, that pool's own blocks, never the general cache: the
  // addresses a graph was captured with stay reserved for its replays (and for other graphs
  // that share the pool). Blocks of the pool that tensors still hold go back to the pool when
  // freed. release_pool() (the pool's last graph is gone) returns its free blocks to the
  // driver; blocks freed later go to the general cache.
  void begin_pool_capture(uint32_t stream, c10::MempoolId_t pool);
  void end_pool_capture();
  void release_pool(c10::MempoolId_t pool);
  // Which use of the block at `address` is current: a number that changes each time the block
  // is handed to a tensor; 0 if no tensor holds it now. A graph pool's blocks answer their
  // pool's id instead (they stay the graph's whoever holds them). -1: no block there.
  struct BlockUse {
    int64_t epoch = -1;
    c10::MempoolId_t pool{0, 0};
    bool operator==(const BlockUse&) const = default;
  };
  BlockUse block_use(uint64_t address) const;
  // Marks the block whose DataPtr context is `context` as used by `stream` (of any MTIA device;
  // Tensor.record_stream). Contexts that are not this backend's blocks are ignored.
  static void record_stream(const void* context, const c10::Stream& stream);
  // The device is closing: drop the cache without driver calls; blocks tensors still hold
  // become orphans that are forgotten when freed.
  void shutdown();

  // True when the device runs memcheck or initcheck: no caching (see the top of this file).
  bool uncached() const { return uncached_.load(std::memory_order_relaxed); }

  // Rounds a request to the allocator's granule (512 bytes).
  static uint64_t round_size(uint64_t bytes);
  static void delete_block(void* ctx);

 private:
  struct Block {
    uint64_t address = 0;
    uint64_t size = 0;       // rounded
    uint64_t requested = 0;  // as asked, for the stats
    uint32_t stream = 0;     // stream the block was allocated on
    // Other streams that used it (record_stream): (device, stream id).
    std::vector<std::pair<c10::DeviceIndex, uint32_t>> used_on;
    BlockInfo::State state = BlockInfo::State::kAllocated;
    std::shared_ptr<c10::GatheredContext> stack;          // recorded at allocation
    std::shared_ptr<c10::GatheredContext> segment_stack;  // recorded at the driver call
    c10::MempoolId_t pool{0, 0};  // a graph pool's block, or {0, 0}: the general cache's
    int64_t epoch = 0;            // times handed to a tensor (block_use)
    CachingAllocator* owner = nullptr;
  };
  void free_block(Block* block);
  // The end of a free: the block becomes inactive and goes to its pool or its stream's cache.
  // Caller holds mu_.
  // With `release`, a block that would go to the general cache goes back to the driver.
  void finish_free_locked(Block* b, const std::shared_ptr<c10::GatheredContext>& stack,
                          bool release = false);
  // Waits, without taking its pending error, for the work queued so far on `stream`; false
  // when it cannot (the stream captures a graph).
  bool wait_for_stream(uint32_t stream);
  // Frees every cached block through the driver. Caller holds mu_.
  void release_cached_locked();
  // Gives a free block (cached, or of a graph pool) back to the driver and forgets it: the
  // statistics and the memory history record a segment free. Caller holds mu_.
  void free_segment_locked(Block* b, const char* what);
  // The calling thread's stack if recording asks for one (null otherwise). Takes the GIL to
  // read Python frames, so never called while holding mu_.
  std::shared_ptr<c10::GatheredContext> gather_stack() const;
  // Appends to the history if mode_ is kAll. Caller holds mu_.
  void record_locked(TraceEntry::Action action, uint64_t address, uint64_t size, uint32_t stream,
                     const std::shared_ptr<c10::GatheredContext>& stack, uint64_t device_free = 0);

  const c10::DeviceIndex index_;
  mutable std::mutex mu_;
  // Free blocks per stream, by size.
  mutable std::map<uint32_t, std::multimap<uint64_t, Block*>> cache_;
  // Free blocks of each graph pool, by size.
  std::map<c10::MempoolId_t, std::multimap<uint64_t, Block*>> pools_;
  // The stream capturing into a pool, if any.
  std::optional<std::pair<uint32_t, c10::MempoolId_t>> capture_;
  // Blocks freed during the capture while another stream of it had used them (record_stream):
  // free once the capture ends (end_pool_capture), with the stack of their free.
  std::vector<std::pair<Block*, std::shared_ptr<c10::GatheredContext>>> deferred_frees_;
  // Every block held from the driver, by address.
  std::map<uint64_t, Block*> blocks_;
  mutable AllocatorStats stats_;
  bool shut_down_ = false;
  // Set at the first allocation, when the device is open (uncached()).
  std::atomic<bool> uncached_{false};
  // Recording (record_history). mode_ and stacks_ are read without mu_ by gather_stack.
  std::atomic<HistoryMode> mode_{HistoryMode::kOff};
  std::atomic<bool> stack_python_{true};
  std::atomic<bool> stack_cpp_{false};
  size_t max_entries_ = 0;
  std::deque<TraceEntry> history_;
};

// The MTIA allocator PyTorch calls: one CachingAllocator per device; allocate() serves the
// current device (ops run with their tensors' device current). Also PyTorch's generic device
// allocator interface (c10::DeviceAllocator), which torch.accelerator's memory functions call;
// torch.mtia's go through the hooks (hooks.cpp).
class DeviceAllocator final : public c10::DeviceAllocator {
 public:
  static DeviceAllocator& instance();
  // Device `index`'s allocator (made on first use; the device itself opens on its first
  // allocation).
  CachingAllocator& device(c10::DeviceIndex index);
  // The current device's.
  CachingAllocator& current();

  c10::DataPtr allocate(size_t bytes) override;
  // Device-to-device copy of `count` bytes, in order on the current stream.
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Every device's cache returned to the driver (each device synchronized first).
  void empty_cache();
  // Recording applies to every device, also to those used later.
  void record_history(HistoryMode mode, HistoryStacks stacks, size_t max_entries);
  void attach_oom_observer(OutOfMemoryObserver observer);
  std::vector<OutOfMemoryObserver> oom_observers() const;
  // Marks the block of `context` as used by `stream` (Tensor.record_stream).
  void record_stream(const void* context, const c10::Stream& stream) {
    CachingAllocator::record_stream(context, stream);
  }
  // The allocators made so far, by device index (null where none was made).
  std::vector<CachingAllocator*> devices() const;
  // Every device is closing (CachingAllocator::shutdown).
  void shutdown();

 private:
  mutable std::mutex mu_;  // making allocators, the recording settings, observers
  std::array<std::atomic<CachingAllocator*>, kMaxDevices> devices_{};
  HistoryMode mode_ = HistoryMode::kOff;
  HistoryStacks stacks_;
  size_t max_entries_ = 0;
  std::vector<OutOfMemoryObserver> oom_observers_;
};

}  // namespace mtia::torch_backend
