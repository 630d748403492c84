#include "pinned_allocator.h"
#include "torch_logger.h"

#include <c10/util/Exception.h>

#include <chrono>
#include <cstring>

#include "devices.h"

namespace mtia::torch_backend {

namespace {
constexpr size_t kPinnedMinBytes = 4096;

size_t round_pinned(size_t bytes) {
  size_t size = kPinnedMinBytes;
  while (size < bytes) size <<= 1;
  return size;
}

int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The device `index` if it is open (and the process not shutting down), else null.
mtia::Device* open_device(c10::DeviceIndex index) {
  if (!Runtime::is_initialized() || Runtime::is_shut_down()) return nullptr;
  DeviceContext* c = Runtime::get().opened(index);
  return c != nullptr ? &c->device() : nullptr;
}
}  // namespace

PinnedAllocator& PinnedAllocator::instance() {
  static PinnedAllocator* a = new PinnedAllocator();
  return *a;
}

c10::DataPtr PinnedAllocator::allocate(size_t bytes) {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes == 0) return c10::DataPtr(nullptr, nullptr, &delete_pinned, cpu);
  const c10::DeviceIndex device = current_device();
  const size_t size = round_pinned(bytes);
  {
    std::lock_guard lock(mu_);
    process_events_locked();
    auto& cached = cache_[device];
    auto it = cached.find(size);
    if (it != cached.end()) {
      Block* b = it->second;
      cached.erase(it);
      b->allocated = true;
      stats_.active_requests.increase(1);
      stats_.active_bytes.increase(size);
      return c10::DataPtr(b->ptr, b, &delete_pinned, cpu);
    }
  }
  const int64_t start = steady_us();
  void* p = guarded("allocating pinned host memory",
                    [&] { return Runtime::get().device(device).host_alloc(size); });
  auto* b = new Block{p, size, device, true, {}};
  std::lock_guard lock(mu_);
  blocks_[p] = b;
  stats_.host_alloc_time.increase(steady_us() - start);
  stats_.num_host_alloc += 1;
  stats_.allocations.increase(1);
  stats_.allocated_bytes.increase(size);
  stats_.active_requests.increase(1);
  stats_.active_bytes.increase(size);
  const size_t bucket = size_t(c10::llvm::Log2_64_Ceil(size));
  if (bucket < stats_.bucket_allocation.size()) stats_.bucket_allocation[bucket] += 1;
  return c10::DataPtr(p, b, &delete_pinned, cpu);
}

void PinnedAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count > 0) std::memcpy(dest, src, count);
}

bool PinnedAllocator::record_event(void*, void* ctx, c10::Stream stream) {
  if (ctx == nullptr) return false;
  std::lock_guard lock(mu_);
  Block* b = nullptr;
  for (const auto& [ptr, block] : blocks_) {
    if (block == ctx) {
      b = block;
      break;
    }
  }
  if (b == nullptr) return false;
  TORCH_CHECK(stream.device_type() == kDeviceType,
              "torch_mtia_emu: pinned memory records uses by MTIA streams, not by ", stream);
  const c10::DeviceIndex d = resolve_device(stream.device_index());
  mtia::Device& dev = Runtime::get().device(d);
  const mtia::Stream s = from_c10(stream);
  TORCH_CHECK(!dev.is_capturing(s), "torch_mtia_emu: a use of pinned memory by stream ", stream,
              " cannot be recorded while it captures a graph (copies between the host "
              "and the device are not captured)");
  const mtia::Event e =
      guarded("recording a use of pinned memory", [&] { return record_new_event(dev, s); });
  b->events.emplace_back(d, e.id);
  return true;
}

void PinnedAllocator::process_events_locked() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    Block* b = *it;
    while (!b->events.empty()) {
      const auto [d, id] = b->events.back();
      mtia::Device* dev = open_device(d);
      bool done = true;  // a closed device runs nothing any more
      if (dev != nullptr) {
        try {
          done = dev->query(mtia::Event{id});
          if (done) dev->destroy_event(mtia::Event{id});
        } catch (const std::exception& e) {
          // Kept pending: the block is not reused while its copy may still run.
          log::warn(c10::str("querying a pinned memory block's copy: ", e.what()));
          done = false;
        }
      }
      if (!done) break;
      b->events.pop_back();
    }
    if (b->events.empty()) {
      cache_[b->device].emplace(b->size, b);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void PinnedAllocator::free_block(Block* b) {
  std::lock_guard lock(mu_);
  b->allocated = false;
  stats_.active_requests.decrease(1);
  stats_.active_bytes.decrease(b->size);
  if (b->events.empty()) {
    cache_[b->device].emplace(b->size, b);
  } else {
    pending_.push_back(b);
  }
}

std::vector<PinnedAllocator::Block*> PinnedAllocator::take_cached_locked() {
  std::vector<Block*> out;
  for (auto& [device, cached] : cache_) {
    for (auto& [size, b] : cached) out.push_back(b);
    cached.clear();
  }
  for (Block* b : out) {
    blocks_.erase(b->ptr);
    stats_.allocations.decrease(1);
    stats_.allocated_bytes.decrease(b->size);
  }
  return out;
}

void PinnedAllocator::release(const std::vector<Block*>& blocks) {
  for (Block* b : blocks) {
    const int64_t start = steady_us();
    try {
      if (mtia::Device* dev = open_device(b->device)) dev->host_free(b->ptr);
    } catch (const std::exception& e) {
      log::error(c10::str("freeing pinned host memory ", b->ptr, ": ", e.what()));
    }
    {
      std::lock_guard lock(mu_);
      stats_.host_free_time.increase(steady_us() - start);
      stats_.num_host_free += 1;
    }
    delete b;
  }
}

void PinnedAllocator::empty_cache() {
  std::vector<Block*> blocks;
  {
    std::lock_guard lock(mu_);
    process_events_locked();
    blocks = take_cached_locked();
  }
  release(blocks);
}

at::HostStats PinnedAllocator::get_stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

void PinnedAllocator::reset_accumulated_stats() {
  std::lock_guard lock(mu_);
  stats_.active_requests.reset_accumulated();
  stats_.active_bytes.reset_accumulated();
  stats_.allocations.reset_accumulated();
  stats_.allocated_bytes.reset_accumulated();
  stats_.host_alloc_time.reset_accumulated();
  stats_.host_free_time.reset_accumulated();
  stats_.num_host_alloc = 0;
  stats_.num_host_free = 0;
  std::fill(stats_.bucket_allocation.begin(), stats_.bucket_allocation.end(), 0);
}

void PinnedAllocator::reset_peak_stats() {
  std::lock_guard lock(mu_);
  stats_.active_requests.reset_peak();
  stats_.active_bytes.reset_peak();
  stats_.allocations.reset_peak();
  stats_.allocated_bytes.reset_peak();
  stats_.host_alloc_time.reset_peak();
  stats_.host_free_time.reset_peak();
}

void PinnedAllocator::delete_pinned(void* ctx) {
  if (ctx == nullptr) return;
  instance().free_block(static_cast<Block*>(ctx));
}

// PyTorch's host allocator for MTIA: Tensor.pin_memory(), empty_host_cache() and the pinned
// memory statistics find it by device type.
namespace {
[[maybe_unused]] const bool pinned_registered = [] {
  at::setHostAllocator(c10::DeviceType::MTIA, &PinnedAllocator::instance());
  return true;
}();
}  // namespace

}  // namespace mtia::torch_backend
