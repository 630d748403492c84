// Kernel launches on the SystemC device: the clang-built smoke kernel (kernels/src/smoke.c,
// out[i] = in[i] + 1 over int32, chunks of 256 per PE) through LaunchPacket, with results
// checked against the definition, a hand-computed time bound, faults and the watchdog.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "host_buffer.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/pe/pe_ops.h"
#include "mtia/isa/registers.h"
#include "mtia/sim/emulated_device.h"
#include "must.h"

using mtia::test::must;

namespace isa = mtia::isa;
namespace sim = mtia::sim;
namespace reg = isa::reg;

namespace {

constexpr uint64_t kSlots = 64;
constexpr uint64_t kImage = 0x800'0000;
constexpr uint64_t kArgs = 0x900'0000;
constexpr uint64_t kIn = 0xA00'0000;
constexpr uint64_t kOut = 0xB00'0000;

uint64_t ring_base(uint32_t q) {
  return 0x100'0000 + q * 0x10'0000;
}
uint64_t completion_base(uint32_t q) {
  return 0x200'0000 + q * 0x1'0000;
}

std::vector<uint8_t> smoke_elf() {
  std::ifstream in(MTIA_SMOKE_KERNEL_ELF, std::ios::binary);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct Rig {
  test::HostBuffer host{1 << 20};
  std::mutex mu;
  std::condition_variable cv;
  uint64_t interrupts = 0;
  uint64_t tail[isa::kMaxQueues] = {};
  std::unique_ptr<sim::Device> dev;

  explicit Rig(sim::ChipConfig config) {
    dev = must(sim::Device::open(config, host, [this](uint64_t) {
      std::lock_guard<std::mutex> lock(mu);
      ++interrupts;
      cv.notify_all();
    }));
    dev->write_register(reg::kIntEnable, ~uint64_t{0});
    const auto elf = smoke_elf();
    REQUIRE(dev->write_memory(kImage, elf.data(), elf.size()));
  }
  void setup_queue(uint32_t q) {
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
    dev->write_register(reg::queue_reg(q, reg::kQueueTail), tail[q]);
  }
  void wait_interrupts(uint64_t count) {
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return interrupts >= count; }));
  }
  isa::CompletionRecord record(uint32_t q, uint64_t index) {
    uint8_t raw[isa::kCompletionRecordBytes];
    REQUIRE(dev->read_memory(completion_base(q) + (index % kSlots) * sizeof raw, raw, sizeof raw));
    auto rec = isa::decode_completion(raw, sizeof raw);
    REQUIRE(rec.ok());
    return rec.value();
  }
  // The smoke kernel's arguments: in, out, n (uint32) + reserved.
  void write_args(uint64_t in, uint64_t out, uint32_t n, uint64_t at = kArgs) {
    uint8_t a[24] = {};
    std::memcpy(a, &in, 8);
    std::memcpy(a + 8, &out, 8);
    std::memcpy(a + 16, &n, 4);
    REQUIRE(dev->write_memory(at, a, sizeof a));
  }
  void write_input(uint32_t n) {
    std::vector<int32_t> v(n);
    for (uint32_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i * 7) - 500;
    REQUIRE(dev->write_memory(kIn, v.data(), 4ull * n));
    std::vector<uint8_t> poison(4ull * n + 64, 0xcd);
    REQUIRE(dev->write_memory(kOut, poison.data(), poison.size()));
  }
  void check_output(uint32_t n) {
    std::vector<int32_t> v(n + 1);
    REQUIRE(dev->read_memory(kOut, v.data(), 4ull * (n + 1)));
    for (uint32_t i = 0; i < n; ++i) {
      INFO("element " << i);
      REQUIRE(v[i] == static_cast<int32_t>(i * 7) - 500 + 1);
    }
    CHECK(static_cast<uint32_t>(v[n]) == 0xcdcdcdcdu);  // nothing written past the end
  }
};

