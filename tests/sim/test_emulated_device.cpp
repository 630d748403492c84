// End to end through mtia::sim::Device: BAR0 registers, packets in device memory, doorbells,
// interrupts, completion records, timing, faults, determinism and the written artifacts.
#include <catch2/catch.hpp>

#include <time.h>
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_buffer.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/registers.h"
#include "mtia/sim/emulated_device.h"
#include "must.h"

using mtia::test::must;
#include "rss.h"

namespace isa = mtia::isa;
namespace sim = mtia::sim;
namespace reg = isa::reg;
using AS = isa::AddressSpace;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kBus = test::HostBuffer::kBusBase;
constexpr uint64_t kSlots = 64;
constexpr uint64_t kFence = 0x300'0000;  // a 64-bit fence in DRAM

uint64_t ring_base(uint32_t q) {
  return 0x100'0000 + q * 0x10'0000;
}
uint64_t completion_base(uint32_t q) {
  return 0x200'0000 + q * 0x1'0000;
}

isa::PacketHeader header(isa::Opcode op, uint64_t seq, bool irq) {
  isa::PacketHeader h{};
  h.opcode = static_cast<uint8_t>(op);
  h.version = isa::kPacketVersion;
  h.flags = irq ? isa::kPacketInterrupt : 0;
  h.seq = seq;
  return h;
}

isa::NdRegion region(uint64_t addr, AS space, uint64_t s0, uint64_t s1 = 0) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  r.strides[0] = s0;
  r.strides[1] = s1;
  return r;
}

isa::DmaCopyPacket copy(uint64_t seq, int ndims, uint32_t elem, uint64_t n0, uint64_t n1,
                        isa::NdRegion src, isa::NdRegion dst, bool irq = true) {
  isa::DmaCopyPacket p{};
  p.header = header(isa::Opcode::kDmaCopy, seq, irq);
  p.ndims = static_cast<uint8_t>(ndims);
  p.elem_size = static_cast<uint8_t>(elem);
  p.sizes[0] = n0;
  p.sizes[1] = ndims > 1 ? n1 : 0;
  p.src = src;
  p.dst = dst;
  return p;
}

isa::FillPacket fill(uint64_t seq, uint32_t size, uint64_t pattern, uint64_t n, uint64_t dst,
                     bool irq = true) {
  isa::FillPacket p{};
  p.header = header(isa::Opcode::kFill, seq, irq);
  p.ndims = 1;
  p.pattern_size = static_cast<uint8_t>(size);
  p.pattern = pattern;
  p.sizes[0] = n;
  p.dst = region(dst, AS::kDevice, size);
  return p;
}

isa::NopPacket nop(uint64_t seq, bool irq = true) {
  return {header(isa::Opcode::kNop, seq, irq)};
}

// A device with a host buffer, a counting interrupt handler and queue helpers.
struct Rig {
  test::HostBuffer host{8 * kMiB};
  std::mutex mu;
  std::condition_variable cv;
  uint64_t interrupts = 0;
  uint64_t irq_mask = 0;
  uint64_t tail[isa::kMaxQueues] = {};
  std::unique_ptr<sim::Device> dev;

  explicit Rig(const sim::ChipConfig& config) : Rig(config, host) {}
  // A device over other host memory than the rig's buffer.
  Rig(const sim::ChipConfig& config, sim::HostMemory& host_memory) {
    dev = must(sim::Device::open(config, host_memory, [this](uint64_t mask) {
      // Simulator thread: record and wake the test thread, nothing else.
      std::lock_guard<std::mutex> lock(mu);
      ++interrupts;
      irq_mask |= mask;
      cv.notify_all();
    }));
    dev->write_register(reg::kIntEnable, ~uint64_t{0});
  }
  explicit Rig(const char* preset = "mtia-v2") : Rig(must(sim::load_preset(preset))) {}

