// A CommandProcessor on a FakePlatform, with helpers that play the driver's part: configure
// queues, write packets into rings, ring doorbells, and read completion records back.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>

#include "fake_platform.h"
#include "mtia/firmware/command_processor.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/registers.h"

namespace mtia::firmware::test {

// Device memory layout used by the tests (all inside FakePlatform's 1 MiB).
inline constexpr uint64_t kRingArea = 0x00000;        // queue q ring at kRingArea + q * 16 KiB
inline constexpr uint64_t kCompletionArea = 0x40000;  // queue q records at + q * 4 KiB
inline constexpr uint64_t kFenceArea = 0x7f000;
inline constexpr uint64_t kDataArea = 0x80000;

inline uint64_t ring_addr(uint32_t q) {
  return kRingArea + q * 0x4000;
}
inline uint64_t completion_addr(uint32_t q) {
  return kCompletionArea + q * 0x1000;
}

inline FirmwareConfig test_config(uint32_t queues = 8) {
  FirmwareConfig c;
  c.num_queues = queues;
  c.generation = 2;
  c.dram_bytes = FakePlatform::kDeviceBytes;
  c.sram_bytes = 0;
  c.local_store_bytes = 0;
  c.clock_hz = 1'000'000'000;
  c.preset_name = "test";
  return c;
}

// --- packet builders --------------------------------------------------------------------------

inline isa::PacketHeader header(isa::Opcode op, uint64_t seq, uint16_t flags = 0) {
  return {static_cast<uint8_t>(op), isa::kPacketVersion, flags, 0, seq};
}

inline isa::NopPacket nop(uint64_t seq, uint16_t flags = 0) {
  return {header(isa::Opcode::kNop, seq, flags)};
}

inline isa::SignalPacket signal(uint64_t seq, uint64_t addr, uint64_t value,
                                isa::AddressSpace space = isa::AddressSpace::kDevice,
                                uint16_t flags = 0) {
  isa::SignalPacket p{};
  p.header = header(isa::Opcode::kSignal, seq, flags);
  p.addr = addr;
  p.space = static_cast<uint8_t>(space);
  p.value = value;
  return p;
}

inline isa::WaitPacket wait(uint64_t seq, uint64_t addr, uint64_t value,
                            isa::WaitCondition cond = isa::WaitCondition::kGreaterEqual) {
  isa::WaitPacket p{};
  p.header = header(isa::Opcode::kWait, seq);
  p.addr = addr;
  p.value = value;
  p.condition = static_cast<uint8_t>(cond);
  return p;
}

inline isa::NdRegion region(uint64_t addr, std::initializer_list<uint64_t> strides,
                            isa::AddressSpace space = isa::AddressSpace::kDevice) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  int d = 0;
  for (uint64_t s : strides) r.strides[d++] = s;
  return r;
}

inline isa::FillPacket fill(uint64_t seq, std::initializer_list<uint64_t> sizes,
                            uint8_t pattern_size, uint64_t pattern, const isa::NdRegion& dst,
                            uint16_t flags = 0) {
  isa::FillPacket p{};
  p.header = header(isa::Opcode::kFill, seq, flags);
  p.ndims = static_cast<uint8_t>(sizes.size());
  p.pattern_size = pattern_size;
  p.pattern = pattern;
  int d = 0;
  for (uint64_t s : sizes) p.sizes[d++] = s;
  p.dst = dst;
  return p;
}

inline isa::DmaCopyPacket copy(uint64_t seq, std::initializer_list<uint64_t> sizes,
                               uint8_t elem_size, const isa::NdRegion& src,
                               const isa::NdRegion& dst) {
  isa::DmaCopyPacket p{};
  p.header = header(isa::Opcode::kDmaCopy, seq);
  p.ndims = static_cast<uint8_t>(sizes.size());
  p.elem_size = elem_size;
  int d = 0;
  for (uint64_t s : sizes) p.sizes[d++] = s;
  p.src = src;
  p.dst = dst;
  return p;
}

