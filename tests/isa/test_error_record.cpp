// The error record (isa/error_record.h): its byte layout, what make_error_record writes, and
// every rejection of decode_error_record.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "mtia/isa/error_record.h"
#include "mtia/isa/pe/kernel_meta.h"

using namespace mtia::isa;

namespace {

ErrorRecord valid() {
  return make_error_record(7, 6, 6, ErrorCode::kKernelFault,
                           "PE 3 (row 0, col 3): misaligned access at pc 0x10040", int64_t{0});
}

void expect_rejected(const ErrorRecord& r, ErrorCode code, const std::string& words) {
  auto d = decode_error_record(&r, sizeof r);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().code == code);
  CHECK_THAT(d.error().reason, Catch::Contains(words));
}

}  // namespace

TEST_CASE("an error record has a fixed little-endian layout", "[isa][error_record]") {
  const ErrorRecord r = make_error_record(0x1122334455667788ull, 0x99, 6, ErrorCode::kKernelFault,
                                          "why", int64_t{-2});
  uint8_t b[kErrorRecordBytes];
  std::memcpy(b, &r, sizeof b);
  CHECK(std::memcmp(b, "MTER", 4) == 0);  // the magic reads as text in a dump
  CHECK(b[4] == kErrorRecordVersion);
  CHECK(b[5] == 6);                 // opcode
  CHECK(b[6] == kErrorExitStatus);  // flags, low byte
  CHECK(b[8] == 0x88);              // seq, little-endian
  CHECK(b[15] == 0x11);
  CHECK(b[16] == 0x99);  // index
  CHECK(b[24] == static_cast<uint8_t>(ErrorCode::kKernelFault));
  int64_t status;
  std::memcpy(&status, b + 32, 8);
  CHECK(status == -2);
  CHECK(std::memcmp(b + 64, "why", 4) == 0);  // with its NUL
  for (size_t i = 68; i < kErrorRecordBytes; ++i) REQUIRE(b[i] == 0);
  for (size_t i = 40; i < 64; ++i) REQUIRE(b[i] == 0);  // reserved
}

TEST_CASE("make_error_record and decode_error_record round-trip", "[isa][error_record]") {
  const ErrorRecord r = valid();
  auto d = decode_error_record(&r, sizeof r);
  REQUIRE(d.ok());
  CHECK(d.value().seq == 7);
  CHECK(d.value().index == 6);
  CHECK(d.value().opcode == 6);
  CHECK(d.value().error == static_cast<uint16_t>(ErrorCode::kKernelFault));
  CHECK(d.value().flags == 0);  // a zero exit status is no exit status
  CHECK(d.value().exit_status == 0);
  CHECK(error_record_text(d.value()) == "PE 3 (row 0, col 3): misaligned access at pc 0x10040");

  const ErrorRecord exited =
      make_error_record(1, 0, 6, ErrorCode::kKernelFault, "", int64_t{MTIA_KSTATUS_BAD_DTYPE});
  auto e = decode_error_record(&exited, sizeof exited);
  REQUIRE(e.ok());
  CHECK(e.value().flags == kErrorExitStatus);
  CHECK(e.value().exit_status == 2);
  CHECK(error_record_text(e.value()).empty());
  // Only a kernel fault carries an exit status.
  const ErrorRecord watchdog = make_error_record(1, 0, 6, ErrorCode::kWatchdog, "", int64_t{3});
  CHECK(watchdog.flags == 0);
  CHECK(watchdog.exit_status == 0);
}

TEST_CASE("long or unprintable text is cut and cleaned, and flagged", "[isa][error_record]") {
  std::string text(1000, 'x');
  text[5] = '\n';
  text[6] = static_cast<char>(0xC3);
  const ErrorRecord r = make_error_record(1, 0, 2, ErrorCode::kDeviceAddressFault, text);
  auto d = decode_error_record(&r, sizeof r);
  REQUIRE(d.ok());
  CHECK(d.value().flags == kErrorTextTruncated);
  const std::string_view got = error_record_text(d.value());
  CHECK(got.size() == kErrorTextBytes - 1);
  CHECK(got.substr(0, 8) == "xxxxx??x");
  CHECK(got.substr(got.size() - 4) == "x...");
  // Exactly the longest text that fits is kept whole.
  const std::string fits(kErrorTextBytes - 1, 'y');
  const ErrorRecord f = make_error_record(1, 0, 2, ErrorCode::kDeviceAddressFault, fits);
  CHECK(f.flags == 0);
  CHECK(error_record_text(f) == fits);
}

