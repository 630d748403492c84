// fp32 GEMM benchmark for the emulator: C = A.B, M = N = K = 1024 and 2048, row-major, on the
// kernel library's `matmul` over the whole 8 x 8 PE grid, for each preset named on the command
// line (default mtia-v2). For each size it prints
//  1. the host wall time of the emulated device running the launch (launch + synchronize,
//     A and B already on the device, best of the runs) as a ratio to host OpenBLAS
//     cblas_sgemm on the same matrices in the same run (target: device / BLAS <= 1.5), and
//     the host CPU time each side used (all the process's threads, least of the runs; the
//     emulator's helpers count while they look for work, as OpenBLAS's threads do): on a
//     shared or drifting machine the CPU times move much less than the wall times;
//  2. the simulated device time (events around the launch) against the roofline
//     max(FLOPs / peak fp32 FLOP/s, bytes / DRAM bandwidth);
//  3. the largest error of the device's C against the BLAS result, relative to the largest
//     |C| of its row (a plain element-wise ratio blows up where sums cancel to near zero).
// Usage: bench_gemm [--trace DIR] [--size N]... [--reps N] [preset...]. The kernel library is
// $MTIA_EMU_KERNELS, else ../share/mtia-emu/ beside the executable, else the build tree's
// (tools/kernel_library.h); presets come from $MTIA_EMU_PRESET_DIR, else the source tree's
// presets/, so a copied binary runs elsewhere with both set. --size replaces the default sizes;
// --reps the default 3 runs of each side (more, to profile the launches); --trace writes each
// preset's trace, stats and configuration to DIR/PRESET.
#include <cblas.h>

#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cpu_time.h"
#include "kernel_library.h"
#include "mtia/device.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr uint8_t kDtypeFp32 = 1;  // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)

struct Seconds {
  double wall = 1e30;
  double cpu = 1e30;  // all threads of the process
};

