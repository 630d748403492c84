// Faults, the run/stall/resume protocol, pe.info, and start() rejections.
#include <catch2/catch.hpp>

#include "core_harness.h"

using namespace pe_test;
using Catch::Matchers::Contains;
using mtia::sim::pe::FaultKind;
using mtia::sim::pe::RiscvCore;
using mtia::sim::pe::StopReason;
using mtia::sim::pe::UnitOp;
using mtia::sim::pe::UnitRequest;
using mtia::sim::pe::UnitResponse;

namespace {

// Runs words (no ECALL appended) and expects a fault; returns the core.
RiscvCore& expect_fault(Machine& m, const std::vector<uint32_t>& words, FaultKind kind,
                        const std::vector<std::pair<unsigned, uint64_t>>& regs = {}) {
  auto& c = m.load(words);
  for (auto [r, v] : regs) c.set_reg(r, v);
  const auto result = c.run(1'000'000);
  REQUIRE(result.reason == StopReason::kFault);
  REQUIRE(c.state() == RiscvCore::State::kFaulted);
  INFO(c.fault().reason);
  CHECK(c.fault().kind == kind);
  CHECK_FALSE(c.fault().reason.empty());
  return c;
}

}  // namespace

TEST_CASE("illegal instructions fault with pc, word and reason", "[pe][fault]") {
  struct Case {
    const char* name;
    uint32_t word;
    const char* why;
  };
  const Case cases[] = {
      {"all zero (compressed space)", 0x0000'0000, "compressed"},
      {"all ones", 0xffff'ffff, "not RV64IM"},
      {"csrr a0, cycle (Zicsr)", 0xc000'2573, "no Zicsr"},
      {"mret", 0x3020'0073, "no Zicsr"},
      {"flw (F extension)", 0x0000'2007, "floating-point"},
      {"amoadd.w (A extension)", 0x0000'202f, "atomic"},
      {"custom-3", r_type(MTIA_PE_OPC_RESERVED, 0, 0, 1, 2, 0), "reserved"},
      {"custom-0 unknown funct3", r_type(MTIA_PE_OPC_CTRL, 7, 0, 0, 0, 0), "funct3"},
      {"pe.wait with funct7 1", r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_WAIT, 1, 0, 5, 0), "funct7"},
      {"pe.info with rs1", r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_INFO, 0, 5, 1, 0), "rs1"},
      {"pe.info unknown field", pe_info(5, MTIA_PE_INFO_COUNT), "field"},
      {"dma.start with rs2", r_type(MTIA_PE_OPC_DMA, 0, 0, 5, 6, 7), "rs2"},
      {"dma.start funct3 1", r_type(MTIA_PE_OPC_DMA, 1, 0, 5, 6, 0), "funct3"},
      {"compute funct3 4", r_type(MTIA_PE_OPC_COMPUTE, 4, 0, 5, 6, 0), "funct3"},
      {"slliw with shamt bit 5", i_type(0x1b, 1, 1, 1, 32), "SLLIW"},
      {"srai with bad funct6", i_type(0x13, 5, 1, 1, 0x200 | 3), "SRLI/SRAI"},
      {"OP with funct7 2", r_type(0x33, 0, 2, 1, 1, 1), "not RV64IM"},
      {"OP-32 mul funct3 1", r_type(0x3b, 1, 1, 1, 1, 1), "not RV64IM"},
      {"load funct3 7", i_type(0x03, 7, 1, 1, 0), "reserved"},
      {"store funct3 4", s_type(0x23, 4, 1, 1, 0), "reserved"},
      {"branch funct3 2", b_type(2, 1, 1, 8), "reserved"},
      {"jalr funct3 1", i_type(0x67, 1, 1, 1, 0), "JALR"},
      {"ecall with rd set", 0x0000'00f3, "SYSTEM"},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    Machine m;
    auto& c = expect_fault(m, {addi(1, 0, 1), k.word}, FaultKind::kIllegalInstruction);
    CHECK(c.fault().pc == kCode + 4);
    CHECK(c.fault().insn == k.word);
    CHECK_THAT(c.fault().reason, Contains(k.why));
    CHECK_THAT(c.fault().reason, Contains("0x10004"));
    CHECK(c.instret() == 1);  // the faulting instruction did not retire
    CHECK(c.pc() == kCode + 4);
  }
}

TEST_CASE("fetch outside the code faults", "[pe][fault]") {
  SECTION("falling off the end") {
    Machine m;
    auto& c = expect_fault(m, {addi(1, 0, 1)}, FaultKind::kFetchFault);
    CHECK(c.fault().pc == kCode + 4);
  }
  SECTION("jumping into the local store") {
    Machine m;
    auto& c = expect_fault(m, {jalr(0, 1, 0)}, FaultKind::kFetchFault, {{1, MTIA_PE_LS_BASE}});
    CHECK(c.fault().pc == MTIA_PE_LS_BASE);
    CHECK_THAT(c.fault().reason, Contains("outside the kernel's code"));
  }
  SECTION("jumping into a gap between code segments") {
    Machine m;
    mtia::sim::pe::ElfImage image;
    image.entry = kCode;
    image.segments.push_back(code_segment({jal(0, 0x100)}));
    image.segments.push_back(code_segment({kEcall}, kCode + 0x200));
    m.core = std::make_unique<RiscvCore>(m.config, m.ls, m.port);
    REQUIRE(m.core->start(program_of(image), m.launch));
    REQUIRE(m.core->run(10).reason == StopReason::kFault);
    CHECK(m.core->fault().kind == FaultKind::kFetchFault);
    CHECK(m.core->fault().pc == kCode + 0x100);
  }
}

TEST_CASE("jumps and branches to misaligned targets fault on the jump", "[pe][fault]") {
  SECTION("jalr") {
    Machine m;
    auto& c = expect_fault(m, {jalr(0, 1, 0)}, FaultKind::kMisalignedFetch, {{1, kCode + 6}});
    CHECK(c.fault().pc == kCode);
    CHECK(c.fault().addr == kCode + 6);
  }
  SECTION("jal") {
    Machine m;
    auto& c = expect_fault(m, {addi(0, 0, 0), jal(0, 6)}, FaultKind::kMisalignedFetch);
    CHECK(c.fault().pc == kCode + 4);
    CHECK(c.fault().addr == kCode + 10);
  }
  SECTION("taken branch") {
    Machine m;
    auto& c = expect_fault(m, {beq(0, 0, 2)}, FaultKind::kMisalignedFetch);
    CHECK(c.fault().addr == kCode + 2);
  }
  SECTION("a branch not taken does not fault") {
    Machine m;
    auto& c = m.exec({bne(0, 0, 2)});
    CHECK(c.state() == RiscvCore::State::kExited);
  }
}

TEST_CASE("misaligned loads and stores fault", "[pe][fault]") {
  const uint64_t p = MTIA_PE_LS_BASE + 0x102;
  struct Case {
    const char* name;
    uint32_t word;
  };
  const Case cases[] = {{"lh", lh(2, 1, 1)},   {"lw", lw(2, 1, 0)},   {"ld", ld(2, 1, 2)},
                        {"lhu", lhu(2, 1, 1)}, {"lwu", lwu(2, 1, 4)}, {"sh", sh(2, 1, 1)},
                        {"sw", sw(2, 1, 0)},   {"sd", sd(2, 1, 2)}};
  for (const Case& k : cases) {
    INFO(k.name);
    Machine m;
    auto& c = expect_fault(m, {k.word}, FaultKind::kMisalignedAccess, {{1, p}});
    CHECK(c.fault().pc == kCode);
    CHECK_THAT(c.fault().reason, Contains("aligned"));
  }
  SECTION("byte accesses are never misaligned") {
    Machine m;
    auto& c = m.exec({sb(0, 1, 1), lb(2, 1, 1)}, {{1, p}});
    CHECK(c.reg(2) == 0);
  }
}

TEST_CASE("accesses outside the mapped memory fault", "[pe][fault]") {
  const uint64_t ls_end = MTIA_PE_LS_BASE + Machine::kLsBytes;
  struct Case {
    const char* name;
    uint32_t word;
    uint64_t base;
    const char* why;
  };
  const Case cases[] = {
      {"null load", ld(2, 1, 0), 0, "outside the mapped memory"},
      {"load past the local store", lw(2, 1, 0), ls_end, "outside the mapped memory"},
      {"store past the local store", sd(2, 1, 0), ls_end, "outside the mapped memory"},
      {"load below the local store", lb(2, 1, -1), MTIA_PE_LS_BASE, "outside the mapped memory"},
      {"store into code", sw(2, 1, 0), kCode, "read-only"},
      {"store into the arguments", sb(2, 1, 0), MTIA_PE_ARGS_BASE, "read-only"},
      {"load past the arguments", lb(2, 1, 8), MTIA_PE_ARGS_BASE, "outside the mapped memory"},
      {"huge address", ld(2, 1, 0), 0xffff'ffff'ffff'fff8ull, "outside the mapped memory"},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    Machine m;
    m.launch.args.assign(8, 0);
    auto& c = expect_fault(m, {k.word}, FaultKind::kAccessFault, {{1, k.base}});
    CHECK(c.fault().pc == kCode);
    CHECK_THAT(c.fault().reason, Contains(k.why));
  }
}

TEST_CASE("EBREAK is a breakpoint fault", "[pe][fault]") {
  Machine m;
  auto& c = expect_fault(m, {addi(1, 0, 1), kEbreak}, FaultKind::kBreakpoint);
  CHECK(c.fault().pc == kCode + 4);
}

TEST_CASE("the watchdog stops a kernel that runs too long", "[pe][fault]") {
  Machine m;
  m.launch.watchdog_cycles = 1000;
  auto& c = expect_fault(m, {jal(0, 0)}, FaultKind::kWatchdog);  // j .
  CHECK(c.cycles() == 1000);  // jal costs 2 cycles: 500 of them reach the limit exactly
  CHECK(c.instret() == 500);
  CHECK_THAT(c.fault().reason, Contains("1000 cycles"));
  CHECK_THROWS_AS(c.run(1), std::logic_error);
}

TEST_CASE("a unit fault carries the port's reason", "[pe][fault][unit]") {
  Machine m;
  m.port.answer = [](RiscvCore&, const UnitRequest&) {
    return UnitResponse::fault("matmul dtype pair not supported");
  };
  auto& c = expect_fault(m, {addi(5, 0, 64), unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MATMUL, 6, 5)},
                         FaultKind::kUnit);
  CHECK(c.fault().pc == kCode + 4);
  CHECK(c.fault().addr == 64);
  CHECK_THAT(c.fault().reason, Contains("dpe.matmul") && Contains("dtype pair"));
}

TEST_CASE("run stops on the instruction budget and resumes", "[pe][run]") {
  Machine m;
  // x1 += 1 forever
  auto& c = m.load({addi(1, 1, 1), jal(0, -4)});
  auto r = c.run(10);
  CHECK(r.reason == StopReason::kBudget);
  CHECK(r.instructions == 10);
  CHECK(r.cycles == 5 * 1 + 5 * 2);
  CHECK(c.reg(1) == 5);
  r = c.run(3);
  CHECK(r.instructions == 3);
  CHECK(c.reg(1) == 7);
  CHECK(c.instret() == 13);
}

TEST_CASE("run stops at a cycle horizon", "[pe][run]") {
  Machine m;
  auto& c = m.load({addi(1, 1, 1), jal(0, -4)});
  auto r = c.run(1'000'000, 30);
  CHECK(r.reason == StopReason::kBudget);
  CHECK(c.cycles() == 30);  // 10 iterations of 3 cycles
  CHECK(c.reg(1) == 10);
  r = c.run(1'000'000, 31);
  CHECK(c.cycles() == 31);
  CHECK(r.instructions == 1);
}

TEST_CASE("unit instructions reach the port with their operands", "[pe][unit]") {
  Machine m;
  auto& c = m.exec({addi(5, 0, 0x40), unit(MTIA_PE_OPC_DMA, MTIA_PE_F3_DMA, 6, 5),
                    unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MATMUL, 7, 5),
                    unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_SE, 8, 5),
                    unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_RE, 9, 5),
                    unit(MTIA_PE_OPC_COMPUTE, MTIA_PE_F3_MLU, 10, 5),
                    r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_POLL, 0, 11, 6, 0),
                    r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_WAIT, 0, 0, 6, 0),
                    r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_WAIT_ALL, 0, 0, 0, 0),
                    r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_BARRIER, 0, 0, 0, 0)});
  const UnitOp expected[] = {UnitOp::kDma,    UnitOp::kMatmul,  UnitOp::kEltwise,
                             UnitOp::kReduce, UnitOp::kLayout,  UnitOp::kPoll,
                             UnitOp::kWait,   UnitOp::kWaitAll, UnitOp::kBarrier};
  REQUIRE(m.port.requests.size() == std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) {
    INFO(i);
    CHECK(m.port.requests[i].op == expected[i]);
    CHECK(m.port.requests[i].pc == kCode + 4 + 4 * i);
    CHECK(m.port.requests[i].cycle == 1 + (i + 1) * 1);  // addi + unit issues so far
  }
  CHECK(m.port.requests[0].rs1 == 0x40);
  CHECK(m.port.requests[5].rs1 == 1000 + static_cast<uint64_t>(UnitOp::kDma));  // the tag
  CHECK(c.reg(6) == 1000 + static_cast<uint64_t>(UnitOp::kDma));
  CHECK(c.reg(10) == 1000 + static_cast<uint64_t>(UnitOp::kLayout));
  CHECK(c.reg(11) == 1000 + static_cast<uint64_t>(UnitOp::kPoll));
}

