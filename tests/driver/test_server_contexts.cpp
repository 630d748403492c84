// Several clients of one device server, seen from the driver: each gets a share of the queues
// and a DRAM window of its own (read from the device's registers), and its DMA reaches only its
// own host memory and its own window. Issued below the host API, so nothing but the device
// stands between one client and another's memory.
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "mtia/driver/userspace_driver.h"
#include "mtia/isa/address_map.h"
#include "must.h"

extern char** environ;

using namespace mtia;
using driver::Completion;
using driver::Device;
using mtia::test::must;

namespace {

// `mtia-emu serve --clients 2` on a socket of its own, killed at the end of the test.
struct TwoClientServer {
  std::string path;
  pid_t pid = -1;
  TwoClientServer() {
    path = (std::filesystem::temp_directory_path() /
            ("mtia_contexts_test_" + std::to_string(getpid())))
               .string();
    std::vector<std::string> args = {MTIA_EMU_PROGRAM, "serve", "--socket",  path, "--no-timing",
                                     "--trace",        "off",   "--clients", "2"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    REQUIRE(posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) == 0);
    for (int i = 0; i < 1000; ++i) {
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
      const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const bool up = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
      ::close(fd);
      if (up) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    FAIL("the device server did not start listening");
  }
  ~TwoClientServer() {
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    std::error_code ignored;  // a killed server leaves its socket file behind
    std::filesystem::remove(path, ignored);
  }
  std::unique_ptr<Device> open() const {
    driver::BackendOptions o;
    o.server = path;
    o.timing = false;
    return must(Device::open("socket", o));
  }
};

isa::NdRegion region(uint64_t addr, isa::AddressSpace space) {
  isa::NdRegion r{};
  r.addr = addr;
  r.space = static_cast<uint8_t>(space);
  r.strides[0] = 1;
  return r;
}

isa::DmaCopyPacket copy(isa::NdRegion src, isa::NdRegion dst, uint64_t bytes) {
  isa::DmaCopyPacket p{};
  p.ndims = 1;
  p.elem_size = 1;
  p.sizes[0] = bytes;
  p.src = src;
  p.dst = dst;
  return p;
}

Completion run(Device& dev, uint32_t queue, const isa::Packet& p) {
  return must(dev.wait(queue, must(dev.submit(queue, p))));
}

}  // namespace

TEST_CASE("each client of a shared server lays itself out in the window the device gives it",
          "[server][contexts]") {
  TwoClientServer server;
  auto a = server.open();
  auto b = server.open();
  CHECK(a->info().num_queues == 4);
  CHECK(b->info().num_queues == 4);
  CHECK(a->info().dram_base == isa::kDramBase);
  CHECK(b->info().dram_base == isa::kDramBase + (64ull << 30));
  CHECK(a->info().dram_bytes == 64ull << 30);
  CHECK(b->info().dram_bytes == 64ull << 30);
  // Allocations come from the client's own window.
  const uint64_t in_b = must(b->allocator().allocate(4096));
  CHECK(in_b >= b->info().dram_base);
  CHECK(in_b + 4096 <= b->info().dram_base + b->info().dram_bytes);

  // The memory window too: B's own bytes read and write; A's are not there for B.
  const uint64_t in_a = must(a->allocator().allocate(4096));
  const std::vector<uint8_t> secret(4096, 0xC3);
  must(a->write_memory(in_a, secret.data(), secret.size()));
  std::vector<uint8_t> got(4096, 0);
  const isa::Status read = b->read_memory(in_a, got.data(), got.size());
  REQUIRE_FALSE(read.ok());
  CHECK(read.error().code == isa::ErrorCode::kDeviceAddressFault);
  CHECK_THAT(read.error().reason, Catch::Contains("outside this client's device memory"));
  CHECK(got == std::vector<uint8_t>(4096, 0));
  const isa::Status write = b->write_memory(in_a, got.data(), got.size());
  REQUIRE_FALSE(write.ok());
  must(a->read_memory(in_a, got.data(), got.size()));
  CHECK(got == secret);
}

TEST_CASE("a client's DMA reaches only the host memory it mapped itself", "[server][contexts]") {
  TwoClientServer server;
  auto a = server.open();
  auto b = server.open();
  constexpr uint64_t n = 4096;
  auto* host_a = static_cast<uint8_t*>(must(a->alloc_host(n)));
  for (uint64_t i = 0; i < n; ++i) host_a[i] = static_cast<uint8_t>(i * 7 + 1);
  const std::vector<uint8_t> before(host_a, host_a + n);
  const uint64_t bus_a = must(a->map_host(host_a, n));
  const uint64_t dev_a = must(a->allocator().allocate(n));
  const uint64_t dev_b = must(b->allocator().allocate(n));

  // A's own DMA works.
  CHECK(run(*a, 0,
            copy(region(bus_a, isa::AddressSpace::kHost), region(dev_a, isa::AddressSpace::kDevice),
                 n))
            .ok);
  // B's DMA from and to A's host memory faults, for B alone.
  const Completion from = run(
      *b, 0,
      copy(region(bus_a, isa::AddressSpace::kHost), region(dev_b, isa::AddressSpace::kDevice), n));
  CHECK_FALSE(from.ok);
  CHECK(from.error == isa::ErrorCode::kHostAddressFault);
  const Completion to = run(
      *b, 1,
      copy(region(dev_b, isa::AddressSpace::kDevice), region(bus_a, isa::AddressSpace::kHost), n));
  CHECK_FALSE(to.ok);
  CHECK(to.error == isa::ErrorCode::kHostAddressFault);
  CHECK(std::vector<uint8_t>(host_a, host_a + n) == before);
  // And A goes on.
  CHECK(run(*a, 1,
            copy(region(dev_a, isa::AddressSpace::kDevice),
                 region(bus_a + 0, isa::AddressSpace::kHost), n))
            .ok);
  CHECK(std::vector<uint8_t>(host_a, host_a + n) == before);
  must(a->unmap_host(bus_a));
  must(a->free_host(host_a));
}
