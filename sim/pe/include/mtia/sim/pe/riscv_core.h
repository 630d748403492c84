// The PE control core: an in-order RV64IM interpreter with the MTIA unit extension.
//
// The core executes a Program in large batches (run) and stops only when it must: the kernel
// exits or faults, a unit instruction needs the PE model (UnitPort answered kStall), or the
// caller's instruction or cycle budget is used up. It keeps its own cycle count from a
// per-class cost table, so a SystemC model can run it far ahead and synchronise only at unit
// instructions. Plain C++: no SystemC here. Not thread-safe; one thread drives one core.
//
// Address space (docs/pe-isa.md): image segments in [MTIA_PE_IMAGE_BASE, +1 MiB), the launch
// arguments (read-only) at MTIA_PE_ARGS_BASE, the local store at MTIA_PE_LS_BASE. Nothing
// else is mapped; there is no MMIO.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/sim/pe/program.h"
#include "mtia/sim/pe/unit_port.h"

namespace mtia::sim::pe {

// Cycles charged per instruction class (core clock cycles). The defaults model a simple
// single-issue in-order pipeline with a one-cycle local-store access.
struct CoreTiming {
  uint32_t alu = 1;           // integer ALU ops, LUI, AUIPC, FENCE, pe.info
  uint32_t branch = 1;        // conditional branch not taken
  uint32_t branch_taken = 2;  // conditional branch taken (one bubble)
  uint32_t jump = 2;          // JAL, JALR
  uint32_t load = 2;          // 1 issue + 1 local-store latency
  uint32_t store = 1;         // stores are posted
  uint32_t mul = 3;           // MUL, MULH*, MULW
  uint32_t div = 20;          // DIV*, REM* (iterative divider)
  uint32_t unit_issue = 1;    // issuing a unit instruction; the unit's own time is the port's
  uint32_t system = 1;        // ECALL, EBREAK
};

struct CoreConfig {
  CoreTiming timing;
};

// Where a launch puts this core: its place in the grid and its arguments.
struct LaunchContext {
  uint32_t grid_rows = 1;  // >= 1
  uint32_t grid_cols = 1;  // >= 1
  uint32_t pe_row = 0;     // < grid_rows
  uint32_t pe_col = 0;     // < grid_cols
  // The argument block, copied to MTIA_PE_ARGS_BASE; at most MTIA_PE_ARGS_MAX_BYTES.
  std::vector<uint8_t> args;
  // The kernel faults when its cycle count reaches this. 0 = no limit (the PE model passes
  // the device's default instead of 0).
  uint64_t watchdog_cycles = 0;
  // The on-chip SRAM, which a running launch owns as scratch (pe.info answers these).
  uint64_t sram_base = 0;   // device address
  uint64_t sram_bytes = 0;  // bytes
};

enum class FaultKind : uint8_t {
  kIllegalInstruction,  // not RV64IM, not a defined unit instruction, or reserved fields set
  kFetchFault,          // pc outside every executable segment
  kMisalignedFetch,     // jump or branch to an address that is not a multiple of 4
  kMisalignedAccess,    // load/store address not a multiple of its width
  kAccessFault,         // load/store outside the mapped windows, or store to read-only memory
  kBreakpoint,          // EBREAK (__builtin_debugtrap): a kernel's own assertion
  kWatchdog,            // the cycle limit of the launch was reached
  kUnit,                // the UnitPort rejected a unit instruction (bad operands)
};
const char* fault_kind_name(FaultKind kind);

struct Fault {
  FaultKind kind = FaultKind::kIllegalInstruction;
  uint64_t pc = 0;     // the faulting instruction
  uint64_t addr = 0;   // the data or target address involved, where there is one
  uint32_t insn = 0;   // the instruction word (0 if the pc was not in code)
  std::string reason;  // a sentence for people, naming pc and what was wrong
};

enum class StopReason : uint8_t {
  kExit,       // ECALL: the kernel finished; exit_status() is its a0
  kFault,      // fault() says why
  kUnitStall,  // the UnitPort stalled a unit instruction: call resume() when it completes
  kBudget,     // the instruction budget or cycle horizon of this run() was reached
};
const char* stop_reason_name(StopReason reason);

struct RunResult {
  StopReason reason = StopReason::kBudget;
  uint64_t instructions = 0;  // retired during this run() call
  uint64_t cycles = 0;        // core cycles that passed during this run() call
};

class RiscvCore {
 public:
  enum class State : uint8_t { kIdle, kReady, kStalled, kExited, kFaulted };

  static constexpr uint64_t kNoHorizon = ~0ull;

  // `local_store` is the PE's local store, owned by the PE model (its units use it too); at
  // most MTIA_PE_LS_MAX_BYTES. `port` receives the unit instructions. Both must outlive the
  // core.
  RiscvCore(const CoreConfig& config, std::span<uint8_t> local_store, UnitPort& port);

