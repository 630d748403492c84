// The kernel metadata format (mtia/isa/pe/kernel_meta.h): the library's module as built, and
// the parser's rejections of malformed records, sections and files.
#include <algorithm>
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "kernel_harness.h"
#include "ref.h"

using namespace kt;
using mtia::isa::KernelArgKind;

namespace {

// The signatures as docs/kernels.md lists them, one letter per argument:
// p ptr, i i64, f f32, d f64, t dtype. Written by hand, not derived from the sources.
const std::map<std::string, std::string> kExpected = {
    // index.c
    {"index_gather",
     "pppppptt"
     "iii"
     "iiii"
     "iiii"
     "i"
     "iii"
     "iii"
     "iii"},
    {"index_put",
     "ppppppptt"
     "iiii"
     "iiii"
     "iiii"
     "i"
     "iii"
     "iii"
     "iii"},
    {"embedding_bag",
     "pppppppptt"
     "iiiiiiiiii"},
    {"gather_lines",
     "ppptt"
     "iiii"
     "i"
     "iiii"
     "iiii"
     "iiii"},
    {"scatter_lines",
     "ppptt"
     "iii"
     "iiii"
     "i"
     "iiii"
     "iiii"
     "iiii"},
    {"cumsum",
     "pptt"
     "iii"
     "iii"
     "iii"},
    {"tri",
     "ppt"
     "iiiii"
     "iii"
     "iii"},
    {"compact",
     "ppppt"
     "ii"
     "iiii"
     "iiii"
     "iiii"},
    // sort.c
    {"sort",
     "ppppt"
     "iiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    // random.c
    {"philox", "ppiii"},
    // elementwise.c
    {"fill",
     "pti"
     "iiii"
     "iiii"},
    {"copy",
     "ppt"
     "iiii"
     "iiii"
     "iiii"},
    {"cast",
     "pptt"
     "iiii"
     "iiii"
     "iiii"},
    {"unary",
     "ppit"
     "iiii"
     "iiii"
     "iiii"},
    {"binary",
     "pppit"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    {"pointwise",
     "pppppptii"
     "iiiiii"
     "iiiiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    {"binary_scalar",
     "ppiti"
     "iiii"
     "iiii"
     "iiii"},
    {"where",
     "ppppt"
     "iiii"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    {"clamp",
     "pptii"
     "iiii"
     "iiii"
     "iiii"},
    {"sum",
     "pptti"
     "iiii"
     "iiii"
     "iiii"},
    {"mean",
     "ppti"
     "iiii"
     "iiii"
     "iiii"},
    {"amax",
     "ppti"
     "iiii"
     "iiii"
     "iiii"},
    {"amin",
     "ppti"
     "iiii"
     "iiii"
     "iiii"},
    {"var",
     "pptii"
     "iiii"
     "iiii"
     "iiii"},
    {"max_dim",
     "pppti"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    {"min_dim",
     "pppti"
     "iiii"
     "iiii"
     "iiii"
     "iiii"},
    {"softmax",
     "ppti"
     "iiii"
     "iiii"
     "iiii"},
    {"log_softmax",
     "ppti"
     "iiii"
     "iiii"
     "iiii"},
    {"layer_norm",
     "ppppppti"
     "f"
     "iiiiii"},
    {"matmul",
     "ppptt"
     "iii"
     "iiiiii"},
    {"bmm",
     "ppptt"
     "iiii"
     "iiiiiiiii"},
    {"addmm",
     "pppptt"
     "iii"
     "ff"
     "iiiiiiii"},
    {"im2col",
     "ppt"
     "ii"
     "iii"
     "iiiii"
     "iiiiiiiiiiiiiii"},
    {"pool2d",
     "pppt"
     "iiiiiiiiiiiiiiiii"
     "iiii"
     "iiii"
     "iiii"},
    {"pool2d_backward",
     "pppt"
     "iiiiiiiiiiiiiiiii"
     "iiii"
     "iiii"
     "iiii"},
    {"channel_moments",
     "pppt"
     "iii"
     "iii"},
    {"channel_grad_sums",
     "pppppt"
     "iiii"
     "iii"
     "iii"},
    {"upsample",
     "ppt"
     "iiiiiiiiiii"
     "fff"
     "iiiii"
     "iiiii"},
    {"upsample_backward",
     "ppt"
     "iiiiiiiiiii"
     "fff"
     "iiiii"
     "iiiii"},
    {"nll_loss",
     "pppppt"
     "iiiii"
     "iii"
     "ii"
     "ii"
     "i"},
    {"nll_loss_backward",
     "pppppt"
     "iiiii"
     "iii"
     "ii"
     "ii"
     "i"},
};

char letter(KernelArgKind k) {
  switch (k) {
    case KernelArgKind::kPointer:
      return 'p';
    case KernelArgKind::kI64:
      return 'i';
    case KernelArgKind::kF32:
      return 'f';
    case KernelArgKind::kF64:
      return 'd';
    case KernelArgKind::kDtype:
      return 't';
  }
  return '?';
}

std::vector<uint8_t> library_bytes() {
  std::ifstream f(MTIA_KERNELS_ELF, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void set_sig(mtia_kernel_meta& m, const char* sig) {
  std::memset(m.signature, 0, sizeof m.signature);
  std::strcpy(m.signature, sig);
}

mtia_kernel_meta good_record() {
  mtia_kernel_meta m;
  std::memset(&m, 0, sizeof m);
  m.magic = MTIA_KMETA_MAGIC;
  m.version = MTIA_KMETA_VERSION;
  m.record_bytes = sizeof m;
  m.entry = 0x10040;
  std::strcpy(m.name, "scale");
  set_sig(m, "out:ptr in:ptr n:i64 factor:f32 bias:f64 dtype:dtype");
  return m;
}

mtia::isa::Result<mtia::isa::KernelInfo> parse(const mtia_kernel_meta& m) {
  return mtia::isa::parse_kernel_meta_record(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&m), sizeof m));
}

// Position of the first occurrence of `needle` in `hay`.
size_t find(const std::vector<uint8_t>& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  REQUIRE(it != hay.end());
  return static_cast<size_t>(it - hay.begin());
}

}  // namespace

TEST_CASE("the kernel library module lists every kernel with its signature", "[kernels][meta]") {
  const auto& info = Module::library().info();
  REQUIRE(info.kernels.size() == kExpected.size());
  std::set<uint64_t> entries;
  for (const auto& k : info.kernels) {
    INFO(k.describe());
    auto it = kExpected.find(k.name);
    REQUIRE(it != kExpected.end());
    std::string sig;
    for (const auto& a : k.args) sig += letter(a.kind);
    CHECK(sig == it->second);
    CHECK(k.arg_bytes() == 8 * sig.size());
    CHECK(k.entry % 4 == 0);
    CHECK(k.entry >= MTIA_PE_IMAGE_BASE);
    entries.insert(k.entry);
  }
  CHECK(entries.size() == info.kernels.size());  // every kernel has its own entry
  const auto* mm = info.find("addmm");
  REQUIRE(mm != nullptr);
  CHECK(mm->pointer_args() == 4);
  CHECK(mm->args[9].name == "alpha");
  CHECK(mm->describe().rfind("addmm(out:ptr, bias:ptr, a:ptr", 0) == 0);
  CHECK(info.find("no_such_kernel") == nullptr);
}

TEST_CASE("a module's ELF entry names no kernel and exits with NO_KERNEL", "[kernels][meta]") {
  Device dev;
  auto r = dev.run(Module::library().elf_entry_program(), {}, grid(1));
  CHECK(r.status() == MTIA_KSTATUS_NO_KERNEL);
}

TEST_CASE("kernel metadata records parse and are checked field by field", "[kernels][meta]") {
  auto ok = parse(good_record());
  REQUIRE(ok.ok());
  CHECK(ok.value().name == "scale");
  CHECK(ok.value().entry == 0x10040);
  REQUIRE(ok.value().args.size() == 6);
  CHECK(ok.value().args[3].name == "factor");
  CHECK(ok.value().args[3].kind == KernelArgKind::kF32);
  CHECK(ok.value().args[4].kind == KernelArgKind::kF64);
  CHECK(ok.value().args[5].kind == KernelArgKind::kDtype);

  struct Case {
    const char* what;
    std::function<void(mtia_kernel_meta&)> mutate;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"magic", [](auto& m) { m.magic = 0x12345678; }, "magic"},
      {"version", [](auto& m) { m.version = 2; }, "version 2 is not supported"},
      {"record size", [](auto& m) { m.record_bytes = 512; }, "record_bytes is 512"},
      {"flags", [](auto& m) { m.flags = 1; }, "reserved"},
      {"reserved0", [](auto& m) { m.reserved0 = 1; }, "reserved"},
      {"reserved1", [](auto& m) { m.reserved1[1] = 1; }, "reserved"},
      {"entry alignment", [](auto& m) { m.entry = 0x10042; }, "not 4-byte aligned"},
      {"empty name", [](auto& m) { std::memset(m.name, 0, sizeof m.name); }, "not an identifier"},
      {"name charset", [](auto& m) { std::strcpy(m.name, "9lives"); }, "not an identifier"},
      {"name terminator", [](auto& m) { std::memset(m.name, 'a', sizeof m.name); },
       "not NUL-terminated"},
      {"bytes after the name", [](auto& m) { m.name[40] = 'x'; }, "after its terminating NUL"},
      {"bytes after the signature", [](auto& m) { m.signature[900] = 'x'; },
       "after its terminating NUL"},
      {"kind", [](auto& m) { set_sig(m, "out:ptr n:int"); }, "kind 'int'"},
      {"entry without kind", [](auto& m) { set_sig(m, "out:ptr n"); }, "is not 'name:kind'"},
      {"double space", [](auto& m) { set_sig(m, "out:ptr  n:i64"); }, "is not 'name:kind'"},
      {"trailing space", [](auto& m) { set_sig(m, "out:ptr "); }, "is not 'name:kind'"},
      {"argument name", [](auto& m) { set_sig(m, "o-ut:ptr"); }, "not an identifier"},
      {"repeated argument", [](auto& m) { set_sig(m, "a:ptr a:i64"); },
       "repeats the argument name 'a'"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    mtia_kernel_meta m = good_record();
    c.mutate(m);
    auto r = parse(m);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains(c.reason));
  }

  // At most MTIA_KMETA_MAX_ARGS arguments.
  mtia_kernel_meta m = good_record();
  std::string sig;
  for (int i = 0; i <= MTIA_KMETA_MAX_ARGS; ++i)
    sig += (i ? " a" : "a") + std::to_string(i) + ":i64";
  REQUIRE(sig.size() < sizeof m.signature);
  std::memset(m.signature, 0, sizeof m.signature);
  std::memcpy(m.signature, sig.data(), sig.size());
  auto r = parse(m);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(r.error().reason, Catch::Contains("more than 64 arguments"));
  // No arguments at all is a valid signature.
  std::memset(m.signature, 0, sizeof m.signature);
  REQUIRE(parse(m).ok());
  CHECK(parse(m).value().args.empty());
  // A short buffer is not a record.
  CHECK_FALSE(mtia::isa::parse_kernel_meta_record(
                  std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(&m), 100))
                  .ok());
}

TEST_CASE("a metadata section is whole records with unique kernel names", "[kernels][meta]") {
  std::vector<uint8_t> sec(2 * sizeof(mtia_kernel_meta));
  mtia_kernel_meta a = good_record(), b = good_record();
  std::strcpy(b.name, "other");
  std::memcpy(sec.data(), &a, sizeof a);
  std::memcpy(sec.data() + sizeof a, &b, sizeof b);
  auto ok = mtia::isa::parse_kernel_meta_section(sec);
  REQUIRE(ok.ok());
  CHECK(ok.value().size() == 2);

  std::memcpy(sec.data() + sizeof a, &a, sizeof a);
  auto dup = mtia::isa::parse_kernel_meta_section(sec);
  REQUIRE_FALSE(dup.ok());
  CHECK_THAT(dup.error().reason, Catch::Contains("'scale' is defined twice"));

  sec.resize(sec.size() - 8);
  auto torn = mtia::isa::parse_kernel_meta_section(sec);
  REQUIRE_FALSE(torn.ok());
  CHECK_THAT(torn.error().reason, Catch::Contains("not a multiple"));

  b.version = 9;
  std::vector<uint8_t> bad(2 * sizeof b);
  std::memcpy(bad.data(), &a, sizeof a);
  std::memcpy(bad.data() + sizeof a, &b, sizeof b);
  auto second = mtia::isa::parse_kernel_meta_section(bad);
  REQUIRE_FALSE(second.ok());
  CHECK_THAT(second.error().reason, Catch::Contains("record 1"));
}

TEST_CASE("kernel modules that are not well-formed are rejected with a reason", "[kernels][meta]") {
  const std::vector<uint8_t> lib = library_bytes();
  REQUIRE(mtia::isa::parse_kernel_module(lib).ok());

  SECTION("not an ELF file") {
    std::vector<uint8_t> junk(256, 0x42);
    auto r = mtia::isa::parse_kernel_module(junk);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("not an ELF file"));
  }
  SECTION("truncated before the section headers") {
    std::vector<uint8_t> cut(lib.begin(), lib.begin() + 4096);
    auto r = mtia::isa::parse_kernel_module(cut);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("outside the file"));
  }
  SECTION("no metadata section (the smoke kernel is a plain image)") {
    std::ifstream f(MTIA_SMOKE_KERNEL_ELF, std::ios::binary);
    std::vector<uint8_t> smoke{std::istreambuf_iterator<char>(f), {}};
    auto r = mtia::isa::parse_kernel_module(smoke);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("no .mtia.meta section"));
  }
  SECTION("a corrupted record") {
    std::vector<uint8_t> bad = lib;
    bad[find(bad, "MTKM")] = 'X';
    auto r = mtia::isa::parse_kernel_module(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("magic"));
  }
  SECTION("an entry outside the code") {
    std::vector<uint8_t> bad = lib;
    const size_t rec = find(bad, "MTKM");
    const uint64_t entry = 0x00200000;  // the argument block: not executable
    std::memcpy(bad.data() + rec + offsetof(mtia_kernel_meta, entry), &entry, 8);
    auto r = mtia::isa::parse_kernel_module(bad);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("not inside an executable segment"));
  }
}

