// The device sanitizer's memcheck (docs/sanitizer.md) through the public API: the smoke kernel
// (out[i] = in[i] + 1, int32) given a length larger than its tensors reads past the end of its
// input into the neighbouring allocation, writes past the end of its output, or reads an
// allocation that was freed. Each bad launch fails its stream with a report naming the kernel,
// the PE, the pc of the dma.start, the access and the allocation, and the device keeps working;
// without the sanitizer the same launch succeeds, reading the neighbour's bytes.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/isa/pe/pe_ops.h"
#include "scoped_env.h"

using namespace mtia;
using mtia::test::expect_error;
using mtia::test::hex;

namespace {

// The instruction word at virtual address `pc` of the ELF64 file's executable sections.
uint32_t instruction_at(const std::vector<uint8_t>& elf, uint64_t pc) {
  for (const test::ElfSection& s : test::elf_sections(elf)) {
    if ((s.flags & 0x4) == 0 || pc < s.addr || pc + 4 > s.addr + s.size) continue;  // SHF_EXECINSTR
    return test::elf_read<uint32_t>(elf, s.offset + (pc - s.addr));
  }
  FAIL("pc " << test::hex(pc) << " is in no executable section of the kernel image");
  return 0;
}

// Every pc a report names ("dma.start at pc 0x...") is a dma.start of the kernel module.
void check_pc_is_dma_start(const std::string& report, const char* elf = MTIA_SMOKE_KERNEL_ELF) {
  const std::regex pc_re("dma\\.start at pc 0x([0-9a-f]+)");
  int found = 0;
  for (auto it = std::sregex_iterator(report.begin(), report.end(), pc_re);
       it != std::sregex_iterator(); ++it, ++found) {
    const uint64_t pc = std::stoull((*it)[1].str(), nullptr, 16);
    const uint32_t word = instruction_at(test::file_bytes(elf), pc);
    CHECK((word & 0x7F) == MTIA_PE_OPC_DMA);
    CHECK(((word >> 12) & 0x7) == MTIA_PE_F3_DMA);
    CHECK((word >> 25) == MTIA_PE_F7_V1);
  }
  CHECK(found > 0);
}

// The 1-based line of the smoke kernel's source that holds `text` (exactly one must).
std::string source_line_of(const std::string& text) {
  std::ifstream in(MTIA_SMOKE_KERNEL_SOURCE);
  REQUIRE(in);
  std::string line, found;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find(text) == std::string::npos) continue;
    REQUIRE(found.empty());
    found = std::to_string(n);
  }
  REQUIRE_FALSE(found.empty());
  return found;
}

DeviceOptions options(const char* sanitize, uint32_t unit_threads = 0) {
  DeviceOptions o = test::functional_options();
  o.sanitize = sanitize;
  o.unit_threads = unit_threads;
  o.inline_work_ns = 0;  // with helpers, every unit operation and DMA copy is handed over
  return o;
}

// Only the in-process device runs the sanitizer: a served one refuses it when it opens.
// The report of the stream's failed launch (its synchronize() must throw kDeviceFault).
std::string failure(Device& dev, Stream stream = {}) {
  try {
    dev.synchronize(stream);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kDeviceFault);
    return e.what();
  }
  FAIL("the launch did not fail");
  return {};
}

std::vector<int32_t> iota(size_t n, int32_t first) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int32_t>(i) * 3;
  return v;
}

