// DMA timing against hand-computed picosecond values (formulas in memory_system.h).
//
// mtia-v2: setup 100 ns; PCIe 31.5 GB/s (31'500 MB/s) per direction, 500 ns, 64 B bursts;
// DRAM 204.8 GB/s (204'800 MB/s), 100 ns, 64 B; SRAM 2700 GB/s, 20 ns, 64 B.
#include <catch2/catch.hpp>

#include "host_buffer.h"
#include "mtia/isa/address_map.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/memory_system.h"
#include "must.h"

using mtia::test::must;

namespace isa = mtia::isa;
namespace sim = mtia::sim;
using AS = isa::AddressSpace;

namespace {

constexpr uint64_t kBus = test::HostBuffer::kBusBase;
constexpr uint64_t kMiB = 1 << 20;

isa::NdRegion region(uint64_t addr, AS space, uint64_t s0, uint64_t s1 = 0) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  r.strides[0] = s0;
  r.strides[1] = s1;
  return r;
}

isa::DmaCopyPacket copy(int ndims, uint32_t elem, uint64_t n0, uint64_t n1, isa::NdRegion src,
                        isa::NdRegion dst) {
  isa::DmaCopyPacket p{};
  p.ndims = static_cast<uint8_t>(ndims);
  p.elem_size = static_cast<uint8_t>(elem);
  p.sizes[0] = n0;
  p.sizes[1] = ndims > 1 ? n1 : 0;
  p.src = src;
  p.dst = dst;
  return p;
}

}  // namespace