TEST_CASE("a stalled unit instruction completes with resume", "[pe][unit][run]") {
  Machine m;
  m.port.answer = [](RiscvCore& core, const UnitRequest& r) {
    CHECK(core.pc() == r.pc);  // the core's state is published before the call
    return r.op == UnitOp::kWait ? UnitResponse::stall(2) : UnitResponse::done(7);
  };
  auto& c = m.load({unit(MTIA_PE_OPC_DMA, 0, 6, 0), r_type(MTIA_PE_OPC_CTRL, 2, 0, 9, 6, 0),
                    addi(10, 9, 1), kEcall});
  auto r = c.run(100);
  REQUIRE(r.reason == StopReason::kUnitStall);
  CHECK(r.instructions == 1);
  CHECK(c.state() == RiscvCore::State::kStalled);
  CHECK(c.pc() == kCode + 4);  // still at the wait
  CHECK(c.cycles() == 1 + 1 + 2);
  CHECK_THROWS_AS(c.run(1), std::logic_error);
  c.resume(40, 100);
  CHECK(c.cycles() == 104);
  CHECK(c.instret() == 2);
  CHECK(c.pc() == kCode + 8);
  REQUIRE(c.run(100).reason == StopReason::kExit);
  CHECK(c.reg(9) == 40);
  CHECK(c.reg(10) == 41);
  CHECK_THROWS_AS(c.resume(0, 0), std::logic_error);
}

