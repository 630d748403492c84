#include "memcheck.h"

#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <iterator>

namespace mtia::sim::detail {

void Memcheck::enable(bool on) {
  on_ = on;
  if (!on) {
    live_.clear();
    freed_.clear();
    freed_order_.clear();
  }
}

isa::Status Memcheck::update(isa::MemcheckOp op, uint64_t base, uint64_t bytes) {
  if (op == isa::MemcheckOp::kFreed) {
    auto it = live_.find(base);
    if (it == live_.end()) {
      return isa::reject(
          isa::ErrorCode::kInvalidArgument,
          fmt::format("memcheck: 0x{:x} was freed but is not a live allocation's base", base));
    }
    freed_[base] = it->second;
    freed_order_.push_back(base);
    live_.erase(it);
    if (freed_order_.size() > kRememberFreed) {
      // A base freed twice (freed, reallocated, freed) appears twice; erase only its last entry.
      const uint64_t oldest = freed_order_.front();
      freed_order_.pop_front();
      if (std::find(freed_order_.begin(), freed_order_.end(), oldest) == freed_order_.end()) {
        freed_.erase(oldest);
      }
    }
    return {};
  }
  if (bytes == 0 || base + bytes < base) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format("memcheck: allocation 0x{:x} + {} bytes is empty or wraps", base, bytes));
  }
  auto next = live_.lower_bound(base);
  const bool overlaps_next = next != live_.end() && next->first < base + bytes;
  const bool overlaps_prev =
      next != live_.begin() && std::prev(next)->first + std::prev(next)->second > base;
  if (overlaps_next || overlaps_prev) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format("memcheck: allocation 0x{:x} + {} bytes overlaps a live one", base, bytes));
  }
  live_.emplace(base, bytes);
  // Freed ranges the new allocation reuses are no longer freed memory.
  for (auto f = freed_.lower_bound(base); f != freed_.end() && f->first < base + bytes;) {
    f = freed_.erase(f);
  }
  if (auto f = freed_.lower_bound(base); f != freed_.begin()) {
    --f;
    if (f->first + f->second > base) freed_.erase(f);
  }
  return {};
}

std::map<uint64_t, uint64_t>::const_iterator Memcheck::live_at(uint64_t addr) const {
  auto it = live_.upper_bound(addr);
  if (it == live_.begin()) return live_.end();
  --it;
  return addr - it->first < it->second ? it : live_.end();
}

bool Memcheck::first_allocation_in(uint64_t lo, uint64_t hi, uint64_t& base,
                                   uint64_t& bytes) const {
  auto it = live_at(lo);
  if (it == live_.end()) it = live_.lower_bound(lo);
  if (it == live_.end() || it->first >= hi) return false;
  base = it->first;
  bytes = it->second;
  return true;
}

std::string Memcheck::describe_live(uint64_t base, uint64_t bytes) const {
  return fmt::format("the allocation at 0x{:x} ({} bytes)", base, bytes);
}

bool Memcheck::inside(uint64_t lo, uint64_t hi, Miss& miss) const {
  const auto at = live_at(lo);
  if (at != live_.end()) {
    const uint64_t end = at->first + at->second;
    if (hi <= end) return true;
    miss.what = fmt::format("runs {} bytes past the end of {}", hi - end,
                            describe_live(at->first, at->second));
    const auto into = live_at(end);
    miss.what += into != live_.end()
                     ? fmt::format(" into {}", describe_live(into->first, into->second))
                     : std::string(" into memory no live allocation holds");
    return false;
  }
  // Not in a live allocation: freed memory, or none.
  if (auto f = freed_.upper_bound(lo); f != freed_.begin()) {
    --f;
    if (lo - f->first < f->second) {
      miss.what = fmt::format("touches freed memory: the allocation at 0x{:x} ({} bytes), freed",
                              f->first, f->second);
      return false;
    }
  }
  auto next = live_.lower_bound(lo);
  if (next != live_.end() && next->first < hi) {
    miss.what = fmt::format("starts {} bytes before {}", next->first - lo,
                            describe_live(next->first, next->second));
    return false;
  }
  miss.what = "lies in no live allocation";
  if (next != live_.begin()) {
    const auto prev = std::prev(next);
    miss.what +=
        fmt::format(" (it starts {} bytes past the end of {})", lo - (prev->first + prev->second),
                    describe_live(prev->first, prev->second));
  }
  return false;
}

}  // namespace mtia::sim::detail
