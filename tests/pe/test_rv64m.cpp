// RV64M: every multiply and divide, with the spec's overflow and divide-by-zero results.
#include <catch2/catch.hpp>

#include "core_harness.h"

using namespace pe_test;

namespace {

constexpr uint64_t kMin64 = 0x8000'0000'0000'0000ull;
constexpr uint64_t kAll = ~0ull;

uint64_t neg(uint64_t v) {
  return ~v + 1;
}

// Runs rd=3 <- op(x1 = a, x2 = b) and returns x3.
uint64_t run_op(uint32_t (*op)(uint32_t, uint32_t, uint32_t), uint64_t a, uint64_t b) {
  Machine m;
  return m.exec({op(3, 1, 2)}, {{1, a}, {2, b}}).reg(3);
}

}  // namespace

TEST_CASE("MUL keeps the low 64 bits", "[pe][rv64m]") {
  // (2^32 + 3)(2^32 + 5) = 2^64 + 8 * 2^32 + 15
  CHECK(run_op(mul, (1ull << 32) + 3, (1ull << 32) + 5) == (8ull << 32) + 15);
  CHECK(run_op(mul, kAll, kAll) == 1);
  CHECK(run_op(mul, neg(3), 7) == neg(21));
}

TEST_CASE("MULH, MULHSU and MULHU return the high 64 bits", "[pe][rv64m]") {
  CHECK(run_op(mulh, kAll, kAll) == 0);                             // (-1)(-1) = 1
  CHECK(run_op(mulh, kMin64, kMin64) == 0x4000'0000'0000'0000ull);  // 2^126
  CHECK(run_op(mulh, neg(2), 3) == kAll);                           // -6: high word all ones
  CHECK(run_op(mulh, 1ull << 62, 4) == 1);                          // 2^64
  CHECK(run_op(mulhu, kAll, kAll) == kAll - 1);                     // (2^64-1)^2 = 2^128 - 2^65 + 1
  CHECK(run_op(mulhu, 1ull << 63, 2) == 1);
  CHECK(run_op(mulhsu, kAll, kAll) == kAll);  // -1 * (2^64-1) = -2^64 + 1
  CHECK(run_op(mulhsu, 2, 1ull << 63) == 1);  // rs2 is unsigned: 2 * 2^63 = 2^64
  CHECK(run_op(mulhsu, neg(2), 3) == kAll);
  CHECK(run_op(mulhsu, kMin64, kAll) == 0x8000'0000'0000'0000ull);  // -2^63 (2^64-1) >> 64
}

TEST_CASE("DIV, DIVU, REM, REMU", "[pe][rv64m]") {
  CHECK(run_op(div, neg(7), 2) == neg(3));  // truncates toward zero
  CHECK(run_op(div, 7, neg(2)) == neg(3));
  CHECK(run_op(rem, neg(7), 2) == neg(1));  // sign of the dividend
  CHECK(run_op(rem, 7, neg(2)) == 1);
  CHECK(run_op(divu, kAll, 2) == 0x7fff'ffff'ffff'ffffull);
  CHECK(run_op(remu, kAll, 10) == 5);  // 18446744073709551615 % 10
}

TEST_CASE("division by zero and signed overflow follow the RISC-V spec", "[pe][rv64m]") {
  CHECK(run_op(div, 42, 0) == kAll);
  CHECK(run_op(divu, 42, 0) == kAll);
  CHECK(run_op(rem, neg(42), 0) == neg(42));
  CHECK(run_op(remu, 42, 0) == 42);
  CHECK(run_op(div, kMin64, kAll) == kMin64);  // INT64_MIN / -1
  CHECK(run_op(rem, kMin64, kAll) == 0);
}

TEST_CASE("MULW and the 32-bit divides sign-extend their results", "[pe][rv64m]") {
  const uint64_t junk = 0xabcd'0123'0000'0000ull;        // upper halves must be ignored
  CHECK(run_op(mulw, junk | 0x7fff'ffff, 2) == neg(2));  // 0xfffffffe sign-extended
  CHECK(run_op(mulw, junk | 3, junk | 5) == 15);
  CHECK(run_op(divw, junk | 0xffff'fff9, 2) == neg(3));  // -7 / 2
  CHECK(run_op(divuw, junk | 0xffff'ffff, 2) == 0x7fff'ffff);
  CHECK(run_op(divuw, 0x8000'0000, 1) == 0xffff'ffff'8000'0000ull);  // bit 31 sign-extends
  CHECK(run_op(remw, junk | 0xffff'fff9, 2) == neg(1));
  CHECK(run_op(remuw, junk | 0xffff'ffff, 10) == 5);
}

TEST_CASE("32-bit division by zero and overflow", "[pe][rv64m]") {
  CHECK(run_op(divw, 42, 0) == kAll);
  CHECK(run_op(divuw, 42, 0) == kAll);                              // 0xffffffff sign-extended
  CHECK(run_op(remw, 0x8000'0001, 0) == 0xffff'ffff'8000'0001ull);  // the dividend, sign-extended
  CHECK(run_op(remuw, 0x8000'0000, 0) == 0xffff'ffff'8000'0000ull);
  CHECK(run_op(divw, 0x8000'0000, 0xffff'ffff) == 0xffff'ffff'8000'0000ull);  // INT32_MIN / -1
  CHECK(run_op(remw, 0x8000'0000, 0xffff'ffff) == 0);
  // The divisor's upper half is ignored too: 0x1_0000_0000 is zero as a 32-bit value.
  CHECK(run_op(divw, 42, 1ull << 32) == kAll);
}
