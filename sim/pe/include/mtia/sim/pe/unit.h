// The interface of a PE's compute units (DPE, SE, RE, MLU): each takes one descriptor type of
// mtia/isa/pe/pe_ops.h and answers three questions about it, always in this order:
//   validate  is the descriptor well-formed for this local store? (descriptors.h's rules, with
//             their messages; nothing is touched)
//   cost      how many cycles is the unit busy with a valid one, and how much work is it?
//   execute   apply a valid one to the local store
// plus what the PE model needs to run the math on a helper thread: the local-store bytes it
// touches and about how long the host takes for it. One file per unit (dpe_unit.h, se_unit.h,
// re_unit.h, mlu_unit.h); FunctionalUnits (units.h) holds the four of one PE. The PE's local
// DMA has its own model in sim/ (its timing is the shared memory system's schedule).
// Plain C++, no SystemC; not thread-safe: execute() runs one operation at a time.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/result.h"
#include "mtia/sim/pe/unit_timing.h"

namespace mtia::sim::pe {

// What one unit operation cost.
struct UnitWork {
  uint64_t busy_cycles = 0;  // PE clock cycles the unit is busy, issue latency included
  uint64_t work = 0;         // MACs (DPE), elements (SE: outputs, RE: inputs), bytes (MLU)
};

using UnitOutcome = isa::Result<UnitWork>;

enum class UnitKind : uint8_t { kDpe = 0, kSe = 1, kRe = 2, kMlu = 3, kCount };
const char* unit_kind_name(UnitKind kind);  // "dpe", "se", "re", "mlu"

// Bytes of the local store an operation reads or writes: offsets [lo, hi) from its start.
struct Extent {
  uint64_t lo = 0;
  uint64_t hi = 0;
};
// The bytes one operation reads or writes, at most four ranges; unused ones are empty
// ({0, 0}, which overlaps nothing).
using Touched = std::array<Extent, 4>;

// Bytes [lo, hi) of a rows x cols tile with row stride ld (elements) at local-store offset off.
inline Extent tile_extent(uint64_t off, uint32_t rows, uint32_t cols, uint32_t ld, unsigned es) {
  return {off, off + (uint64_t{rows - 1} * ld + cols) * es};
}

template <typename Desc>
class Unit {
 public:
  using Descriptor = Desc;

  // `local_store` is the PE's local store (MTIA_PE_LS_BASE maps to its first byte); it must
  // outlive the unit and be 8-byte aligned.
  Unit(std::span<uint8_t> local_store, const UnitTiming& timing)
      : ls_(local_store), timing_(timing) {}
  virtual ~Unit() = default;
  Unit(const Unit&) = delete;
  Unit& operator=(const Unit&) = delete;

  virtual UnitKind kind() const = 0;
  // Why `d` cannot run on this local store, or nothing when it can.
  virtual isa::Status validate(const Desc& d) const = 0;
  // Busy cycles and work of a valid `d`; reads no memory.
  virtual UnitWork cost(const Desc& d) const = 0;
  // Applies a valid `d` to the local store.
  virtual void execute(const Desc& d) = 0;

  // The local-store bytes a valid `d` reads or writes.
  virtual Touched touched(const Desc& d) const = 0;
  // About how long the math of `d` takes the host, in nanoseconds (only its order of
  // magnitude matters): the PE model runs cheap operations in place rather than hand them to
  // a helper thread.
  virtual uint64_t host_cost_ns(const Desc& d) const = 0;

  const UnitTiming& timing() const { return timing_; }

 protected:
  uint8_t* at(uint64_t core_addr) const { return ls_.data() + (core_addr - MTIA_PE_LS_BASE); }

  std::span<uint8_t> ls_;
  UnitTiming timing_;
};

}  // namespace mtia::sim::pe
