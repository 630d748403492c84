// Link transfers in the memory system (MemorySystem::schedule_link) against hand-computed
// picosecond values (the formulas in memory_system.h): latency + bytes / bandwidth on each
// direction's own timeline, transfers on one direction one after the other, a receive that
// waits for its bytes, and the checks of the link index and both address ranges.
//
// The links here: 10 GB/s (10'000 MB/s) per direction, 2 us latency; DMA setup 100 ns.
#include <catch2/catch.hpp>

#include <cstring>

#include "host_buffer.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/memory_system.h"
#include "must.h"

using mtia::test::must;

namespace isa = mtia::isa;
namespace sim = mtia::sim;
using Dir = isa::LinkDirection;

namespace {

constexpr uint64_t kBus = test::HostBuffer::kBusBase;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kSetup = 100'000;        // ps
constexpr uint64_t kLatency = 2'000'000;    // ps
constexpr uint64_t kBusyMiB = 104'857'600;  // 1048576e6 / 10000 ps, exact

sim::ChipConfig link_config(uint32_t links = 2) {
  auto config = must(sim::load_preset("mtia-v2"));
  config.link_count = links;
  config.link_bandwidth_GBps = 10;
  config.link_latency_ns = 2000;
  config.dma_setup_ns = 100;
  return config;
}

isa::LinkTransferPacket transfer(Dir dir, uint64_t device, uint64_t host, uint64_t bytes,
                                 uint8_t link = 0, uint64_t sent_ps = 0) {
  isa::LinkTransferPacket p{};
  p.direction = static_cast<uint8_t>(dir);
  p.link = link;
  p.peer = 1;
  p.device_addr = device;
  p.host_addr = host;
  p.bytes = bytes;
  p.sent_ps = sent_ps;
  return p;
}

}  // namespace

TEST_CASE("a link send takes setup + latency + bytes / bandwidth and moves the bytes",
          "[link][timing]") {
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(link_config(), host);
  uint8_t* dev = ms.device().translate(4096, kMiB);
  REQUIRE(dev != nullptr);
  for (uint64_t i = 0; i < kMiB; ++i) dev[i] = static_cast<uint8_t>(i * 7 + 3);

  const uint64_t now = 5'000'000;
  const auto plan = ms.schedule_link(transfer(Dir::kSend, 4096, kBus, kMiB), now);
  REQUIRE(plan.status.ok());
  CHECK(plan.link_start_ps == now + kSetup);
  CHECK(plan.link_busy_ps == kBusyMiB);
  CHECK(plan.end_ps == now + kSetup + kBusyMiB + kLatency);
  CHECK(ms.link_free_at_ps(0, Dir::kSend) == now + kSetup + kBusyMiB);
  CHECK(ms.link_free_at_ps(0, Dir::kReceive) == 0);
  // Not on PCIe nor on any memory timeline.
  for (int r = 0; r < sim::kNumResources; ++r) {
    CHECK(plan.busy_ps[r] == 0);
    CHECK(ms.free_at_ps(static_cast<sim::Resource>(r)) == 0);
  }
  REQUIRE(ms.perform(plan).ok());
  CHECK(std::memcmp(host.data(), dev, kMiB) == 0);
  CHECK(ms.link_stats(0, Dir::kSend).transfers == 1);
  CHECK(ms.link_stats(0, Dir::kSend).bytes == kMiB);
  CHECK(ms.link_stats(0, Dir::kSend).busy_ps == kBusyMiB);
}

TEST_CASE("transfers on one link direction serialise; other directions and links do not wait",
          "[link][timing]") {
  test::HostBuffer host(4 * kMiB);
  sim::MemorySystem ms(link_config(), host);
  const uint64_t now = 1'000'000;
  const auto a = ms.schedule_link(transfer(Dir::kSend, 0, kBus, kMiB), now);
  const auto b = ms.schedule_link(transfer(Dir::kSend, kMiB, kBus + kMiB, kMiB), now);
  // The second waits for the first's bytes to leave, then pays its own latency.
  CHECK(b.link_start_ps == a.link_start_ps + kBusyMiB);
  CHECK(b.end_ps == now + kSetup + 2 * kBusyMiB + kLatency);
  // A half-size one behind both.
  const auto c = ms.schedule_link(transfer(Dir::kSend, 0, kBus, kMiB / 2), now);
  CHECK(c.end_ps == now + kSetup + 2 * kBusyMiB + kBusyMiB / 2 + kLatency);
  // The receive direction of link 0 and link 1's send direction are idle.
  const auto rx = ms.schedule_link(transfer(Dir::kReceive, 0, kBus + 2 * kMiB, kMiB, 0, now), now);
  CHECK(rx.link_start_ps == now + kSetup);
  CHECK(rx.end_ps == now + kSetup + kBusyMiB + kLatency);
  const auto other = ms.schedule_link(transfer(Dir::kSend, 0, kBus + 3 * kMiB, kMiB, 1), now);
  CHECK(other.end_ps == now + kSetup + kBusyMiB + kLatency);
  CHECK(ms.link_stats(0, Dir::kSend).transfers == 3);
  CHECK(ms.link_stats(1, Dir::kSend).transfers == 1);
}