// The smoke kernel over n elements of `in` into `out`, with its CPU reference.
void expect_smoke(Device& dev, DevicePtr out, const std::vector<int32_t>& in, size_t n) {
  const std::vector<int32_t> got = test::download<int32_t>(dev, out, n);
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += got[i] != in[i] + 1;
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("memcheck reports a read past a tensor into its neighbour", "[sanitizer]") {
  // in: 384 int32 (1536 bytes, a multiple of the 256-byte allocation granule, so the next
  // allocation starts right after it); the kernel is told 385. On a 1x2 grid PE 1 takes
  // elements 256..384: one DMA of 129 elements, the last of them the neighbour's first.
  const std::vector<int32_t> in_data = iota(384, 5), neighbour_data = iota(256, 7000);
  std::string first_report;
  for (const auto& [sanitize, unit_threads] : std::vector<std::pair<const char*, uint32_t>>{
           {"off", 0}, {"memcheck", 0}, {"memcheck", 1}}) {
    INFO("sanitize " << sanitize << ", unit_threads " << unit_threads);
    Device dev = Device::open(options(sanitize, unit_threads));
    const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
    const Kernel kernel = smoke.entry_kernel();
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr neighbour = test::upload(dev, neighbour_data);
    DevicePtr out = dev.malloc(4 * 512);
    REQUIRE(neighbour.address() == in.address() + 1536);
    dev.launch(kernel, {1, 2}, {in, out, int64_t{385}});
    if (std::string(sanitize) == "off") {
      // Silently wrong: the 385th result comes from the neighbour.
      dev.synchronize();
      std::vector<int32_t> expect = in_data;
      expect.push_back(neighbour_data[0]);
      expect_smoke(dev, out, expect, 385);
      continue;
    }
    CHECK(dev.properties().sanitize == "memcheck");
    const std::string report = failure(dev);
    INFO("report: " << report);
    CHECK_THAT(report, Catch::Contains("sanitizer: kernel '" + kernel.name + "' on a 1x2 grid"));
    CHECK_THAT(report, Catch::Contains("PE 1 (row 0, col 1): memcheck: dma.start at pc 0x"));
    CHECK_THAT(report, Catch::Contains("reads 516 bytes at " + hex(in.address() + 1024)));
    CHECK_THAT(report, Catch::Contains("runs 4 bytes past the end of the allocation at " +
                                       hex(in.address()) + " (1536 bytes) into the allocation at " +
                                       hex(neighbour.address()) + " (1024 bytes)"));
    check_pc_is_dma_start(report);
    // The kernel carries a line table (built with -g): the pc is followed by the source line
    // of the mtia_dma_in(...) that issued the DMA.
    CHECK_THAT(report, Catch::Contains("dma.start at pc 0x") &&
                           Catch::Contains(" (src/smoke.c:" + source_line_of("mtia_dma_in(") +
                                           ") reads 516 bytes"));
    // The same report at any host thread count.
    if (first_report.empty()) {
      first_report = report;
    } else {
      CHECK(report == first_report);
    }
    // The device, the failed stream included, keeps working: the right length passes.
    dev.launch(kernel, {1, 2}, {in, out, int64_t{384}});
    dev.synchronize();
    expect_smoke(dev, out, in_data, 384);
    test::check_device_works(dev);
  }
}

TEST_CASE("memcheck reports a write that straddles the end of its allocation", "[sanitizer]") {
  Device dev = Device::open(options("memcheck"));
  const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  const std::vector<int32_t> in_data = iota(512, -40);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr out = dev.malloc(4 * 128);
  Stream stream = dev.create_stream();
  dev.launch(smoke.entry_kernel(), {1, 1}, {in, out, int64_t{129}}, stream);
  const std::string report = failure(dev, stream);
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0): memcheck: dma.start at pc 0x"));
  CHECK_THAT(report, Catch::Contains("writes 516 bytes at " + hex(out.address())));
  CHECK_THAT(report, Catch::Contains("runs 4 bytes past the end of the allocation at " +
                                     hex(out.address()) + " (512 bytes)"));
  check_pc_is_dma_start(report);
  test::check_device_works(dev, stream);
}

TEST_CASE("memcheck reports a read of freed memory", "[sanitizer]") {
  Device dev = Device::open(options("memcheck"));
  const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  const std::vector<int32_t> in_data = iota(256, 11);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr out = dev.malloc(4 * 256);
  // Correct first (and the runtime's argument blocks exist before the free).
  dev.launch(smoke.entry_kernel(), {1, 1}, {in, out, int64_t{256}});
  dev.synchronize();
  expect_smoke(dev, out, in_data, 256);
  const uint64_t freed = in.address();
  dev.free(in);
  dev.launch(smoke.entry_kernel(), {1, 1}, {in, out, int64_t{256}});
  const std::string report = failure(dev);
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("reads 1024 bytes at " + hex(freed) +
                                     ": the access touches freed memory: the allocation at " +
                                     hex(freed) + " (1024 bytes), freed"));
  check_pc_is_dma_start(report);
  test::check_device_works(dev);
}

TEST_CASE("memcheck reports accesses that start outside every allocation", "[sanitizer]") {
  Device dev = Device::open(options("memcheck"));
  const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  // a: 100 bytes, in a 256-byte granule; b right after the granule. a + 128 is in a's padding:
  // memory the allocator reserved but nobody asked for.
  DevicePtr a = dev.malloc(100);
  DevicePtr b = dev.malloc(1024);
  REQUIRE(b.address() == a.address() + 256);
  DevicePtr out = dev.malloc(1024);
  const DevicePtr padding = a + 128;
  // 256 elements from the padding on: the access begins in no allocation and ends in b.
  dev.launch(smoke.entry_kernel(), {1, 1}, {padding, out, int64_t{256}});
  std::string report = failure(dev);
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("reads 1024 bytes at " + hex(padding.address()) +
                                     ": the access starts 128 bytes before the allocation at " +
                                     hex(b.address()) + " (1024 bytes)"));
  // 32 elements: the access lies wholly in the padding.
  dev.launch(smoke.entry_kernel(), {1, 1}, {padding, out, int64_t{32}});
  report = failure(dev);
  CHECK_THAT(report, Catch::Contains("reads 128 bytes at " + hex(padding.address()) +
                                     ": the access lies in no live allocation (it starts 28 "
                                     "bytes past the end of the allocation at " +
                                     hex(a.address()) + " (100 bytes))"));
  test::check_device_works(dev);
}

