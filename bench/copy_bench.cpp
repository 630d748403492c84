// Copy benchmarks for the emulator (figures recorded in docs/performance.md):
//  1. host wall-clock throughput of 64 MiB fp32 2-D copies, contiguous and transposed,
//     host->device and device->host, as a ratio to host memcpy of the same bytes measured in
//     the same run (targets: contiguous >= 0.5, transposed >= 0.25);
//  2. the simulated time of the same copies against the preset's PCIe bandwidth;
//  3. the host round trip of a small async copy plus synchronize (target < 20 us in-process,
//     < 50 us through a device server).
// Each runs on the in-process device and then on a served one (a device server this bench
// starts, reached through the socket backend), unless --backend picks one.
//
// Usage: bench_copy [preset] [--round-trip] [--trips N] [--wait auto|spin|yield|block]
//                   [--backend inprocess|socket|both]
//   --round-trip  only the round trip (3.), skipping the 64 MiB copies
//   --wait        the device's wait policy (default: $MTIA_EMU_WAIT, else auto)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mtia/device.h"

namespace {

using Clock = std::chrono::steady_clock;

// Best of `reps` runs, seconds: the least disturbed measurement of the same work.
double best_seconds(int reps, const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

struct Options {
  std::string preset = "mtia-v2";
  bool round_trip_only = false;
  int trips = 2000;
  std::optional<mtia::WaitPolicy> wait;
  // "inprocess", "socket" (a device server this bench starts) or "both", one after the other.
  std::string backend = "both";
};

static void round_trip(mtia::Device& device, mtia::DevicePtr dev, void* host, int trips) {
  // A 256-byte async copy from pinned memory plus stream synchronize.
  std::vector<double> us(trips);
  mtia::Stream stream = device.create_stream();
  for (int i = 0; i < trips; ++i) {
    auto t0 = Clock::now();
    device.copy_async(dev, host, 256, stream);
    device.synchronize(stream);
    us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  std::sort(us.begin(), us.end());
  std::printf(
      "small async copy + synchronize round trip (wait %s): median %.1f us, p90 %.1f us, "
      "min %.1f us (%d trips)\n",
      mtia::wait_policy_name(device.properties().wait), us[trips / 2], us[trips * 9 / 10], us[0],
      trips);
  device.destroy_stream(stream);
}

static void bench_preset(const Options& o, const std::string& backend) {
  const std::string& preset = o.preset;
  mtia::DeviceOptions options;
  options.preset = preset;
  options.wait = o.wait;
  options.backend = backend;
  mtia::Device device = mtia::Device::open(options);
  std::printf("== backend %s%s ==\n", backend.c_str(),
              backend == "socket" ? " (a device server in its own process)" : "");
  if (o.round_trip_only) {
    mtia::DevicePtr dev = device.malloc(4096);
    void* host = device.host_alloc(4096);
    std::memset(host, 0, 4096);
    round_trip(device, dev, host, o.trips);
    device.free(dev);
    device.host_free(host);
    return;
  }
  const int64_t n = 4096;  // 4096 x 4096 fp32 = 64 MiB
  const uint64_t bytes = n * n * sizeof(float);
  const int reps = 5;

  const auto config = nlohmann::json::parse(device.config_json());
  const double h2d_GBps = config["pcie_h2d_bandwidth_GBps"]["value"].get<double>();
  const double d2h_GBps = config["pcie_d2h_bandwidth_GBps"]["value"].get<double>();

  auto* host = static_cast<float*>(device.host_alloc(bytes));
  auto* host2 = static_cast<float*>(device.host_alloc(bytes));
  for (int64_t i = 0; i < n * n; ++i) host[i] = static_cast<float>(i);
  std::memset(host2, 0, bytes);
  mtia::DevicePtr dev = device.malloc(bytes);

  const double memcpy_s = best_seconds(reps, [&] { std::memcpy(host2, host, bytes); });
  std::printf("preset %s, %llu MiB fp32 %lldx%lld, best of %d\n", preset.c_str(),
              static_cast<unsigned long long>(bytes >> 20), static_cast<long long>(n),
              static_cast<long long>(n), reps);
  std::printf("host memcpy: %.2f ms (%.2f GB/s)\n\n", memcpy_s * 1e3, bytes / memcpy_s / 1e9);
  std::printf("%-26s %10s %8s %8s | %12s %10s %8s\n", "copy", "wall ms", "GB/s", "vs memcpy",
              "simulated us", "sim GB/s", "of PCIe");

  const mtia::Layout contiguous = mtia::Layout::contiguous({n, n}, sizeof(float));
  const mtia::Layout transposed{{n, n}, {1, n}, 0, sizeof(float)};
  mtia::Event e0 = device.create_event(), e1 = device.create_event();

  auto run = [&](const char* name, double link_GBps, const std::function<void()>& copy) {
    const double s = best_seconds(reps, [&] {
      device.record(e0);
      copy();
      device.record(e1);
      device.synchronize(e1);
    });
    const double sim_s = static_cast<double>(device.elapsed_ps(e0, e1)) * 1e-12;
    const double sim_GBps = bytes / sim_s / 1e9;
    std::printf("%-26s %10.2f %8.2f %8.2f | %12.1f %10.2f %7.1f%%\n", name, s * 1e3,
                bytes / s / 1e9, memcpy_s / s, sim_s * 1e6, sim_GBps, 100.0 * sim_GBps / link_GBps);
  };
  run("h2d contiguous", h2d_GBps, [&] { device.copy(dev, contiguous, host, contiguous); });
  run("h2d transposed", h2d_GBps, [&] { device.copy(dev, contiguous, host, transposed); });
  run("d2h contiguous", d2h_GBps, [&] { device.copy(host2, contiguous, dev, contiguous); });
  run("d2h transposed", d2h_GBps, [&] { device.copy(host2, transposed, dev, contiguous); });

  std::printf("\n");
  round_trip(device, dev, host, o.trips);

  device.destroy_event(e0);
  device.destroy_event(e1);
  device.free(dev);
  device.host_free(host);
  device.host_free(host2);
}

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--round-trip") {
      o.round_trip_only = true;
    } else if (a == "--trips" && i + 1 < argc) {
      o.trips = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--wait" && i + 1 < argc) {
      o.wait = mtia::parse_wait_policy(argv[++i]);
      if (!o.wait) {
        std::fprintf(stderr, "bench_copy: --wait takes auto, spin, yield or block\n");
        return 2;
      }
    } else if (a == "--backend" && i + 1 < argc) {
      o.backend = argv[++i];
      if (o.backend != "inprocess" && o.backend != "socket" && o.backend != "both") {
        std::fprintf(stderr, "bench_copy: --backend takes inprocess, socket or both\n");
        return 2;
      }
    } else if (!a.empty() && a[0] != '-') {
      o.preset = a;
    } else {
      std::fprintf(stderr,
                   "usage: bench_copy [preset] [--round-trip] [--trips N] "
                   "[--wait auto|spin|yield|block] [--backend inprocess|socket|both]\n");
      return 2;
    }
  }
  try {
    if (o.backend != "socket") bench_preset(o, "inprocess");
    if (o.backend == "both") std::printf("\n");
    if (o.backend != "inprocess") bench_preset(o, "socket");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_copy: %s\n", e.what());
    return 1;
  }
  return 0;
}
