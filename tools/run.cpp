// `mtia-emu run MODULE KERNEL ARG...`: launches one kernel of a kernel module (for instance one
// built with mtia_add_kernel) with arguments from the command line, writes its output buffers
// to files and the device's trace to --out, and prints the run summary. For kernel authors:
// run a kernel without writing a host program. The argument syntax is in run_args.h.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.h"
#include "mtia/device.h"
#include "mtia/isa/sanitize.h"
#include "mtia/trace.h"
#include "run_args.h"

namespace mtia::tools {
namespace {

struct RunOptions {
  DeviceFlags device;
  std::string module;
  std::string kernel;
  std::vector<std::string> args;
  std::string grid = "1x1";
  std::string out = "out/run";
  std::string sanitize;  // --sanitize CHECKS; empty: $MTIA_EMU_SANITIZE, else off
};

Grid parse_grid(const std::string& text) {
  unsigned rows = 0, cols = 0;
  char x = 0, extra = 0;
  if (std::sscanf(text.c_str(), "%u%c%u%c", &rows, &x, &cols, &extra) != 3 || x != 'x' ||
      rows == 0 || cols == 0) {
    throw std::invalid_argument("--grid '" + text + "': write ROWSxCOLS, e.g. 2x4");
  }
  return Grid{rows, cols};
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write output file '" + path + "'");
}

void run_kernel(const RunOptions& o) {
  // Everything the command line says is checked before the device opens.
  const Grid grid = parse_grid(o.grid);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(o.module, ec)) {
    throw std::invalid_argument("kernel module '" + o.module +
                                "' does not exist or is not a file; give the path of an .elf "
                                "built with mtia_add_kernel (or the kernel library)");
  }
  std::vector<RunArg> args;
  for (const std::string& text : o.args) args.push_back(parse_run_arg(text));

  DeviceOptions options = o.device.options();
  if (!o.sanitize.empty()) {
    if (auto checks = isa::parse_sanitize_checks(o.sanitize, "--sanitize"); !checks) {
      throw std::invalid_argument(checks.error().reason);
    }
    options.sanitize = o.sanitize;
  }
  Device device = Device::open(options);
  const KernelModule module = device.load_module(o.module);
  const Kernel& kernel = module.kernel(o.kernel);
  check_run_args(kernel, args);

  std::vector<DevicePtr> buffers(args.size());
  std::vector<Arg> launch_args;
  for (size_t i = 0; i < args.size(); ++i) {
    const RunArg& a = args[i];
    if (a.form == RunArg::Form::kScalar) {
      launch_args.push_back(a.scalar);
      continue;
    }
    const uint64_t bytes = a.count * a.type.bytes;
    buffers[i] = device.malloc(bytes);
    if (a.form == RunArg::Form::kInput) {
      device.copy(buffers[i], a.bytes.data(), bytes);
    } else {
      device.memset(buffers[i], 0, bytes);
    }
    launch_args.push_back(buffers[i]);
  }

  const Event start = device.create_event();
  const Event end = device.create_event();
  device.record(start);
  device.launch(kernel, grid, launch_args);
  device.record(end);
  device.synchronize();  // throws a failed launch's own error (a fault, a sanitizer report)
  const double kernel_us = static_cast<double>(device.elapsed_ps(start, end)) / 1e6;

  const DeviceProperties& props = device.properties();
  std::printf("run      %s from %s on %u x %u PEs of %s\n", kernel.describe().c_str(),
              o.module.c_str(), grid.rows, grid.cols, props.name.c_str());
  if (props.timing) {
    std::printf("kernel   %.3f us simulated\n", kernel_us);
  } else {
    std::printf("kernel   timing model off: simulated time is 0\n");
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const RunArg& a = args[i];
    if (a.form != RunArg::Form::kOutput) continue;
    std::vector<uint8_t> bytes(a.count * a.type.bytes);
    device.copy(bytes.data(), buffers[i], bytes.size());
    write_file(a.path, bytes);
    std::printf("output   %s: %s -> %s\n", kernel.params[i].name.c_str(), a.describe().c_str(),
                a.path.c_str());
  }

  std::filesystem::create_directories(o.out);
  device.write_artifacts(o.out);
  const auto dir = std::filesystem::absolute(o.out).lexically_normal().string();
  std::printf("trace    %s/trace.json  (open in https://ui.perfetto.dev)\n\n", dir.c_str());
  std::fputs(summarize_trace_file(dir + "/trace.json").to_text().c_str(), stdout);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "run",
      "launch one kernel of a kernel module with arguments from the command line, write its "
      "outputs and trace, and print the run summary");
  cmd->footer(
      "ARGS, one per kernel parameter, in order:\n"
      "  i64:VALUE                 a 64-bit integer (decimal, or hexadecimal with 0x)\n"
      "  f32:VALUE, f64:VALUE      a floating-point number\n"
      "  dtype:NAME                an element type code: fp32 fp16 bf16 int8 int32 int64 bool\n"
      "  in:TYPE:FILE              a buffer holding FILE's bytes as TYPE elements\n"
      "  in:TYPE:range(START,STOP[,STEP])  a buffer of START, START+STEP, ... before STOP\n"
      "  in:TYPE:fill(COUNT,VALUE) a buffer of COUNT elements equal to VALUE\n"
      "  out:TYPE:COUNT:FILE       a zeroed buffer of COUNT elements, written to FILE after\n"
      "TYPE is an element type as for dtype; files hold elements as the device stores them\n"
      "(little-endian). Example:\n"
      "  mtia-emu run build/vector_add_kernels.elf vector_add out:fp32:1000:out.bin \\\n"
      "      'in:fp32:range(0,1000)' 'in:fp32:fill(1000,0.5)' i64:1000 --grid 2x4");
  auto o = std::make_shared<RunOptions>();
  o->device.add_to(*cmd);
  cmd->add_option("MODULE", o->module, "kernel module (.elf) built with mtia_add_kernel")
      ->required();
  cmd->add_option("KERNEL", o->kernel, "name of the kernel to launch (its MTIA_KERNEL name)")
      ->required();
  cmd->add_option("ARGS", o->args, "the kernel's arguments (below)");
  cmd->add_option("--grid", o->grid, "PEs to launch on, ROWSxCOLS")->capture_default_str();
  cmd->add_option("--out", o->out, "folder for trace.json, summary.json, stats.json, config.json")
      ->capture_default_str();
  cmd->add_option(
      "--sanitize", o->sanitize,
      "device sanitizer checks, comma-separated: memcheck, racecheck, initcheck, synccheck "
      "(docs/sanitizer.md); default $MTIA_EMU_SANITIZE if set, else off");
  cmd->callback([o] { run_kernel(*o); });
}

}  // namespace mtia::tools
