#include "initcheck.h"

#include <algorithm>
#include <iterator>

namespace mtia::sim::detail {

void ByteSet::add(uint64_t lo, uint64_t hi) {
  if (lo >= hi) return;
  // Runs that overlap or touch [lo, hi) join it.
  auto it = runs_.upper_bound(lo);
  if (it != runs_.begin() && std::prev(it)->second >= lo) --it;
  while (it != runs_.end() && it->first <= hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = runs_.erase(it);
  }
  runs_.emplace_hint(it, lo, hi);
}

void ByteSet::add(const ByteSet& other) {
  for (const auto& [lo, hi] : other.runs_) add(lo, hi);
}

void ByteSet::erase(uint64_t lo, uint64_t hi) {
  if (lo >= hi) return;
  auto it = runs_.upper_bound(lo);
  if (it != runs_.begin() && std::prev(it)->second > lo) --it;
  while (it != runs_.end() && it->first < hi) {
    const uint64_t rlo = it->first, rhi = it->second;
    it = runs_.erase(it);
    if (rlo < lo) runs_.emplace(rlo, lo);
    if (rhi > hi) it = runs_.emplace(hi, rhi).first;
  }
}

isa::ByteSpan ByteSet::first_gap(uint64_t lo, uint64_t hi) const {
  if (lo >= hi) return {};
  auto it = runs_.upper_bound(lo);
  if (it != runs_.begin() && std::prev(it)->second > lo) {
    lo = std::prev(it)->second;  // the run holding lo covers the start
    if (lo >= hi) return {};
  }
  // `it` is the first run starting after the original lo: the gap ends where it starts.
  const uint64_t end = it != runs_.end() ? std::min(hi, it->first) : hi;
  return {lo, end};
}

void WrittenBits::reset(uint64_t bytes) {
  size_ = bytes;
  bits_.assign((bytes + 63) / 64, 0);
}

void WrittenBits::mark(uint64_t lo, uint64_t hi) {
  hi = std::min(hi, size_);
  for (uint64_t i = lo; i < hi;) {
    if (i % 64 == 0 && hi - i >= 64) {
      bits_[i / 64] = ~uint64_t{0};
      i += 64;
    } else {
      bits_[i / 64] |= uint64_t{1} << (i % 64);
      ++i;
    }
  }
}

isa::ByteSpan WrittenBits::first_gap(uint64_t lo, uint64_t hi) const {
  hi = std::min(hi, size_);
  uint64_t i = lo;
  while (i < hi && at(i)) {
    i = i % 64 == 0 && hi - i >= 64 && bits_[i / 64] == ~uint64_t{0} ? i + 64 : i + 1;
  }
  if (i >= hi) return {};
  uint64_t end = i;
  while (end < hi && !at(end))
    end = end % 64 == 0 && hi - end >= 64 && bits_[end / 64] == 0 ? end + 64 : end + 1;
  return {i, end};
}

void Initcheck::enable(bool on) {
  on_.store(on, std::memory_order_relaxed);
  written_.clear();
  std::lock_guard lock(host_mu_);
  host_writes_.clear();
}

void Initcheck::update(isa::MemcheckOp op, uint64_t base, uint64_t bytes) {
  apply_host_writes();  // written before the allocation changed
  (void)op;             // a new allocation and a freed one both hold nothing written
  written_.erase(base, base + bytes);
}

void Initcheck::written(uint64_t lo, uint64_t hi) {
  written_.add(lo, hi);
}

void Initcheck::written(const ByteSet& bytes) {
  written_.add(bytes);
}

void Initcheck::written_by_host(uint64_t lo, uint64_t hi) {
  std::lock_guard lock(host_mu_);
  host_writes_.push_back({lo, hi});
}

void Initcheck::apply_host_writes() {
  std::lock_guard lock(host_mu_);
  for (const isa::ByteSpan& s : host_writes_) written_.add(s.lo, s.hi);
  host_writes_.clear();
}

}  // namespace mtia::sim::detail
