// Several devices in one process (each a device server started for it): peer copies between
// them against a nested-loop reference, waits for another device's events, and work from
// several threads on several devices at once.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "device_helpers.h"
#include "mtia/trace.h"
#include "reference.h"

using namespace mtia;
using namespace std::chrono_literals;
using mtia::test::expect_error;

namespace {

// $MTIA_EMU_DEVICES for the test's duration.
struct DevicesInEnvironment {
  explicit DevicesInEnvironment(int n) { setenv("MTIA_EMU_DEVICES", std::to_string(n).c_str(), 1); }
  ~DevicesInEnvironment() { unsetenv("MTIA_EMU_DEVICES"); }
};

std::vector<Device> open_all(int n) {
  std::vector<Device> devs;
  for (int i = 0; i < n; ++i) {
    DeviceOptions o = test::functional_options();
    o.index = static_cast<uint32_t>(i);
    devs.push_back(Device::open(o));
  }
  return devs;
}

// dst <- src element by element, by nested loops over the layouts (4-byte elements).
void reference_copy(std::vector<int32_t>& dst, const Layout& dl, const std::vector<int32_t>& src,
                    const Layout& sl) {
  const size_t rank = dl.sizes.size();
  std::vector<int64_t> idx(rank, 0);
  int64_t total = 1;
  for (int64_t s : dl.sizes) total *= s;
  for (int64_t n = 0; n < total; ++n) {
    int64_t d = dl.offset, s = sl.offset;
    for (size_t k = 0; k < rank; ++k) {
      d += idx[k] * dl.strides[k];
      s += idx[k] * sl.strides[k];
    }
    dst[static_cast<size_t>(d)] = src[static_cast<size_t>(s)];
    for (size_t k = rank; k-- > 0;) {
      if (++idx[k] < dl.sizes[k]) break;
      idx[k] = 0;
    }
  }
}

std::vector<int32_t> iota_from(size_t n, int32_t start) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<int32_t>(i);
  return v;
}

}  // namespace

TEST_CASE("two devices: strided peer copies in both directions match nested loops",
          "[multidevice]") {
  DevicesInEnvironment env(2);
  REQUIRE(device_count() == 2);
  std::vector<Device> devs = open_all(2);
  CHECK(devs[0].index() == 0);
  CHECK(devs[1].index() == 1);
  CHECK(devs[1].properties().backend == "socket");

  const size_t n = 24 * 40;
  const auto a_data = iota_from(n, 1000);
  const auto b_data = iota_from(n, -5000);
  struct Case {
    const char* name;
    Layout dst, src;
  };
  const std::vector<Case> cases = {
      {"contiguous", Layout::contiguous({24, 40}, 4), Layout::contiguous({24, 40}, 4)},
      {"transposed", Layout::contiguous({40, 24}, 4), Layout{{40, 24}, {1, 40}, 0, 4}},
      {"strided, with offsets", Layout{{5, 7}, {80, 3}, 11, 4}, Layout{{5, 7}, {1, 33}, 2, 4}},
      {"3-D permuted", Layout::contiguous({4, 6, 40}, 4), Layout{{4, 6, 40}, {40, 160, 1}, 0, 4}},
  };
  for (const Case& c : cases) {
    for (int from = 0; from < 2; ++from) {
      const int to = 1 - from;
      DYNAMIC_SECTION(c.name << ", device " << from << " to " << to) {
        const auto& src_data = from == 0 ? a_data : b_data;
        DevicePtr src = test::upload(devs[from], src_data);
        std::vector<int32_t> before(n, 7);
        DevicePtr dst = test::upload(devs[to], before);
        devs[to].copy_peer(dst, c.dst, devs[from], src, c.src);
        std::vector<int32_t> want = before;
        reference_copy(want, c.dst, src_data, c.src);
        CHECK(test::download<int32_t>(devs[to], dst, n) == want);
        // The source is untouched.
        CHECK(test::download<int32_t>(devs[from], src, n) == src_data);
        devs[from].free(src);
        devs[to].free(dst);
      }
    }
  }
}

