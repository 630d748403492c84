// A small stand-in for the device, enough to run library kernels on the PE interpreter:
// a byte vector as device DRAM, N RiscvCores (one per PE of the launch grid) scheduled
// round-robin in large instruction batches, and a UnitPort that
//   - carries out dma.start between the DRAM and the core's local store (N-D, strided),
//   - runs dpe.matmul / se.op / re.reduce / mlu.op on mtia::sim::pe::FunctionalUnits,
//   - completes every operation at issue (so pe.wait / pe.waitall return at once; waiting on
//     a tag that was never issued is a fault),
//   - stalls a core at pe.barrier until every core of the launch has reached it.
// No timing: this checks what kernels compute. The SystemC PE model does the same with time.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/isa/pe/kernel_meta.h"
#include "mtia/sim/pe/program.h"

namespace kt {

using mtia::isa::KernelArgKind;

// One launch argument: its kind (checked against the kernel's signature) and its 8-byte slot.
struct Arg {
  KernelArgKind kind;
  uint64_t bits;
};
inline Arg ptr(uint64_t device_addr) {
  return {KernelArgKind::kPointer, device_addr};
}
inline Arg i64(int64_t v) {
  return {KernelArgKind::kI64, static_cast<uint64_t>(v)};
}
inline Arg f32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return {KernelArgKind::kF32, b};
}
inline Arg dtype(uint8_t dt) {
  return {KernelArgKind::kDtype, dt};
}

// A kernel module: the ELF, its metadata, and one Program per kernel (entry = the kernel's).
class Module {
 public:
  explicit Module(const std::string& path);
  // The kernel library built by kernels/CMakeLists.txt (MTIA_KERNELS_ELF), loaded once.
  static const Module& library();

  const mtia::isa::KernelModuleInfo& info() const { return info_; }
  // Throws std::out_of_range naming the kernel when the module has no such kernel.
  const mtia::isa::KernelInfo& kernel(std::string_view name) const;
  std::shared_ptr<const mtia::sim::pe::Program> program(std::string_view name) const;
  // The module's ELF entry point (not a kernel).
  std::shared_ptr<const mtia::sim::pe::Program> elf_entry_program() const { return elf_entry_; }

 private:
  mtia::isa::KernelModuleInfo info_;
  std::vector<std::shared_ptr<const mtia::sim::pe::Program>> programs_;  // as info_.kernels
  std::shared_ptr<const mtia::sim::pe::Program> elf_entry_;
};

struct LaunchConfig {
  uint32_t grid_rows = 1;
  uint32_t grid_cols = 1;
  uint64_t ls_bytes = 128 * 1024;            // per PE: mtia-v1 128 KiB, mtia-v2 384 KiB
  uint64_t watchdog_cycles = 4'000'000'000;  // per PE
};
inline LaunchConfig grid(uint32_t pes, uint64_t ls_bytes = 128 * 1024) {
  LaunchConfig c;
  c.grid_rows = pes <= 8 ? 1 : pes / 8;
  c.grid_cols = pes <= 8 ? pes : 8;
  c.ls_bytes = ls_bytes;
  return c;
}

// What the units saw during a launch, summed over the PEs.
struct UnitStats {
  uint64_t dma = 0, matmul = 0, eltwise = 0, reduce = 0, layout = 0, barriers = 0;
  // dpe.matmul that overlapped one of the PE's DMAs: issued while a DMA was outstanding
  // (issued, not yet waited for), or outstanding itself when a DMA was issued. Counted when
  // the matmul is waited for: the double buffering at work.
  uint64_t matmul_overlapping_dma = 0;
  uint64_t matmul_trans_a = 0, matmul_trans_b = 0;  // dpe.matmul with TRANS_A / TRANS_B
  uint64_t instructions = 0;
  uint64_t max_core_cycles = 0;
};

struct PeResult {
  bool exited = false;
  int64_t exit_status = 0;
  bool faulted = false;
  std::string fault;
};

struct LaunchResult {
  std::vector<PeResult> pes;
  std::string error;  // a launch-level problem (barrier deadlock, scheduler limit)
  UnitStats stats;

  // Every PE exited with status 0.
  bool ok() const;
  // The exit status all PEs agree on, or -1 if they do not (or one faulted).
  int64_t status() const;
  // The first fault or error, for test messages.
  std::string describe() const;
};

class Device {
 public:
  explicit Device(uint64_t dram_bytes = 8ull << 20) : dram_(dram_bytes, 0) {}

  // Bump allocation; the bytes are filled with 0xA5 so unwritten outputs show up.
  uint64_t alloc(uint64_t bytes, uint64_t align = 64);
  void write(uint64_t addr, const void* src, uint64_t n);
  void read(uint64_t addr, void* dst, uint64_t n) const;
  std::vector<uint8_t>& dram() { return dram_; }

  // Checks the arguments against the kernel's signature (count and kinds; throws
  // std::invalid_argument saying what differs), then runs the kernel on the grid.
  LaunchResult launch(const Module& module, std::string_view kernel, const std::vector<Arg>& args,
                      const LaunchConfig& config = {});
  // Runs a program with a raw argument block: no signature check (for the kernels' own
  // checks and for programs that are not kernels).
  LaunchResult run(std::shared_ptr<const mtia::sim::pe::Program> program,
                   const std::vector<uint8_t>& arg_block, const LaunchConfig& config);

 private:
  std::vector<uint8_t> dram_;
  uint64_t next_ = 4096;  // keep device address 0 unused: a zero pointer is a kernel bug
};

}  // namespace kt
