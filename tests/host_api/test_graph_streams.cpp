// Graphs of several streams: a stream joins a capture by waiting for an event recorded in it
// (fork) and the origin waits for it again (join); records and waits between them become the
// graph's dependencies, and each branch replays on its own hardware queue. The results against
// a nested-loop reference and against the same calls run eagerly, replayed many times and
// interleaved with another graph; the captures CUDA refuses; a failed branch that must not hang
// the replay; and the simulated time of two branches against their serial sum.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "device_helpers.h"
#include "mtia/raw_packet.h"

using namespace mtia;
using mtia::test::download;
using mtia::test::expect_error;
using mtia::test::random_floats;
using mtia::test::upload;

namespace {

constexpr int64_t kN = 16;  // the matrices are kN x kN floats
constexpr uint64_t kBytes = kN * kN * 4;

std::vector<float> transposed(const std::vector<float>& src) {
  std::vector<float> t(src.size());
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t j = 0; j < kN; ++j) t[i * kN + j] = src[j * kN + i];
  }
  return t;
}

// The buffers of the fork/join work below.
struct Buffers {
  DevicePtr in, a, b1, b2, out1, out2, flag;
  explicit Buffers(Device& dev)
      : in(dev.malloc(kBytes)),
        a(dev.malloc(kBytes)),
        b1(dev.malloc(kBytes)),
        b2(dev.malloc(kBytes)),
        out1(dev.malloc(kBytes)),
        out2(dev.malloc(kBytes)),
        flag(dev.malloc(256)) {
    for (DevicePtr p : {in, a, b1, b2, out1, out2}) dev.memset(p, 0, kBytes);
    dev.memset(flag, 0, 256);
  }
};

// On s0: a = in, then fork to s1 and s2. s1: b1 = a, flag = 0x77. s2: b2 = a transposed.
// s0 joins both, then out1 = b1 and out2 = b2. Every step reads what an earlier step on
// another stream wrote, so a dependency that does not hold shows in the results.
void fork_join_work(Device& dev, const Buffers& m, Stream s0, Stream s1, Stream s2, Event fork,
                    Event join1, Event join2) {
  const Layout rows = Layout::contiguous({kN, kN}, 4);
  const Layout cols{{kN, kN}, {1, kN}, 0, 4};
  dev.copy_async(m.a, m.in, kBytes, s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  dev.wait_event(s2, fork);
  dev.copy_async(m.b1, m.a, kBytes, s1);
  dev.memset_async(m.flag, 0x77, 256, s1);
  dev.record(join1, s1);
  dev.copy_async(m.b2, rows, m.a, cols, s2);
  dev.record(join2, s2);
  dev.wait_event(s0, join1);
  dev.wait_event(s0, join2);
  dev.copy_async(m.out1, m.b1, kBytes, s0);
  dev.copy_async(m.out2, m.b2, kBytes, s0);
}

struct Streams {
  Stream s0, s1, s2;
  Event fork, join1, join2;
  explicit Streams(Device& dev)
      : s0(dev.create_stream()),
        s1(dev.create_stream()),
        s2(dev.create_stream()),
        fork(dev.create_event()),
        join1(dev.create_event()),
        join2(dev.create_event()) {}
};

}  // namespace

