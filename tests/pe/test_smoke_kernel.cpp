// End to end: the clang-built smoke kernel (kernels/src/smoke.c) on three cores, with a
// recording UnitPort that decodes every descriptor and carries out the few operations the
// kernel uses (1-D DMA, int32 add of an immediate) so the result can be checked too.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>

#include "core_harness.h"
#include "mtia/sim/pe/descriptors.h"

using namespace pe_test;
using mtia::sim::pe::RiscvCore;
using mtia::sim::pe::StopReason;
using mtia::sim::pe::UnitOp;
using mtia::sim::pe::UnitRequest;
using mtia::sim::pe::UnitResponse;

namespace {

constexpr uint64_t kIn = 0x1000;
constexpr uint64_t kOut = 0x3000;
constexpr uint32_t kN = 1000;  // not a multiple of the kernel's 256-element chunk
constexpr uint32_t kChunk = 256;

struct Recorded {
  uint32_t pe;
  UnitOp op;
  mtia_pe_dma_desc dma{};
  mtia_pe_se_desc se{};
};

// Test double for the PE's units. Effects happen at issue; waits and the barrier stall so
// that the scheduler below exercises RiscvCore::resume.
class SmokeUnits : public mtia::sim::pe::UnitPort {
 public:
  std::vector<uint8_t> dram = std::vector<uint8_t>(0x8000, 0);
  std::vector<Recorded> log;
  std::map<const RiscvCore*, uint64_t> issued;  // tags issued per core
  std::map<const RiscvCore*, UnitOp> stalled_on;

  UnitResponse issue(RiscvCore& core, const UnitRequest& r) override {
    Recorded rec{core.pe_id(), r.op};
    switch (r.op) {
      case UnitOp::kDma: {
        auto d = mtia::sim::pe::read_descriptor<mtia_pe_dma_desc>(core, r.rs1);
        if (!d.ok()) return UnitResponse::fault(d.error().reason);
        rec.dma = d.value();
        log.push_back(rec);
        if (auto why = copy_1d(core, rec.dma)) return UnitResponse::fault(why);
        return UnitResponse::done(++issued[&core]);
      }
      case UnitOp::kEltwise: {
        auto d = mtia::sim::pe::read_descriptor<mtia_pe_se_desc>(core, r.rs1);
        if (!d.ok()) return UnitResponse::fault(d.error().reason);
        rec.se = d.value();
        log.push_back(rec);
        if (auto why = add_imm_i32(core, rec.se)) return UnitResponse::fault(why);
        return UnitResponse::done(++issued[&core]);
      }
      case UnitOp::kWait:
        log.push_back(rec);
        if (r.rs1 > issued[&core]) return UnitResponse::fault("wait on a tag never issued");
        stalled_on[&core] = r.op;
        return UnitResponse::stall();
      case UnitOp::kBarrier:
        log.push_back(rec);
        stalled_on[&core] = r.op;
        return UnitResponse::stall();
      default:
        return UnitResponse::fault("the smoke kernel does not use this unit");
    }
  }

 private:
  const char* copy_1d(RiscvCore& core, const mtia_pe_dma_desc& d) {
    if (d.ndims != 1 || d.src_strides[0] != d.elem_size || d.dst_strides[0] != d.elem_size) {
      return "the fake DMA copies contiguous 1-D regions only";
    }
    const uint64_t bytes = d.sizes[0] * d.elem_size;
    auto side = [&](uint8_t space, uint64_t addr) -> uint8_t* {
      if (space == MTIA_PE_SPACE_DEVICE) {
        return addr + bytes <= dram.size() ? dram.data() + addr : nullptr;
      }
      auto off = core.local_offset(addr, bytes);
      return off ? core.local_store().data() + *off : nullptr;
    };
    uint8_t* src = side(d.src_space, d.src);
    uint8_t* dst = side(d.dst_space, d.dst);
    if (src == nullptr || dst == nullptr) return "DMA outside the fake's memory";
    std::memmove(dst, src, bytes);
    return nullptr;
  }

