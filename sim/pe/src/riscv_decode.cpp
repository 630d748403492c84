#include "riscv_decode.h"

#include "mtia/isa/pe/pe_ops.h"
#include "mtia/sim/pe/unit_port.h"

namespace mtia::sim::pe::detail {
namespace {

constexpr uint8_t kSink = 32;  // writes to x0 land here and are never read

DecodedInsn make(Op op, uint32_t rd, uint32_t rs1, uint32_t rs2, int32_t imm) {
  DecodedInsn d;
  d.op = op;
  d.rd = rd == 0 ? kSink : static_cast<uint8_t>(rd);
  d.rs1 = static_cast<uint8_t>(rs1);
  d.rs2 = static_cast<uint8_t>(rs2);
  d.imm = imm;
  return d;
}

DecodedInsn illegal(const char** why, const char* reason) {
  if (why != nullptr) *why = reason;
  DecodedInsn d;
  d.op = kIllegal;
  return d;
}

int32_t imm_i(uint32_t w) {
  return static_cast<int32_t>(w) >> 20;
}
int32_t imm_s(uint32_t w) {
  return ((static_cast<int32_t>(w) >> 25) * 32) | static_cast<int32_t>((w >> 7) & 0x1f);
}
int32_t imm_b(uint32_t w) {
  const uint32_t v = ((w >> 31) & 1) << 12 | ((w >> 7) & 1) << 11 | ((w >> 25) & 0x3f) << 5 |
                     ((w >> 8) & 0xf) << 1;
  return static_cast<int32_t>(v << 19) >> 19;  // sign bit is bit 12
}
int32_t imm_u(uint32_t w) {
  return static_cast<int32_t>(w & 0xfffff000u);
}
int32_t imm_j(uint32_t w) {
  const uint32_t v = ((w >> 31) & 1) << 20 | ((w >> 12) & 0xff) << 12 | ((w >> 20) & 1) << 11 |
                     ((w >> 21) & 0x3ff) << 1;
  return static_cast<int32_t>(v << 11) >> 11;  // sign bit is bit 20
}

DecodedInsn decode_ctrl(uint32_t f3, uint32_t f7, uint32_t rd, uint32_t rs1, uint32_t rs2,
                        const char** why) {
  if (f3 == MTIA_PE_F3_INFO) {
    if (rs1 != 0 || rs2 != 0) return illegal(why, "pe.info requires rs1 = rs2 = x0");
    if (f7 >= MTIA_PE_INFO_COUNT) return illegal(why, "pe.info field (funct7) is not defined");
    return make(kPeInfo, rd, 0, 0, static_cast<int32_t>(f7));
  }
  if (f7 != MTIA_PE_F7_V1) return illegal(why, "custom-0 funct7 must be 0");
  switch (f3) {
    case MTIA_PE_F3_BARRIER:
      if (rs1 != 0 || rs2 != 0) return illegal(why, "pe.barrier requires rs1 = rs2 = x0");
      return make(kUnit, rd, 0, 0, static_cast<int32_t>(UnitOp::kBarrier));
    case MTIA_PE_F3_WAIT:
      if (rs2 != 0) return illegal(why, "pe.wait requires rs2 = x0");
      return make(kUnit, rd, rs1, 0, static_cast<int32_t>(UnitOp::kWait));
    case MTIA_PE_F3_WAIT_ALL:
      if (rs1 != 0 || rs2 != 0) return illegal(why, "pe.waitall requires rs1 = rs2 = x0");
      return make(kUnit, rd, 0, 0, static_cast<int32_t>(UnitOp::kWaitAll));
    case MTIA_PE_F3_POLL:
      if (rs2 != 0) return illegal(why, "pe.poll requires rs2 = x0");
      return make(kUnit, rd, rs1, 0, static_cast<int32_t>(UnitOp::kPoll));
    default:
      return illegal(why, "custom-0 funct3 is not defined");
  }
}

DecodedInsn decode_unit(uint32_t opcode, uint32_t f3, uint32_t f7, uint32_t rd, uint32_t rs1,
                        uint32_t rs2, const char** why) {
  if (f7 != MTIA_PE_F7_V1) return illegal(why, "unit instruction funct7 must be 0");
  if (rs2 != 0) return illegal(why, "unit instruction requires rs2 = x0");
  UnitOp op = UnitOp::kIllegal;
  if (opcode == MTIA_PE_OPC_DMA) {
    if (f3 == MTIA_PE_F3_DMA) op = UnitOp::kDma;
  } else {
    switch (f3) {
      case MTIA_PE_F3_MATMUL:
        op = UnitOp::kMatmul;
        break;
      case MTIA_PE_F3_SE:
        op = UnitOp::kEltwise;
        break;
      case MTIA_PE_F3_RE:
        op = UnitOp::kReduce;
        break;
      case MTIA_PE_F3_MLU:
        op = UnitOp::kLayout;
        break;
      default:
        break;
    }
  }
  if (op == UnitOp::kIllegal) return illegal(why, "unit instruction funct3 is not defined");
  return make(kUnit, rd, rs1, 0, static_cast<int32_t>(op));
}

}  // namespace

DecodedInsn decode(uint32_t w, const char** why) {
  const uint32_t opcode = w & 0x7f;
  const uint32_t rd = (w >> 7) & 0x1f;
  const uint32_t f3 = (w >> 12) & 7;
  const uint32_t rs1 = (w >> 15) & 0x1f;
  const uint32_t rs2 = (w >> 20) & 0x1f;
  const uint32_t f7 = w >> 25;

  if ((w & 3) != 3) return illegal(why, "compressed (16-bit) instructions are not supported");
  switch (opcode) {
    case 0x37:
      return make(kLui, rd, 0, 0, imm_u(w));
    case 0x17:
      return make(kAuipc, rd, 0, 0, imm_u(w));
    case 0x6f:
      return make(kJal, rd, 0, 0, imm_j(w));
    case 0x67:
      if (f3 != 0) return illegal(why, "JALR funct3 must be 0");
      return make(kJalr, rd, rs1, 0, imm_i(w));
    case 0x63: {
      static constexpr Op kBranch[8] = {kBeq, kBne, kIllegal, kIllegal, kBlt, kBge, kBltu, kBgeu};
      if (kBranch[f3] == kIllegal) return illegal(why, "branch funct3 2 and 3 are reserved");
      return make(kBranch[f3], 0, rs1, rs2, imm_b(w));
    }
    case 0x03: {
      static constexpr Op kLoad[8] = {kLb, kLh, kLw, kLd, kLbu, kLhu, kLwu, kIllegal};
      if (kLoad[f3] == kIllegal) return illegal(why, "load funct3 7 is reserved");
      return make(kLoad[f3], rd, rs1, 0, imm_i(w));
    }
    case 0x23: {
      static constexpr Op kStore[4] = {kSb, kSh, kSw, kSd};
      if (f3 > 3) return illegal(why, "store funct3 4..7 are reserved");
      return make(kStore[f3], 0, rs1, rs2, imm_s(w));
    }
    case 0x13: {
      const uint32_t shamt = (w >> 20) & 0x3f;
      const uint32_t f6 = w >> 26;
      switch (f3) {
        case 0:
          return make(kAddi, rd, rs1, 0, imm_i(w));
        case 1:
          if (f6 != 0) return illegal(why, "SLLI with imm[11:6] != 0");
          return make(kSlli, rd, rs1, 0, static_cast<int32_t>(shamt));
        case 2:
          return make(kSlti, rd, rs1, 0, imm_i(w));
        case 3:
          return make(kSltiu, rd, rs1, 0, imm_i(w));
        case 4:
          return make(kXori, rd, rs1, 0, imm_i(w));
        case 5:
          if (f6 == 0) return make(kSrli, rd, rs1, 0, static_cast<int32_t>(shamt));
          if (f6 == 0x10) return make(kSrai, rd, rs1, 0, static_cast<int32_t>(shamt));
          return illegal(why, "SRLI/SRAI with undefined imm[11:6]");
        case 6:
          return make(kOri, rd, rs1, 0, imm_i(w));
        default:
          return make(kAndi, rd, rs1, 0, imm_i(w));
      }
    }
    case 0x1b: {
      const int32_t shamt = static_cast<int32_t>(rs2);  // 5 bits; bit 25 is part of funct7
      switch (f3) {
        case 0:
          return make(kAddiw, rd, rs1, 0, imm_i(w));
        case 1:
          if (f7 != 0) return illegal(why, "SLLIW with imm[11:5] != 0");
          return make(kSlliw, rd, rs1, 0, shamt);
        case 5:
          if (f7 == 0) return make(kSrliw, rd, rs1, 0, shamt);
          if (f7 == 0x20) return make(kSraiw, rd, rs1, 0, shamt);
          return illegal(why, "SRLIW/SRAIW with undefined imm[11:5]");
        default:
          return illegal(why, "OP-IMM-32 funct3 is not defined");
      }
    }
    case 0x33: {
      if (f7 == 0) {
        static constexpr Op kOp[8] = {kAdd, kSll, kSlt, kSltu, kXor, kSrl, kOr, kAnd};
        return make(kOp[f3], rd, rs1, rs2, 0);
      }
      if (f7 == 1) {
        static constexpr Op kOp[8] = {kMul, kMulh, kMulhsu, kMulhu, kDiv, kDivu, kRem, kRemu};
        return make(kOp[f3], rd, rs1, rs2, 0);
      }
      if (f7 == 0x20 && f3 == 0) return make(kSub, rd, rs1, rs2, 0);
      if (f7 == 0x20 && f3 == 5) return make(kSra, rd, rs1, rs2, 0);
      return illegal(why, "OP funct7/funct3 combination is not RV64IM");
    }
    case 0x3b: {
      if (f7 == 0 && f3 == 0) return make(kAddw, rd, rs1, rs2, 0);
      if (f7 == 0 && f3 == 1) return make(kSllw, rd, rs1, rs2, 0);
      if (f7 == 0 && f3 == 5) return make(kSrlw, rd, rs1, rs2, 0);
      if (f7 == 0x20 && f3 == 0) return make(kSubw, rd, rs1, rs2, 0);
      if (f7 == 0x20 && f3 == 5) return make(kSraw, rd, rs1, rs2, 0);
      if (f7 == 1) {
        static constexpr Op kOp[8] = {kMulw, kIllegal, kIllegal, kIllegal,
                                      kDivw, kDivuw,   kRemw,    kRemuw};
        if (kOp[f3] != kIllegal) return make(kOp[f3], rd, rs1, rs2, 0);
      }
      return illegal(why, "OP-32 funct7/funct3 combination is not RV64IM");
    }
    case 0x0f:
      // FENCE and FENCE.I order nothing in a single in-order core with predecoded,
      // read-only code: they retire as no-ops.
      if (f3 > 1) return illegal(why, "MISC-MEM funct3 is not FENCE or FENCE.I");
      return make(kFence, 0, 0, 0, 0);
    case 0x73:
      if (w == 0x00000073) return make(kEcall, 0, 0, 0, 0);
      if (w == 0x00100073) return make(kEbreak, 0, 0, 0, 0);
      return illegal(why,
                     "SYSTEM instruction other than ECALL/EBREAK (the core is RV64IM: no Zicsr, "
                     "no privileged mode; use pe.info for counters)");
    case MTIA_PE_OPC_CTRL:
      return decode_ctrl(f3, f7, rd, rs1, rs2, why);
    case MTIA_PE_OPC_DMA:
    case MTIA_PE_OPC_COMPUTE:
      return decode_unit(opcode, f3, f7, rd, rs1, rs2, why);
    case MTIA_PE_OPC_RESERVED:
      return illegal(why, "custom-3 opcode space is reserved");
    case 0x07:
    case 0x27:
    case 0x43:
    case 0x47:
    case 0x4b:
    case 0x4f:
    case 0x53:
      return illegal(why, "floating-point instruction (the core has no F/D extension)");
    case 0x2f:
      return illegal(why, "atomic instruction (the core has no A extension)");
    case 0x57:
      return illegal(why, "vector instruction (the core has no V extension)");
    default:
      return illegal(why, "opcode is not RV64IM or the MTIA extension");
  }
}

}  // namespace mtia::sim::pe::detail
