#include "caching_allocator.h"
#include "torch_logger.h"

#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "devices.h"

namespace mtia::torch_backend {

namespace {
constexpr uint64_t kGranule = 512;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

void Stat::increase(int64_t n) {
  current += n;
  peak = std::max(peak, current);
  allocated += n;
}

void Stat::decrease(int64_t n) {
  current -= n;
  freed += n;
}

const char* action_name(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::Action::kAlloc:
      return "alloc";
    case TraceEntry::Action::kFreeRequested:
      return "free_requested";
    case TraceEntry::Action::kFreeCompleted:
      return "free_completed";
    case TraceEntry::Action::kSegmentAlloc:
      return "segment_alloc";
    case TraceEntry::Action::kSegmentFree:
      return "segment_free";
    case TraceEntry::Action::kOom:
      return "oom";
    case TraceEntry::Action::kSnapshot:
      return "snapshot";
  }
  return "unknown";
}

uint64_t CachingAllocator::round_size(uint64_t bytes) {
  return (bytes + kGranule - 1) / kGranule * kGranule;
}

std::shared_ptr<c10::GatheredContext> CachingAllocator::gather_stack() const {
  if (mode_.load() == HistoryMode::kOff) return nullptr;
  const bool python = stack_python_.load();
  return torch::CapturedTraceback::gather(python, python, stack_cpp_.load());
}

void CachingAllocator::record_locked(TraceEntry::Action action, uint64_t address, uint64_t size,
                                     uint32_t stream,
                                     const std::shared_ptr<c10::GatheredContext>& stack,
                                     uint64_t device_free) {
  // torch.profiler(profile_memory=True) records each tensor's allocation and free (a no-op
  // unless this thread profiles memory).
  if (action == TraceEntry::Action::kAlloc || action == TraceEntry::Action::kFreeRequested) {
    const auto bytes = static_cast<int64_t>(size);
    c10::reportMemoryUsageToProfiler(data_pointer(mtia::DevicePtr(address)),
                                     action == TraceEntry::Action::kAlloc ? bytes : -bytes,
                                     static_cast<size_t>(stats_.allocated_bytes.current),
                                     static_cast<size_t>(stats_.reserved_bytes.current),
                                     c10::Device(kDeviceType, index_));
  }
  if (mode_.load() != HistoryMode::kAll) return;
  if (max_entries_ > 0 && history_.size() >= max_entries_) history_.pop_front();
  history_.push_back(TraceEntry{action, address, size, stream, now_us(), device_free, stack});
}

c10::DataPtr CachingAllocator::allocate(size_t bytes) {
  const c10::Device device(kDeviceType, index_);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_block, device);
  mtia::Device& dev = Runtime::get().device(index_);
  const uint64_t size = round_size(bytes);
  const uint32_t stream = current_stream(index_).id;
  const auto stack = gather_stack();
  using Action = TraceEntry::Action;
  // A side stream that joined the capture (it waited for an event recorded in it) captures
  // into the same graph, so it allocates from the graph's pool too, as CUDA's allocator does.
  const bool stream_captures = dev.is_capturing(mtia::Stream{stream});
  const std::string& checks = dev.properties().sanitize;
  const bool uncached =
      checks.find("memcheck") != std::string::npos || checks.find("initcheck") != std::string::npos;
  uncached_.store(uncached, std::memory_order_relaxed);