TEST_CASE("memcheck passes a correct kernel", "[sanitizer]") {
  Device dev = Device::open(options("memcheck"));
  const KernelModule smoke = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  const std::vector<int32_t> in_data = iota(5000, -2500);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr out = dev.malloc(4 * 5000);
  dev.launch(smoke.entry_kernel(), {2, 2}, {in, out, int64_t{5000}});
  dev.synchronize();
  expect_smoke(dev, out, in_data, 5000);
  // Allocations made after the launch, and a reused address, are live too.
  dev.free(out);
  DevicePtr again = dev.malloc(4 * 5000);
  dev.launch(smoke.entry_kernel(), {2, 2}, {in, again, int64_t{5000}});
  dev.synchronize();
  expect_smoke(dev, again, in_data, 5000);
}

TEST_CASE("a bad sanitizer setting is refused with its reason", "[sanitizer]") {
  expect_error(ErrorKind::kInvalidArgument,
               "DeviceOptions::sanitize=memcheck,synchcheck: 'synchcheck' is not a sanitizer check",
               [] { Device::open(options("memcheck,synchcheck")); });
  expect_error(ErrorKind::kInvalidArgument, "'memchek' is not a sanitizer check",
               [] { Device::open(options("memchek")); });
  const test::ScopedEnv env("MTIA_EMU_SANITIZE", "initchek");
  DeviceOptions from_environment = test::functional_options();
  expect_error(ErrorKind::kInvalidArgument,
               "MTIA_EMU_SANITIZE=initchek: 'initchek' is not a sanitizer check",
               [&] { Device::open(from_environment); });
}

TEST_CASE("the device names the checks it runs", "[sanitizer]") {
  CHECK(Device::open(options("synccheck, initcheck")).properties().sanitize ==
        "initcheck,synccheck");
  CHECK(Device::open(options("memcheck,racecheck,initcheck,synccheck")).properties().sanitize ==
        "memcheck,racecheck,initcheck,synccheck");
}

// ---- racecheck ----
//
// The race kernel (tests/host_api/kernels/races.c): PE p touches `rows` rows of `row_bytes`
// bytes, `row_stride` apart, from buf + p * pe_offset; it reads them, writes them (int32 p + 1)
// or, in mode 2, PE 0 writes and the others read; staged, one PE after another with barriers
// between them.

namespace {

struct Touch {
  int64_t pe_offset = 0, rows = 1, row_bytes = 512, row_stride = 512, mode = 1, staged = 0;
};

constexpr int64_t kRaceBufBytes = 8192;

// Launches the race kernel over a buffer of kRaceBufBytes (filled with -1) on `grid`.
DevicePtr launch_touch(Device& dev, const KernelModule& races, Grid grid, const Touch& t) {
  DevicePtr buf = test::upload(dev, std::vector<int32_t>(kRaceBufBytes / 4, -1));
  dev.launch(races.kernel("touch_rows"), grid,
             {buf, t.pe_offset, t.rows, t.row_bytes, t.row_stride, t.mode, t.staged});
  return buf;
}

// What the buffer holds after the writes of `t` by PEs [0, pes) in PE order (nested loops).
std::vector<int32_t> touch_reference(const Touch& t, int64_t pes) {
  std::vector<int32_t> v(kRaceBufBytes / 4, -1);
  for (int64_t p = 0; p < pes; ++p) {
    if (t.mode == 0 || (t.mode == 2 && p != 0)) continue;
    for (int64_t r = 0; r < t.rows; ++r) {
      for (int64_t b = 0; b < t.row_bytes; b += 4) {
        v[(p * t.pe_offset + r * t.row_stride + b) / 4] = static_cast<int32_t>(p + 1);
      }
    }
  }
  return v;
}

// Runs `t` on `grid` under racecheck with 0, 1 and 2 unit helper threads; each launch must pass
// with the reference's bytes.
void expect_no_race(Grid grid, const Touch& t) {
  for (const uint32_t unit_threads : {0u, 1u, 2u}) {
    INFO("unit_threads " << unit_threads);
    Device dev = Device::open(options("racecheck", unit_threads));
    const KernelModule races = dev.load_module(MTIA_RACE_KERNELS_ELF);
    DevicePtr buf = launch_touch(dev, races, grid, t);
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, buf, kRaceBufBytes / 4) ==
          touch_reference(t, int64_t{grid.rows} * grid.cols));
  }
}

}  // namespace

