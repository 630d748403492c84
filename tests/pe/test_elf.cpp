// The ELF loader and Program checks: what loads, and every rejection with its reason.
#include <catch2/catch.hpp>
#include <cstring>

#include "core_harness.h"

using namespace pe_test;
using Catch::Matchers::Contains;
using mtia::sim::pe::ElfImage;
using mtia::sim::pe::parse_elf;
using mtia::sim::pe::Program;
using mtia::sim::pe::Segment;

namespace {

// Builds ELF64 files byte by byte from the gABI layout (independent of the loader).
struct ElfBuilder {
  struct Phdr {
    uint32_t type = 1;   // PT_LOAD
    uint32_t flags = 5;  // R X
    uint64_t vaddr = kCode;
    std::vector<uint8_t> data;
    uint64_t memsz = 0;  // 0: data.size()
  };
  uint8_t ei_class = 2, ei_data = 1, ei_version = 1;
  uint16_t type = 2, machine = 243, phentsize = 56;
  uint32_t flags = 0;
  uint64_t entry = kCode;
  std::vector<Phdr> phdrs;

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> f(64 + 56 * phdrs.size(), 0);
    auto put = [&f](size_t at, uint64_t v, int bytes) {
      for (int i = 0; i < bytes; ++i) f[at + i] = static_cast<uint8_t>(v >> (8 * i));
    };
    f[0] = 0x7f;
    f[1] = 'E';
    f[2] = 'L';
    f[3] = 'F';
    f[4] = ei_class;
    f[5] = ei_data;
    f[6] = ei_version;
    put(16, type, 2);
    put(18, machine, 2);
    put(20, 1, 4);
    put(24, entry, 8);
    put(32, 64, 8);  // e_phoff
    put(48, flags, 4);
    put(52, 64, 2);
    put(54, phentsize, 2);
    put(56, phdrs.size(), 2);
    for (size_t i = 0; i < phdrs.size(); ++i) {
      const Phdr& p = phdrs[i];
      const size_t h = 64 + 56 * i;
      const size_t offset = f.size();
      f.insert(f.end(), p.data.begin(), p.data.end());
      put(h, p.type, 4);
      put(h + 4, p.flags, 4);
      put(h + 8, offset, 8);
      put(h + 16, p.vaddr, 8);
      put(h + 24, p.vaddr, 8);
      put(h + 32, p.data.size(), 8);
      put(h + 40, p.memsz != 0 ? p.memsz : p.data.size(), 8);
      put(h + 48, 4096, 8);
    }
    return f;
  }

  static ElfBuilder minimal() {
    ElfBuilder b;
    Phdr code;
    code.data = to_bytes({addi(10, 0, 42), kEcall});
    b.phdrs.push_back(code);
    return b;
  }
};

std::string rejection(const std::vector<uint8_t>& file) {
  auto r = parse_elf(file);
  REQUIRE_FALSE(r.ok());
  return r.error().reason;
}

std::string program_rejection(const ElfImage& image) {
  auto r = Program::create(image);
  REQUIRE_FALSE(r.ok());
  return r.error().reason;
}

}  // namespace

TEST_CASE("a minimal ELF loads and runs", "[pe][elf]") {
  auto b = ElfBuilder::minimal();
  ElfBuilder::Phdr bss;
  bss.flags = 6;  // R W
  bss.vaddr = kCode + 0x1000;
  bss.data = {1, 2, 3};
  bss.memsz = 64;
  b.phdrs.push_back(bss);
  ElfBuilder::Phdr note;
  note.type = 4;  // PT_NOTE: ignored
  note.data = {0, 0, 0, 0};
  b.phdrs.push_back(note);
  auto parsed = parse_elf(b.build());
  REQUIRE(parsed.ok());
  const ElfImage& image = parsed.value();
  CHECK(image.entry == kCode);
  REQUIRE(image.segments.size() == 2);
  CHECK(image.segments[0].executable);
  CHECK_FALSE(image.segments[0].writable);
  CHECK(image.segments[1].writable);
  CHECK(image.segments[1].mem_bytes == 64);
  CHECK(image.segments[1].bytes == std::vector<uint8_t>{1, 2, 3});

  Machine m;
  m.core = std::make_unique<mtia::sim::pe::RiscvCore>(m.config, m.ls, m.port);
  REQUIRE(m.core->start(program_of(image), m.launch));
  REQUIRE(m.core->run(10).reason == mtia::sim::pe::StopReason::kExit);
  CHECK(m.core->exit_status() == 42);
  uint8_t data[5];
  REQUIRE(m.core->read_memory(kCode + 0x1000, data));
  CHECK(data[0] == 1);
  CHECK(data[2] == 3);
  CHECK(data[3] == 0);  // zero fill up to p_memsz
  CHECK(data[4] == 0);
}