  const char* add_imm_i32(RiscvCore& core, const mtia_pe_se_desc& d) {
    if (d.op != MTIA_PE_SE_ADD || d.in_dtype != MTIA_PE_DT_INT32 ||
        d.mode[1] != MTIA_PE_OPND_IMMEDIATE) {
      return "the fake SE only adds an int32 immediate";
    }
    auto a = core.local_offset(d.src[0], d.count * 4ull);
    auto out = core.local_offset(d.dst, d.count * 4ull);
    if (!a || !out) return "SE operands outside the local store";
    for (uint32_t i = 0; i < d.count; ++i) {
      int32_t v;
      std::memcpy(&v, core.local_store().data() + *a + 4 * i, 4);
      v += static_cast<int32_t>(d.imm[1]);
      std::memcpy(core.local_store().data() + *out + 4 * i, &v, 4);
    }
    return nullptr;
  }
};

struct Pe {
  std::vector<uint8_t> ls = std::vector<uint8_t>(128 * 1024, 0);
  std::unique_ptr<RiscvCore> core;
  bool at_barrier = false;
};

std::vector<uint8_t> smoke_args(uint64_t in, uint64_t out, uint32_t n) {
  std::vector<uint8_t> a(24, 0);
  std::memcpy(a.data(), &in, 8);
  std::memcpy(a.data() + 8, &out, 8);
  std::memcpy(a.data() + 16, &n, 4);
  return a;
}

std::shared_ptr<const mtia::sim::pe::Program> smoke_program() {
  auto elf = mtia::sim::pe::read_elf_file(MTIA_SMOKE_KERNEL_ELF);
  if (!elf.ok()) throw std::runtime_error(elf.error().reason);
  return program_of(elf.value());
}

}  // namespace

TEST_CASE("the clang-built smoke kernel has the documented layout", "[pe][kernel]") {
  auto elf = mtia::sim::pe::read_elf_file(MTIA_SMOKE_KERNEL_ELF);
  REQUIRE(elf.ok());
  CHECK(elf.value().entry == MTIA_PE_IMAGE_BASE);  // _start is first in .text
  auto program = program_of(elf.value());
  // buf_in and buf_out: two 256-element int32 buffers placed with MTIA_LOCAL.
  CHECK(program->local_store_bytes_used() == 2 * kChunk * 4);
  CHECK(program->code_base() == MTIA_PE_IMAGE_BASE);
  for (uint64_t i = 0; i < program->code_size(); ++i) {
    CHECK(program->code()[i].op != 0);  // no gaps or unknown words in the kernel's code
  }
}

