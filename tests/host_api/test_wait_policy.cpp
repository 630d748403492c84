// The wait policy (DeviceOptions::wait, $MTIA_EMU_WAIT; mtia/isa/wait.h): every policy gives
// the same results and simulated times, the environment variable is checked, and an open,
// idle device uses no CPU under any of them.
#include <unistd.h>
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "device_helpers.h"
#include "scoped_env.h"

using namespace mtia;
using mtia::test::expect_error;

namespace {

using mtia::test::ScopedEnv;

constexpr WaitPolicy kAll[] = {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kYield,
                               WaitPolicy::kBlock};

// CPU time of this process so far (user + system), seconds, from /proc/self/stat.
double process_cpu_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Fields after the command name, which is in parentheses and may hold spaces.
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

struct Outcome {
  std::vector<int32_t> out;
  int64_t launch_ps = 0;
  int64_t copies_ps = 0;
};

// Copies, small round trips from several threads, a launch and event waits under `policy`.
Outcome run_workload(WaitPolicy policy) {
  DeviceOptions o;
  o.wait = policy;
  Device dev = Device::open(o);
  CHECK(dev.properties().wait == policy);
  KernelModule m = dev.load_module(MTIA_SMOKE_KERNEL_ELF);
  const uint32_t n = 4096;
  std::vector<int32_t> in(n);
  std::mt19937 rng(7);
  for (auto& x : in) x = static_cast<int32_t>(rng());
  DevicePtr din = dev.malloc(4 * n), dout = dev.malloc(4 * n);

  Outcome r;
  Event a = dev.create_event(), b = dev.create_event();
  dev.record(a);
  dev.copy(din, in.data(), 4 * n);
  dev.record(b);
  r.copies_ps = dev.elapsed_ps(a, b);

  // Round trips from three threads at once, each on its own stream.
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&dev, t] {
      void* host = dev.host_alloc(256);
      DevicePtr d = dev.malloc(256);
      Stream s = dev.create_stream();
      for (int i = 0; i < 40; ++i) {
        std::memset(host, i + t, 256);
        dev.copy_async(d, host, 256, s);
        dev.synchronize(s);
      }
      dev.destroy_stream(s);
      dev.free(d);
      dev.host_free(host);
    });
  }
  for (auto& t : threads) t.join();

  dev.record(a);
  dev.launch(m.entry_kernel(), {2, 2}, {din, dout, int64_t(n)});
  dev.record(b);
  dev.synchronize(b);
  r.launch_ps = dev.elapsed_ps(a, b);
  r.out.resize(n);
  dev.copy(r.out.data(), dout, 4 * n);
  for (uint32_t i = 0; i < n; ++i) REQUIRE(r.out[i] == in[i] + 1);
  dev.free(din);
  dev.free(dout);
  return r;
}

}  // namespace

TEST_CASE("every wait policy gives the same results and simulated times", "[wait]") {
  const Outcome first = run_workload(WaitPolicy::kBlock);
  CHECK(first.launch_ps > 0);
  CHECK(first.copies_ps > 0);
  for (WaitPolicy p : kAll) {
    INFO("wait " << wait_policy_name(p));
    const Outcome o = run_workload(p);
    CHECK(o.out == first.out);
    CHECK(o.launch_ps == first.launch_ps);
    CHECK(o.copies_ps == first.copies_ps);
  }
  CHECK(host::spinning_threads() == 0);
}

TEST_CASE("MTIA_EMU_WAIT chooses the policy; DeviceOptions::wait wins; bad values are errors",
          "[wait]") {
  for (WaitPolicy p : kAll) {
    ScopedEnv env("MTIA_EMU_WAIT", wait_policy_name(p));
    CHECK(Device::open(test::functional_options()).properties().wait == p);
  }
  {
    ScopedEnv env("MTIA_EMU_WAIT", nullptr);
    CHECK(Device::open(test::functional_options()).properties().wait == WaitPolicy::kAuto);
  }
  ScopedEnv env("MTIA_EMU_WAIT", "sometimes");
  expect_error(ErrorKind::kInvalidArgument, "MTIA_EMU_WAIT=sometimes is not a wait policy",
               [] { Device::open(test::functional_options()); });
  DeviceOptions o = test::functional_options();
  o.wait = WaitPolicy::kYield;  // the explicit option is used; the variable is not read
  CHECK(Device::open(o).properties().wait == WaitPolicy::kYield);
  o.wait = static_cast<WaitPolicy>(9);
  expect_error(ErrorKind::kInvalidArgument, "not a wait policy", [&] { Device::open(o); });
}

TEST_CASE("an open, idle device uses under 1% of a core under every wait policy", "[wait][idle]") {
  for (WaitPolicy p : kAll) {
    INFO("wait " << wait_policy_name(p));
    DeviceOptions o;
    o.wait = p;
    Device dev = Device::open(o);
    // Work first, so that every thread has just been polling when the device goes idle.
    void* host = dev.host_alloc(256);
    DevicePtr d = dev.malloc(256);
    for (int i = 0; i < 20; ++i) {
      dev.copy_async(d, host, 256);
      dev.synchronize();
    }
    // Polls last a few milliseconds at most; then everything sleeps.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double share = (process_cpu_seconds() - cpu0) / wall;
    INFO("idle CPU share " << share);
    CHECK(share < 0.01);
    dev.free(d);
    dev.host_free(host);
  }
}