TEST_CASE("a fork/join capture replays many times like the same calls run eagerly",
          "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  Buffers m(dev);
  Streams st(dev);

  // Eager, for the reference the graph must match.
  const std::vector<float> first = random_floats(kN * kN, 1);
  dev.copy(m.in, first.data(), kBytes);
  fork_join_work(dev, m, st.s0, st.s1, st.s2, st.fork, st.join1, st.join2);
  dev.synchronize();
  const std::vector<float> eager1 = download<float>(dev, m.out1, kN * kN);
  const std::vector<float> eager2 = download<float>(dev, m.out2, kN * kN);
  CHECK(eager1 == first);
  CHECK(eager2 == transposed(first));
  for (DevicePtr p : {m.a, m.b1, m.b2, m.out1, m.out2}) dev.memset(p, 0, kBytes);
  dev.memset(m.flag, 0, 256);

  dev.begin_capture(st.s0);
  dev.copy_async(m.a, m.in, kBytes, st.s0);
  dev.record(st.fork, st.s0);
  CHECK_FALSE(dev.is_capturing(st.s1));
  dev.wait_event(st.s1, st.fork);
  CHECK(dev.is_capturing(st.s1));  // it joined the capture
  dev.wait_event(st.s2, st.fork);
  dev.copy_async(m.b1, m.a, kBytes, st.s1);
  dev.memset_async(m.flag, 0x77, 256, st.s1);
  dev.record(st.join1, st.s1);
  const Layout rows = Layout::contiguous({kN, kN}, 4);
  const Layout cols{{kN, kN}, {1, kN}, 0, 4};
  dev.copy_async(m.b2, rows, m.a, cols, st.s2);
  dev.record(st.join2, st.s2);
  dev.wait_event(st.s0, st.join1);
  dev.wait_event(st.s0, st.join2);
  dev.copy_async(m.out1, m.b1, kBytes, st.s0);
  dev.copy_async(m.out2, m.b2, kBytes, st.s0);
  const Graph g = dev.end_capture(st.s0);
  CHECK_FALSE(dev.is_capturing(st.s0));
  CHECK_FALSE(dev.is_capturing(st.s1));
  CHECK_FALSE(dev.is_capturing(st.s2));
  // Captured, not run.
  CHECK(download<float>(dev, m.out1, kN * kN) == std::vector<float>(kN * kN, 0.0f));
  CHECK(download<uint8_t>(dev, m.flag, 256) == std::vector<uint8_t>(256, 0));

  dev.instantiate(g);
  dev.replay(g, st.s0);
  dev.synchronize(st.s0);
  CHECK(download<float>(dev, m.out1, kN * kN) == eager1);
  CHECK(download<float>(dev, m.out2, kN * kN) == eager2);
  CHECK(download<uint8_t>(dev, m.flag, 256) == std::vector<uint8_t>(256, 0x77));

  // New inputs each time, on the origin stream and on a stream that took no part in it.
  const Stream other = dev.create_stream();
  for (uint32_t round = 0; round < 12; ++round) {
    const std::vector<float> input = random_floats(kN * kN, 100 + round);
    dev.copy(m.in, input.data(), kBytes);
    const Stream on = round % 2 ? other : st.s0;
    dev.replay(g, on);
    dev.synchronize(on);
    INFO("round " << round);
    CHECK(download<float>(dev, m.out1, kN * kN) == input);
    CHECK(download<float>(dev, m.out2, kN * kN) == transposed(input));
  }
  // Replays of one graph queued on two streams with nothing ordering them run one after the
  // other (the second waits for the first's last fence value), so neither sees the other's
  // fences half-way, and both finish.
  const std::vector<float> last = random_floats(kN * kN, 999);
  dev.copy(m.in, last.data(), kBytes);
  for (int i = 0; i < 4; ++i) dev.replay(g, i % 2 ? other : st.s0);
  dev.synchronize();
  CHECK(download<float>(dev, m.out1, kN * kN) == last);
  CHECK(download<float>(dev, m.out2, kN * kN) == transposed(last));
  dev.destroy_graph(g);
}