TEST_CASE("racecheck reports two PEs writing the same bytes", "[sanitizer]") {
  // Four PEs write 512 bytes each, 128 bytes apart: PE 0 [0, 512), PE 1 [128, 640), ... The
  // lowest overlap is PE 0's and PE 1's, at byte 128: 384 bytes, up to the end of PE 0's row.
  const Touch t{.pe_offset = 128};
  std::string first_report;
  for (const auto& [sanitize, unit_threads] : std::vector<std::pair<const char*, uint32_t>>{
           {"off", 0}, {"racecheck", 0}, {"racecheck", 1}, {"memcheck,racecheck", 2}}) {
    INFO("sanitize " << sanitize << ", unit_threads " << unit_threads);
    Device dev = Device::open(options(sanitize, unit_threads));
    const KernelModule races = dev.load_module(MTIA_RACE_KERNELS_ELF);
    DevicePtr buf = launch_touch(dev, races, {2, 2}, t);
    if (std::string(sanitize) == "off") {
      dev.synchronize();  // the race goes unnoticed
      continue;
    }
    const std::string report = failure(dev);
    INFO("report: " << report);
    CHECK_THAT(report, Catch::Contains("sanitizer: kernel 'touch_rows' on a 2x2 grid"));
    CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0) and PE 1 (row 0, col 1): racecheck: "
                                       "both touch the 384 bytes at " +
                                       hex(buf.address() + 128) + ".." + hex(buf.address() + 511) +
                                       " between the launch's start and the launch's end, one of "
                                       "them writing: PE 0 writes them by the dma.start at pc 0x"));
    CHECK_THAT(report, Catch::Contains(", PE 1 writes them by the dma.start at pc 0x"));
    check_pc_is_dma_start(report, MTIA_RACE_KERNELS_ELF);
    // The same report at any host thread count, with or without memcheck.
    if (first_report.empty()) {
      first_report = report;
    } else {
      CHECK(report == first_report);
    }
    // The device keeps working, and the fixed twin (rows 512 bytes apart) passes.
    DevicePtr fixed = launch_touch(dev, races, {2, 2}, Touch{.pe_offset = 512});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, fixed, kRaceBufBytes / 4) ==
          touch_reference(Touch{.pe_offset = 512}, 4));
    test::check_device_works(dev);
  }
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("racecheck reports the library's fill given an output view whose rows overlap",
          "[sanitizer]") {
  // A 2 x 2048 int32 view with rows 1024 elements apart: its rows share 1024 elements. On a
  // 1x2 grid the fill kernel gives each PE one row, so PE 0 and PE 1 both write elements
  // 1024..2047 of the buffer.
  for (const uint32_t unit_threads : {0u, 1u}) {
    INFO("unit_threads " << unit_threads);
    Device dev = Device::open(options("racecheck", unit_threads));
    const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
    DevicePtr out = dev.malloc(4 * 3072);
    dev.launch(lib.kernel("fill"), {1, 2},
               {out, Arg::dtype(MTIA_PE_DT_INT32), int64_t{7}, int64_t{2}, int64_t{2048},
                int64_t{1}, int64_t{1}, int64_t{1024}, int64_t{1}, int64_t{1}, int64_t{1}});
    const std::string report = failure(dev);
    INFO("report: " << report);
    CHECK_THAT(report, Catch::Contains("sanitizer: kernel 'fill' on a 1x2 grid"));
    CHECK_THAT(report,
               Catch::Contains("PE 0 (row 0, col 0) and PE 1 (row 0, col 1): racecheck: "
                               "both touch the 4096 bytes at " +
                               hex(out.address() + 4096) + ".." + hex(out.address() + 8191) +
                               " between the launch's start and the launch's end"));
    CHECK_THAT(report, Catch::Contains("PE 0 writes them by the dma.start at pc 0x"));
    CHECK_THAT(report, Catch::Contains("PE 1 writes them by the dma.start at pc 0x"));
    check_pc_is_dma_start(report, MTIA_KERNEL_LIBRARY_ELF);
    // Both PEs' DMAs are in the library's kdma: each is named with the line that called it.
    const std::regex called(
        "PE [01] writes them by the dma\\.start at pc 0x[0-9a-f]+ \\(lib/klib\\.h:[0-9]+, "
        "called from lib/elementwise\\.c:[0-9]+\\)");
    CHECK(std::distance(std::sregex_iterator(report.begin(), report.end(), called),
                        std::sregex_iterator()) == 2);
    // Rows that do not overlap (2048 elements apart) pass.
    dev.launch(lib.kernel("fill"), {1, 2},
               {out, Arg::dtype(MTIA_PE_DT_INT32), int64_t{7}, int64_t{1}, int64_t{3072},
                int64_t{1}, int64_t{1}, int64_t{3072}, int64_t{1}, int64_t{1}, int64_t{1}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 3072) == std::vector<int32_t>(3072, 7));
  }
}
#endif

TEST_CASE("racecheck reports a read racing with another PE's write", "[sanitizer]") {
  // PE 0 writes [0, 512); PE 1 reads [256, 768).
  Device dev = Device::open(options("racecheck"));
  const KernelModule races = dev.load_module(MTIA_RACE_KERNELS_ELF);
  DevicePtr buf = launch_touch(dev, races, {1, 2}, Touch{.pe_offset = 256, .mode = 2});
  const std::string report = failure(dev);
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0) and PE 1 (row 0, col 1): racecheck: "
                                     "both touch the 256 bytes at " +
                                     hex(buf.address() + 256) + ".." + hex(buf.address() + 511)));
  CHECK_THAT(report, Catch::Contains("PE 0 writes them by the dma.start"));
  CHECK_THAT(report, Catch::Contains("PE 1 reads them by the dma.start"));
  check_pc_is_dma_start(report, MTIA_RACE_KERNELS_ELF);
}

