// Test helpers: an independent RV64IM encoder (written from the ISA manual's field layouts,
// not from the simulator's decoder) and a small harness that runs a word sequence on a core.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/elf.h"
#include "mtia/sim/pe/program.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_port.h"

namespace pe_test {

// ---- Encoder ------------------------------------------------------------------------------
inline uint32_t r_type(uint32_t opc, uint32_t f3, uint32_t f7, uint32_t rd, uint32_t rs1,
                       uint32_t rs2) {
  return f7 << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | rd << 7 | opc;
}
inline uint32_t i_type(uint32_t opc, uint32_t f3, uint32_t rd, uint32_t rs1, int32_t imm) {
  return (static_cast<uint32_t>(imm) & 0xfff) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | opc;
}
inline uint32_t s_type(uint32_t opc, uint32_t f3, uint32_t rs1, uint32_t rs2, int32_t imm) {
  const auto u = static_cast<uint32_t>(imm);
  return ((u >> 5) & 0x7f) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | (u & 0x1f) << 7 | opc;
}
inline uint32_t b_type(uint32_t f3, uint32_t rs1, uint32_t rs2, int32_t off) {
  const auto u = static_cast<uint32_t>(off);
  return ((u >> 12) & 1) << 31 | ((u >> 5) & 0x3f) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 |
         ((u >> 1) & 0xf) << 8 | ((u >> 11) & 1) << 7 | 0x63;
}
inline uint32_t u_type(uint32_t opc, uint32_t rd, uint32_t imm20) {
  return (imm20 & 0xfffff) << 12 | rd << 7 | opc;
}
inline uint32_t j_type(uint32_t rd, int32_t off) {
  const auto u = static_cast<uint32_t>(off);
  return ((u >> 20) & 1) << 31 | ((u >> 1) & 0x3ff) << 21 | ((u >> 11) & 1) << 20 |
         ((u >> 12) & 0xff) << 12 | rd << 7 | 0x6f;
}

// RV64I
inline uint32_t lui(uint32_t rd, uint32_t imm20) {
  return u_type(0x37, rd, imm20);
}
inline uint32_t auipc(uint32_t rd, uint32_t imm20) {
  return u_type(0x17, rd, imm20);
}
inline uint32_t jal(uint32_t rd, int32_t off) {
  return j_type(rd, off);
}
inline uint32_t jalr(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x67, 0, rd, rs1, imm);
}
inline uint32_t beq(uint32_t a, uint32_t b, int32_t off) {
  return b_type(0, a, b, off);
}
inline uint32_t bne(uint32_t a, uint32_t b, int32_t off) {
  return b_type(1, a, b, off);
}
inline uint32_t blt(uint32_t a, uint32_t b, int32_t off) {
  return b_type(4, a, b, off);
}
inline uint32_t bge(uint32_t a, uint32_t b, int32_t off) {
  return b_type(5, a, b, off);
}
inline uint32_t bltu(uint32_t a, uint32_t b, int32_t off) {
  return b_type(6, a, b, off);
}
inline uint32_t bgeu(uint32_t a, uint32_t b, int32_t off) {
  return b_type(7, a, b, off);
}
inline uint32_t lb(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 0, rd, rs1, imm);
}
inline uint32_t lh(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 1, rd, rs1, imm);
}
inline uint32_t lw(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 2, rd, rs1, imm);
}
inline uint32_t ld(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 3, rd, rs1, imm);
}
inline uint32_t lbu(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 4, rd, rs1, imm);
}
inline uint32_t lhu(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 5, rd, rs1, imm);
}
inline uint32_t lwu(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x03, 6, rd, rs1, imm);
}
inline uint32_t sb(uint32_t rs2, uint32_t rs1, int32_t imm) {
  return s_type(0x23, 0, rs1, rs2, imm);
}
inline uint32_t sh(uint32_t rs2, uint32_t rs1, int32_t imm) {
  return s_type(0x23, 1, rs1, rs2, imm);
}
inline uint32_t sw(uint32_t rs2, uint32_t rs1, int32_t imm) {
  return s_type(0x23, 2, rs1, rs2, imm);
}
inline uint32_t sd(uint32_t rs2, uint32_t rs1, int32_t imm) {
  return s_type(0x23, 3, rs1, rs2, imm);
}
inline uint32_t addi(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 0, rd, rs1, imm);
}
inline uint32_t slti(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 2, rd, rs1, imm);
}
inline uint32_t sltiu(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 3, rd, rs1, imm);
}
inline uint32_t xori(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 4, rd, rs1, imm);
}
inline uint32_t ori(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 6, rd, rs1, imm);
}
inline uint32_t andi(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x13, 7, rd, rs1, imm);
}
inline uint32_t slli(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x13, 1, rd, rs1, static_cast<int32_t>(sh));
}
inline uint32_t srli(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x13, 5, rd, rs1, static_cast<int32_t>(sh));
}
inline uint32_t srai(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x13, 5, rd, rs1, static_cast<int32_t>(0x400 | sh));
}
inline uint32_t addiw(uint32_t rd, uint32_t rs1, int32_t imm) {
  return i_type(0x1b, 0, rd, rs1, imm);
}
inline uint32_t slliw(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x1b, 1, rd, rs1, static_cast<int32_t>(sh));
}
inline uint32_t srliw(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x1b, 5, rd, rs1, static_cast<int32_t>(sh));
}
inline uint32_t sraiw(uint32_t rd, uint32_t rs1, uint32_t sh) {
  return i_type(0x1b, 5, rd, rs1, static_cast<int32_t>(0x400 | sh));
}
#define PE_TEST_R(name, opc, f3, f7)                              \
  inline uint32_t name(uint32_t rd, uint32_t rs1, uint32_t rs2) { \
    return r_type(opc, f3, f7, rd, rs1, rs2);                     \
  }
