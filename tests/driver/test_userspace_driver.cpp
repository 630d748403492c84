// The driver end to end through the in-process backend: the simulator and firmware run the
// packets. Only one device may exist per process, so each test opens and closes its own.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <spdlog/fmt/fmt.h>

#include "mtia/driver/userspace_driver.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/error_record.h"
#include "mtia/isa/registers.h"
#include "must.h"
#include "wrapping_backends.h"

using namespace mtia;
using driver::Completion;
using driver::Device;
using mtia::test::failure;
using mtia::test::must;

namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kMiB = 1ull << 20;

isa::Result<std::unique_ptr<Device>> try_open(const std::string& preset = "mtia-v2",
                                              bool timing = true,
                                              std::vector<std::string> overrides = {}) {
  driver::BackendOptions options;
  options.preset = preset;
  options.timing = timing;
  options.overrides = std::move(overrides);
  return Device::open("inprocess", options);
}

// Through the "tapped" backend, whose registers the test reads (test::TappedBackend::last).
std::unique_ptr<Device> open_tapped(const std::string& preset = "mtia-v2") {
  test::TappedBackend::register_once();
  driver::BackendOptions options;
  options.preset = preset;
  return must(Device::open("tapped", options));
}

std::unique_ptr<Device> open(const std::string& preset = "mtia-v2", bool timing = true,
                             std::vector<std::string> overrides = {}) {
  return must(try_open(preset, timing, std::move(overrides)));
}

isa::NdRegion region(uint64_t addr, isa::AddressSpace space, uint64_t stride0 = 0,
                     uint64_t stride1 = 0) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  r.strides[0] = stride0;
  r.strides[1] = stride1;
  return r;
}

// A contiguous copy of `bytes` (a multiple of 8) as 8-byte elements.
isa::DmaCopyPacket copy(isa::NdRegion src, isa::NdRegion dst, uint64_t bytes) {
  isa::DmaCopyPacket p{};
  p.ndims = 1;
  p.elem_size = 8;
  p.sizes[0] = bytes / 8;
  src.strides[0] = 8;
  dst.strides[0] = 8;
  p.src = src;
  p.dst = dst;
  return p;
}

isa::SignalPacket signal(uint64_t addr, uint64_t value,
                         isa::AddressSpace space = isa::AddressSpace::kDevice) {
  isa::SignalPacket p{};
  p.addr = addr;
  p.space = static_cast<uint8_t>(space);
  p.value = value;
  return p;
}

isa::WaitPacket wait_for(uint64_t addr, uint64_t value) {
  isa::WaitPacket p{};
  p.addr = addr;
  p.value = value;
  p.condition = static_cast<uint8_t>(isa::WaitCondition::kGreaterEqual);
  return p;
}

// A zeroed 8-byte fence in device memory.
uint64_t make_fence(Device& dev) {
  const uint64_t addr = must(dev.allocator().allocate(8));
  const uint64_t zero = 0;
  must(dev.write_memory(addr, &zero, 8));
  return addr;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the in-process backend is registered and unknown names are rejected", "[device]") {
  const auto names = driver::backend_names();
  CHECK(std::find(names.begin(), names.end(), "inprocess") != names.end());
  const isa::Failure unknown = failure(Device::open("no-such-backend", {}));
  CHECK(unknown.code == isa::ErrorCode::kInvalidArgument);
  CHECK(contains(unknown.reason, "unknown device backend 'no-such-backend'"));
  CHECK(contains(unknown.reason, "inprocess"));
  CHECK(failure(try_open("no-such-preset")).code == isa::ErrorCode::kInvalidArgument);
  CHECK(failure(try_open("mtia-v2", true, {"no_such_key=1"})).code ==
        isa::ErrorCode::kInvalidArgument);
}

