// Streams, events, host memory lifetime of async copies, faults on one stream, threads,
// determinism.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "device_helpers.h"
#include "reference.h"

using namespace mtia;
using mtia::test::expect_error;
using namespace std::chrono_literals;

namespace {

std::vector<uint8_t> read_back(Device& dev, DevicePtr p, size_t n) {
  std::vector<uint8_t> v(n);
  dev.copy(v.data(), p, n);
  return v;
}

}  // namespace

TEST_CASE("streams take hardware queues round-robin after the default stream's queue 0",
          "[streams]") {
  Device dev = Device::open(test::functional_options());
  const uint32_t nq = dev.properties().hardware_queues;
  REQUIRE(nq >= 3);
  CHECK(dev.hardware_queue(Stream{}) == 0);
  std::vector<Stream> s;
  for (uint32_t i = 0; i < 2 * (nq - 2); ++i) s.push_back(dev.create_stream());
  for (uint32_t i = 0; i < s.size(); ++i) {
    CHECK(s[i].id == i + 1);
    CHECK(dev.hardware_queue(s[i]) == 1 + i % (nq - 2));  // the last queue is the runtime's
  }
  for (Stream x : s) dev.destroy_stream(x);
}

TEST_CASE("event timing: positive with timing on, zero with timing off", "[events]") {
  for (bool timing : {true, false}) {
    DeviceOptions o;
    o.timing = timing;
    Device dev = Device::open(o);
    const size_t n = 1 << 20;
    std::vector<uint8_t> host(n, 3);
    DevicePtr d = dev.malloc(n);
    Stream s = dev.create_stream();
    Event start = dev.create_event(), end = dev.create_event();
    CHECK(dev.query(start));  // never recorded: complete
    expect_error(ErrorKind::kInvalidArgument, "never recorded",
                 [&] { dev.elapsed_ps(start, end); });
    dev.record(start, s);
    dev.copy_async(d, host.data(), n, s);
    dev.record(end, s);
    dev.synchronize(end);
    CHECK(dev.query(end));
    const int64_t ps = dev.elapsed_ps(start, end);
    if (timing) {
      // 1 MiB over PCIe at 31.5 GB/s takes at least 33 us.
      CHECK(ps > 33'000'000);
      CHECK(dev.elapsed_ms(start, end) == Approx(ps * 1e-9));
    } else {
      CHECK(ps == 0);
      CHECK(dev.elapsed_ms(start, end) == 0.0);
    }
    // Re-recording moves the marker.
    dev.record(start, s);
    dev.synchronize(start);
    CHECK(dev.elapsed_ps(end, start) >= 0);
    dev.destroy_event(start);
    dev.destroy_event(end);
    dev.destroy_stream(s);
    dev.free(d);
  }
}

TEST_CASE("wait_event holds a stream on the device until the event completes", "[events]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream a = dev.create_stream(), b = dev.create_stream();
  REQUIRE(dev.hardware_queue(a) != dev.hardware_queue(b));
  DevicePtr src = dev.malloc(256), dst = dev.malloc(256);
  dev.memset(src, 0x42, 256);
  dev.memset(dst, 0, 256);
  Event e = dev.create_event();

  gate.hold(a);
  dev.record(e, a);
  dev.wait_event(b, e);
  dev.copy_async(dst, src, 256, b);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(dev.query(e));
  CHECK_FALSE(dev.query(b));
  CHECK(read_back(dev, dst, 256) == std::vector<uint8_t>(256, 0));  // not yet copied
  gate.open();
  dev.synchronize(b);
  CHECK(dev.query(e));
  CHECK(read_back(dev, dst, 256) == std::vector<uint8_t>(256, 0x42));
  dev.destroy_event(e);
  dev.free(src);
  dev.free(dst);
  dev.destroy_stream(a);
  dev.destroy_stream(b);
}

TEST_CASE("async copy from pageable memory: the caller may overwrite it at once",
          "[copies][lifetime]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream s = dev.create_stream();
  std::vector<uint32_t> host(1000);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint32_t>(i * 3 + 1);
  const std::vector<uint32_t> original = host;
  DevicePtr d = dev.malloc(4000);

  gate.hold(s);        // the copy cannot run before the source is overwritten
  Layout strided_src;  // every other element of host, as a [2][250] transposed view
  strided_src.sizes = {250, 2};
  strided_src.strides = {2, 500};
  strided_src.elem_size = 4;
  dev.copy_async(d, Layout::contiguous({250, 2}, 4), host.data(), strided_src, s);
  std::fill(host.begin(), host.end(), 0xFFFFFFFFu);
  gate.open();
  dev.synchronize(s);

  std::vector<uint32_t> want(500), got(500);
  test::reference_copy(reinterpret_cast<uint8_t*>(want.data()), Layout::contiguous({250, 2}, 4),
                       reinterpret_cast<const uint8_t*>(original.data()), strided_src);
  dev.copy(got.data(), d, 2000);
  CHECK(got == want);
  dev.free(d);
  dev.destroy_stream(s);
}