PE_TEST_R(add, 0x33, 0, 0)
PE_TEST_R(sub, 0x33, 0, 0x20)
PE_TEST_R(sll, 0x33, 1, 0)
PE_TEST_R(slt, 0x33, 2, 0)
PE_TEST_R(sltu, 0x33, 3, 0)
PE_TEST_R(xor_, 0x33, 4, 0)
PE_TEST_R(srl, 0x33, 5, 0)
PE_TEST_R(sra, 0x33, 5, 0x20)
PE_TEST_R(or_, 0x33, 6, 0)
PE_TEST_R(and_, 0x33, 7, 0)
PE_TEST_R(addw, 0x3b, 0, 0)
PE_TEST_R(subw, 0x3b, 0, 0x20)
PE_TEST_R(sllw, 0x3b, 1, 0)
PE_TEST_R(srlw, 0x3b, 5, 0)
PE_TEST_R(sraw, 0x3b, 5, 0x20)
// RV64M
PE_TEST_R(mul, 0x33, 0, 1)
PE_TEST_R(mulh, 0x33, 1, 1)
PE_TEST_R(mulhsu, 0x33, 2, 1)
PE_TEST_R(mulhu, 0x33, 3, 1)
PE_TEST_R(div, 0x33, 4, 1)
PE_TEST_R(divu, 0x33, 5, 1)
PE_TEST_R(rem, 0x33, 6, 1)
PE_TEST_R(remu, 0x33, 7, 1)
PE_TEST_R(mulw, 0x3b, 0, 1)
PE_TEST_R(divw, 0x3b, 4, 1)
PE_TEST_R(divuw, 0x3b, 5, 1)
PE_TEST_R(remw, 0x3b, 6, 1)
PE_TEST_R(remuw, 0x3b, 7, 1)
#undef PE_TEST_R
constexpr uint32_t kEcall = 0x00000073;
constexpr uint32_t kEbreak = 0x00100073;
constexpr uint32_t kFence = 0x0ff0000f;  // fence iorw, iorw

// MTIA extension
inline uint32_t pe_info(uint32_t rd, uint32_t field) {
  return r_type(MTIA_PE_OPC_CTRL, MTIA_PE_F3_INFO, field, rd, 0, 0);
}
inline uint32_t unit(uint32_t opc, uint32_t f3, uint32_t rd, uint32_t rs1) {
  return r_type(opc, f3, 0, rd, rs1, 0);
}

