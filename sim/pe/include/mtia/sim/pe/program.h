// A kernel image checked against the PE core's address space and pre-decoded: immutable, so
// one Program serves every PE of every launch of that kernel (share it with shared_ptr). The
// kernels of one image share its segments and decoded code (with_entry).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/sim/pe/elf.h"

namespace mtia::sim::pe {

// One decoded instruction. The interpreter's operation codes are private to the core.
struct DecodedInsn {
  uint8_t op = 0;   // internal operation (see riscv_decode.h in src/)
  uint8_t rd = 0;   // 32 stands for x0: writes to it are discarded
  uint8_t rs1 = 0;  // 0..31
  uint8_t rs2 = 0;  // 0..31
  int32_t imm = 0;  // sign-extended immediate, pe.info field or UnitOp
};
static_assert(sizeof(DecodedInsn) == 8);

class Program {
 public:
  // A segment of the image window as the core maps it: mem_bytes long, zero-padded.
  struct ImageSegment {
    uint64_t base = 0;
    std::vector<uint8_t> bytes;
    bool writable = false;
    bool executable = false;
  };
  // A segment placed in the local store (MTIA_LOCAL globals): copied there at every launch.
  struct LocalSegment {
    uint64_t offset = 0;  // from MTIA_PE_LS_BASE
    std::vector<uint8_t> bytes;
  };

  // Checks that every segment lies in the image or the local-store window, that no segment is
  // both writable and executable, that code is only in the image window, that segments do not
  // overlap and that the entry point is an aligned address in code; then decodes the code.
  static isa::Result<std::shared_ptr<const Program>> create(const ElfImage& image);
  // The same image entered at `entry` instead, sharing this one's segments and decoded code;
  // fails like create() when `entry` is not an aligned address in an executable segment.
  isa::Result<std::shared_ptr<const Program>> with_entry(uint64_t entry) const;

  uint64_t entry() const { return entry_; }
  const std::vector<ImageSegment>& image_segments() const { return body_->image; }
  const std::vector<LocalSegment>& local_segments() const { return body_->local; }
  // Local-store bytes the image itself occupies (end of the highest local segment).
  uint64_t local_store_bytes_used() const { return body_->local_end; }

  // The decoded code covers [code_base(), code_base() + 4 * code_size()); words that are not
  // in an executable segment decode to a fetch fault.
  uint64_t code_base() const { return body_->code_base; }
  uint64_t code_size() const { return body_->code.size(); }
  const DecodedInsn* code() const { return body_->code.data(); }
  // The instruction word at index i, for fault messages.
  uint32_t raw_word(uint64_t index) const { return body_->raw[index]; }

 private:
  // What every entry of the image shares.
  struct Body {
    std::vector<ImageSegment> image;
    std::vector<LocalSegment> local;
    uint64_t local_end = 0;
    uint64_t code_base = 0;
    std::vector<DecodedInsn> code;
    std::vector<uint32_t> raw;
  };
  Program() = default;
  // `body` entered at `entry`, which must be an aligned address in an executable segment.
  static isa::Result<std::shared_ptr<const Program>> enter(std::shared_ptr<const Body> body,
                                                           uint64_t entry);

  uint64_t entry_ = 0;
  std::shared_ptr<const Body> body_;
};

}  // namespace mtia::sim::pe
