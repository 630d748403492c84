// Packet execution: NOP, signal, wait, fill, copy; ordering, fairness, DMA engine sharing,
// errors confined to their queue, reset, and interrupts.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cp_harness.h"

using namespace mtia;
using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = mtia::isa::reg;

namespace {

constexpr auto kOk = static_cast<uint16_t>(isa::CompletionStatus::kOk);
constexpr auto kFailed = static_cast<uint16_t>(isa::CompletionStatus::kError);

uint8_t op(isa::Opcode o) {
  return static_cast<uint8_t>(o);
}
uint16_t code(isa::ErrorCode e) {
  return static_cast<uint16_t>(e);
}

}  // namespace

TEST_CASE("a NOP completes at once with its sequence number and time", "[firmware][exec]") {
  Harness h;
  h.setup_queue(0);
  h.platform.time_ps = 5000;
  h.submit(0, nop(42));
  CHECK(h.cp.step());
  CHECK_FALSE(h.cp.step());

  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.seq == 42);
  CHECK(r.index == 0);
  CHECK(r.start_ps == 5000);
  CHECK(r.end_ps == 5000);
  CHECK(r.status == kOk);
  CHECK(r.error == code(isa::ErrorCode::kNone));
  CHECK(r.opcode == op(isa::Opcode::kNop));
  CHECK(r.error_arg0 == 0);
  CHECK(r.error_arg1 == 0);
  CHECK(h.qreg(0, reg::kQueueHead) == 1);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
  CHECK(h.reg(reg::kIntStatus) == 0b1);
  CHECK(h.platform.interrupts.empty());  // not flagged, not enabled
  CHECK(h.cp.stats().packets_completed == 1);
  CHECK(h.cp.stats().packets_failed == 0);
}

TEST_CASE("nothing runs on a disabled queue", "[firmware][exec]") {
  Harness h;
  CHECK_FALSE(h.cp.step());
  h.set_reg(reg::queue_reg(0, reg::kQueueBase), ring_addr(0));
  h.set_reg(reg::queue_reg(0, reg::kQueueSize), 8);
  h.set_reg(reg::queue_reg(0, reg::kQueueCompletion), completion_addr(0));
  h.write_slot(0, 0, nop(1));
  h.set_reg(reg::queue_reg(0, reg::kQueueTail), 1);  // packets may be queued before enabling
  CHECK_FALSE(h.cp.step());
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  CHECK(h.cp.step());
  CHECK(h.record(0, 0).seq == 1);
}

TEST_CASE("signal writes its fence to device or host memory", "[firmware][exec]") {
  Harness h;
  h.setup_queue(0);
  h.submit(0, signal(1, kFenceArea + 8, 0x1122'3344'5566'7788));
  h.submit(0, signal(2, FakePlatform::kHostBase + 0x100, 77, isa::AddressSpace::kHost));
  CHECK(h.run() == 2);
  CHECK(h.platform.read_u64(kFenceArea + 8) == 0x1122'3344'5566'7788);
  CHECK(h.platform.read_u64(kFenceArea) == 0);  // neighbours untouched
  uint64_t host_value = 0;
  std::memcpy(&host_value, h.platform.host.data() + 0x100, 8);
  CHECK(host_value == 77);
  CHECK(h.record(0, 0).opcode == op(isa::Opcode::kSignal));
  CHECK(h.record(0, 1).status == kOk);
  CHECK(h.record(0, 1).seq == 2);
}

TEST_CASE("fill runs on a DMA engine and completes when the engine reports",
          "[firmware][exec][dma]") {
  Harness h;
  h.setup_queue(0);
  // 3 rows of 4 words; rows 64 bytes apart, words 8 bytes apart (every other word).
  const isa::FillPacket packet = fill(9, {3, 4}, 4, 0xDEADBEEF, region(kDataArea, {64, 8}));
  h.platform.time_ps = 1000;
  h.submit(0, packet);
  CHECK(h.cp.step());
  CHECK_FALSE(h.cp.step());  // the engine is working; nothing else to do

  REQUIRE(h.platform.started.size() == 1);
  const auto& started = h.platform.started[0];
  CHECK(started.engine == 0);
  REQUIRE(started.job.kind == DmaJob::Kind::kFill);
  CHECK(std::memcmp(&started.job.fill, &packet, sizeof packet) == 0);
  CHECK(h.qreg(0, reg::kQueueHead) == 1);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 0);
  CHECK(h.cp.stats().dma_jobs_started == 1);

  h.platform.time_ps = 9000;
  h.finish_dma(0);
  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.seq == 9);
  CHECK(r.status == kOk);
  CHECK(r.opcode == op(isa::Opcode::kFill));
  CHECK(r.start_ps == 1000);
  CHECK(r.end_ps == 9000);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 1);

  // Reference: exactly the 12 addressed words hold the pattern.
  for (uint64_t off = 0; off < 256; off += 4) {
    uint32_t word = 0;
    std::memcpy(&word, h.platform.device.data() + kDataArea + off, 4);
    const bool addressed = off / 64 < 3 && off % 64 < 32 && off % 8 == 0;
    INFO("offset " << off);
    CHECK(word == (addressed ? 0xDEADBEEFu : 0u));
  }
}