  std::unique_lock lock(mu_);
  // A capturing stream allocates from its graph's pool only.
  const bool to_pool = capture_.has_value() && (capture_->first == stream || stream_captures);
  const c10::MempoolId_t pool = to_pool ? capture_->second : c10::MempoolId_t{0, 0};
  // Best fit among this stream's cached blocks, if it wastes at most half of the block.
  auto& free_list = to_pool ? pools_[pool] : cache_[stream];
  auto it = free_list.lower_bound(size);
  if (to_pool) {
    // The streams of one capture run at once when it replays: a block that another of its
    // streams freed may still be in use by that stream's branch, so it is not reused here
    // (CUDA's allocator keeps pool blocks per stream too). Blocks of earlier captures are.
    const auto in_this_capture = [&](uint32_t other) {
      if (other == stream) return false;
      try {
        return dev.is_capturing(mtia::Stream{other});
      } catch (const mtia::Error&) {
        return false;  // a destroyed stream captures nothing
      }
    };
    while (it != free_list.end() && it->first <= 2 * size && in_this_capture(it->second->stream)) {
      ++it;
    }
  }
  // Uncached, only a graph pool's blocks are reused; blocks left in the general cache (freed
  // while their stream captured a graph) wait for empty_cache().
  if (uncached && !to_pool) it = free_list.end();
  if (it != free_list.end() && it->first <= 2 * size) {
    Block* b = it->second;
    free_list.erase(it);
    if (to_pool) b->stream = stream;  // the stream of its latest use, for the check above
    b->requested = bytes;
    b->state = BlockInfo::State::kAllocated;
    b->epoch += 1;
    b->stack = stack;
    stats_.cached_bytes -= b->size;
    stats_.cached_blocks -= 1;
    stats_.allocated_bytes.increase(int64_t(b->size));
    stats_.requested_bytes.increase(int64_t(bytes));
    stats_.active_bytes.increase(int64_t(b->size));
    stats_.allocation.increase(1);
    stats_.active.increase(1);
    stats_.cache_hits += 1;
    record_locked(Action::kAlloc, b->address, b->size, stream, stack);
    return c10::DataPtr(data_pointer(mtia::DevicePtr(b->address)), b, &delete_block, device);
  }

  mtia::DevicePtr ptr;
  for (int attempt = 0;; ++attempt) {
    try {
      // An uncached tensor's allocation is its own bytes, for memcheck and initcheck; a pool
      // block may be reused for any request of its rounded size.
      ptr = dev.malloc(uncached && !to_pool ? bytes : size);
      break;
    } catch (const mtia::Error& e) {
      if (e.kind() != mtia::ErrorKind::kOutOfMemory) rethrow(e, "allocating device memory");
      if (attempt == 0 && stats_.cached_blocks > 0) {
        // Give the cache back and try once more.
        stats_.num_alloc_retries += 1;
        lock.unlock();
        guarded("synchronizing before returning cached memory", [&] { dev.synchronize(); });
        lock.lock();
        release_cached_locked();
        continue;
      }
      stats_.num_ooms += 1;
      const mtia::MemoryStats ms = dev.memory_stats();
      const uint64_t total = dev.properties().dram_bytes;
      record_locked(Action::kOom, 0, size, stream, stack, ms.free_bytes);
      const std::string message =
          c10::str("torch_mtia_emu: out of device memory: tried to allocate ", bytes, " bytes (",
                   size, " rounded) on ", device, "; the device has ", ms.free_bytes,
                   " bytes free (largest free range ", ms.largest_free_bytes, " bytes) of ", total,
                   "; tensors hold ", stats_.allocated_bytes.current, " bytes and the cache ",
                   stats_.cached_bytes, " bytes. Free tensors or call torch.mtia.empty_cache(). (",
                   e.what(), ")");
      lock.unlock();
      // Observers may allocate or inspect the allocator: called without the lock.
      for (const auto& observer : DeviceAllocator::instance().oom_observers()) {
        observer(index_, bytes, total, ms.free_bytes);
      }
      TORCH_CHECK_WITH(OutOfMemoryError, false, message);
    }
  }
  TORCH_INTERNAL_ASSERT(ptr.address() != 0, "the driver returned device address 0");
  auto* b = new Block{ptr.address(), size,  bytes, stream, {},  BlockInfo::State::kAllocated,
                      stack,         stack, pool,  1,      this};
  blocks_[b->address] = b;
  stats_.reserved_bytes.increase(int64_t(size));
  stats_.segment.increase(1);
  stats_.allocated_bytes.increase(int64_t(size));
  stats_.requested_bytes.increase(int64_t(bytes));
  stats_.active_bytes.increase(int64_t(size));
  stats_.allocation.increase(1);
  stats_.active.increase(1);
  record_locked(Action::kSegmentAlloc, b->address, size, stream, stack);
  record_locked(Action::kAlloc, b->address, size, stream, stack);
  return c10::DataPtr(data_pointer(ptr), b, &delete_block, device);
}

