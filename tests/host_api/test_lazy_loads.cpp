// Loads left in device memory (PeGrid, "Loads left in device memory"): the PE model may skip a
// local DMA load's copy until its bytes are needed and let the DPE read its operands where the
// load reads from. Every way of using loaded bytes (kernels/lazy_loads.c) must give what a
// copy at once gives: the results are checked against host references with the lazy loads on
// and with them off (MTIA_EMU_LAZY_LOADS=0), and the device statistics show which path ran.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "device_helpers.h"
#include "mtia/runtime.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::file_bytes;
using mtia::test::random_floats;
using mtia::test::upload;

namespace {

constexpr uint32_t kWords = 1024;  // the kernels' load size (4 KB)
constexpr uint8_t kFp32 = 1;       // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)

// A device with the lazy loads on or off (the environment is read when a device opens), with
// `unit_threads` helpers (unset: the default). Which loads are copied is decided on the
// simulator thread, so the counts below do not depend on the helpers.
Device open_device(bool lazy, const std::string& preset = "mtia-v1",
                   std::optional<uint32_t> unit_threads = std::nullopt) {
  if (lazy) {
    ::unsetenv("MTIA_EMU_LAZY_LOADS");
  } else {
    ::setenv("MTIA_EMU_LAZY_LOADS", "0", 1);
  }
  DeviceOptions options;
  options.preset = preset;
  options.unit_threads = unit_threads;
  Device dev = Device::open(options);
  ::unsetenv("MTIA_EMU_LAZY_LOADS");
  return dev;
}

// The PE grid's counters of lazy loads so far.
struct LazyStats {
  uint64_t loads = 0, copied = 0, operand_reads = 0;
};
LazyStats lazy_stats(Device& dev) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_lazy_loads_test_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream in(dir / "stats.json");
  REQUIRE(in);
  const auto stats = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  const auto& grid = stats["pe_grid"];
  return {grid["lazy_loads"]["value"].get<uint64_t>(),
          grid["lazy_loads_copied"]["value"].get<uint64_t>(),
          grid["lazy_operand_reads"]["value"].get<uint64_t>()};
}

std::vector<int32_t> random_ints(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(-1'000'000, 1'000'000);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
std::vector<float> identity(size_t n) {
  std::vector<float> v(n * n, 0.0f);
  for (size_t i = 0; i < n; ++i) v[i * n + i] = 1.0f;
  return v;
}

struct Rig {
  Device dev;
  KernelModule module;
  explicit Rig(bool lazy) : dev(open_device(lazy)), module(load(dev)) {}
  static KernelModule load(Device& dev) {
    const std::vector<uint8_t> elf = file_bytes(MTIA_LAZY_LOAD_KERNELS_ELF);
    return dev.load_module(elf.data(), elf.size());
  }
};

}  // namespace

TEST_CASE("loaded bytes reach the core, the SE, a DMA out and a partial reload",
          "[kernels][lazy]") {
  const bool lazy = GENERATE(true, false);
  INFO("lazy loads " << (lazy ? "on" : "off"));
  Rig rig(lazy);
  Device& dev = rig.dev;
  const std::vector<int32_t> in = random_ints(kWords, 1), patch = random_ints(256, 2);
  DevicePtr din = upload(dev, in), dpatch = upload(dev, patch);
  DevicePtr dout = dev.malloc(kWords * 4);
  const LazyStats before = lazy_stats(dev);

  // The core sums the loaded words.
  dev.launch(rig.module.kernel("lazy_core_sum"), Grid{1, 1}, {dout, din});
  uint32_t sum = 0;
  for (int32_t x : in) sum += static_cast<uint32_t>(x);
  CHECK(download<int32_t>(dev, dout, 1)[0] == static_cast<int32_t>(sum));

  // The SE adds 1 in place.
  dev.launch(rig.module.kernel("lazy_se_add"), Grid{1, 1}, {dout, din});
  std::vector<int32_t> plus_one(in);
  for (auto& x : plus_one) x += 1;
  CHECK(download<int32_t>(dev, dout, kWords) == plus_one);

  // A DMA takes the loaded bytes out again.
  dev.launch(rig.module.kernel("lazy_round_trip"), Grid{1, 1}, {dout, din});
  CHECK(download<int32_t>(dev, dout, kWords) == in);

  // A second load over part of the first.
  dev.launch(rig.module.kernel("lazy_partial_reload"), Grid{1, 1}, {dout, din, dpatch});
  std::vector<int32_t> patched(in);
  std::copy(patch.begin(), patch.end(), patched.begin() + 64);
  CHECK(download<int32_t>(dev, dout, kWords) == patched);

  // Five loads, and every one had to be copied: nothing read them in place.
  const LazyStats after = lazy_stats(dev);
  CHECK(after.loads - before.loads == (lazy ? 5u : 0u));
  CHECK(after.copied - before.copied == (lazy ? 5u : 0u));
  CHECK(after.operand_reads == before.operand_reads);
}

