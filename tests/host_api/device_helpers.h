// Helpers for tests that run against the in-process device.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "elf_file.h"
#include "mtia/raw_packet.h"
#include "mtia/runtime.h"

namespace mtia::test {

// n floats drawn uniformly from [-1, 1) with `seed`.
inline std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A new device buffer holding `v`.
template <typename T>
DevicePtr upload(Device& dev, const std::vector<T>& v) {
  DevicePtr p = dev.malloc(v.size() * sizeof(T));
  dev.copy(p, v.data(), v.size() * sizeof(T));
  return p;
}
// The first n elements of device buffer p.
template <typename T>
std::vector<T> download(Device& dev, DevicePtr p, size_t n) {
  std::vector<T> v(n);
  dev.copy(v.data(), p, n * sizeof(T));
  dev.synchronize();
  return v;
}

// The backend a default DeviceOptions opens: the suite runs once in-process and once more on
// served devices ($MTIA_EMU_DEVICES or $MTIA_EMU_SERVER set; tests/host_api/CMakeLists.txt).
inline std::string environment_backend() {
  const char* server = std::getenv("MTIA_EMU_SERVER");
  const char* devices = std::getenv("MTIA_EMU_DEVICES");
  return (server != nullptr && *server != 0) || (devices != nullptr && *devices != 0) ? "socket"
                                                                                      : "inprocess";
}

// How many devices the environment gives this process.
inline int environment_device_count() {
  if (const char* server = std::getenv("MTIA_EMU_SERVER"); server != nullptr && *server != 0) {
    return 1 + static_cast<int>(std::count(server, server + std::strlen(server), ','));
  }
  const char* devices = std::getenv("MTIA_EMU_DEVICES");
  return devices != nullptr && *devices != 0 ? std::atoi(devices) : 1;
}

inline DeviceOptions functional_options() {
  DeviceOptions o;
  o.timing = false;
  return o;
}

// Runs `fn`, which must throw mtia::Error of `kind` whose message contains `text`.
inline void expect_error(ErrorKind kind, const std::string& text, const std::function<void()>& fn) {
  try {
    fn();
    FAIL("expected an mtia::Error (" << error_kind_name(kind) << ") containing '" << text << "'");
  } catch (const Error& e) {
    INFO("message: " << e.what());
    CHECK(error_kind_name(e.kind()) == std::string(error_kind_name(kind)));
    CHECK_THAT(e.what(), Catch::Contains(text));
  }
}

// The device still works: a small strided round trip through two allocations.
inline void check_device_works(Device& dev, Stream stream = {}) {
  std::vector<int32_t> in(24), out(24, -1);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(i * 7 + 1);
  DevicePtr a = dev.malloc(in.size() * 4);
  DevicePtr b = dev.malloc(in.size() * 4);
  dev.copy(a, in.data(), in.size() * 4, stream);
  Layout t;  // b = a transposed ([4][6] -> [6][4])
  t.sizes = {6, 4};
  t.strides = {1, 6};
  t.elem_size = 4;
  dev.copy(b, Layout::contiguous({6, 4}, 4), a, t, stream);
  dev.copy(out.data(), b, out.size() * 4, stream);
  dev.free(a);
  dev.free(b);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) REQUIRE(out[i * 4 + j] == in[j * 6 + i]);
  }
}

// Holds a stream at a point until released, using a device-side WaitPacket on a fence word:
// lets tests see what happens while work is queued but not yet run.
class Gate {
 public:
  explicit Gate(Device& dev) : dev_(dev), fence_(dev.malloc(8)) { dev_.memset(fence_, 0, 8); }
  ~Gate() { dev_.free(fence_); }
  // Everything queued on `stream` after this waits for open().
  void hold(Stream stream) {
    isa::WaitPacket w{};
    w.addr = fence_.address();
    w.value = ++generation_;
    w.condition = static_cast<uint8_t>(isa::WaitCondition::kGreaterEqual);
    submit_raw_packet(dev_, stream, w);
  }
  // Releases held streams (writes the fence from the default stream).
  void open() {
    const uint64_t v = generation_;
    dev_.copy(fence_, &v, 8);
  }

 private:
  Device& dev_;
  DevicePtr fence_;
  uint64_t generation_ = 0;
};

// A device address that is not device memory: between the end of DRAM and on-chip SRAM.
inline uint64_t unmapped_device_address(const Device& dev) {
  return dev.properties().dram_bytes + (uint64_t{1} << 30);
}

// A DMA packet that faults on the device (its destination is not device memory).
inline isa::DmaCopyPacket faulting_copy(const Device& dev, DevicePtr valid_src) {
  isa::DmaCopyPacket p{};
  p.ndims = 1;
  p.elem_size = 4;
  p.sizes[0] = 16;
  p.src.addr = valid_src.address();
  p.src.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  p.src.strides[0] = 4;
  p.dst.addr = unmapped_device_address(dev);
  p.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  p.dst.strides[0] = 4;
  return p;
}

// "0x..." of a value, for messages and for matching reports.
inline std::string hex(uint64_t v) {
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace mtia::test
