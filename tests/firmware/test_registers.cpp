// Register interface of the command processor: identity, interrupts, queue configuration.
#include <catch2/catch.hpp>

#include <cstdio>

#include "cp_harness.h"
#include "mtia/isa/address_map.h"

using namespace mtia;
using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = mtia::isa::reg;

namespace {

void require_rejected(const isa::Result<bool>& r, isa::ErrorCode code, const std::string& part) {
  REQUIRE_FALSE(r.ok());
  INFO("reason: " << r.error().reason);
  CHECK(r.error().code == code);
  CHECK(contains(r.error().reason, part));
}

}  // namespace

TEST_CASE("identity registers report the configuration", "[firmware][registers]") {
  FirmwareConfig config = test_config(12);
  config.generation = 1;
  config.dram_bytes = 64ull << 30;
  config.sram_bytes = 128ull << 20;
  config.local_store_bytes = 128ull << 10;
  config.pe_rows = 4;
  config.pe_cols = 8;
  config.clock_hz = 800'000'000;
  config.preset_name = "mtia-v2";
  Harness h(3, config);

  CHECK(h.reg(reg::kDeviceId) == 0x4D54'4941'0000'0001ull);
  CHECK(h.reg(reg::kIsaVersion) == 1);
  CHECK(h.reg(reg::kFirmwareVer) == 0x0001'0003);  // 1.3: the sanitizer registers
  // The driver of a device it owns gets all of DRAM.
  CHECK(h.reg(reg::kDramWindowBase) == isa::kDramBase);
  CHECK(h.reg(reg::kDramWindowBytes) == 64ull << 30);
  CHECK(h.reg(reg::kNumQueues) == 12);
  CHECK(h.reg(reg::kDramBytes) == 0x10'0000'0000ull);
  CHECK(h.reg(reg::kSramBytes) == 0x800'0000ull);
  CHECK(h.reg(reg::kLocalStoreBytes) == 0x2'0000ull);
  CHECK(h.reg(reg::kPeGrid) == 0x0408);
  CHECK(h.reg(reg::kClockHz) == 800'000'000);
  CHECK(h.reg(reg::kNumDmaEngines) == 3);
  // "mtia-v2" = 6d 74 69 61 2d 76 32, little-endian, NUL padded.
  CHECK(h.reg(reg::kPresetName0) == 0x0032'762d'6169'746dull);
  CHECK(h.reg(reg::kPresetName1) == 0);
}

TEST_CASE("a long preset name is cut to 16 bytes", "[firmware][registers]") {
  FirmwareConfig config = test_config();
  config.preset_name = "abcdefghijklmnopqrstuvwxyz";
  Harness h(2, config);
  CHECK(h.reg(reg::kPresetName0) == 0x6867'6665'6463'6261ull);  // "abcdefgh"
  CHECK(h.reg(reg::kPresetName1) == 0x706f'6e6d'6c6b'6a69ull);  // "ijklmnop"
}

TEST_CASE("read-only registers reject writes and keep their value", "[firmware][registers]") {
  Harness h;
  for (uint64_t offset :
       {reg::kDeviceId, reg::kIsaVersion, reg::kFirmwareVer, reg::kNumQueues, reg::kDramBytes,
        reg::kSramBytes, reg::kLocalStoreBytes, reg::kPeGrid, reg::kClockHz, reg::kNumDmaEngines,
        reg::kPresetName0, reg::kPresetName1, reg::kDramWindowBase, reg::kDramWindowBytes}) {
    const uint64_t before = h.reg(offset);
    char hex[16];
    std::snprintf(hex, sizeof hex, "0x%04llx", static_cast<unsigned long long>(offset));
    require_rejected(h.cp.write_register(offset, 0x1234), isa::ErrorCode::kBadRegister, hex);
    CHECK(h.reg(offset) == before);
  }
  for (uint64_t field : {reg::kQueueHead, reg::kQueueState, reg::kQueueCompleted}) {
    require_rejected(h.cp.write_register(reg::queue_reg(3, field), 1), isa::ErrorCode::kBadRegister,
                     "read-only");
    CHECK(h.qreg(3, field) == 0);
  }
}

TEST_CASE("unmapped and misaligned offsets are rejected", "[firmware][registers]") {
  Harness h(2, test_config(4));
  const uint64_t bad[] = {
      0x0004,                   // misaligned
      reg::kMemcheckOp + 8,     // past the identity and sanitizer block
      0x0110,                   // past the interrupt registers
      0x0800,                   // between blocks
      reg::queue_reg(0, 0x60),  // past a queue block's registers
      reg::queue_reg(0, reg::kQueueTail) + 4,
      reg::queue_reg(4, reg::kQueueBase),  // queue 4 of 4 does not exist
      reg::queue_reg(15, reg::kQueueBase),
      isa::kBar0Bytes,  // outside BAR0
      ~uint64_t{7},
  };
  for (uint64_t offset : bad) {
    INFO("offset " << offset);
    auto read = h.cp.read_register(offset);
    REQUIRE_FALSE(read.ok());
    CHECK(read.error().code == isa::ErrorCode::kBadRegister);
    auto write = h.cp.write_register(offset, 0);
    REQUIRE_FALSE(write.ok());
    CHECK(write.error().code == isa::ErrorCode::kBadRegister);
  }
}

TEST_CASE("sanitizer registers need a platform that sanitizes", "[firmware][registers]") {
  Harness h(2, test_config(4));
  // The fake platform has no sanitizer: switching it on is refused, and the table too.
  auto on = h.cp.write_register(reg::kSanitize, isa::kSanitizeMemcheck);
  REQUIRE_FALSE(on.ok());
  CHECK_THAT(on.error().reason, Catch::Contains("this device has no sanitizer"));
  CHECK(h.reg(reg::kSanitize) == 0);
  auto unknown = h.cp.write_register(reg::kSanitize, 0x10);
  REQUIRE_FALSE(unknown.ok());
  CHECK_THAT(unknown.error().reason, Catch::Contains("are not implemented"));
  h.set_reg(reg::kMemcheckBase, 0x1000);
  h.set_reg(reg::kMemcheckBytes, 256);
  CHECK(h.reg(reg::kMemcheckBase) == 0x1000);
  CHECK(h.reg(reg::kMemcheckBytes) == 256);
  auto op = h.cp.write_register(reg::kMemcheckOp, static_cast<uint64_t>(isa::MemcheckOp::kLive));
  REQUIRE_FALSE(op.ok());
  CHECK_THAT(op.error().reason, Catch::Contains("memcheck and initcheck are off"));
  // Switching it off is always accepted.
  CHECK(h.cp.write_register(reg::kSanitize, 0).ok());
}

TEST_CASE("interrupt enable is read/write over existing queues", "[firmware][registers]") {
  Harness h(2, test_config(4));
  h.set_reg(reg::kIntEnable, 0b1010);
  CHECK(h.reg(reg::kIntEnable) == 0b1010);
  h.set_reg(reg::kIntEnable, ~uint64_t{0});
  CHECK(h.reg(reg::kIntEnable) == 0b1111);  // only 4 queues have interrupts
}

TEST_CASE("interrupt status is write-1-to-clear", "[firmware][registers]") {
  Harness h;
  for (uint32_t q = 0; q < 3; ++q) {
    h.setup_queue(q);
    h.submit(q, nop(q));
  }
  CHECK(h.run() == 3);
  CHECK(h.reg(reg::kIntStatus) == 0b111);
  h.set_reg(reg::kIntStatus, 0b101);
  CHECK(h.reg(reg::kIntStatus) == 0b010);
  h.set_reg(reg::kIntStatus, 0);  // writing zeros clears nothing
  CHECK(h.reg(reg::kIntStatus) == 0b010);
  h.set_reg(reg::kIntStatus, ~uint64_t{0});
  CHECK(h.reg(reg::kIntStatus) == 0);
}

TEST_CASE("queue configuration is validated on enable", "[firmware][registers][queue]") {
  Harness h;
  const uint32_t q = 2;
  const uint64_t base = reg::queue_reg(q, reg::kQueueBase);
  const uint64_t size = reg::queue_reg(q, reg::kQueueSize);
  const uint64_t completion = reg::queue_reg(q, reg::kQueueCompletion);
  const uint64_t control = reg::queue_reg(q, reg::kQueueControl);
  h.set_reg(base, ring_addr(q));
  h.set_reg(size, 8);
  h.set_reg(completion, completion_addr(q));

  auto enable_fails_with = [&](const std::string& part) {
    require_rejected(h.cp.write_register(control, isa::kQueueEnable),
                     isa::ErrorCode::kBadQueueConfig, part);
    CHECK(h.state(q) == isa::QueueState::kDisabled);
  };

  SECTION("size not a power of two, too small or too large") {
    for (uint64_t bad : {0ull, 1ull, 3ull, 6ull, 100ull, 131072ull, ~0ull}) {
      INFO("size " << bad);
      h.set_reg(size, bad);
      enable_fails_with("power of two");
    }
  }
  SECTION("the largest ring must still fit in device memory") {
    h.set_reg(size, 65536);  // 16 MiB of slots, the fake has 1 MiB
    enable_fails_with("not inside device memory");
  }
  SECTION("misaligned ring base") {
    h.set_reg(base, ring_addr(q) + 0x80);
    enable_fails_with("256-byte aligned");
  }
  SECTION("misaligned completion ring") {
    h.set_reg(completion, completion_addr(q) + 0x20);
    enable_fails_with("64-byte aligned");
  }
  SECTION("ring outside device memory") {
    h.set_reg(base, FakePlatform::kDeviceBytes - 4 * isa::kPacketSlotBytes);  // 8 slots needed
    enable_fails_with("ring [0xffc00, 0x100400) is not inside device memory");
  }
  SECTION("ring base far outside device memory") {
    h.set_reg(base, 0x1'0000'0000'0000ull);
    enable_fails_with("not inside device memory");
  }
  SECTION("ring that wraps the address space") {
    h.set_reg(base, ~uint64_t{0} - 0xff);
    enable_fails_with("address space");
  }
  SECTION("completion ring outside device memory") {
    h.set_reg(completion, FakePlatform::kDeviceBytes);
    enable_fails_with("completion ring");
  }
  SECTION("a ring over a hole in the address map") {
    // 64 slots = 16 KiB; only its third page is missing, both ends are backed.
    h.set_reg(size, 64);
    h.platform.holes.push_back({ring_addr(q) + 0x2000, ring_addr(q) + 0x3000});
    enable_fails_with("not inside device memory");
  }
  SECTION("packet ring and completion ring overlap") {
    h.set_reg(completion, ring_addr(q) + 0x100);
    enable_fails_with("overlap");
  }
  SECTION("a valid configuration enables the queue") {
    h.set_reg(control, isa::kQueueEnable);
    CHECK(h.state(q) == isa::QueueState::kRunning);
    h.set_reg(control, isa::kQueueEnable);  // enabling again changes nothing
    CHECK(h.state(q) == isa::QueueState::kRunning);
    CHECK(h.qreg(q, reg::kQueueBase) == ring_addr(q));
    CHECK(h.qreg(q, reg::kQueueSize) == 8);
    CHECK(h.qreg(q, reg::kQueueCompletion) == completion_addr(q));
  }
}

TEST_CASE("queue configuration is frozen while the queue is enabled",
          "[firmware][registers][queue]") {
  Harness h;
  h.setup_queue(1);
  for (uint64_t field :
       {reg::kQueueBase, reg::kQueueSize, reg::kQueueCompletion, reg::kQueueErrorRecord}) {
    const uint64_t before = h.qreg(1, field);
    require_rejected(h.cp.write_register(reg::queue_reg(1, field), 0x1000),
                     isa::ErrorCode::kBadQueueConfig, "reset the queue first");
    CHECK(h.qreg(1, field) == before);
  }
  // Still frozen in the error state; a reset makes it writable again.
  h.submit(1, signal(1, FakePlatform::kDeviceBytes, 1));  // fails: outside memory
  h.run();
  REQUIRE(h.state(1) == isa::QueueState::kError);
  CHECK_FALSE(h.cp.write_register(reg::queue_reg(1, reg::kQueueBase), 0).ok());
  h.set_reg(reg::queue_reg(1, reg::kQueueControl), isa::kQueueReset);
  h.set_reg(reg::queue_reg(1, reg::kQueueBase), ring_addr(5));
  CHECK(h.qreg(1, reg::kQueueBase) == ring_addr(5));
}

TEST_CASE("queue control rejects unknown bits and enabling a failed queue",
          "[firmware][registers][queue]") {
  Harness h;
  h.setup_queue(0);
  require_rejected(h.cp.write_register(reg::queue_reg(0, reg::kQueueControl), 0x4),
                   isa::ErrorCode::kReservedNotZero, "unknown bits");
  CHECK(h.qreg(0, reg::kQueueControl) == 0);  // write-only: reads as zero

  h.submit(0, signal(1, FakePlatform::kDeviceBytes, 1));  // fails: outside memory
  h.run();
  REQUIRE(h.state(0) == isa::QueueState::kError);
  require_rejected(h.cp.write_register(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable),
                   isa::ErrorCode::kBadQueueConfig, "reset it first");
  CHECK(h.state(0) == isa::QueueState::kError);
  // Reset and enable in one write: the reset happens first.
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset | isa::kQueueEnable);
  CHECK(h.state(0) == isa::QueueState::kRunning);
  CHECK(h.qreg(0, reg::kQueueTail) == 0);
}

TEST_CASE("the doorbell never allows more outstanding packets than slots",
          "[firmware][registers][queue]") {
  Harness h;
  h.setup_queue(0, 4);
  const uint64_t tail = reg::queue_reg(0, reg::kQueueTail);
  for (uint64_t i = 0; i < 4; ++i) h.write_slot(0, i, nop(100 + i));

  require_rejected(h.cp.write_register(tail, 5), isa::ErrorCode::kBadQueueConfig,
                   "ring holds only 4");
  CHECK(h.qreg(0, reg::kQueueTail) == 0);
  h.set_reg(tail, 4);  // exactly full is fine
  require_rejected(h.cp.write_register(tail, 3), isa::ErrorCode::kBadQueueConfig, "only grows");

  // Two completions free two slots.
  REQUIRE(h.cp.step());
  REQUIRE(h.cp.step());
  CHECK(h.qreg(0, reg::kQueueCompleted) == 2);
  // Slots 0 and 1 are free again; packets 4 and 5 go there.
  h.write_slot(0, 4, nop(104));
  h.write_slot(0, 5, nop(105));
  h.set_reg(tail, 6);
  require_rejected(h.cp.write_register(tail, 7), isa::ErrorCode::kBadQueueConfig,
                   "would leave 5 packets outstanding");
  CHECK(h.run() == 4);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 6);
  CHECK(h.record(0, 5).seq == 105);  // slot 1 of the ring, second lap
}

TEST_CASE("a doorbell on an unconfigured queue is rejected", "[firmware][registers][queue]") {
  Harness h;
  auto r = h.cp.write_register(reg::queue_reg(0, reg::kQueueTail), 1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == isa::ErrorCode::kBadQueueConfig);
}

TEST_CASE("firmware configuration errors are reported at construction", "[firmware]") {
  FakePlatform platform;
  CHECK_THROWS_WITH(CommandProcessor(platform, test_config(0)), Catch::Contains("num_queues"));
  CHECK_THROWS_WITH(CommandProcessor(platform, test_config(17)), Catch::Contains("num_queues"));
  FakePlatform no_dma(0);
  CHECK_THROWS_WITH(CommandProcessor(no_dma, test_config()), Catch::Contains("0 DMA engines"));
  CHECK_NOTHROW(CommandProcessor(platform, test_config(16)));
}
