// The simulated time of bandwidth- and compute-bound work against its roofline bound,
// computed here from the preset's own figures: max(FLOPs / peak FLOP/s, bytes / LPDDR
// bandwidth). The model must never beat the bound, and a well-scheduled kernel must come
// within 10% of it.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mtia/device.h"

namespace {

constexpr uint8_t kFp32 = 1;   // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)
constexpr int64_t kSeAdd = 1;  // MTIA_PE_SE_ADD

struct Preset {
  double clock_hz, dram_Bps, fp32_macs_per_cycle;
  uint32_t pes, rows, cols;
};

Preset figures(mtia::Device& dev) {
  const auto c = nlohmann::json::parse(dev.config_json());
  const auto& p = dev.properties();
  return {static_cast<double>(p.clock_hz),
          c["dram_bandwidth_GBps"]["value"].get<double>() * 1e9,
          c["dpe_fp32_macs_per_cycle"]["value"].get<double>(),
          p.pe_rows * p.pe_cols,
          p.pe_rows,
          p.pe_cols};
}

// Simulated seconds of one launch, between two events on the default stream.
template <typename F>
double simulated_seconds(mtia::Device& dev, F launch) {
  mtia::Event e0 = dev.create_event(), e1 = dev.create_event();
  dev.record(e0);
  launch();
  dev.record(e1);
  dev.synchronize(e1);
  const double s = static_cast<double>(dev.elapsed_ps(e0, e1)) * 1e-12;
  dev.destroy_event(e0);
  dev.destroy_event(e1);
  return s;
}

}  // namespace

TEST_CASE("a large fp32 GEMM runs within 10% of its roofline, never below", "[timing][gemm]") {
  const std::string preset = GENERATE("mtia-v1", "mtia-v2");
  INFO("preset " << preset);
  mtia::DeviceOptions options;
  options.preset = preset;
  mtia::Device dev = mtia::Device::open(options);
  const Preset f = figures(dev);
  mtia::KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);

  // 2048^3: compute-bound on both presets (v2: 388 us of DPE time vs 245 us of LPDDR).
  const int64_t n = 2048;
  std::vector<float> a(n * n), b(n * n), c(n * n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& x : a) x = dist(rng);
  for (float& x : b) x = dist(rng);
  const uint64_t bytes = a.size() * sizeof(float);
  mtia::DevicePtr da = dev.malloc(bytes), db = dev.malloc(bytes), dc = dev.malloc(bytes);
  dev.copy(da, a.data(), bytes);
  dev.copy(db, b.data(), bytes);
  const double sim = simulated_seconds(dev, [&] {
    dev.launch(lib.kernel("matmul"), mtia::Grid{f.rows, f.cols},
               {dc, da, db, mtia::Arg::dtype(kFp32), mtia::Arg::dtype(kFp32), n, n, n, n,
                int64_t{1}, n, int64_t{1}, n, int64_t{1}});
  });
  dev.copy(c.data(), dc, bytes);
  dev.synchronize();

  const double flops = 2.0 * n * n * n;
  const double peak = f.pes * f.fp32_macs_per_cycle * 2.0 * f.clock_hz;
  const double roof = std::max(flops / peak, 3.0 * bytes / f.dram_Bps);
  INFO("simulated " << sim * 1e6 << " us, roofline " << roof * 1e6 << " us");
  CHECK(sim >= roof);
  CHECK(sim <= 1.10 * roof);

  // The product is right: sampled entries against a double-precision dot product.
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  for (int s = 0; s < 64; ++s) {
    const int64_t i = pick(rng), j = pick(rng);
    double want = 0, scale = 0;
    for (int64_t k = 0; k < n; ++k) {
      want += double(a[i * n + k]) * b[k * n + j];
      scale += std::fabs(double(a[i * n + k]) * b[k * n + j]);
    }
    INFO("C[" << i << "][" << j << "]");
    CHECK(std::fabs(c[i * n + j] - want) <= 1e-5 * scale);
  }
}

TEST_CASE("a memory-bound elementwise add runs within 10% of LPDDR bandwidth, never above",
          "[timing][elementwise]") {
  const std::string preset = GENERATE("mtia-v1", "mtia-v2");
  INFO("preset " << preset);
  mtia::DeviceOptions options;
  options.preset = preset;
  mtia::Device dev = mtia::Device::open(options);
  const Preset f = figures(dev);
  mtia::KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);

  // out = a + b over 16 Mi fp32: 192 MiB through LPDDR, next to no compute.
  const int64_t count = int64_t{16} << 20;
  std::vector<float> a(count), b(count), out(count);
  for (int64_t i = 0; i < count; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 7) - 3.0f;
  }
  const uint64_t bytes = count * sizeof(float);
  mtia::DevicePtr da = dev.malloc(bytes), db = dev.malloc(bytes), dout = dev.malloc(bytes);
  dev.copy(da, a.data(), bytes);
  dev.copy(db, b.data(), bytes);
  const int64_t one = 1;
  const double sim = simulated_seconds(dev, [&] {
    dev.launch(lib.kernel("binary"), mtia::Grid{f.rows, f.cols},
               {dout,  da,    db,    kSeAdd, mtia::Arg::dtype(kFp32),
                one,   one,   one,   count,  count,
                count, count, one,   count,  count,
                count, one,   count, count,  count,
                one});
  });
  dev.copy(out.data(), dout, bytes);
  dev.synchronize();

  const double roof = 3.0 * bytes / f.dram_Bps;
  INFO("simulated " << sim * 1e6 << " us, roofline " << roof * 1e6 << " us");
  CHECK(sim >= roof);
  CHECK(sim <= 1.10 * roof);
  for (int64_t i = 0; i < count; i += 4099) {
    INFO("element " << i);
    REQUIRE(out[i] == a[i] + b[i]);
  }
}
