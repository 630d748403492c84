// ExecBuffer packets: the firmware runs a command buffer in device memory (graph replay) in
// order, at the replay cost, with one completion record after the last packet; a failing
// buffer packet fails the ExecBuffer packet and halts the queue as any failure does.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cp_harness.h"
#include "mtia/isa/error_record.h"

using namespace mtia;
using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = mtia::isa::reg;

namespace {

constexpr uint64_t kBufferArea = 0xc0000;  // command buffers (slot-aligned)
constexpr uint64_t kErrorRecord = 0x78000;
constexpr uint16_t kOk = static_cast<uint16_t>(isa::CompletionStatus::kOk);
constexpr uint16_t kError = static_cast<uint16_t>(isa::CompletionStatus::kError);

// Writes `packets` as a command buffer at `addr`.
void write_buffer(Harness& h, uint64_t addr, const std::vector<isa::Packet>& packets) {
  for (size_t i = 0; i < packets.size(); ++i) {
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(packets[i], slot);
    std::memcpy(h.platform.device.data() + addr + i * isa::kPacketSlotBytes, slot, sizeof slot);
  }
}

isa::ExecBufferPacket exec(uint64_t seq, uint64_t addr, uint32_t count) {
  isa::ExecBufferPacket p{};
  p.header = header(isa::Opcode::kExecBuffer, seq, isa::kPacketInterrupt);
  p.buffer_addr = addr;
  p.packet_count = count;
  return p;
}

std::string error_text(Harness& h) {
  auto r =
      isa::decode_error_record(h.platform.device.data() + kErrorRecord, isa::kErrorRecordBytes);
  REQUIRE(r.ok());
  return std::string(isa::error_record_text(r.value()));
}

}  // namespace

TEST_CASE("an exec buffer runs its packets in order and completes once, after the last",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.setup_queue(0);
  write_buffer(h, kBufferArea,
               {signal(0, kFenceArea, 1), fill_bytes(0, kDataArea, 64, 0xab),
                signal(0, kFenceArea + 8, 2), nop(0)});
  h.submit(0, exec(5, kBufferArea, 4));
  h.submit(0, nop(6));

  // The ExecBuffer packet, the first signal and the fill's dispatch; then the fill's DMA.
  CHECK(h.run() == 3);
  CHECK(h.platform.read_u64(kFenceArea) == 1);
  CHECK(h.platform.read_u64(kFenceArea + 8) == 0);  // after the fill: not yet
  REQUIRE(h.platform.started.size() == 1);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 0);  // no record for buffer packets
  CHECK(h.cp.last_step_replayed());

  h.finish_dma(0);
  CHECK(h.run() == 3);  // second signal, nop, then the ring's nop
  for (int i = 0; i < 64; ++i) CHECK(h.platform.device[kDataArea + i] == 0xab);
  CHECK(h.platform.read_u64(kFenceArea + 8) == 2);
  CHECK(h.qreg(0, reg::kQueueCompleted) == 2);
  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.seq == 5);
  CHECK(r.index == 0);
  CHECK(r.opcode == static_cast<uint8_t>(isa::Opcode::kExecBuffer));
  CHECK(r.status == kOk);
  CHECK(h.record(0, 1).seq == 6);
  CHECK(h.cp.stats().buffer_packets_dispatched == 4);
  CHECK(h.cp.stats().packets_completed == 2);
}

TEST_CASE("steps that dispatch a buffer's packet are marked as replayed",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.setup_queue(0);
  write_buffer(h, kBufferArea, {nop(0), nop(0)});
  h.submit(0, exec(1, kBufferArea, 2));
  h.submit(0, nop(2));
  std::vector<bool> replayed;
  while (h.cp.step()) replayed.push_back(h.cp.last_step_replayed());
  // The ExecBuffer packet from the ring, its two packets, the ring's nop.
  CHECK(replayed == std::vector<bool>{false, true, true, false});
  CHECK(h.record(0, 0).seq == 1);
  CHECK(h.record(0, 1).seq == 2);
}