TEST_CASE("copy gathers a transposed host matrix into device memory", "[firmware][exec][dma]") {
  Harness h;
  h.setup_queue(0);
  constexpr int kRows = 4, kCols = 6;
  std::vector<uint16_t> src(kRows * kCols);
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) src[i * kCols + j] = static_cast<uint16_t>(i * 100 + j);
  }
  std::memcpy(h.platform.host.data(), src.data(), src.size() * 2);
  // Destination is the 6x4 transpose, contiguous: walk source columns (2 bytes apart) outer
  // and source rows (12 bytes apart) inner.
  h.submit(0, copy(3, {kCols, kRows}, 2,
                   region(FakePlatform::kHostBase, {2, kCols * 2}, isa::AddressSpace::kHost),
                   region(kDataArea, {kRows * 2, 2})));
  CHECK(h.run() == 1);
  REQUIRE(h.platform.started.size() == 1);
  CHECK(h.platform.started[0].job.kind == DmaJob::Kind::kCopy);
  h.finish_dma(0);
  CHECK(h.record(0, 0).status == kOk);
  CHECK(h.record(0, 0).opcode == op(isa::Opcode::kDmaCopy));
  for (int i = 0; i < kRows; ++i) {
    for (int j = 0; j < kCols; ++j) {
      uint16_t got = 0;
      std::memcpy(&got, h.platform.device.data() + kDataArea + (j * kRows + i) * 2, 2);
      INFO("element " << i << "," << j);
      CHECK(got == src[i * kCols + j]);
    }
  }
}

TEST_CASE("packets of one queue run in order, one at a time", "[firmware][exec]") {
  Harness h;
  h.setup_queue(0);
  h.platform.time_ps = 100;
  h.submit(0, fill_bytes(10, kDataArea, 64, 0x11));
  h.submit(0, nop(11));
  h.submit(0, signal(12, kFenceArea, 7));
  h.submit(0, fill_bytes(13, kDataArea + 64, 64, 0x22));
  h.submit(0, nop(14));

  CHECK(h.run() == 1);  // only the first fill; the rest wait behind it
  CHECK(h.qreg(0, reg::kQueueHead) == 1);
  CHECK(h.platform.read_u64(kFenceArea) == 0);
  CHECK(h.platform.started.size() == 1);  // a free engine does not start the second fill

  h.platform.time_ps = 200;
  h.finish_dma(0);
  CHECK(h.run() == 3);  // nop, signal, and the second fill dispatched
  CHECK(h.platform.read_u64(kFenceArea) == 7);
  REQUIRE(h.platform.started.size() == 2);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 3);
  h.platform.time_ps = 300;
  h.finish_dma(1);
  CHECK(h.run() == 1);

  const uint64_t want_start[] = {100, 200, 200, 200, 300};
  const uint64_t want_end[] = {200, 200, 200, 300, 300};
  for (uint64_t i = 0; i < 5; ++i) {
    const isa::CompletionRecord r = h.record(0, i);
    INFO("packet " << i);
    CHECK(r.index == i);
    CHECK(r.seq == 10 + i);
    CHECK(r.start_ps == want_start[i]);
    CHECK(r.end_ps == want_end[i]);
    CHECK(r.status == kOk);
  }
  CHECK(h.platform.device[kDataArea + 63] == 0x11);
  CHECK(h.platform.device[kDataArea + 64] == 0x22);
}