TEST_CASE("host_free and host_unregister wait for copies in flight", "[copies][lifetime]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream s = dev.create_stream();
  DevicePtr d = dev.malloc(8192);
  auto* pinned = static_cast<uint8_t*>(dev.host_alloc(8192));
  std::memset(pinned, 0x6B, 8192);
  std::vector<uint8_t> user(8192, 0);
  dev.host_register(user.data(), user.size());

  // A device server reaches only memory shared with it (host_alloc): there, registered memory
  // is staged, and a copy into it returns once the data has arrived, as from pageable memory.
  const bool registered_is_staged = dev.properties().backend == "socket";
  if (registered_is_staged) dev.copy_async(user.data(), d, 8192, s);  // d is still zero

  gate.hold(s);
  dev.copy_async(d, pinned, 8192, s);                                  // reads pinned memory later
  if (!registered_is_staged) dev.copy_async(user.data(), d, 8192, s);  // writes it later
  auto freed = std::async(std::launch::async, [&] { dev.host_free(pinned); });
  auto unregistered = std::async(std::launch::async, [&] { dev.host_unregister(user.data()); });
  CHECK(freed.wait_for(50ms) == std::future_status::timeout);
  if (!registered_is_staged) {
    CHECK(unregistered.wait_for(1ms) == std::future_status::timeout);
  }
  // A new copy from memory being freed is refused rather than racing the free. (Until the
  // freeing thread has started, copies are still accepted, and host_free waits for them too.)
  bool refused = false;
  for (int i = 0; i < 500 && !refused; ++i) {  // well under the 1024-packet ring
    try {
      dev.copy_async(d, pinned, 16, s);
      std::this_thread::sleep_for(1ms);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kInvalidPointer);
      CHECK_THAT(e.what(), Catch::Contains("being freed"));
      refused = true;
    }
  }
  CHECK(refused);
  gate.open();
  freed.get();
  unregistered.get();
  dev.synchronize(s);
  CHECK(user == std::vector<uint8_t>(8192, registered_is_staged ? 0 : 0x6B));
  dev.free(d);
  dev.destroy_stream(s);
}

TEST_CASE("a fault on one stream leaves another stream's work untouched", "[streams][errors]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream bad = dev.create_stream(), good = dev.create_stream();
  REQUIRE(dev.hardware_queue(bad) != dev.hardware_queue(good));
  const size_t n = 64 * 1024;
  std::mt19937_64 rng(11);
  const auto data = test::random_bytes(rng, n);
  DevicePtr src = dev.malloc(n), d_bad = dev.malloc(n), d_good = dev.malloc(n);
  dev.copy(src, data.data(), n);
  dev.memset(d_bad, 0, n);

  // Queue everything on both streams first, then let it all run at once.
  gate.hold(bad);
  gate.hold(good);
  submit_raw_packet(dev, bad, test::faulting_copy(dev, src));
  dev.copy_async(d_bad, src, n, bad);  // behind the fault on its queue: abandoned
  Layout t;                            // good: transposed copies
  t.sizes = {256, 256};
  t.strides = {1, 256};
  t.elem_size = 1;
  for (int i = 0; i < 4; ++i)
    dev.copy_async(d_good, Layout::contiguous({256, 256}, 1), src, t, good);
  gate.open();

  dev.synchronize(good);  // no error here
  std::vector<uint8_t> want(n);
  test::reference_copy(want.data(), Layout::contiguous({256, 256}, 1), data.data(), t);
  CHECK(read_back(dev, d_good, n) == want);

  expect_error(ErrorKind::kDeviceFault, "device address fault", [&] { dev.synchronize(bad); });
  CHECK(read_back(dev, d_bad, n) == std::vector<uint8_t>(n, 0));  // was abandoned
  // The faulted stream works again once its error has been reported.
  dev.copy(d_bad, src, n, bad);
  CHECK(read_back(dev, d_bad, n) == data);
  dev.free(src);
  dev.free(d_bad);
  dev.free(d_good);
  dev.destroy_stream(bad);
  dev.destroy_stream(good);
}