isa::LaunchPacket launch(uint64_t seq, uint16_t rows, uint16_t cols, uint32_t args_bytes = 24,
                         uint64_t watchdog = 0) {
  isa::LaunchPacket p{};
  p.header = {static_cast<uint8_t>(isa::Opcode::kLaunch), isa::kPacketVersion,
              isa::kPacketInterrupt, 0, seq};
  p.image_addr = kImage;
  p.entry_offset = 0;  // crt0's _start is the first word of the image
  p.args_addr = kArgs;
  p.args_bytes = args_bytes;
  p.grid_rows = rows;
  p.grid_cols = cols;
  p.watchdog_cycles = watchdog;
  return p;
}

constexpr auto kOk = static_cast<uint16_t>(isa::CompletionStatus::kOk);

}  // namespace

TEST_CASE("the smoke kernel runs on the device's PE grid and computes in + 1", "[launch][pe]") {
  const uint16_t rows = GENERATE(1, 2, 8);
  const uint16_t cols = GENERATE(1, 4, 8);
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  const uint32_t n = 5000;  // 20 chunks: not a multiple of the PE count
  rig.write_input(n);
  rig.write_args(kIn, kOut, n);
  rig.submit(0, launch(7, rows, cols));
  rig.wait_interrupts(1);
  const auto rec = rig.record(0, 0);
  INFO("grid " << rows << "x" << cols << ", error " << rec.error);
  REQUIRE(rec.status == kOk);
  CHECK(rec.seq == 7);
  CHECK(rec.opcode == uint8_t(isa::Opcode::kLaunch));
  CHECK(rec.end_ps > rec.start_ps);
  rig.check_output(n);
}

