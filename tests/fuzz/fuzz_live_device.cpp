// Raw packets on a live device: the input's first bytes are written, as they are, into a ring
// slot of queue 0 of a running simulator (firmware, DMA engines, PE grid), and its doorbell
// rung. Whatever the packet does, the device must stay usable: a NOP on queue 1 completes, and
// queue 0 comes back after a reset and runs a NOP too. A failure is a broken property.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "fuzz_check.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/packets.h"
#include "mtia/isa/registers.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/emulated_device.h"
#include "mtia/sim/host_memory.h"

namespace isa = mtia::isa;
namespace sim = mtia::sim;
namespace reg = isa::reg;

namespace {

constexpr uint64_t kBus = 0x7000'0000'0000;
constexpr uint64_t kSlots = 16;

uint64_t ring(uint32_t q) {
  return 0x10'0000 + q * 0x1'0000;
}
uint64_t completions(uint32_t q) {
  return 0x20'0000 + q * 0x1'0000;
}

// 1 MiB of host memory at kBus, for packets that address the host.
struct Host final : sim::HostMemory {
  std::vector<uint8_t> bytes = std::vector<uint8_t>(1 << 20);
  uint8_t* translate(uint64_t bus, uint64_t n) override {
    if (bus < kBus || bus - kBus > bytes.size() || n > bytes.size() - (bus - kBus)) return nullptr;
    return bytes.data() + (bus - kBus);
  }
};

struct Rig {
  Host host;
  std::unique_ptr<sim::Device> dev;
  uint64_t tail[2] = {};

  Rig() {
    auto preset = sim::load_preset("mtia-v2");
    FUZZ_CHECK(preset.ok());
    sim::ChipConfig config = preset.value();
    // Small memories keep every valid packet short: nothing can copy gigabytes.
    FUZZ_CHECK(sim::apply_override(config, "dram_bytes=67108864").ok());
    FUZZ_CHECK(sim::apply_override(config, "timing=false").ok());
    auto opened = sim::Device::open(config, host, [](uint64_t) {});
    FUZZ_CHECK(opened.ok());
    dev = std::move(opened).value();
    for (uint32_t q = 0; q < 2; ++q) setup(q);
  }

  uint64_t read(uint64_t offset) {
    auto v = dev->read_register(offset);
    FUZZ_CHECK(v.ok());
    return v.value();
  }
  void setup(uint32_t q) {
    dev->write_register(reg::queue_reg(q, reg::kQueueControl), isa::kQueueReset);
    dev->write_register(reg::queue_reg(q, reg::kQueueBase), ring(q));
    dev->write_register(reg::queue_reg(q, reg::kQueueSize), kSlots);
    dev->write_register(reg::queue_reg(q, reg::kQueueCompletion), completions(q));
    dev->write_register(reg::queue_reg(q, reg::kQueueControl), isa::kQueueEnable);
    tail[q] = 0;
    FUZZ_CHECK(read(reg::queue_reg(q, reg::kQueueState)) ==
               static_cast<uint64_t>(isa::QueueState::kRunning));
  }
  void push(uint32_t q, const uint8_t (&slot)[isa::kPacketSlotBytes]) {
    FUZZ_CHECK(dev->write_memory(ring(q) + (tail[q] % kSlots) * isa::kPacketSlotBytes, slot,
                                 isa::kPacketSlotBytes)
                   .ok());
    dev->write_register(reg::queue_reg(q, reg::kQueueTail), ++tail[q]);
  }
  // Waits (bounded) until queue q has completed everything pushed or halted on an error.
  bool settles(uint32_t q, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (read(reg::queue_reg(q, reg::kQueueCompleted)) == tail[q] ||
          read(reg::queue_reg(q, reg::kQueueState)) ==
              static_cast<uint64_t>(isa::QueueState::kError)) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return false;
  }
  void nop(uint32_t q) {
    uint8_t slot[isa::kPacketSlotBytes];
    isa::NopPacket p{};
    p.header.opcode = static_cast<uint8_t>(isa::Opcode::kNop);
    p.header.version = isa::kPacketVersion;
    p.header.seq = tail[q] + 1;
    isa::encode_packet(p, slot);
    push(q, slot);
    FUZZ_CHECK(settles(q, std::chrono::milliseconds(10000)));
    FUZZ_CHECK(read(reg::queue_reg(q, reg::kQueueState)) ==
               static_cast<uint64_t>(isa::QueueState::kRunning));
  }
};

}  // namespace

// One device for the whole run: each input must leave it usable. Made before fuzzing starts:
// the simulator thread's own allocations then belong to no input (LeakSanitizer cannot see
// into SystemC's coroutine stacks, so it would take them for leaks of the first input).
Rig* g_rig = nullptr;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_rig = new Rig();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Rig& rig = *g_rig;
  uint8_t slot[isa::kPacketSlotBytes] = {};
  std::memcpy(slot, data, size < sizeof slot ? size : sizeof slot);
  rig.push(0, slot);
  rig.nop(1);  // another queue is unaffected, whatever queue 0 is doing
  // A wait packet may wait on a fence for ever; a reset ends it. One whose condition holds
  // completes at once, so it gets a short bound (it made most of the run's time at 5 s).
  // Any other packet settles within the long bound, completed or halted.
  const bool wait = slot[0] == static_cast<uint8_t>(isa::Opcode::kWait);
  rig.settles(0, wait ? std::chrono::milliseconds(50) : std::chrono::milliseconds(5000));
  FUZZ_CHECK(rig.dev->lost_reason().empty());
  rig.setup(0);
  rig.nop(0);
  return 0;
}
