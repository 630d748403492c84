// Source lines of a kernel image's code, from the DWARF line table (.debug_line, versions 2 to
// 5) that clang writes with -g or -gline-tables-only. The sanitizer's and the PE faults'
// reports name the source line of each pc with it.
//
// Debug information is optional: an image without a line table gives an empty table, and one
// whose table cannot be read gives a reason (the reports then name pcs only).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mtia/isa/result.h"

namespace mtia::sim::pe {

struct SourceLine {
  std::string
      file;  // as the compiler recorded it: an absolute path, or one joined to its directory
  uint32_t line = 0;
};

class LineTable {
 public:
  // Reads the line table of a whole ELF64 file held in memory (its section headers and the
  // sections .debug_line, .debug_line_str and .debug_str).
  static isa::Result<LineTable> from_elf(std::span<const uint8_t> file);

  // The source line of the instruction at `pc`, if the table covers it.
  std::optional<SourceLine> find(uint64_t pc) const;
  bool empty() const { return ranges_.empty(); }
  size_t size() const { return ranges_.size(); }

  // An instruction a report names (where a PE stopped, or an earlier DMA or unit operation)
  // and the PE's return address register (ra) when it ran.
  struct Frame {
    uint64_t pc = 0;
    uint64_t ra = 0;
  };

  // Each "pc 0x<hex>" in `text` followed by " (file:line)" where the table knows the line; the
  // file is named by its last `path_parts` components ("lib/elementwise.c" for 2). The pcs of
  // `frames` are matched to the text's in order (each frame to the first pc equal to its own
  // not matched yet); for such a pc, when ra lies in another function than the pc (the pc's
  // function was called and had not called anything since, or saved ra), also the line of that
  // call: " (lib/klib.h:172, called from kernels/my_kernel.c:40)". Functions are the image's
  // symbol table's.
  std::string annotate(const std::string& text, std::span<const Frame> frames = {},
                       int path_parts = 2) const;

 private:
  struct Range {
    uint64_t lo = 0, hi = 0;  // [lo, hi)
    uint32_t file = 0;        // into files_
    uint32_t line = 0;
  };
  struct Function {
    uint64_t lo = 0, hi = 0;  // [lo, hi)
  };
  // The function of the symbol table that holds `pc`, if any.
  const Function* function_at(uint64_t pc) const;
  std::string place(uint64_t pc, int path_parts) const;  // "file:line", or "" if unknown

  std::vector<std::string> files_;
  std::vector<Range> ranges_;        // sorted by lo, not overlapping
  std::vector<Function> functions_;  // sorted by lo
};

}  // namespace mtia::sim::pe