TEST_CASE("the ELF reader rejects what the core cannot run", "[pe][elf]") {
  SECTION("too short") {
    CHECK_THAT(rejection({0x7f, 'E', 'L', 'F'}), Contains("too short"));
  }
  SECTION("no magic") {
    auto f = ElfBuilder::minimal().build();
    f[1] = 'X';
    CHECK_THAT(rejection(f), Contains("not an ELF file"));
  }
  SECTION("ELF32") {
    auto b = ElfBuilder::minimal();
    b.ei_class = 1;
    CHECK_THAT(rejection(b.build()), Contains("riscv64"));
  }
  SECTION("big-endian") {
    auto b = ElfBuilder::minimal();
    b.ei_data = 2;
    CHECK_THAT(rejection(b.build()), Contains("little-endian"));
  }
  SECTION("bad ident version") {
    auto b = ElfBuilder::minimal();
    b.ei_version = 0;
    CHECK_THAT(rejection(b.build()), Contains("version"));
  }
  SECTION("x86-64") {
    auto b = ElfBuilder::minimal();
    b.machine = 62;
    CHECK_THAT(rejection(b.build()), Contains("EM_RISCV"));
  }
  SECTION("relocatable object") {
    auto b = ElfBuilder::minimal();
    b.type = 1;
    CHECK_THAT(rejection(b.build()), Contains("ld.lld"));
  }
  SECTION("shared object") {
    auto b = ElfBuilder::minimal();
    b.type = 3;
    CHECK_THAT(rejection(b.build()), Contains("static"));
  }
  SECTION("core file") {
    auto b = ElfBuilder::minimal();
    b.type = 4;
    CHECK_THAT(rejection(b.build()), Contains("ET_EXEC"));
  }
  SECTION("compressed instructions") {
    auto b = ElfBuilder::minimal();
    b.flags = 0x1;
    CHECK_THAT(rejection(b.build()), Contains("rv64im"));
  }
  SECTION("hard-float ABI") {
    auto b = ElfBuilder::minimal();
    b.flags = 0x4;  // double-float ABI
    CHECK_THAT(rejection(b.build()), Contains("lp64"));
  }
  SECTION("RVE") {
    auto b = ElfBuilder::minimal();
    b.flags = 0x8;
    CHECK_THAT(rejection(b.build()), Contains("RVE"));
  }
  SECTION("odd program header size") {
    auto b = ElfBuilder::minimal();
    b.phentsize = 32;
    CHECK_THAT(rejection(b.build()), Contains("e_phentsize"));
  }
  SECTION("program headers past the end") {
    auto f = ElfBuilder::minimal().build();
    f.resize(64 + 20);
    CHECK_THAT(rejection(f), Contains("program headers"));
  }
  SECTION("segment data past the end") {
    auto f = ElfBuilder::minimal().build();
    f.resize(f.size() - 1);
    CHECK_THAT(rejection(f), Contains("past the end"));
  }
  SECTION("p_filesz > p_memsz") {
    auto b = ElfBuilder::minimal();
    b.phdrs[0].memsz = 4;
    CHECK_THAT(rejection(b.build()), Contains("p_filesz"));
  }
  SECTION("dynamic linking") {
    auto b = ElfBuilder::minimal();
    ElfBuilder::Phdr dyn;
    dyn.type = 2;
    dyn.data = {0};
    b.phdrs.push_back(dyn);
    CHECK_THAT(rejection(b.build()), Contains("dynamic"));
  }
  SECTION("thread-local storage") {
    auto b = ElfBuilder::minimal();
    ElfBuilder::Phdr tls;
    tls.type = 7;
    tls.data = {0};
    b.phdrs.push_back(tls);
    CHECK_THAT(rejection(b.build()), Contains("PT_TLS"));
  }
  SECTION("no loadable segment") {
    auto b = ElfBuilder::minimal();
    b.phdrs[0].type = 4;
    CHECK_THAT(rejection(b.build()), Contains("no PT_LOAD"));
  }
  SECTION("segment wrapping the address space") {
    auto b = ElfBuilder::minimal();
    b.phdrs[0].vaddr = ~0ull - 3;
    CHECK_THAT(rejection(b.build()), Contains("wraps"));
  }
}

