// Graphs: capture a stream's device work, instantiate it into a command buffer, replay it with
// one submission; the results against a nested-loop reference, the calls a capture refuses, a
// freed buffer found at replay, and the replay's cheaper simulated dispatch.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "device_helpers.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::expect_error;
using mtia::test::random_floats;
using mtia::test::upload;

namespace {

constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32 (isa/pe/pe_ops.h)

// dst[i][j] = src[j][i] for an n x n float matrix, as the graph's transposing copy does.
std::vector<float> transposed(const std::vector<float>& src, int64_t n) {
  std::vector<float> t(src.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) t[i * n + j] = src[j * n + i];
  }
  return t;
}

}  // namespace

TEST_CASE("a captured graph runs nothing until replayed, then runs on new inputs each time",
          "[graphs]") {
  Device dev = Device::open(test::functional_options());
  constexpr int64_t n = 24;
  const Layout rows = Layout::contiguous({n, n}, 4);
  const Layout cols{{n, n}, {1, n}, 0, 4};  // the transpose of `rows`
  DevicePtr in = upload(dev, random_floats(n * n, 1));
  DevicePtr out = dev.malloc(n * n * 4);
  DevicePtr flag = dev.malloc(64);
  dev.memset(out, 0, n * n * 4);
  dev.memset(flag, 0, 64);
  Stream s = dev.create_stream();

  dev.begin_capture(s);
  CHECK(dev.is_capturing(s));
  CHECK_FALSE(dev.is_capturing(Stream{}));
  dev.copy_async(out, rows, in, cols, s);  // out = in transposed
  dev.memset_async(flag, 0x5a, 64, s);
  const Graph g = dev.end_capture(s);
  CHECK_FALSE(dev.is_capturing(s));
  // Captured, not run.
  CHECK(download<float>(dev, out, n * n) == std::vector<float>(n * n, 0.0f));
  CHECK(download<uint8_t>(dev, flag, 64) == std::vector<uint8_t>(64, 0));

  dev.instantiate(g);
  for (uint32_t round = 0; round < 3; ++round) {
    const std::vector<float> input = random_floats(n * n, 100 + round);
    dev.copy(in, input.data(), n * n * 4);  // new inputs into the graph's buffer
    dev.replay(g, s);
    dev.synchronize(s);
    CHECK(download<float>(dev, out, n * n) == transposed(input, n));
    CHECK(download<uint8_t>(dev, flag, 64) == std::vector<uint8_t>(64, 0x5a));
  }
  dev.destroy_graph(g);
  expect_error(ErrorKind::kInvalidHandle, "graph 1 does not exist", [&] { dev.replay(g, s); });
}

#ifdef MTIA_KERNEL_LIBRARY_ELF
TEST_CASE("a captured launch keeps its arguments and replays like the eager launch",
          "[graphs][library]") {
  Device dev = Device::open(test::functional_options());
  const KernelModule lib = dev.load_module(MTIA_KERNEL_LIBRARY_ELF);
  constexpr int64_t n = 16;
  const std::vector<float> a = random_floats(n * n, 7), b = random_floats(n * n, 8);
  DevicePtr da = upload(dev, a), db = upload(dev, b), dc = dev.malloc(n * n * 4);
  const auto matmul = [&](Stream s) {
    dev.launch(lib.kernel("matmul"), Grid{1, 1},
               {dc, da, db, Arg::dtype(kFp32), Arg::dtype(kFp32), n, n, n, n, int64_t{1}, n,
                int64_t{1}, n, int64_t{1}},
               s);
  };
  matmul(Stream{});
  const std::vector<float> eager = download<float>(dev, dc, n * n);
  std::vector<float> want(n * n, 0.0f);  // the nested-loop reference, summed in order
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < n; ++k) acc += double(a[i * n + k]) * b[k * n + j];
      want[i * n + j] = float(acc);
    }
  }
  for (int64_t i = 0; i < n * n; ++i) CHECK(eager[i] == Approx(want[i]).margin(1e-4));

  Stream s = dev.create_stream();
  dev.memset(dc, 0, n * n * 4);
  dev.begin_capture(s);
  matmul(s);
  const Graph g = dev.end_capture(s);
  dev.instantiate(g);
  for (int round = 0; round < 2; ++round) {
    dev.memset(dc, 0, n * n * 4);
    dev.replay(g, s);
    dev.synchronize(s);
    CHECK(download<float>(dev, dc, n * n) == eager);  // bit for bit
  }
  dev.destroy_graph(g);
}
#endif

TEST_CASE("calls that wait for the stream or touch host memory end the capture", "[graphs]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(256), b = dev.malloc(256);
  std::vector<uint8_t> host(256, 1);
  Stream s = dev.create_stream();
  Event e = dev.create_event();

  const auto refused = [&](const char* what, const std::function<void()>& call) {
    INFO(what);
    dev.begin_capture(s);
    dev.copy_async(b, a, 256, s);
    expect_error(ErrorKind::kInvalidArgument, what, call);
    CHECK_FALSE(dev.is_capturing(s));  // ended and discarded
    expect_error(ErrorKind::kInvalidArgument, "is not capturing", [&] { dev.end_capture(s); });
  };
  refused("synchronize(stream)", [&] { dev.synchronize(s); });
  refused("query(stream)", [&] { dev.query(s); });
  refused("synchronize()", [&] { dev.synchronize(); });
  refused("a copy between host and device memory", [&] { dev.copy_async(a, host.data(), 256, s); });
  refused("a copy between host and device memory", [&] { dev.copy(host.data(), a, 256, s); });
  refused("a synchronous copy", [&] { dev.copy(b, a, 256, s); });
  refused("a synchronous fill", [&] { dev.memset(a, 0, 256, s); });
  // Records and waits inside the capture are captured (test_graph_streams.cpp); a wait for an
  // event recorded outside it is not.
  refused("recorded outside the capture", [&] {
    dev.record(e, Stream{});
    dev.wait_event(s, e);
  });
  refused("destroy_stream", [&] { dev.destroy_stream(s); });

  // Work on other streams is not captured and still runs.
  dev.begin_capture(s);
  dev.copy(b, host.data(), 256);  // default stream: synchronous, fine
  CHECK(dev.is_capturing(s));
  const Graph empty = dev.end_capture(s);
  dev.instantiate(empty);
  dev.replay(empty, s);  // nothing was captured: nothing to run
  dev.destroy_graph(empty);
  CHECK(test::download<uint8_t>(dev, b, 256) == host);
}