TEST_CASE("queues are served round-robin", "[firmware][exec][fairness]") {
  Harness h;
  auto served_order = [&](int steps) {
    std::vector<uint32_t> order;
    std::vector<uint64_t> before(8);
    for (int s = 0; s < steps; ++s) {
      for (uint32_t q = 0; q < 8; ++q)
        before[q] = h.cp.read_register(reg::queue_reg(q, reg::kQueueCompleted)).value();
      REQUIRE(h.cp.step());
      for (uint32_t q = 0; q < 8; ++q) {
        if (h.qreg(q, reg::kQueueCompleted) != before[q]) order.push_back(q);
      }
    }
    return order;
  };

  SECTION("two busy queues alternate") {
    h.setup_queue(0);
    h.setup_queue(1);
    for (uint64_t i = 0; i < 6; ++i) {
      h.submit(0, nop(i));
      h.submit(1, nop(100 + i));
    }
    CHECK(served_order(12) == std::vector<uint32_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1});
    CHECK_FALSE(h.cp.step());
  }
  SECTION("idle queues are skipped") {
    for (uint32_t q : {0u, 1u, 2u}) h.setup_queue(q);
    for (uint64_t i = 0; i < 3; ++i) {
      h.submit(0, nop(i));
      h.submit(2, nop(i));
    }
    CHECK(served_order(6) == std::vector<uint32_t>{0, 2, 0, 2, 0, 2});
  }
  SECTION("every one of 8 queues gets a turn per round") {
    for (uint32_t q = 0; q < 8; ++q) {
      h.setup_queue(q);
      h.submit(q, nop(1));
      h.submit(q, nop(2));
    }
    CHECK(served_order(16) ==
          std::vector<uint32_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7});
  }
  SECTION("a queue that becomes ready later does not jump the line") {
    h.setup_queue(0);
    h.setup_queue(1);
    for (uint64_t i = 0; i < 4; ++i) h.submit(0, nop(i));
    CHECK(served_order(2) == std::vector<uint32_t>{0, 0});
    h.submit(1, nop(100));
    h.submit(1, nop(101));
    CHECK(served_order(4) == std::vector<uint32_t>{1, 0, 1, 0});
  }
}

TEST_CASE("all 16 queues of a 16-queue firmware are served", "[firmware][exec]") {
  Harness h(2, test_config(16));
  for (uint32_t q = 0; q < 16; ++q) {
    h.set_reg(reg::queue_reg(q, reg::kQueueBase), kDataArea + q * 0x1000);  // 16 rings
    h.set_reg(reg::queue_reg(q, reg::kQueueSize), 2);
    h.set_reg(reg::queue_reg(q, reg::kQueueCompletion), completion_addr(q));
    h.set_reg(reg::queue_reg(q, reg::kQueueControl), isa::kQueueEnable);
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(nop(q), slot);
    std::memcpy(h.platform.device.data() + kDataArea + q * 0x1000, slot, sizeof slot);
    h.set_reg(reg::queue_reg(q, reg::kQueueTail), 1);
  }
  CHECK(h.run() == 16);
  for (uint32_t q = 0; q < 16; ++q) CHECK(h.record(q, 0).seq == q);
  CHECK(h.reg(reg::kIntStatus) == 0xffff);
}