TEST_CASE("racecheck passes interleaved strided writes by different PEs", "[sanitizer]") {
  // Rows of 256 bytes: PE 0 writes the even rows, PE 1 the odd ones. The spans of the two
  // transfers overlap; their bytes do not.
  expect_no_race({1, 2}, Touch{.pe_offset = 256, .rows = 8, .row_bytes = 256, .row_stride = 512});
  // Four PEs, each every fourth row of 64 bytes.
  expect_no_race({2, 2}, Touch{.pe_offset = 64, .rows = 16, .row_bytes = 64, .row_stride = 256});
}

TEST_CASE("racecheck passes PEs reading the same bytes", "[sanitizer]") {
  expect_no_race({2, 2}, Touch{.pe_offset = 0, .mode = 0});
  expect_no_race({2, 2}, Touch{.pe_offset = 100 * 4, .rows = 4, .row_stride = 1024, .mode = 0});
}

TEST_CASE("racecheck passes writes to the same bytes separated by barriers", "[sanitizer]") {
  // Every PE writes the same 512 bytes, one after another: the last (PE 3) stays.
  expect_no_race({2, 2}, Touch{.pe_offset = 0, .staged = 1});
}

// ---- initcheck and synccheck ----
//
// The kernels of tests/host_api/kernels/sync_init.c: staged_copy (PE 0 copies in -> tmp, the
// last PE tmp -> out, with or without a barrier between), early_exit (PEs without work return
// before the barrier, or reach it) and wait_tag (waits on its DMA's tag plus `slip`).

namespace {

// The reports of `run` (which launches on a fresh device and returns its report) with 0, 1 and
// 2 unit helper threads must be identical; returns it.
template <typename Run>
std::string same_at_every_thread_count(const char* sanitize, Run run) {
  std::string first;
  for (const uint32_t unit_threads : {0u, 1u, 2u}) {
    INFO("unit_threads " << unit_threads);
    Device dev = Device::open(options(sanitize, unit_threads));
    const std::string report = run(dev);
    if (first.empty()) {
      first = report;
    } else {
      CHECK(report == first);
    }
    test::check_device_works(dev);
  }
  return first;
}

}  // namespace

TEST_CASE("initcheck reports a PE reading device memory nothing wrote", "[sanitizer]") {
  // PE 1 reads the scratch buffer that PE 0 writes, with no barrier between: it reads the
  // bytes as they were at the launch's start, which nothing had written.
  const std::vector<int32_t> in_data = iota(1000, 3);
  uint64_t tmp_address = 0;
  const std::string report = same_at_every_thread_count("initcheck", [&](Device& dev) {
    const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr tmp = dev.malloc(4 * 1000);
    DevicePtr out = dev.malloc(4 * 1000);
    tmp_address = tmp.address();
    dev.launch(m.kernel("staged_copy"), {1, 2}, {in, tmp, out, int64_t{1000}, int64_t{0}});
    const std::string r = failure(dev);
    // The fixed twin (a barrier between the stages) passes, on the same device.
    dev.launch(m.kernel("staged_copy"), {1, 2}, {in, tmp, out, int64_t{1000}, int64_t{1}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 1000) == in_data);
    return r;
  });
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("sanitizer: kernel 'staged_copy' on a 1x2 grid"));
  CHECK_THAT(report, Catch::Contains("PE 1 (row 0, col 1): initcheck: dma.start at pc 0x"));
  CHECK_THAT(report,
             Catch::Contains("reads 4000 bytes at " + hex(tmp_address) + ": the 4000 bytes at " +
                             hex(tmp_address) + ".." + hex(tmp_address + 3999) +
                             " (offset 0 of the allocation at " + hex(tmp_address) +
                             " (4000 bytes)) were not written since the allocation was "
                             "made"));
  check_pc_is_dma_start(report, MTIA_SYNC_INIT_KERNELS_ELF);
  // Without the sanitizer the same launch passes, copying whatever tmp held.
  Device dev = Device::open(options("off"));
  const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr tmp = dev.malloc(4 * 1000), out = dev.malloc(4 * 1000);
  dev.launch(m.kernel("staged_copy"), {1, 2}, {in, tmp, out, int64_t{1000}, int64_t{0}});
  dev.synchronize();
}

