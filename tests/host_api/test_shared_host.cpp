// The host API on a device that reaches only host memory from its backend's alloc_host, as a
// device in another process does (tests/driver/wrapping_backends.h, SharedHostOnlyBackend):
// host_alloc and staging buffers come from alloc_host; pageable and host_register'd memory
// cannot be mapped, so copies stage them. Every copy must give the bytes a nested-loop
// reference gives.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../driver/wrapping_backends.h"
#include "device_helpers.h"
#include "reference.h"

using namespace mtia;

namespace {

enum class HostKind { kPageable, kRegistered, kAllocated };

const char* name(HostKind k) {
  switch (k) {
    case HostKind::kPageable:
      return "pageable";
    case HostKind::kRegistered:
      return "host_register'd";
    case HostKind::kAllocated:
      return "host_alloc'd";
  }
  return "?";
}

// `bytes` of host memory of the given kind, released with the object.
class HostBuffer {
 public:
  HostBuffer(Device& dev, HostKind kind, size_t bytes) : dev_(dev), kind_(kind) {
    if (kind == HostKind::kAllocated) {
      ptr_ = static_cast<uint8_t*>(dev.host_alloc(bytes));
    } else {
      own_.resize(bytes);
      ptr_ = own_.data();
      if (kind == HostKind::kRegistered) dev.host_register(ptr_, bytes);
    }
  }
  ~HostBuffer() {
    if (kind_ == HostKind::kAllocated) dev_.host_free(ptr_);
    if (kind_ == HostKind::kRegistered) dev_.host_unregister(ptr_);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  uint8_t* data() { return ptr_; }

 private:
  Device& dev_;
  HostKind kind_;
  std::vector<uint8_t> own_;
  uint8_t* ptr_ = nullptr;
};

Device open_shared_host_only() {
  test::SharedHostOnlyBackend::register_once();
  DeviceOptions o = test::functional_options();
  o.backend = "shared-host-only";
  return Device::open(o);
}

// The whole device buffer, read back contiguously.
std::vector<uint8_t> device_bytes(Device& dev, DevicePtr d, size_t n) {
  std::vector<uint8_t> v(n);
  dev.copy(v.data(), d, n);
  return v;
}

// Copies host <-> device of every kind (pageable, host_register'd and host_alloc'd memory;
// contiguous and strided; sync and async) give the bytes of a nested-loop reference.
void check_copies_of_every_kind(Device& dev) {
  std::mt19937_64 rng(21);

  // A strided host side (rows padded, a leading offset) against a contiguous device side,
  // and the contiguous case: 4-byte elements, 37 x 29 of them.
  const Layout dev_layout = Layout::contiguous({37, 29}, 4);
  Layout host_strided;
  host_strided.sizes = {37, 29};
  host_strided.strides = {31, 1};
  host_strided.offset = 5;
  host_strided.elem_size = 4;
  const size_t dev_bytes = test::span_end(dev_layout);

  for (HostKind kind : {HostKind::kPageable, HostKind::kRegistered, HostKind::kAllocated}) {
    for (const Layout& host_layout : {dev_layout, host_strided}) {
      for (bool async : {false, true}) {
        const bool strided = host_layout.strides[0] != dev_layout.strides[0];
        INFO(name(kind) << (strided ? " strided" : " contiguous") << (async ? " async" : " sync"));
        const size_t host_bytes = test::span_end(host_layout);
        DevicePtr d = dev.malloc(dev_bytes);
        const std::vector<uint8_t> initial = test::random_bytes(rng, dev_bytes);
        dev.copy(d, initial.data(), dev_bytes);

        // Host -> device.
        HostBuffer src(dev, kind, host_bytes);
        const std::vector<uint8_t> src_bytes = test::random_bytes(rng, host_bytes);
        std::memcpy(src.data(), src_bytes.data(), host_bytes);
        if (async) {
          dev.copy_async(d, dev_layout, src.data(), host_layout);
          dev.synchronize(Stream{});
        } else {
          dev.copy(d, dev_layout, src.data(), host_layout);
        }
        std::vector<uint8_t> want = initial;
        test::reference_copy(want.data(), dev_layout, src_bytes.data(), host_layout);
        const std::vector<uint8_t> on_device = device_bytes(dev, d, dev_bytes);
        CHECK(on_device == want);

        // Device -> host, over bytes that the copy must leave alone between the elements.
        HostBuffer dst(dev, kind, host_bytes);
        const std::vector<uint8_t> dst_initial = test::random_bytes(rng, host_bytes);
        std::memcpy(dst.data(), dst_initial.data(), host_bytes);
        std::vector<uint8_t> want_host = dst_initial;
        test::reference_copy(want_host.data(), host_layout, on_device.data(), dev_layout);
        if (async) {
          dev.copy_async(dst.data(), host_layout, d, dev_layout);
          if (kind != HostKind::kAllocated) {
            // Memory the device cannot reach is copied synchronously, as pageable memory is:
            // the bytes are there when the call returns.
            CHECK(std::memcmp(dst.data(), want_host.data(), host_bytes) == 0);
          }
          dev.synchronize(Stream{});
        } else {
          dev.copy(dst.data(), host_layout, d, dev_layout);
        }
        CHECK(std::memcmp(dst.data(), want_host.data(), host_bytes) == 0);
        dev.free(d);
      }
    }
  }
  test::check_device_works(dev);
}

}  // namespace

TEST_CASE(
    "a backend that maps only its own host memory: copies of every kind still give the "
    "reference bytes",
    "[device][shared_host]") {
  Device dev = open_shared_host_only();
  const uint64_t refused_before = test::SharedHostOnlyBackend::refused.load();
  check_copies_of_every_kind(dev);
  // Pageable and registered memory were offered to the backend and refused: the fallback ran.
  CHECK(test::SharedHostOnlyBackend::refused.load() > refused_before);
}

TEST_CASE("the socket backend (a device server of its own) gives the same bytes for every copy",
          "[device][shared_host][socket]") {
  // A device in another process reaches only host memory from alloc_host, as above.
  DeviceOptions o = test::functional_options();
  o.backend = "socket";
  Device dev = Device::open(o);
  REQUIRE(dev.properties().backend == "socket");
  check_copies_of_every_kind(dev);
}

TEST_CASE("a backend that maps only its own host memory: registered memory stays registered",
          "[device][shared_host]") {
  Device dev = open_shared_host_only();
  std::vector<uint8_t> user(8192);
  dev.host_register(user.data(), 4096);
  CHECK(dev.is_pinned(user.data() + 100, 100));
  CHECK(dev.memory_stats().pinned_host_bytes == 4096);
  test::expect_error(ErrorKind::kInvalidArgument, "overlaps",
                     [&] { dev.host_register(user.data() + 2048, 4096); });
  test::expect_error(ErrorKind::kInvalidPointer, "host_unregister()",
                     [&] { dev.host_free(user.data()); });
  // A copy whose host side runs out of the registered region is refused as before.
  DevicePtr d = dev.malloc(8192);
  test::expect_error(ErrorKind::kInvalidPointer, "runs",
                     [&] { dev.copy(d, user.data() + 4000, 200); });
  dev.host_unregister(user.data());
  CHECK_FALSE(dev.is_pinned(user.data(), 1));
  CHECK(dev.memory_stats().pinned_host_bytes == 0);
  test::expect_error(ErrorKind::kInvalidPointer, "already unregistered",
                     [&] { dev.host_unregister(user.data()); });
  // host_alloc'd memory comes from the backend, so the device reaches it in place.
  void* p = dev.host_alloc(100);
  CHECK(reinterpret_cast<uintptr_t>(p) % 4096 == 0);
  dev.host_free(p);
  dev.free(d);
  test::check_device_works(dev);
}
