// initcheck (docs/sanitizer.md): which device bytes of the live allocations something has
// written since they were allocated, and which bytes of a PE's local store something has written
// since its launch started. Private to sim/.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "mtia/isa/decode.h"
#include "mtia/isa/sanitize.h"

namespace mtia::sim::detail {

// A set of bytes as disjoint runs of addresses.
class ByteSet {
 public:
  void add(uint64_t lo, uint64_t hi);
  void erase(uint64_t lo, uint64_t hi);
  void add(const ByteSet& other);
  // The first run of bytes of [lo, hi) not in the set (empty if every byte is).
  isa::ByteSpan first_gap(uint64_t lo, uint64_t hi) const;
  void clear() { runs_.clear(); }
  bool empty() const { return runs_.empty(); }

 private:
  std::map<uint64_t, uint64_t> runs_;  // lo -> hi; runs neither overlap nor touch
};

// One bit a byte over [0, size): which bytes of a local store were written.
class WrittenBits {
 public:
  void reset(uint64_t bytes);  // `bytes` bytes, none written
  void mark(uint64_t lo, uint64_t hi);
  // The first run of bytes of [lo, hi) not written (empty if every byte is); bytes past the
  // end are not looked at.
  isa::ByteSpan first_gap(uint64_t lo, uint64_t hi) const;

 private:
  bool at(uint64_t i) const { return (bits_[i / 64] >> (i % 64)) & 1; }
  uint64_t size_ = 0;
  std::vector<uint64_t> bits_;
};

// The DRAM bytes written since their allocation was made. Allocations and frees come from the
// allocation table's updates; writes from the host (copies, fills, the host API's own writes)
// and, at each barrier and at a launch's end, from the PEs' DMA.
class Initcheck {
 public:
  bool on() const { return on_.load(std::memory_order_relaxed); }
  // Switches it on or off; off forgets what was written.
  void enable(bool on);
  // A new allocation's or a freed one's bytes are no longer written (simulator thread).
  void update(isa::MemcheckOp op, uint64_t base, uint64_t bytes);
  // Device bytes written by the device (simulator thread, no launch slice running).
  void written(uint64_t lo, uint64_t hi);
  void written(const ByteSet& bytes);
  // Device bytes the host wrote directly (Device::write_memory), from any thread: kept until
  // the simulator thread next reads the set (apply_host_writes) or updates it.
  void written_by_host(uint64_t lo, uint64_t hi);
  // Takes in the host's direct writes (simulator thread; at a launch's start).
  void apply_host_writes();
  const ByteSet& bytes() const { return written_; }

 private:
  std::atomic<bool> on_{false};
  ByteSet written_;
  std::mutex host_mu_;  // guards host_writes_
  std::vector<isa::ByteSpan> host_writes_;
};

}  // namespace mtia::sim::detail