  // Prepares a launch: maps the program's segments (copying its local-store segments into the
  // local store; the rest of the local store keeps its contents), copies the arguments, zeroes
  // the registers and counters, and sets pc = entry, sp = top of the local store (16-byte
  // aligned), a0 = MTIA_PE_ARGS_BASE, a1 = argument bytes. Rejects a program that needs more
  // local store than this PE has, and a bad grid position or argument block.
  isa::Status start(std::shared_ptr<const Program> program, const LaunchContext& launch);

  // Executes until one of StopReason happens; at most `max_instructions` instructions, and
  // stops with kBudget once cycles() >= cycle_horizon. Requires state() == kReady.
  RunResult run(uint64_t max_instructions, uint64_t cycle_horizon = kNoHorizon);

  // Completes the stalled unit instruction: rd = value, retires it, and adds the cycles the
  // core spent waiting. Requires state() == kStalled.
  void resume(uint64_t value, uint64_t stalled_cycles);

  State state() const { return state_; }
  uint64_t pc() const { return pc_; }
  uint64_t reg(unsigned index) const { return index == 0 ? 0 : x_[index]; }
  void set_reg(unsigned index, uint64_t value);  // for tests and debuggers; x0 stays 0
  uint64_t cycles() const { return cycles_; }
  uint64_t instret() const { return instret_; }
  int64_t exit_status() const { return exit_status_; }
  const Fault& fault() const { return fault_; }  // valid in kFaulted
  const LaunchContext& launch() const { return launch_; }
  uint32_t pe_id() const { return launch_.pe_row * launch_.grid_cols + launch_.pe_col; }

  // Memory as the core sees it, for the UnitPort (descriptors) and for tests. Each returns
  // false, and copies nothing, unless all of [addr, addr + bytes) is mapped (and, for
  // writes, writable).
  bool read_memory(uint64_t addr, std::span<uint8_t> dst) const;
  bool write_memory(uint64_t addr, std::span<const uint8_t> src);

  std::span<uint8_t> local_store() const { return ls_; }

  // Local-store bytes [lo, hi) (offsets) that unit work running off the simulator thread is
  // using: a load or store that touches them calls UnitPort::guarded_access first. Clearing
  // (an empty range) makes every access plain again.
  void guard(uint64_t lo, uint64_t hi) {
    if (guard_all_) return;
    // An access of up to 8 bytes at offset off overlaps [lo, hi) when off - (lo - 7) < span.
    guard_lo_ = lo >= 7 ? lo - 7 : 0;
    guard_span_ = hi > guard_lo_ ? hi - guard_lo_ : 0;
  }
  void clear_guard() {
    if (!guard_all_) guard_lo_ = guard_span_ = 0;
  }
  // Every load and store of the local store goes to UnitPort::guarded_access while on (the
  // sanitizer's initcheck watches them); guard() and clear_guard() then change nothing.
  void guard_all(bool on) {
    guard_all_ = on;
    guard_lo_ = 0;
    guard_span_ = on ? ~uint64_t{0} : 0;
  }

  // Offset into the local store of [addr, addr + bytes), if it lies entirely inside it.
  std::optional<uint64_t> local_offset(uint64_t addr, uint64_t bytes) const;

 private:
  struct Region {
    uint64_t base = 0;
    uint64_t size = 0;
    uint8_t* data = nullptr;
    bool writable = false;
  };

  // run() with or without an instruction budget to count down.
  template <bool kBudget>
  RunResult run_until(uint64_t max_instructions, uint64_t cycle_horizon);
  const uint8_t* map_read(uint64_t addr, uint64_t bytes) const;
  uint8_t* map_write(uint64_t addr, uint64_t bytes);
  const Region* find_region(uint64_t addr, uint64_t bytes) const;
  void raise(FaultKind kind, uint64_t pc, uint64_t addr, std::string reason);
  std::string describe_unmapped(uint64_t addr, uint64_t bytes, bool write) const;

  CoreConfig config_;
  std::span<uint8_t> ls_;
  UnitPort& port_;
  uint32_t cost_[128] = {};  // cycles per internal operation, from config_.timing
  uint64_t guard_lo_ = 0;    // see guard()
  uint64_t guard_span_ = 0;
  bool guard_all_ = false;

  std::shared_ptr<const Program> program_;
  LaunchContext launch_;
  std::vector<std::vector<uint8_t>> writable_copies_;  // per-launch copies of writable segments
  std::vector<Region> regions_;                        // image segments and the args block

  uint64_t x_[33] = {};  // x_[32] is the sink for writes to x0
  uint64_t pc_ = 0;
  uint64_t cycles_ = 0;
  uint64_t instret_ = 0;
  int64_t exit_status_ = 0;
  uint8_t stalled_rd_ = 32;
  State state_ = State::kIdle;
  Fault fault_;
};

}  // namespace mtia::sim::pe