TEST_CASE("a one-PE, one-chunk launch takes the hand-computed DMA and SE time",
          "[launch][pe][timing]") {
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  rig.write_input(256);
  rig.write_args(kIn, kOut, 256);
  rig.submit(0, launch(1, 1, 1));
  rig.wait_interrupts(1);
  const auto rec = rig.record(0, 0);
  REQUIRE(rec.status == kOk);
  rig.check_output(256);
  // mtia-v2, 1.35 GHz. DMA of 1 KiB DRAM <-> local store: 100 ns setup + max(1024 B /
  // 204.8 GB/s = 5000 ps, 1024 B / 2700 GB/s) + max(100 ns, 20 ns) latency = 205'000 ps,
  // twice (in, out), serialised by the kernel's waits; the local-store port (1 TB/s) takes
  // 1024 ps of it. SE int32 add of 256: 64 lanes (the 256-byte vector holds 64 int32, the lane
  // limit is 64), 4 vectors x 1 cycle + 8 issue = 12 cycles = 8'889 ps.
  const uint64_t units = 2 * 205'000 + 8'889;
  // The core's own instructions come on top (the runtime's byte-wise memset of the
  // descriptors dominates): each costs 1..3 cycles here (no DIV in this kernel), and only the
  // few between an issue and its wait overlap the units.
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  const uint64_t instret = stats["pe_grid"]["instructions"]["value"];
  const uint64_t cycles = stats["pe_grid"]["pe_cycles"]["value"];
  const uint64_t took = rec.end_ps - rec.start_ps;
  INFO("launch took " << took << " ps, " << cycles << " cycles, " << instret << " instructions");
  // The launch lasts exactly the PE's cycles at 1.35 GHz (rounded up to a picosecond).
  CHECK(took == (cycles * 1'000'000'000'000ull + 1'349'999'999) / 1'350'000'000);
  CHECK(took >= units + (instret - 20) * 740);
  CHECK(took <= units + 3 * instret * 741);
}

TEST_CASE("with timing off a launch computes the same and takes no time", "[launch][pe]") {
  auto config = must(sim::load_preset("mtia-v2"));
  config.timing = false;
  Rig rig(config);
  rig.setup_queue(0);
  rig.write_input(3000);
  rig.write_args(kIn, kOut, 3000);
  rig.submit(0, launch(1, 2, 2));
  rig.wait_interrupts(1);
  const auto rec = rig.record(0, 0);
  REQUIRE(rec.status == kOk);
  CHECK(rec.start_ps == 0);
  CHECK(rec.end_ps == 0);
  rig.check_output(3000);
}

TEST_CASE("launch faults fail only their queue, with the PE and pc", "[launch][pe][fault]") {
  Rig rig(must(sim::load_preset("mtia-v1")));
  rig.setup_queue(0);
  rig.setup_queue(1);
  uint16_t want_error = 0;
  uint64_t want_pe = 0;
  SECTION("a DMA from outside device memory (bad pointer argument)") {
    rig.write_args(0xFFFF'0000'0000ull, kOut, 1000);
    rig.submit(0, launch(1, 1, 4));
    want_error = uint16_t(isa::ErrorCode::kKernelFault);
    want_pe = 0;  // the first PE in round-robin order faults first
  }
  SECTION("a short argument block: the kernel exits with status 1") {
    rig.write_args(kIn, kOut, 1000);
    rig.submit(0, launch(1, 1, 1, /*args_bytes=*/8));
    want_error = uint16_t(isa::ErrorCode::kKernelFault);
  }
  SECTION("a watchdog limit the kernel cannot meet") {
    rig.write_args(kIn, kOut, 1000);
    rig.submit(0, launch(1, 1, 2, 24, /*watchdog=*/100));
    want_error = uint16_t(isa::ErrorCode::kWatchdog);
  }
  SECTION("an image that is not an ELF file") {
    const uint8_t junk[64] = {1, 2, 3};
    REQUIRE(rig.dev->write_memory(kImage, junk, sizeof junk));
    rig.write_args(kIn, kOut, 1000);
    rig.submit(0, launch(1, 1, 1));
    want_error = uint16_t(isa::ErrorCode::kBadKernelImage);
  }
  rig.wait_interrupts(1);
  const auto rec = rig.record(0, 0);
  CHECK(rec.status == uint16_t(isa::CompletionStatus::kError));
  CHECK(rec.error == want_error);
  if (want_error != uint16_t(isa::ErrorCode::kBadKernelImage)) {
    CHECK(rec.error_arg0 >= MTIA_PE_IMAGE_BASE);  // a pc inside the image
    CHECK(rec.error_arg0 < MTIA_PE_IMAGE_BASE + MTIA_PE_IMAGE_MAX_BYTES);
    CHECK(rec.error_arg1 == want_pe);
  } else {
    CHECK(rec.error_arg0 == kImage);
  }
  CHECK(rig.dev->read_register(reg::queue_reg(0, reg::kQueueState)).value() ==
        uint64_t(isa::QueueState::kError));

  // Another queue launches the (restored) kernel and succeeds.
  const auto elf = smoke_elf();
  REQUIRE(rig.dev->write_memory(kImage, elf.data(), elf.size()));
  rig.write_input(1000);
  rig.write_args(kIn, kOut, 1000, kArgs + 0x100);
  auto good = launch(2, 2, 2);
  good.args_addr = kArgs + 0x100;
  rig.submit(1, good);
  rig.wait_interrupts(2);
  CHECK(rig.record(1, 0).status == kOk);
  rig.check_output(1000);
}

TEST_CASE("launches on two queues run one after the other, each correct", "[launch][pe]") {
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  rig.setup_queue(1);
  rig.write_input(2048);
  rig.write_args(kIn, kOut, 1024);
  rig.write_args(kIn + 4096, kOut + 4096, 1024, kArgs + 0x100);
  auto second = launch(2, 1, 4);
  second.args_addr = kArgs + 0x100;
  rig.submit(0, launch(1, 1, 4));
  rig.submit(1, second);
  rig.wait_interrupts(2);
  const auto a = rig.record(0, 0), b = rig.record(1, 0);
  REQUIRE(a.status == kOk);
  REQUIRE(b.status == kOk);
  // One launch at a time: the intervals do not overlap.
  CHECK((a.end_ps <= b.start_ps || b.end_ps <= a.start_ps));
  rig.check_output(2048);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  CHECK(stats["pe_grid"]["launches"]["value"] == 2);
  CHECK(stats["pe_grid"]["program_loads"]["value"] == 1);    // the second reused the decode
  CHECK(stats["pe_grid"]["dma_ops"]["value"] == 2 * 2 * 4);  // 8 chunks, in + out each

  // The trace has a track per launch PE with the kernel's span and its unit operations.
  const auto dir =
      std::filesystem::temp_directory_path() / ("mtia_launch_trace_" + std::to_string(::getpid()));
  must(rig.dev->write_artifacts(dir.string()));
  std::ifstream in(dir / "trace.json");
  const auto trace = nlohmann::json::parse(in);
  int kernels = 0, dmas = 0, ses = 0;
  bool named = false;
  for (const auto& e : trace["traceEvents"]) {
    // Not every event has a tid (process metadata does not): read it with a default.
    const int tid = e.value("tid", -1);
    if (e["ph"] == "M" && tid == 300 && e["args"].value("name", "") == "pe 0") named = true;
    if (e["ph"] != "X" || tid < 300) continue;
    kernels += e["name"] == "kernel";
    dmas += e["name"] == "dma";
    ses += e["name"] == "se";
  }
  std::filesystem::remove_all(dir);
  CHECK(named);
  CHECK(kernels == 2 * 4);  // two launches of 4 PEs
  CHECK(dmas == 2 * 2 * 4);
  CHECK(ses == 2 * 4);
}

// The file offset of the image byte at PE address `vaddr`, from the ELF64 program headers
// (read here independently of the simulator's ELF reader).
uint64_t file_offset_of(const std::vector<uint8_t>& elf, uint64_t vaddr) {
  const auto rd64 = [&](uint64_t at) {
    uint64_t v;
    std::memcpy(&v, elf.data() + at, 8);
    return v;
  };
  const uint64_t phoff = rd64(32);
  uint16_t phnum;
  std::memcpy(&phnum, elf.data() + 56, 2);
  for (uint16_t i = 0; i < phnum; ++i) {
    const uint64_t ph = phoff + 56ull * i;
    uint32_t type;
    std::memcpy(&type, elf.data() + ph, 4);
    const uint64_t off = rd64(ph + 8), va = rd64(ph + 16), filesz = rd64(ph + 32);
    if (type == 1 && vaddr >= va && vaddr - va < filesz) return off + (vaddr - va);
  }
  FAIL("no loaded segment holds " << vaddr);
  return 0;
}

TEST_CASE("a kernel image rewritten in device memory runs as rewritten, not from the decode cache",
          "[launch][pe]") {
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  rig.setup_queue(1);
  rig.write_input(1000);
  rig.write_args(kIn, kOut, 1000);
  rig.submit(0, launch(1, 1, 2));
  rig.wait_interrupts(1);
  REQUIRE(rig.record(0, 0).status == kOk);
  rig.check_output(1000);

  // The entry's instruction word (crt0's first) becomes 0, which is no instruction: the next
  // launch of the same image address must fault there.
  const auto elf = smoke_elf();
  const uint64_t entry_word = kImage + file_offset_of(elf, MTIA_PE_IMAGE_BASE);
  uint32_t original = 0;
  REQUIRE(rig.dev->read_memory(entry_word, &original, 4));
  REQUIRE(original != 0);
  const uint32_t zero = 0;
  REQUIRE(rig.dev->write_memory(entry_word, &zero, 4));
  rig.submit(0, launch(2, 1, 2));
  rig.wait_interrupts(2);
  const auto faulted = rig.record(0, 1);
  CHECK(faulted.status == uint16_t(isa::CompletionStatus::kError));
  CHECK(faulted.error == uint16_t(isa::ErrorCode::kKernelFault));
  CHECK(faulted.error_arg0 == MTIA_PE_IMAGE_BASE);

  // Restored, it runs again (queue 0 stays in its error state; queue 1 launches).
  REQUIRE(rig.dev->write_memory(entry_word, &original, 4));
  rig.write_input(1000);
  auto again = launch(1, 1, 2);
  rig.submit(1, again);
  rig.wait_interrupts(3);
  REQUIRE(rig.record(1, 0).status == kOk);
  rig.check_output(1000);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  CHECK(stats["pe_grid"]["program_loads"]["value"] == 3);  // every change decoded anew
}

// The same rewrite by the two DMA engines that write DRAM: the host DMA engine (a fill packet)
// and a PE's own DMA (the smoke kernel writing in[0] + 1 = 0 over the entry word).
TEST_CASE("a kernel image rewritten by a DMA runs as rewritten", "[launch][pe]") {
  const bool by_pe = GENERATE(false, true);
  INFO((by_pe ? "PE DMA" : "host DMA engine"));
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  rig.setup_queue(1);
  rig.write_input(1000);
  rig.write_args(kIn, kOut, 1000);
  rig.submit(0, launch(1, 1, 2));
  rig.wait_interrupts(1);
  REQUIRE(rig.record(0, 0).status == kOk);
  rig.check_output(1000);

  const uint64_t entry_word = kImage + file_offset_of(smoke_elf(), MTIA_PE_IMAGE_BASE);
  uint32_t original = 0;
  REQUIRE(rig.dev->read_memory(entry_word, &original, 4));
  REQUIRE(original != 0);
  if (by_pe) {
    const int32_t minus_one = -1;
    REQUIRE(rig.dev->write_memory(kIn, &minus_one, 4));
    rig.write_args(kIn, entry_word, 1);
    rig.submit(0, launch(2, 1, 1));
  } else {
    isa::FillPacket fill{};
    fill.header = {static_cast<uint8_t>(isa::Opcode::kFill), isa::kPacketVersion,
                   isa::kPacketInterrupt, 0, 2};
    fill.ndims = 1;
    fill.pattern_size = 4;
    fill.pattern = 0;
    fill.sizes[0] = 1;
    fill.dst.addr = entry_word;
    fill.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
    fill.dst.strides[0] = 4;
    rig.submit(0, fill);
  }
  rig.wait_interrupts(2);
  REQUIRE(rig.record(0, 1).status == kOk);
  uint32_t now = 1;
  REQUIRE(rig.dev->read_memory(entry_word, &now, 4));
  REQUIRE(now == 0);

  rig.write_args(kIn, kOut, 1000);
  rig.submit(0, launch(3, 1, 2));
  rig.wait_interrupts(3);
  const auto faulted = rig.record(0, 2);
  CHECK(faulted.status == uint16_t(isa::CompletionStatus::kError));
  CHECK(faulted.error == uint16_t(isa::ErrorCode::kKernelFault));
  CHECK(faulted.error_arg0 == MTIA_PE_IMAGE_BASE);

  REQUIRE(rig.dev->write_memory(entry_word, &original, 4));
  rig.write_input(1000);
  rig.submit(1, launch(4, 1, 2));
  rig.wait_interrupts(4);
  REQUIRE(rig.record(1, 0).status == kOk);
  rig.check_output(1000);
}

TEST_CASE("simulation rate of the smoke kernel on 64 PEs", "[.][perf][launch]") {
  Rig rig(must(sim::load_preset("mtia-v2")));
  rig.setup_queue(0);
  const uint32_t n = 4 << 20;  // 16 MiB of int32
  std::vector<int32_t> in(n, 3);
  REQUIRE(rig.dev->write_memory(kIn, in.data(), 4ull * n));
  rig.write_args(kIn, kIn + 4ull * n, n);
  const auto t0 = std::chrono::steady_clock::now();
  rig.submit(0, launch(1, 8, 8));
  rig.wait_interrupts(1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto rec = rig.record(0, 0);
  REQUIRE(rec.status == kOk);
  const auto stats = nlohmann::json::parse(must(rig.dev->stats_json()));
  const double pe_cycles = stats["pe_grid"]["pe_cycles"]["value"].get<double>();
  const double device_cycles = double(rec.end_ps - rec.start_ps) * 1.35e9 / 1e12;
  WARN("64 PEs: " << s << " s wall, " << device_cycles << " device cycles ("
                  << device_cycles / s / 1e6 << " M device cycles/s), " << pe_cycles / s / 1e6
                  << " M PE cycles/s, "
                  << stats["pe_grid"]["instructions"]["value"].get<double>() / s / 1e6
                  << " M instructions/s, " << stats["pe_grid"]["systemc_syncs"]["value"]
                  << " SystemC waits");
}
