#include "allocator.h"
#include "log.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

#include "runtime.h"

namespace mtia::torch_backend {

namespace {
constexpr uint64_t kGranule = 512;
}

DeviceAllocator& DeviceAllocator::instance() {
  static DeviceAllocator* a = new DeviceAllocator();  // never destroyed: tensors may outlive it
  return *a;
}

uint64_t DeviceAllocator::round_size(uint64_t bytes) {
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

c10::DataPtr DeviceAllocator::allocate(size_t bytes) {
  const c10::Device device(kDeviceType, 0);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_block, device);
  Runtime& rt = Runtime::get();
  const uint64_t size = round_size(bytes);
  const uint32_t stream = current_stream().id;
  auto* self = this;

  std::unique_lock lock(mu_);
  // Best fit among this stream's cached blocks, if it wastes at most half of the block.
  auto& free_list = cache_[stream];
  if (auto it = free_list.lower_bound(size); it != free_list.end() && it->first <= 2 * size) {
    Block* b = it->second;
    free_list.erase(it);
    b->requested = bytes;
    stats_.cached_bytes -= b->size;
    stats_.cached_blocks -= 1;
    stats_.allocated_bytes += b->size;
    stats_.requested_bytes += bytes;
    stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.allocated_bytes);
    stats_.allocations += 1;
    stats_.total_allocated_bytes += b->size;
    stats_.cache_hits += 1;
    stats_.live_blocks += 1;
    return c10::DataPtr(data_pointer(mtia::DevicePtr(b->address)), b, &delete_block, device);
  }

  mtia::DevicePtr ptr;
  bool ok = false;
  for (int attempt = 0; attempt < 2 && !ok; ++attempt) {
    try {
      ptr = rt.device().malloc(size);
      ok = true;
    } catch (const mtia::Error& e) {
      if (e.kind() != mtia::ErrorKind::kOutOfMemory) rethrow(e, "allocating device memory");
      if (attempt == 0 && stats_.cached_blocks > 0) {
        // Give the cache back and try once more.
        lock.unlock();
        guarded("synchronizing before returning cached memory", [&] { rt.device().synchronize(); });
        lock.lock();
        self->release_cached_locked();
        continue;
      }
      stats_.ooms += 1;
      const mtia::MemoryStats ms = rt.device().memory_stats();
      TORCH_CHECK_WITH(OutOfMemoryError, false,
                       "torch_mtia_emu: out of device memory: tried to "
                       "allocate ",
                       bytes, " bytes (", size, " rounded); the device has ", ms.free_bytes,
                       " bytes free (largest free range ", ms.largest_free_bytes, " bytes) of ",
                       rt.device().properties().dram_bytes, "; tensors hold ",
                       stats_.allocated_bytes, " bytes and the cache ", stats_.cached_bytes,
                       " bytes. Free tensors or call torch.mtia.empty_cache(). (", e.what(), ")");
    }
  }
  TORCH_INTERNAL_ASSERT(ptr.address() != 0, "the driver returned device address 0");
  auto* b = new Block{ptr.address(), size, bytes, stream, {}};
  stats_.allocated_bytes += size;
  stats_.requested_bytes += bytes;
  stats_.reserved_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.allocated_bytes);
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  stats_.total_allocated_bytes += size;
  stats_.allocations += 1;
  stats_.device_mallocs += 1;
  stats_.live_blocks += 1;
  return c10::DataPtr(data_pointer(ptr), b, &delete_block, device);
}

void DeviceAllocator::delete_block(void* ctx) {
  if (ctx != nullptr) instance().free_block(static_cast<Block*>(ctx));
}

void DeviceAllocator::free_block(Block* b) {
  std::vector<uint32_t> wait_for;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) {
      delete b;
      return;
    }
    wait_for.swap(b->used_on);
  }
  // A block another stream used may only be reused once that stream is past the use.
  for (uint32_t s : wait_for) {
    try {
      Runtime::get().device().synchronize(mtia::Stream{s});
    } catch (const std::exception& e) {
      // A deleter cannot throw; the stream's error stays visible to whoever synchronizes it.
      log::warn(c10::str("freeing a tensor used on stream ", s, ": ", e.what()));
    }
  }
  std::lock_guard lock(mu_);
  if (shut_down_) {
    delete b;
    return;
  }
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  stats_.cached_bytes += b->size;
  stats_.frees += 1;
  stats_.total_freed_bytes += b->size;
  stats_.live_blocks -= 1;
  stats_.cached_blocks += 1;
  cache_[b->stream].emplace(b->size, b);
}

void DeviceAllocator::release_cached_locked() {
  Runtime& rt = Runtime::get();
  for (auto& [stream, blocks] : cache_) {
    for (auto& [size, b] : blocks) {
      try {
        rt.device().free(mtia::DevicePtr(b->address));
      } catch (const mtia::Error& e) {
        log::error(c10::str("returning cached block ", reinterpret_cast<void*>(b->address),
                            " to the device: ", e.what()));
      }
      stats_.cached_bytes -= b->size;
      stats_.reserved_bytes -= b->size;
      stats_.cached_blocks -= 1;
      stats_.device_frees += 1;
      delete b;
    }
    blocks.clear();
  }
}

