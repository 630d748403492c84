// Simulation rate on the demo's workload (tools/mlp.h: x -> Linear -> ReLU -> Linear ->
// softmax, fp32, the kernel library on the whole PE grid): for each preset named on the
// command line (default mtia-v2 mtia-v1) and a few model sizes it prints
//  - the simulated time of one forward pass (uploads, four kernels, download) and the device
//    cycles it stands for (simulated time x PE clock);
//  - the host wall time of that pass with the timing model on, best of 5 runs, and the
//    simulation rate: device cycles per host second;
//  - the wall time with the timing model off (DeviceOptions::timing, the config key `timing`),
//    best of 5, and the ratio on / off: what cycle accounting costs on top of the functional
//    model;
//  - the same with the process's CPU time (both threads) in place of wall time, which a busy
//    machine distorts much less.
// Every run's output is checked against the CPU reference; a wrong result aborts the bench.
// Usage: bench_mlp [preset...]   (run from the build tree; the kernel library path is baked in)
#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cpu_time.h"
#include "kernel_library.h"
#include "mlp.h"
#include "mtia/device.h"

namespace {

using mtia::tools::MlpShape;

constexpr int kRuns = 5;

const std::vector<MlpShape> kShapes = {
    {64, 256, 512, 128},     // the demo's default
    {256, 1024, 1024, 256},  // a wider layer
    {1024, 1024, 2048, 1000},
};

// The models and their CPU references, computed once: the reference of the largest shape takes
// seconds on the host.
struct Workload {
  mtia::tools::MlpModel model;
  std::vector<double> reference;
};

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> w = [] {
    std::vector<Workload> v;
    for (const MlpShape& shape : kShapes) {
      auto model = mtia::tools::MlpModel::random(shape, 1);
      auto reference = mtia::tools::mlp_reference(model, mtia::tools::MlpDtype::kFp32);
      v.push_back({std::move(model), std::move(reference)});
    }
    return v;
  }();
  return w;
}

struct Best {
  double wall_seconds = 1e30;
  double cpu_seconds = 1e30;  // includes run_mlp's fp32 packing of the inputs (a copy)
  int64_t simulated_ps = 0;
};

// Runs every shape once on a freshly opened device, keeping the best times per shape.
void measure(const std::string& preset, bool timing, std::vector<Best>& best, uint64_t* clock_hz) {
  mtia::DeviceOptions options;
  options.preset = preset;
  options.timing = timing;
  mtia::Device device = mtia::Device::open(options);
  *clock_hz = device.properties().clock_hz;
  const mtia::KernelModule library = device.load_module(mtia::tools::kernel_library_path());
  best.resize(workloads().size());
  for (size_t i = 0; i < workloads().size(); ++i) {
    const auto& [model, reference] = workloads()[i];
    const double cpu0 = mtia::bench::process_cpu_seconds();
    const auto run = mtia::tools::run_mlp(device, library, model, mtia::tools::MlpDtype::kFp32);
    best[i].cpu_seconds = std::min(best[i].cpu_seconds, mtia::bench::process_cpu_seconds() - cpu0);
    const auto check =
        mtia::tools::mlp_compare(run.probs, reference, model.shape, mtia::tools::MlpDtype::kFp32);
    if (!check.passed) {
      throw std::runtime_error("wrong result on " + preset + ": max abs error " +
                               std::to_string(check.max_abs_error));
    }
    best[i].wall_seconds = std::min(best[i].wall_seconds, run.wall_seconds);
    best[i].simulated_ps = run.total_ps;  // the same every run: the model is deterministic
  }
}

void run_preset(const std::string& preset) {
  uint64_t clock_hz = 0;
  std::vector<Best> on, off;
  // On and off alternate, so that a change in the machine's load hits both alike.
  for (int round = 0; round < kRuns; ++round) {
    measure(preset, true, on, &clock_hz);
    measure(preset, false, off, &clock_hz);
  }
  std::printf("preset %s, fp32, PE clock %.2f GHz, best of %d\n", preset.c_str(), clock_hz / 1e9,
              kRuns);
  std::printf("%-26s | %8s %10s | %9s %9s %9s %9s | %9s %9s %7s %7s\n", "batch x in x hidden x cls",
              "sim us", "cycles", "wall ms", "cpu ms", "Mcyc/s", "Mcyc/cpu", "wall off", "cpu off",
              "on/off", "cpu o/o");
  for (size_t i = 0; i < kShapes.size(); ++i) {
    const MlpShape& s = kShapes[i];
    const double cycles = static_cast<double>(on[i].simulated_ps) * 1e-12 * clock_hz;
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld x %lld x %lld x %lld", static_cast<long long>(s.batch),
                  static_cast<long long>(s.in), static_cast<long long>(s.hidden),
                  static_cast<long long>(s.classes));
    std::printf("%-26s | %8.1f %10.0f | %9.1f %9.1f %9.2f %9.2f | %9.1f %9.1f %7.2f %7.2f\n", dims,
                on[i].simulated_ps / 1e6, cycles, on[i].wall_seconds * 1e3, on[i].cpu_seconds * 1e3,
                cycles / on[i].wall_seconds / 1e6, cycles / on[i].cpu_seconds / 1e6,
                off[i].wall_seconds * 1e3, off[i].cpu_seconds * 1e3,
                on[i].wall_seconds / off[i].wall_seconds, on[i].cpu_seconds / off[i].cpu_seconds);
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> presets(argv + 1, argv + argc);
  if (presets.empty()) presets = {"mtia-v2", "mtia-v1"};
  try {
    for (const std::string& preset : presets) run_preset(preset);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_mlp: %s\n", e.what());
    return 1;
  }
  return 0;
}