TEST_CASE(
    "replays of two fork/join graphs queued back to back, on two streams, interleave "
    "correctly",
    "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  constexpr int kRounds = 6;
  DevicePtr x = dev.malloc(kBytes), a = dev.malloc(kBytes), b = dev.malloc(kBytes),
            c = dev.malloc(kBytes), d = dev.malloc(kBytes), e = dev.malloc(kBytes),
            f = dev.malloc(kBytes);
  std::vector<std::vector<float>> inputs;
  std::vector<DevicePtr> staged, saved;
  for (int r = 0; r < kRounds; ++r) {
    inputs.push_back(random_floats(kN * kN, 500 + r));
    staged.push_back(upload(dev, inputs.back()));
    saved.push_back(dev.malloc(kBytes));
  }
  for (DevicePtr p : {x, a, b, c, d, e, f}) dev.memset(p, 0, kBytes);
  Stream s0 = dev.create_stream(), s1 = dev.create_stream(), s2 = dev.create_stream(),
         s3 = dev.create_stream();
  Event fork = dev.create_event(), join = dev.create_event();

  // G1: a = x; fork: b = a; join: c = b.  G2: d = c; fork: e = d; join: f = e.
  const auto capture = [&](Stream origin, Stream side, DevicePtr from, DevicePtr mid1,
                           DevicePtr mid2, DevicePtr to) {
    dev.begin_capture(origin);
    dev.copy_async(mid1, from, kBytes, origin);
    dev.record(fork, origin);
    dev.wait_event(side, fork);
    dev.copy_async(mid2, mid1, kBytes, side);
    dev.record(join, side);
    dev.wait_event(origin, join);
    dev.copy_async(to, mid2, kBytes, origin);
    const Graph g = dev.end_capture(origin);
    dev.instantiate(g);
    return g;
  };
  const Graph g1 = capture(s0, s1, x, a, b, c);
  const Graph g2 = capture(s2, s3, c, d, e, f);

  // Queued without a host wait: per round, x = input (eager), G1 on s0, G2 on s0 or on s2
  // (ordered by an event), and f saved (eager). Every round's input flows through both graphs.
  Event handoff = dev.create_event(), back = dev.create_event();
  for (int r = 0; r < kRounds; ++r) {
    dev.copy_async(x, staged[r], kBytes, s0);
    dev.replay(g1, s0);
    if (r % 2 == 0) {
      dev.replay(g2, s0);
    } else {
      dev.record(handoff, s0);
      dev.wait_event(s2, handoff);
      dev.replay(g2, s2);
      dev.record(back, s2);
      dev.wait_event(s0, back);
    }
    dev.copy_async(saved[r], f, kBytes, s0);
  }
  dev.synchronize();
  for (int r = 0; r < kRounds; ++r) {
    INFO("round " << r);
    CHECK(download<float>(dev, saved[r], kN * kN) == inputs[r]);
  }
  dev.destroy_graph(g1);
  dev.destroy_graph(g2);
}

