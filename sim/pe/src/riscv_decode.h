// RV64IM + MTIA extension decoder: instruction words to DecodedInsn. Private to the core.
#pragma once

#include <cstdint>

#include "mtia/sim/pe/program.h"

namespace mtia::sim::pe::detail {

// The interpreter's operations. kFetchFault marks code-array slots outside executable
// segments; kIllegal marks words that decode to nothing.
// Grouped by instruction format.
// clang-format off
enum Op : uint8_t {
  kFetchFault = 0,
  kIllegal,
  kLui, kAuipc, kJal, kJalr,
  kBeq, kBne, kBlt, kBge, kBltu, kBgeu,
  kLb, kLh, kLw, kLd, kLbu, kLhu, kLwu,
  kSb, kSh, kSw, kSd,
  kAddi, kSlti, kSltiu, kXori, kOri, kAndi, kSlli, kSrli, kSrai,
  kAdd, kSub, kSll, kSlt, kSltu, kXor, kSrl, kSra, kOr, kAnd,
  kAddiw, kSlliw, kSrliw, kSraiw, kAddw, kSubw, kSllw, kSrlw, kSraw,
  kMul, kMulh, kMulhsu, kMulhu, kDiv, kDivu, kRem, kRemu,
  kMulw, kDivw, kDivuw, kRemw, kRemuw,
  kFence, kEcall, kEbreak,
  kPeInfo,  // imm = MTIA_PE_INFO_* field
  kUnit,    // imm = UnitOp
  kOpCount
};
// clang-format on
static_assert(kOpCount <= 128, "RiscvCore::cost_ has 128 entries");

// Decodes one instruction word. For kIllegal, *why (if given) says what is wrong with it.
DecodedInsn decode(uint32_t word, const char** why = nullptr);

}  // namespace mtia::sim::pe::detail