TEST_CASE("the smoke kernel runs on three PEs and issues the expected units", "[pe][kernel][e2e]") {
  auto program = smoke_program();
  SmokeUnits units;
  for (uint32_t i = 0; i < kN; ++i) {
    const int32_t v = static_cast<int32_t>(i * 7) - 500;
    std::memcpy(units.dram.data() + kIn + 4 * i, &v, 4);
  }
  std::fill(units.dram.begin() + kOut, units.dram.begin() + kOut + 4 * kN + 64, 0xcd);

  constexpr uint32_t kPes = 3;
  std::vector<Pe> pes(kPes);
  for (uint32_t p = 0; p < kPes; ++p) {
    pes[p].core = std::make_unique<RiscvCore>(mtia::sim::pe::CoreConfig{}, pes[p].ls, units);
    mtia::sim::pe::LaunchContext launch;
    launch.grid_rows = 1;
    launch.grid_cols = kPes;
    launch.pe_col = p;
    launch.args = smoke_args(kIn, kOut, kN);
    launch.watchdog_cycles = 10'000'000;
    REQUIRE(pes[p].core->start(program, launch));
  }

  // Round-robin scheduler: waits complete at once (10 cycles later); the barrier releases
  // when every PE that has not exited is waiting at it.
  for (int round = 0; round < 1000; ++round) {
    bool all_done = true;
    for (Pe& pe : pes) {
      RiscvCore& c = *pe.core;
      if (c.state() == RiscvCore::State::kExited) continue;
      all_done = false;
      if (c.state() != RiscvCore::State::kReady) continue;
      const auto r = c.run(1'000'000);
      INFO(c.fault().reason);
      REQUIRE(r.reason != StopReason::kFault);
      if (r.reason == StopReason::kUnitStall) {
        if (units.stalled_on[&c] == UnitOp::kWait) {
          c.resume(0, 10);
        } else {
          pe.at_barrier = true;
        }
      }
    }
    if (all_done) break;
    bool all_at_barrier = true;
    for (Pe& pe : pes) {
      if (pe.core->state() != RiscvCore::State::kExited && !pe.at_barrier) all_at_barrier = false;
    }
    if (all_at_barrier) {
      for (Pe& pe : pes) {
        if (pe.at_barrier) {
          pe.at_barrier = false;
          pe.core->resume(0, 0);
        }
      }
    }
  }

  for (Pe& pe : pes) {
    REQUIRE(pe.core->state() == RiscvCore::State::kExited);
    CHECK(pe.core->exit_status() == 0);
    CHECK(pe.core->cycles() > pe.core->instret());  // loads, jumps and waits cost extra
  }
  // The result, against the kernel's definition out[i] = in[i] + 1.
  for (uint32_t i = 0; i < kN; ++i) {
    int32_t v;
    std::memcpy(&v, units.dram.data() + kOut + 4 * i, 4);
    REQUIRE(v == static_cast<int32_t>(i * 7) - 500 + 1);
  }
  CHECK(units.dram[kOut + 4 * kN] == 0xcd);  // nothing written past the end

  // The instruction stream of each PE: for each of its chunks DMA in, wait, SE add, wait,
  // DMA out, wait; then the barrier.
  for (uint32_t p = 0; p < kPes; ++p) {
    INFO("PE " << p);
    std::vector<Recorded> mine;
    for (const Recorded& r : units.log) {
      if (r.pe == p) mine.push_back(r);
    }
    std::vector<uint32_t> starts;
    for (uint32_t s = p * kChunk; s < kN; s += kPes * kChunk) starts.push_back(s);
    REQUIRE(mine.size() == starts.size() * 6 + 1);
    for (size_t k = 0; k < starts.size(); ++k) {
      const uint32_t count = std::min(kChunk, kN - starts[k]);
      const Recorded* r = &mine[k * 6];
      REQUIRE(r[0].op == UnitOp::kDma);
      REQUIRE(r[1].op == UnitOp::kWait);
      REQUIRE(r[2].op == UnitOp::kEltwise);
      REQUIRE(r[3].op == UnitOp::kWait);
      REQUIRE(r[4].op == UnitOp::kDma);
      REQUIRE(r[5].op == UnitOp::kWait);
      const mtia_pe_dma_desc& in = r[0].dma;
      CHECK(in.src_space == MTIA_PE_SPACE_DEVICE);
      CHECK(in.src == kIn + 4ull * starts[k]);
      CHECK(in.dst_space == MTIA_PE_SPACE_LOCAL);
      CHECK(in.sizes[0] * in.elem_size == 4ull * count);
      const mtia_pe_se_desc& se = r[2].se;
      CHECK(se.op == MTIA_PE_SE_ADD);
      CHECK(se.in_dtype == MTIA_PE_DT_INT32);
      CHECK(se.out_dtype == MTIA_PE_DT_INT32);
      CHECK(se.count == count);
      CHECK(se.src[0] == in.dst);  // adds what the DMA brought in
      CHECK(se.mode[1] == MTIA_PE_OPND_IMMEDIATE);
      CHECK(se.imm[1] == 1);
      const mtia_pe_dma_desc& out = r[4].dma;
      CHECK(out.src_space == MTIA_PE_SPACE_LOCAL);
      CHECK(out.src == se.dst);
      CHECK(out.dst_space == MTIA_PE_SPACE_DEVICE);
      CHECK(out.dst == kOut + 4ull * starts[k]);
      CHECK(out.sizes[0] * out.elem_size == 4ull * count);
      // Both buffers are MTIA_LOCAL globals at the bottom of the local store.
      CHECK(in.dst >= MTIA_PE_LS_BASE);
      CHECK(se.dst + 4 * count <= MTIA_PE_LS_BASE + 2 * kChunk * 4);
    }
    CHECK(mine.back().op == UnitOp::kBarrier);
  }
}

TEST_CASE("the smoke kernel reports a short argument block with its exit status", "[pe][kernel]") {
  auto program = smoke_program();
  SmokeUnits units;
  std::vector<uint8_t> ls(128 * 1024);
  RiscvCore core({}, ls, units);
  mtia::sim::pe::LaunchContext launch;
  launch.args.assign(8, 0);
  REQUIRE(core.start(program, launch));
  REQUIRE(core.run(10'000).reason == StopReason::kExit);
  CHECK(core.exit_status() == 1);
  CHECK(units.log.empty());
}

TEST_CASE("interpreter speed", "[.][perf]") {
  // About 50 M instructions: x1 iterations of addi x2; xor x3; addi x1, -1; bne
  const uint32_t iterations = 3052u << 12;
  Machine m;
  auto& c = m.load({lui(1, iterations >> 12), addi(2, 2, 1), xor_(3, 3, 2), addi(1, 1, -1),
                    bne(1, 0, -12), kEcall});
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = c.run(~0ull);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(r.reason == StopReason::kExit);
  WARN("interpreter: " << r.instructions / s / 1e6 << " M instructions/s, " << r.cycles / s / 1e6
                       << " M core cycles/s");
}
