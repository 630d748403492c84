// Link transfers through the public API (Device::link_send, link_receive_async): the bytes
// arrive (against the bytes sent), each transfer's simulated time in the trace equals the
// hand-computed latency + bytes / bandwidth of docs/architecture.md ("Inter-chip links"),
// transfers on one link direction run one after the other, a receive waits for its bytes, and
// bad arguments are refused with clear errors.
//
// The device here: link 10 GB/s (10'000 MB/s) per direction, 2 us latency, DMA setup 100 ns.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>
#include <nlohmann/json.hpp>

#include "device_helpers.h"

using namespace mtia;
using Json = nlohmann::json;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kSetup = 100'000;        // ps
constexpr uint64_t kLatency = 2'000'000;    // ps
constexpr uint64_t kBusyMiB = 104'857'600;  // 1048576e6 / 10000 ps, exact

DeviceOptions link_options() {
  DeviceOptions o;
  o.overrides = {"link_bandwidth_GBps=10", "link_latency_ns=2000", "dma_setup_ns=100"};
  o.trace = TraceLevel::kKernels;
  return o;
}

// The trace's link slices in time order.
std::vector<Json> link_slices(Device& dev, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("mtia_link_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  dev.write_artifacts(dir.string());
  std::ifstream in(dir / "trace.json");
  REQUIRE(in);
  const Json trace = Json::parse(in);
  std::filesystem::remove_all(dir);
  std::vector<Json> out;
  for (const Json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e.value("cat", "") == "link") out.push_back(e);
    // The packet on its queue's track is named for what it is.
    if (e["ph"] == "X" && e.value("cat", "") == "packet" &&
        e["args"].value("opcode", "") == "link transfer") {
      CHECK(e["name"] == "link transfer");
    }
  }
  return out;
}

uint64_t ps(const Json& us) {
  return static_cast<uint64_t>(std::llround(us.get<double>() * 1e6));
}

uint64_t packet_ps(const Json& slice) {
  return slice["args"]["packet_end_ps"].get<uint64_t>() -
         slice["args"]["packet_start_ps"].get<uint64_t>();
}

struct Pinned {
  Device& dev;
  void* p;
  Pinned(Device& d, size_t bytes) : dev(d), p(d.host_alloc(bytes)) {}
  ~Pinned() { dev.host_free(p); }
  uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
};

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u + seed) >> 13);
  return v;
}

}  // namespace

TEST_CASE("a link send and receive move the bytes in latency + bytes / bandwidth",
          "[link][host_api]") {
  Device dev = Device::open(link_options());
  const auto data = pattern(kMiB, 1);
  DevicePtr src = test::upload(dev, data);
  DevicePtr dst = dev.malloc(kMiB);
  Pinned staging(dev, kMiB);

  const uint64_t sent = dev.link_send(staging.p, src, kMiB, 0, 1);
  CHECK(std::memcmp(staging.bytes(), data.data(), kMiB) == 0);
  dev.link_receive_async(dst, staging.p, kMiB, 0, 1, sent);
  dev.synchronize();
  CHECK(test::download<uint8_t>(dev, dst, kMiB) == data);

  const auto links = link_slices(dev, "send_receive");
  REQUIRE(links.size() == 2);
  const Json& send = links[0];
  const Json& recv = links[1];
  CHECK(send["name"] == "link send");
  CHECK(send["tid"] == 260);  // link 0 send
  CHECK(send["args"]["peer"] == 1);
  CHECK(send["args"]["bytes"] == kMiB);
  CHECK(send["args"]["busy_ps"] == kBusyMiB);
  // On the link: bytes / bandwidth on its direction, arriving a latency later; the packet
  // adds its DMA setup.
  CHECK(ps(send["dur"]) == kBusyMiB);
  CHECK(ps(send["ts"]) == sent + kSetup);
  CHECK(send["args"]["arrival_ps"] == sent + kSetup + kBusyMiB + kLatency);
  CHECK(send["args"]["latency_ps"] == kLatency);
  CHECK(send["args"]["packet_start_ps"] == sent);
  CHECK(packet_ps(send) == kSetup + kBusyMiB + kLatency);
  // The receive's bytes crossed while the send ran (one transfer seen from both ends); they
  // had arrived when it was queued, so it costs only its setup.
  CHECK(recv["name"] == "link receive");
  CHECK(recv["tid"] == 261);
  CHECK(ps(recv["ts"]) == sent + kSetup);
  CHECK(ps(recv["dur"]) == kBusyMiB);
  CHECK(recv["args"]["arrival_ps"] == sent + kSetup + kBusyMiB + kLatency);
  CHECK(packet_ps(recv) == kSetup);
  dev.free(src);
  dev.free(dst);
}

