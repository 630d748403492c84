// The allocation table of memcheck and initcheck (docs/sanitizer.md): the driver's live DRAM
// allocations, as its allocator reports them through the sanitizer registers (isa/registers.h,
// isa/sanitize.h), and the ones freed since. Private to sim/.
//
// Written by the firmware's register handling and read by the PE grid's DMA checks, both on the
// simulator thread (no register is handled during a launch's slices): no lock is needed.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "mtia/isa/result.h"
#include "mtia/isa/sanitize.h"

namespace mtia::sim::detail {

class Memcheck {
 public:
  bool on() const { return on_; }
  // Switches the table on or off (on while memcheck or initcheck is); off forgets it.
  void enable(bool on);
  // One allocation or free. Rejects (kInvalidArgument) an empty or wrapping range, a live
  // range that overlaps a live one, and a free of a base that is not a live allocation's.
  isa::Status update(isa::MemcheckOp op, uint64_t base, uint64_t bytes);

  // Whether DRAM bytes [lo, hi) lie inside one live allocation; if not, what they hit or miss,
  // for a report ("runs 4 bytes past the end of the allocation at 0x1000 (512 bytes) into the
  // allocation at 0x1200 (256 bytes)").
  struct Miss {
    std::string what;
  };
  bool inside(uint64_t lo, uint64_t hi, Miss& miss) const;

  uint64_t live_allocations() const { return live_.size(); }

  // The lowest live allocation that holds a byte of [lo, hi): true, with its base and bytes,
  // or false if none does.
  bool first_allocation_in(uint64_t lo, uint64_t hi, uint64_t& base, uint64_t& bytes) const;

 private:
  static constexpr size_t kRememberFreed = 4096;  // freed ranges kept for reports

  // The live allocation holding byte `addr`, or end().
  std::map<uint64_t, uint64_t>::const_iterator live_at(uint64_t addr) const;
  std::string describe_live(uint64_t base, uint64_t bytes) const;

  bool on_ = false;
  std::map<uint64_t, uint64_t> live_;   // base -> bytes
  std::map<uint64_t, uint64_t> freed_;  // base -> bytes, freed and not reallocated since
  std::deque<uint64_t> freed_order_;    // bases in freed_, oldest first
};

}  // namespace mtia::sim::detail
