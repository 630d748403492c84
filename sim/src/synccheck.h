// synccheck's in-flight rule (docs/sanitizer.md): the local-store bytes that a PE's unit
// operations and DMAs issued and not yet waited for read and write, and the first operation or
// core access that touches them against the ISA's ordering rule. Private to sim/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mtia/isa/decode.h"
#include "mtia/sim/pe/line_table.h"
#include "mtia/sim/pe/unit.h"

namespace mtia::sim::detail {

class InFlight {
 public:
  // An operation's local-store bytes (offsets into the local store), as runs in any order.
  struct Bytes {
    std::vector<pe::Extent> reads, writes;
  };

  // Forgets every operation (a new launch).
  void clear() { ops_.clear(); }
  // The operation `kind` at `pc` (issued with return address `ra`) with `tag` was issued (its
  // runs are sorted and merged here).
  void issued(const char* kind, uint64_t pc, uint64_t ra, uint64_t tag, Bytes&& bytes);
  // The PE waited for `tag` (pe.wait, or a pe.poll that saw it done), or for all of them.
  void waited(uint64_t tag);
  void waited_all() { ops_.clear(); }
  bool empty() const { return ops_.empty(); }

  // The finding for a new operation `kind` at `pc` (to get `tag`) that reads or writes bytes an
  // operation in flight writes, or writes bytes one reads; "" if none. `bytes` is sorted and
  // merged in place. `in_flight` gets the operation in flight that the finding names.
  std::string conflict(const char* kind, uint64_t pc, uint64_t tag, Bytes& bytes,
                       pe::LineTable::Frame& in_flight) const;
  // The same for a core load or store of [lo, hi).
  std::string core_access(uint64_t pc, uint64_t lo, uint64_t hi, bool write,
                          pe::LineTable::Frame& in_flight) const;

 private:
  struct Op {
    const char* kind;
    uint64_t pc, ra, tag;
    Bytes bytes;
  };
  // What `who` ("the se.op at pc 0x... (tag 3)" / "a 4-byte load at pc ...") does against the
  // in-flight operation `op` over [lo, hi).
  static std::string report(const std::string& who, bool write, const Op& op, bool op_writes,
                            isa::ByteSpan overlap);
  std::vector<Op> ops_;  // in issue order
};

}  // namespace mtia::sim::detail