  void setup_queue(uint32_t q) {
    tail[q] = 0;
    dev->write_register(reg::queue_reg(q, reg::kQueueBase), ring_base(q));
    dev->write_register(reg::queue_reg(q, reg::kQueueSize), kSlots);
    dev->write_register(reg::queue_reg(q, reg::kQueueCompletion), completion_base(q));
    dev->write_register(reg::queue_reg(q, reg::kQueueControl), isa::kQueueEnable);
  }
  void submit(uint32_t q, const isa::Packet& packet) {
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(packet, slot);
    REQUIRE(dev->write_memory(ring_base(q) + (tail[q] % kSlots) * isa::kPacketSlotBytes, slot,
                              sizeof slot));
    ++tail[q];
  }
  void doorbell(uint32_t q) { dev->write_register(reg::queue_reg(q, reg::kQueueTail), tail[q]); }
  // Blocks until `count` interrupts have arrived in total (no polling of the device).
  void wait_interrupts(uint64_t count) {
    std::unique_lock<std::mutex> lock(mu);
    const bool arrived =
        cv.wait_for(lock, std::chrono::seconds(20), [&] { return interrupts >= count; });
    REQUIRE(arrived);
  }
  uint64_t read(uint64_t offset) {
    auto v = dev->read_register(offset);
    REQUIRE(v.ok());
    return v.value();
  }
  isa::CompletionRecord record(uint32_t q, uint64_t index) {
    uint8_t raw[isa::kCompletionRecordBytes];
    REQUIRE(dev->read_memory(completion_base(q) + (index % kSlots) * sizeof raw, raw, sizeof raw));
    auto rec = isa::decode_completion(raw, sizeof raw);
    REQUIRE(rec.ok());
    return rec.value();
  }
};

void fill_pattern(test::HostBuffer& host) {
  for (uint64_t i = 0; i < host.size(); ++i) host.data()[i] = static_cast<uint8_t>(i * 131 + 17);
}

std::filesystem::path temp_dir(const std::string& leaf) {
  auto dir = std::filesystem::temp_directory_path() /
             ("mtia_sim_device_" + std::to_string(::getpid()) + "_" + leaf);
  std::filesystem::remove_all(dir);
  return dir;
}

}  // namespace

TEST_CASE("the device identifies itself through BAR0", "[device]") {
  Rig rig("mtia-v1");
  CHECK(rig.read(reg::kDeviceId) == (isa::kDeviceIdMagic | 1));
  CHECK(rig.read(reg::kNumDmaEngines) == 4);
  CHECK(rig.read(reg::kDramBytes) == 64ull << 30);
  CHECK(rig.read(reg::kPeGrid) == (8u << 8 | 8u));
  const uint64_t name0 = rig.read(reg::kPresetName0);
  CHECK(std::string(reinterpret_cast<const char*>(&name0), 7) == "mtia-v1");
  CHECK(rig.dev->config().name == "mtia-v1");
}