TEST_CASE("streams waiting on an event whose stream faulted are not stuck", "[events][errors]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream a = dev.create_stream(), b = dev.create_stream();
  DevicePtr src = dev.malloc(64), dst = dev.malloc(64);
  dev.memset(src, 9, 64);
  Event e = dev.create_event();
  gate.hold(a);
  submit_raw_packet(dev, a, test::faulting_copy(dev, src));
  dev.record(e, a);  // will be abandoned with the rest of a's queue
  dev.wait_event(b, e);
  dev.copy_async(dst, src, 64, b);
  gate.open();
  dev.synchronize(b);  // released by the runtime's fence repair
  CHECK(read_back(dev, dst, 64) == std::vector<uint8_t>(64, 9));
  expect_error(ErrorKind::kDeviceFault, "did not complete normally", [&] { dev.synchronize(e); });
  expect_error(ErrorKind::kDeviceFault, "device address fault", [&] { dev.synchronize(a); });
  // The event is usable again.
  dev.record(e, a);
  dev.synchronize(e);
  dev.destroy_event(e);
  dev.free(src);
  dev.free(dst);
}

TEST_CASE("device synchronize waits for every stream", "[streams]") {
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  std::vector<Stream> streams;
  std::vector<DevicePtr> bufs;
  std::vector<std::vector<uint8_t>> hosts;
  for (int i = 0; i < 5; ++i) {
    streams.push_back(dev.create_stream());
    bufs.push_back(dev.malloc(4096));
    hosts.emplace_back(4096, static_cast<uint8_t>(i + 1));
  }
  for (int i = 0; i < 5; ++i) {
    gate.hold(streams[i]);
    dev.copy_async(bufs[i], hosts[i].data(), 4096, streams[i]);  // staged: pageable source
  }
  gate.open();
  dev.synchronize();
  for (int i = 0; i < 5; ++i) {
    CHECK(dev.query(streams[i]));
    CHECK(read_back(dev, bufs[i], 4096) == hosts[i]);
    dev.free(bufs[i]);
    dev.destroy_stream(streams[i]);
  }
}

