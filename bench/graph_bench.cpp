// Graph replay against the same work queued call by call (figures in docs/performance.md).
//
// A "step" is `ops` small kernel launches (32 x 32 x 32 fp32 matmul on one PE, the kernel
// library's) each followed by a 4 KiB device-to-device copy of its result: 2 x ops packets.
// Eager, the host queues every launch and copy; replayed, the step was captured once into a
// graph and the host queues one ExecBuffer packet. Per step, median of `steps` after a warm-up:
// host wall time (queue + synchronize) and simulated time (events around the step), both
// measured in the same run, with the ratio eager / replay.
//
// With --fills-only a step is `ops` 64-byte fills alone: the smallest DMA work, to see
// whether the command processor's dispatch or the DMA engines set the pace.
//
// With --branches N (2 or more), the step is also captured a second way: its ops dealt in turn
// to N streams forked from the capturing stream and joined back (event records and waits in
// the capture), so a replay runs N branches on N hardware queues. That graph's replay is a
// third row, against the one-stream graph's.
//
// Usage: bench_graph [preset] [--ops N] [--steps N] [--fills-only] [--branches N]
//        (default mtia-v2, 32 ops, 30 steps, no branches)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "kernel_library.h"
#include "mtia/device.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Figures {
  double wall_us = 0;  // host wall time per step, median
  double sim_us = 0;   // simulated time per step, median
};

// Runs `step` (which queues on `s`) `steps` times after 3 warm-up steps.
Figures measure(mtia::Device& dev, mtia::Stream s, int steps, const std::function<void()>& step) {
  mtia::Event start = dev.create_event(), end = dev.create_event();
  std::vector<double> walls, sims;
  for (int i = 0; i < steps + 3; ++i) {
    const auto t0 = Clock::now();
    dev.record(start, s);
    step();
    dev.record(end, s);
    dev.synchronize(s);
    const double wall = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (i < 3) continue;
    walls.push_back(wall);
    sims.push_back(static_cast<double>(dev.elapsed_ps(start, end)) / 1e6);
  }
  dev.destroy_event(start);
  dev.destroy_event(end);
  return {median(walls), median(sims)};
}

}  // namespace