TEST_CASE("initcheck counts host copies and fills, and a freed block is unwritten again",
          "[sanitizer]") {
  Device dev = Device::open(options("memcheck,initcheck"));
  const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
  const Kernel k = m.kernel("staged_copy");
  // Only the first 600 of 1000 elements copied from the host: the rest is reported.
  const std::vector<int32_t> in_data = iota(1000, -7);
  DevicePtr in = dev.malloc(4 * 1000);
  dev.copy(in, in_data.data(), 4 * 600);
  DevicePtr tmp = dev.malloc(4 * 1000), out = dev.malloc(4 * 1000);
  dev.launch(k, {1, 1}, {in, tmp, out, int64_t{1000}, int64_t{0}});
  std::string report = failure(dev);
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0): initcheck: dma.start at pc 0x"));
  CHECK_THAT(report,
             Catch::Contains("reads 4000 bytes at " + hex(in.address()) + ": the 1600 bytes at " +
                             hex(in.address() + 2400) + ".." + hex(in.address() + 3999) +
                             " (offset 2400 of the allocation at " + hex(in.address()) +
                             " (4000 bytes))"));
  // The rest copied device to device from a buffer the host filled: now all of it is written.
  DevicePtr sevens = dev.malloc(4 * 400);
  dev.memset(sevens, 7, 4 * 400);
  dev.copy(in + 2400, sevens, 4 * 400);
  dev.launch(k, {1, 1}, {in, tmp, out, int64_t{1000}, int64_t{0}});
  dev.synchronize();
  std::vector<int32_t> expect = in_data;
  for (size_t i = 600; i < 1000; ++i) expect[i] = 0x07070707;
  CHECK(test::download<int32_t>(dev, out, 1000) == expect);
  // Freed and allocated again: its bytes are unwritten again (the allocator reuses the block).
  const uint64_t old = in.address();
  dev.free(in);
  DevicePtr again = dev.malloc(4 * 1000);
  REQUIRE(again.address() == old);
  dev.launch(k, {1, 1}, {again, tmp, out, int64_t{1000}, int64_t{0}});
  report = failure(dev);
  CHECK_THAT(report, Catch::Contains("the 4000 bytes at " + hex(old) + ".." + hex(old + 3999) +
                                     " (offset 0 of the allocation at " + hex(old)));
  test::check_device_works(dev);
}

TEST_CASE("synccheck reports a barrier that PEs which exited never reach", "[sanitizer]") {
  // On a 2x2 grid PEs 2 and 3 have no work and return before the barrier that 0 and 1 wait at.
  const std::vector<int32_t> in_data = iota(4 * 256, 1);
  const std::string report = same_at_every_thread_count("synccheck", [&](Device& dev) {
    const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr out = dev.malloc(4 * 4 * 256);
    dev.launch(m.kernel("early_exit"), {2, 2}, {in, out, int64_t{256}, int64_t{2}, int64_t{0}});
    const std::string r = failure(dev);
    // The fixed twin: every PE reaches the barrier.
    dev.launch(m.kernel("early_exit"), {2, 2}, {in, out, int64_t{256}, int64_t{2}, int64_t{1}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 512) ==
          std::vector<int32_t>(in_data.begin(), in_data.begin() + 512));
    return r;
  });
  INFO("report: " << report);
  CHECK_THAT(report, Catch::Contains("sanitizer: kernel 'early_exit' on a 2x2 grid"));
  CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0): synccheck: pe.barrier at pc 0x"));
  CHECK_THAT(report, Catch::Contains("(barrier 1 of the launch) is not reached by PE 2 (row 1, "
                                     "col 0), which exited at pc 0x"));
  CHECK_THAT(report, Catch::Contains("after 0 barriers, nor by 1 more PEs that exited"));
  // The pc is the kernel's pe.barrier.
  std::smatch pc;
  REQUIRE(std::regex_search(report, pc, std::regex("pe\\.barrier at pc 0x([0-9a-f]+)")));
  const uint32_t word = instruction_at(test::file_bytes(MTIA_SYNC_INIT_KERNELS_ELF),
                                       std::stoull(pc[1].str(), nullptr, 16));
  CHECK((word & 0x7F) == MTIA_PE_OPC_CTRL);
  CHECK(((word >> 12) & 0x7) == MTIA_PE_F3_BARRIER);
  // Without synccheck the barrier releases the PEs that still run.
  Device dev = Device::open(options("memcheck,racecheck,initcheck"));
  const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr out = dev.malloc(4 * 4 * 256);
  dev.launch(m.kernel("early_exit"), {2, 2}, {in, out, int64_t{256}, int64_t{2}, int64_t{0}});
  dev.synchronize();
}

TEST_CASE("synccheck reports a wait on a tag that was never issued", "[sanitizer]") {
  const std::vector<int32_t> in_data = iota(300, 9);
  const std::string report = same_at_every_thread_count("synccheck", [&](Device& dev) {
    const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr out = dev.malloc(4 * 300);
    dev.launch(m.kernel("wait_tag"), {1, 2}, {in, out, int64_t{300}, int64_t{3}});
    const std::string r = failure(dev);
    dev.launch(m.kernel("wait_tag"), {1, 2}, {in, out, int64_t{300}, int64_t{0}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 300) == in_data);
    return r;
  });
  INFO("report: " << report);
  // PE 0 comes first in the sequential order; its first DMA is tag 1.
  CHECK_THAT(report, Catch::Contains("PE 0 (row 0, col 0): synccheck: pe.wait at pc 0x"));
  CHECK_THAT(report, Catch::Contains("waits on tag 4, which this PE never issued (its dma.start "
                                     "and unit instructions issued tag 1 so far in this "
                                     "launch)"));
}