TEST_CASE("a unit's extra cycles are charged to the core", "[pe][unit][timing]") {
  Machine m;
  m.port.answer = [](RiscvCore&, const UnitRequest&) { return UnitResponse::done(1, 50); };
  auto& c = m.exec({unit(MTIA_PE_OPC_DMA, 0, 6, 0)});
  CHECK(c.cycles() == 1 + 50 + 1);
}

TEST_CASE("pe.info answers from the launch", "[pe][info]") {
  Machine m;
  m.launch.grid_rows = 2;
  m.launch.grid_cols = 4;
  m.launch.pe_row = 1;
  m.launch.pe_col = 2;
  m.launch.args.assign(40, 0);
  std::vector<uint32_t> words;
  for (uint32_t f = 0; f < MTIA_PE_INFO_COUNT; ++f) words.push_back(pe_info(5 + f, f));
  auto& c = m.exec(words);
  CHECK(c.reg(5 + MTIA_PE_INFO_PE_ID) == 6);  // 1 * 4 + 2
  CHECK(c.reg(5 + MTIA_PE_INFO_GRID_ROWS) == 2);
  CHECK(c.reg(5 + MTIA_PE_INFO_GRID_COLS) == 4);
  CHECK(c.reg(5 + MTIA_PE_INFO_PE_ROW) == 1);
  CHECK(c.reg(5 + MTIA_PE_INFO_PE_COL) == 2);
  CHECK(c.reg(5 + MTIA_PE_INFO_NUM_PES) == 8);
  CHECK(c.reg(5 + MTIA_PE_INFO_ARGS_PTR) == MTIA_PE_ARGS_BASE);
  CHECK(c.reg(5 + MTIA_PE_INFO_ARGS_BYTES) == 40);
  CHECK(c.reg(5 + MTIA_PE_INFO_LS_BASE) == MTIA_PE_LS_BASE);
  CHECK(c.reg(5 + MTIA_PE_INFO_LS_BYTES) == Machine::kLsBytes);
  CHECK(c.reg(5 + MTIA_PE_INFO_CYCLES) == MTIA_PE_INFO_CYCLES + 1);
  CHECK(c.reg(5 + MTIA_PE_INFO_INSTRET) == MTIA_PE_INFO_INSTRET);  // retired before it
  CHECK(m.port.requests.empty());  // answered by the core, not the units
}

