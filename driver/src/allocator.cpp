// First-fit allocator over a device address range.
//
// Every range taken from the heap starts and ends on a multiple of the default alignment (the
// "granule"), so free ranges stay granule-aligned and coalescing is exact. Alignment padding in
// front of a block is returned to the free list; only the tail rounding is reserved with it.
#include "mtia/driver/allocator.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <bit>

namespace mtia::driver {
namespace {

// Recently freed addresses remembered for "already freed" messages; older ones are forgotten.
constexpr size_t kFreedMemory = 1 << 16;

constexpr uint64_t align_up(uint64_t v, uint64_t a) {
  return (v + a - 1) & ~(a - 1);
}

}  // namespace

isa::Result<std::unique_ptr<Allocator>> Allocator::create(uint64_t base, uint64_t bytes,
                                                          uint64_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       fmt::format("allocator alignment {} is not a power of two", alignment));
  }
  if (bytes > UINT64_MAX - base) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format("allocator range 0x{:x} + {} bytes overflows 64 bits", base, bytes));
  }
  return std::unique_ptr<Allocator>(new Allocator(base, bytes, alignment));
}

Allocator::Allocator(uint64_t base, uint64_t bytes, uint64_t alignment)
    : size_(bytes), alignment_(alignment) {
  // Trim the range to whole granules so every free range is granule-aligned.
  const uint64_t start = align_up(base, alignment);
  const uint64_t end = (base + bytes) & ~(alignment - 1);
  if (end > start) {
    free_.emplace(start, end - start);
    stats_.free_bytes = end - start;
    stats_.largest_free_bytes = end - start;
  }
}

isa::Result<uint64_t> Allocator::allocate(uint64_t bytes, uint64_t alignment) {
  if (bytes == 0) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "cannot allocate 0 bytes of device memory");
  }
  if (alignment == 0) alignment = alignment_;
  if (!std::has_single_bit(alignment)) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       fmt::format("allocation alignment {} is not a power of two", alignment));
  }
  alignment = std::max(alignment, alignment_);

  std::lock_guard lock(mu_);
  auto out_of_memory = [&] {
    uint64_t largest = 0;
    for (const auto& [start, len] : free_) largest = std::max(largest, len);
    return isa::reject(isa::ErrorCode::kOutOfMemory,
                       fmt::format("out of device memory: requested {} bytes (aligned to {}), {} "
                                   "bytes free, largest free range {} bytes",
                                   bytes, alignment, stats_.free_bytes, largest));
  };
  // Larger than the heap: reject before rounding, which could overflow.
  if (bytes > size_) return out_of_memory();
  const uint64_t need = align_up(bytes, alignment_);

  for (auto it = free_.begin(); it != free_.end(); ++it) {
    const uint64_t start = it->first;
    const uint64_t len = it->second;
    const uint64_t end = start + len;
    if (align_up(start, alignment) < start) continue;  // wrapped past 2^64
    const uint64_t addr = align_up(start, alignment);
    if (addr >= end || end - addr < need) continue;

    // Split [start, end) into: front padding (stays free), the block, the tail (stays free).
    free_.erase(it);
    if (addr > start) free_.emplace(start, addr - start);
    if (addr + need < end) free_.emplace(addr + need, end - addr - need);

    live_.emplace(addr, Block{addr, need, bytes});
    freed_.erase(addr);
    stats_.allocated_bytes += bytes;
    stats_.reserved_bytes += need;
    stats_.free_bytes -= need;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    stats_.allocations += 1;
    stats_.total_allocations += 1;
    if (observer_) observer_(addr, bytes, true);
    return addr;
  }
  return out_of_memory();
}

isa::Status Allocator::free(uint64_t address) {
  std::lock_guard lock(mu_);
  auto it = live_.find(address);
  if (it == live_.end()) {
    if (auto f = freed_.find(address); f != freed_.end()) {
      return isa::reject(
          isa::ErrorCode::kInvalidPointer,
          fmt::format("double free: device address 0x{:x} ({} bytes) was already freed", address,
                      f->second));
    }
    // Inside a live allocation but not at its start: say which one it belongs to.
    auto next = live_.upper_bound(address);
    if (next != live_.begin()) {
      const auto& [start, block] = *std::prev(next);
      if (address - start < block.bytes) {
        return isa::reject(
            isa::ErrorCode::kInvalidPointer,
            fmt::format(
                "cannot free device address 0x{:x}: it points inside the allocation at 0x{:x} ({} "
                "bytes), not at its start",
                address, start, block.bytes));
      }
    }
    return isa::reject(
        isa::ErrorCode::kInvalidPointer,
        fmt::format("cannot free device address 0x{:x}: it was never allocated by this device",
                    address));
  }

  const Block block = it->second;
  live_.erase(it);
  stats_.allocated_bytes -= block.bytes;
  stats_.reserved_bytes -= block.reserved_bytes;
  stats_.free_bytes += block.reserved_bytes;
  stats_.allocations -= 1;

  // Return the range and merge it with the free neighbours on either side.
  uint64_t start = block.reserved_start;
  uint64_t len = block.reserved_bytes;
  auto next = free_.lower_bound(start);
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    free_.erase(next);
  }
  free_.emplace(start, len);

  if (freed_.size() >= kFreedMemory) freed_.erase(freed_.begin());
  freed_.emplace(address, block.bytes);
  if (observer_) observer_(address, block.bytes, false);
  return {};
}

void Allocator::set_observer(Observer observer) {
  std::lock_guard lock(mu_);
  observer_ = std::move(observer);
}

std::optional<Allocation> Allocator::find(uint64_t address, uint64_t bytes) const {
  std::lock_guard lock(mu_);
  auto next = live_.upper_bound(address);
  if (next == live_.begin()) return std::nullopt;
  const auto& [start, block] = *std::prev(next);
  const uint64_t offset = address - start;  // address >= start here
  if (offset >= block.bytes || bytes > block.bytes - offset) return std::nullopt;
  return Allocation{start, block.bytes};
}

AllocatorStats Allocator::stats() const {
  std::lock_guard lock(mu_);
  AllocatorStats s = stats_;
  s.largest_free_bytes = 0;
  for (const auto& [start, len] : free_) s.largest_free_bytes = std::max(s.largest_free_bytes, len);
  return s;
}

void Allocator::reset_peak() {
  std::lock_guard lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

}  // namespace mtia::driver