TEST_CASE("four devices: a chain of async peer copies on streams, ordered without host waits",
          "[multidevice]") {
  DevicesInEnvironment env(4);
  std::vector<Device> devs = open_all(4);
  const size_t n = 64 * 64;
  const auto data = iota_from(n, 1);
  std::vector<DevicePtr> bufs;
  std::vector<Stream> streams;
  for (auto& d : devs) {
    bufs.push_back(d.malloc(n * 4));
    streams.push_back(d.create_stream());
  }
  devs[0].copy(bufs[0], data.data(), n * 4);
  // Each hop transposes: after four hops the data is back in its own layout.
  const Layout plain = Layout::contiguous({64, 64}, 4);
  const Layout transposed{{64, 64}, {1, 64}, 0, 4};
  for (int i = 1; i < 4; ++i) {
    devs[i].copy_peer_async(bufs[i], plain, devs[i - 1], bufs[i - 1], transposed, streams[i],
                            streams[i - 1]);
  }
  devs[0].copy_peer_async(bufs[0], plain, devs[3], bufs[3], transposed, streams[0], streams[3]);
  devs[0].synchronize(streams[0]);
  std::vector<int32_t> want = data, step(n);
  for (int hop = 0; hop < 4; ++hop) {
    reference_copy(step, plain, want, transposed);
    want = step;
  }
  CHECK(want == data);  // four transposes are the identity
  CHECK(test::download<int32_t>(devs[0], bufs[0], n) == want);
  // Odd hops hold the transpose.
  std::vector<int32_t> t(n);
  reference_copy(t, plain, data, transposed);
  CHECK(test::download<int32_t>(devs[1], bufs[1], n) == t);
  CHECK(test::download<int32_t>(devs[2], bufs[2], n) == data);
  CHECK(test::download<int32_t>(devs[3], bufs[3], n) == t);
}

TEST_CASE("a stream waits for another device's event on the device", "[multidevice]") {
  DevicesInEnvironment env(2);
  std::vector<Device> devs = open_all(2);
  Device& a = devs[0];
  Device& b = devs[1];
  test::Gate gate(a);
  Stream sa = a.create_stream(), sb = b.create_stream();
  DevicePtr pa = a.malloc(4096), pb = b.malloc(4096);
  Event done = a.create_event();

  gate.hold(sa);
  a.memset_async(pa, 3, 4096, sa);
  a.record(done, sa);
  b.wait_event(sb, a, done);
  b.memset_async(pb, 9, 4096, sb);  // b's own work, held by a's event
  std::this_thread::sleep_for(100ms);
  CHECK_FALSE(b.query(sb));  // held by a's event, which is held by the gate
  CHECK_FALSE(a.query(done));
  gate.open();
  b.synchronize(sb);
  CHECK(a.query(done));
  CHECK(test::download<uint8_t>(b, pb, 4096) == std::vector<uint8_t>(4096, 9));
  b.copy_peer(pb, a, pa, 4096, sb, sa);
  CHECK(test::download<uint8_t>(b, pb, 4096) == std::vector<uint8_t>(4096, 3));
  // A completed or never-recorded event holds nothing.
  Event never = a.create_event();
  b.wait_event(sb, a, never);
  b.wait_event(sb, a, done);
  b.memset(pb, 1, 16, sb);
  a.destroy_event(never);
  a.destroy_event(done);
}

TEST_CASE("a fault before another device's event is reported by the waiting stream",
          "[multidevice]") {
  DevicesInEnvironment env(2);
  std::vector<Device> devs = open_all(2);
  Device& a = devs[0];
  Device& b = devs[1];
  Stream sa = a.create_stream(), sb = b.create_stream();
  DevicePtr valid = a.malloc(64);
  submit_raw_packet(a, sa, test::faulting_copy(a, valid));
  Event ev = a.create_event();
  a.record(ev, sa);
  b.wait_event(sb, a, ev);
  // b's stream reports a's failure (the record that never ran because of it).
  expect_error(ErrorKind::kDeviceFault, "DMA copy", [&] { b.synchronize(sb); });
  expect_error(ErrorKind::kDeviceFault, "device address fault", [&] { a.synchronize(sa); });
  test::check_device_works(b, sb);  // both go on
  test::check_device_works(a, sa);
}

TEST_CASE("several threads drive several devices at once", "[multidevice]") {
  DevicesInEnvironment env(3);
  std::vector<Device> devs = open_all(3);
  auto worker = [&](int i) {
    Device& d = devs[i];
    Device& next = devs[(i + 1) % 3];
    std::mt19937 rng(100 + i);
    Stream s = d.create_stream();
    for (int round = 0; round < 20; ++round) {
      const int64_t rows = 1 + rng() % 31, cols = 1 + rng() % 29;
      const size_t n = static_cast<size_t>(rows * cols);
      const auto data = iota_from(n, static_cast<int32_t>(rng() % 10000));
      DevicePtr src = next.malloc(n * 4);
      next.copy(src, data.data(), n * 4);
      DevicePtr dst = d.malloc(n * 4);
      const Layout dl = Layout::contiguous({cols, rows}, 4);
      const Layout sl{{cols, rows}, {1, cols}, 0, 4};
      d.copy_peer(dst, dl, next, src, sl, s);
      std::vector<int32_t> want(n);
      reference_copy(want, dl, data, sl);
      std::vector<int32_t> got(n);
      d.copy(got.data(), dst, n * 4, s);
      if (got != want) return false;
      d.free(dst);
      next.free(src);
    }
    d.destroy_stream(s);
    return true;
  };
  std::vector<std::future<bool>> done;
  for (int i = 0; i < 3; ++i) done.push_back(std::async(std::launch::async, worker, i));
  for (auto& f : done) CHECK(f.get());
}

