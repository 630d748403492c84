// `mtia-emu demo`: the README's workload. A two-layer MLP's forward pass (tools/mlp.h: addmm,
// relu, addmm, softmax from the kernel library) runs on the emulated device, its output is
// checked against a CPU reference, and the device's trace, statistics and effective
// configuration are written to the output folder. Exits non-zero when the check fails.
#include <charconv>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "commands.h"
#include "kernel_library.h"
#include "mlp.h"
#include "mtia/device.h"

namespace mtia::tools {
namespace {

struct DemoOptions {
  DeviceFlags device;
  MlpShape shape;
  std::string dtype = "fp32";
  uint32_t seed = 1;
  std::string out = "out/demo";
};

double us(int64_t ps) {
  return static_cast<double>(ps) / 1e6;
}

void print_step(const char* name, int64_t ps, double flops = 0) {
  std::printf("  %-38s %10.3f us", name, us(ps));
  if (flops > 0 && ps > 0) {
    std::printf("  %8.3f TFLOP/s", flops / (static_cast<double>(ps) * 1e-12) / 1e12);
  }
  std::printf("\n");
}

void run_demo(const DemoOptions& o) {
  using Clock = std::chrono::steady_clock;
  o.shape.validate();
  const auto t_start = Clock::now();
  const std::string library_path = kernel_library_path();
  Device device = Device::open(o.device.options());
  const DeviceProperties& props = device.properties();
  const KernelModule library = device.load_module(library_path);
  const MlpShape& s = o.shape;
  const MlpDtype dtype = mlp_dtype_from_name(o.dtype);
  const char* dt = mlp_dtype_name(dtype);

  std::printf("MLP forward pass on an emulated %s: %u x %u PEs at %.2f GHz, timing model %s\n",
              props.name.c_str(), props.pe_rows, props.pe_cols,
              static_cast<double>(props.clock_hz) / 1e9, props.timing ? "on" : "off");
  std::printf("  kernels  %s\n", library_path.c_str());
  std::printf(
      "  model    x[%lld, %lld] -> Linear(%lld, %lld) -> ReLU -> Linear(%lld, %lld) -> "
      "softmax(dim=1), %s, seed %u\n\n",
      static_cast<long long>(s.batch), static_cast<long long>(s.in), static_cast<long long>(s.in),
      static_cast<long long>(s.hidden), static_cast<long long>(s.hidden),
      static_cast<long long>(s.classes), dt, o.seed);

  const MlpModel model = MlpModel::random(s, o.seed);
  const MlpRun run = run_mlp(device, library, model, dtype);
  const std::vector<double> reference = mlp_reference(model, dtype);
  const MlpCheck check = mlp_compare(run.probs, reference, s, dtype);

  const double flops1 = 2.0 * static_cast<double>(s.batch * s.in * s.hidden);
  const double flops2 = 2.0 * static_cast<double>(s.batch * s.hidden * s.classes);
  int64_t kernels_ps = 0;
  for (int64_t ps : run.kernel_ps) kernels_ps += ps;
  std::printf("  %-38s %13s\n", "step", "simulated");
  print_step("upload x, W1, b1, W2, b2", run.upload_ps);
  print_step(kMlpKernelSteps[0], run.kernel_ps[0], flops1);
  print_step(kMlpKernelSteps[1], run.kernel_ps[1]);
  print_step(kMlpKernelSteps[2], run.kernel_ps[2], flops2);
  print_step(kMlpKernelSteps[3], run.kernel_ps[3]);
  print_step("download probs", run.download_ps);
  print_step("kernels", kernels_ps, s.matmul_flops());
  print_step("total", run.total_ps);
  if (props.timing) {
    std::printf("  (%.3g matmul FLOPs; %.0f device cycles at %.2f GHz)\n\n", s.matmul_flops(),
                static_cast<double>(run.total_ps) * 1e-12 * static_cast<double>(props.clock_hz),
                static_cast<double>(props.clock_hz) / 1e9);
  } else {
    std::printf("  (timing model off: simulated times are 0)\n\n");
  }

  std::printf("check    probs[%lld, %lld] against the CPU reference (double sums, %s inputs)\n",
              static_cast<long long>(s.batch), static_cast<long long>(s.classes), dt);
  std::printf("         max abs error %.3g at [%lld, %lld], tolerance %.3g: %s\n",
              check.max_abs_error, static_cast<long long>(check.worst_row),
              static_cast<long long>(check.worst_col), check.tolerance,
              check.passed ? "PASS" : "FAIL");
  std::printf("         most probable class agrees in %lld of %lld rows\n",
              static_cast<long long>(check.top1_agree), static_cast<long long>(s.batch));

  std::filesystem::create_directories(o.out);
  device.write_artifacts(o.out);
  const double wall_total = std::chrono::duration<double>(Clock::now() - t_start).count();
  std::printf("host     %.3f s wall for the forward pass (uploads to download), %.2f s in all\n",
              run.wall_seconds, wall_total);
  const auto dir = std::filesystem::absolute(o.out).lexically_normal().string();
  std::printf("trace    %s/trace.json  (open in https://ui.perfetto.dev)\n", dir.c_str());
  std::printf("         config.json (the chip configuration) and stats.json beside it\n");
  if (!check.passed) {
    throw std::runtime_error(
        "demo check failed: the device's probabilities differ from the CPU "
        "reference by more than the tolerance (see above)");
  }
}

}  // namespace

void add_demo_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "demo",
      "run an MLP forward pass (addmm, relu, addmm, softmax) on the device, check it against "
      "a CPU reference and write its trace");
  auto o = std::make_shared<DemoOptions>();
  o->device.add_to(*cmd);
  // CLI11's PositiveNumber prints a range up to DBL_MAX; this names what is wanted.
  const CLI::Validator at_least_one(
      [](std::string& value) -> std::string {
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < 1) {
          return "must be an integer >= 1, got '" + value + "'";
        }
        return {};
      },
      "INT>=1");
  cmd->add_option("--batch", o->shape.batch, "rows of the input x")
      ->capture_default_str()
      ->check(at_least_one);
  cmd->add_option("--in", o->shape.in, "input features")
      ->capture_default_str()
      ->check(at_least_one);
  cmd->add_option("--hidden", o->shape.hidden, "hidden units")
      ->capture_default_str()
      ->check(at_least_one);
  cmd->add_option("--classes", o->shape.classes, "outputs of the softmax")
      ->capture_default_str()
      ->check(at_least_one);
  cmd->add_option("--dtype", o->dtype, "element type of every tensor")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "fp16", "bf16"}));  // what mlp_dtype_from_name takes
  cmd->add_option("--seed", o->seed, "seed of the pseudo-random weights and input")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "folder for trace.json, stats.json and config.json")
      ->capture_default_str();
  cmd->callback([o] { run_demo(*o); });
}

}  // namespace mtia::tools
