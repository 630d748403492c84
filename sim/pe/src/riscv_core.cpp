#include "mtia/sim/pe/riscv_core.h"

#include <cassert>
#include <cstring>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "mtia/isa/pe/pe_ops.h"
#include "pe_logger.h"
#include "riscv_decode.h"

namespace mtia::sim::pe {

using namespace detail;

namespace {

constexpr uint8_t kSink = 32;

int64_t sext32(uint64_t v) {
  return static_cast<int32_t>(static_cast<uint32_t>(v));
}

// RISC-V division never traps: x/0 = all ones, x%0 = x, and the one overflowing signed
// quotient (MIN / -1) is MIN with remainder 0.
uint64_t div_s(uint64_t a, uint64_t b) {
  const auto x = static_cast<int64_t>(a);
  const auto y = static_cast<int64_t>(b);
  if (y == 0) return ~0ull;
  if (x == std::numeric_limits<int64_t>::min() && y == -1) return a;
  return static_cast<uint64_t>(x / y);
}
uint64_t rem_s(uint64_t a, uint64_t b) {
  const auto x = static_cast<int64_t>(a);
  const auto y = static_cast<int64_t>(b);
  if (y == 0) return a;
  if (x == std::numeric_limits<int64_t>::min() && y == -1) return 0;
  return static_cast<uint64_t>(x % y);
}
uint64_t div_u(uint64_t a, uint64_t b) {
  return b == 0 ? ~0ull : a / b;
}
uint64_t rem_u(uint64_t a, uint64_t b) {
  return b == 0 ? a : a % b;
}
uint64_t div_w(uint64_t a, uint64_t b) {
  const auto x = static_cast<int32_t>(a);
  const auto y = static_cast<int32_t>(b);
  if (y == 0) return ~0ull;
  if (x == std::numeric_limits<int32_t>::min() && y == -1) return static_cast<uint64_t>(sext32(a));
  return static_cast<uint64_t>(int64_t{x / y});
}
uint64_t rem_w(uint64_t a, uint64_t b) {
  const auto x = static_cast<int32_t>(a);
  const auto y = static_cast<int32_t>(b);
  if (y == 0) return static_cast<uint64_t>(int64_t{x});
  if (x == std::numeric_limits<int32_t>::min() && y == -1) return 0;
  return static_cast<uint64_t>(int64_t{x % y});
}
uint64_t divu_w(uint64_t a, uint64_t b) {
  const auto x = static_cast<uint32_t>(a);
  const auto y = static_cast<uint32_t>(b);
  return static_cast<uint64_t>(sext32(y == 0 ? 0xffffffffu : x / y));
}
uint64_t remu_w(uint64_t a, uint64_t b) {
  const auto x = static_cast<uint32_t>(a);
  const auto y = static_cast<uint32_t>(b);
  return static_cast<uint64_t>(sext32(y == 0 ? x : x % y));
}
uint64_t mulh(uint64_t a, uint64_t b) {
  const __int128 p = static_cast<__int128>(static_cast<int64_t>(a)) * static_cast<int64_t>(b);
  return static_cast<uint64_t>(static_cast<unsigned __int128>(p) >> 64);
}
uint64_t mulhsu(uint64_t a, uint64_t b) {
  // The signed x unsigned product fits in 128 signed bits: |a| <= 2^63, b < 2^64.
  const __int128 p = static_cast<__int128>(static_cast<int64_t>(a)) * static_cast<__int128>(b);
  return static_cast<uint64_t>(static_cast<unsigned __int128>(p) >> 64);
}
uint64_t mulhu(uint64_t a, uint64_t b) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
}

template <typename T>
T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

RiscvCore::RiscvCore(const CoreConfig& config, std::span<uint8_t> local_store, UnitPort& port)
    : config_(config), ls_(local_store), port_(port) {
  if (ls_.size() > MTIA_PE_LS_MAX_BYTES) {
    throw std::invalid_argument(
        fmt::format("PE local store of {} bytes does not fit the core's {}-byte local-store window",
                    ls_.size(), MTIA_PE_LS_MAX_BYTES));
  }
  const CoreTiming& t = config_.timing;
  for (uint32_t& c : cost_) c = t.alu;
  for (Op op : {kBeq, kBne, kBlt, kBge, kBltu, kBgeu}) cost_[op] = t.branch;  // + taken extra
  for (Op op : {kJal, kJalr}) cost_[op] = t.jump;
  for (Op op : {kLb, kLh, kLw, kLd, kLbu, kLhu, kLwu}) cost_[op] = t.load;
  for (Op op : {kSb, kSh, kSw, kSd}) cost_[op] = t.store;
  for (Op op : {kMul, kMulh, kMulhsu, kMulhu, kMulw}) cost_[op] = t.mul;
  for (Op op : {kDiv, kDivu, kRem, kRemu, kDivw, kDivuw, kRemw, kRemuw}) cost_[op] = t.div;
  cost_[kUnit] = t.unit_issue;
  cost_[kEcall] = t.system;
  cost_[kEbreak] = t.system;
  cost_[kFetchFault] = 0;
  cost_[kIllegal] = 0;
}

isa::Status RiscvCore::start(std::shared_ptr<const Program> program, const LaunchContext& launch) {
  auto reject = [](std::string why) {
    return isa::reject(isa::ErrorCode::kUnsupported, std::move(why));
  };
  if (!program) return reject("no program given to start");
  if (launch.grid_rows == 0 || launch.grid_cols == 0 || launch.pe_row >= launch.grid_rows ||
      launch.pe_col >= launch.grid_cols) {
    return reject(fmt::format("PE ({}, {}) is not inside a {} x {} launch grid", launch.pe_row,
                              launch.pe_col, launch.grid_rows, launch.grid_cols));
  }
  if (launch.args.size() > MTIA_PE_ARGS_MAX_BYTES) {
    return reject(fmt::format("argument block of {} bytes exceeds the {}-byte argument window",
                              launch.args.size(), MTIA_PE_ARGS_MAX_BYTES));
  }
  if (program->local_store_bytes_used() > ls_.size()) {
    return reject(
        fmt::format("kernel image places {} bytes of local-store data but this PE has {} bytes",
                    program->local_store_bytes_used(), ls_.size()));
  }

  program_ = std::move(program);
  launch_ = launch;
  regions_.clear();
  writable_copies_.clear();
  for (const Program::ImageSegment& s : program_->image_segments()) {
    Region r{s.base, s.bytes.size(), nullptr, s.writable};
    if (s.writable) {
      writable_copies_.push_back(s.bytes);  // fresh initial data for every launch
      r.data = writable_copies_.back().data();
    } else {
      // Read-only segments are shared with every core running this program.
      r.data = const_cast<uint8_t*>(s.bytes.data());
    }
    regions_.push_back(r);
  }
  if (!launch_.args.empty()) {
    regions_.push_back({MTIA_PE_ARGS_BASE, launch_.args.size(), launch_.args.data(), false});
  }
  for (const Program::LocalSegment& s : program_->local_segments()) {
    std::memcpy(ls_.data() + s.offset, s.bytes.data(), s.bytes.size());
  }

  std::fill(std::begin(x_), std::end(x_), 0);
  x_[2] = (MTIA_PE_LS_BASE + ls_.size()) & ~uint64_t{15};  // sp
  x_[10] = MTIA_PE_ARGS_BASE;                              // a0
  x_[11] = launch_.args.size();                            // a1
  pc_ = program_->entry();
  cycles_ = 0;
  instret_ = 0;
  exit_status_ = 0;
  stalled_rd_ = kSink;
  fault_ = Fault{};
  state_ = State::kReady;
  detail::logger()->debug("PE {} start: entry {:#x}, {} code words, {} argument bytes", pe_id(),
                          pc_, program_->code_size(), launch_.args.size());
  return {};
}

void RiscvCore::set_reg(unsigned index, uint64_t value) {
  if (index >= 32) throw std::out_of_range("RISC-V register index must be < 32");
  if (index != 0) x_[index] = value;
}

const RiscvCore::Region* RiscvCore::find_region(uint64_t addr, uint64_t bytes) const {
  for (const Region& r : regions_) {
    if (addr >= r.base && addr - r.base < r.size && bytes <= r.size - (addr - r.base)) return &r;
  }
  return nullptr;
}

std::optional<uint64_t> RiscvCore::local_offset(uint64_t addr, uint64_t bytes) const {
  const uint64_t off = addr - MTIA_PE_LS_BASE;
  if (addr < MTIA_PE_LS_BASE || off > ls_.size() || bytes > ls_.size() - off) return std::nullopt;
  return off;
}

const uint8_t* RiscvCore::map_read(uint64_t addr, uint64_t bytes) const {
  const uint64_t off = addr - MTIA_PE_LS_BASE;
  if (off < ls_.size() && bytes <= ls_.size() - off) return ls_.data() + off;
  const Region* r = find_region(addr, bytes);
  return r == nullptr ? nullptr : r->data + (addr - r->base);
}

uint8_t* RiscvCore::map_write(uint64_t addr, uint64_t bytes) {
  const uint64_t off = addr - MTIA_PE_LS_BASE;
  if (off < ls_.size() && bytes <= ls_.size() - off) return ls_.data() + off;
  const Region* r = find_region(addr, bytes);
  return r == nullptr || !r->writable ? nullptr : r->data + (addr - r->base);
}

bool RiscvCore::read_memory(uint64_t addr, std::span<uint8_t> dst) const {
  if (dst.empty()) return true;
  const uint8_t* p = map_read(addr, dst.size());
  if (p == nullptr) return false;
  std::memcpy(dst.data(), p, dst.size());
  return true;
}

bool RiscvCore::write_memory(uint64_t addr, std::span<const uint8_t> src) {
  if (src.empty()) return true;
  uint8_t* p = map_write(addr, src.size());
  if (p == nullptr) return false;
  std::memcpy(p, src.data(), src.size());
  return true;
}

std::string RiscvCore::describe_unmapped(uint64_t addr, uint64_t bytes, bool write) const {
  if (write && find_region(addr, bytes) != nullptr) {
    return fmt::format(
        "store of {} bytes to {:#x}, which is read-only (code, constants or "
        "launch arguments)",
        bytes, addr);
  }
  return fmt::format(
      "{} of {} bytes at {:#x} is outside the mapped memory (local store [{:#x}, {:#x}), the "
      "image segments and the argument block)",
      write ? "store" : "load", bytes, addr, MTIA_PE_LS_BASE, MTIA_PE_LS_BASE + ls_.size());
}

void RiscvCore::raise(FaultKind kind, uint64_t pc, uint64_t addr, std::string reason) {
  uint32_t insn = 0;
  const uint64_t index = (pc - program_->code_base()) / 4;
  if (pc >= program_->code_base() && index < program_->code_size()) {
    insn = program_->raw_word(index);
  }
  fault_ = Fault{kind, pc, addr, insn,
                 fmt::format("{} at pc {:#x}: {}", fault_kind_name(kind), pc, reason)};
  state_ = State::kFaulted;
  detail::logger()->debug("PE {} fault: {}", pe_id(), fault_.reason);
}

RunResult RiscvCore::run(uint64_t max_instructions, uint64_t cycle_horizon) {
  if (state_ != State::kReady) {
    throw std::logic_error(
        "RiscvCore::run called while the core is not ready (not started, "
        "stalled on a unit instruction, exited or faulted)");
  }
  // The PE model runs without an instruction budget: its loop then counts no budget down.
  return max_instructions == ~0ull ? run_until<false>(max_instructions, cycle_horizon)
                                   : run_until<true>(max_instructions, cycle_horizon);
}

template <bool kBudget>
RunResult RiscvCore::run_until(uint64_t max_instructions, uint64_t cycle_horizon) {
  const DecodedInsn* const code = program_->code();
  const uint64_t code_base = program_->code_base();
  const uint64_t code_size = program_->code_size();
  const uint64_t watchdog = launch_.watchdog_cycles == 0 ? ~0ull : launch_.watchdog_cycles;
  const uint64_t stop_at = std::min(watchdog, cycle_horizon);
  uint8_t* const ls = ls_.data();
  const uint64_t ls_size = ls_.size();
  uint64_t* const x = x_;
  // Added to a taken branch's base cost; modular arithmetic keeps a cheaper taken branch right.
  const uint64_t taken_extra =
      static_cast<uint64_t>(int64_t{config_.timing.branch_taken} - int64_t{config_.timing.branch});

  const uint64_t start_cycles = cycles_;
  const uint64_t start_instret = instret_;
  uint64_t pc = pc_;
  uint64_t cycles = cycles_;
  uint64_t n = 0;

  // The loop's state (pc, cycles, n) stays in registers: the exits take it by value. A lambda
  // that captured it by reference would give it a memory home that every instruction paid for.
  auto finish = [this, start_cycles, start_instret](StopReason why, uint64_t at_pc,
                                                    uint64_t at_cycles, uint64_t count) {
    pc_ = at_pc;
    cycles_ = at_cycles;
    instret_ = start_instret + count;
    return RunResult{why, count, at_cycles - start_cycles};
  };
#define MTIA_FINISH(why) return finish(why, pc, cycles, n)
  // Loads and stores: the local store is the fast path; everything else goes to the regions.
  auto access_fault = [this](uint64_t at_pc, uint64_t addr, uint64_t bytes, bool write) {
    if ((addr & (bytes - 1)) != 0) {
      raise(FaultKind::kMisalignedAccess, at_pc, addr,
            fmt::format("{}-byte {} at {:#x} is not {}-byte aligned", bytes,
                        write ? "store" : "load", addr, bytes));
    } else {
      raise(FaultKind::kAccessFault, at_pc, addr, describe_unmapped(addr, bytes, write));
    }
  };
// A faulting access does not retire: its cost comes off again.
#define MTIA_ACCESS_FAULT(bytes, write)   \
  {                                       \
    cycles -= cost_[d.op];                \
    access_fault(pc, addr, bytes, write); \
    MTIA_FINISH(StopReason::kFault);      \
  }

// The port refused a local-store access (the sanitizer's finding): it does not retire.
#define MTIA_SANITIZER_STOP(write)                                                                \
  {                                                                                               \
    cycles -= cost_[d.op];                                                                        \
    raise(FaultKind::kAccessFault, pc, addr,                                                      \
          fmt::format("{} at {:#x} stopped by the sanitizer", (write) ? "store" : "load", addr)); \
    MTIA_FINISH(StopReason::kFault);                                                              \
  }
#define MTIA_LOAD(T, CAST)                                                                      \
  {                                                                                             \
    const uint64_t addr = x[d.rs1] + static_cast<int64_t>(d.imm);                               \
    const uint8_t* p;                                                                           \
    const uint64_t off = addr - MTIA_PE_LS_BASE;                                                \
    if ((addr & (sizeof(T) - 1)) != 0) MTIA_ACCESS_FAULT(sizeof(T), false)                      \
    if (off < ls_size && sizeof(T) <= ls_size - off) {                                          \
      if (off - guard_lo_ < guard_span_) [[unlikely]] {                                         \
        if (!port_.guarded_access(*this, pc, off, sizeof(T), false)) MTIA_SANITIZER_STOP(false) \
      }                                                                                         \
      p = ls + off;                                                                             \
    } else if ((p = map_read(addr, sizeof(T))) == nullptr) {                                    \
      MTIA_ACCESS_FAULT(sizeof(T), false)                                                       \
    }                                                                                           \
    x[d.rd] = static_cast<uint64_t>(static_cast<CAST>(load_le<T>(p)));                          \
    pc += 4;                                                                                    \
    break;                                                                                      \
  }
#define MTIA_STORE(T)                                                                         \
  {                                                                                           \
    const uint64_t addr = x[d.rs1] + static_cast<int64_t>(d.imm);                             \
    uint8_t* p;                                                                               \
    const uint64_t off = addr - MTIA_PE_LS_BASE;                                              \
    if ((addr & (sizeof(T) - 1)) != 0) MTIA_ACCESS_FAULT(sizeof(T), true)                     \
    if (off < ls_size && sizeof(T) <= ls_size - off) {                                        \
      if (off - guard_lo_ < guard_span_) [[unlikely]] {                                       \
        if (!port_.guarded_access(*this, pc, off, sizeof(T), true)) MTIA_SANITIZER_STOP(true) \
      }                                                                                       \
      p = ls + off;                                                                           \
    } else if ((p = map_write(addr, sizeof(T))) == nullptr) {                                 \
      MTIA_ACCESS_FAULT(sizeof(T), true)                                                      \
    }                                                                                         \
    const T v = static_cast<T>(x[d.rs2]);                                                     \
    std::memcpy(p, &v, sizeof v);                                                             \
    pc += 4;                                                                                  \
    break;                                                                                    \
  }
#define MTIA_BRANCH(COND)                                                        \
  {                                                                              \
    if (COND) {                                                                  \
      const uint64_t target = pc + static_cast<int64_t>(d.imm);                  \
      if ((target & 3) != 0) {                                                   \
        cycles -= cost_[d.op];                                                   \
        raise(FaultKind::kMisalignedFetch, pc, target,                           \
              fmt::format("branch target {:#x} is not 4-byte aligned", target)); \
        MTIA_FINISH(StopReason::kFault);                                         \
      }                                                                          \
      cycles += taken_extra;                                                     \
      pc = target;                                                               \
    } else {                                                                     \
      pc += 4;                                                                   \
    }                                                                            \
    break;                                                                       \
  }

  const uint64_t* const xs = x;  // reads
  auto s64 = [xs](uint8_t r) { return static_cast<int64_t>(xs[r]); };

  while (!kBudget || n < max_instructions) {
    if (cycles >= stop_at) {
      if (cycles >= watchdog) {
        raise(FaultKind::kWatchdog, pc, 0,
              fmt::format("the kernel ran for {} cycles, reaching the launch's watchdog limit "
                          "of {} cycles",
                          cycles, watchdog));
        MTIA_FINISH(StopReason::kFault);
      }
      MTIA_FINISH(StopReason::kBudget);
    }
    const uint64_t index = (pc - code_base) >> 2;
    if (index >= code_size) [[unlikely]] {
      raise(FaultKind::kFetchFault, pc, pc,
            fmt::format("pc {:#x} is outside the kernel's code [{:#x}, {:#x})", pc, code_base,
                        code_base + 4 * code_size));
      MTIA_FINISH(StopReason::kFault);
    }
    const DecodedInsn d = code[index];
    cycles += cost_[d.op];
    switch (d.op) {
      case kFetchFault:
        raise(FaultKind::kFetchFault, pc, pc,
              fmt::format("pc {:#x} is not in an executable segment", pc));
        MTIA_FINISH(StopReason::kFault);
      case kIllegal: {
        const char* why = "";
        const uint32_t word = program_->raw_word(index);
        decode(word, &why);
        raise(FaultKind::kIllegalInstruction, pc, 0,
              fmt::format("instruction word {:#010x}: {}", word, why));
        MTIA_FINISH(StopReason::kFault);
      }
      case kLui:
        x[d.rd] = static_cast<uint64_t>(int64_t{d.imm});
        pc += 4;
        break;
      case kAuipc:
        x[d.rd] = pc + static_cast<int64_t>(d.imm);
        pc += 4;
        break;
      case kJal: {
        const uint64_t target = pc + static_cast<int64_t>(d.imm);
        if ((target & 3) != 0) {
          cycles -= cost_[d.op];
          raise(FaultKind::kMisalignedFetch, pc, target,
                fmt::format("jump target {:#x} is not 4-byte aligned", target));
          MTIA_FINISH(StopReason::kFault);
        }
        x[d.rd] = pc + 4;
        pc = target;
        break;
      }
      case kJalr: {
        const uint64_t target = (xs[d.rs1] + static_cast<int64_t>(d.imm)) & ~uint64_t{1};
        if ((target & 3) != 0) {
          cycles -= cost_[d.op];
          raise(FaultKind::kMisalignedFetch, pc, target,
                fmt::format("jump target {:#x} is not 4-byte aligned", target));
          MTIA_FINISH(StopReason::kFault);
        }
        x[d.rd] = pc + 4;
        pc = target;
        break;
      }
      case kBeq:
        MTIA_BRANCH(xs[d.rs1] == xs[d.rs2])
      case kBne:
        MTIA_BRANCH(xs[d.rs1] != xs[d.rs2])
      case kBlt:
        MTIA_BRANCH(s64(d.rs1) < s64(d.rs2))
      case kBge:
        MTIA_BRANCH(s64(d.rs1) >= s64(d.rs2))
      case kBltu:
        MTIA_BRANCH(xs[d.rs1] < xs[d.rs2])
      case kBgeu:
        MTIA_BRANCH(xs[d.rs1] >= xs[d.rs2])
      case kLb:
        MTIA_LOAD(int8_t, int64_t)
      case kLh:
        MTIA_LOAD(int16_t, int64_t)
      case kLw:
        MTIA_LOAD(int32_t, int64_t)
      case kLd:
        MTIA_LOAD(uint64_t, uint64_t)
      case kLbu:
        MTIA_LOAD(uint8_t, uint64_t)
      case kLhu:
        MTIA_LOAD(uint16_t, uint64_t)
      case kLwu:
        MTIA_LOAD(uint32_t, uint64_t)
      case kSb:
        MTIA_STORE(uint8_t)
      case kSh:
        MTIA_STORE(uint16_t)
      case kSw:
        MTIA_STORE(uint32_t)
      case kSd:
        MTIA_STORE(uint64_t)
      case kAddi:
        x[d.rd] = xs[d.rs1] + static_cast<int64_t>(d.imm);
        pc += 4;
        break;
      case kSlti:
        x[d.rd] = s64(d.rs1) < int64_t{d.imm};
        pc += 4;
        break;
      case kSltiu:
        x[d.rd] = xs[d.rs1] < static_cast<uint64_t>(int64_t{d.imm});
        pc += 4;
        break;
      case kXori:
        x[d.rd] = xs[d.rs1] ^ static_cast<uint64_t>(int64_t{d.imm});
        pc += 4;
        break;
      case kOri:
        x[d.rd] = xs[d.rs1] | static_cast<uint64_t>(int64_t{d.imm});
        pc += 4;
        break;
      case kAndi:
        x[d.rd] = xs[d.rs1] & static_cast<uint64_t>(int64_t{d.imm});
        pc += 4;
        break;
      case kSlli:
        x[d.rd] = xs[d.rs1] << d.imm;
        pc += 4;
        break;
      case kSrli:
        x[d.rd] = xs[d.rs1] >> d.imm;
        pc += 4;
        break;
      case kSrai:
        x[d.rd] = static_cast<uint64_t>(s64(d.rs1) >> d.imm);
        pc += 4;
        break;
      case kAdd:
        x[d.rd] = xs[d.rs1] + xs[d.rs2];
        pc += 4;
        break;
      case kSub:
        x[d.rd] = xs[d.rs1] - xs[d.rs2];
        pc += 4;
        break;
      case kSll:
        x[d.rd] = xs[d.rs1] << (xs[d.rs2] & 63);
        pc += 4;
        break;
      case kSlt:
        x[d.rd] = s64(d.rs1) < s64(d.rs2);
        pc += 4;
        break;
      case kSltu:
        x[d.rd] = xs[d.rs1] < xs[d.rs2];
        pc += 4;
        break;
      case kXor:
        x[d.rd] = xs[d.rs1] ^ xs[d.rs2];
        pc += 4;
        break;
      case kSrl:
        x[d.rd] = xs[d.rs1] >> (xs[d.rs2] & 63);
        pc += 4;
        break;
      case kSra:
        x[d.rd] = static_cast<uint64_t>(s64(d.rs1) >> (xs[d.rs2] & 63));
        pc += 4;
        break;
      case kOr:
        x[d.rd] = xs[d.rs1] | xs[d.rs2];
        pc += 4;
        break;
      case kAnd:
        x[d.rd] = xs[d.rs1] & xs[d.rs2];
        pc += 4;
        break;
      case kAddiw:
        x[d.rd] = static_cast<uint64_t>(sext32(xs[d.rs1] + static_cast<int64_t>(d.imm)));
        pc += 4;
        break;
      case kSlliw:
        x[d.rd] = static_cast<uint64_t>(sext32(static_cast<uint32_t>(xs[d.rs1]) << d.imm));
        pc += 4;
        break;
      case kSrliw:
        x[d.rd] = static_cast<uint64_t>(sext32(static_cast<uint32_t>(xs[d.rs1]) >> d.imm));
        pc += 4;
        break;
      case kSraiw:
        x[d.rd] = static_cast<uint64_t>(int64_t{static_cast<int32_t>(xs[d.rs1]) >> d.imm});
        pc += 4;
        break;
      case kAddw:
        x[d.rd] = static_cast<uint64_t>(sext32(xs[d.rs1] + xs[d.rs2]));
        pc += 4;
        break;
      case kSubw:
        x[d.rd] = static_cast<uint64_t>(sext32(xs[d.rs1] - xs[d.rs2]));
        pc += 4;
        break;
      case kSllw:
        x[d.rd] =
            static_cast<uint64_t>(sext32(static_cast<uint32_t>(xs[d.rs1]) << (xs[d.rs2] & 31)));
        pc += 4;
        break;
      case kSrlw:
        x[d.rd] =
            static_cast<uint64_t>(sext32(static_cast<uint32_t>(xs[d.rs1]) >> (xs[d.rs2] & 31)));
        pc += 4;
        break;
      case kSraw:
        x[d.rd] =
            static_cast<uint64_t>(int64_t{static_cast<int32_t>(xs[d.rs1]) >> (xs[d.rs2] & 31)});
        pc += 4;
        break;
      case kMul:
        x[d.rd] = xs[d.rs1] * xs[d.rs2];
        pc += 4;
        break;
      case kMulh:
        x[d.rd] = mulh(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kMulhsu:
        x[d.rd] = mulhsu(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kMulhu:
        x[d.rd] = mulhu(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kDiv:
        x[d.rd] = div_s(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kDivu:
        x[d.rd] = div_u(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kRem:
        x[d.rd] = rem_s(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kRemu:
        x[d.rd] = rem_u(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kMulw:
        x[d.rd] = static_cast<uint64_t>(sext32(xs[d.rs1] * xs[d.rs2]));
        pc += 4;
        break;
      case kDivw:
        x[d.rd] = div_w(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kDivuw:
        x[d.rd] = divu_w(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kRemw:
        x[d.rd] = rem_w(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kRemuw:
        x[d.rd] = remu_w(xs[d.rs1], xs[d.rs2]);
        pc += 4;
        break;
      case kFence:
        pc += 4;
        break;
      case kEcall:
        exit_status_ = static_cast<int64_t>(xs[10]);
        state_ = State::kExited;
        ++n;
        MTIA_FINISH(StopReason::kExit);
      case kEbreak:
        cycles -= cost_[d.op];
        raise(FaultKind::kBreakpoint, pc, 0, "EBREAK executed (a kernel assertion or trap)");
        MTIA_FINISH(StopReason::kFault);
      case kPeInfo: {
        uint64_t v = 0;
        switch (d.imm) {
          case MTIA_PE_INFO_PE_ID:
            v = pe_id();
            break;
          case MTIA_PE_INFO_GRID_ROWS:
            v = launch_.grid_rows;
            break;
          case MTIA_PE_INFO_GRID_COLS:
            v = launch_.grid_cols;
            break;
          case MTIA_PE_INFO_PE_ROW:
            v = launch_.pe_row;
            break;
          case MTIA_PE_INFO_PE_COL:
            v = launch_.pe_col;
            break;
          case MTIA_PE_INFO_NUM_PES:
            v = uint64_t{launch_.grid_rows} * launch_.grid_cols;
            break;
          case MTIA_PE_INFO_ARGS_PTR:
            v = MTIA_PE_ARGS_BASE;
            break;
          case MTIA_PE_INFO_ARGS_BYTES:
            v = launch_.args.size();
            break;
          case MTIA_PE_INFO_LS_BASE:
            v = MTIA_PE_LS_BASE;
            break;
          case MTIA_PE_INFO_LS_BYTES:
            v = ls_size;
            break;
          case MTIA_PE_INFO_CYCLES:
            v = cycles;
            break;
          case MTIA_PE_INFO_INSTRET:
            v = start_instret + n;
            break;
          case MTIA_PE_INFO_SRAM_BASE:
            v = launch_.sram_base;
            break;
          case MTIA_PE_INFO_SRAM_BYTES:
            v = launch_.sram_bytes;
            break;
          default:
            break;  // the decoder admits only defined fields
        }
        x[d.rd] = v;
        pc += 4;
        break;
      }
      case kUnit: {
        // The port may inspect the core (memory, cycles), so publish the state first.
        pc_ = pc;
        cycles_ = cycles;
        instret_ = start_instret + n;
        UnitRequest req;
        req.op = static_cast<UnitOp>(d.imm);
        req.pc = pc;
        req.rs1 = xs[d.rs1];
        req.rs2 = xs[d.rs2];
        req.cycle = cycles;
        req.ra = xs[1];
        UnitResponse r = port_.issue(*this, req);
        cycles += r.extra_cycles;
        if (r.status == UnitResponse::Status::kDone) {
          x[d.rd] = r.value;
          pc += 4;
          break;
        }
        if (r.status == UnitResponse::Status::kStall) {
          stalled_rd_ = d.rd;
          state_ = State::kStalled;
          MTIA_FINISH(StopReason::kUnitStall);
        }
        raise(FaultKind::kUnit, pc, req.rs1,
              fmt::format("{} rejected: {}", unit_op_name(req.op), r.reason));
        MTIA_FINISH(StopReason::kFault);
      }
      default:
        // Every Op is handled above (the decoder makes no other): no range check on dispatch.
        assert(false && "RiscvCore: unhandled decoded op");
        __builtin_unreachable();
    }
    ++n;
  }
  MTIA_FINISH(StopReason::kBudget);
#undef MTIA_LOAD
#undef MTIA_STORE
#undef MTIA_BRANCH
#undef MTIA_ACCESS_FAULT
#undef MTIA_SANITIZER_STOP
#undef MTIA_FINISH
}

void RiscvCore::resume(uint64_t value, uint64_t stalled_cycles) {
  if (state_ != State::kStalled) {
    throw std::logic_error("RiscvCore::resume called while no unit instruction is stalled");
  }
  x_[stalled_rd_] = value;
  stalled_rd_ = kSink;
  pc_ += 4;
  cycles_ += stalled_cycles;
  ++instret_;
  state_ = State::kReady;
}

}  // namespace mtia::sim::pe
