// Reading kernel images in tests: a file's bytes, little-endian fields and the section headers
// of an ELF64 file, from the gABI layout (independent of the emulator's own readers).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace mtia::test {

// The bytes of a file (a kernel image); fails the test if it cannot be read.
inline std::vector<uint8_t> file_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The little-endian value of type T at byte `off` of an ELF file; fails the test past its end.
template <typename T>
T elf_read(const std::vector<uint8_t>& elf, uint64_t off) {
  REQUIRE(off + sizeof(T) <= elf.size());
  T v;
  std::memcpy(&v, elf.data() + off, sizeof v);
  return v;
}

// The section headers of an ELF64 file: the fields the tests look sections up by.
struct ElfSection {
  std::string name;   // from the section header string table
  uint32_t type = 0;  // SHT_*
  uint64_t flags = 0, addr = 0, offset = 0, size = 0;
  uint32_t link = 0;
  uint64_t entsize = 0;
};

inline std::vector<ElfSection> elf_sections(const std::vector<uint8_t>& elf) {
  const auto shoff = elf_read<uint64_t>(elf, 0x28);
  const auto shentsize = elf_read<uint16_t>(elf, 0x3A);
  const auto shnum = elf_read<uint16_t>(elf, 0x3C);
  const auto shstrndx = elf_read<uint16_t>(elf, 0x3E);
  std::vector<ElfSection> sections;
  for (uint16_t i = 0; i < shnum; ++i) {
    const uint64_t sh = shoff + uint64_t{i} * shentsize;
    ElfSection s;
    s.type = elf_read<uint32_t>(elf, sh + 0x04);
    s.flags = elf_read<uint64_t>(elf, sh + 0x08);
    s.addr = elf_read<uint64_t>(elf, sh + 0x10);
    s.offset = elf_read<uint64_t>(elf, sh + 0x18);
    s.size = elf_read<uint64_t>(elf, sh + 0x20);
    s.link = elf_read<uint32_t>(elf, sh + 0x28);
    s.entsize = elf_read<uint64_t>(elf, sh + 0x38);
    sections.push_back(s);
  }
  if (shstrndx < sections.size()) {
    const ElfSection& names = sections[shstrndx];
    for (uint16_t i = 0; i < shnum; ++i) {
      const uint64_t at = names.offset + elf_read<uint32_t>(elf, shoff + uint64_t{i} * shentsize);
      REQUIRE(at < elf.size());
      sections[i].name = reinterpret_cast<const char*>(elf.data() + at);
    }
  }
  return sections;
}

}  // namespace mtia::test