TEST_CASE("initcheck reports a local-store tile used before it was loaded", "[sanitizer]") {
  // The same tile at the start of the local store, stored by a DMA, fed to the SE or read by
  // the core without having been loaded in this launch. A launch before it loads the tile, so
  // the local store holds the right bytes from then on: only the sanitizer tells.
  const std::vector<int32_t> in_data = iota(256, 40);
  struct Use {
    int64_t use;
    const char* what;
    std::vector<int32_t> expect;
  };
  std::vector<int32_t> twice = in_data, plus_one = in_data;
  for (int32_t& v : twice) v *= 2;
  for (int32_t& v : plus_one) v += 1;
  for (const Use& u :
       {Use{0, "dma.start", in_data}, Use{1, "se.op", twice}, Use{2, "a 4-byte load", plus_one}}) {
    INFO("use " << u.use);
    const std::string report = same_at_every_thread_count("initcheck", [&](Device& dev) {
      const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
      DevicePtr in = test::upload(dev, in_data);
      DevicePtr out = dev.malloc(4 * 256);
      dev.launch(m.kernel("use_tile"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{1}});
      dev.synchronize();
      CHECK(test::download<int32_t>(dev, out, 256) == u.expect);
      dev.launch(m.kernel("use_tile"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{0}});
      return failure(dev);
    });
    INFO("report: " << report);
    CHECK_THAT(report, Catch::Contains(std::string("PE 0 (row 0, col 0): initcheck: ") + u.what +
                                       " at pc 0x"));
    CHECK_THAT(report, Catch::Contains("which nothing (no dma.start, unit operation or store of "
                                       "this PE) wrote since the launch started"));
    // A DMA or the SE reads the whole tile, none of it written; the core one element.
    CHECK_THAT(report, Catch::Contains(u.use == 2 ? "reads the 4 local-store bytes at 0x"
                                                  : "reads the 1024 local-store bytes at 0x"));
    if (u.use == 0) check_pc_is_dma_start(report, MTIA_SYNC_INIT_KERNELS_ELF);
    // Without the sanitizer the launch passes with last launch's bytes.
    Device dev = Device::open(options("off"));
    const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr out = dev.malloc(4 * 256);
    dev.launch(m.kernel("use_tile"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{1}});
    dev.launch(m.kernel("use_tile"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{0}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 256) == u.expect);
  }
}

TEST_CASE("synccheck reports local-store bytes used while an operation on them is in flight",
          "[sanitizer]") {
  // in_flight (sync_init.c) loads a 256-element tile at the local store's start by DMA (tag 1)
  // and uses it without waiting: the SE reads it, the core reads it, or (use 2, after waiting
  // for the load) a store reads it (tag 2) while a second load overwrites it (tag 3). The
  // emulator applies each operation at issue, so every variant computes the right result.
  const std::vector<int32_t> in_data = iota(256, 11);
  struct Use {
    int64_t use;
    std::string report;
    std::vector<int32_t> expect;
  };
  std::vector<int32_t> twice = in_data, plus_one = in_data;
  for (int32_t& v : twice) v *= 2;
  for (int32_t& v : plus_one) v += 1;
  const std::string tile =
      "the 1024 local-store bytes at " + hex(MTIA_PE_LS_BASE) + ".." + hex(MTIA_PE_LS_BASE + 1023);
  for (const Use& u : {
           Use{0, "(tag 2) reads " + tile + ", which the dma.start at pc 0x", twice},
           Use{1, "reads the 4 local-store bytes at " + hex(MTIA_PE_LS_BASE), plus_one},
           Use{2, "(tag 3) writes " + tile + ", which the dma.start at pc 0x", in_data},
           Use{3, "(tag 2) reads " + tile + ", which the dma.start at pc 0x", twice},
       }) {
    INFO("use " << u.use);
    const std::string report = same_at_every_thread_count("synccheck", [&](Device& dev) {
      const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
      DevicePtr in = test::upload(dev, in_data);
      DevicePtr out = dev.malloc(4 * 256);
      dev.launch(m.kernel("in_flight"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{0}});
      const std::string r = failure(dev);
      // The fixed twin waits first.
      dev.launch(m.kernel("in_flight"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{1}});
      dev.synchronize();
      CHECK(test::download<int32_t>(dev, out, 256) == u.expect);
      return r;
    });
    INFO("report: " << report);
    CHECK_THAT(report, Catch::Contains("sanitizer: kernel 'in_flight' on a 1x1 grid"));
    CHECK_THAT(report, Catch::Contains(u.report));
    const char* who = u.use == 0 || u.use == 3 ? "synccheck: se.op at pc 0x"
                      : u.use == 1             ? "synccheck: a 4-byte load at pc 0x"
                                               : "synccheck: dma.start at pc 0x";
    CHECK_THAT(report, Catch::Contains(std::string("PE 0 (row 0, col 0): ") + who));
    CHECK_THAT(report,
               Catch::Contains(u.use == 2 ? "(tag 2) still reads" : "(tag 1) still writes"));
    CHECK_THAT(report, Catch::Contains("and this PE has not waited for (pe.wait on tag"));
    check_pc_is_dma_start(report, MTIA_SYNC_INIT_KERNELS_ELF);
    if (u.use == 3) {
      // The load in flight was issued inside load_tile: its line, and the line that called it.
      CHECK_THAT(report, Catch::Matches(".*which the dma\\.start at pc 0x[0-9a-f]+ "
                                        "\\(kernels/sync_init\\.c:[0-9]+, called from "
                                        "kernels/sync_init\\.c:[0-9]+\\) \\(tag 1\\).*"));
    }
    // Without synccheck (the other three checks on) the launch passes.
    Device dev = Device::open(options("memcheck,racecheck,initcheck"));
    const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
    DevicePtr in = test::upload(dev, in_data);
    DevicePtr out = dev.malloc(4 * 256);
    dev.launch(m.kernel("in_flight"), {1, 1}, {in, out, int64_t{256}, u.use, int64_t{0}});
    dev.synchronize();
    CHECK(test::download<int32_t>(dev, out, 256) == u.expect);
  }
}