TEST_CASE("read_elf_file names a missing file", "[pe][elf]") {
  auto r = mtia::sim::pe::read_elf_file("/nonexistent/kernel.elf");
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().reason, Contains("/nonexistent/kernel.elf"));
}

TEST_CASE("Program rejects images that do not fit the core's address space", "[pe][elf]") {
  auto image_with = [](Segment extra) {
    ElfImage image;
    image.entry = kCode;
    image.segments.push_back(code_segment({kEcall}));
    image.segments.push_back(std::move(extra));
    return image;
  };
  Segment data;
  data.readable = data.writable = true;
  data.bytes = {1};
  data.mem_bytes = 8;

  SECTION("segment outside both windows") {
    Segment s = data;
    s.vaddr = 0x8000'0000;
    CHECK_THAT(program_rejection(image_with(s)), Contains("outside the image window"));
  }
  SECTION("segment straddling the end of the image window") {
    Segment s = data;
    s.vaddr = MTIA_PE_IMAGE_BASE + MTIA_PE_IMAGE_MAX_BYTES - 4;
    CHECK_THAT(program_rejection(image_with(s)), Contains("outside the image window"));
  }
  SECTION("writable and executable") {
    Segment s = data;
    s.vaddr = kCode + 0x1000;
    s.executable = true;
    CHECK_THAT(program_rejection(image_with(s)), Contains("writable and executable"));
  }
  SECTION("code in the local store") {
    Segment s = code_segment({kEcall}, MTIA_PE_LS_BASE);
    CHECK_THAT(program_rejection(image_with(s)), Contains("code in the local store"));
  }
  SECTION("overlapping segments") {
    Segment s = data;
    s.vaddr = kCode;
    s.writable = false;
    CHECK_THAT(program_rejection(image_with(s)), Contains("overlaps"));
  }
  SECTION("misaligned code") {
    ElfImage image;
    image.entry = kCode + 2;
    Segment s = code_segment({kEcall}, kCode + 2);
    image.segments.push_back(s);
    CHECK_THAT(program_rejection(image), Contains("4-byte aligned"));
  }
  SECTION("entry outside the code") {
    ElfImage image = image_with([&] {
      Segment s = data;
      s.vaddr = kCode + 0x1000;
      return s;
    }());
    image.entry = kCode + 0x1000;
    CHECK_THAT(program_rejection(image), Contains("entry point"));
  }
  SECTION("no code at all") {
    ElfImage image;
    image.entry = kCode;
    Segment s = data;
    s.vaddr = kCode;
    image.segments.push_back(s);
    CHECK_THAT(program_rejection(image), Contains("no executable segment"));
  }
}

TEST_CASE("the kernels of one image share its decode; a bad entry is refused", "[pe][elf]") {
  ElfImage image;
  image.entry = kCode;
  // Two kernels: the first exits with 1, the second (one word on) with 2.
  image.segments.push_back(code_segment({addi(10, 0, 1), kEcall, addi(10, 0, 2), kEcall}));
  auto first = Program::create(image);
  REQUIRE(first.ok());
  auto second = first.value()->with_entry(kCode + 8);
  REQUIRE(second.ok());
  CHECK(second.value()->entry() == kCode + 8);
  CHECK(first.value()->entry() == kCode);
  CHECK(second.value()->code() == first.value()->code());  // the same decoded words

  std::vector<uint8_t> ls(64 * 1024);
  ScriptedPort port;
  for (const auto& [program, status] :
       {std::pair{first.value(), 1}, std::pair{second.value(), 2}}) {
    mtia::sim::pe::RiscvCore core(mtia::sim::pe::CoreConfig{}, ls, port);
    REQUIRE(core.start(program, mtia::sim::pe::LaunchContext{}));
    CHECK(core.run(100).reason == mtia::sim::pe::StopReason::kExit);
    CHECK(core.exit_status() == status);
  }

  for (const uint64_t bad : {kCode + 2, kCode + 16, uint64_t{0}}) {
    INFO("entry " << bad);
    auto r = first.value()->with_entry(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Contains("entry point"));
  }
}
