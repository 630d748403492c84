#include "mtia/host/wait.h"

#include <sched.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "mtia/settings/settings.h"

namespace mtia::host {

namespace detail {
std::atomic<int> g_spinning{0};

void yield_thread() {
  sched_yield();
}
}  // namespace detail

const char* wait_policy_name(WaitPolicy policy) {
  switch (policy) {
    case WaitPolicy::kAuto:
      return "auto";
    case WaitPolicy::kSpin:
      return "spin";
    case WaitPolicy::kYield:
      return "yield";
    case WaitPolicy::kBlock:
      return "block";
  }
  return "?";
}

std::optional<WaitPolicy> parse_wait_policy(std::string_view text) {
  for (WaitPolicy p :
       {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kYield, WaitPolicy::kBlock}) {
    if (text == wait_policy_name(p)) return p;
  }
  return std::nullopt;
}

isa::Result<WaitPolicy> wait_policy_from_environment(WaitPolicy fallback) {
  const std::optional<std::string> env = settings::read("MTIA_EMU_WAIT");
  if (!env) return fallback;
  if (auto p = parse_wait_policy(*env)) return *p;
  return isa::reject(
      isa::ErrorCode::kInvalidArgument,
      "MTIA_EMU_WAIT=" + *env +
          " is not a wait policy; use auto (spin while a core is free, then yield, then block), "
          "spin, yield or block");
}

unsigned usable_cores() {
  static const unsigned cores = [] {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
      const int n = CPU_COUNT(&set);
      if (n > 0) return static_cast<unsigned>(n);
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 0 ? hw : 1u;
  }();
  return cores;
}

int spinning_threads() {
  return detail::g_spinning.load(std::memory_order_relaxed);
}

namespace {
std::atomic<int> g_busy{0};
}  // namespace

void add_busy_threads(int delta) {
  g_busy.fetch_add(delta, std::memory_order_relaxed);
}

int busy_threads() {
  return g_busy.load(std::memory_order_relaxed);
}

namespace {
// The latest CPU of each side, -1 while unknown; apart, as both sides write often.
struct alignas(64) SideCpu {
  std::atomic<int> cpu{-1};
};
SideCpu g_side_cpu[2];
}  // namespace

void note_cpu(WaitSide side) {
  g_side_cpu[static_cast<int>(side)].cpu.store(sched_getcpu(), std::memory_order_relaxed);
}

int host_runnable_tasks() {
  using Clock = std::chrono::steady_clock;
  static std::atomic<int64_t> next_read_ns{0};
  static std::atomic<int> runnable{-1};
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  int64_t due = next_read_ns.load(std::memory_order_relaxed);
  if (now >= due && next_read_ns.compare_exchange_strong(due, now + 10'000'000)) {
    int value = -1;
    if (FILE* f = std::fopen("/proc/loadavg", "re")) {
      double a, b, c;
      int running = 0, total = 0;
      if (std::fscanf(f, "%lf %lf %lf %d/%d", &a, &b, &c, &running, &total) == 5) value = running;
      std::fclose(f);
    }
    runnable.store(value, std::memory_order_relaxed);
  }
  return runnable.load(std::memory_order_relaxed);
}

bool spin_pays(WaitSide self) {
  const int cores = static_cast<int>(usable_cores());
  if (cores < 2 + spinning_threads() + busy_threads()) return false;
  // More runnable tasks than cores (this one and the other side included): a spin would take
  // a core that another task waits for.
  if (host_runnable_tasks() > cores) return false;
  const int mine = sched_getcpu();
  g_side_cpu[static_cast<int>(self)].cpu.store(mine, std::memory_order_relaxed);
  const WaitSide other = self == WaitSide::kHost ? WaitSide::kDevice : WaitSide::kHost;
  const int theirs = g_side_cpu[static_cast<int>(other)].cpu.load(std::memory_order_relaxed);
  return mine < 0 || theirs != mine;
}

}  // namespace mtia::host
