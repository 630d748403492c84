// The queue error record (isa/error_record.h): its register is validated like the rings, and
// the firmware writes the reason of every failed packet there - before the completion record -
// when the queue has one, and nothing when it has none.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "cp_harness.h"
#include "mtia/isa/error_record.h"

using namespace mtia;
using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = mtia::isa::reg;

namespace {

constexpr uint64_t kErrorArea = 0x78000;  // queue q's record at + q * 1 KiB

uint64_t error_addr(uint32_t q) {
  return kErrorArea + q * 0x400;
}

// Configures queue q with an error record and enables it.
void setup_with_record(Harness& h, uint32_t q) {
  h.set_reg(reg::queue_reg(q, reg::kQueueErrorRecord), error_addr(q));
  h.setup_queue(q);
}

isa::ErrorRecord record_at(Harness& h, uint64_t addr) {
  auto r = isa::decode_error_record(h.platform.device.data() + addr, isa::kErrorRecordBytes);
  INFO("error record at " << addr << ": " << (r.ok() ? "" : r.error().reason));
  REQUIRE(r.ok());
  return r.value();
}

bool untouched(Harness& h, uint64_t addr) {
  const auto* p = h.platform.device.data() + addr;
  return std::all_of(p, p + isa::kErrorRecordBytes, [](uint8_t b) { return b == 0; });
}

}  // namespace

TEST_CASE("the error record register is read/write, validated on enable and kept on reset",
          "[firmware][registers][error_record]") {
  Harness h;
  const uint32_t q = 3;
  const uint64_t field = reg::queue_reg(q, reg::kQueueErrorRecord);
  const uint64_t control = reg::queue_reg(q, reg::kQueueControl);
  CHECK(h.qreg(q, reg::kQueueErrorRecord) == 0);  // none until the driver sets one
  h.set_reg(reg::queue_reg(q, reg::kQueueBase), ring_addr(q));
  h.set_reg(reg::queue_reg(q, reg::kQueueSize), 8);
  h.set_reg(reg::queue_reg(q, reg::kQueueCompletion), completion_addr(q));

  auto enable_fails_with = [&](uint64_t addr, const std::string& part) {
    h.set_reg(field, addr);
    auto r = h.cp.write_register(control, isa::kQueueEnable);
    REQUIRE_FALSE(r.ok());
    INFO("reason: " << r.error().reason);
    CHECK(r.error().code == isa::ErrorCode::kBadQueueConfig);
    CHECK_THAT(r.error().reason, Catch::Contains(part));
    CHECK(h.state(q) == isa::QueueState::kDisabled);
  };
  enable_fails_with(error_addr(q) + 8, "error record 0x78c08 is not 64-byte aligned");
  enable_fails_with(FakePlatform::kDeviceBytes - 256, "not inside device memory");
  enable_fails_with(~uint64_t{63}, "not inside device memory");
  enable_fails_with(ring_addr(q) + 0x400, "overlaps the packet or completion ring");
  enable_fails_with(completion_addr(q) + 0x200 - 64, "overlaps the packet or completion ring");
  h.platform.holes.push_back({error_addr(q) + 256, error_addr(q) + 260});
  enable_fails_with(error_addr(q), "not inside device memory");
  h.platform.holes.clear();

  h.set_reg(field, error_addr(q));
  h.set_reg(control, isa::kQueueEnable);
  CHECK(h.state(q) == isa::QueueState::kRunning);
  CHECK(h.qreg(q, reg::kQueueErrorRecord) == error_addr(q));
  // Frozen while enabled, kept across a reset.
  CHECK_FALSE(h.cp.write_register(field, 0).ok());
  h.set_reg(control, isa::kQueueReset);
  CHECK(h.qreg(q, reg::kQueueErrorRecord) == error_addr(q));
  h.set_reg(field, 0);  // 0: no record
  h.set_reg(control, isa::kQueueEnable);
  CHECK(h.state(q) == isa::QueueState::kRunning);
}

TEST_CASE("a malformed packet's reason goes to the error record before its completion",
          "[firmware][exec][error_record]") {
  Harness h;
  setup_with_record(h, 0);
  isa::NopPacket p = nop(7);
  p.header.version = 9;
  h.submit(0, nop(6));  // a success writes no error record
  h.run();
  CHECK(untouched(h, error_addr(0)));
  h.platform.device_writes.clear();
  h.submit(0, p);
  h.run();
  const isa::CompletionRecord c = h.record(0, 1);
  REQUIRE(c.status == static_cast<uint16_t>(isa::CompletionStatus::kError));
  const isa::ErrorRecord e = record_at(h, error_addr(0));
  CHECK(e.seq == 7);
  CHECK(e.index == 1);
  CHECK(e.opcode == static_cast<uint8_t>(isa::Opcode::kNop));
  CHECK(e.error == c.error);
  CHECK(e.flags == 0);
  INFO("text: " << isa::error_record_text(e));
  CHECK_THAT(std::string(isa::error_record_text(e)), Catch::Contains("version 9"));
  // The record first, then the completion: a driver that sees the failure finds the reason.
  const auto& w = h.platform.device_writes;
  const auto rec = std::find(w.begin(), w.end(), error_addr(0));
  const auto done = std::find(w.begin(), w.end(), completion_addr(0) + isa::kCompletionRecordBytes);
  REQUIRE(rec != w.end());
  REQUIRE(done != w.end());
  CHECK(rec < done);
}

