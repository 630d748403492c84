// RV64I base instructions, each against hand-computed results.
#include <catch2/catch.hpp>

#include "core_harness.h"

using namespace pe_test;
using mtia::sim::pe::StopReason;

namespace {
constexpr uint64_t kMin64 = 0x8000'0000'0000'0000ull;
constexpr uint64_t kAll = ~0ull;
}  // namespace

TEST_CASE("LUI and AUIPC sign-extend their 32-bit results", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec({lui(1, 0x80000), lui(2, 0x12345), auipc(3, 0), auipc(4, 0xfffff)});
  CHECK(c.reg(1) == 0xffff'ffff'8000'0000ull);
  CHECK(c.reg(2) == 0x1234'5000ull);
  CHECK(c.reg(3) == kCode + 8);
  CHECK(c.reg(4) == kCode + 12 - 0x1000);  // 0xfffff << 12 is -4096
}

TEST_CASE("immediate ALU ops", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec(
      {addi(2, 1, -1), addi(3, 1, 2047), slti(4, 1, -1), slti(5, 6, 0), sltiu(7, 1, -1),
       sltiu(8, 6, 1), xori(9, 1, -1), ori(10, 1, 0x0f0), andi(11, 1, 0x7f0), andi(12, 6, -8)},
      {{1, 100}, {6, kAll}});
  CHECK(c.reg(2) == 99);
  CHECK(c.reg(3) == 2147);
  CHECK(c.reg(4) == 0);  // 100 < -1 is false signed
  CHECK(c.reg(5) == 1);  // -1 < 0 signed
  CHECK(c.reg(7) == 1);  // 100 < 0xfff...f unsigned: the immediate is sign-extended first
  CHECK(c.reg(8) == 0);
  CHECK(c.reg(9) == ~uint64_t{100});
  CHECK(c.reg(10) == (100 | 0xf0));
  CHECK(c.reg(11) == (100 & 0x7f0));
  CHECK(c.reg(12) == (kAll & ~uint64_t{7}));
}

TEST_CASE("immediate shifts by 0, 1 and 63", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec(
      {slli(2, 1, 63), srli(3, 5, 63), srai(4, 5, 63), srai(6, 5, 1), slli(7, 1, 0), srli(8, 5, 1)},
      {{1, 3}, {5, kMin64}});
  CHECK(c.reg(2) == kMin64);  // 3 << 63 keeps only the low bit
  CHECK(c.reg(3) == 1);
  CHECK(c.reg(4) == kAll);
  CHECK(c.reg(6) == 0xc000'0000'0000'0000ull);
  CHECK(c.reg(7) == 3);
  CHECK(c.reg(8) == 0x4000'0000'0000'0000ull);
}

TEST_CASE("register ALU ops", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec(
      {add(3, 1, 2), sub(4, 2, 1), sll(5, 1, 6), sll(7, 1, 8), slt(9, 2, 1), sltu(10, 2, 1),
       xor_(11, 1, 2), srl(12, 2, 6), sra(13, 2, 6), or_(14, 1, 2), and_(15, 1, 2), sra(16, 2, 8)},
      {{1, 0x7fff'ffff'ffff'ffffull}, {2, kAll}, {6, 63}, {8, 64 + 4}});
  CHECK(c.reg(3) == 0x7fff'ffff'ffff'fffeull);  // wraps
  CHECK(c.reg(4) == kMin64);
  CHECK(c.reg(5) == kMin64);                    // shift by 63
  CHECK(c.reg(7) == 0xffff'ffff'ffff'fff0ull);  // shift amount uses the low 6 bits: 68 -> 4
  CHECK(c.reg(9) == 1);                         // -1 < max signed
  CHECK(c.reg(10) == 0);                        // 0xfff...f < 0x7ff...f unsigned is false
  CHECK(c.reg(11) == kMin64);
  CHECK(c.reg(12) == 1);
  CHECK(c.reg(13) == kAll);
  CHECK(c.reg(14) == kAll);
  CHECK(c.reg(15) == 0x7fff'ffff'ffff'ffffull);
  CHECK(c.reg(16) == kAll);
}

TEST_CASE("W ops compute on 32 bits and sign-extend", "[pe][rv64i]") {
  Machine m;
  auto& c =
      m.exec({addiw(2, 1, 1), addw(3, 1, 4), subw(5, 4, 1), slliw(6, 4, 31), srliw(7, 8, 4),
              sraiw(9, 8, 4), sllw(10, 4, 11), srlw(12, 8, 11), sraw(13, 8, 11), addiw(14, 15, 0),
              srliw(16, 8, 0)},
             // x1 = INT32_MAX with garbage above; x8 = 0x80000000 in the low word; x11 = 33 -> 1
             {{1, 0xdead'beef'7fff'ffffull},
              {4, 1},
              {8, 0x1234'5678'8000'0000ull},
              {11, 33},
              {15, 0x0000'0001'ffff'fffeull}});
  CHECK(c.reg(2) == 0xffff'ffff'8000'0000ull);  // INT32_MAX + 1 wraps to INT32_MIN
  CHECK(c.reg(3) == 0xffff'ffff'8000'0000ull);
  CHECK(c.reg(5) == 0xffff'ffff'8000'0002ull);  // 1 - 0x7fffffff
  CHECK(c.reg(6) == 0xffff'ffff'8000'0000ull);
  CHECK(c.reg(7) == 0x0800'0000ull);  // logical on the low word: no sign fill
  CHECK(c.reg(9) == 0xffff'ffff'f800'0000ull);
  CHECK(c.reg(10) == 2);  // shift amount is the low 5 bits: 33 -> 1
  CHECK(c.reg(12) == 0x4000'0000ull);
  CHECK(c.reg(13) == 0xffff'ffff'c000'0000ull);
  CHECK(c.reg(14) == 0xffff'ffff'ffff'fffeull);  // sext.w
  CHECK(c.reg(16) == 0xffff'ffff'8000'0000ull);  // srliw by 0 still sign-extends bit 31
}

TEST_CASE("x0 reads zero and ignores writes", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec({addi(0, 0, 5), add(1, 0, 0), lui(0, 1), addi(2, 0, 7)});
  CHECK(c.reg(0) == 0);
  CHECK(c.reg(1) == 0);
  CHECK(c.reg(2) == 7);
}

TEST_CASE("loads and stores of every width in the local store", "[pe][rv64i][memory]") {
  Machine m;
  const uint64_t base = MTIA_PE_LS_BASE + 0x100;
  auto& c = m.exec({sd(2, 1, 0), lb(3, 1, 7), lbu(4, 1, 7), lh(5, 1, 6), lhu(6, 1, 6), lw(7, 1, 4),
                    lwu(8, 1, 4), ld(9, 1, 0), sb(10, 1, 16), sh(10, 1, 18), sw(10, 1, 20),
                    ld(11, 1, 16), sd(2, 1, -8), ld(12, 1, -8)},
                   {{1, base}, {2, 0x8899'aabb'ccdd'eeffull}, {10, 0x1122'3344'5566'7788ull}});
  CHECK(c.reg(3) == 0xffff'ffff'ffff'ff88ull);
  CHECK(c.reg(4) == 0x88);
  CHECK(c.reg(5) == 0xffff'ffff'ffff'8899ull);
  CHECK(c.reg(6) == 0x8899);
  CHECK(c.reg(7) == 0xffff'ffff'8899'aabbull);
  CHECK(c.reg(8) == 0x8899'aabbull);
  CHECK(c.reg(9) == 0x8899'aabb'ccdd'eeffull);
  // sb at +16, sh at +18, sw at +20, little-endian
  CHECK(c.reg(11) == 0x5566'7788'7788'0088ull);
  CHECK(c.reg(12) == 0x8899'aabb'ccdd'eeffull);  // negative offset
  // The bytes really are in the PE's local store, little-endian.
  CHECK(m.ls[0x100] == 0xff);
  CHECK(m.ls[0x107] == 0x88);
}

TEST_CASE("the last bytes of the local store and the stack pointer", "[pe][rv64i][memory]") {
  Machine m;
  // sp starts at the top of the local store; push and pop one doubleword.
  auto& c = m.exec({addi(2, 2, -16), sd(1, 2, 8), ld(3, 2, 8), addi(2, 2, 16)},
                   {{1, 0x0123'4567'89ab'cdefull}});
  CHECK(c.reg(2) == MTIA_PE_LS_BASE + Machine::kLsBytes);
  CHECK(c.reg(3) == 0x0123'4567'89ab'cdefull);
  CHECK(m.ls[Machine::kLsBytes - 8] == 0xef);
}

TEST_CASE("loads from the image and the argument block", "[pe][rv64i][memory]") {
  Machine m;
  m.launch.args = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  mtia::sim::pe::Segment data;
  data.vaddr = kCode + 0x1000;
  data.bytes = {0x11, 0x22, 0x33, 0x44};
  data.mem_bytes = 16;  // 12 bytes of zero fill (bss)
  data.readable = data.writable = true;
  std::vector<uint32_t> words = {lw(3, 1, 0), ld(4, 1, 8),  lui(5, 0x11),  sw(3, 5, 8),
                                 ld(6, 5, 8), ld(7, 10, 0), lbu(8, 10, 8), kEcall};
  auto& c = m.load(words, {data});
  c.set_reg(1, kCode + 0x1000);
  REQUIRE(c.run(100).reason == StopReason::kExit);
  CHECK(c.reg(3) == 0x4433'2211ull);
  CHECK(c.reg(4) == 0);                         // zero-filled tail
  CHECK(c.reg(6) == 0x4433'2211ull);            // stored into the writable segment and read back
  CHECK(c.reg(7) == 0x0807'0605'0403'0201ull);  // a0 points at the arguments
  CHECK(c.reg(8) == 9);
  CHECK(c.reg(11) == 9);  // a1 = argument bytes
}

TEST_CASE("launch state: sp, a0, a1, pc", "[pe][rv64i]") {
  Machine m;
  m.launch.args.assign(24, 0);
  auto& c = m.load({kEcall});
  CHECK(c.pc() == kCode);
  CHECK(c.reg(2) == MTIA_PE_LS_BASE + Machine::kLsBytes);
  CHECK(c.reg(10) == MTIA_PE_ARGS_BASE);
  CHECK(c.reg(11) == 24);
  CHECK(c.reg(1) == 0);
  CHECK(c.state() == mtia::sim::pe::RiscvCore::State::kReady);
}

TEST_CASE("conditional branches, signed and unsigned, taken and not", "[pe][rv64i][branch]") {
  // Each branch skips "addi x5, x5, 1" when taken: x5 counts the branches not taken.
  struct Case {
    const char* name;
    uint32_t (*op)(uint32_t, uint32_t, int32_t);
    uint64_t a, b;
    bool taken;
  };
  const Case cases[] = {
      {"beq equal", beq, 5, 5, true},          {"beq differ", beq, 5, 6, false},
      {"bne differ", bne, 5, 6, true},         {"bne equal", bne, 5, 5, false},
      {"blt -1 < 1", blt, kAll, 1, true},      {"blt 1 < -1", blt, 1, kAll, false},
      {"bge 1 >= -1", bge, 1, kAll, true},     {"bge equal", bge, 7, 7, true},
      {"bge -1 >= 1", bge, kAll, 1, false},    {"bltu 1 < max", bltu, 1, kAll, true},
      {"bltu max < 1", bltu, kAll, 1, false},  {"bgeu max >= 1", bgeu, kAll, 1, true},
      {"bgeu 1 >= max", bgeu, 1, kAll, false},
  };
  for (const Case& k : cases) {
    INFO(k.name);
    Machine m;
    auto& c = m.exec({k.op(1, 2, 8), addi(5, 5, 1), addi(6, 0, 1)}, {{1, k.a}, {2, k.b}});
    CHECK(c.reg(5) == (k.taken ? 0u : 1u));
    CHECK(c.reg(6) == 1);
  }
}

TEST_CASE("a backward branch loop sums 1..10", "[pe][rv64i][branch]") {
  Machine m;
  // x1 = 10; loop: x5 += x1; x1 -= 1; bne x1, x0, loop
  auto& c = m.exec({addi(1, 0, 10), add(5, 5, 1), addi(1, 1, -1), bne(1, 0, -8)});
  CHECK(c.reg(5) == 55);
  CHECK(c.instret() == 1 + 3 * 10 + 1);
}

TEST_CASE("JAL and JALR link and jump", "[pe][rv64i][branch]") {
  Machine m;
  // 0: jal x1, +12        -> 12
  // 4: addi x5, x0, 1     (skipped)
  // 8: ecall
  // 12: addi x6, x0, 2
  // 16: jalr x7, x8, 1    x8 = kCode + 8 (+1: bit 0 is cleared) -> ecall at 8
  auto& c = m.load({jal(1, 12), addi(5, 0, 1), kEcall, addi(6, 0, 2), jalr(7, 8, 1)});
  c.set_reg(8, kCode + 8);
  REQUIRE(c.run(100).reason == StopReason::kExit);
  CHECK(c.reg(1) == kCode + 4);
  CHECK(c.reg(5) == 0);
  CHECK(c.reg(6) == 2);
  CHECK(c.reg(7) == kCode + 20);
  CHECK(c.pc() == kCode + 8);
}

TEST_CASE("JALR with rd == rs1 jumps to the old value", "[pe][rv64i][branch]") {
  Machine m;
  auto& c = m.load({jalr(1, 1, 0), kEcall, kEcall, addi(3, 0, 9), kEcall});
  c.set_reg(1, kCode + 12);
  REQUIRE(c.run(100).reason == StopReason::kExit);
  CHECK(c.reg(3) == 9);
  CHECK(c.reg(1) == kCode + 4);
}

TEST_CASE("FENCE retires as a no-op", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec({kFence, addi(1, 0, 3)});
  CHECK(c.reg(1) == 3);
}

TEST_CASE("ECALL exits with a0 as the status", "[pe][rv64i]") {
  Machine m;
  auto& c = m.exec({addi(10, 0, -3)});
  CHECK(c.state() == mtia::sim::pe::RiscvCore::State::kExited);
  CHECK(c.exit_status() == -3);
  CHECK_THROWS_AS(c.run(1), std::logic_error);  // an exited core does not run on
}

TEST_CASE("cycle accounting follows the per-class table", "[pe][timing]") {
  Machine m;
  m.config.timing = {};  // the documented defaults
  // addi 1 | mul 3 | div 20 | sd 1 | ld 2 | beq taken 2 | (skipped) | bne not taken 1 |
  // jal 2 | pe.info 1 | unit issue 1 | ecall 1
  auto& c = m.exec({addi(1, 0, 6), mul(7, 1, 1), div(3, 7, 1), sd(1, 2, -8), ld(4, 2, -8),
                    beq(0, 0, 8), addi(9, 0, 1), bne(0, 0, 8), jal(0, 4),
                    pe_info(5, MTIA_PE_INFO_CYCLES), unit(MTIA_PE_OPC_DMA, 0, 6, 0)},
                   {{2, MTIA_PE_LS_BASE + 0x100}});
  CHECK(c.reg(3) == 6);
  CHECK(c.cycles() == 1 + 3 + 20 + 1 + 2 + 2 + 1 + 2 + 1 + 1 + 1);
  CHECK(c.instret() == 11);
  CHECK(c.reg(5) == 1 + 3 + 20 + 1 + 2 + 2 + 1 + 2 + 1);  // cycles when pe.info retired
}

TEST_CASE("the timing table is configurable", "[pe][timing]") {
  Machine m;
  m.config.timing.alu = 5;
  m.config.timing.load = 10;
  m.config.timing.system = 0;
  auto& c = m.exec({addi(1, 0, 1), ld(2, 2, -8)});
  CHECK(c.cycles() == 5 + 10);
}

TEST_CASE("a taken branch may be cheaper than a fall-through", "[pe][timing]") {
  Machine m;
  m.config.timing.branch = 3;
  m.config.timing.branch_taken = 1;
  m.config.timing.system = 0;
  auto& c = m.exec({beq(0, 0, 4), bne(0, 0, 4)});  // taken (1), then not taken (3)
  CHECK(c.cycles() == 4);
}