TEST_CASE("graph calls in the wrong order say what to do", "[graphs]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(256), b = dev.malloc(256);
  Stream s = dev.create_stream();
  expect_error(ErrorKind::kInvalidArgument, "stream 1 is not capturing",
               [&] { dev.end_capture(s); });
  dev.begin_capture(s);
  expect_error(ErrorKind::kInvalidArgument, "already capturing", [&] { dev.begin_capture(s); });
  dev.copy_async(b, a, 256, s);
  const Graph other{99};
  expect_error(ErrorKind::kInvalidHandle, "graph 99 does not exist",
               [&] { dev.instantiate(other); });
  const Graph g = dev.end_capture(s);
  expect_error(ErrorKind::kInvalidArgument, "not instantiated", [&] { dev.replay(g, s); });
  dev.instantiate(g);
  expect_error(ErrorKind::kInvalidArgument, "already instantiated", [&] { dev.instantiate(g); });
  // A replay cannot be captured into another graph: command buffers do not nest.
  dev.begin_capture(s);
  expect_error(ErrorKind::kInvalidArgument, "command buffers do not nest",
               [&] { dev.replay(g, s); });
  dev.destroy_graph(g);
  expect_error(ErrorKind::kInvalidHandle, "does not exist", [&] { dev.destroy_graph(g); });
}

TEST_CASE("a replay finds a buffer the graph uses freed, even if its address is reused",
          "[graphs]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(4096), b = dev.malloc(4096);
  Stream s = dev.create_stream();
  dev.begin_capture(s);
  dev.copy_async(b, a, 4096, s);
  const Graph g = dev.end_capture(s);
  // Both sides of the copy, as their allocations' start addresses.
  std::vector<uint64_t> used;
  for (DevicePtr p : dev.graph_allocations(g)) used.push_back(p.address());
  std::sort(used.begin(), used.end());
  CHECK(used == std::vector<uint64_t>{std::min(a.address(), b.address()),
                                      std::max(a.address(), b.address())});
  dev.instantiate(g);
  dev.replay(g, s);
  dev.synchronize(s);
  dev.free(a);
  char where[32];
  std::snprintf(where, sizeof where, "0x%llx", static_cast<unsigned long long>(a.address()));
  expect_error(ErrorKind::kInvalidPointer,
               std::string("uses the allocation at ") + where + ", which was freed",
               [&] { dev.replay(g, s); });
  DevicePtr again = dev.malloc(4096);  // the allocator may hand out the same address
  INFO("reallocated at 0x" << std::hex << again.address());
  expect_error(ErrorKind::kInvalidPointer, "which was freed", [&] { dev.replay(g, s); });
  dev.destroy_graph(g);
}

TEST_CASE("a replay's packets cost less simulated dispatch time than the same work queued",
          "[graphs][timing]") {
  DeviceOptions o;
  o.overrides = {"cp_packet_ns=400", "cp_replay_packet_ns=100"};
  Device dev = Device::open(o);
  constexpr int kFills = 20;
  DevicePtr buf = dev.malloc(kFills * 256);
  Stream s = dev.create_stream();
  Event start = dev.create_event(), end = dev.create_event();
  const auto fills = [&] {
    for (int i = 0; i < kFills; ++i) dev.memset_async(buf + i * 256, uint8_t(i), 256, s);
  };
  // Eager: each fill is a ring packet.
  dev.record(start, s);
  fills();
  dev.record(end, s);
  const int64_t eager_ps = dev.elapsed_ps(start, end);
  dev.begin_capture(s);
  fills();
  const Graph g = dev.end_capture(s);
  dev.instantiate(g);
  dev.record(start, s);
  dev.replay(g, s);
  dev.record(end, s);
  const int64_t replay_ps = dev.elapsed_ps(start, end);
  INFO("eager " << eager_ps << " ps, replay " << replay_ps << " ps");
  // Eager, the command processor is the bottleneck: the start record, 20 fills and the end
  // record are dispatched 400 ns apart (the DMA engines keep up), so the end record completes
  // 21 x 400 ns after the start record.
  CHECK(eager_ps == 21 * 400'000);
  // Replayed, the ExecBuffer packet costs 400 ns and each fill 100 ns: the fills' DMA time
  // (4 engines) becomes the bottleneck, well under the eager time.
  CHECK(replay_ps < eager_ps * 3 / 5);
  std::vector<uint8_t> got = test::download<uint8_t>(dev, buf, kFills * 256);
  for (int i = 0; i < kFills * 256; ++i) REQUIRE(got[i] == uint8_t(i / 256));
  dev.destroy_graph(g);
}
