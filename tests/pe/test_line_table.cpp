// The kernel image's source lines (LineTable): the clang-built smoke kernel's unit instructions
// map to the lines of its source that issue them (found in the source text, not in the debug
// information), a hand-assembled DWARF 4 line program gives the rows the standard defines, and
// damaged debug information is a reason, never a crash.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "elf_file.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/line_table.h"

using Catch::Matchers::Contains;
using mtia::sim::pe::LineTable;

namespace {

// The 1-based lines of `path` that contain `text`.
std::set<uint32_t> lines_with(const char* path, const std::string& text) {
  std::ifstream in(path);
  REQUIRE(in);
  std::set<uint32_t> out;
  std::string line;
  for (uint32_t n = 1; std::getline(in, line); ++n) {
    if (line.find(text) != std::string::npos) out.insert(n);
  }
  return out;
}

// The pcs of the dma.start instructions in the executable sections.
std::vector<uint64_t> dma_starts(const std::vector<uint8_t>& f) {
  std::vector<uint64_t> pcs;
  for (const mtia::test::ElfSection& s : mtia::test::elf_sections(f)) {
    if ((s.flags & 0x4) == 0) continue;  // SHF_EXECINSTR
    for (uint64_t at = 0; at + 4 <= s.size; at += 4) {
      const auto w = mtia::test::elf_read<uint32_t>(f, s.offset + at);
      if ((w & 0x7f) == MTIA_PE_OPC_DMA && ((w >> 12) & 7) == MTIA_PE_F3_DMA &&
          (w >> 25) == MTIA_PE_F7_V1) {
        pcs.push_back(s.addr + at);
      }
    }
  }
  return pcs;
}

// A minimal ELF64 file whose only sections are .shstrtab, .debug_line = `line` and a .symtab
// of `functions` (STT_FUNC symbols, [start, end)).
std::vector<uint8_t> elf_with_debug_line(
    const std::vector<uint8_t>& line,
    const std::vector<std::pair<uint64_t, uint64_t>>& functions = {}) {
  const std::string names("\0.shstrtab\0.debug_line\0.symtab\0", 31);
  std::vector<uint8_t> f(64, 0);
  auto put = [&f](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) f[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  f[0] = 0x7f, f[1] = 'E', f[2] = 'L', f[3] = 'F', f[4] = 2, f[5] = 1, f[6] = 1;
  const size_t names_at = f.size();
  f.insert(f.end(), names.begin(), names.end());
  const size_t line_at = f.size();
  f.insert(f.end(), line.begin(), line.end());
  const size_t symtab_at = f.size();
  f.resize(symtab_at + 24 * functions.size(), 0);
  for (size_t i = 0; i < functions.size(); ++i) {
    const size_t e = symtab_at + 24 * i;
    f[e + 4] = 0x12;  // STB_GLOBAL, STT_FUNC
    put(e + 8, functions[i].first, 8);
    put(e + 16, functions[i].second - functions[i].first, 8);
  }
  const size_t shoff = f.size();
  f.resize(shoff + 4 * 64, 0);
  put(40, shoff, 8);
  put(58, 64, 2);
  put(60, 4, 2);
  put(62, 1, 2);
  auto section = [&](int i, uint64_t name, uint64_t type, size_t at, size_t bytes) {
    const size_t h = shoff + 64 * static_cast<size_t>(i);
    put(h, name, 4);
    put(h + 4, type, 4);
    put(h + 24, at, 8);
    put(h + 32, bytes, 8);
  };
  section(1, 1, 3, names_at, names.size());             // .shstrtab, SHT_STRTAB
  section(2, 11, 1, line_at, line.size());              // .debug_line, SHT_PROGBITS
  section(3, 23, 2, symtab_at, 24 * functions.size());  // .symtab, SHT_SYMTAB
  return f;
}

// A DWARF 4 line table for two files, assembled by hand (DWARF 4, 6.2): line_base -5,
// line_range 14, opcode_base 13.
std::vector<uint8_t> dwarf4_line_unit() {
  std::vector<uint8_t> header = {
      1,  // minimum_instruction_length
      1,  // maximum_operations_per_instruction
      1,  // default_is_stmt
      static_cast<uint8_t>(-5),
      14,
      13  // line_base, line_range, opcode_base
  };
  const uint8_t lengths[12] = {0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1};
  header.insert(header.end(), lengths, lengths + 12);
  for (const char* s : {"/src/kern", ""}) header.insert(header.end(), s, s + std::strlen(s) + 1);
  for (const char* s : {"a.c", "b.c"}) {
    header.insert(header.end(), s, s + std::strlen(s) + 1);
    header.insert(header.end(), {1, 0, 0});  // directory 1, no time or length
  }
  header.push_back(0);
  std::vector<uint8_t> program = {
      0,
      9,
      2,
      0x00,
      0x10,
      0,
      0,
      0,
      0,
      0,
      0,  // DW_LNE_set_address 0x1000
      3,
      9,                         // advance_line +9: line 10
      1,                         // copy: 0x1000 a.c:10
      13 + (2 - (-5)) + 14 * 8,  // special: address +8, line +2: 0x1008 a.c:12
      4,
      2,  // set_file b.c
      3,
      0x76,  // advance_line -10: line 2
      2,
      4,  // advance_pc +4
      1,  // copy: 0x100c b.c:2
      9,
      0x10,
      0,  // fixed_advance_pc +16: 0x101c
      0,
      1,
      1,  // end_sequence
  };
  std::vector<uint8_t> unit;
  auto put = [&unit](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) unit.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(2 + 4 + header.size() + program.size(), 4);  // unit_length
  put(4, 2);                                       // version
  put(header.size(), 4);                           // header_length
  unit.insert(unit.end(), header.begin(), header.end());
  unit.insert(unit.end(), program.begin(), program.end());
  return unit;
}

// A report naming `pc` as the sanitizer writes them.
std::string report_for(uint64_t pc) {
  char text[96];
  std::snprintf(text, sizeof text, "memcheck: dma.start at pc 0x%llx reads 4 bytes at 0x400",
                static_cast<unsigned long long>(pc));
  return text;
}

}  // namespace

TEST_CASE("the smoke kernel's DMAs map to the source lines that issue them", "[line_table]") {
  const std::vector<uint8_t> elf = mtia::test::file_bytes(MTIA_SMOKE_KERNEL_ELF);
  auto table = LineTable::from_elf(elf);
  REQUIRE(table.ok());
  REQUIRE_FALSE(table.value().empty());
  // The kernel issues DMAs in two places: mtia_dma_in(...) and mtia_dma_out(...).
  std::set<uint32_t> expected = lines_with(MTIA_SMOKE_KERNEL_SOURCE, "mtia_dma_in(");
  const std::set<uint32_t> out = lines_with(MTIA_SMOKE_KERNEL_SOURCE, "mtia_dma_out(");
  REQUIRE(expected.size() == 1);
  REQUIRE(out.size() == 1);
  expected.insert(out.begin(), out.end());

  const std::vector<uint64_t> pcs = dma_starts(elf);
  REQUIRE(pcs.size() >= 2);
  std::set<uint32_t> got;
  for (uint64_t pc : pcs) {
    auto line = table.value().find(pc);
    REQUIRE(line.has_value());
    CHECK_THAT(line->file, Catch::EndsWith("src/smoke.c"));
    got.insert(line->line);
  }
  CHECK(got == expected);

  // A report's pcs are followed by their file (its last two path components) and line.
  const std::string report = report_for(pcs[0]);
  const std::string annotated = table.value().annotate(report);
  CHECK(annotated == report.substr(0, report.find(" reads")) +
                         " (src/smoke.c:" + std::to_string(table.value().find(pcs[0])->line) + ")" +
                         report.substr(report.find(" reads")));
  // Addresses outside the code are left alone.
  CHECK(table.value().annotate("at pc 0x0 and at 0x10") == "at pc 0x0 and at 0x10");
}

TEST_CASE("a hand-assembled DWARF 4 line program gives the standard's rows", "[line_table]") {
  auto table = LineTable::from_elf(elf_with_debug_line(dwarf4_line_unit()));
  REQUIRE(table.ok());
  const LineTable& t = table.value();
  CHECK(t.size() == 3);
  CHECK_FALSE(t.find(0xfff).has_value());
  CHECK(t.find(0x1000)->file == "/src/kern/a.c");
  CHECK(t.find(0x1000)->line == 10);
  CHECK(t.find(0x1007)->line == 10);
  CHECK(t.find(0x1008)->line == 12);
  CHECK(t.find(0x100b)->line == 12);
  CHECK(t.find(0x100c)->file == "/src/kern/b.c");
  CHECK(t.find(0x100c)->line == 2);
  CHECK(t.find(0x101b)->line == 2);
  CHECK_FALSE(t.find(0x101c).has_value());  // the end of the sequence
  CHECK(t.annotate("dma.start at pc 0x1008") == "dma.start at pc 0x1008 (kern/a.c:12)");
  CHECK(t.annotate("pc 0x100c", {}, 1) == "pc 0x100c (b.c:2)");
}

TEST_CASE("a stop inside a called function names the line of the call", "[line_table]") {
  using Frames = std::vector<LineTable::Frame>;
  // f [0x1000, 0x100c) is a.c's, g [0x100c, 0x101c) b.c's (the DWARF 4 unit above).
  auto table = LineTable::from_elf(
      elf_with_debug_line(dwarf4_line_unit(), {{0x1000, 0x100c}, {0x100c, 0x101c}}));
  REQUIRE(table.ok());
  const LineTable& t = table.value();
  // g stopped at 0x1010; ra 0x100c: the call at 0x1008, a.c line 12.
  CHECK(t.annotate("fault at pc 0x1010: x", Frames{{0x1010, 0x100c}}) ==
        "fault at pc 0x1010 (kern/b.c:2, called from kern/a.c:12): x");
  // Only the frame's own pc gets the caller.
  CHECK(t.annotate("pc 0x1000 then pc 0x1010", Frames{{0x1010, 0x100c}}) ==
        "pc 0x1000 (kern/a.c:10) then pc 0x1010 (kern/b.c:2, called from kern/a.c:12)");
  // ra inside the stopped function (it called something since it was entered): no caller.
  CHECK(t.annotate("pc 0x1010", Frames{{0x1010, 0x1018}}) == "pc 0x1010 (kern/b.c:2)");
  // ra outside every function, or 0.
  CHECK(t.annotate("pc 0x1010", Frames{{0x1010, 0x4000}}) == "pc 0x1010 (kern/b.c:2)");
  CHECK(t.annotate("pc 0x1010", Frames{{0x1010, 0}}) == "pc 0x1010 (kern/b.c:2)");
  // Two frames at one pc, called from different lines: each pc of the text takes the first
  // frame of its value not taken yet, in the text's order (a race's two PEs in one function).
  CHECK(t.annotate("PE 0 at pc 0x1010, PE 1 at pc 0x1010",
                   Frames{{0x1010, 0x100c}, {0x1010, 0x1004}}) ==
        "PE 0 at pc 0x1010 (kern/b.c:2, called from kern/a.c:12), PE 1 at pc 0x1010 "
        "(kern/b.c:2, called from kern/a.c:10)");
  // A pc named more often than there are frames for it: the others get their line only.
  CHECK(t.annotate("pc 0x1010 and pc 0x1010", Frames{{0x1010, 0x100c}}) ==
        "pc 0x1010 (kern/b.c:2, called from kern/a.c:12) and pc 0x1010 (kern/b.c:2)");
}

TEST_CASE("an image without debug information has an empty line table", "[line_table]") {
  auto table = LineTable::from_elf(elf_with_debug_line({}));
  REQUIRE(table.ok());
  CHECK(table.value().empty());
  std::vector<uint8_t> no_sections(64, 0);
  std::memcpy(no_sections.data(),
              "\x7f"
              "ELF",
              4);
  CHECK(LineTable::from_elf(no_sections).value().empty());
  CHECK(table.value().annotate("pc 0x1000") == "pc 0x1000");
}

TEST_CASE("damaged debug information is a reason, not a crash", "[line_table]") {
  SECTION("a unit longer than its section") {
    std::vector<uint8_t> unit = dwarf4_line_unit();
    unit[0] = 0xf0;
    auto table = LineTable::from_elf(elf_with_debug_line(unit));
    REQUIRE_FALSE(table.ok());
    CHECK_THAT(table.error().reason, Contains("runs past the end of .debug_line"));
  }
  SECTION("a DWARF version it does not read") {
    std::vector<uint8_t> unit = dwarf4_line_unit();
    unit[4] = 7;
    auto table = LineTable::from_elf(elf_with_debug_line(unit));
    REQUIRE_FALSE(table.ok());
    CHECK_THAT(table.error().reason, Contains("DWARF version 7"));
  }
  SECTION("a section header table outside the file") {
    std::vector<uint8_t> f = elf_with_debug_line(dwarf4_line_unit());
    f.resize(f.size() - 10);
    auto table = LineTable::from_elf(f);
    REQUIRE_FALSE(table.ok());
    CHECK_THAT(table.error().reason, Contains("section header table"));
  }
  SECTION("random damage to the smoke kernel's .debug_line") {
    const std::vector<uint8_t> elf = mtia::test::file_bytes(MTIA_SMOKE_KERNEL_ELF);
    mtia::test::ElfSection line;
    for (const mtia::test::ElfSection& s : mtia::test::elf_sections(elf)) {
      if (s.name == ".debug_line") line = s;
    }
    REQUIRE(line.size > 0);
    std::mt19937 rng(7);
    for (int round = 0; round < 2000; ++round) {
      std::vector<uint8_t> f = elf;
      for (int k = 0; k < 4; ++k) {
        f[line.offset + rng() % line.size] = static_cast<uint8_t>(rng());
      }
      auto table = LineTable::from_elf(f);  // either a table or a reason; never out of bounds
      if (table.ok()) (void)table.value().annotate("pc 0x10000 pc 0x");
    }
  }
}