TEST_CASE("DMA packets wait for a free engine without blocking other work",
          "[firmware][exec][dma]") {
  Harness h(2);
  for (uint32_t q = 0; q < 4; ++q) h.setup_queue(q);
  h.submit(0, fill_bytes(1, kDataArea, 32, 0xA0));
  h.submit(1, fill_bytes(2, kDataArea + 32, 32, 0xA1));
  h.submit(2, fill_bytes(3, kDataArea + 64, 32, 0xA2));
  h.submit(3, nop(4));

  CHECK(h.run() == 3);  // q0 -> engine 0, q1 -> engine 1, q2 has no engine, q3's NOP runs
  REQUIRE(h.platform.started.size() == 2);
  CHECK(h.platform.started[0].engine == 0);
  CHECK(h.platform.started[1].engine == 1);
  CHECK(h.qreg(2, reg::kQueueHead) == 0);  // left in the ring, not fetched
  CHECK(h.qreg(3, reg::kQueueCompleted) == 1);

  h.platform.time_ps = 500;
  h.finish_dma(1);  // q1's engine frees up first
  CHECK(h.qreg(1, reg::kQueueCompleted) == 1);
  CHECK(h.run() == 1);
  REQUIRE(h.platform.started.size() == 3);
  CHECK(h.platform.started[2].engine == 1);
  CHECK(h.platform.started[2].job.fill.header.seq == 3);
  CHECK(h.qreg(2, reg::kQueueHead) == 1);

  h.platform.time_ps = 800;
  h.finish_dma(0);
  h.finish_dma(2);
  CHECK_FALSE(h.cp.step());
  CHECK(h.record(0, 0).end_ps == 800);
  CHECK(h.record(2, 0).start_ps == 500);  // started when it got an engine
  CHECK(h.record(2, 0).end_ps == 800);
  for (uint32_t q = 0; q < 3; ++q) {
    CHECK(h.platform.device[kDataArea + q * 32] == 0xA0 + q);
    CHECK(h.platform.device[kDataArea + q * 32 + 31] == 0xA0 + q);
  }
  CHECK(h.cp.stats().dma_jobs_started == 3);
  CHECK(h.cp.stats().packets_completed == 4);
}