TEST_CASE("launch arguments are checked against the signature, and by the kernel",
          "[kernels][meta]") {
  Device dev;
  const uint64_t out = dev.alloc(64);
  std::vector<Arg> args = {ptr(out), dtype(kF32), i64(0), i64(1), i64(1), i64(1),
                           i64(4),   i64(4),      i64(4), i64(4), i64(1)};
  REQUIRE(dev.launch(Module::library(), "fill", args).ok());
  auto short_args = args;
  short_args.pop_back();
  CHECK_THROWS_WITH(dev.launch(Module::library(), "fill", short_args),
                    Catch::Contains("takes 11 arguments, 10 given"));
  auto wrong_kind = args;
  wrong_kind[1] = i64(kF32);
  CHECK_THROWS_WITH(dev.launch(Module::library(), "fill", wrong_kind),
                    Catch::Contains("argument 1 (dtype) must be dtype, got i64"));
  CHECK_THROWS_WITH(dev.launch(Module::library(), "fil", args), Catch::Contains("no kernel 'fil'"));
  // Past the host's check, the kernel still refuses a block of the wrong size.
  std::vector<uint8_t> block(10 * 8, 0);
  auto r = dev.run(Module::library().program("fill"), block, grid(2));
  CHECK(r.status() == MTIA_KSTATUS_BAD_ARG_BYTES);
}