// ---- Images ---------------------------------------------------------------------------------
constexpr uint64_t kCode = MTIA_PE_IMAGE_BASE;

inline std::vector<uint8_t> to_bytes(const std::vector<uint32_t>& words) {
  std::vector<uint8_t> b(words.size() * 4);
  for (size_t i = 0; i < words.size(); ++i) {
    for (int k = 0; k < 4; ++k) b[i * 4 + k] = static_cast<uint8_t>(words[i] >> (8 * k));
  }
  return b;
}

inline mtia::sim::pe::Segment code_segment(const std::vector<uint32_t>& words,
                                           uint64_t base = kCode) {
  mtia::sim::pe::Segment s;
  s.vaddr = base;
  s.bytes = to_bytes(words);
  s.mem_bytes = s.bytes.size();
  s.readable = true;
  s.executable = true;
  return s;
}

inline std::shared_ptr<const mtia::sim::pe::Program> program_of(
    const mtia::sim::pe::ElfImage& image) {
  auto p = mtia::sim::pe::Program::create(image);
  if (!p.ok()) throw std::runtime_error("test image rejected: " + p.error().reason);
  return p.value();
}

// ---- A port that records requests and answers from a script -----------------------------
class ScriptedPort : public mtia::sim::pe::UnitPort {
 public:
  std::vector<mtia::sim::pe::UnitRequest> requests;
  std::function<mtia::sim::pe::UnitResponse(mtia::sim::pe::RiscvCore&,
                                            const mtia::sim::pe::UnitRequest&)>
      answer = [](mtia::sim::pe::RiscvCore&, const mtia::sim::pe::UnitRequest& r) {
        return mtia::sim::pe::UnitResponse::done(1000 + static_cast<uint64_t>(r.op));
      };

  mtia::sim::pe::UnitResponse issue(mtia::sim::pe::RiscvCore& core,
                                    const mtia::sim::pe::UnitRequest& r) override {
    requests.push_back(r);
    return answer(core, r);
  }
};

// ---- A core with a 64 KiB local store running word sequences -----------------------------
struct Machine {
  static constexpr uint64_t kLsBytes = 64 * 1024;
  std::vector<uint8_t> ls = std::vector<uint8_t>(kLsBytes, 0);
  ScriptedPort port;
  mtia::sim::pe::CoreConfig config;
  std::unique_ptr<mtia::sim::pe::RiscvCore> core;
  mtia::sim::pe::LaunchContext launch;

  // Loads `words` at kCode (plus any extra segments) and prepares the core; regs are set
  // after the launch state, so tests can choose every operand.
  mtia::sim::pe::RiscvCore& load(const std::vector<uint32_t>& words,
                                 std::vector<mtia::sim::pe::Segment> extra = {}) {
    mtia::sim::pe::ElfImage image;
    image.entry = kCode;
    image.segments.push_back(code_segment(words));
    for (auto& s : extra) image.segments.push_back(std::move(s));
    core = std::make_unique<mtia::sim::pe::RiscvCore>(config, ls, port);
    auto rejected = core->start(program_of(image), launch);
    if (!rejected) throw std::runtime_error("start rejected: " + rejected.error().reason);
    return *core;
  }

  // Runs words followed by ECALL with the given registers and expects a clean exit.
  mtia::sim::pe::RiscvCore& exec(std::vector<uint32_t> words,
                                 const std::vector<std::pair<unsigned, uint64_t>>& regs = {}) {
    words.push_back(kEcall);
    auto& c = load(words);
    for (auto [r, v] : regs) c.set_reg(r, v);
    auto result = c.run(1'000'000);
    if (result.reason != mtia::sim::pe::StopReason::kExit) {
      throw std::runtime_error(std::string("program did not exit: ") +
                               mtia::sim::pe::stop_reason_name(result.reason) + " " +
                               c.fault().reason);
    }
    return c;
  }
};

}  // namespace pe_test