inline isa::LaunchPacket launch(uint64_t seq, uint64_t image_addr) {
  isa::LaunchPacket p{};
  p.header = header(isa::Opcode::kLaunch, seq);
  p.image_addr = image_addr;
  p.args_addr = kDataArea;
  p.args_bytes = 16;
  p.grid_rows = 1;
  p.grid_cols = 1;
  return p;
}

// A simple 1-D byte fill of `bytes` bytes at `addr`.
inline isa::FillPacket fill_bytes(uint64_t seq, uint64_t addr, uint64_t bytes, uint8_t value) {
  return fill(seq, {bytes}, 1, value, region(addr, {1}));
}

// --- the device under test --------------------------------------------------------------------

struct Harness {
  FakePlatform platform;
  CommandProcessor cp;

  explicit Harness(unsigned engines = 2, FirmwareConfig config = test_config())
      : platform(engines), cp(platform, std::move(config)) {}

  uint64_t reg(uint64_t offset) {
    auto r = cp.read_register(offset);
    INFO("reading BAR0 offset " << offset << ": " << (r.ok() ? "" : r.error().reason));
    REQUIRE(r.ok());
    return r.value();
  }
  void set_reg(uint64_t offset, uint64_t value) {
    auto r = cp.write_register(offset, value);
    INFO("writing BAR0 offset " << offset << ": " << (r.ok() ? "" : r.error().reason));
    REQUIRE(r.ok());
  }
  uint64_t qreg(uint32_t q, uint64_t field) { return reg(isa::reg::queue_reg(q, field)); }
  isa::QueueState state(uint32_t q) {
    return static_cast<isa::QueueState>(qreg(q, isa::reg::kQueueState));
  }

  // Configures queue q with the test layout and enables it.
  void setup_queue(uint32_t q, uint64_t size = 8) {
    set_reg(isa::reg::queue_reg(q, isa::reg::kQueueBase), ring_addr(q));
    set_reg(isa::reg::queue_reg(q, isa::reg::kQueueSize), size);
    set_reg(isa::reg::queue_reg(q, isa::reg::kQueueCompletion), completion_addr(q));
    set_reg(isa::reg::queue_reg(q, isa::reg::kQueueControl), isa::kQueueEnable);
  }

  // Writes `packet` into the slot for packet `index` of queue q (no doorbell).
  void write_slot(uint32_t q, uint64_t index, const isa::Packet& packet) {
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(packet, slot);
    write_raw_slot(q, index, slot);
  }
  void write_raw_slot(uint32_t q, uint64_t index, const uint8_t (&slot)[isa::kPacketSlotBytes]) {
    const uint64_t size = qreg(q, isa::reg::kQueueSize);
    std::memcpy(platform.device.data() + ring_addr(q) + (index % size) * isa::kPacketSlotBytes,
                slot, isa::kPacketSlotBytes);
  }

  // Writes the packet at the current tail and rings the doorbell; returns its index.
  uint64_t submit(uint32_t q, const isa::Packet& packet) {
    const uint64_t index = qreg(q, isa::reg::kQueueTail);
    write_slot(q, index, packet);
    set_reg(isa::reg::queue_reg(q, isa::reg::kQueueTail), index + 1);
    return index;
  }

  // The decoded completion record for packet `index` of queue q.
  isa::CompletionRecord record(uint32_t q, uint64_t index) {
    const uint64_t size = qreg(q, isa::reg::kQueueSize);
    const uint8_t* p =
        platform.device.data() + completion_addr(q) + (index % size) * isa::kCompletionRecordBytes;
    auto r = isa::decode_completion(p, isa::kCompletionRecordBytes);
    INFO("completion record " << index << " of queue " << q << ": "
                              << (r.ok() ? "" : r.error().reason));
    REQUIRE(r.ok());
    return r.value();
  }

  // Steps until nothing can move; returns the number of steps that did something.
  int run() {
    int steps = 0;
    while (cp.step()) {
      ++steps;
      REQUIRE(steps < 100000);  // a livelock is a bug
    }
    return steps;
  }

  // Finishes the i-th started DMA job functionally and reports it to the firmware.
  void finish_dma(size_t i) {
    REQUIRE(i < platform.started.size());
    const auto& s = platform.started[i];
    cp.on_dma_done(s.engine, platform.perform(s.job));
  }
};

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace mtia::firmware::test
