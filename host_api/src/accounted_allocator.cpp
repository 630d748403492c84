// AccountedAllocator: user allocations and the runtime's blocks, with their accounting.
#include "accounted_allocator.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>

#include "mtia/error.h"
#include "raise.h"

namespace mtia {
namespace {

constexpr size_t kRememberFreed = 4096;  // freed addresses kept for error messages

}  // namespace

uint64_t AccountedAllocator::allocate(uint64_t bytes) {
  isa::Result<uint64_t> allocated = allocator_.allocate(bytes);
  if (!allocated) {
    const isa::Failure& f = allocated.error();
    if (f.code == isa::ErrorCode::kOutOfMemory) {
      raise(f, fmt::format("malloc({} bytes): ", bytes),
            "; free unused allocations or request less");
    }
    raise(f, fmt::format("malloc({} bytes): ", bytes));
  }
  const uint64_t addr = allocated.value();
  std::lock_guard lock(mu_);
  allocated_ += bytes;
  peak_ = std::max(peak_, allocated_);
  live_allocations_ += 1;
  total_allocations_ += 1;
  generation_[addr] = next_generation_++;
  return addr;
}

void AccountedAllocator::free(uint64_t addr) {
  {
    std::lock_guard lock(mu_);
    if (runtime_blocks_.count(addr)) {
      throw Error(
          ErrorKind::kInvalidPointer,
          fmt::format("free(0x{:x}): this block belongs to the runtime, not to malloc()", addr));
    }
  }
  const auto alloc = allocator_.find(addr, 1);
  if (isa::Status freed = allocator_.free(addr); !freed) {
    raise(freed.error(), fmt::format("free(0x{:x}): ", addr),
          "; pass a pointer malloc() returned, once");
  }
  // The allocator accepted it, so `alloc` was this very block.
  std::lock_guard lock(mu_);
  const uint64_t bytes = alloc ? alloc->bytes : 0;
  allocated_ -= bytes;
  live_allocations_ -= 1;
  generation_.erase(addr);
  recently_freed_[addr] = bytes;
  freed_order_.push_back(addr);
  if (freed_order_.size() > kRememberFreed) {
    recently_freed_.erase(freed_order_.front());
    freed_order_.pop_front();
  }
}

void AccountedAllocator::make_runtime(uint64_t addr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  allocated_ -= bytes;
  live_allocations_ -= 1;
  total_allocations_ -= 1;
  runtime_blocks_.insert(addr);
  runtime_bytes_ += bytes;
}

void AccountedAllocator::add_runtime_block(uint64_t addr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  runtime_blocks_.insert(addr);
  runtime_bytes_ += bytes;
}

void AccountedAllocator::remove_runtime_block(uint64_t addr, uint64_t bytes) {
  std::lock_guard lock(mu_);
  runtime_blocks_.erase(addr);
  runtime_bytes_ -= bytes;
}

void AccountedAllocator::check_span(DevicePtr base, const ByteRange& span, size_t elem_size,
                                    const char* side) const {
  uint64_t lo = 0;
  if (__builtin_add_overflow(base.address(), span.lo, &lo)) {
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} device pointer 0x{:x} + layout offset {} bytes overflows 64 bits",
                            side, base.address(), span.lo));
  }
  const uint64_t bytes = span.size();
  if (lo % elem_size != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} device address 0x{:x} is not aligned to the element size {}; "
                            "DMA moves naturally aligned elements",
                            side, lo, elem_size));
  }
  const auto alloc = allocator_.find(lo, bytes);
  if (alloc) {
    std::lock_guard lock(mu_);
    if (!runtime_blocks_.count(alloc->address)) return;
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} region 0x{:x} + {} bytes lies in memory the runtime owns, not in "
                            "a malloc() allocation",
                            side, lo, bytes));
  }
  if (const auto start = allocator_.find(lo, 1)) {
    const uint64_t end = start->address + start->bytes;
    throw Error(
        ErrorKind::kInvalidPointer,
        fmt::format("{} region 0x{:x} + {} bytes runs {} bytes past the end of its allocation "
                    "(0x{:x}, {} bytes); check the layout's sizes, strides and offset",
                    side, lo, bytes, lo + bytes - end, start->address, start->bytes));
  }
  std::lock_guard lock(mu_);
  auto it = recently_freed_.upper_bound(lo);
  if (it != recently_freed_.begin()) {
    --it;
    if (lo - it->first < std::max<uint64_t>(it->second, 1)) {
      throw Error(ErrorKind::kInvalidPointer,
                  fmt::format("{} region 0x{:x} + {} bytes is in the allocation at 0x{:x} ({} "
                              "bytes), which was freed; use a live allocation",
                              side, lo, bytes, it->first, it->second));
    }
  }
  throw Error(ErrorKind::kInvalidPointer,
              fmt::format("{} region 0x{:x} + {} bytes is not inside any live device allocation; "
                          "pass a pointer from malloc() (plus an offset inside it)",
                          side, lo, bytes));
}

std::optional<AccountedAllocator::Use> AccountedAllocator::find_use(uint64_t addr) const {
  const auto alloc = allocator_.find(addr, 1);
  if (!alloc) return std::nullopt;
  std::lock_guard lock(mu_);
  const auto it = generation_.find(alloc->address);
  if (it == generation_.end()) return std::nullopt;
  return Use{alloc->address, it->second};
}

bool AccountedAllocator::is_live(uint64_t address, uint64_t generation) const {
  std::lock_guard lock(mu_);
  const auto it = generation_.find(address);
  return it != generation_.end() && it->second == generation;
}

void AccountedAllocator::stats(MemoryStats& s) const {
  const driver::AllocatorStats a = allocator_.stats();
  std::lock_guard lock(mu_);
  s.allocated_bytes = allocated_;
  s.reserved_bytes = a.reserved_bytes - runtime_bytes_;  // runtime blocks have no padding
  s.peak_allocated_bytes = peak_;
  s.allocations = live_allocations_;
  s.total_allocations = total_allocations_;
  s.free_bytes = a.free_bytes;
  s.largest_free_bytes = a.largest_free_bytes;
  s.runtime_bytes = runtime_bytes_;
}

void AccountedAllocator::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = allocated_;
}

}  // namespace mtia