TEST_CASE("start rejects bad launches and does not touch the core", "[pe][start]") {
  Machine m;
  auto program = program_of({kCode, {code_segment({kEcall})}});
  RiscvCore core(m.config, m.ls, m.port);
  mtia::sim::pe::LaunchContext bad;
  bad.pe_row = 1;  // grid is 1 x 1
  auto r = core.start(program, bad);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().reason, Contains("not inside"));
  CHECK(core.state() == RiscvCore::State::kIdle);
  CHECK_THROWS_AS(core.run(1), std::logic_error);

  mtia::sim::pe::LaunchContext big;
  big.args.assign(MTIA_PE_ARGS_MAX_BYTES + 1, 0);
  r = core.start(program, big);
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().reason, Contains("argument"));

  mtia::sim::pe::LaunchContext zero_grid;
  zero_grid.grid_cols = 0;
  CHECK_FALSE(core.start(program, zero_grid));
  CHECK_FALSE(core.start(nullptr, {}));
}

TEST_CASE("start rejects a program whose local-store data does not fit", "[pe][start]") {
  Machine m;
  mtia::sim::pe::Segment local;
  local.vaddr = MTIA_PE_LS_BASE;
  local.mem_bytes = Machine::kLsBytes + 8;  // fits the 1 MiB window but not this PE
  local.readable = local.writable = true;
  auto program = program_of({kCode, {code_segment({kEcall}), local}});
  CHECK(program->local_store_bytes_used() == Machine::kLsBytes + 8);
  RiscvCore core(m.config, m.ls, m.port);
  auto r = core.start(program, {});
  REQUIRE_FALSE(r);
  CHECK_THAT(r.error().reason, Contains("local-store"));
}