TEST_CASE("a link receive completes no earlier than its bytes arrive", "[link][host_api]") {
  Device dev = Device::open(link_options());
  const auto data = pattern(kMiB, 2);
  DevicePtr dst = dev.malloc(kMiB);
  Pinned staging(dev, kMiB);
  std::memcpy(staging.p, data.data(), kMiB);
  const uint64_t sent = dev.now_ps() + 1'000'000'000;  // the peer sends 1 ms from now
  dev.link_receive_async(dst, staging.p, kMiB, 0, 3, sent);
  dev.synchronize();
  CHECK(dev.now_ps() >= sent + kSetup + kBusyMiB + kLatency);
  CHECK(test::download<uint8_t>(dev, dst, kMiB) == data);
  const auto links = link_slices(dev, "late");
  REQUIRE(links.size() == 1);
  CHECK(links[0]["args"]["peer"] == 3);
  CHECK(links[0]["args"]["packet_end_ps"] == sent + kSetup + kBusyMiB + kLatency);
  dev.free(dst);
}

TEST_CASE("link transfers on one direction run one after the other", "[link][host_api]") {
  Device dev = Device::open(link_options());
  Stream a = dev.create_stream(), b = dev.create_stream();
  REQUIRE(dev.hardware_queue(a) != dev.hardware_queue(b));
  DevicePtr dst = dev.malloc(2 * kMiB);
  Pinned staging(dev, 2 * kMiB);
  test::Gate gate(dev);
  gate.hold(a);
  gate.hold(b);
  const uint64_t sent = dev.now_ps() + 1'000'000'000;
  dev.link_receive_async(dst, staging.p, kMiB, 0, 1, sent, a);
  dev.link_receive_async(dst + kMiB, staging.bytes() + kMiB, kMiB, 0, 1, sent, b);
  gate.open();
  dev.synchronize();
  const auto links = link_slices(dev, "serialise");
  REQUIRE(links.size() == 2);
  const uint64_t first = ps(links[0]["ts"]), second = ps(links[1]["ts"]);
  CHECK(first == sent + kSetup);
  CHECK(second == first + kBusyMiB);  // the second waits for the first's bytes
  CHECK(links[1]["args"]["packet_end_ps"] == sent + kSetup + 2 * kBusyMiB + kLatency);
  dev.free(dst);
  dev.destroy_stream(a);
  dev.destroy_stream(b);
}

TEST_CASE("link transfers refuse bad arguments with clear errors", "[link][host_api]") {
  Device dev = Device::open(link_options());
  DevicePtr buf = dev.malloc(4096);
  Pinned staging(dev, 8192);
  using test::expect_error;
  expect_error(ErrorKind::kInvalidArgument, "0 bytes is not within 1..",
               [&] { dev.link_send(staging.p, buf, 0, 0, 1); });
  expect_error(ErrorKind::kInvalidArgument, "is not within 1..", [&] {
    dev.link_receive_async(buf, staging.p, isa::kMaxLinkTransferBytes + 1, 0, 1, 0);
  });
  expect_error(ErrorKind::kInvalidArgument, "is past the latest simulated time",
               [&] { dev.link_receive_async(buf, staging.p, 64, 0, 1, isa::kMaxLinkSentPs + 1); });
  expect_error(ErrorKind::kInvalidArgument, "link 16 is not within 0..15",
               [&] { dev.link_send(staging.p, buf, 64, 16, 1); });
  expect_error(ErrorKind::kInvalidArgument, "staging buffer is null",
               [&] { dev.link_send(nullptr, buf, 64, 0, 1); });
  std::vector<uint8_t> pageable(4096);
  expect_error(ErrorKind::kInvalidArgument, "is not pinned host memory",
               [&] { dev.link_send(pageable.data(), buf, 64, 0, 1); });
  DevicePtr big = dev.malloc(8192);
  expect_error(ErrorKind::kInvalidPointer, "staging",  // runs past the pinned buffer's end
               [&] { dev.link_send(staging.bytes() + 4096, big, 8192, 0, 1); });
  dev.free(big);
  expect_error(ErrorKind::kInvalidPointer, "past the end of its allocation",
               [&] { dev.link_send(staging.p, buf, 8192, 0, 1); });
  expect_error(ErrorKind::kInvalidPointer, "",
               [&] { dev.link_receive_async(DevicePtr(64), staging.p, 64, 0, 1, 0); });
  // A link the chip does not have (link_count is 1): the device refuses it.
  expect_error(ErrorKind::kDeviceFault, "link 3 does not exist: this chip has 1 link(s)",
               [&] { dev.link_send(staging.p, buf, 64, 3, 1); });
  Stream s = dev.create_stream();
  dev.begin_capture(s);
  expect_error(ErrorKind::kInvalidArgument, "link receive",
               [&] { dev.link_receive_async(buf, staging.p, 64, 0, 1, 0, s); });
  CHECK_FALSE(dev.is_capturing(s));
  dev.destroy_stream(s);
  test::check_device_works(dev);
  dev.free(buf);

  DeviceOptions bad = link_options();
  bad.overrides.push_back("link_count=17");
  expect_error(ErrorKind::kInvalidArgument, "link_count", [&] { Device::open(bad); });
}