TEST_CASE("an error stops only its own queue", "[firmware][exec][errors]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  h.set_reg(reg::kIntEnable, 0b11);

  isa::ErrorCode want = isa::ErrorCode::kNone;
  uint64_t want_seq = 0, want_arg0 = 0, want_arg1 = 0;
  uint8_t want_opcode = 0;

  SECTION("a packet of another version") {
    isa::NopPacket p = nop(7);
    p.header.version = 9;
    h.submit(0, p);
    want = isa::ErrorCode::kBadVersion;
    want_seq = 7;
    want_opcode = op(isa::Opcode::kNop);
  }
  SECTION("a packet with unknown flag bits") {
    h.submit(0, nop(8, 0x8));
    want = isa::ErrorCode::kReservedNotZero;
    want_seq = 8;
    want_opcode = op(isa::Opcode::kNop);
  }
  SECTION("a slot the driver never wrote") {
    h.set_reg(reg::queue_reg(0, reg::kQueueTail), 1);
    want = isa::ErrorCode::kBadOpcode;
  }
  SECTION("an unknown opcode") {
    uint8_t slot[isa::kPacketSlotBytes] = {};
    const isa::PacketHeader bad{0xEE, isa::kPacketVersion, 0, 0, 31};
    std::memcpy(slot, &bad, sizeof bad);
    h.write_raw_slot(0, 0, slot);
    h.set_reg(reg::queue_reg(0, reg::kQueueTail), 1);
    want = isa::ErrorCode::kBadOpcode;
    want_seq = 31;
    want_opcode = 0xEE;
  }
  SECTION("a signal outside device memory") {
    h.submit(0, signal(5, FakePlatform::kDeviceBytes, 1));
    want = isa::ErrorCode::kDeviceAddressFault;
    want_seq = 5;
    want_opcode = op(isa::Opcode::kSignal);
    want_arg0 = FakePlatform::kDeviceBytes;
    want_arg1 = 8;
  }
  SECTION("a signal to unregistered host memory") {
    h.submit(0, signal(6, 0x1000, 1, isa::AddressSpace::kHost));
    want = isa::ErrorCode::kHostAddressFault;
    want_seq = 6;
    want_opcode = op(isa::Opcode::kSignal);
    want_arg0 = 0x1000;
    want_arg1 = 8;
  }
  SECTION("a wait on a fence outside device memory") {
    h.submit(0, wait(12, 0x10'0000'0000ull, 1));
    want = isa::ErrorCode::kDeviceAddressFault;
    want_seq = 12;
    want_opcode = op(isa::Opcode::kWait);
    want_arg0 = 0x10'0000'0000ull;
    want_arg1 = 8;
  }
  SECTION("a kernel launch whose PE faults") {
    h.submit(0, launch(3, 0xABC00));
    REQUIRE(h.cp.step());
    REQUIRE(h.platform.launches.size() == 1);
    h.cp.on_launch_done(isa::reject(isa::ErrorCode::kKernelFault, "PE 5: a fault", 0x10040, 5));
    want = isa::ErrorCode::kKernelFault;
    want_seq = 3;
    want_opcode = op(isa::Opcode::kLaunch);
    want_arg0 = 0x10040;  // pc
    want_arg1 = 5;        // PE
  }
  SECTION("a kernel launch whose grid does not fit the chip") {
    isa::LaunchPacket p = launch(8, 0xABC00);
    p.grid_rows = 8;  // valid for the packet format, but the chip below has only 4 columns
    p.grid_cols = 8;
    Harness small(2, [] {
      FirmwareConfig c = test_config();
      c.pe_cols = 4;
      return c;
    }());
    small.setup_queue(0);
    small.submit(0, p);
    small.run();
    CHECK(small.platform.launches.empty());
    const isa::CompletionRecord r = small.record(0, 0);
    CHECK(r.error == code(isa::ErrorCode::kBadDims));
    CHECK(r.error_arg0 == 8);
    CHECK(r.error_arg1 == 8);
    h.submit(0, launch(3, 0xABC00));  // the shared checks below use the main harness
    REQUIRE(h.cp.step());
    h.cp.on_launch_done(isa::reject(isa::ErrorCode::kWatchdog, "PE 0: watchdog", 0x10100, 0));
    want = isa::ErrorCode::kWatchdog;
    want_seq = 3;
    want_opcode = op(isa::Opcode::kLaunch);
    want_arg0 = 0x10100;
  }
  SECTION("a DMA the engine reports as faulting") {
    h.submit(0, fill_bytes(4, FakePlatform::kDeviceBytes - 8, 16, 0xFF));  // runs off the end
    REQUIRE(h.cp.step());
    REQUIRE(h.platform.started.size() == 1);
    h.finish_dma(0);
    want = isa::ErrorCode::kDeviceAddressFault;
    want_seq = 4;
    want_opcode = op(isa::Opcode::kFill);
    want_arg0 = FakePlatform::kDeviceBytes - 8;
    want_arg1 = 16;
  }
  SECTION("a DMA fault with the engine's own details") {
    h.submit(0, copy(2, {4}, 4, region(kDataArea, {4}), region(kDataArea + 64, {4})));
    REQUIRE(h.cp.step());
    h.cp.on_dma_done(h.platform.started.at(0).engine,
                     isa::reject(isa::ErrorCode::kHostAddressFault, {}, 0xBAD000, 4096));
    want = isa::ErrorCode::kHostAddressFault;
    want_seq = 2;
    want_opcode = op(isa::Opcode::kDmaCopy);
    want_arg0 = 0xBAD000;
    want_arg1 = 4096;
  }

  h.submit(0, nop(99));  // behind the failed packet: must never run
  for (uint64_t i = 0; i < 3; ++i) h.submit(1, nop(200 + i));
  h.run();

  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.status == kFailed);
  CHECK(r.error == code(want));
  CHECK(r.seq == want_seq);
  CHECK(r.index == 0);
  CHECK(r.opcode == want_opcode);
  CHECK(r.error_arg0 == want_arg0);
  CHECK(r.error_arg1 == want_arg1);
  CHECK(h.state(0) == isa::QueueState::kError);
  CHECK(h.qreg(0, reg::kQueueHead) == 1);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
  CHECK(h.cp.stats().packets_failed == 1);
  // Failures interrupt even without kPacketInterrupt; queue 1's plain NOPs do not.
  CHECK(h.platform.interrupts == std::vector<uint64_t>{0b01});

  CHECK(h.state(1) == isa::QueueState::kRunning);
  CHECK(h.qreg(1, reg::kQueueCompleted) == 3);
  for (uint64_t i = 0; i < 3; ++i) CHECK(h.record(1, i).status == kOk);
  // Queue 1 keeps working after the failure, too.
  h.submit(1, nop(300));
  CHECK(h.run() == 1);
  CHECK(h.record(1, 3).seq == 300);
}