TEST_CASE("bad peer copies say what is wrong, and nothing is queued", "[multidevice]") {
  DevicesInEnvironment env(2);
  std::vector<Device> devs = open_all(2);
  DevicePtr a = devs[0].malloc(256), b = devs[1].malloc(256);
  expect_error(ErrorKind::kInvalidPointer, "src",
               [&] { devs[1].copy_peer(b, devs[0], DevicePtr(a.address() + 128), 256); });
  expect_error(ErrorKind::kInvalidPointer, "dst",
               [&] { devs[1].copy_peer(DevicePtr(b.address() + 8), devs[0], a, 256); });
  expect_error(ErrorKind::kInvalidArgument, "", [&] {
    devs[1].copy_peer(b, Layout::contiguous({8}, 4), devs[0], a, Layout::contiguous({9}, 4));
  });
  expect_error(ErrorKind::kInvalidHandle, "",
               [&] { devs[1].copy_peer(b, devs[0], a, 16, Stream{}, Stream{77}); });
  test::check_device_works(devs[0]);
  test::check_device_works(devs[1]);
  DeviceOptions far = test::functional_options();
  far.index = 2;
  expect_error(ErrorKind::kInvalidArgument, "this process has 2 devices",
               [&] { Device::open(far); });
}

TEST_CASE("the traces of several devices merge into one with a process per device",
          "[multidevice][trace]") {
  DevicesInEnvironment env(2);
  std::vector<Device> devs;
  for (uint32_t i = 0; i < 2; ++i) {
    DeviceOptions o;
    o.index = i;
    o.trace = TraceLevel::kKernels;
    devs.push_back(Device::open(o));
  }
  DevicePtr a = devs[0].malloc(4096), b = devs[1].malloc(4096);
  devs[0].memset(a, 1, 4096);
  devs[1].copy_peer(b, devs[0], a, 4096);
  const auto dir =
      std::filesystem::temp_directory_path() / ("mtia_merge_test_" + std::to_string(::getpid()));
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    const auto sub = dir / ("device" + std::to_string(i));
    devs[i].write_artifacts(sub.string());
    files.push_back((sub / "trace.json").string());
  }
  const std::string merged = (dir / "merged.json").string();
  merge_trace_files(files, merged);
  std::ifstream in(merged);
  const auto j = nlohmann::json::parse(in);
  std::set<std::string> processes;
  std::set<uint64_t> pids_with_slices;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name") {
      processes.insert(e["args"]["name"].get<std::string>());
    }
    if (e.value("ph", "") == "X") pids_with_slices.insert(e["pid"].get<uint64_t>());
  }
  // Each device's host calls and device tracks, named by device.
  int per_device[2] = {0, 0};
  for (const auto& name : processes) {
    if (name.rfind("mtia:0 ", 0) == 0) ++per_device[0];
    if (name.rfind("mtia:1 ", 0) == 0) ++per_device[1];
  }
  CHECK(per_device[0] >= 2);
  CHECK(per_device[1] >= 2);
  CHECK(std::any_of(pids_with_slices.begin(), pids_with_slices.end(),
                    [](uint64_t p) { return p > 100 && p < 200; }));
  CHECK(std::any_of(pids_with_slices.begin(), pids_with_slices.end(),
                    [](uint64_t p) { return p > 200 && p < 300; }));
  CHECK(j["otherData"]["devices"].size() == 2);
  // Something that is not a trace is refused, naming it.
  std::ofstream(dir / "bad.json") << "{\"no\": 1}";
  expect_error(ErrorKind::kInvalidArgument, "trace 1 cannot be merged", [&] {
    merge_trace_files({files[0], (dir / "bad.json").string()}, merged);
  });
  expect_error(ErrorKind::kInvalidArgument, "cannot open trace",
               [&] { merge_trace_files({(dir / "missing.json").string()}, merged); });
  std::filesystem::remove_all(dir);
}