void CachingAllocator::delete_block(void* ctx) {
  if (ctx == nullptr) return;
  Block* b = static_cast<Block*>(ctx);
  b->owner->free_block(b);
}

void CachingAllocator::free_block(Block* b) {
  using Action = TraceEntry::Action;
  const auto stack = mode_.load() == HistoryMode::kAll ? gather_stack() : nullptr;
  std::vector<std::pair<c10::DeviceIndex, uint32_t>> wait_for;
  {
    std::lock_guard lock(mu_);
    if (shut_down_) {
      delete b;
      return;
    }
    wait_for.swap(b->used_on);
    // The tensor is gone: no longer allocated, but active until the other streams are done.
    b->state = BlockInfo::State::kAwaitingFree;
    stats_.allocated_bytes.decrease(int64_t(b->size));
    stats_.requested_bytes.decrease(int64_t(b->requested));
    stats_.allocation.decrease(1);
    record_locked(Action::kFreeRequested, b->address, b->size, b->stream, stack);
  }
  // A block another stream used may only be reused once that stream is past the use. A stream
  // that captures a graph cannot be waited for (that would end its capture), and its use runs
  // only at replay: the block is freed when the capture ends instead, as CUDA's allocator does.
  for (const auto& [device, s] : wait_for) {
    bool captures = false;
    try {
      captures = device == index_ && Runtime::get().device(device).is_capturing(mtia::Stream{s});
    } catch (const std::exception&) {
      captures = false;  // a destroyed stream: nothing to wait for
    }
    if (captures) {
      std::lock_guard lock(mu_);
      if (shut_down_) {
        delete b;
        return;
      }
      deferred_frees_.emplace_back(b, stack);
      return;
    }
  }
  for (const auto& [device, s] : wait_for) {
    try {
      Runtime::get().device(device).synchronize(mtia::Stream{s});
    } catch (const std::exception& e) {
      // A deleter cannot throw; the stream's error stays visible to whoever synchronizes it.
      log::warn(c10::str("freeing a tensor used on stream ", s, " of mtia:", int(device), ": ",
                         e.what()));
    }
  }
  // Uncached (memcheck, initcheck): the block goes back to the driver once its own stream is
  // past the tensor's last use. A graph pool's block stays in its pool.
  const bool release = uncached() && b->pool == c10::MempoolId_t{0, 0} &&
                       !Runtime::is_shut_down() && wait_for_stream(b->stream);
  std::lock_guard lock(mu_);
  if (shut_down_) {
    delete b;
    return;
  }
  finish_free_locked(b, stack, release);
}

bool CachingAllocator::wait_for_stream(uint32_t stream) {
  mtia::Device& dev = Runtime::get().device(index_);
  const mtia::Stream s{stream};
  try {
    // A capturing stream cannot be waited for (its work runs at replay).
    if (dev.is_capturing(s)) return false;
  } catch (const mtia::Error&) {
    return true;  // a destroyed stream: destroy_stream waited for its work
  }
  try {
    // Not synchronize(s): that would take the stream's pending error (a kernel's fault, a
    // sanitizer finding) from whoever synchronizes next. An event's destruction waits for its
    // record and reports nothing.
    dev.destroy_event(record_new_event(dev, s));
    return true;
  } catch (const std::exception& e) {
    log::warn(c10::str("freeing a tensor of stream ", stream, " of mtia:", int(index_),
                       ": its block is kept until empty_cache(): ", e.what()));
    return false;
  }
}