TEST_CASE("reset brings a failed queue back", "[firmware][exec][reset]") {
  Harness h;
  h.setup_queue(0);
  h.submit(0, signal(1, FakePlatform::kDeviceBytes, 1));  // fails: outside memory
  h.submit(0, nop(2));
  h.run();
  REQUIRE(h.state(0) == isa::QueueState::kError);
  REQUIRE(h.reg(reg::kIntStatus) == 0b1);

  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  CHECK(h.state(0) == isa::QueueState::kDisabled);
  CHECK(h.qreg(0, reg::kQueueHead) == 0);
  CHECK(h.qreg(0, reg::kQueueTail) == 0);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 0);
  CHECK(h.reg(reg::kIntStatus) == 0);
  CHECK(h.qreg(0, reg::kQueueBase) == ring_addr(0));  // configuration survives a reset
  CHECK(h.qreg(0, reg::kQueueSize) == 8);

  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  h.platform.time_ps = 70;
  h.submit(0, nop(5));
  CHECK(h.run() == 1);
  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.status == kOk);
  CHECK(r.seq == 5);
  CHECK(r.end_ps == 70);
}

TEST_CASE("reset drops packets that were not fetched", "[firmware][exec][reset]") {
  Harness h;
  h.setup_queue(0);
  for (uint64_t i = 0; i < 3; ++i) h.submit(0, signal(i, kFenceArea, 100 + i));
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset | isa::kQueueEnable);
  CHECK_FALSE(h.cp.step());
  CHECK(h.platform.read_u64(kFenceArea) == 0);
}

TEST_CASE("reset during a DMA drops the late completion", "[firmware][exec][reset][dma]") {
  Harness h(2);
  h.setup_queue(0);
  h.setup_queue(1);
  h.submit(0, fill_bytes(1, kDataArea, 16, 0x11));
  REQUIRE(h.cp.step());
  REQUIRE(h.platform.started.size() == 1);

  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset | isa::kQueueEnable);
  h.submit(0, fill_bytes(2, kDataArea + 16, 16, 0x22));
  REQUIRE(h.cp.step());
  REQUIRE(h.platform.started.size() == 2);
  CHECK(h.platform.started[1].engine == 1);  // engine 0 is still busy with the old job

  h.finish_dma(0);  // the old job ends: nobody owns it any more
  CHECK(h.qreg(0, reg::kQueueCompleted) == 0);
  CHECK(h.state(0) == isa::QueueState::kRunning);
  const uint8_t* slot0 = h.platform.device.data() + completion_addr(0);
  CHECK(std::all_of(slot0, slot0 + isa::kCompletionRecordBytes, [](uint8_t b) { return b == 0; }));

  // Engine 0 is free again for anyone.
  h.submit(1, fill_bytes(3, kDataArea + 32, 16, 0x33));
  REQUIRE(h.cp.step());
  REQUIRE(h.platform.started.size() == 3);
  CHECK(h.platform.started[2].engine == 0);

  h.finish_dma(1);
  h.finish_dma(2);
  CHECK(h.record(0, 0).seq == 2);
  CHECK(h.record(0, 0).status == kOk);
  CHECK(h.record(1, 0).seq == 3);

  // Completions for idle or unknown engines are ignored.
  h.cp.on_dma_done(0, {});
  h.cp.on_dma_done(99, {});
  CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
  CHECK(h.qreg(1, reg::kQueueCompleted) == 1);
}