TEST_CASE("a matmul reads the data loaded before its source was overwritten", "[kernels][lazy]") {
  const bool lazy = GENERATE(true, false);
  const bool by_self = GENERATE(true, false);
  INFO("lazy loads " << (lazy ? "on" : "off") << ", overwritten by "
                     << (by_self ? "the same PE" : "another PE after a barrier"));
  Rig rig(lazy);
  Device& dev = rig.dev;
  const std::vector<float> x = random_floats(32 * 32, 3), z = random_floats(32 * 32, 4);
  DevicePtr dx = upload(dev, x), deye = upload(dev, identity(32)), dz = upload(dev, z);
  DevicePtr dc = dev.malloc(32 * 32 * 4);
  if (by_self) {
    dev.launch(rig.module.kernel("lazy_source_overwritten_by_self"), Grid{1, 1},
               {dc, dx, deye, dz});
  } else {
    dev.launch(rig.module.kernel("lazy_source_overwritten"), Grid{1, 2}, {dc, dx, deye, dz});
  }
  CHECK(download<float>(dev, dc, 32 * 32) == x);  // X @ I, the X that was loaded
  CHECK(download<float>(dev, dx, 32 * 32) == z);  // and X was overwritten
  // The loads of X and I were copied before the write, so the DPE read the local store.
  const LazyStats s = lazy_stats(dev);
  CHECK(s.operand_reads == 0);
  CHECK(s.copied == s.loads);
}

TEST_CASE("a DPE operand inside a strided load, at an offset, is read in place",
          "[kernels][lazy]") {
  const bool lazy = GENERATE(true, false);
  INFO("lazy loads " << (lazy ? "on" : "off"));
  Rig rig(lazy);
  Device& dev = rig.dev;
  constexpr int64_t kLd = 96;  // the device matrix is 64 x 96; the load takes 64 x 64 of it
  const std::vector<float> a = random_floats(64 * kLd, 5), b = random_floats(32 * 32, 6);
  DevicePtr da = upload(dev, a), db = upload(dev, b), dc = dev.malloc(32 * 32 * 4);
  dev.launch(rig.module.kernel("lazy_sub_tile"), Grid{1, 1}, {dc, da, db, kLd});
  const std::vector<float> c = download<float>(dev, dc, 32 * 32);
  // C = a[8:40, 16:48] @ b, in double: the DPE's fp32 sums are within a few ulps of it.
  for (int i = 0; i < 32; ++i) {
    for (int j = 0; j < 32; ++j) {
      double ref = 0;
      for (int k = 0; k < 32; ++k) ref += double(a[(8 + i) * kLd + 16 + k]) * b[k * 32 + j];
      INFO("C[" << i << "][" << j << "]");
      REQUIRE(c[i * 32 + j] == Approx(ref).margin(1e-5));
    }
  }
  // Both operands were read where the loads read from (on), and the loads were copied only
  // when the launch ended.
  const LazyStats s = lazy_stats(dev);
  CHECK(s.operand_reads == (lazy ? 2u : 0u));
  CHECK(s.loads == (lazy ? 2u : 0u));
  CHECK(s.copied == s.loads);
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("a staged GEMM multiplies its tiles where they were loaded from, with the same result",
          "[kernels][lazy][library]") {
  // 512^3 fp32 on mtia-v1: staged in the SRAM, 64 x 64 x 64 tiles, 8 k-steps a tile.
  constexpr int64_t n = 512;
  const std::vector<float> a = random_floats(n * n, 7), b = random_floats(n * n, 8);
  std::vector<std::vector<float>> results;
  struct Run {
    bool lazy;
    uint32_t unit_threads;
  };
  for (const Run run : {Run{true, 0}, Run{false, 0}, Run{true, 2}}) {
    const bool lazy = run.lazy;
    Device dev = open_device(lazy, "mtia-v1", run.unit_threads);
    const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
    DevicePtr da = upload(dev, a), db = upload(dev, b), dc = dev.malloc(n * n * 4);
    const Grid grid{dev.properties().pe_rows, dev.properties().pe_cols};
    dev.launch(lib.kernel("matmul"), grid,
               {dc, da, db, Arg::dtype(kFp32), Arg::dtype(kFp32), n, n, n, n, int64_t{1}, n,
                int64_t{1}, n, int64_t{1}});
    results.push_back(download<float>(dev, dc, n * n));
    const LazyStats s = lazy_stats(dev);
    if (!lazy) {
      CHECK(s.loads == 0);
    } else {
      // Two tile loads a k-step (512 of them): all left in device memory and read in place by
      // the DPE; only the last two k-steps' loads of each PE are copied, when the launch ends.
      CHECK(s.loads == 2 * 512);
      CHECK(s.operand_reads == 2 * 512);
      CHECK(s.copied == 4 * 64);
    }
  }
  CHECK(results[0] == results[2]);  // bit for bit, without helpers and with two
  CHECK(results[0] == results[1]);  // bit for bit
}
#endif