void CachingAllocator::finish_free_locked(Block* b,
                                          const std::shared_ptr<c10::GatheredContext>& stack,
                                          bool release) {
  using Action = TraceEntry::Action;
  b->state = BlockInfo::State::kInactive;
  b->requested = 0;
  b->stack = nullptr;
  stats_.active_bytes.decrease(int64_t(b->size));
  stats_.active.decrease(1);
  stats_.cached_bytes += b->size;
  stats_.cached_blocks += 1;
  record_locked(Action::kFreeCompleted, b->address, b->size, b->stream, stack);
  // A graph pool's block stays in its pool while the pool exists.
  const auto pool = b->pool == c10::MempoolId_t{0, 0} ? pools_.end() : pools_.find(b->pool);
  if (pool != pools_.end()) {
    pool->second.emplace(b->size, b);
  } else if (release) {
    free_segment_locked(b, "a freed tensor's block");  // counted as cached until now
  } else {
    b->pool = {0, 0};
    cache_[b->stream].emplace(b->size, b);
  }
}

void CachingAllocator::free_segment_locked(Block* b, const char* what) {
  try {
    Runtime::get().device(index_).free(mtia::DevicePtr(b->address));
  } catch (const mtia::Error& e) {
    log::error(c10::str("returning ", what, " ", reinterpret_cast<void*>(b->address),
                        " to the device: ", e.what()));
  }
  stats_.cached_bytes -= b->size;
  stats_.cached_blocks -= 1;
  stats_.reserved_bytes.decrease(int64_t(b->size));
  stats_.segment.decrease(1);
  record_locked(TraceEntry::Action::kSegmentFree, b->address, b->size, b->stream, nullptr);
  blocks_.erase(b->address);
  delete b;
}

void CachingAllocator::release_cached_locked() {
  for (auto& [stream, blocks] : cache_) {
    for (auto& [size, b] : blocks) {
      free_segment_locked(b, "cached block");
    }
    blocks.clear();
  }
}

void CachingAllocator::empty_cache() {
  if (Runtime::is_shut_down() || !Runtime::is_initialized()) return;
  DeviceContext* c = Runtime::get().opened(index_);
  if (c == nullptr) return;
  guarded("synchronizing before empty_cache", [&] { c->device().synchronize(); });
  std::lock_guard lock(mu_);
  release_cached_locked();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.active_bytes,
                  &stats_.reserved_bytes, &stats_.allocation, &stats_.active, &stats_.segment}) {
    s->reset_peak();
  }
}

void CachingAllocator::reset_accumulated() {
  std::lock_guard lock(mu_);
  for (Stat* s : {&stats_.allocated_bytes, &stats_.requested_bytes, &stats_.active_bytes,
                  &stats_.reserved_bytes, &stats_.allocation, &stats_.active, &stats_.segment}) {
    s->reset_accumulated();
  }
  stats_.cache_hits = stats_.num_alloc_retries = stats_.num_ooms = 0;
}

void CachingAllocator::record_history(HistoryMode mode, HistoryStacks stacks, size_t max_entries) {
  std::lock_guard lock(mu_);
  if (mode != HistoryMode::kOff) {
    history_.clear();
    max_entries_ = max_entries;
    stack_python_ = stacks.python;
    stack_cpp_ = stacks.cpp;
  }
  mode_ = mode;
}

AllocatorSnapshot CachingAllocator::snapshot() {
  std::lock_guard lock(mu_);
  record_locked(TraceEntry::Action::kSnapshot, 0, 0, 0, nullptr);
  AllocatorSnapshot s;
  s.blocks.reserve(blocks_.size());
  for (const auto& [address, b] : blocks_) {
    s.blocks.push_back(BlockInfo{b->address, b->size, b->requested, b->stream, b->state, b->stack,
                                 b->segment_stack, b->pool});
  }
  s.history.assign(history_.begin(), history_.end());
  return s;
}

void CachingAllocator::begin_pool_capture(uint32_t stream, c10::MempoolId_t pool) {
  std::lock_guard lock(mu_);
  TORCH_CHECK(!capture_.has_value(), "torch_mtia_emu: stream ", capture_->first,
              " is already capturing a graph; one capture at a time");
  capture_.emplace(stream, pool);
  pools_[pool];  // exists from now on, even before its first block
}