int main(int argc, char** argv) {
  std::string preset = "mtia-v2";
  int ops = 32, steps = 30, branches = 0;
  bool launches = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--ops" || a == "--steps" || a == "--branches") && i + 1 < argc) {
      const int v = std::atoi(argv[++i]);
      const int least = a == "--branches" ? 2 : 1;
      if (v < least) {
        std::fprintf(stderr, "%s must be at least %d\n", a.c_str(), least);
        return 2;
      }
      (a == "--ops" ? ops : a == "--steps" ? steps : branches) = v;
    } else if (a == "--fills-only") {
      launches = false;
    } else if (!a.empty() && a[0] != '-') {
      preset = a;
    } else {
      std::fprintf(stderr,
                   "usage: bench_graph [preset] [--ops N] [--steps N] [--fills-only] "
                   "[--branches N]\n");
      return 2;
    }
  }
  try {
    mtia::DeviceOptions o;
    o.preset = preset;
    mtia::Device dev = mtia::Device::open(o);
    const mtia::KernelModule lib = dev.load_module(mtia::tools::kernel_library_path());
    const mtia::Kernel& matmul = lib.kernel("matmul");
    constexpr int64_t n = 32;
    constexpr uint8_t kFp32 = 1;  // MTIA_PE_DT_FP32
    std::vector<float> ones(n * n, 0.5f);
    mtia::DevicePtr a = dev.malloc(n * n * 4), b = dev.malloc(n * n * 4);
    dev.copy(a, ones.data(), n * n * 4);
    dev.copy(b, ones.data(), n * n * 4);
    std::vector<mtia::DevicePtr> c(ops), d(ops);
    for (int i = 0; i < ops; ++i) {
      c[i] = dev.malloc(n * n * 4);
      d[i] = dev.malloc(n * n * 4);
    }
    mtia::Stream s = dev.create_stream();
    // Op i of the step on `on(i)`.
    const auto ops_on = [&](const std::function<mtia::Stream(int)>& on) {
      for (int i = 0; i < ops; ++i) {
        if (!launches) {
          dev.memset_async(d[i], 0x3f, 64, on(i));
          continue;
        }
        dev.launch(matmul, mtia::Grid{1, 1},
                   {c[i], a, b, mtia::Arg::dtype(kFp32), mtia::Arg::dtype(kFp32), n, n, n, n,
                    int64_t{1}, n, int64_t{1}, n, int64_t{1}},
                   on(i));
        dev.copy_async(d[i], c[i], n * n * 4, on(i));
      }
    };
    const auto step = [&] { ops_on([&](int) { return s; }); };
    const Figures eager = measure(dev, s, steps, step);
    dev.begin_capture(s);
    step();
    const mtia::Graph g = dev.end_capture(s);
    dev.instantiate(g);
    const Figures replay = measure(dev, s, steps, [&] { dev.replay(g, s); });
    Figures forked;
    if (branches > 0) {
      // Branch 0 is s itself; the others fork from it and join back.
      std::vector<mtia::Stream> side(branches);
      side[0] = s;
      for (int i = 1; i < branches; ++i) side[i] = dev.create_stream();
      const mtia::Event fork = dev.create_event();
      std::vector<mtia::Event> joins(branches);
      for (auto& e : joins) e = dev.create_event();
      dev.begin_capture(s);
      dev.record(fork, s);
      for (int i = 1; i < branches; ++i) dev.wait_event(side[i], fork);
      ops_on([&](int i) { return side[i % branches]; });
      for (int i = 1; i < branches; ++i) {
        dev.record(joins[i], side[i]);
        dev.wait_event(s, joins[i]);
      }
      const mtia::Graph fg = dev.end_capture(s);
      dev.instantiate(fg);
      dev.memset(d[ops - 1], 0, n * n * 4);  // the result check below reads this run's output
      forked = measure(dev, s, steps, [&] { dev.replay(fg, s); });
      dev.destroy_graph(fg);
    }
    // The replayed step computed what the eager one did.
    std::vector<float> out(launches ? n * n : 16);
    dev.copy(out.data(), d[ops - 1], out.size() * 4);
    float fill_value;  // 0x3f3f3f3f
    const uint32_t fill_bits = 0x3f3f3f3fu;
    std::memcpy(&fill_value, &fill_bits, 4);
    const float want = launches ? 8.0f : fill_value;
    const bool right = std::all_of(out.begin(), out.end(), [&](float x) { return x == want; });
    dev.destroy_graph(g);

    if (launches) {
      std::printf("preset %s, %d launches + %d copies a step, median of %d steps\n", preset.c_str(),
                  ops, ops, steps);
    } else {
      std::printf("preset %s, %d fills of 64 bytes a step, median of %d steps\n", preset.c_str(),
                  ops, steps);
    }
    std::printf("| step | host wall us | simulated us |\n|---|---:|---:|\n");
    std::printf("| eager | %.1f | %.2f |\n", eager.wall_us, eager.sim_us);
    std::printf("| graph replay | %.1f | %.2f |\n", replay.wall_us, replay.sim_us);
    if (branches > 0) {
      std::printf("| graph replay, %d streams | %.1f | %.2f |\n", branches, forked.wall_us,
                  forked.sim_us);
    }
    std::printf("| eager / replay | %.2f | %.2f |\n", eager.wall_us / replay.wall_us,
                eager.sim_us / replay.sim_us);
    if (branches > 0) {
      std::printf("| replay 1 stream / %d streams | %.2f | %.2f |\n", branches,
                  replay.wall_us / forked.wall_us, replay.sim_us / forked.sim_us);
    }
    std::printf("result check (every output %s): %s\n",
                launches ? "32 x 0.5 x 0.5 = 8" : "the fill pattern", right ? "ok" : "WRONG");
    return right ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_graph: %s\n", e.what());
    return 1;
  }
}