TEST_CASE("a buffer may be replayed again and again", "[firmware][exec][exec_buffer]") {
  Harness h;
  h.setup_queue(0, 16);
  write_buffer(h, kBufferArea, {signal(0, kFenceArea, 7), nop(0)});
  for (uint64_t i = 0; i < 10; ++i) h.submit(0, exec(i + 1, kBufferArea, 2));
  CHECK(h.run() == 30);
  for (uint64_t i = 0; i < 10; ++i) CHECK(h.record(0, i).seq == i + 1);
  CHECK(h.cp.stats().buffer_packets_dispatched == 20);
}

TEST_CASE("a failing buffer packet fails the ExecBuffer packet and halts the queue",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.set_reg(reg::queue_reg(0, reg::kQueueErrorRecord), kErrorRecord);
  h.setup_queue(0);
  const uint64_t nowhere = 0x4000'0000;  // outside the fake device's memory
  write_buffer(h, kBufferArea, {nop(0), signal(0, nowhere, 1), signal(0, kFenceArea, 9)});
  h.submit(0, exec(3, kBufferArea, 3));
  h.submit(0, nop(4));
  h.run();
  const isa::CompletionRecord r = h.record(0, 0);
  CHECK(r.seq == 3);
  CHECK(r.status == kError);
  CHECK(r.error == static_cast<uint16_t>(isa::ErrorCode::kDeviceAddressFault));
  CHECK(r.error_arg0 == nowhere);
  CHECK(h.state(0) == isa::QueueState::kError);
  CHECK(h.platform.read_u64(kFenceArea) == 0);  // the rest of the buffer did not run
  CHECK(h.qreg(0, reg::kQueueCompleted) == 1);  // nor did the ring's next packet
  INFO(error_text(h));
  CHECK(contains(error_text(h), "command buffer packet 1 of 3 (signal)"));

  // Reset clears it; the queue serves the ring again.
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  h.setup_queue(0);
  h.submit(0, nop(10));
  CHECK(h.run() == 1);
  CHECK(h.record(0, 0).seq == 10);
}

TEST_CASE("malformed, nested and unreachable buffers are rejected with the reason",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.set_reg(reg::queue_reg(0, reg::kQueueErrorRecord), kErrorRecord);
  h.setup_queue(0);
  const auto fails_with = [&](isa::ErrorCode code, const std::string& why) {
    h.run();
    const isa::CompletionRecord r = h.record(0, 0);
    CHECK(r.status == kError);
    CHECK(r.error == static_cast<uint16_t>(code));
    INFO(error_text(h));
    CHECK(contains(error_text(h), why));
    h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
    h.setup_queue(0);
  };

  SECTION("nested") {
    write_buffer(h, kBufferArea, {nop(0), exec(0, kBufferArea, 1)});
    h.submit(0, exec(1, kBufferArea, 2));
    fails_with(isa::ErrorCode::kBadOpcode, "command buffers do not nest");
  }
  SECTION("a slot never written") {
    write_buffer(h, kBufferArea, {nop(0)});
    h.submit(0, exec(1, kBufferArea, 2));  // slot 1 is all zero
    fails_with(isa::ErrorCode::kBadOpcode, "command buffer packet 1 of 2 (illegal)");
  }
  SECTION("outside device memory") {
    h.submit(0, exec(1, FakePlatform::kDeviceBytes - isa::kPacketSlotBytes, 2));
    fails_with(isa::ErrorCode::kDeviceAddressFault, "not in device memory");
  }
  CHECK(h.cp.stats().packets_failed == 1);
}