TEST_CASE("local-store segments are initialised at every start", "[pe][start]") {
  Machine m;
  mtia::sim::pe::Segment local;
  local.vaddr = MTIA_PE_LS_BASE + 16;
  local.bytes = {7, 7};
  local.mem_bytes = 8;
  local.readable = local.writable = true;
  auto program = program_of({kCode, {code_segment({sb(0, 1, 0), kEcall}), local}});
  RiscvCore core(m.config, m.ls, m.port);
  for (int launch = 0; launch < 2; ++launch) {
    std::fill(m.ls.begin(), m.ls.end(), 0xee);
    REQUIRE(core.start(program, {}));
    CHECK(m.ls[16] == 7);
    CHECK(m.ls[18] == 0);     // zero fill of the segment
    CHECK(m.ls[24] == 0xee);  // the rest of the local store is left alone
    core.set_reg(1, MTIA_PE_LS_BASE + 16);
    REQUIRE(core.run(10).reason == StopReason::kExit);
    CHECK(m.ls[16] == 0);
  }
}

TEST_CASE("writable image data is fresh at every start", "[pe][start]") {
  Machine m;
  mtia::sim::pe::Segment data;
  data.vaddr = kCode + 0x1000;
  data.bytes = {5, 0, 0, 0, 0, 0, 0, 0};
  data.mem_bytes = 8;
  data.readable = data.writable = true;
  // x2 = counter; counter += 1; a0 = counter
  auto program = program_of({kCode,
                             {code_segment({lui(1, 0x11), ld(2, 1, 0), addi(2, 2, 1), sd(2, 1, 0),
                                            addi(10, 2, 0), kEcall}),
                              data}});
  RiscvCore core(m.config, m.ls, m.port);
  RiscvCore other(m.config, m.ls, m.port);
  for (int launch = 0; launch < 2; ++launch) {
    REQUIRE(core.start(program, {}));
    REQUIRE(core.run(10).reason == StopReason::kExit);
    CHECK(core.exit_status() == 6);
  }
  // Two cores sharing one program do not share its writable data.
  REQUIRE(core.start(program, {}));
  REQUIRE(other.start(program, {}));
  REQUIRE(core.run(10).reason == StopReason::kExit);
  REQUIRE(other.run(10).reason == StopReason::kExit);
  CHECK(other.exit_status() == 6);
}