TEST_CASE("a wait holds its queue until another queue signals", "[firmware][exec][wait]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  const uint64_t fence = kFenceArea + 0x40;

  SECTION("greater-or-equal") {
    h.platform.time_ps = 100;
    h.submit(0, wait(1, fence, 2));
    h.submit(0, nop(2));
    CHECK(h.run() == 1);  // the wait is fetched and held
    CHECK_FALSE(h.cp.step());
    CHECK(h.qreg(0, reg::kQueueHead) == 1);
    CHECK(h.qreg(0, reg::kQueueCompleted) == 0);

    h.platform.time_ps = 200;
    h.submit(1, signal(10, fence, 1));
    CHECK(h.run() == 1);  // not yet: 1 < 2
    CHECK(h.qreg(0, reg::kQueueCompleted) == 0);

    h.platform.time_ps = 300;
    h.submit(1, signal(11, fence, 2));
    CHECK(h.run() == 3);  // the signal, the released wait, the NOP behind it
    const isa::CompletionRecord r = h.record(0, 0);
    CHECK(r.status == kOk);
    CHECK(r.opcode == op(isa::Opcode::kWait));
    CHECK(r.start_ps == 100);
    CHECK(r.end_ps == 300);
    CHECK(h.record(0, 1).seq == 2);
  }
  SECTION("equal") {
    h.submit(0, wait(1, fence, 5, isa::WaitCondition::kEqual));
    h.run();
    h.submit(1, signal(10, fence, 7));
    h.run();
    CHECK(h.qreg(0, reg::kQueueCompleted) == 0);  // 7 >= 5 but not equal
    h.submit(1, signal(11, fence, 5));
    h.run();
    CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
  }
  SECTION("a fence already reached completes at once") {
    h.platform.write_u64(fence, 10);
    h.platform.time_ps = 40;
    h.submit(0, wait(1, fence, 3));
    CHECK(h.cp.step());
    CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
    CHECK(h.record(0, 0).start_ps == 40);
    CHECK(h.record(0, 0).end_ps == 40);
  }
  SECTION("a fence written by a DMA") {
    h.submit(0, wait(1, fence, 0x0101010101010101ull));
    h.submit(1, fill_bytes(2, fence, 8, 0x01));
    CHECK(h.run() == 2);
    CHECK(h.qreg(0, reg::kQueueCompleted) == 0);
    h.finish_dma(0);
    CHECK(h.run() == 1);
    CHECK(h.qreg(0, reg::kQueueCompleted) == 1);
  }
}

TEST_CASE("interrupts follow the packet flag, failures and the enable mask",
          "[firmware][exec][irq]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  h.set_reg(reg::kIntEnable, 0b01);  // only queue 0

  h.submit(0, nop(1));
  h.run();
  CHECK(h.platform.interrupts.empty());  // completed, but not flagged

  h.submit(0, nop(2, isa::kPacketInterrupt));
  h.run();
  CHECK(h.platform.interrupts == std::vector<uint64_t>{0b01});

  h.submit(1, nop(3, isa::kPacketInterrupt));
  h.run();
  CHECK(h.platform.interrupts.size() == 1);  // queue 1 is not enabled...
  CHECK(h.reg(reg::kIntStatus) == 0b11);     // ...but its status bit is set

  h.submit(0, fill(4, {8}, 1, 0x5A, region(kDataArea, {1}), isa::kPacketInterrupt));
  h.run();
  CHECK(h.platform.interrupts.size() == 1);  // not at dispatch
  h.finish_dma(0);
  CHECK(h.platform.interrupts.size() == 2);  // at completion

  h.submit(0, signal(5, FakePlatform::kDeviceBytes, 1));  // fails without the flag
  h.run();
  CHECK(h.platform.interrupts == std::vector<uint64_t>{0b01, 0b01, 0b01});
  CHECK(h.cp.stats().interrupts_raised == 3);
}

TEST_CASE("memory that disappears under a running queue stops that queue",
          "[firmware][exec][errors]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  h.set_reg(reg::kIntEnable, 0b11);

  SECTION("the completion ring") {
    h.platform.holes.push_back({completion_addr(0), completion_addr(0) + 64});
    h.submit(0, nop(1));
    h.submit(1, nop(2));
    h.run();
    CHECK(h.state(0) == isa::QueueState::kError);
    CHECK(h.qreg(0, reg::kQueueCompleted) == 0);  // no record was written
    CHECK(h.cp.stats().packets_failed == 1);
    CHECK(h.platform.interrupts == std::vector<uint64_t>{0b01});
  }
  SECTION("the packet ring") {
    h.submit(0, nop(1));
    h.submit(1, nop(2));
    h.platform.holes.push_back({ring_addr(0), ring_addr(0) + 256});
    h.run();
    CHECK(h.state(0) == isa::QueueState::kError);
    const isa::CompletionRecord r = h.record(0, 0);
    CHECK(r.error == code(isa::ErrorCode::kDeviceAddressFault));
    CHECK(r.error_arg0 == ring_addr(0));
    CHECK(r.error_arg1 == 256);
  }
  CHECK(h.state(1) == isa::QueueState::kRunning);
  CHECK(h.record(1, 0).seq == 2);
}