void CachingAllocator::end_pool_capture() {
  std::lock_guard lock(mu_);
  capture_.reset();
  // The frees that waited for a capturing stream (free_block).
  for (auto& [b, stack] : deferred_frees_) finish_free_locked(b, stack);
  deferred_frees_.clear();
}

void CachingAllocator::release_pool(c10::MempoolId_t pool) {
  if (Runtime::is_shut_down() || !Runtime::is_initialized()) return;
  DeviceContext* c = Runtime::get().opened(index_);
  if (c == nullptr) return;
  // Replays may still be reading or writing the blocks.
  guarded("synchronizing before releasing a graph pool", [&] { c->device().synchronize(); });
  std::lock_guard lock(mu_);
  const auto it = pools_.find(pool);
  if (it == pools_.end()) return;
  for (auto& [size, b] : it->second) {
    free_segment_locked(b, "graph pool block");
  }
  pools_.erase(it);
}

CachingAllocator::BlockUse CachingAllocator::block_use(uint64_t address) const {
  std::lock_guard lock(mu_);
  const auto it = blocks_.find(address);
  if (it == blocks_.end()) return {};
  const Block& b = *it->second;
  if (b.pool != c10::MempoolId_t{0, 0}) return {0, b.pool};
  return {b.state == BlockInfo::State::kAllocated ? b.epoch : 0, {0, 0}};
}

void CachingAllocator::record_stream(const void* context, const c10::Stream& stream) {
  // The DataPtr context is the Block (callers pass storage.data_ptr().get_context()).
  auto* b = static_cast<Block*>(const_cast<void*>(context));
  if (b == nullptr) return;
  TORCH_CHECK_VALUE(stream.device_type() == kDeviceType, "torch_mtia_emu: record_stream on a ",
                    stream.device_type(), " stream; give a stream of an mtia device");
  const std::pair<c10::DeviceIndex, uint32_t> use{stream.device_index(), uint32_t(stream.id())};
  CachingAllocator& a = *b->owner;
  std::lock_guard lock(a.mu_);
  if (use.first == a.index_ && use.second == b->stream) return;
  if (std::find(b->used_on.begin(), b->used_on.end(), use) == b->used_on.end()) {
    b->used_on.push_back(use);
  }
}

void CachingAllocator::shutdown() {
  std::lock_guard lock(mu_);
  for (auto& [stream, blocks] : cache_) {
    for (auto& [size, b] : blocks) {
      blocks_.erase(b->address);
      delete b;
    }
    blocks.clear();
  }
  for (auto& [pool, blocks] : pools_) {
    for (auto& [size, b] : blocks) delete b;
  }
  pools_.clear();
  blocks_.clear();  // blocks tensors hold are deleted when freed
  stats_.cached_bytes = 0;
  stats_.cached_blocks = 0;
  shut_down_ = true;
}

// --- the allocator PyTorch calls: one CachingAllocator per device ---------------------------

DeviceAllocator& DeviceAllocator::instance() {
  // Never destroyed: tensors may outlive it. The runtime's shutdown returns its blocks.
  static DeviceAllocator* a = [] {
    auto* created = new DeviceAllocator();
    Runtime::on_shutdown([] { DeviceAllocator::instance().shutdown(); });
    return created;
  }();
  return *a;
}

CachingAllocator& DeviceAllocator::device(c10::DeviceIndex index) {
  TORCH_INTERNAL_ASSERT(index >= 0 && index < kMaxDevices, "device index ", int(index));
  std::atomic<CachingAllocator*>& slot = devices_[size_t(index)];
  if (CachingAllocator* a = slot.load(std::memory_order_acquire)) return *a;
  std::lock_guard lock(mu_);
  if (CachingAllocator* a = slot.load()) return *a;
  auto* a = new CachingAllocator(index);
  if (mode_ != HistoryMode::kOff) a->record_history(mode_, stacks_, max_entries_);
  slot.store(a, std::memory_order_release);
  return *a;
}

CachingAllocator& DeviceAllocator::current() {
  return device(current_device());
}