TEST_CASE("opening a device reads its identity per preset", "[device]") {
  SECTION("mtia-v1") {
    auto dev = open("mtia-v1");
    const auto& info = dev->info();
    CHECK(info.preset_name == "mtia-v1");
    CHECK(info.generation == 1);
    CHECK(info.firmware_version == isa::kFirmwareVersion);
    CHECK(info.num_queues == 8);
    CHECK(info.dram_bytes == 64 * kGiB);
    CHECK(info.sram_bytes == 128 * kMiB);
    CHECK(info.local_store_bytes == 128 * 1024);
    CHECK(info.pe_rows == 8);
    CHECK(info.pe_cols == 8);
    CHECK(info.clock_hz == 800'000'000);
    CHECK(info.dma_engines == 4);
    CHECK(dev->num_queues() == 8);
    CHECK(contains(dev->trace().config_json(), "\"mtia-v1\""));
  }
  SECTION("mtia-v2") {
    auto dev = open("mtia-v2");
    const auto& info = dev->info();
    CHECK(info.preset_name == "mtia-v2");
    CHECK(info.generation == 2);
    CHECK(info.dram_bytes == 128 * kGiB);
    CHECK(info.sram_bytes == 256 * kMiB);
    CHECK(info.local_store_bytes == 384 * 1024);
    CHECK(info.clock_hz == 1'350'000'000);
    // 8 queues x 1024 slots x (256 + 64) bytes = 2.5 MiB of rings, rounded up to 3 MiB.
    const auto s = dev->allocator().stats();
    CHECK(s.free_bytes == 128 * kGiB - 3 * kMiB);
    CHECK(must(dev->allocator().allocate(1)) == 3 * kMiB);
    // The whole remaining DRAM can be allocated in one piece.
    CHECK(failure(dev->allocator().allocate(128 * kGiB)).code == isa::ErrorCode::kOutOfMemory);
  }
  SECTION("overrides reach the device") {
    auto dev = open("mtia-v2", true, {"num_queues=4", "dram_bytes=1073741824"});
    CHECK(dev->info().num_queues == 4);
    CHECK(dev->info().dram_bytes == kGiB);
    CHECK(failure(dev->submit(4, isa::NopPacket{})).code == isa::ErrorCode::kInvalidArgument);
  }
}

TEST_CASE("a NOP makes the round trip with sequence numbers and times", "[device]") {
  auto dev = open("mtia-v2", true, {"cp_packet_ns=500"});
  CHECK(must(dev->last_submitted(0)) == 0);
  const uint64_t s1 = must(dev->submit(0, isa::NopPacket{}));
  const uint64_t s2 = must(dev->submit(0, isa::NopPacket{}));
  CHECK(s1 == 1);
  CHECK(s2 == 2);
  CHECK(must(dev->last_submitted(0)) == 2);
  CHECK(must(dev->last_submitted(1)) == 0);
  const Completion c2 = must(dev->wait(0, s2));
  CHECK(must(dev->is_done(0, s1)));
  const Completion c1 = must(dev->wait(0, s1));
  CHECK(c1.ok);
  CHECK(c2.ok);
  CHECK(c1.seq == 1);
  CHECK(c2.seq == 2);
  CHECK(c1.message.empty());
  // A NOP completes as it is dispatched; the command processor then spends cp_packet_ns
  // (500 ns here) before it dispatches the next packet.
  CHECK(c1.end_ps == c1.start_ps);
  CHECK(c2.start_ps == c1.start_ps + 500'000);
  CHECK(c2.end_ps == c2.start_ps);
  CHECK(dev->trace().now_ps() >= c2.end_ps);

  // Bad queue and sequence numbers are the caller's errors, named as such.
  CHECK(failure(dev->submit(8, isa::NopPacket{})).code == isa::ErrorCode::kInvalidArgument);
  CHECK(failure(dev->wait(8, 1)).code == isa::ErrorCode::kInvalidArgument);
  CHECK_THAT(failure(dev->wait(0, 3)).reason,
             Catch::Contains("seq 3 was never submitted to queue 0"));
  CHECK(failure(dev->wait(0, 0)).code == isa::ErrorCode::kInvalidArgument);
  CHECK(failure(dev->is_done(1, 1)).code == isa::ErrorCode::kInvalidArgument);
}

TEST_CASE("a command buffer's packets are dispatched at the replay cost", "[device][exec_buffer]") {
  auto dev = open("mtia-v2", true, {"cp_packet_ns=500", "cp_replay_packet_ns=100"});
  // Four signals, each writing its number to its own fence, as a command buffer.
  constexpr uint32_t kPackets = 4;
  const uint64_t fences = must(dev->allocator().allocate(8 * kPackets));
  const uint64_t zeros[kPackets] = {};
  must(dev->write_memory(fences, zeros, sizeof zeros));
  // One slot more than the packets, left zero: no packet (for the failure below).
  const uint64_t buffer = must(dev->allocator().allocate((kPackets + 1) * isa::kPacketSlotBytes));
  REQUIRE(buffer % isa::kPacketSlotBytes == 0);
  const std::vector<uint8_t> zero_slot(isa::kPacketSlotBytes, 0);
  must(dev->write_memory(buffer + kPackets * isa::kPacketSlotBytes, zero_slot.data(),
                         zero_slot.size()));
  for (uint32_t i = 0; i < kPackets; ++i) {
    isa::SignalPacket p{};
    p.header.opcode = static_cast<uint8_t>(isa::Opcode::kSignal);
    p.header.version = isa::kPacketVersion;
    p.addr = fences + 8 * i;
    p.value = i + 1;
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(p, slot);
    must(dev->write_memory(buffer + i * isa::kPacketSlotBytes, slot, sizeof slot));
  }
  isa::ExecBufferPacket exec{};
  exec.buffer_addr = buffer;
  exec.packet_count = kPackets;
  const Completion c = must(dev->wait(0, must(dev->submit(0, exec))));
  const Completion after = must(dev->wait(0, must(dev->submit(0, isa::NopPacket{}))));
  REQUIRE(c.ok);
  uint64_t written[kPackets] = {};
  must(dev->read_memory(fences, written, sizeof written));
  for (uint32_t i = 0; i < kPackets; ++i) CHECK(written[i] == i + 1);
  // The ExecBuffer packet's dispatch costs cp_packet_ns (500 ns); each buffer packet's
  // cp_replay_packet_ns (100 ns). A signal completes as it is dispatched, so the buffer's last
  // one completes 500 + 3 x 100 ns after the ExecBuffer packet started, and the ring's next
  // packet starts 100 ns after that.
  CHECK(c.end_ps - c.start_ps == 500'000 + 3 * 100'000);
  CHECK(after.start_ps == c.end_ps + 100'000);

  // A failing buffer packet fails the submission, naming its place in the buffer.
  isa::ExecBufferPacket shifted = exec;
  shifted.buffer_addr = buffer + isa::kPacketSlotBytes;  // its last slot is the zero one
  const Completion bad = must(dev->wait(0, must(dev->submit(0, shifted))));
  CHECK_FALSE(bad.ok);
  CHECK_THAT(bad.message, Catch::Contains("command buffer packet 3 of 4 (illegal)"));
}

TEST_CASE("the backend writes the device's trace, statistics and configuration", "[device]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_driver_test_artifacts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  {
    auto dev = open();
    must(dev->wait(0, must(dev->submit(0, isa::NopPacket{}))));
    must(dev->trace().write_artifacts(dir.string()));
  }
  for (const char* f : {"trace.json", "stats.json", "config.json"}) {
    INFO(f);
    CHECK(std::filesystem::file_size(dir / f) > 0);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("with timing off every packet takes zero simulated time", "[device]") {
  auto dev = open("mtia-v2", /*timing=*/false);
  must(dev->submit(0, isa::NopPacket{}));
  const Completion c = must(dev->wait(0, must(dev->submit(0, isa::NopPacket{}))));
  CHECK(c.ok);
  CHECK(c.start_ps == 0);
  CHECK(c.end_ps == 0);
}

TEST_CASE("DMA copies host -> device -> host through registered host memory", "[device]") {
  auto dev = open();
  const size_t n = 1 << 20;
  std::vector<uint8_t> src = random_bytes(n, 1);
  std::vector<uint8_t> back(n, 0);
  const uint64_t src_bus = must(dev->map_host(src.data(), n));
  const uint64_t back_bus = must(dev->map_host(back.data(), n));
  const uint64_t buf = must(dev->allocator().allocate(n));

  const uint64_t h2d = must(dev->submit(1, copy(region(src_bus, isa::AddressSpace::kHost),
                                                region(buf, isa::AddressSpace::kDevice), n)));
  const Completion c1 = must(dev->wait(1, h2d));
  REQUIRE(c1.ok);
  // Independent check of the device side through the BAR memory window.
  std::vector<uint8_t> on_device(n);
  must(dev->read_memory(buf, on_device.data(), n));
  CHECK(on_device == src);

  const uint64_t d2h = must(dev->submit(1, copy(region(buf, isa::AddressSpace::kDevice),
                                                region(back_bus, isa::AddressSpace::kHost), n)));
  const Completion c2 = must(dev->wait(1, d2h));
  REQUIRE(c2.ok);
  CHECK(back == src);
  // 1 MiB over PCIe at 31.5 GB/s takes at least 33 us of simulated time.
  CHECK(c1.end_ps - c1.start_ps >= 33'000'000);

  must(dev->unmap_host(src_bus));
  must(dev->unmap_host(back_bus));
  must(dev->allocator().free(buf));
}

TEST_CASE("the driver's memory window reads and writes device memory and checks its arguments",
          "[device]") {
  auto dev = open("mtia-v2", false);
  const uint64_t buf = must(dev->allocator().allocate(4096));
  const std::vector<uint8_t> bytes = random_bytes(4096, 11);
  must(dev->write_memory(buf, bytes.data(), bytes.size()));
  std::vector<uint8_t> back(4096, 0);
  must(dev->read_memory(buf, back.data(), back.size()));
  CHECK(back == bytes);
  // A DMA copy of the written bytes reads what the window wrote: both see the same memory.
  std::vector<uint8_t> dma(4096, 0);
  const uint64_t bus = must(dev->map_host(dma.data(), dma.size()));
  REQUIRE(
      must(dev->wait(0, must(dev->submit(0, copy(region(buf, isa::AddressSpace::kDevice),
                                                 region(bus, isa::AddressSpace::kHost), 4096)))))
          .ok);
  must(dev->unmap_host(bus));
  CHECK(dma == bytes);

  must(dev->write_memory(buf, nullptr, 0));  // nothing to do
  must(dev->read_memory(buf, nullptr, 0));
  const isa::Failure null_src = failure(dev->write_memory(buf, nullptr, 8));
  CHECK(null_src.code == isa::ErrorCode::kInvalidArgument);
  CHECK_THAT(null_src.reason, Catch::Contains("host buffer is null"));
  CHECK(failure(dev->read_memory(buf, nullptr, 8)).code == isa::ErrorCode::kInvalidArgument);
  uint64_t word = 0;
  const isa::Failure wraps = failure(dev->read_memory(UINT64_MAX - 3, &word, 8));
  CHECK(wraps.code == isa::ErrorCode::kInvalidArgument);
  CHECK_THAT(wraps.reason, Catch::Contains("past the end of the address space"));
  CHECK(failure(dev->write_memory(dev->info().dram_bytes, &word, 8)).code ==
        isa::ErrorCode::kDeviceAddressFault);
  must(dev->allocator().free(buf));
}

TEST_CASE("alloc_host gives page-aligned host memory the device reaches by DMA", "[device]") {
  auto dev = open("mtia-v2", false);
  const uint64_t n = 5000;  // not a page multiple
  void* p = must(dev->alloc_host(n));
  CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  const std::vector<uint8_t> bytes = random_bytes(n, 12);
  std::memcpy(p, bytes.data(), n);
  const uint64_t bus = must(dev->map_host(p, n));
  const uint64_t buf = must(dev->allocator().allocate(n));
  const uint64_t copied = 4992;  // the copy helper moves 8-byte elements
  REQUIRE(must(dev->wait(
                   0, must(dev->submit(0, copy(region(bus, isa::AddressSpace::kHost),
                                               region(buf, isa::AddressSpace::kDevice), copied)))))
              .ok);
  std::vector<uint8_t> on_device(copied);
  must(dev->read_memory(buf, on_device.data(), copied));
  CHECK(std::equal(on_device.begin(), on_device.end(), bytes.begin()));
  must(dev->unmap_host(bus));
  must(dev->free_host(p));

  CHECK(failure(dev->free_host(p)).code == isa::ErrorCode::kInvalidPointer);  // twice
  uint64_t on_stack = 0;
  const isa::Failure foreign = failure(dev->free_host(&on_stack));
  CHECK(foreign.code == isa::ErrorCode::kInvalidPointer);
  CHECK_THAT(foreign.reason, Catch::Contains("not a live pointer from alloc_host"));
  CHECK(failure(dev->alloc_host(0)).code == isa::ErrorCode::kInvalidArgument);
  CHECK(failure(dev->alloc_host(UINT64_MAX)).code == isa::ErrorCode::kOutOfMemory);
  must(dev->allocator().free(buf));
}

TEST_CASE("fill writes a pattern over a strided region", "[device]") {
  auto dev = open();
  const uint64_t rows = 16, cols = 32, pitch = 256;  // 4-byte elements, 128 of 256 bytes per row
  const uint64_t buf = must(dev->allocator().allocate(rows * pitch));
  std::vector<uint8_t> before = random_bytes(rows * pitch, 2);
  must(dev->write_memory(buf, before.data(), before.size()));

  isa::FillPacket f{};
  f.ndims = 2;
  f.pattern_size = 4;
  f.pattern = 0xDEADBEEF;
  f.sizes[0] = rows;
  f.sizes[1] = cols;
  f.dst = region(buf, isa::AddressSpace::kDevice, pitch, 4);
  REQUIRE(must(dev->wait(2, must(dev->submit(2, f)))).ok);

  std::vector<uint8_t> expected = before;
  const uint32_t pattern = 0xDEADBEEF;
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) std::memcpy(&expected[r * pitch + c * 4], &pattern, 4);
  }
  std::vector<uint8_t> after(rows * pitch);
  must(dev->read_memory(buf, after.data(), after.size()));
  CHECK(after == expected);
}

TEST_CASE("signal and wait order work across two queues", "[device]") {
  auto dev = open();
  const uint64_t fence = make_fence(*dev);
  uint64_t host_fence = 0;
  const uint64_t host_fence_bus = must(dev->map_host(&host_fence, sizeof host_fence));

  // Queue 1 waits for queue 0's signal, then signals the host.
  const uint64_t w = must(dev->submit(1, wait_for(fence, 5)));
  const uint64_t s_host =
      must(dev->submit(1, signal(host_fence_bus, 77, isa::AddressSpace::kHost)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(must(dev->is_done(1, w)));  // held: nothing can satisfy the fence yet
  CHECK(host_fence == 0);

  const uint64_t s1 = must(dev->submit(0, signal(fence, 4)));  // not enough for >= 5
  must(dev->wait(0, s1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(must(dev->is_done(1, w)));

  const uint64_t s2 = must(dev->submit(0, signal(fence, 5)));
  const Completion released = must(dev->wait(1, w));
  const Completion sig = must(dev->wait(0, s2));
  CHECK(released.ok);
  CHECK(released.end_ps >= sig.end_ps);
  CHECK(must(dev->wait(1, s_host)).ok);
  CHECK(host_fence == 77);
  must(dev->unmap_host(host_fence_bus));
}

TEST_CASE("a failing queue reports a clear error, aborts its backlog and recovers", "[device]") {
  auto dev = open();
  const uint64_t dram = dev->info().dram_bytes;
  const uint64_t fence = make_fence(*dev);
  const size_t n = 64 * 1024;
  std::vector<uint8_t> src = random_bytes(n, 3);
  std::vector<uint8_t> back(n, 0);
  const uint64_t src_bus = must(dev->map_host(src.data(), n));
  const uint64_t back_bus = must(dev->map_host(back.data(), n));
  const uint64_t buf = must(dev->allocator().allocate(n));

  // Queue 3 holds on the fence so that the bad copy and its successors are all queued before
  // the failure; queue 4 meanwhile does good work.
  std::vector<Completion> callbacks;
  std::mutex cb_mu;
  auto record = [&](const Completion& c) {
    std::lock_guard lock(cb_mu);
    callbacks.push_back(c);
  };
  const uint64_t held = must(dev->submit(3, wait_for(fence, 1)));
  const uint64_t bad = must(dev->submit(3,
                                        copy(region(src_bus, isa::AddressSpace::kHost),
                                             region(dram - 2048, isa::AddressSpace::kDevice), 4096),
                                        record));
  std::vector<uint64_t> after;
  for (int i = 0; i < 5; ++i) after.push_back(must(dev->submit(3, isa::NopPacket{}, record)));

  const uint64_t good = must(dev->submit(4, copy(region(src_bus, isa::AddressSpace::kHost),
                                                 region(buf, isa::AddressSpace::kDevice), n)));
  REQUIRE(must(dev->wait(4, good)).ok);
  must(dev->submit(4, signal(fence, 1)));

  const Completion failed = must(dev->wait(3, bad));
  CHECK(must(dev->wait(3, held)).ok);
  CHECK_FALSE(failed.ok);
  CHECK_FALSE(failed.aborted);
  CHECK(failed.error == isa::ErrorCode::kDeviceAddressFault);
  CHECK(failed.error_arg0 == dram - 2048);
  CHECK(failed.error_arg1 == 4096);
  CHECK(failed.message ==
        fmt::format("DMA copy (seq {}, packet {} on queue 3) failed: device address fault: 0x{:x} "
                    "+ 4096 bytes is outside device memory",
                    bad, bad - 1, dram - 2048));
  CHECK(failed.reason.empty());  // a DMA fault has its numbers, and no more to say
  CHECK_FALSE(failed.exit_status);
  for (uint64_t seq : after) {
    const Completion c = must(dev->wait(3, seq));
    CHECK_FALSE(c.ok);
    CHECK(c.aborted);
    CHECK(contains(c.message, fmt::format("nop (seq {}", seq)));
    CHECK(contains(c.message, fmt::format("the earlier DMA copy (seq {},", bad)));
  }
  {
    // Callbacks ran for the failure and for every aborted packet, in order.
    std::lock_guard lock(cb_mu);
    REQUIRE(callbacks.size() == 6);
    CHECK(callbacks[0].seq == bad);
    for (size_t i = 0; i < after.size(); ++i) CHECK(callbacks[i + 1].seq == after[i]);
  }

  // The queue was reset: new work on it runs, and sequence numbers keep growing.
  const uint64_t nop = must(dev->submit(3, isa::NopPacket{}));
  CHECK(nop == after.back() + 1);
  CHECK(must(dev->wait(3, nop)).ok);
  const uint64_t d2h = must(dev->submit(3, copy(region(buf, isa::AddressSpace::kDevice),
                                                region(back_bus, isa::AddressSpace::kHost), n)));
  CHECK(must(dev->wait(3, d2h)).ok);
  CHECK(back == src);

  SECTION("malformed packet") {
    isa::FillPacket f{};
    f.ndims = 0;  // no dimensions: rejected by the firmware's decoder
    f.pattern_size = 4;
    f.dst = region(buf, isa::AddressSpace::kDevice);
    const Completion c = must(dev->wait(5, must(dev->submit(5, f))));
    CHECK_FALSE(c.ok);
    CHECK(c.error == isa::ErrorCode::kBadDims);
    CHECK(contains(c.message, "fill (seq 1, packet 0 on queue 5) failed: bad dimensions"));
    // The decoder's reason reached the driver through the queue's error record.
    CHECK(c.reason == "ndims is 0, must be 1..6");
    CHECK(contains(c.message, "failed: bad dimensions: ndims is 0, must be 1..6"));
    CHECK(must(dev->wait(5, must(dev->submit(5, isa::NopPacket{})))).ok);
  }
  SECTION("unregistered host memory") {
    std::vector<uint8_t> unmapped(4096);
    const uint64_t addr = reinterpret_cast<uint64_t>(unmapped.data());
    const Completion c = must(
        dev->wait(6, must(dev->submit(6, copy(region(addr, isa::AddressSpace::kHost),
                                              region(buf, isa::AddressSpace::kDevice), 4096)))));
    CHECK_FALSE(c.ok);
    CHECK(c.error == isa::ErrorCode::kHostAddressFault);
    CHECK(contains(c.message, fmt::format("host address fault: 0x{:x} + ", addr)));
    CHECK(contains(c.message, "not inside host memory registered with map_host"));
    CHECK(must(dev->wait(6, must(dev->submit(6, isa::NopPacket{})))).ok);
  }
  SECTION("a launch whose image is not a kernel ELF") {
    isa::LaunchPacket l{};
    l.image_addr = buf;  // random bytes, not an ELF file
    l.grid_rows = 1;
    l.grid_cols = 1;
    const Completion c = must(dev->wait(7, must(dev->submit(7, l))));
    CHECK_FALSE(c.ok);
    CHECK(c.error == isa::ErrorCode::kBadKernelImage);
    CHECK(c.error_arg0 == buf);
    CHECK(contains(c.message, "launch (seq 1, packet 0 on queue 7) failed: bad kernel image"));
    CHECK(contains(c.reason,
                   fmt::format("kernel image at 0x{:x}: not a little-endian ELF64 file", buf)));
  }
  must(dev->unmap_host(src_bus));
  must(dev->unmap_host(back_bus));
}

TEST_CASE("host memory registration rejects overlaps, empty ranges and unknown unmaps",
          "[device]") {
  auto dev = open("mtia-v2", false);
  std::vector<uint8_t> mem(8192);
  const uint64_t bus = must(dev->map_host(mem.data(), 4096));
  CHECK(bus == reinterpret_cast<uint64_t>(mem.data()));
  CHECK_THAT(failure(dev->map_host(mem.data() + 100, 100)).reason, Catch::Contains("overlaps"));
  CHECK(failure(dev->map_host(mem.data() + 4000, 4096)).code == isa::ErrorCode::kInvalidArgument);
  CHECK_THAT(failure(dev->map_host(mem.data() + 4096, 0)).reason, Catch::Contains("0 bytes"));
  const uint64_t bus2 = must(dev->map_host(mem.data() + 4096, 4096));  // adjacent is fine
  CHECK_THAT(failure(dev->unmap_host(bus + 8)).reason,
             Catch::Contains("not the start of a range registered with map_host"));
  must(dev->unmap_host(bus));
  CHECK(failure(dev->unmap_host(bus)).code == isa::ErrorCode::kInvalidPointer);
  must(dev->unmap_host(bus2));
}

TEST_CASE("many threads submit to several queues at once", "[device]") {
  auto dev = open();
  constexpr int kThreads = 4;
  constexpr int kPackets = 200;
  constexpr uint32_t kQueues = 3;
  const uint64_t slab = must(dev->allocator().allocate(kThreads * kPackets * 64));
  std::atomic<int> callbacks{0};
  std::mutex seq_mu;
  std::map<uint32_t, std::set<uint64_t>> seqs;

  auto worker = [&](int t) {
    std::vector<std::pair<uint32_t, uint64_t>> mine;
    for (int i = 0; i < kPackets; ++i) {
      const uint32_t q = (t + i) % kQueues;
      isa::FillPacket f{};
      f.ndims = 1;
      f.pattern_size = 8;
      f.pattern = static_cast<uint64_t>(t) << 32 | i;
      f.sizes[0] = 8;
      f.dst = region(slab + (t * kPackets + i) * 64, isa::AddressSpace::kDevice, 8);
      mine.emplace_back(q, must(dev->submit(q, f, [&](const Completion&) { ++callbacks; })));
    }
    for (auto [q, s] : mine) REQUIRE(must(dev->wait(q, s)).ok);
    std::lock_guard lock(seq_mu);
    for (auto [q, s] : mine) CHECK(seqs[q].insert(s).second);  // no seq handed out twice
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  CHECK(callbacks == kThreads * kPackets);
  uint64_t total = 0;
  for (auto& [q, s] : seqs) {
    total += s.size();
    CHECK(*s.begin() == 1);
    CHECK(*s.rbegin() == s.size());  // dense: 1..n
    CHECK(must(dev->last_submitted(q)) == s.size());
  }
  CHECK(total == kThreads * kPackets);
  std::vector<uint64_t> words(kThreads * kPackets * 8);
  must(dev->read_memory(slab, words.data(), words.size() * 8));
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kPackets; ++i) {
      for (int k = 0; k < 8; ++k) {
        REQUIRE(words[(t * kPackets + i) * 8 + k] == (static_cast<uint64_t>(t) << 32 | i));
      }
    }
  }
}

TEST_CASE("the ring wraps around and a full ring blocks the submitter", "[device]") {
  auto dev = open("mtia-v2", false);
  const uint64_t fence = make_fence(*dev);
  std::vector<uint64_t> order;
  std::mutex mu;
  auto record = [&](const Completion& c) {
    std::lock_guard lock(mu);
    order.push_back(c.seq);
  };

  // Hold queue 0 and fill its ring: 1 wait + 1023 NOPs occupy all 1024 slots.
  must(dev->submit(0, wait_for(fence, 1), record));
  for (int i = 0; i < 1023; ++i) must(dev->submit(0, isa::NopPacket{}, record));
  auto blocked = std::async(std::launch::async,
                            [&] { return must(dev->submit(0, isa::NopPacket{}, record)); });
  CHECK(blocked.wait_for(std::chrono::milliseconds(100)) == std::future_status::timeout);
  must(dev->submit(1, signal(fence, 1)));
  CHECK(blocked.get() == 1025);

  // Well past the ring size, with waits on only some of the packets.
  uint64_t last = 0;
  for (int i = 0; i < 2000; ++i) last = must(dev->submit(0, isa::NopPacket{}, record));
  CHECK(last == 3025);
  CHECK(must(dev->wait(0, last)).ok);
  for (uint64_t s = 1; s <= last; s += 97) CHECK(must(dev->is_done(0, s)));
  std::lock_guard lock(mu);
  REQUIRE(order.size() == last);
  for (uint64_t i = 0; i < last; ++i) REQUIRE(order[i] == i + 1);  // callbacks in seq order
}

TEST_CASE("submissions racing with queue resets are aborted or run, never lost", "[device]") {
  auto dev = open("mtia-v2", false);
  const uint64_t dram = dev->info().dram_bytes;
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<uint64_t> seqs;
  auto submitter = [&] {
    for (int i = 0; i < 2000 && !stop; ++i) {
      const uint64_t s = must(dev->submit(2, isa::NopPacket{}));
      std::lock_guard lock(mu);
      seqs.push_back(s);
    }
  };
  std::thread a(submitter), b(submitter);
  int failures = 0;
  for (int i = 0; i < 50; ++i) {
    isa::FillPacket f{};
    f.ndims = 1;
    f.pattern_size = 8;
    f.sizes[0] = 1;
    f.dst = region(dram, isa::AddressSpace::kDevice, 8);  // just past DRAM
    const Completion c = must(dev->wait(2, must(dev->submit(2, f))));
    failures += (!c.ok && c.error == isa::ErrorCode::kDeviceAddressFault);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  stop = true;
  a.join();
  b.join();
  CHECK(failures == 50);
  int ok = 0, aborted = 0;
  for (uint64_t s : seqs) {
    const Completion c = must(dev->wait(2, s));
    CHECK((c.ok || c.aborted));
    (c.ok ? ok : aborted) += 1;
  }
  CHECK(ok > 0);
  CHECK(must(dev->wait(2, must(dev->submit(2, isa::NopPacket{})))).ok);
  CHECK(static_cast<size_t>(ok + aborted) == seqs.size());
}

TEST_CASE("closing a device aborts packets that can never complete", "[device]") {
  std::vector<Completion> got;
  {
    auto dev = open();
    const uint64_t fence = make_fence(*dev);
    must(dev->submit(0, wait_for(fence, 1), [&](const Completion& c) { got.push_back(c); }));
    must(dev->submit(0, isa::NopPacket{}, [&](const Completion& c) { got.push_back(c); }));
  }
  REQUIRE(got.size() == 2);
  CHECK(got[0].aborted);
  CHECK(contains(got[0].message, "the device was closed"));
  CHECK(got[1].seq == 2);
}

namespace {

// A fixed multi-queue workload released at one instant, so that every queue starts from the
// same simulated state. Returns each packet's (start, end) simulated times.
//
// Simulated time is deterministic for a given order of doorbells relative to the device's
// progress: a doorbell that lands while the device is busy takes effect at whatever simulated
// time the device has reached. Gating every queue on a fence, and releasing it only once all
// are held, takes the host's thread timing out of the picture.
std::vector<std::pair<uint64_t, uint64_t>> timed_run() {
  auto dev = open_tapped();
  const uint64_t fence = make_fence(*dev);
  const size_t n = 256 * 1024;
  std::vector<uint8_t> src = random_bytes(n, 9);
  std::vector<uint8_t> dst(n);
  const uint64_t src_bus = must(dev->map_host(src.data(), n));
  const uint64_t dst_bus = must(dev->map_host(dst.data(), n));
  const uint64_t a = must(dev->allocator().allocate(n));
  const uint64_t b = must(dev->allocator().allocate(n));

  std::vector<std::pair<uint32_t, uint64_t>> subs;
  for (uint32_t q = 1; q <= 3; ++q) subs.emplace_back(q, must(dev->submit(q, wait_for(fence, 1))));
  for (int i = 0; i < 3; ++i) {
    subs.emplace_back(1, must(dev->submit(1, copy(region(src_bus, isa::AddressSpace::kHost),
                                                  region(a, isa::AddressSpace::kDevice), n))));
    subs.emplace_back(2, must(dev->submit(2, copy(region(a, isa::AddressSpace::kDevice),
                                                  region(b, isa::AddressSpace::kDevice), n))));
    isa::FillPacket f{};
    f.ndims = 2;
    f.pattern_size = 2;
    f.pattern = 0x1234;
    f.sizes[0] = 64;
    f.sizes[1] = 100;
    f.dst = region(b, isa::AddressSpace::kDevice, 4096, 2);
    subs.emplace_back(3, must(dev->submit(3, f)));
    subs.emplace_back(3, must(dev->submit(3, copy(region(b, isa::AddressSpace::kDevice),
                                                  region(dst_bus, isa::AddressSpace::kHost), n))));
  }
  // Release only once every queue holds in its wait, so the firmware sees the same state.
  for (uint32_t q = 1; q <= 3; ++q) {
    while (must(test::TappedBackend::last->read_register(
               isa::reg::queue_reg(q, isa::reg::kQueueHead))) < 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  const Completion release = must(dev->wait(0, must(dev->submit(0, signal(fence, 1)))));
  CHECK(release.start_ps > 0);
  std::vector<std::pair<uint64_t, uint64_t>> times;
  for (auto [q, s] : subs) {
    const Completion c = must(dev->wait(q, s));
    REQUIRE(c.ok);
    times.emplace_back(c.start_ps, c.end_ps);
  }
  must(dev->unmap_host(src_bus));
  must(dev->unmap_host(dst_bus));
  return times;
}

}  // namespace

TEST_CASE("simulated times are the same run after run", "[device]") {
  const auto first = timed_run();
  const auto second = timed_run();
  CHECK(first == second);
  CHECK(first.back().second > first.front().second);  // time did pass
}

TEST_CASE("only one device can be open at a time, and the first stays usable", "[device]") {
  auto dev = open();
  CHECK(failure(try_open()).code == isa::ErrorCode::kDeviceUnavailable);
  CHECK(must(dev->wait(0, must(dev->submit(0, isa::NopPacket{})))).ok);
}

namespace {

// Wraps the in-process backend and disturbs its interrupts the ways hardware may: spurious
// interrupts naming queues with nothing new, and the same interrupt delivered twice.
class NoisyInterrupts final : public test::WrappingBackend {
 public:
  explicit NoisyInterrupts(std::unique_ptr<driver::Backend> inner)
      : WrappingBackend(std::move(inner)) {}

  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    if (!handler) return WrappingBackend::set_interrupt_handler({});
    WrappingBackend::set_interrupt_handler([this, handler](uint64_t mask) {
      const uint64_t r = rng_();      // only the backend's thread calls this
      if (r % 4 == 0) handler(0xFF);  // every queue, most with nothing new
      handler(mask);
      if (r % 3 == 0) handler(mask);
      if (r % 5 == 0) handler(0);
    });
  }

 private:
  std::mt19937_64 rng_{5};
};

}  // namespace

TEST_CASE("spurious and repeated interrupts are harmless", "[device]") {
  static std::once_flag once;
  std::call_once(once, [] {
    must(driver::register_backend(
        "noisy",
        [](const driver::BackendOptions& o) -> isa::Result<std::unique_ptr<driver::Backend>> {
          auto inner = driver::create_backend("inprocess", o);
          if (!inner) return inner.error();
          return std::unique_ptr<driver::Backend>(
              std::make_unique<NoisyInterrupts>(std::move(inner).value()));
        }));
  });
  driver::BackendOptions options;
  options.timing = false;
  auto dev = must(Device::open("noisy", options));
  const uint64_t dram = dev->info().dram_bytes;
  std::atomic<int> callbacks{0};
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint64_t> seqs;
      for (int i = 0; i < 300; ++i) {
        seqs.push_back(
            must(dev->submit(t, isa::NopPacket{}, [&](const Completion&) { ++callbacks; })));
      }
      for (uint64_t s : seqs) REQUIRE(must(dev->wait(t, s)).ok);
    });
  }
  for (auto& th : threads) th.join();
  CHECK(callbacks == 900);  // each exactly once

  isa::FillPacket bad{};
  bad.ndims = 1;
  bad.pattern_size = 8;
  bad.sizes[0] = 1;
  bad.dst = region(dram, isa::AddressSpace::kDevice, 8);
  const Completion c = must(dev->wait(0, must(dev->submit(0, bad))));
  CHECK(c.error == isa::ErrorCode::kDeviceAddressFault);
  CHECK(must(dev->wait(0, must(dev->submit(0, isa::NopPacket{})))).ok);
}

TEST_CASE("every queue has its own error record in the driver's region", "[device]") {
  auto dev = open_tapped("mtia-v1");
  const uint64_t heap = must(dev->allocator().allocate(256));  // the lowest address users get
  std::set<uint64_t> records;
  for (uint32_t q = 0; q < dev->num_queues(); ++q) {
    const uint64_t addr = must(test::TappedBackend::last->read_register(
        isa::reg::queue_reg(q, isa::reg::kQueueErrorRecord)));
    INFO("queue " << q << " error record at 0x" << std::hex << addr);
    CHECK(addr % isa::kErrorRecordAlign == 0);
    CHECK(addr + isa::kErrorRecordBytes <= heap);  // in the driver's region
    records.insert(addr);
  }
  CHECK(records.size() == dev->num_queues());
  for (auto it = records.begin(); std::next(it) != records.end(); ++it) {
    CHECK(*std::next(it) - *it >= isa::kErrorRecordBytes);
  }
  must(dev->allocator().free(heap));
}

TEST_CASE("a lost device fails what is in flight, wakes its waiters and refuses new work",
          "[device][lost]") {
  test::LosingBackend::register_once();
  driver::BackendOptions options;
  options.timing = false;
  {
    auto dev = must(Device::open("losing", options));
    REQUIRE(test::LosingBackend::last != nullptr);
    CHECK(must(dev->wait(0, must(dev->submit(0, isa::NopPacket{})))).ok);
    CHECK(dev->lost_reason().empty());

    test::LosingBackend::last->silence();
    std::vector<Completion> called;
    std::mutex called_mu;
    std::vector<uint64_t> seqs;
    for (uint32_t q = 0; q < 2; ++q) {
      for (int i = 0; i < 3; ++i) {
        seqs.push_back(must(dev->submit(q, isa::NopPacket{}, [&](const Completion& c) {
          std::lock_guard lock(called_mu);
          called.push_back(c);
        })));
      }
    }
    // A thread waits for the last packet of queue 1, which will never complete by itself.
    auto waiter = std::async(std::launch::async, [&] { return must(dev->wait(1, seqs.back())); });
    CHECK(waiter.wait_for(std::chrono::milliseconds(200)) == std::future_status::timeout);

    test::LosingBackend::last->lose("the simulator failed: out of host memory");
    REQUIRE(waiter.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    const Completion c = waiter.get();
    CHECK_FALSE(c.ok);
    CHECK(c.lost);
    CHECK_THAT(c.message, Catch::Contains("the device was lost: the simulator failed: out of "
                                          "host memory"));
    CHECK(called.size() == 6);  // every callback ran, each once, failed and lost
    for (const Completion& k : called) CHECK((!k.ok && k.lost));
    CHECK(must(dev->wait(0, seqs.front())).lost);
    CHECK(dev->lost_reason() == "the simulator failed: out of host memory");
    const isa::Failure refused = failure(dev->submit(0, isa::NopPacket{}));
    CHECK(refused.code == isa::ErrorCode::kDeviceLost);
    CHECK_THAT(refused.reason, Catch::Contains("the device was lost: the simulator failed"));
    uint64_t word = 0;
    const isa::Failure window = failure(dev->read_memory(isa::kDramBase, &word, 8));
    CHECK(window.code == isa::ErrorCode::kDeviceLost);
    CHECK_THAT(window.reason, Catch::Contains("the simulator failed: out of host memory"));
    CHECK(failure(dev->write_memory(isa::kDramBase, &word, 8)).code == isa::ErrorCode::kDeviceLost);
  }                   // a lost device closes
  auto dev = open();  // and a new one works
  CHECK(must(dev->wait(0, must(dev->submit(0, isa::NopPacket{})))).ok);
  CHECK(dev->lost_reason().empty());
}