TEST_CASE("read_memory and write_memory follow the core's map", "[pe][memory]") {
  Machine m;
  m.launch.args = {9, 8, 7};
  auto& c = m.load({kEcall});
  uint8_t buf[4] = {1, 2, 3, 4};
  CHECK(c.write_memory(MTIA_PE_LS_BASE + 8, buf));
  CHECK(m.ls[8] == 1);
  uint8_t back[3] = {};
  CHECK(c.read_memory(MTIA_PE_ARGS_BASE, back));
  CHECK(back[2] == 7);
  CHECK_FALSE(c.write_memory(MTIA_PE_ARGS_BASE, buf));     // read-only
  CHECK_FALSE(c.write_memory(kCode, buf));                 // code is read-only
  CHECK_FALSE(c.read_memory(MTIA_PE_ARGS_BASE + 1, buf));  // runs past the 3 argument bytes
  CHECK_FALSE(c.read_memory(MTIA_PE_LS_BASE + Machine::kLsBytes - 2, buf));
  CHECK(c.local_offset(MTIA_PE_LS_BASE + 10, 6) == 10u);
  CHECK_FALSE(c.local_offset(MTIA_PE_LS_BASE - 1, 1));
  CHECK_FALSE(c.local_offset(MTIA_PE_LS_BASE + Machine::kLsBytes, 1));
}

TEST_CASE("a local store larger than the window is a configuration error", "[pe][start]") {
  std::vector<uint8_t> huge(MTIA_PE_LS_MAX_BYTES + 64);
  ScriptedPort port;
  CHECK_THROWS_AS(RiscvCore({}, huge, port), std::invalid_argument);
}
