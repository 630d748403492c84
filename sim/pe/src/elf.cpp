#include "mtia/sim/pe/elf.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

namespace mtia::sim::pe {
namespace {

// ELF64 constants used here (System V gABI and the RISC-V psABI).
constexpr uint8_t kElfClass64 = 2;
constexpr uint8_t kElfDataLsb = 1;
constexpr uint16_t kEtRel = 1;
constexpr uint16_t kEtExec = 2;
constexpr uint16_t kEtDyn = 3;
constexpr uint16_t kEmRiscv = 243;
constexpr uint32_t kPtLoad = 1;
constexpr uint32_t kPtDynamic = 2;
constexpr uint32_t kPtInterp = 3;
constexpr uint32_t kPtTls = 7;
constexpr uint32_t kPfX = 1;
constexpr uint32_t kPfW = 2;
constexpr uint32_t kPfR = 4;
constexpr uint32_t kEfRiscvRvc = 0x1;
constexpr uint32_t kEfRiscvFloatAbi = 0x6;
constexpr uint32_t kEfRiscvRve = 0x8;
constexpr size_t kEhdrBytes = 64;
constexpr size_t kPhdrBytes = 56;

template <typename T>
T read_le(std::span<const uint8_t> file, size_t offset) {
  T v;
  std::memcpy(&v, file.data() + offset, sizeof v);  // the host is little-endian (isa/)
  return v;
}

isa::Failure bad(std::string reason) {
  // Kernel images have no code of their own in ErrorCode yet; kUnsupported is the closest.
  return isa::reject(isa::ErrorCode::kUnsupported, "kernel ELF image: " + std::move(reason));
}

}  // namespace

isa::Result<ElfImage> parse_elf(std::span<const uint8_t> file) {
  if (file.size() < kEhdrBytes) {
    return bad(fmt::format("{} bytes is too short for an ELF64 header (64 bytes)", file.size()));
  }
  if (std::memcmp(file.data(),
                  "\x7f"
                  "ELF",
                  4) != 0) {
    return bad("no ELF magic (\\x7fELF) at offset 0: not an ELF file");
  }
  if (file[4] != kElfClass64) {
    return bad("not ELF64: the PE core is RV64; compile with --target=riscv64-unknown-elf");
  }
  if (file[5] != kElfDataLsb) return bad("not little-endian (EI_DATA must be ELFDATA2LSB)");
  if (file[6] != 1) return bad("unknown ELF version in e_ident");

  const auto type = read_le<uint16_t>(file, 16);
  const auto machine = read_le<uint16_t>(file, 18);
  const auto entry = read_le<uint64_t>(file, 24);
  const auto phoff = read_le<uint64_t>(file, 32);
  const auto flags = read_le<uint32_t>(file, 48);
  const auto phentsize = read_le<uint16_t>(file, 54);
  const auto phnum = read_le<uint16_t>(file, 56);

  if (machine != kEmRiscv) {
    return bad(fmt::format("e_machine is {}, not EM_RISCV (243)", machine));
  }
  if (type == kEtRel) {
    return bad("a relocatable object (ET_REL): link it with ld.lld -T kernels/link.ld");
  }
  if (type == kEtDyn) {
    return bad("a shared or position-independent executable (ET_DYN): link a static one");
  }
  if (type != kEtExec) return bad(fmt::format("e_type {} is not ET_EXEC", type));
  if ((flags & kEfRiscvRvc) != 0) {
    return bad("uses compressed instructions (EF_RISCV_RVC): build with -march=rv64im");
  }
  if ((flags & kEfRiscvFloatAbi) != 0) {
    return bad("uses a hardware floating-point ABI: the core has no FPU; build with -mabi=lp64");
  }
  if ((flags & kEfRiscvRve) != 0) return bad("is RV32E/RV64E (EF_RISCV_RVE)");
  if (phentsize != kPhdrBytes) {
    return bad(fmt::format("e_phentsize is {}, not {}", phentsize, kPhdrBytes));
  }
  if (phoff > file.size() || phnum > (file.size() - phoff) / kPhdrBytes) {
    return bad(fmt::format("program headers ({} at offset {}) run past the end of the file", phnum,
                           phoff));
  }

  ElfImage image;
  image.entry = entry;
  for (uint16_t i = 0; i < phnum; ++i) {
    const size_t ph = phoff + size_t{i} * kPhdrBytes;
    const auto p_type = read_le<uint32_t>(file, ph);
    const auto p_flags = read_le<uint32_t>(file, ph + 4);
    const auto p_offset = read_le<uint64_t>(file, ph + 8);
    const auto p_vaddr = read_le<uint64_t>(file, ph + 16);
    const auto p_filesz = read_le<uint64_t>(file, ph + 32);
    const auto p_memsz = read_le<uint64_t>(file, ph + 40);
    if (p_type == kPtDynamic || p_type == kPtInterp) {
      return bad("needs dynamic linking (PT_DYNAMIC/PT_INTERP): link statically");
    }
    if (p_type == kPtTls) return bad("has thread-local storage (PT_TLS), which PEs do not have");
    if (p_type != kPtLoad) continue;  // notes, attributes, GNU_STACK: nothing to load
    if (p_filesz > p_memsz) {
      return bad(fmt::format("segment {} has p_filesz {} > p_memsz {}", i, p_filesz, p_memsz));
    }
    if (p_offset > file.size() || p_filesz > file.size() - p_offset) {
      return bad(fmt::format("segment {} (offset {}, {} bytes) runs past the end of the file", i,
                             p_offset, p_filesz));
    }
    if (p_vaddr + p_memsz < p_vaddr) {
      return bad(fmt::format("segment {} wraps around the 64-bit address space", i));
    }
    if (p_memsz == 0) continue;
    Segment seg;
    seg.vaddr = p_vaddr;
    seg.mem_bytes = p_memsz;
    seg.bytes.assign(file.begin() + static_cast<ptrdiff_t>(p_offset),
                     file.begin() + static_cast<ptrdiff_t>(p_offset + p_filesz));
    seg.readable = (p_flags & kPfR) != 0;
    seg.writable = (p_flags & kPfW) != 0;
    seg.executable = (p_flags & kPfX) != 0;
    image.segments.push_back(std::move(seg));
  }
  if (image.segments.empty()) return bad("has no PT_LOAD segment with contents");
  return image;
}

isa::Result<ElfImage> read_elf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad(fmt::format("cannot open '{}'", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
  if (in.bad()) return bad(fmt::format("error reading '{}'", path));
  auto parsed = parse_elf(bytes);
  if (!parsed.ok()) {
    return isa::reject(parsed.error().code, parsed.error().reason + " ('" + path + "')");
  }
  return parsed;
}

}  // namespace mtia::sim::pe
