// A minimal ELF64 reader for kernel images: what the PE core needs and nothing else.
//
// Accepts statically linked little-endian RISC-V (EM_RISCV) executables with soft-float ABI
// and no compressed instructions, as kernels/link.ld produces. Rejects everything else with
// a reason that says what to change in the build.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mtia/isa/result.h"

namespace mtia::sim::pe {

// One PT_LOAD segment: file bytes at vaddr, followed by zeros up to mem_bytes.
struct Segment {
  uint64_t vaddr = 0;
  uint64_t mem_bytes = 0;      // >= bytes.size()
  std::vector<uint8_t> bytes;  // the p_filesz bytes from the file
  bool readable = false;
  bool writable = false;
  bool executable = false;
};

struct ElfImage {
  uint64_t entry = 0;
  std::vector<Segment> segments;  // in file order; empty ones (p_memsz 0) are left out
};

// Parses an image held in memory.
isa::Result<ElfImage> parse_elf(std::span<const uint8_t> file);

// Reads and parses a file; a missing or unreadable file is a rejection too.
isa::Result<ElfImage> read_elf_file(const std::string& path);

}  // namespace mtia::sim::pe