TEST_CASE("a capture with a stream that did not join back fails at end_capture",
          "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(256), b = dev.malloc(256);
  Stream s0 = dev.create_stream(), s1 = dev.create_stream();
  Event fork = dev.create_event(), join = dev.create_event();

  dev.begin_capture(s0);
  dev.copy_async(a, b, 256, s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  dev.memset_async(b, 1, 256, s1);
  expect_error(ErrorKind::kInvalidArgument, "call end_capture() on stream 1",
               [&] { dev.end_capture(s1); });
  CHECK(dev.is_capturing(s1));  // that mistake ends nothing
  expect_error(ErrorKind::kInvalidArgument, "unjoined work: stream 2 joined the capture",
               [&] { dev.end_capture(s0); });
  CHECK_FALSE(dev.is_capturing(s0));
  CHECK_FALSE(dev.is_capturing(s1));

  // Work recorded after the last join is unjoined too.
  dev.begin_capture(s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  dev.memset_async(b, 1, 256, s1);
  dev.record(join, s1);
  dev.wait_event(s0, join);
  dev.memset_async(a, 2, 256, s1);
  expect_error(ErrorKind::kInvalidArgument, "unjoined work", [&] { dev.end_capture(s0); });

  // A stream that joined and only waited has nothing to join: fine.
  dev.begin_capture(s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  dev.memset_async(a, 3, 256, s0);
  const Graph g = dev.end_capture(s0);
  dev.instantiate(g);
  dev.replay(g, s0);
  dev.synchronize(s0);
  CHECK(download<uint8_t>(dev, a, 256) == std::vector<uint8_t>(256, 3));
  dev.destroy_graph(g);
}

TEST_CASE("a capture with work on more streams than the device has queues fails clearly",
          "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  // Every queue but the one that repairs fences can run a branch.
  const uint32_t queues = dev.properties().hardware_queues - 1;
  DevicePtr buf = dev.malloc(256 * (queues + 1));
  const Stream origin = dev.create_stream();
  const Event fork = dev.create_event();
  std::vector<Stream> side;
  std::vector<Event> joins;
  const auto capture = [&](uint32_t streams) {
    dev.begin_capture(origin);
    dev.record(fork, origin);
    dev.memset_async(buf, 1, 256, origin);
    for (uint32_t i = 1; i < streams; ++i) {
      if (side.size() < i) {
        side.push_back(dev.create_stream());
        joins.push_back(dev.create_event());
      }
      dev.wait_event(side[i - 1], fork);
      dev.memset_async(buf + 256 * i, uint8_t(i + 1), 256, side[i - 1]);
      dev.record(joins[i - 1], side[i - 1]);
      dev.wait_event(origin, joins[i - 1]);
    }
    return dev.end_capture(origin);
  };
  const Graph fits = capture(queues);
  dev.instantiate(fits);
  dev.replay(fits, origin);
  dev.synchronize(origin);
  std::vector<uint8_t> want;
  for (uint32_t i = 0; i < queues; ++i) want.insert(want.end(), 256, uint8_t(i + 1));
  CHECK(download<uint8_t>(dev, buf, 256 * queues) == want);
  dev.destroy_graph(fits);
  expect_error(ErrorKind::kInvalidArgument,
               "has work on " + std::to_string(queues + 1) + " streams, but the device has " +
                   std::to_string(queues) + " hardware queues",
               [&] { capture(queues + 1); });
  CHECK_FALSE(dev.is_capturing(origin));
}

TEST_CASE("waits across a capture's boundary are refused, as CUDA refuses them",
          "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(256), b = dev.malloc(256);
  Stream s0 = dev.create_stream(), s1 = dev.create_stream(), s2 = dev.create_stream();
  Event outside = dev.create_event(), inside = dev.create_event(), never = dev.create_event();

  // An event recorded before the capture: the graph cannot depend on it.
  dev.record(outside, s1);
  dev.begin_capture(s0);
  dev.copy_async(a, b, 256, s0);
  expect_error(ErrorKind::kInvalidArgument, "recorded outside the capture",
               [&] { dev.wait_event(s0, outside); });
  CHECK_FALSE(dev.is_capturing(s0));  // ended and discarded

  // An event never recorded: nothing to wait for, as outside a capture.
  dev.begin_capture(s0);
  dev.wait_event(s0, never);
  CHECK(dev.is_capturing(s0));

  // An event recorded in the capture: not done on the host, nor after the capture ends.
  dev.memset_async(a, 5, 256, s0);
  dev.record(inside, s0);
  expect_error(ErrorKind::kInvalidArgument, "runs only when the graph replays",
               [&] { dev.synchronize(inside); });
  expect_error(ErrorKind::kInvalidArgument, "runs only when the graph replays",
               [&] { dev.query(inside); });
  // Another capture cannot wait for it.
  dev.begin_capture(s2);
  expect_error(ErrorKind::kInvalidArgument, "captures are isolated",
               [&] { dev.wait_event(s2, inside); });
  CHECK_FALSE(dev.is_capturing(s2));
  CHECK(dev.is_capturing(s0));
  const Graph g = dev.end_capture(s0);
  expect_error(ErrorKind::kInvalidArgument, "which has ended", [&] { dev.wait_event(s1, inside); });
  expect_error(ErrorKind::kInvalidArgument, "elapsed time: event",
               [&] { dev.elapsed_ps(outside, inside); });
  // Recorded again outside a capture, it is an ordinary event.
  dev.instantiate(g);
  dev.replay(g, s0);
  dev.record(inside, s0);
  dev.wait_event(s1, inside);
  dev.copy_async(b, a, 256, s1);
  dev.synchronize(s1);
  CHECK(dev.query(inside));
  CHECK(download<uint8_t>(dev, b, 256) == std::vector<uint8_t>(256, 5));
  dev.destroy_graph(g);
}

TEST_CASE("a branch that fails inside a replay fails the replay's stream and hangs nothing",
          "[graphs][graph_streams]") {
  Device dev = Device::open(test::functional_options());
  DevicePtr a = dev.malloc(256), b = dev.malloc(256);
  Stream s0 = dev.create_stream(), s1 = dev.create_stream();
  Event fork = dev.create_event(), join = dev.create_event();
  dev.memset(a, 0, 256);
  dev.memset(b, 0, 256);

  dev.begin_capture(s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  isa::FillPacket bad{};  // a fill outside device memory: the branch faults at replay
  bad.ndims = 1;
  bad.pattern_size = 1;
  bad.pattern = 9;
  bad.sizes[0] = 64;
  bad.dst.addr = uint64_t{1} << 60;
  bad.dst.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  bad.dst.strides[0] = 1;
  submit_raw_packet(dev, s1, bad);
  dev.record(join, s1);
  dev.wait_event(s0, join);
  dev.memset_async(a, 4, 256, s0);
  const Graph g = dev.end_capture(s0);
  dev.instantiate(g);

  dev.replay(g, s0);
  expect_error(ErrorKind::kDeviceFault, "stream", [&] { dev.synchronize(s0); });
  // The next replay runs again (and fails the same way); ordinary work goes on after it.
  dev.replay(g, s0);
  expect_error(ErrorKind::kDeviceFault, "stream", [&] { dev.synchronize(s0); });
  dev.memset_async(b, 6, 256, s0);
  dev.synchronize(s0);
  CHECK(download<uint8_t>(dev, b, 256) == std::vector<uint8_t>(256, 6));
  dev.destroy_graph(g);
}

TEST_CASE(
    "the branches of a fork/join graph run at once: its simulated time is under the "
    "serial sum",
    "[graphs][graph_streams][timing]") {
  Device dev = Device::open(DeviceOptions{});
  // Each branch: 16 fills of 4 KiB one after another. A queue waits for each fill's DMA
  // (setup, memory latency, transfer) before the next, so one branch leaves the DMA engines
  // and the memory mostly idle; two branches on two queues overlap their fills.
  constexpr int kFills = 16;
  constexpr uint64_t kFill = 4096;
  DevicePtr x = dev.malloc(kFills * kFill), y = dev.malloc(kFills * kFill);
  Stream s0 = dev.create_stream(), s1 = dev.create_stream();
  Event fork = dev.create_event(), join = dev.create_event();
  Event start = dev.create_event(), end = dev.create_event();
  const auto fills = [&](DevicePtr p, uint8_t v, Stream s) {
    for (int i = 0; i < kFills; ++i) dev.memset_async(p + i * kFill, v, kFill, s);
  };

  dev.begin_capture(s0);
  fills(x, 1, s0);
  fills(y, 2, s0);
  const Graph serial = dev.end_capture(s0);
  dev.instantiate(serial);

  dev.begin_capture(s0);
  dev.record(fork, s0);
  dev.wait_event(s1, fork);
  fills(x, 3, s0);
  fills(y, 4, s1);
  dev.record(join, s1);
  dev.wait_event(s0, join);
  const Graph forked = dev.end_capture(s0);
  dev.instantiate(forked);

  const auto timed = [&](Graph g) {
    dev.record(start, s0);
    dev.replay(g, s0);
    dev.record(end, s0);
    return dev.elapsed_ps(start, end);
  };
  const int64_t serial_ps = timed(serial);
  const int64_t forked_ps = timed(forked);
  INFO("serial " << serial_ps << " ps, fork/join " << forked_ps << " ps");
  // The two branches overlap: well under the serial time (which is the sum of the two
  // branches' times), though not quite half of it (the fences add a few packets).
  CHECK(forked_ps < serial_ps * 3 / 4);
  // Two replays on two streams that nothing orders still run one after the other, as CUDA's
  // launches of one graph do: together about twice one replay's time (run at once, the second
  // one's origin branch would overlap the first one's).
  const Stream s2 = dev.create_stream();
  dev.record(start, s0);
  dev.replay(forked, s0);
  dev.replay(forked, s2);
  dev.record(end, s2);
  const int64_t both_ps = dev.elapsed_ps(start, end);
  INFO("two replays on two streams " << both_ps << " ps");
  CHECK(both_ps >= forked_ps * 19 / 10);
  CHECK(download<uint8_t>(dev, x, kFills * kFill) == std::vector<uint8_t>(kFills * kFill, 3));
  CHECK(download<uint8_t>(dev, y, kFills * kFill) == std::vector<uint8_t>(kFills * kFill, 4));
  dev.destroy_graph(serial);
  dev.destroy_graph(forked);
}
