#include "mtia/settings/settings.h"

#include <array>
#include <cassert>
#include <cstdlib>

namespace mtia::settings {
namespace {

// One row per variable. `reader` says which layer reads it: the lower layers cannot see the
// upper ones' option structs, so the environment is how a setting reaches them.
constexpr std::array kSettings{
    // The chip and its model.
    Setting{"MTIA_EMU_PRESET", "a preset name (mtia-v2, mtia-v1) or a preset file", "mtia-v2",
            "torch_mtia_emu.init(preset=); mtia-emu --preset", "tensor layer",
            "the chip the PyTorch backend's devices emulate"},
    Setting{"MTIA_EMU_PRESET_DIR", "a folder of preset files",
            "the installation's share/mtia-emu/presets, else the source tree's presets/", "",
            "simulator", "where preset names are looked up"},
    Setting{"MTIA_EMU_SET", "KEY=VALUE[,KEY=VALUE...]", "none",
            "torch_mtia_emu.init(overrides=); mtia-emu --set", "tensor layer",
            "preset fields overridden (`mtia-emu info --config` lists the keys)"},
    Setting{"MTIA_EMU_TIMING", "0 or off: functional only", "on",
            "torch_mtia_emu.init(timing=); mtia-emu --no-timing", "tensor layer",
            "whether the timing model runs; results are the same either way, simulated times "
            "stay 0 without it"},
    Setting{"MTIA_EMU_KERNELS", "a kernel library image (.elf)",
            "the installation's share/mtia-emu/mtia_kernels.elf, else the build tree's",
            "torch_mtia_emu.init(kernels=)", "tools, tensor layer",
            "the device kernel library programs load"},
    // Devices and where they run.
    Setting{"MTIA_EMU_DEVICES", "1..64", "unset: one in-process device", "DeviceOptions::backend",
            "host API",
            "the number of devices, each a device server (`mtia-emu serve`) the process starts"},
    Setting{"MTIA_EMU_SERVER", "PATH[,PATH...]", "unset", "DeviceOptions::backend and ::server",
            "host API", "socket paths of running device servers, one device each, in order"},
    Setting{"MTIA_EMU_BIN", "the mtia-emu program", "the installation's, else the build tree's", "",
            "socket backend", "the program that serves the devices a process starts"},
    // Diagnostics.
    Setting{"MTIA_EMU_LOG_LEVEL", "trace, debug, info, warn, error, critical or off", "warn",
            "mtia-emu --log-level", "every component", "the level of every logger"},
    Setting{"MTIA_EMU_TRACE", "off, kernels or units", "off (mtia-emu's commands: kernels)",
            "DeviceOptions::trace; mtia-emu --trace", "host API, tools",
            "the device's performance trace: packets, copies and launches, or every PE unit "
            "operation too"},
    Setting{"MTIA_EMU_TRACE_MAX_EVENTS", "a positive number of events", "1000000",
            "DeviceOptions::trace_max_events; mtia-emu serve --trace-max-events", "host API, tools",
            "trace events a device keeps at most"},
    Setting{"MTIA_EMU_SANITIZE", "memcheck, racecheck, initcheck, synccheck (any, by commas); off",
            "off", "DeviceOptions::sanitize; mtia-emu run --sanitize", "host API",
            "the device sanitizer's checks (docs/sanitizer.md)"},
    Setting{"MTIA_EMU_PROFILER_MAX_RECORDS", "a positive number of records", "4000000", "",
            "tensor layer", "device activities and runtime calls one torch.profiler profile keeps"},
    // Host threads and waiting.
    Setting{"MTIA_EMU_WAIT", "auto, spin, yield or block", "auto",
            "DeviceOptions::wait; mtia-emu serve --wait", "host API, tools",
            "how host threads wait for the device and the simulator for the host"},
    Setting{"MTIA_EMU_UNIT_THREADS", "0..256", "host cores - 1, at most 6",
            "DeviceOptions::unit_threads; mtia-emu serve --unit-threads", "simulator",
            "helper threads that run the PE units' math"},
    Setting{"MTIA_EMU_INLINE_WORK_NS", "0..1000000000 (ns)", "5000",
            "DeviceOptions::inline_work_ns; mtia-emu serve --inline-work-ns", "simulator",
            "unit work shorter than this (estimated host ns) runs on the PE's own thread"},
    Setting{"MTIA_EMU_LAZY_LOADS", "0 or 1", "1",
            "DeviceOptions::lazy_loads; mtia-emu serve --lazy-loads", "simulator",
            "local-store loads copied only when first read (0: copied at once)"},
    Setting{"MTIA_EMU_DPE_GEMM", "avx512, avx2+fma or baseline",
            "the fastest build the host CPU runs", "", "simulator",
            "which host GEMM does the DPE's fp32 tile products (for measurements)"},
    // The PyTorch backend.
    Setting{"MTIA_EMU_FALLBACK", "warn, silent or error", "warn", "", "tensor layer",
            "what an op without a device kernel does: runs on the CPU with a warning, silently, "
            "or raises NotImplementedError"},
    Setting{"MTIA_EMU_MAX_PES", "1..64", "64", "", "tensor layer",
            "the most PEs one launch of the PyTorch backend or of a compiled kernel uses"},
    Setting{"MTIA_EMU_CONV_COLUMN_BYTES", "bytes", "268435456 (256 MiB)", "", "tensor layer",
            "the most bytes one convolution's column matrix takes before the batch is split"},
    Setting{"MTIA_EMU_KERNEL_CACHE", "a folder", "the folder mtia of Inductor's cache", "",
            "tensor layer", "where torch.compile's kernel modules for mtia are kept"},
    // The test suites.
    Setting{"MTIA_EMU_TEST_DEVICE", "a device index", "0", "", "tests/python",
            "the device the PyTorch suite's tests use"},
    Setting{"MTIA_EMU_DEVICE_TYPE_OPS", "a regular expression", "the suite's own op subset", "",
            "tests/python", "the ops test_device_type_ops.py runs (\".\" for all of op_db)"},
    Setting{"MTIA_EMU_SWEEP_SAMPLES", "a number of samples", "1", "", "tests/python",
            "OpInfo samples per op in test_opinfo_sweep.py"},
};

// Markdown cells must not break the table.
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else
      out += c;
  }
  return out;
}

}  // namespace

std::span<const Setting> all() {
  return kSettings;
}

const Setting* find(std::string_view name) {
  for (const Setting& s : kSettings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::optional<std::string> read(std::string_view name) {
  assert(find(name) != nullptr && "every MTIA_EMU_* variable is listed in settings.cpp");
  const char* value = std::getenv(std::string(name).c_str());
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  return std::string(value);
}

std::string markdown() {
  std::string out =
      "| variable | takes | unset or empty | also set by | read by | what it sets |\n"
      "|---|---|---|---|---|---|\n";
  for (const Setting& s : kSettings) {
    out += "| `" + std::string(s.name) + "` | " + cell(s.values) + " | " + cell(s.fallback) +
           " | " + cell(s.also) + " | " + cell(s.reader) + " | " + cell(s.meaning) + " |\n";
  }
  return out;
}

std::string describe_current() {
  std::string out;
  for (const Setting& s : kSettings) {
    const std::optional<std::string> value = read(s.name);
    out += std::string(s.name) + "=";
    out += value ? *value + "  (environment)" : "  (unset: " + std::string(s.fallback) + ")";
    out += "\n    " + std::string(s.meaning) + "\n";
  }
  return out;
}

}  // namespace mtia::settings