TEST_CASE("a link receive's bytes cross from when the peer sent them", "[link][timing]") {
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(link_config(), host);
  SECTION("sent later than now: it completes when they arrive") {
    const uint64_t now = 1'000'000, sent = 50'000'000;
    const auto p = ms.schedule_link(transfer(Dir::kReceive, 0, kBus, kMiB, 0, sent), now);
    CHECK(p.link_start_ps == sent + kSetup);
    CHECK(p.end_ps == sent + kSetup + kBusyMiB + kLatency);
  }
  SECTION("sent long ago: the bytes are there, it completes after its setup") {
    const uint64_t now = 900'000'000, sent = 1'000'000;
    const auto p = ms.schedule_link(transfer(Dir::kReceive, 0, kBus, kMiB, 0, sent), now);
    CHECK(p.link_start_ps == sent + kSetup);
    CHECK(p.end_ps == now + kSetup);
    CHECK(ms.link_free_at_ps(0, Dir::kReceive) == sent + kSetup + kBusyMiB);
  }
  SECTION("behind another receive on the same direction") {
    const uint64_t now = 0, sent = 10'000'000;
    const auto first = ms.schedule_link(transfer(Dir::kReceive, 0, kBus, kMiB, 0, sent), now);
    const auto second = ms.schedule_link(transfer(Dir::kReceive, 0, kBus, kMiB, 0, sent), now);
    CHECK(second.link_start_ps == first.link_start_ps + kBusyMiB);
    CHECK(second.end_ps == sent + kSetup + 2 * kBusyMiB + kLatency);
  }
}

TEST_CASE("link transfers check the link and both ranges", "[link][timing]") {
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(link_config(1), host);
  const uint64_t now = 3'000'000;
  SECTION("a link the chip lacks") {
    const auto p = ms.schedule_link(transfer(Dir::kSend, 0, kBus, 64, 1), now);
    REQUIRE_FALSE(p.status.ok());
    CHECK(p.status.error().code == isa::ErrorCode::kBadLink);
    CHECK(p.status.error().arg0 == 1);
    CHECK(p.status.error().arg1 == 1);
  }
  SECTION("device side outside device memory") {
    const uint64_t bad = ms.device().dram_bytes();
    const auto p = ms.schedule_link(transfer(Dir::kReceive, bad, kBus, 64), now);
    REQUIRE_FALSE(p.status.ok());
    CHECK(p.status.error().code == isa::ErrorCode::kDeviceAddressFault);
    CHECK(p.status.error().arg0 == bad);
  }
  SECTION("host side past the registered memory") {
    const auto p = ms.schedule_link(transfer(Dir::kSend, 0, kBus + kMiB - 32, 64), now);
    REQUIRE_FALSE(p.status.ok());
    CHECK(p.status.error().code == isa::ErrorCode::kHostAddressFault);
  }
  // A failed transfer reserves nothing.
  CHECK(ms.link_free_at_ps(0, Dir::kSend) == 0);
  CHECK(ms.link_free_at_ps(0, Dir::kReceive) == 0);
  CHECK(ms.link_stats(0, Dir::kSend).transfers == 0);
}

TEST_CASE("with timing off a link transfer takes no time", "[link][timing]") {
  auto config = link_config();
  config.timing = false;
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(config, host);
  const auto p = ms.schedule_link(transfer(Dir::kReceive, 0, kBus, kMiB, 0, 99'000'000), 1234);
  REQUIRE(p.status.ok());
  CHECK(p.end_ps == 1234);
  REQUIRE(ms.perform(p).ok());
}

TEST_CASE("a link transfer reaches only its queue's device window", "[link][timing]") {
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(link_config(1), host);
  sim::DmaReach reach;  // a client of a shared device: its share of device memory
  reach.scope.window_base = kMiB;
  reach.scope.window_bytes = kMiB;
  const auto inside = ms.schedule_link(transfer(Dir::kSend, kMiB + 64, kBus, 64), 0, reach);
  CHECK(inside.status.ok());
  const auto outside = ms.schedule_link(transfer(Dir::kSend, 64, kBus, 64), 0, reach);
  REQUIRE_FALSE(outside.status.ok());
  CHECK(outside.status.error().code == isa::ErrorCode::kDeviceAddressFault);
  CHECK(ms.link_stats(0, Dir::kSend).transfers == 1);
}