TEST_CASE("timing helpers", "[dma][timing]") {
  CHECK(sim::transfer_ps(kMiB, 31'500) == 33'288'127);  // 1048576e6 / 31500 = 33288126.98
  CHECK(sim::transfer_ps(kMiB, 204'800) == 5'120'000);  // exact
  CHECK(sim::transfer_ps(0, 1000) == 0);
  CHECK(sim::transfer_ps(1, 1'000'000'000) == 1);  // rounds up
  CHECK(sim::gbps_to_mbps(204.8) == 204'800);
  CHECK(sim::gbps_to_mbps(15.75) == 15'750);
  CHECK(sim::ns_to_ps(100) == 100'000);
  CHECK(sim::ns_to_ps(0.5) == 500);

  // A 64 x 64 fp32 matrix: dense rows, or a transposed walk (4-byte runs).
  const uint64_t sizes[2] = {64, 64};
  const uint64_t dense[2] = {256, 4};
  const uint64_t transposed[2] = {4, 256};
  const uint64_t padded[2] = {512, 4};  // 256-byte runs with gaps
  auto r = sim::contiguous_runs(sizes, 2, 4, dense);
  CHECK(r.run_bytes == 16384);
  CHECK(r.runs == 1);
  r = sim::contiguous_runs(sizes, 2, 4, transposed);
  CHECK(r.run_bytes == 4);
  CHECK(r.runs == 4096);
  CHECK(sim::effective_bytes(r, 64) == 4096 * 64);
  r = sim::contiguous_runs(sizes, 2, 4, padded);
  CHECK(r.run_bytes == 256);
  CHECK(r.runs == 64);
  CHECK(sim::effective_bytes(r, 64) == 16384);
  CHECK(sim::effective_bytes({100, 3}, 64) == 3 * 128);  // 100 B runs cost two bursts each
  // Size-1 dimensions do not break a run.
  const uint64_t sizes3[3] = {1, 8, 16};
  const uint64_t strides3[3] = {999, 32, 2};
  r = sim::contiguous_runs(sizes3, 3, 2, strides3);
  CHECK(r.run_bytes == 256);
  CHECK(r.runs == 1);
}

TEST_CASE("contiguous 1 MiB host-to-device on mtia-v2", "[dma][timing]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(config, host);
  const uint64_t now = 7'000'000;
  const auto plan = ms.schedule_copy(
      copy(1, 1, kMiB, 0, region(kBus, AS::kHost, 1), region(0, AS::kDevice, 1)), now);
  REQUIRE(plan.status.ok());
  // setup + 1 MiB / 31.5 GB/s + max(PCIe 500 ns, DRAM 100 ns)
  CHECK(plan.ready_ps == now + 100'000);
  CHECK(plan.start_ps == now + 100'000);
  CHECK(plan.busy_ps[int(sim::Resource::kPcieH2D)] == 33'288'127);
  CHECK(plan.busy_ps[int(sim::Resource::kDram)] == 5'120'000);
  CHECK(plan.end_ps == now + 100'000 + 33'288'127 + 500'000);
  CHECK(ms.free_at_ps(sim::Resource::kPcieH2D) == now + 100'000 + 33'288'127);
  CHECK(ms.free_at_ps(sim::Resource::kDram) == now + 100'000 + 5'120'000);
  CHECK(ms.free_at_ps(sim::Resource::kPcieD2H) == 0);  // not on the path
  CHECK(ms.stats(sim::Resource::kPcieH2D).bytes == kMiB);

  // Device-to-host the other way uses the D2H direction, which is idle: no queueing.
  const auto back = ms.schedule_copy(
      copy(1, 1, kMiB, 0, region(0, AS::kDevice, 1), region(kBus, AS::kHost, 1)), now);
  // Each resource is its own queue: the DRAM read waits until now + 5.22 us for the first
  // job, the idle D2H link starts at once, and the job ends when the longer PCIe part does.
  CHECK(back.start_ps == now + 100'000);
  CHECK(ms.free_at_ps(sim::Resource::kDram) == now + 100'000 + 2 * 5'120'000);
  CHECK(back.end_ps == now + 100'000 + 33'288'127 + 500'000);
}

TEST_CASE("a transposed copy pays for partial bursts on the strided side", "[dma][timing]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  test::HostBuffer host(kMiB);
  sim::MemorySystem ms(config, host);

  SECTION("device side strided") {
    // 64 x 64 fp32 from dense host rows into a column-major DRAM layout: DRAM sees 4096 runs
    // of 4 bytes, each charged a 64-byte burst: 262144 bytes / 204.8 GB/s = 1'280'000 ps;
    // PCIe sees one 16 KiB run: 16384e6 / 31500 = 520'126.98 -> 520'127 ps.
    const auto plan = ms.schedule_copy(
        copy(2, 4, 64, 64, region(kBus, AS::kHost, 256, 4), region(0, AS::kDevice, 4, 256)), 0);
    CHECK(plan.effective_bytes[int(sim::Resource::kDram)] == 262'144);
    CHECK(plan.effective_bytes[int(sim::Resource::kPcieH2D)] == 16'384);
    CHECK(plan.busy_ps[int(sim::Resource::kDram)] == 1'280'000);
    CHECK(plan.busy_ps[int(sim::Resource::kPcieH2D)] == 520'127);
    CHECK(plan.end_ps == 100'000 + 1'280'000 + 500'000);
  }
  SECTION("host side strided") {
    // Now PCIe carries the 4096 partial bursts: 262144e6 / 31500 = 8'322'031.7 -> 8'322'032.
    const auto plan = ms.schedule_copy(
        copy(2, 4, 64, 64, region(kBus, AS::kHost, 4, 256), region(0, AS::kDevice, 256, 4)), 0);
    CHECK(plan.busy_ps[int(sim::Resource::kPcieH2D)] == 8'322'032);
    CHECK(plan.end_ps == 100'000 + 8'322'032 + 500'000);
  }
  SECTION("runs of 96 bytes cost two 64-byte bursts") {
    // 100 rows of 96 bytes, source rows 128 bytes apart, within SRAM -> DRAM.
    const auto plan =
        ms.schedule_copy(copy(2, 8, 100, 12, region(isa::kSramBase, AS::kDevice, 128, 8),
                              region(0, AS::kDevice, 96, 8)),
                         0);
    CHECK(plan.effective_bytes[int(sim::Resource::kSram)] == 100 * 128);
    CHECK(plan.effective_bytes[int(sim::Resource::kDram)] == 9600);  // one dense run
    // SRAM: 12800e6 / 2'700'000 = 4740.7 -> 4741; DRAM: 9600e6 / 204800 = 46875.
    CHECK(plan.busy_ps[int(sim::Resource::kSram)] == 4741);
    CHECK(plan.busy_ps[int(sim::Resource::kDram)] == 46'875);
    CHECK(plan.end_ps == 100'000 + 46'875 + 100'000);  // max latency: DRAM's 100 ns
  }
}

TEST_CASE("engines that share DRAM share its bandwidth", "[dma][timing]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  test::HostBuffer host(4096);
  sim::MemorySystem ms(config, host);
  // DRAM -> DRAM 1 MiB charges read and write: 2 MiB / 204.8 GB/s = 10'240'000 ps.
  auto job = [](uint64_t src, uint64_t dst) {
    return copy(1, 8, kMiB / 8, 0, region(src, AS::kDevice, 8), region(dst, AS::kDevice, 8));
  };
  const auto a = ms.schedule_copy(job(0, 16 * kMiB), 0);
  CHECK(a.busy_ps[int(sim::Resource::kDram)] == 10'240'000);
  CHECK(a.end_ps == 100'000 + 10'240'000 + 100'000);  // alone: setup + busy + latency
  const auto b = ms.schedule_copy(job(32 * kMiB, 48 * kMiB), 0);
  // Submitted at the same time: waits for A's reservation, so ends one busy time later.
  CHECK(b.start_ps == a.start_ps + 10'240'000);
  CHECK(b.end_ps - a.end_ps == 10'240'000);
  // A job on another memory is not delayed: SRAM -> host does not touch DRAM.
  const auto c = ms.schedule_copy(
      copy(1, 8, 512, 0, region(isa::kSramBase, AS::kDevice, 8), region(kBus, AS::kHost, 8)), 0);
  CHECK(c.start_ps == 100'000);
  CHECK(ms.stats(sim::Resource::kDram).busy_ps == 2 * 10'240'000);
  CHECK(ms.stats(sim::Resource::kDram).jobs == 2);
  // A PE's local store is private: a copy from it to SRAM charges the SRAM side only, queues
  // behind C on the SRAM, and is also bound by the local-store port (1 TB/s on v2: 4096 B take
  // 4096 ps there against 1517 ps on the SRAM).
  const uint64_t sram_free = ms.free_at_ps(sim::Resource::kSram);
  const auto d = ms.schedule_copy(copy(1, 8, 512, 0, region(isa::kLocalStoreBase, AS::kDevice, 8),
                                       region(isa::kSramBase + 4096, AS::kDevice, 8)),
                                  0);
  CHECK(d.effective_bytes[int(sim::Resource::kSram)] == 4096);
  CHECK(d.local_store_bytes == 4096);
  CHECK(d.start_ps == std::max<uint64_t>(100'000, sram_free));
  CHECK(d.start_ps >= c.start_ps + c.busy_ps[int(sim::Resource::kSram)]);
  const uint64_t port_ps = (4096ull * 1'000'000 + 1'000'000 - 1) / 1'000'000;  // ceil, MB/s
  CHECK(port_ps > d.busy_ps[int(sim::Resource::kSram)]);
  CHECK(d.end_ps == d.start_ps + std::max(port_ps, d.busy_ps[int(sim::Resource::kSram)]) +
                        20'000);  // + SRAM latency
}

TEST_CASE("timing off: every duration is zero, the data is the same", "[dma][timing]") {
  auto config = must(sim::load_preset("mtia-v2"));
  config.timing = false;
  test::HostBuffer host(kMiB);
  for (uint64_t i = 0; i < kMiB; ++i) host.data()[i] = static_cast<uint8_t>(i ^ (i >> 8));
  sim::MemorySystem ms(config, host);
  const uint64_t now = 123;
  const auto plan = ms.schedule_copy(
      copy(2, 4, 512, 512, region(kBus, AS::kHost, 4, 2048), region(0, AS::kDevice, 2048, 4)), now);
  CHECK(plan.ready_ps == now);
  CHECK(plan.start_ps == now);
  CHECK(plan.end_ps == now);
  REQUIRE(ms.perform(plan).ok());
  const uint8_t* d = ms.device().translate(0, kMiB);
  for (uint64_t i = 0; i < 512; i += 17) {
    for (uint64_t j = 0; j < 512; j += 13) {
      CHECK(std::memcmp(d + i * 2048 + j * 4, host.data() + j * 2048 + i * 4, 4) == 0);
    }
  }
}