TEST_CASE("one launch runs at a time device-wide; a second waits in its ring",
          "[firmware][exec][launch]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  h.platform.time_ps = 1000;
  h.submit(0, launch(1, 0x1000));
  h.submit(1, launch(2, 0x2000));
  h.submit(1, nop(3));
  h.run();
  // Queue 0's launch started; queue 1's waits (nothing behind it runs either).
  REQUIRE(h.platform.launches.size() == 1);
  CHECK(h.platform.launches[0].image_addr == 0x1000);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 0);
  CHECK(h.qreg(1, reg::kQueueHead) == 0);
  CHECK(h.cp.stats().launches_started == 1);

  h.platform.time_ps = 9000;
  h.cp.on_launch_done({});
  const isa::CompletionRecord first = h.record(0, 0);
  CHECK(first.status == kOk);
  CHECK(first.start_ps == 1000);
  CHECK(first.end_ps == 9000);
  h.run();
  REQUIRE(h.platform.launches.size() == 2);
  CHECK(h.platform.launches[1].image_addr == 0x2000);
  CHECK(h.qreg(1, reg::kQueueCompleted) == 0);
  h.cp.on_launch_done({});
  h.run();
  CHECK(h.qreg(1, reg::kQueueCompleted) == 2);  // the launch, then the NOP behind it
  CHECK(h.record(1, 0).status == kOk);
  CHECK(h.record(1, 1).seq == 3);
}

TEST_CASE("a launch of a queue reset mid-launch is dropped and the grid freed",
          "[firmware][exec][launch]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(1);
  h.submit(0, launch(1, 0x1000));
  h.run();
  REQUIRE(h.platform.launches.size() == 1);
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  h.submit(1, launch(2, 0x2000));
  h.run();
  CHECK(h.platform.launches.size() == 1);  // the grid is still running the old launch
  h.cp.on_launch_done(
      isa::reject(isa::ErrorCode::kKernelFault, "", 1, 2));  // belongs to nobody now
  CHECK(h.cp.stats().packets_failed == 0);
  h.run();
  REQUIRE(h.platform.launches.size() == 2);
  h.cp.on_launch_done({});
  CHECK(h.record(1, 0).status == kOk);
  CHECK(h.record(1, 0).seq == 2);
  // A stray completion with nothing running is ignored (logged).
  h.cp.on_launch_done({});
  CHECK(h.cp.stats().packets_completed == 1);
}

TEST_CASE("a link transfer runs on a DMA engine; a link the chip lacks fails it",
          "[firmware][exec][link]") {
  FirmwareConfig config = test_config();
  config.link_count = 2;
  Harness h(2, config);
  h.setup_queue(0);
  isa::LinkTransferPacket link{};
  link.header = {op(isa::Opcode::kLinkTransfer), isa::kPacketVersion, 0, 0, 5};
  link.direction = static_cast<uint8_t>(isa::LinkDirection::kSend);
  link.link = 1;
  link.peer = 7;
  link.device_addr = kDataArea;
  link.host_addr = FakePlatform::kHostBase;
  link.bytes = 64;
  h.submit(0, link);
  CHECK(h.run() == 1);
  REQUIRE(h.platform.started.size() == 1);
  REQUIRE(h.platform.started[0].job.kind == DmaJob::Kind::kLink);
  CHECK(std::memcmp(&h.platform.started[0].job.link, &link, sizeof link) == 0);
  CHECK(h.cp.stats().dma_jobs_started == 1);

  // Link 2 on a chip with links 0 and 1: refused by the firmware, no engine started.
  Harness g(2, config);
  g.setup_queue(0);
  link.link = 2;
  g.submit(0, link);
  CHECK(g.run() == 1);
  CHECK(g.platform.started.empty());
  const isa::CompletionRecord r = g.record(0, 0);
  CHECK(r.status == kFailed);
  CHECK(r.error == code(isa::ErrorCode::kBadLink));
  CHECK(r.error_arg0 == 2);
  CHECK(r.error_arg1 == 2);
}
