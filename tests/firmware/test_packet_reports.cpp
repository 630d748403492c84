// The firmware reports each packet's dispatch and completion through its Platform (the
// simulator's trace learns from them which queue a DMA job or launch works for): in order,
// with the queue, the packet's header and its completion record, failures included.
#include <catch2/catch.hpp>

#include "cp_harness.h"

using namespace mtia::firmware;
using namespace mtia::firmware::test;
namespace reg = mtia::isa::reg;
namespace isa = mtia::isa;

TEST_CASE("the firmware reports each packet's dispatch and completion to its platform",
          "[firmware][exec]") {
  Harness h;
  h.setup_queue(0);
  h.setup_queue(3);
  h.submit(3, fill_bytes(21, kDataArea, 64, 0xAB));
  h.submit(0, nop(5));
  // One packet per step, queues in round-robin order: queue 0's NOP, then queue 3's fill.
  CHECK(h.cp.step());
  REQUIRE(h.platform.dispatched.size() == 1);
  CHECK(h.platform.dispatched[0].queue == 0);
  CHECK(h.platform.dispatched[0].header.seq == 5);
  REQUIRE(h.platform.completed.size() == 1);  // a NOP completes at once
  CHECK(h.platform.completed[0].queue == 0);
  CHECK(h.platform.completed[0].record.seq == 5);
  CHECK(h.cp.step());
  REQUIRE(h.platform.dispatched.size() == 2);
  CHECK(h.platform.dispatched[1].queue == 3);
  CHECK(h.platform.dispatched[1].header.seq == 21);
  CHECK(h.platform.dispatched[1].header.opcode == static_cast<uint8_t>(isa::Opcode::kFill));
  CHECK(h.platform.completed.size() == 1);  // the fill runs on an engine
  // Dispatch is reported before the job starts, so the platform knows whose job it is.
  CHECK(h.platform.dispatched_before_start == std::vector<size_t>{2});
  h.platform.time_ps = 7000;
  h.finish_dma(0);
  REQUIRE(h.platform.completed.size() == 2);
  CHECK(h.platform.completed[1].queue == 3);
  CHECK(h.platform.completed[1].record.seq == 21);
  CHECK(h.platform.completed[1].record.end_ps == 7000);
  // The completion record reported is the one written to the ring.
  const isa::CompletionRecord ring = h.record(3, 0);
  CHECK(std::memcmp(&ring, &h.platform.completed[1].record, sizeof ring) == 0);
}

TEST_CASE("a malformed packet is reported as dispatched and as failed", "[firmware][exec]") {
  Harness h;
  h.setup_queue(1);
  uint8_t slot[isa::kPacketSlotBytes] = {};
  isa::PacketHeader bad = header(isa::Opcode::kNop, 44);
  bad.version = 99;  // unknown version: the decoder rejects it
  std::memcpy(slot, &bad, sizeof bad);
  h.write_raw_slot(1, 0, slot);
  h.set_reg(reg::queue_reg(1, reg::kQueueTail), 1);
  h.run();
  REQUIRE(h.platform.dispatched.size() == 1);
  CHECK(h.platform.dispatched[0].header.seq == 44);
  REQUIRE(h.platform.completed.size() == 1);
  CHECK(h.platform.completed[0].queue == 1);
  CHECK(h.platform.completed[0].record.seq == 44);
  CHECK(h.platform.completed[0].record.status != 0);
}

TEST_CASE("a completion that cannot be written is not reported", "[firmware][exec]") {
  Harness h;
  h.setup_queue(0);
  h.submit(0, nop(1));
  // The completion ring becomes unbacked after the queue was enabled.
  h.platform.holes.push_back({completion_addr(0), completion_addr(0) + 64});
  h.run();
  CHECK(h.platform.dispatched.size() == 1);
  CHECK(h.platform.completed.empty());
  CHECK(h.state(0) == isa::QueueState::kError);
}