// Least wall and least CPU time of `reps` runs: the least disturbed measurements of the same work.
Seconds best_seconds(int reps, const std::function<void()>& fn) {
  Seconds best;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    const double c0 = mtia::bench::process_cpu_seconds();
    fn();
    best.cpu = std::min(best.cpu, mtia::bench::process_cpu_seconds() - c0);
    best.wall = std::min(best.wall, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

// DPE fp32 multiply-accumulates per cycle per PE by chip generation. The simulator's
// UnitTiming (sim/pe/include/mtia/sim/pe/unit_timing.h, mtia_v1()/mtia_v2()) holds these; programs
// never see simulator headers, so they are restated here and must be kept in step.
uint32_t dpe_fp32_macs_per_cycle(uint32_t generation) {
  return generation == 1 ? 128 : 256;
}

// OpenBLAS 0.3.21 picks its kernel by CPU model, and on AVX-512 CPUs newer than it knows (AMD
// Zen 5, for one) it runs an AVX2 kernel: about half the speed its AVX-512 kernel reaches
// there, which would flatter the device's ratio. Says so, and how to measure against the wider
// kernel, when the host has AVX-512 and OpenBLAS runs a kernel without it.
void note_narrow_blas_kernel() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  const std::string core = openblas_get_corename();
  const bool avx512_kernel = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
  if (__builtin_cpu_supports("avx512f") && !avx512_kernel) {
    std::printf(
        "note: this CPU has AVX-512 but OpenBLAS runs its %s kernel; run with "
        "OPENBLAS_CORETYPE=SkylakeX to compare against its AVX-512 kernel\n",
        core.c_str());
  }
#endif
}

void run_preset(const std::string& preset, const std::vector<int64_t>& sizes, int reps,
                const std::string& trace_dir) {
  mtia::DeviceOptions options;
  options.preset = preset;
  mtia::Device device = mtia::Device::open(options);
  const mtia::DeviceProperties& props = device.properties();
  const auto config = nlohmann::json::parse(device.config_json());
  const double dram_GBps = config["dram_bandwidth_GBps"]["value"].get<double>();
  const uint32_t pes = props.pe_rows * props.pe_cols;
  const double peak_flops = static_cast<double>(pes) * dpe_fp32_macs_per_cycle(props.generation) *
                            2.0 * static_cast<double>(props.clock_hz);

  mtia::KernelModule lib = device.load_module(mtia::tools::kernel_library_path());
  const mtia::Kernel& matmul = lib.kernel("matmul");

  std::printf(
      "preset %s: %ux%u PEs at %.2f GHz, DPE fp32 %u MAC/cycle/PE -> peak %.2f TFLOP/s, "
      "DRAM %.1f GB/s; OpenBLAS %d threads (%s); best of %d\n",
      props.name.c_str(), props.pe_rows, props.pe_cols, props.clock_hz / 1e9,
      dpe_fp32_macs_per_cycle(props.generation), peak_flops / 1e12, dram_GBps,
      openblas_get_num_threads(), openblas_get_config(), reps);
  std::printf("%6s | %10s %10s %8s | %10s %10s %8s | %12s %12s %8s | %12s\n", "M=N=K", "device ms",
              "BLAS ms", "dev/BLAS", "dev CPU ms", "BLAS CPU", "CPU ratio", "simulated us",
              "roofline us", "sim/roof", "max rel err");

  mtia::Event e0 = device.create_event(), e1 = device.create_event();
  for (const int64_t n : sizes) {
    const int64_t m = n, k = n;
    std::vector<float> a(m * k), b(k * n), c_dev(m * n), c_blas(m * n);
    std::mt19937 rng(static_cast<uint32_t>(n));
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);

    mtia::DevicePtr da = device.malloc(a.size() * sizeof(float));
    mtia::DevicePtr db = device.malloc(b.size() * sizeof(float));
    mtia::DevicePtr dc = device.malloc(c_dev.size() * sizeof(float));
    device.copy(da, a.data(), a.size() * sizeof(float));
    device.copy(db, b.data(), b.size() * sizeof(float));
    device.synchronize();

    const std::vector<mtia::Arg> args = {
        dc, da,         db, mtia::Arg::dtype(kDtypeFp32), mtia::Arg::dtype(kDtypeFp32), m, n, k,
        k,  int64_t{1},   // A row-major: stride_m, stride_k
        n,  int64_t{1},   // B row-major: stride_k, stride_n
        n,  int64_t{1}};  // C row-major: stride_m, stride_n
    const Seconds dev = best_seconds(reps, [&] {
      device.record(e0);
      device.launch(matmul, mtia::Grid{props.pe_rows, props.pe_cols}, args);
      device.record(e1);
      device.synchronize(e1);
    });
    const double sim_s = static_cast<double>(device.elapsed_ps(e0, e1)) * 1e-12;
    device.copy(c_dev.data(), dc, c_dev.size() * sizeof(float));
    device.synchronize();

    const Seconds blas = best_seconds(reps, [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(n), static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k),
                  b.data(), static_cast<int>(n), 0.0f, c_blas.data(), static_cast<int>(n));
    });

    // Relative to the row's largest |C| so entries that cancel to near zero don't dominate.
    double max_rel = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      double row_max = 0.0;
      for (int64_t j = 0; j < n; ++j)
        row_max = std::max(row_max, std::fabs(double(c_blas[i * n + j])));
      for (int64_t j = 0; j < n; ++j) {
        const double err = std::fabs(double(c_dev[i * n + j]) - double(c_blas[i * n + j]));
        max_rel = std::max(max_rel, row_max > 0 ? err / row_max : err);
      }
    }

    const double flops = 2.0 * m * n * k;
    const double bytes = 4.0 * (m * k + k * n + m * n);
    const double roof_s = std::max(flops / peak_flops, bytes / (dram_GBps * 1e9));
    std::printf(
        "%6lld | %10.2f %10.2f %8.2f | %10.2f %10.2f %8.2f | %12.1f %12.1f %8.2f | %12.3g\n",
        static_cast<long long>(n), dev.wall * 1e3, blas.wall * 1e3, dev.wall / blas.wall,
        dev.cpu * 1e3, blas.cpu * 1e3, dev.cpu / blas.cpu, sim_s * 1e6, roof_s * 1e6,
        sim_s / roof_s, max_rel);
    device.free(da);
    device.free(db);
    device.free(dc);
  }
  device.destroy_event(e0);
  device.destroy_event(e1);
  if (!trace_dir.empty()) {
    device.write_artifacts(trace_dir + "/" + preset);
    std::printf("trace: %s/%s\n", trace_dir.c_str(), preset.c_str());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp32 GEMM on the emulated device against host OpenBLAS and the roofline"};
  std::vector<std::string> presets = {"mtia-v2"};
  std::vector<int64_t> sizes = {1024, 2048};
  std::string trace_dir;
  int reps = 3;
  app.add_option("preset", presets, "chip presets to run (default mtia-v2)");
  app.add_option("--size", sizes, "M = N = K, repeatable (default 1024 and 2048)")
      ->allow_extra_args(false)  // one number each, so that presets may follow
      ->check(CLI::Range(1, 65536));
  app.add_option("--reps", reps, "runs of each side, the best is kept (default 3)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--trace", trace_dir, "write each preset's trace, stats and config to DIR/PRESET");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 1;  // --help: 0; a bad option or number: its message, 1
  }
  note_narrow_blas_kernel();
  try {
    for (const std::string& preset : presets) run_preset(preset, sizes, reps, trace_dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