TEST_CASE("several host threads, each with its own streams, at once", "[streams][threads]") {
  Device dev = Device::open(test::functional_options());
  constexpr int kThreads = 4;
  std::atomic<int> failures{0};
  std::atomic<int> done{0};
  auto worker = [&](int t) {
    std::mt19937_64 rng(1000 + t);
    Stream s1 = dev.create_stream(), s2 = dev.create_stream();
    Event e = dev.create_event();
    for (int i = 0; i < 60; ++i) {
      const size_t elem = test::random_elem_size(rng);
      const auto sizes = test::random_shape(rng, 6, 512);
      const Layout a = test::random_layout(rng, sizes, elem);
      const Layout b = test::random_layout(rng, sizes, elem);
      const Layout c = Layout::contiguous(sizes, elem);
      const auto in = test::random_bytes(rng, test::span_end(a));
      DevicePtr db = dev.malloc(test::span_end(b));
      DevicePtr dc = dev.malloc(test::span_end(c));
      // h2d on s1, then d2d on s2 after an event: a cross-stream dependency per case.
      dev.copy_async(db, b, in.data(), a, s1);
      dev.record(e, s1);
      dev.wait_event(s2, e);
      dev.copy_async(dc, c, db, b, s2);
      std::vector<uint8_t> got(test::span_end(c)), want(got.size());
      dev.copy(got.data(), dc, got.size(), s2);
      test::reference_copy(want.data(), c, in.data(), a);
      if (got != want) failures++;
      dev.free(db);
      dev.free(dc);
    }
    dev.destroy_event(e);
    dev.destroy_stream(s1);
    dev.destroy_stream(s2);
    done++;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  CHECK(done == kThreads);
  CHECK(failures == 0);
  CHECK(dev.memory_stats().allocated_bytes == 0);
  test::check_device_works(dev);
}

TEST_CASE("the same program gives the same simulated timings", "[events][determinism]") {
  auto program = [] {
    Device dev = Device::open();
    std::vector<int64_t> times;
    const size_t n = 256 * 1024;
    std::vector<uint8_t> host(n, 1);
    void* pinned = dev.host_alloc(n);
    DevicePtr a = dev.malloc(n), b = dev.malloc(n);
    Event e0 = dev.create_event(), e1 = dev.create_event(), e2 = dev.create_event(),
          e3 = dev.create_event();
    Layout t;  // a transposed view of a [512][512] byte matrix
    t.sizes = {512, 512};
    t.strides = {1, 512};
    t.elem_size = 1;
    for (int round = 0; round < 3; ++round) {
      dev.record(e0);
      dev.copy_async(a, pinned, n);
      dev.record(e1);
      dev.copy_async(b, Layout::contiguous({512, 512}, 1), a, t);
      dev.record(e2);
      dev.copy(host.data(), b, n);
      dev.fill(a, Layout::contiguous({n / 4}, 4), 0x01020304);
      dev.record(e3);
      dev.synchronize(e3);
      times.push_back(dev.elapsed_ps(e0, e1));
      times.push_back(dev.elapsed_ps(e1, e2));
      times.push_back(dev.elapsed_ps(e2, e3));
    }
    dev.host_free(pinned);
    return times;
  };
  const auto first = program();
  const auto second = program();
  CHECK(first == second);
  for (int64_t t : first) CHECK(t > 0);
  // Both rounds start from an idle device: the per-round times agree too.
  CHECK(first[0] == first[3]);
  CHECK(first[1] == first[4]);
}

TEST_CASE("device -> host copy_async into pageable memory has arrived when it returns",
          "[copies][lifetime]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr d = dev.malloc(4096);
  dev.memset(d, 0x3C, 4096);
  Stream s = dev.create_stream();
  std::vector<uint8_t> host(4096, 0);
  dev.copy_async(host.data(), d, 4096, s);  // pageable: synchronous, documented
  CHECK(host == std::vector<uint8_t>(4096, 0x3C));
  // Staging buffers of async copies from pageable memory are kept for reuse.
  dev.copy_async(d, host.data(), 4096, s);
  dev.synchronize(s);
  CHECK(dev.memory_stats().staging_host_bytes >= 4096);
  dev.free(d);
}

TEST_CASE("overlapping pageable copies from two threads fall back to bounce buffers",
          "[copies][threads]") {
  // A synchronous copy maps the caller's pageable range for its duration; a second copy
  // touching the same range meanwhile cannot map it again and goes through a bounce buffer,
  // which must leave the bytes between its elements alone.
  Device dev = Device::open(test::functional_options());
  test::Gate gate(dev);
  Stream held = dev.create_stream(), free_run = dev.create_stream();
  std::vector<uint32_t> x(2048);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint32_t>(i);
  DevicePtr d_even = dev.malloc(4096), d_odd = dev.malloc(4096), d_all = dev.malloc(8192);
  std::vector<uint32_t> odd_values(1024);
  for (size_t i = 0; i < odd_values.size(); ++i)
    odd_values[i] = 0xA0000000u + static_cast<uint32_t>(i);
  dev.copy(d_odd, odd_values.data(), 4096);

  Layout even;  // x[0], x[2], ...
  even.sizes = {1024};
  even.strides = {2};
  even.elem_size = 4;
  Layout odd = even;  // x[1], x[3], ...
  odd.offset = 1;
  const Layout flat = Layout::contiguous({1024}, 4);

  gate.hold(held);
  // Thread: a synchronous copy reading the even elements of x, held until the gate opens,
  // with x mapped all that time.
  auto reader =
      std::async(std::launch::async, [&] { dev.copy(d_even, flat, x.data(), even, held); });
  std::this_thread::sleep_for(50ms);
  // Meanwhile: read all of x (bounce in) and write its odd elements (bounce out).
  dev.copy(d_all, x.data(), 8192, free_run);
  dev.copy(x.data(), odd, d_odd, flat, free_run);
  gate.open();
  reader.get();

  std::vector<uint32_t> got(2048);
  dev.copy(got.data(), d_all, 8192);
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == i);
  for (size_t i = 0; i < x.size(); ++i) {
    REQUIRE(x[i] == (i % 2 ? odd_values[i / 2] : static_cast<uint32_t>(i)));
  }
  std::vector<uint32_t> evens(1024);
  dev.copy(evens.data(), d_even, 4096);
  for (size_t i = 0; i < evens.size(); ++i) REQUIRE(evens[i] == 2 * i);
  dev.free(d_even);
  dev.free(d_odd);
  dev.free(d_all);
}

TEST_CASE("a stream whose last event has completed is complete", "[streams][events]") {
  // The event is marked done in its packet's completion callback, which runs before the driver
  // marks the packet done on its queue; a thread that sees the event done must still find the
  // stream done. Many rounds, so the window between the two is hit if it is open.
  Device dev = Device::open(test::functional_options());
  Stream s = dev.create_stream();
  Event e = dev.create_event();
  DevicePtr buf = dev.malloc(256);
  std::vector<uint8_t> host(256, 7);
  for (int round = 0; round < 2000; ++round) {
    dev.copy_async(buf, host.data(), host.size(), s);
    dev.record(e, s);
    dev.synchronize(e);
    REQUIRE(dev.query(e));
    REQUIRE(dev.query(s));
  }
  // And the other way: once the stream is done, so is the event recorded last on it.
  for (int round = 0; round < 2000; ++round) {
    dev.copy_async(buf, host.data(), host.size(), s);
    dev.record(e, s);
    while (!dev.query(s)) {
    }
    REQUIRE(dev.query(e));
  }
  dev.free(buf);
  dev.destroy_event(e);
  dev.destroy_stream(s);
}