TEST_CASE("the device's statistics and trace count the sanitizer's findings per check",
          "[sanitizer]") {
  const std::vector<int32_t> in_data = iota(256, 5);
  Device dev = Device::open(options("memcheck,racecheck,initcheck,synccheck"));
  dev.set_trace_level(TraceLevel::kKernels);
  const KernelModule m = dev.load_module(MTIA_SYNC_INIT_KERNELS_ELF);
  DevicePtr in = test::upload(dev, in_data);
  DevicePtr out = dev.malloc(4 * 256);
  // Two synccheck findings (an in-flight tile, a tag never issued), one passing launch.
  dev.launch(m.kernel("in_flight"), {1, 1}, {in, out, int64_t{256}, int64_t{0}, int64_t{0}});
  const std::string first = failure(dev);
  dev.launch(m.kernel("wait_tag"), {1, 1}, {in, out, int64_t{256}, int64_t{3}});
  failure(dev);
  dev.launch(m.kernel("in_flight"), {1, 1}, {in, out, int64_t{256}, int64_t{0}, int64_t{1}});
  dev.synchronize();
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_sanitizer_stats_test_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream stats_file(dir / "stats.json");
  REQUIRE(stats_file);
  const auto stats = nlohmann::json::parse(stats_file);
  std::ifstream trace_file(dir / "trace.json");
  REQUIRE(trace_file);
  const auto trace = nlohmann::json::parse(trace_file);
  std::filesystem::remove_all(dir);
  const auto& grid = stats["pe_grid"];
  CHECK(grid["sanitizer_errors"]["value"].get<uint64_t>() == 2);
  CHECK(grid["sanitizer_synccheck"]["value"].get<uint64_t>() == 2);
  for (const char* check : {"memcheck", "racecheck", "initcheck"}) {
    CHECK(grid[std::string("sanitizer_") + check]["value"].get<uint64_t>() == 0);
  }
  const auto& reports = grid["sanitizer_first_reports"]["value"];
  REQUIRE(reports.contains("synccheck"));
  CHECK(reports.size() == 1);
  // The first report is the first launch's, as the host API gave it.
  const std::string text = reports["synccheck"].get<std::string>();
  INFO("report: " << text);
  CHECK_THAT(text, Catch::Contains("still writes and this PE has not waited for"));
  CHECK_THAT(first, Catch::Contains(text));

  // In the trace: one instant event per finding on the failing PE's core track, inside its
  // launch's slice, carrying the device's report; none for the launch that passed.
  std::vector<nlohmann::json> findings, launches;
  int pe0_track = -1;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", "") == "sanitizer") findings.push_back(e);
    if (e.value("cat", "") == "launch") launches.push_back(e);
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["args"]["name"] == "pe 0") {
      pe0_track = e["tid"].get<int>();
    }
  }
  REQUIRE(pe0_track >= 0);
  REQUIRE(launches.size() == 3);
  REQUIRE(findings.size() == 2);
  for (size_t i = 0; i < findings.size(); ++i) {
    const auto& f = findings[i];
    INFO("finding: " << f.dump());
    CHECK(f["ph"] == "i");
    CHECK(f["s"] == "t");
    CHECK(f["name"] == "sanitizer: synccheck");
    CHECK(f["args"]["check"] == "synccheck");
    CHECK(f["args"]["pe"] == 0);
    CHECK(f["tid"] == pe0_track);
    const double ts = f["ts"].get<double>(), start = launches[i]["ts"].get<double>();
    CHECK(ts >= start);
    CHECK(ts <= start + launches[i]["dur"].get<double>());
  }
  CHECK(findings[0]["args"]["report"] == text);
  CHECK_THAT(findings[1]["args"]["report"].get<std::string>(),
             Catch::Contains("synccheck: pe.wait at pc 0x"));
}