TEST_CASE("a failed launch hands the PE model's message and exit status to the error record",
          "[firmware][exec][error_record][launch]") {
  Harness h;
  setup_with_record(h, 1);
  setup_with_record(h, 2);

  SECTION("a fault") {
    h.submit(1, launch(4, 0xABC00));
    REQUIRE(h.cp.step());
    h.cp.on_launch_done(isa::reject(isa::ErrorCode::kKernelFault,
                                    "PE 5 (row 0, col 5): misaligned access at pc 0x10040", 0x10040,
                                    5));
    const isa::ErrorRecord e = record_at(h, error_addr(1));
    CHECK(e.seq == 4);
    CHECK(e.error == static_cast<uint16_t>(isa::ErrorCode::kKernelFault));
    CHECK(e.flags == 0);
    CHECK(isa::error_record_text(e) == "PE 5 (row 0, col 5): misaligned access at pc 0x10040");
    CHECK(h.record(1, 0).error_arg0 == 0x10040);  // the completion keeps its numbers
    CHECK(h.record(1, 0).error_arg1 == 5);
  }
  SECTION("a non-zero exit status") {
    h.submit(2, launch(9, 0xABC00));
    REQUIRE(h.cp.step());
    h.cp.on_launch_done(isa::Failure{isa::ErrorCode::kKernelFault,
                                     "PE 0 (row 0, col 0) exited with status 2 at pc 0x10008",
                                     0x10008, 0, int64_t{2}});
    const isa::ErrorRecord e = record_at(h, error_addr(2));
    CHECK(e.seq == 9);
    CHECK(e.flags == isa::kErrorExitStatus);
    CHECK(e.exit_status == 2);
  }
  SECTION("a message longer than the record is cut and flagged") {
    h.submit(1, launch(5, 0xABC00));
    REQUIRE(h.cp.step());
    h.cp.on_launch_done(isa::reject(isa::ErrorCode::kWatchdog, std::string(2000, 'w'), 0x10030, 0));
    const isa::ErrorRecord e = record_at(h, error_addr(1));
    CHECK(e.flags == isa::kErrorTextTruncated);
    CHECK(isa::error_record_text(e).size() == isa::kErrorTextBytes - 1);
  }
  // Another queue's record is never touched.
  CHECK(untouched(h, error_addr(0)));
}

TEST_CASE("a queue without an error record fails as before and writes nothing else",
          "[firmware][exec][error_record]") {
  Harness h;
  h.setup_queue(0);
  h.platform.device_writes.clear();
  h.submit(0, signal(1, FakePlatform::kDeviceBytes, 1));  // outside device memory
  h.run();
  CHECK(h.record(0, 0).error == static_cast<uint16_t>(isa::ErrorCode::kDeviceAddressFault));
  // The failed signal's own write, then its completion record: nothing more.
  CHECK(h.platform.device_writes ==
        std::vector<uint64_t>{FakePlatform::kDeviceBytes, completion_addr(0)});
}

TEST_CASE("each failure after a reset gets its own record", "[firmware][exec][error_record]") {
  Harness h;
  setup_with_record(h, 0);
  h.submit(0, signal(3, FakePlatform::kDeviceBytes, 1));
  h.run();
  CHECK(record_at(h, error_addr(0)).seq == 3);
  CHECK(record_at(h, error_addr(0)).error ==
        static_cast<uint16_t>(isa::ErrorCode::kDeviceAddressFault));
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  isa::NopPacket p = nop(4);
  p.header.reserved = 1;
  h.submit(0, p);
  h.run();
  const isa::ErrorRecord e = record_at(h, error_addr(0));
  CHECK(e.seq == 4);
  CHECK(e.index == 0);  // indices restart with the reset; seq tells the records apart
  CHECK(e.error == static_cast<uint16_t>(isa::ErrorCode::kReservedNotZero));
}

TEST_CASE("the firmware logs a failed packet through its platform, and only at wanted levels",
          "[firmware][exec][log]") {
  Harness h;
  isa::NopPacket bad = nop(3);
  bad.header.version = 9;

  SECTION("warnings wanted: the failure is logged once, naming the queue and the reason") {
    h.platform.log_level = LogLevel::kWarn;
    h.setup_queue(0);  // enabling a queue logs at debug only: not wanted here
    CHECK(h.platform.logs.empty());
    h.submit(0, bad);
    h.run();
    REQUIRE(h.platform.logs.size() == 1);
    CHECK(h.platform.logs[0].first == LogLevel::kWarn);
    CHECK_THAT(h.platform.logs[0].second, Catch::Contains("queue 0 packet 0"));
    CHECK_THAT(h.platform.logs[0].second, Catch::Contains("version 9"));
    CHECK_THAT(h.platform.logs[0].second, Catch::Contains("queue halted until reset"));
  }
  SECTION("debug wanted: enabling a queue is logged too") {
    h.platform.log_level = LogLevel::kDebug;
    h.setup_queue(0);
    REQUIRE(h.platform.logs.size() == 1);
    CHECK(h.platform.logs[0].first == LogLevel::kDebug);
    CHECK_THAT(h.platform.logs[0].second, Catch::Contains("queue 0 enabled"));
  }
  SECTION("nothing wanted: the platform is asked, and nothing is logged") {
    h.platform.log_level = std::nullopt;
    h.setup_queue(0);
    h.submit(0, bad);
    h.run();
    CHECK(h.platform.log_queries >= 2);
    CHECK(h.platform.logs.empty());
  }
}
