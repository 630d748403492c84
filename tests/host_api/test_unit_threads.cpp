// The PE grid's helper threads (unit_threads; sim/src/grid/deferred_work.h): however many of
// them run the units' math and the DMA copies, a launch gives the same results, the same
// simulated times, the same statistics and the same trace as on the simulator thread alone,
// and a failing launch the same error.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/runtime.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::upload;

namespace {

// `j` without its host wall-clock fields (args named wall_*), which no two runs share.
nlohmann::json strip_wall(const nlohmann::json& j) {
  if (j.is_object()) {
    nlohmann::json out = nlohmann::json::object();
    for (const auto& [key, value] : j.items()) {
      if (key.rfind("wall_", 0) != 0) out[key] = strip_wall(value);
    }
    return out;
  }
  if (j.is_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : j) out.push_back(strip_wall(v));
    return out;
  }
  return j;
}

constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// What a run leaves that must not depend on the thread count.
struct Outcome {
  std::vector<float> product, softmax;
  std::string failure;
  uint64_t now_ps = 0;
  nlohmann::json stats;   // stats.json without the host-side counts of loads left in memory
  nlohmann::json events;  // trace.json's traceEvents, without host wall-clock fields
};

// On `preset` with `unit_threads` helpers, every operation handed to them: a GEMM of odd sizes
// (staged in the SRAM on mtia-v1, whose PEs then meet at barriers), a softmax (reductions) and a
// GEMM whose output lies outside device memory (a DMA fault on every PE).
Outcome run(const std::string& preset, uint32_t unit_threads) {
  DeviceOptions options;
  options.preset = preset;
  options.unit_threads = unit_threads;
  options.inline_work_ns = 0;
  options.trace = TraceLevel::kUnits;
  options.trace_max_events = 1'000'000;
  Device dev = Device::open(options);
  const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
  const Grid grid{dev.properties().pe_rows, dev.properties().pe_cols};
  Outcome o;

  const int64_t m = 300, n = 260, k = 520;
  DevicePtr da = upload(dev, random_floats(m * k, 1)), db = upload(dev, random_floats(k * n, 2));
  DevicePtr dc = dev.malloc(m * n * 4);
  const auto gemm = [&](DevicePtr out) {
    dev.launch(lib.kernel("matmul"), grid,
               {out, da, db, Arg::dtype(kFp32), Arg::dtype(kFp32), m, n, k, k, int64_t{1}, n,
                int64_t{1}, n, int64_t{1}});
  };
  gemm(dc);
  o.product = download<float>(dev, dc, m * n);

  const int64_t rows = 96, cols = 200;
  DevicePtr dx = upload(dev, random_floats(rows * cols, 3)), dy = dev.malloc(rows * cols * 4);
  dev.launch(
      lib.kernel("softmax"), grid,
      {dy, dx, Arg::dtype(kFp32), int64_t{3}, int64_t{1}, int64_t{1}, rows, cols, rows * cols,
       rows * cols, cols, int64_t{1}, rows * cols, rows * cols, cols, int64_t{1}});
  o.softmax = download<float>(dev, dy, rows * cols);

  try {
    gemm(DevicePtr{0x7000'0000'0000ull});
    dev.synchronize();
  } catch (const Error& e) {
    o.failure = e.what();
  }
  o.now_ps = dev.now_ps();

  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_unit_threads_test_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream stats(dir / "stats.json"), trace(dir / "trace.json");
  REQUIRE(stats);
  REQUIRE(trace);
  o.stats = nlohmann::json::parse(stats);
  for (const char* key : {"lazy_loads", "lazy_loads_copied", "lazy_operand_reads"}) {
    o.stats["pe_grid"].erase(key);  // when loads are copied is a host matter (deferred_work.h)
  }
  o.events = strip_wall(nlohmann::json::parse(trace)["traceEvents"]);
  std::filesystem::remove_all(dir);
  return o;
}

}  // namespace

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("unit helper threads give the simulator thread's results, times, statistics and trace",
          "[grid][library]") {
  for (const std::string preset : {"mtia-v2", "mtia-v1"}) {
    const Outcome alone = run(preset, 0);
    REQUIRE_FALSE(alone.failure.empty());
    REQUIRE(alone.events.size() > 1000);
    // matmul and softmax are two kernels of one image: decoded once, entered at each.
    CHECK(alone.stats["pe_grid"]["program_loads"]["value"] == 1);
    CHECK(alone.stats["pe_grid"]["program_cache_hits"]["value"].get<uint64_t>() >= 1);
    for (const uint32_t threads : {1u, 2u, 5u}) {
      INFO(preset << " with " << threads << " unit helper threads");
      const Outcome helped = run(preset, threads);
      CHECK(helped.product == alone.product);  // bit for bit
      CHECK(helped.softmax == alone.softmax);
      CHECK(helped.failure == alone.failure);
      CHECK(helped.now_ps == alone.now_ps);
      CHECK(helped.stats == alone.stats);
      CHECK(helped.events == alone.events);
    }
  }
}
#endif