void DeviceAllocator::empty_cache() {
  if (!Runtime::is_initialized()) return;
  Runtime& rt = Runtime::get();
  guarded("synchronizing before empty_cache", [&] { rt.device().synchronize(); });
  std::lock_guard lock(mu_);
  release_cached_locked();
}

AllocatorStats DeviceAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void DeviceAllocator::record_stream(const void* context, mtia::Stream stream) {
  // The DataPtr context is the Block (callers pass
  // storage.data_ptr().get_context()).
  auto* b = static_cast<Block*>(const_cast<void*>(context));
  if (b == nullptr) return;
  std::lock_guard lock(mu_);
  if (stream.id == b->stream) return;
  if (std::find(b->used_on.begin(), b->used_on.end(), stream.id) == b->used_on.end()) {
    b->used_on.push_back(stream.id);
  }
}

void DeviceAllocator::shutdown() {
  std::lock_guard lock(mu_);
  for (auto& [stream, blocks] : cache_) {
    for (auto& [size, b] : blocks) delete b;
    blocks.clear();
  }
  stats_.cached_bytes = 0;
  stats_.cached_blocks = 0;
  shut_down_ = true;
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  auto& dev = Runtime::get().device();
  guarded("copying device memory", [&] {
    dev.copy_async(device_ptr(dest), mtia::Layout::contiguous({int64_t(count)}, 1), device_ptr(src),
                   mtia::Layout::contiguous({int64_t(count)}, 1), current_stream());
  });
}

bool DeviceAllocator::initialized() {
  return Runtime::is_initialized();
}

void DeviceAllocator::emptyCache(c10::MempoolId_t) {
  empty_cache();
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  record_stream(ptr.get_context(), mtia::Stream{static_cast<uint32_t>(stream.id())});
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex) {
  using c10::CachingDeviceAllocator::StatType;
  const AllocatorStats s = stats();
  c10::CachingDeviceAllocator::DeviceStats d;
  const auto agg = [](auto& array) -> auto& {
    return array[static_cast<size_t>(StatType::AGGREGATE)];
  };
  agg(d.allocated_bytes).current = int64_t(s.allocated_bytes);
  agg(d.allocated_bytes).peak = int64_t(s.peak_bytes);
  agg(d.allocated_bytes).allocated = int64_t(s.total_allocated_bytes);
  agg(d.allocated_bytes).freed = int64_t(s.total_freed_bytes);
  agg(d.active_bytes) = agg(d.allocated_bytes);
  agg(d.reserved_bytes).current = int64_t(s.reserved_bytes);
  agg(d.reserved_bytes).peak = int64_t(s.peak_reserved_bytes);
  agg(d.requested_bytes).current = int64_t(s.requested_bytes);
  agg(d.allocation).current = int64_t(s.live_blocks);
  agg(d.allocation).allocated = int64_t(s.allocations);
  agg(d.allocation).freed = int64_t(s.frees);
  agg(d.active) = agg(d.allocation);
  agg(d.segment).current = int64_t(s.live_blocks + s.cached_blocks);
  agg(d.segment).allocated = int64_t(s.device_mallocs);
  agg(d.segment).freed = int64_t(s.device_frees);
  d.num_ooms = int64_t(s.ooms);
  d.num_device_alloc = int64_t(s.device_mallocs);
  d.num_device_free = int64_t(s.device_frees);
  return d;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex) {
  std::lock_guard lock(mu_);
  stats_.allocations = stats_.frees = stats_.cache_hits = 0;
  stats_.device_mallocs = stats_.device_frees = stats_.ooms = 0;
  stats_.total_allocated_bytes = stats_.total_freed_bytes = 0;
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex) {
  reset_peak();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex) {
  auto& dev = Runtime::get().device();
  const mtia::MemoryStats m =
      guarded("reading memory statistics", [&] { return dev.memory_stats(); });
  return {size_t(m.free_bytes), size_t(dev.properties().dram_bytes)};
}

// --- pinned host memory ----------------------------------------------------------------

PinnedAllocator& PinnedAllocator::instance() {
  static PinnedAllocator* a = new PinnedAllocator();
  return *a;
}

c10::DataPtr PinnedAllocator::allocate(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_pinned, cpu);
  void* p = guarded("allocating pinned host memory",
                    [&] { return Runtime::get().device().host_alloc(bytes); });
  return c10::DataPtr(p, p, &delete_pinned, cpu);
}

void PinnedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count > 0) std::memcpy(dest, src, count);
}

void PinnedAllocator::delete_pinned(void* ptr) {
  if (ptr == nullptr || Runtime::is_shut_down() || !Runtime::is_initialized()) return;
  try {
    Runtime::get().device().host_free(ptr);
  } catch (const std::exception& e) {
    log::error(c10::str("freeing pinned host memory ", ptr, ": ", e.what()));
  }
}

}  // namespace mtia::torch_backend