TEST_CASE("resetting a queue in the middle of a buffer drops the rest of it",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.setup_queue(0);
  write_buffer(h, kBufferArea, {fill_bytes(0, kDataArea, 16, 1), signal(0, kFenceArea, 5)});
  h.submit(0, exec(1, kBufferArea, 2));
  h.run();
  REQUIRE(h.platform.started.size() == 1);
  h.set_reg(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  h.finish_dma(0);  // the fill's completion belongs to nobody now
  h.setup_queue(0);
  h.submit(0, nop(2));
  CHECK(h.run() == 1);
  CHECK(h.record(0, 0).seq == 2);
  CHECK(h.platform.read_u64(kFenceArea) == 0);
}

namespace {

isa::SignalPacket relative_signal(uint64_t addr, uint64_t k) {
  return signal(0, addr, k, isa::AddressSpace::kDevice, isa::kPacketFenceRelative);
}

isa::WaitPacket relative_wait(uint64_t addr, uint64_t k) {
  isa::WaitPacket w = wait(0, addr, k);
  w.header.flags = isa::kPacketFenceRelative;
  return w;
}

isa::ExecBufferPacket exec_at(uint64_t seq, uint64_t addr, uint32_t count, uint64_t base) {
  isa::ExecBufferPacket p = exec(seq, addr, count);
  p.fence_base = base;
  return p;
}

}  // namespace

TEST_CASE("fence-relative signals and waits in a buffer add the ExecBuffer packet's base",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.setup_queue(0, 16);
  h.setup_queue(1, 16);
  // Queue 1's buffer waits for queue 0's fence to reach base + 1, then signals base + 2 on its
  // own; queue 0's buffer signals base + 1, then waits for base + 2: a fork and a join.
  const uint64_t fence0 = kFenceArea, fence1 = kFenceArea + 8;
  write_buffer(h, kBufferArea, {relative_signal(fence0, 1), relative_wait(fence1, 2)});
  write_buffer(h, kBufferArea + 4 * isa::kPacketSlotBytes,
               {relative_wait(fence0, 1), relative_signal(fence1, 2)});
  for (uint64_t replay = 0; replay < 3; ++replay) {
    const uint64_t base = 100 + 10 * replay;
    h.submit(1, exec_at(replay + 1, kBufferArea + 4 * isa::kPacketSlotBytes, 2, base));
    h.submit(0, exec_at(replay + 1, kBufferArea, 2, base));
    h.run();
    INFO("replay " << replay);
    CHECK(h.platform.read_u64(fence0) == base + 1);
    CHECK(h.platform.read_u64(fence1) == base + 2);
    CHECK(h.qreg(0, reg::kQueueCompleted) == replay + 1);
    CHECK(h.qreg(1, reg::kQueueCompleted) == replay + 1);
    CHECK(h.record(0, replay).status == kOk);
  }
  // A base the wait's fence has not reached holds queue 1 until queue 0's buffer gets there.
  h.submit(1, exec_at(9, kBufferArea + 4 * isa::kPacketSlotBytes, 2, 1000));
  h.run();
  CHECK(h.qreg(1, reg::kQueueCompleted) == 3);
  h.submit(0, exec_at(9, kBufferArea, 2, 1000));
  h.run();
  CHECK(h.qreg(1, reg::kQueueCompleted) == 4);
  CHECK(h.platform.read_u64(fence1) == 1002);
}

TEST_CASE("a fence-relative packet outside a buffer, or one that overflows, fails",
          "[firmware][exec][exec_buffer]") {
  Harness h;
  h.set_reg(reg::queue_reg(0, reg::kQueueErrorRecord), kErrorRecord);
  h.setup_queue(0);
  SECTION("from the ring") {
    h.submit(0, relative_signal(kFenceArea, 1));
    h.run();
    CHECK(h.record(0, 0).status == kError);
    INFO(error_text(h));
    CHECK(contains(error_text(h), "only inside a command buffer"));
    CHECK(h.platform.read_u64(kFenceArea) == 0);
  }
  SECTION("past 64 bits") {
    write_buffer(h, kBufferArea, {relative_signal(kFenceArea, 2)});
    h.submit(0, exec_at(1, kBufferArea, 1, ~uint64_t{0}));
    h.run();
    CHECK(h.record(0, 0).error == static_cast<uint16_t>(isa::ErrorCode::kExtentOverflow));
    INFO(error_text(h));
    CHECK(contains(error_text(h), "overflows 64 bits"));
    CHECK(h.platform.read_u64(kFenceArea) == 0);
  }
}