TEST_CASE("decode_error_record rejects malformed records with a reason", "[isa][error_record]") {
  {
    const ErrorRecord r = valid();
    auto d = decode_error_record(&r, sizeof r - 1);
    REQUIRE_FALSE(d.ok());
    CHECK(d.error().code == ErrorCode::kBadDims);
  }
  ErrorRecord r = valid();
  r.magic = 0;
  expect_rejected(r, ErrorCode::kBadOpcode, "magic");
  r = valid();
  r.version = kErrorRecordVersion + 1;
  expect_rejected(r, ErrorCode::kBadVersion, "version " + std::to_string(kErrorRecordVersion + 1));
  r = valid();
  r.version = 1;  // the 512-byte layout before this one
  expect_rejected(r, ErrorCode::kBadVersion, "version 1");
  r = valid();
  r.flags = 0x4;
  expect_rejected(r, ErrorCode::kReservedNotZero, "unknown bits");
  r = valid();
  r.reserved0 = 1;
  expect_rejected(r, ErrorCode::kReservedNotZero, "reserved");
  r = valid();
  r.reserved1 = 1;
  expect_rejected(r, ErrorCode::kReservedNotZero, "reserved");
  r = valid();
  r.reserved2[2] = 1;
  expect_rejected(r, ErrorCode::kReservedNotZero, "reserved");
  r = valid();
  r.error = 0;
  expect_rejected(r, ErrorCode::kReservedNotZero, "error code 0");
  r = valid();
  r.error = static_cast<uint16_t>(ErrorCode::kCount);
  expect_rejected(r, ErrorCode::kReservedNotZero, "error code");
  r = valid();
  r.exit_status = 3;  // without the flag
  expect_rejected(r, ErrorCode::kReservedNotZero, "without the kErrorExitStatus flag");
  r = valid();
  r.flags = kErrorExitStatus;  // the flag with a zero status
  expect_rejected(r, ErrorCode::kReservedNotZero, "non-zero status");
  r = make_error_record(1, 0, 2, ErrorCode::kDeviceAddressFault, "");
  r.flags = kErrorExitStatus;  // an exit status on something that is not a kernel fault
  r.exit_status = 1;
  expect_rejected(r, ErrorCode::kReservedNotZero, "only a kernel fault");
  r = valid();
  std::memset(r.text, 'a', kErrorTextBytes);  // no terminating NUL
  expect_rejected(r, ErrorCode::kReservedNotZero, "NUL-terminated");
  r = valid();
  r.text[2] = '\t';
  expect_rejected(r, ErrorCode::kReservedNotZero, "byte 2 is not printable");
  r = valid();
  r.text[kErrorTextBytes - 2] = 'z';  // after the terminating NUL
  expect_rejected(r, ErrorCode::kReservedNotZero, "after its terminating NUL");
}

TEST_CASE("the kernel library's exit statuses have names", "[isa][error_record]") {
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_BAD_ARG_BYTES), Catch::StartsWith("bad argument"));
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_BAD_DTYPE), Catch::StartsWith("bad dtype"));
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_BAD_OP), Catch::StartsWith("bad op"));
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_BAD_SHAPE), Catch::StartsWith("bad shape"));
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_NO_LOCAL_STORE), Catch::StartsWith("local store"));
  CHECK_THAT(kernel_status_name(MTIA_KSTATUS_NO_KERNEL), Catch::StartsWith("no kernel"));
  CHECK(kernel_status_name(MTIA_KSTATUS_OK) == nullptr);
  CHECK(kernel_status_name(7) == nullptr);
  CHECK(kernel_status_name(-1) == nullptr);
}