std::vector<CachingAllocator*> DeviceAllocator::devices() const {
  std::vector<CachingAllocator*> all;
  for (const auto& slot : devices_) all.push_back(slot.load(std::memory_order_acquire));
  while (!all.empty() && all.back() == nullptr) all.pop_back();
  return all;
}

c10::DataPtr DeviceAllocator::allocate(size_t bytes) {
  return current().allocate(bytes);
}

void DeviceAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  auto& dev = Runtime::get().device();
  guarded("copying device memory", [&] {
    dev.copy_async(device_ptr(dest), mtia::Layout::contiguous({int64_t(count)}, 1), device_ptr(src),
                   mtia::Layout::contiguous({int64_t(count)}, 1), current_stream());
  });
}

void DeviceAllocator::empty_cache() {
  for (CachingAllocator* a : devices()) {
    if (a != nullptr) a->empty_cache();
  }
}

void DeviceAllocator::record_history(HistoryMode mode, HistoryStacks stacks, size_t max_entries) {
  std::lock_guard lock(mu_);
  mode_ = mode;
  stacks_ = stacks;
  max_entries_ = max_entries;
  for (const auto& slot : devices_) {
    if (CachingAllocator* a = slot.load()) a->record_history(mode, stacks, max_entries);
  }
}

void DeviceAllocator::attach_oom_observer(OutOfMemoryObserver observer) {
  std::lock_guard lock(mu_);
  oom_observers_.push_back(std::move(observer));
}

std::vector<OutOfMemoryObserver> DeviceAllocator::oom_observers() const {
  std::lock_guard lock(mu_);
  return oom_observers_;
}

void DeviceAllocator::shutdown() {
  for (CachingAllocator* a : devices()) {
    if (a != nullptr) a->shutdown();
  }
}

bool DeviceAllocator::initialized() {
  return Runtime::is_initialized();
}

void DeviceAllocator::emptyCache(c10::MempoolId_t) {
  empty_cache();
}

void DeviceAllocator::recordStream(const c10::DataPtr& ptr, c10::Stream stream) {
  record_stream(ptr.get_context(), stream);
}

c10::CachingDeviceAllocator::DeviceStats DeviceAllocator::getDeviceStats(c10::DeviceIndex device) {
  using c10::CachingDeviceAllocator::StatType;
  const AllocatorStats s = this->device(resolve_device(device)).stats();
  c10::CachingDeviceAllocator::DeviceStats d;
  const auto set = [](auto& array, const Stat& from) {
    auto& to = array[static_cast<size_t>(StatType::AGGREGATE)];
    to.current = from.current;
    to.peak = from.peak;
    to.allocated = from.allocated;
    to.freed = from.freed;
  };
  set(d.allocated_bytes, s.allocated_bytes);
  set(d.requested_bytes, s.requested_bytes);
  set(d.active_bytes, s.active_bytes);
  set(d.reserved_bytes, s.reserved_bytes);
  set(d.allocation, s.allocation);
  set(d.active, s.active);
  set(d.segment, s.segment);
  d.num_alloc_retries = int64_t(s.num_alloc_retries);
  d.num_ooms = int64_t(s.num_ooms);
  d.num_device_alloc = s.segment.allocated;
  d.num_device_free = s.segment.freed;
  return d;
}

void DeviceAllocator::resetAccumulatedStats(c10::DeviceIndex device) {
  this->device(resolve_device(device)).reset_accumulated();
}

void DeviceAllocator::resetPeakStats(c10::DeviceIndex device) {
  this->device(resolve_device(device)).reset_peak();
}

std::pair<size_t, size_t> DeviceAllocator::getMemoryInfo(c10::DeviceIndex device) {
  auto& dev = Runtime::get().device(resolve_device(device));
  const mtia::MemoryStats m =
      guarded("reading memory statistics", [&] { return dev.memory_stats(); });
  return {size_t(m.free_bytes), size_t(dev.properties().dram_bytes)};
}

}  // namespace mtia::torch_backend
