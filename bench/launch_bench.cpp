// What one small launch costs the host, and how fast the PE core interprets (figures in
// docs/performance.md, "Launch cost").
//
// 1. Launch to completion: the kernel library's `binary` add of two 1024-float vectors on one
//    PE (the grid the PyTorch layer picks for 1K elements), through the host API with the
//    timing model on; each launch is followed by synchronize(), so a launch's figure is the
//    host wall time from queuing it to seeing it complete. After a warm-up, `launches` run
//    in 10 batches; the figure is the best batch's mean (wall, and the process's CPU time),
//    with the mean over all batches beside it. The native baseline is the same add done by the host
//    CPU in the same run; the ratio is device / native. The device's `instructions` statistic
//    (stats.json) gives the PE instructions each launch retires and their rate over the
//    launches' wall time.
// 2. The RV64 engine alone: a RiscvCore interpreting a loop of loads, ALU ops, stores and a
//    branch out of its local store, on this thread, with no SystemC and no launch around it:
//    PE instructions per host CPU second (no other thread runs then), best of 9.
// The add's result is checked against the host's; a wrong result aborts the bench.
//
// Usage: bench_launch [preset] [--launches N]   (default mtia-v2, 2000 launches)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cpu_time.h"
#include "kernel_library.h"
#include "mtia/device.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/program.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_port.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace pe = mtia::sim::pe;

constexpr int64_t kElems = 1024;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The device's retired PE instructions so far (stats.json, pe_grid.instructions).
double device_instructions(mtia::Device& dev) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("bench_launch_" + std::to_string(::getpid()));
  dev.write_artifacts(dir.string());
  std::ifstream in(dir / "stats.json");
  const auto stats = nlohmann::json::parse(in);
  std::filesystem::remove_all(dir);
  return stats.at("pe_grid").at("instructions").at("value").get<double>();
}

// ---- 1. launch to completion ----------------------------------------------------------------

void launch_figures(const std::string& preset, int launches) {
  mtia::DeviceOptions options;
  options.preset = preset;
  options.timing = true;
  mtia::Device dev = mtia::Device::open(options);
  const mtia::KernelModule lib = dev.load_module(mtia::tools::kernel_library_path());
  const mtia::Kernel& binary = lib.kernel("binary");

  std::vector<float> a(kElems), b(kElems), out(kElems), ref(kElems);
  for (int64_t i = 0; i < kElems; ++i) {
    a[i] = 0.25f * static_cast<float>(i % 97) - 3.0f;
    b[i] = 1.5f - 0.125f * static_cast<float>(i % 31);
  }
  const uint64_t bytes = kElems * sizeof(float);
  const mtia::DevicePtr da = dev.malloc(bytes), db = dev.malloc(bytes), dout = dev.malloc(bytes);
  dev.copy(da, a.data(), bytes);
  dev.copy(db, b.data(), bytes);
  constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32
  const int64_t one = 1, n = kElems;
  const std::vector<mtia::Arg> args = {dout,
                                       da,
                                       db,
                                       int64_t{MTIA_PE_SE_ADD},
                                       mtia::Arg::dtype(kFp32),
                                       one,
                                       one,
                                       one,
                                       n,  // sizes
                                       n,
                                       n,
                                       n,
                                       one,  // out strides
                                       n,
                                       n,
                                       n,
                                       one,  // a strides
                                       n,
                                       n,
                                       n,
                                       one};  // b strides
  const auto launch_once = [&] {
    dev.launch(binary, mtia::Grid{1, 1}, args);
    dev.synchronize();
  };
  for (int i = 0; i < 50; ++i) launch_once();  // warm-up: decoded image cached, pages touched
  dev.copy(out.data(), dout, bytes);
  for (int64_t i = 0; i < kElems; ++i) {
    if (out[i] != a[i] + b[i]) {
      throw std::runtime_error("wrong sum at element " + std::to_string(i));
    }
  }

  // In batches: the best batch's mean is what a quiet machine gives; the mean over all of
  // them is what this run's machine gave.
  constexpr int kBatches = 10;
  const int per_batch = std::max(1, launches / kBatches);
  double best_wall = 1e30, best_cpu = 0, wall = 0;
  const double instr0 = device_instructions(dev);
  for (int batch = 0; batch < kBatches; ++batch) {
    const double cpu0 = mtia::bench::process_cpu_seconds();
    const auto t0 = Clock::now();
    for (int i = 0; i < per_batch; ++i) launch_once();
    const double w = seconds_since(t0);
    const double c = mtia::bench::process_cpu_seconds() - cpu0;
    wall += w;
    if (w < best_wall) {
      best_wall = w;
      best_cpu = c;
    }
  }
  const double instructions = device_instructions(dev) - instr0;
  launches = per_batch * kBatches;

  // Native: the same add on the host, repeated until it has run as long as a few launches.
  int reps = 0;
  const auto n0 = Clock::now();
  double native = 0;
  do {
    for (int k = 0; k < 1000; ++k, ++reps) {
      for (int64_t i = 0; i < kElems; ++i) ref[i] = a[i] + b[i];
      asm volatile("" : : "r"(ref.data()) : "memory");  // keep every repetition
    }
    native = seconds_since(n0);
  } while (native < 0.05);

  const double best_us = best_wall / per_batch * 1e6;
  const double native_us = native / reps * 1e6;
  std::printf("preset %s, binary add of %lld fp32 on 1 PE, timing on, %d launches in %d batches\n",
              preset.c_str(), static_cast<long long>(kElems), launches, kBatches);
  std::printf(
      "  launch to completion: %8.2f us wall (%.2f us CPU, both threads) per launch in the "
      "best batch, %.2f us wall over all\n",
      best_us, best_cpu / per_batch * 1e6, wall / launches * 1e6);
  std::printf("  native (host add):    %8.3f us        device (best batch) / native %.0fx\n",
              native_us, best_us / native_us);
  std::printf("  PE instructions:      %8.0f per launch, %.1f M/s of the best batch's wall time\n",
              instructions / launches, instructions / launches / best_wall * per_batch / 1e6);
}

