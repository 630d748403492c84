// What tracing costs: host wall time (and process CPU time) of MLP forward passes through the
// host API (tools/mlp.h: uploads, addmm, relu, addmm, softmax on the whole PE grid, download)
// with the trace off, at level "kernels" and at level "units" (every PE unit operation), best
// of 5 alternating rounds; plus the time write_artifacts then takes to write the trace and its
// summary, and the trace's size. Target: units / off <= 1.3 on the passes.
// Every run's output is checked against the CPU reference; a wrong result aborts the bench.
// Usage: bench_trace [preset]   (default mtia-v2; run from the build tree)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include "kernel_library.h"
#include "mlp.h"
#include "mtia/device.h"

namespace {

using mtia::TraceLevel;
using mtia::tools::MlpShape;

constexpr int kRounds = 5;
constexpr int kPasses = 4;  // forward passes per device: 16 launches, 24 copies

const std::vector<MlpShape> kShapes = {
    {64, 256, 512, 128},     // the demo's default
    {256, 1024, 1024, 256},  // a wider layer: more unit operations per launch
};
const TraceLevel kLevels[] = {TraceLevel::kOff, TraceLevel::kKernels, TraceLevel::kUnits};

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Best {
  double wall = 1e30;  // the passes, seconds
  double cpu = 1e30;
  double write = 1e30;  // write_artifacts: trace, stats, config, summary
  uint64_t trace_bytes = 0;
};

void measure(const std::string& preset, const mtia::tools::MlpModel& model,
             const std::vector<double>& reference, TraceLevel level, Best& best) {
  mtia::DeviceOptions options;
  options.preset = preset;
  options.trace = level;
  mtia::Device device = mtia::Device::open(options);
  const mtia::KernelModule library = device.load_module(mtia::tools::kernel_library_path());
  const double cpu0 = cpu_seconds();
  double wall = 0;
  for (int i = 0; i < kPasses; ++i) {
    const auto run = mtia::tools::run_mlp(device, library, model, mtia::tools::MlpDtype::kFp32);
    wall += run.wall_seconds;
    const auto check =
        mtia::tools::mlp_compare(run.probs, reference, model.shape, mtia::tools::MlpDtype::kFp32);
    if (!check.passed) throw std::runtime_error("wrong result: the device differs from the CPU");
  }
  best.cpu = std::min(best.cpu, cpu_seconds() - cpu0);
  best.wall = std::min(best.wall, wall);
  const auto dir =
      std::filesystem::temp_directory_path() / ("mtia_trace_bench_" + std::to_string(::getpid()));
  const auto t0 = std::chrono::steady_clock::now();
  device.write_artifacts(dir.string());
  best.write = std::min(
      best.write, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  best.trace_bytes = std::filesystem::file_size(dir / "trace.json");
  std::filesystem::remove_all(dir);
}

void run(const std::string& preset) {
  std::printf("preset %s, fp32, %d forward passes per device, best of %d rounds\n", preset.c_str(),
              kPasses, kRounds);
  std::printf("%-24s %-8s | %9s %9s %7s %7s | %9s %10s\n", "batch x in x hidden x cls", "trace",
              "wall ms", "cpu ms", "wall/off", "cpu/off", "write ms", "trace.json");
  for (const MlpShape& shape : kShapes) {
    const auto model = mtia::tools::MlpModel::random(shape, 1);
    const auto reference = mtia::tools::mlp_reference(model, mtia::tools::MlpDtype::kFp32);
    Best best[3];
    // The levels alternate, so that a change in the machine's load hits them alike.
    for (int round = 0; round < kRounds; ++round) {
      for (int l = 0; l < 3; ++l) measure(preset, model, reference, kLevels[l], best[l]);
    }
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld x %lld x %lld x %lld",
                  static_cast<long long>(shape.batch), static_cast<long long>(shape.in),
                  static_cast<long long>(shape.hidden), static_cast<long long>(shape.classes));
    for (int l = 0; l < 3; ++l) {
      std::printf("%-24s %-8s | %9.1f %9.1f %7.2f %7.2f | %9.1f %8.2f MB\n", l == 0 ? dims : "",
                  mtia::trace_level_name(kLevels[l]), best[l].wall * 1e3, best[l].cpu * 1e3,
                  best[l].wall / best[0].wall, best[l].cpu / best[0].cpu, best[l].write * 1e3,
                  static_cast<double>(best[l].trace_bytes) / 1e6);
    }
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    run(argc > 1 ? argv[1] : "mtia-v2");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_trace: %s\n", e.what());
    return 1;
  }
  return 0;
}