TEST_CASE("a contiguous 1 MiB host-to-device copy takes setup + bytes/bandwidth + latency",
          "[device][timing]") {
  Rig rig;
  fill_pattern(rig.host);
  rig.setup_queue(0);
  rig.submit(0, copy(41, 1, 8, kMiB / 8, 0, region(kBus, AS::kHost, 8),
                     region(0x400'0000, AS::kDevice, 8)));
  rig.doorbell(0);
  rig.wait_interrupts(1);
  const auto rec = rig.record(0, 0);
  CHECK(rec.seq == 41);
  CHECK(rec.index == 0);
  CHECK(rec.status == uint16_t(isa::CompletionStatus::kOk));
  CHECK(rec.opcode == uint8_t(isa::Opcode::kDmaCopy));
  // 100 ns setup + ceil(1048576e6 / 31500) ps + 500 ns PCIe latency
  CHECK(rec.end_ps - rec.start_ps == 100'000 + 33'288'127 + 500'000);
  std::vector<uint8_t> back(kMiB);
  REQUIRE(rig.dev->read_memory(0x400'0000, back.data(), kMiB));
  CHECK(std::memcmp(back.data(), rig.host.data(), kMiB) == 0);
  CHECK(rig.read(reg::queue_reg(0, reg::kQueueCompleted)) == 1);
  CHECK(rig.dev->now_ps() >= rec.end_ps);
  CHECK((rig.irq_mask & 1) == 1);
}

TEST_CASE("a transposed copy: the right data and burst-waste timing", "[device][timing]") {
  Rig rig;
  fill_pattern(rig.host);
  rig.setup_queue(3);
  // 64 x 64 fp32, dense host rows -> column-major DRAM: dst[i][j] at i*4 + j*256.
  rig.submit(3, copy(7, 2, 4, 64, 64, region(kBus, AS::kHost, 256, 4),
                     region(0x10'0000, AS::kDevice, 4, 256)));
  rig.doorbell(3);
  rig.wait_interrupts(1);
  const auto rec = rig.record(3, 0);
  REQUIRE(rec.status == 0);
  // DRAM: 4096 runs of 4 B, each a 64 B burst = 262144 B / 204.8 GB/s = 1'280'000 ps.
  CHECK(rec.end_ps - rec.start_ps == 100'000 + 1'280'000 + 500'000);
  std::vector<uint8_t> dev(16384);
  REQUIRE(rig.dev->read_memory(0x10'0000, dev.data(), dev.size()));
  for (int i = 0; i < 64; ++i) {
    for (int j = 0; j < 64; ++j) {
      REQUIRE(std::memcmp(&dev[i * 4 + j * 256], &rig.host.data()[i * 256 + j * 4], 4) == 0);
    }
  }
}

TEST_CASE("two engines copying within DRAM at once share its bandwidth", "[device][timing]") {
  Rig rig;
  for (uint32_t q = 0; q < 3; ++q) rig.setup_queue(q);
  // Both copies wait on a fence that a third queue signals, so they start 200 ns apart
  // (one firmware step) on two engines, whatever the host thread's timing.
  isa::WaitPacket wait{header(isa::Opcode::kWait, 1, false),
                       kFence,
                       1,
                       uint8_t(isa::WaitCondition::kGreaterEqual),
                       {}};
  isa::SignalPacket signal{
      header(isa::Opcode::kSignal, 2, false), kFence, uint8_t(AS::kDevice), {}, 1};
  auto dram_copy = [](uint64_t seq, uint64_t src, uint64_t dst) {
    return copy(seq, 1, 8, kMiB / 8, 0, region(src, AS::kDevice, 8), region(dst, AS::kDevice, 8));
  };
  rig.submit(0, wait);
  rig.submit(0, dram_copy(10, 0x800'0000, 0x900'0000));
  rig.submit(1, wait);
  rig.submit(1, dram_copy(11, 0xA00'0000, 0xB00'0000));
  rig.doorbell(0);
  rig.doorbell(1);
  rig.submit(2, signal);
  rig.doorbell(2);
  rig.wait_interrupts(2);
  auto a = rig.record(0, 1);
  auto b = rig.record(1, 1);
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  if (b.start_ps < a.start_ps) std::swap(a, b);
  CHECK(b.start_ps > a.start_ps);
  // Alone, 1 MiB read + 1 MiB written: 2 MiB / 204.8 GB/s = 10'240'000 ps.
  CHECK(a.end_ps - a.start_ps == 100'000 + 10'240'000 + 100'000);
  // The second waits for the first's DRAM reservation: it ends one busy time later.
  CHECK(b.end_ps - a.end_ps == 10'240'000);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  CHECK(stats["dram"]["busy_ps"]["value"] == 2 * 10'240'000);
  CHECK(stats["dram"]["bytes"]["value"] == 4 * kMiB);
  CHECK(stats["dma0"]["jobs"]["value"] == 1);
  CHECK(stats["dma1"]["jobs"]["value"] == 1);
}

TEST_CASE("fills of 1, 2, 4 and 8 byte patterns through the device", "[device]") {
  Rig rig;
  rig.setup_queue(0);
  const uint64_t patterns[] = {0x5A, 0xC0DE, 0x89ABCDEF, 0xFEDCBA9876543210ull};
  const uint32_t sizes[] = {1, 2, 4, 8};
  for (int i = 0; i < 4; ++i) {
    rig.submit(0, fill(i, sizes[i], patterns[i], 1000, 0x20'0000 + i * 0x1'0000));
  }
  rig.doorbell(0);
  rig.wait_interrupts(4);
  for (int i = 0; i < 4; ++i) {
    CHECK(rig.record(0, i).status == 0);
    std::vector<uint8_t> got(sizes[i] * 1001);
    REQUIRE(rig.dev->read_memory(0x20'0000 + i * 0x1'0000, got.data(), got.size()));
    for (int e = 0; e < 1000; ++e) {
      REQUIRE(std::memcmp(&got[e * sizes[i]], &patterns[i], sizes[i]) == 0);
    }
    CHECK(std::all_of(got.end() - sizes[i], got.end(), [](uint8_t b) { return b == 0; }));
  }
}

TEST_CASE("DMA faults end the packet with the right error and leave other queues running",
          "[device][faults]") {
  Rig rig;
  const auto config = rig.dev->config();
  rig.setup_queue(0);
  rig.setup_queue(1);
  const uint64_t bad = config.dram_bytes - 512;
  rig.submit(0, copy(5, 1, 8, 128, 0, region(kBus, AS::kHost, 8), region(bad, AS::kDevice, 8)));
  rig.doorbell(0);
  rig.wait_interrupts(1);  // failures always interrupt
  auto rec = rig.record(0, 0);
  CHECK(rec.status == uint16_t(isa::CompletionStatus::kError));
  CHECK(rec.error == uint16_t(isa::ErrorCode::kDeviceAddressFault));
  CHECK(rec.error_arg0 == bad);
  CHECK(rec.error_arg1 == 1024);
  CHECK(rig.read(reg::queue_reg(0, reg::kQueueState)) == uint64_t(isa::QueueState::kError));

  // Queue 1 is unaffected; its host-side fault is reported as such.
  rig.submit(1, nop(6));
  rig.submit(1, copy(7, 1, 1, 64, 0, region(kBus + rig.host.size() - 32, AS::kHost, 1),
                     region(0, AS::kDevice, 1)));
  rig.doorbell(1);
  rig.wait_interrupts(3);
  CHECK(rig.record(1, 0).status == 0);
  rec = rig.record(1, 1);
  CHECK(rec.error == uint16_t(isa::ErrorCode::kHostAddressFault));
  CHECK(rec.error_arg0 == kBus + rig.host.size() - 32);
  CHECK(rec.error_arg1 == 64);

  // After a reset queue 0 works again.
  rig.dev->write_register(reg::queue_reg(0, reg::kQueueControl), isa::kQueueReset);
  rig.setup_queue(0);
  rig.submit(0, nop(8));
  rig.doorbell(0);
  rig.wait_interrupts(4);
  CHECK(rig.record(0, 0).seq == 8);
  CHECK(rig.record(0, 0).status == 0);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  CHECK(stats["dma0"]["faults"]["value"].get<uint64_t>() +
            stats["dma1"]["faults"]["value"].get<uint64_t>() ==
        2);
}

TEST_CASE("bad register accesses are rejected and the device keeps working", "[device]") {
  Rig rig;
  auto r = rig.dev->read_register(0x0888);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code == isa::ErrorCode::kBadRegister);
  CHECK(r.error().reason.find("0x0888") != std::string::npos);
  r = rig.dev->read_register(0x0004);  // misaligned
  CHECK_FALSE(r.ok());
  r = rig.dev->read_register(reg::queue_reg(15, reg::kQueueBase));  // queue 15 not configured
  CHECK_FALSE(r.ok());
  rig.dev->write_register(reg::kDeviceId, 0);  // read-only: posted, rejected
  rig.dev->write_register(0xFFF8, 1);          // unmapped
  CHECK(rig.read(reg::kDeviceId) == (isa::kDeviceIdMagic | 2));
  rig.setup_queue(2);
  rig.submit(2, nop(1));
  rig.doorbell(2);
  rig.wait_interrupts(1);
  CHECK(rig.record(2, 0).status == 0);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  CHECK(stats["bridge"]["rejected_accesses"]["value"] == 5);
  CHECK(stats["bridge"]["bar0_rejected_accesses"]["value"] == 5);
  CHECK(stats["bridge"]["rejected_accesses"]["unit"] == "accesses");
}

namespace {

struct RunResult {
  std::vector<isa::CompletionRecord> records;
  std::vector<uint8_t> data;
};

// A mixed sequence on one queue: H2D, transposed D2D, fill, D2H back into host memory.
RunResult run_sequence(const sim::ChipConfig& config) {
  Rig rig(config);
  fill_pattern(rig.host);
  rig.setup_queue(4);
  const uint64_t a = 0x1000'0000;
  const uint64_t b = isa::kSramBase + 0x1000;
  rig.submit(
      4, copy(1, 1, 4, 256 * 256, 0, region(kBus, AS::kHost, 4), region(a, AS::kDevice, 4), false));
  rig.submit(4, copy(2, 2, 4, 256, 256, region(a, AS::kDevice, 1024, 4),
                     region(b, AS::kDevice, 4, 1024), false));
  rig.submit(4, fill(3, 2, 0x7777, 100, b + 8, false));
  rig.submit(4, nop(4, false));
  rig.submit(4, copy(5, 1, 8, 256 * 256 / 2, 0, region(b, AS::kDevice, 8),
                     region(kBus + 4 * kMiB, AS::kHost, 8)));
  rig.doorbell(4);
  rig.wait_interrupts(1);
  RunResult out;
  for (int i = 0; i < 5; ++i) out.records.push_back(rig.record(4, i));
  out.data.assign(rig.host.data() + 4 * kMiB, rig.host.data() + 4 * kMiB + 256 * 256 * 4);
  return out;
}

}  // namespace

TEST_CASE("the same sequence twice gives identical simulated times", "[device][determinism]") {
  const auto config = must(sim::load_preset("mtia-v2"));
  const RunResult first = run_sequence(config);
  const RunResult second = run_sequence(config);  // a fresh device, one after the other
  REQUIRE(first.records.size() == second.records.size());
  for (size_t i = 0; i < first.records.size(); ++i) {
    INFO("packet " << i);
    CHECK(first.records[i].status == 0);
    CHECK(first.records[i].start_ps == second.records[i].start_ps);
    CHECK(first.records[i].end_ps == second.records[i].end_ps);
    if (i > 0) CHECK(first.records[i].start_ps >= first.records[i - 1].end_ps);
  }
  CHECK(first.records.back().end_ps > 0);
  CHECK(first.data == second.data);
}

TEST_CASE("timing off: zero timestamps, identical data", "[device][determinism]") {
  auto config = must(sim::load_preset("mtia-v2"));
  const RunResult timed = run_sequence(config);
  config.timing = false;
  const RunResult untimed = run_sequence(config);
  for (const auto& rec : untimed.records) {
    CHECK(rec.status == 0);
    CHECK(rec.start_ps == 0);
    CHECK(rec.end_ps == 0);
  }
  CHECK(untimed.data == timed.data);
  // The data really went through the transpose and the fill.
  uint16_t v;
  std::memcpy(&v, &untimed.data[8], 2);
  CHECK(v == 0x7777);
}

TEST_CASE("device DRAM of 128 GiB is lazy and bounds-checked", "[device][memory]") {
  const uint64_t before = test::rss_bytes();
  Rig rig;
  const uint64_t last = rig.dev->config().dram_bytes - 1;
  const uint8_t x = 0x42;
  REQUIRE(rig.dev->write_memory(last, &x, 1));
  uint8_t y = 0;
  REQUIRE(rig.dev->read_memory(last, &y, 1));
  CHECK(y == 0x42);
  CHECK_FALSE(rig.dev->write_memory(last, &x, 2));
  CHECK_FALSE(rig.dev->read_memory(isa::kSramBase - 4, &y, 8));
  CHECK(rig.dev->write_memory(isa::kLocalStoreBase + 63 * isa::kLocalStoreStride, &x, 1));
  CHECK(test::rss_bytes() < before + (256ull << 20));
}

TEST_CASE("one device at a time; devices open one after another", "[device]") {
  test::HostBuffer host(4096);
  const auto config = must(sim::load_preset("mtia-v1"));
  {
    auto first = must(sim::Device::open(config, host, nullptr));
    const isa::Failure second = mtia::test::failure(sim::Device::open(config, host, nullptr));
    CHECK(second.code == isa::ErrorCode::kDeviceUnavailable);
    CHECK(second.reason.find("another mtia::sim::Device") != std::string::npos);
    CHECK(first->read_register(reg::kDeviceId).ok());
  }
  auto bad = config;
  bad.dma_engines = 0;
  CHECK(mtia::test::failure(sim::Device::open(bad, host, nullptr)).code ==
        isa::ErrorCode::kInvalidArgument);
  for (int i = 0; i < 3; ++i) {
    auto again = must(sim::Device::open(config, host, nullptr));
    CHECK(again->read_register(reg::kNumQueues).value() == config.num_queues);
  }
}

TEST_CASE("write_artifacts writes a Perfetto-readable trace, stats and config", "[device][trace]") {
  const auto dir = temp_dir("artifacts");
  {
    Rig rig;
    fill_pattern(rig.host);
    rig.setup_queue(1);
    rig.submit(
        1, copy(9, 1, 4, 1024, 0, region(kBus, AS::kHost, 4), region(0, AS::kDevice, 4), false));
    rig.submit(1, copy(10, 1, 1, 16, 0, region(0x7FFF'FFFF'FFFF'0000, AS::kDevice, 1),
                       region(0, AS::kDevice, 1)));  // faults
    rig.doorbell(1);
    rig.wait_interrupts(1);
    must(rig.dev->write_artifacts(dir.string()));
  }
  std::ifstream trace_in(dir / "trace.json");
  const auto trace = nlohmann::json::parse(trace_in);
  bool process = false, cp = false, queue1 = false, dma0 = false;
  int packet_slices = 0, dma_slices = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") {
      process = e["args"]["name"] == "mtia-emu device 0 (mtia-v2)";
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      cp = cp || e["args"]["name"] == "command processor";
      queue1 = queue1 || e["args"]["name"] == "queue 1";
      dma0 = dma0 || e["args"]["name"] == "dma 0";
    }
    if (e["ph"] == "X" && e["tid"] == 101) {
      ++packet_slices;
      CHECK(e["args"].contains("seq"));
      CHECK(e["args"].contains("opcode"));
      CHECK(e["args"].contains("status"));
      if (e["args"]["seq"] == 9) {
        // 4 KiB over PCIe: 100 ns + 4096e6/31500 ps (130'032) + 500 ns = 0.730032 us.
        CHECK(e["dur"].get<double>() == Approx(0.730032).margin(1e-9));
        CHECK(e["args"]["status"] == "ok");
      } else {
        CHECK(e["args"]["status"] == "error");
        CHECK(e["args"]["error"] == "device address fault");
      }
    }
    if (e["ph"] == "X" && e["tid"].get<int>() >= 200) {
      ++dma_slices;
      CHECK(e["args"].contains("bytes"));
      CHECK(e["args"].contains("effective_bytes"));
      CHECK(e["args"].contains("dst"));
    }
  }
  CHECK(process);
  CHECK(cp);
  CHECK(queue1);
  CHECK(dma0);
  CHECK(packet_slices == 2);
  CHECK(dma_slices == 2);
  CHECK(trace["otherData"]["dropped_events"] == 0);

  std::ifstream stats_in(dir / "stats.json");
  const auto stats = nlohmann::json::parse(stats_in);
  for (const char* module : {"device", "command_processor", "bridge", "dma0", "pcie_h2d", "dram"}) {
    INFO(module);
    REQUIRE(stats.contains(module));
    for (const auto& [name, stat] : stats[module].items()) {
      INFO(name);
      CHECK(stat.contains("value"));
      CHECK(stat.contains("unit"));
      CHECK(!stat["description"].get<std::string>().empty());
    }
  }
  CHECK(stats["pcie_h2d"]["bytes"]["value"] == 4096);
  CHECK(stats["command_processor"]["packets_failed"]["value"] == 1);

  const auto config = must(sim::load_preset((dir / "config.json").string()));
  CHECK(config.name == "mtia-v2");
  std::filesystem::remove_all(dir);
}

TEST_CASE("an idle device sleeps and its simulated time stands still", "[device]") {
  Rig rig;
  rig.setup_queue(0);
  rig.submit(0, fill(1, 8, 1, 4096, 0));
  rig.doorbell(0);
  rig.wait_interrupts(1);
  const uint64_t sim_before = rig.dev->now_ps();
  CHECK(sim_before > 0);
  timespec cpu0{}, cpu1{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu1);
  const double cpu_ms = (cpu1.tv_sec - cpu0.tv_sec) * 1e3 + (cpu1.tv_nsec - cpu0.tv_nsec) / 1e6;
  // A spinning simulator thread would burn ~1000 ms; the margin absorbs a busy machine's
  // accounting noise (over 100 ms has been seen on a loaded CI box).
  CHECK(cpu_ms < 400);
  CHECK(rig.dev->now_ps() == sim_before);
  // Host reads do not advance simulated time either.
  for (int i = 0; i < 100; ++i) rig.read(reg::queue_reg(0, reg::kQueueCompleted));
  CHECK(rig.dev->now_ps() == sim_before);
}

TEST_CASE("register reads from the interrupt handler are refused instead of hanging", "[device]") {
  test::HostBuffer host(4096);
  std::mutex mu;
  std::condition_variable cv;
  bool called = false;
  std::string reason;
  bool memory_ok = false;
  sim::Device* device = nullptr;
  auto opened = must(sim::Device::open(must(sim::load_preset("mtia-v2")), host, [&](uint64_t) {
    auto r = device->read_register(reg::kDeviceId);
    uint64_t word = 0;
    const bool mem = device->read_memory(0, &word, 8).ok();  // allowed from the handler
    std::lock_guard<std::mutex> lock(mu);
    called = true;
    reason = r.ok() ? "" : r.error().reason;
    memory_ok = mem;
    cv.notify_all();
  }));
  sim::Device& dev = *opened;
  device = &dev;
  dev.write_register(reg::kIntEnable, 1);
  dev.write_register(reg::queue_reg(0, reg::kQueueBase), ring_base(0));
  dev.write_register(reg::queue_reg(0, reg::kQueueSize), kSlots);
  dev.write_register(reg::queue_reg(0, reg::kQueueCompletion), completion_base(0));
  dev.write_register(reg::queue_reg(0, reg::kQueueControl), isa::kQueueEnable);
  uint8_t slot[isa::kPacketSlotBytes];
  isa::encode_packet(nop(1), slot);
  REQUIRE(dev.write_memory(ring_base(0), slot, sizeof slot));
  dev.write_register(reg::queue_reg(0, reg::kQueueTail), 1);
  std::unique_lock<std::mutex> lock(mu);
  REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return called; }));
  CHECK(reason.find("simulator thread") != std::string::npos);
  CHECK(memory_ok);
  lock.unlock();
  CHECK(dev.read_register(reg::kDeviceId).ok());  // and the device still answers
}

TEST_CASE("a failure inside the simulator marks the device lost instead of hanging",
          "[device][lost]") {
  // Host memory whose translation fails as a backend's might: the DMA engine's model process
  // gets an exception it does not expect, and the simulation cannot go on.
  struct FailingHost final : sim::HostMemory {
    uint8_t* translate(uint64_t, uint64_t) override {
      throw std::runtime_error("the host mapping table is corrupt");
    }
  } failing;
  std::promise<std::string> lost;
  auto lost_future = lost.get_future();
  std::string why;
  {
    Rig rig(must(sim::load_preset("mtia-v2")), failing);
    rig.dev->set_lost_handler([&](const std::string& w) { lost.set_value(w); });
    CHECK(rig.dev->lost_reason().empty());
    rig.setup_queue(0);
    rig.submit(0,
               copy(1, 1, 1, 4096, 0, region(kBus, AS::kHost, 1), region(kFence, AS::kDevice, 1)));
    rig.doorbell(0);
    REQUIRE(lost_future.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
    why = lost_future.get();
    CHECK_THAT(why, Catch::Contains("the simulator failed") &&
                        Catch::Contains("the host mapping table is corrupt"));
    CHECK(rig.dev->lost_reason() == why);
    // Every later request fails at once with the cause, instead of waiting for ever.
    auto r = rig.dev->read_register(reg::kDeviceId);
    REQUIRE_FALSE(r.ok());
    CHECK_THAT(r.error().reason, Catch::Contains("the host mapping table is corrupt"));
    // A handler set after the loss is told at once.
    std::string late;
    rig.dev->set_lost_handler([&](const std::string& w) { late = w; });
    CHECK(late == why);
  }  // the lost device closes
  // A new device opens and works.
  Rig rig;
  rig.setup_queue(0);
  rig.submit(0, nop(1));
  rig.doorbell(0);
  rig.wait_interrupts(1);
  CHECK(rig.dev->lost_reason().empty());
}