// ---- 2. the RV64 engine alone ---------------------------------------------------------------

uint32_t i_type(uint32_t opc, uint32_t f3, uint32_t rd, uint32_t rs1, int32_t imm) {
  return (static_cast<uint32_t>(imm) & 0xfff) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | opc;
}
uint32_t s_type(uint32_t f3, uint32_t rs1, uint32_t rs2, int32_t imm) {
  const auto u = static_cast<uint32_t>(imm);
  return ((u >> 5) & 0x7f) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | (u & 0x1f) << 7 | 0x23;
}
uint32_t r_type(uint32_t f3, uint32_t f7, uint32_t rd, uint32_t rs1, uint32_t rs2) {
  return f7 << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | rd << 7 | 0x33;
}
uint32_t bne(uint32_t rs1, uint32_t rs2, int32_t off) {
  const auto u = static_cast<uint32_t>(off);
  return ((u >> 12) & 1) << 31 | ((u >> 5) & 0x3f) << 25 | rs2 << 20 | rs1 << 15 | 1 << 12 |
         ((u >> 1) & 0xf) << 8 | ((u >> 11) & 1) << 7 | 0x63;
}

class NoUnits final : public pe::UnitPort {
 public:
  pe::UnitResponse issue(pe::RiscvCore&, const pe::UnitRequest&) override {
    throw std::logic_error("the engine loop issues no unit instructions");
  }
};

void engine_figures() {
  // x10 = a0 points at nothing useful; the loop works on the stack (sp = top of the local
  // store): it sums and rewrites 8 doublewords below sp, kIters times.
  constexpr uint64_t kIters = 1000 << 14;  // t1 below
  std::vector<uint32_t> words = {
      i_type(0x13, 0, 5, 0, 0),     // addi t0, x0, 0        (counter)
      i_type(0x13, 0, 6, 0, 1000),  // addi t1, x0, 1000
      i_type(0x13, 1, 6, 6, 14),    // slli t1, t1, 14       (kIters)
      i_type(0x13, 0, 7, 2, -64),   // addi t2, sp, -64      (loop body start)
      i_type(0x03, 3, 28, 7, 0),    // ld   t3, 0(t2)
      i_type(0x03, 3, 29, 7, 8),    // ld   t4, 8(t2)
      r_type(0, 0, 30, 28, 29),     // add  t5, t3, t4
      r_type(4, 0, 31, 30, 5),      // xor  t6, t5, t0
      s_type(3, 7, 31, 16),         // sd   t6, 16(t2)
      r_type(0, 1, 30, 30, 5),      // mul  t5, t5, t0
      s_type(3, 7, 30, 24),         // sd   t5, 24(t2)
      i_type(0x13, 0, 5, 5, 1),     // addi t0, t0, 1
      bne(5, 6, -9 * 4),            // bne  t0, t1, body
      0x00000073,                   // ecall
  };
  pe::ElfImage image;
  image.entry = MTIA_PE_IMAGE_BASE;
  pe::Segment text;
  text.vaddr = MTIA_PE_IMAGE_BASE;
  text.bytes.resize(words.size() * 4);
  std::memcpy(text.bytes.data(), words.data(), text.bytes.size());
  text.mem_bytes = text.bytes.size();
  text.readable = text.executable = true;
  image.segments.push_back(text);
  auto program = pe::Program::create(image);
  if (!program) throw std::runtime_error(program.error().reason);

  std::vector<uint8_t> ls(64 * 1024);
  NoUnits port;
  pe::RiscvCore core(pe::CoreConfig{}, ls, port);
  // Run to the ecall, without an instruction budget, as the PE model runs its cores.
  constexpr uint64_t kBodyInsns = 10;
  const uint64_t expected = 3 + kIters * kBodyInsns + 1;
  double best = 1e30;
  uint64_t retired = 0;
  for (int run = 0; run < 9; ++run) {
    if (!core.start(program.value(), pe::LaunchContext{})) throw std::runtime_error("start failed");
    // CPU time: other processes on the machine stretch wall time, not this.
    const double t0 = mtia::bench::process_cpu_seconds();
    const pe::RunResult r = core.run(~0ull);
    best = std::min(best, mtia::bench::process_cpu_seconds() - t0);
    if (r.reason != pe::StopReason::kExit || r.instructions != expected) {
      throw std::runtime_error("the engine loop did not run to its end");
    }
    retired = r.instructions;
  }
  std::printf(
      "RV64 engine alone, one thread: %.0f M instructions in %.3f s CPU, %.1f M PE "
      "instructions/s of CPU time (best of 9)\n",
      retired / 1e6, best, retired / best / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "mtia-v2";
  int launches = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--launches" && i + 1 < argc) {
      launches = std::atoi(argv[++i]);
      if (launches < 1) {
        std::fprintf(stderr, "--launches must be at least 1\n");
        return 2;
      }
    } else if (!a.empty() && a[0] != '-') {
      preset = a;
    } else {
      std::fprintf(stderr, "usage: bench_launch [preset] [--launches N]\n");
      return 2;
    }
  }
  try {
    // The engine first: a profile of the launches can then skip its first seconds
    // (perf record -D).
    engine_figures();
    launch_figures(preset, launches);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_launch: %s\n", e.what());
    return 1;
  }
  return 0;
}
