// How a thread of the emulator waits for the other side: the host thread for a completion,
// the simulator thread for a doorbell or another host request. Defined once here because the
// policy crosses every layer (host_api DeviceOptions -> driver -> backend -> sim), like CUDA's
// scheduling flags cross its runtime and driver.
//
// Each wait polls briefly, then yields, then blocks:
//   auto   spin up to kAutoSpin while a core is free for it (see spin_pays), then
//          sched_yield up to kAutoYield, then block;
//   spin   spin up to kLongPhase whether or not a core is free, then block;
//   yield  sched_yield up to kLongPhase, then block;
//   block  block at once (a futex; every hand-off pays a scheduler wake-up).
// Every phase is bounded, so a device with nothing to do uses no CPU once it has blocked.
// $MTIA_EMU_WAIT (auto, spin, yield or block) sets the policy where the caller does not.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "mtia/isa/result.h"

namespace mtia::host {

enum class WaitPolicy : uint8_t { kAuto = 0, kSpin = 1, kYield = 2, kBlock = 3 };

const char* wait_policy_name(WaitPolicy policy);  // "auto", "spin", "yield", "block"
std::optional<WaitPolicy> parse_wait_policy(std::string_view text);
// $MTIA_EMU_WAIT; `fallback` when it is unset or empty. Anything else fails
// (kInvalidArgument) naming the variable and the accepted values.
isa::Result<WaitPolicy> wait_policy_from_environment(WaitPolicy fallback = WaitPolicy::kAuto);

inline constexpr std::chrono::microseconds kAutoSpin{50};
inline constexpr std::chrono::microseconds kAutoYield{50};
inline constexpr std::chrono::microseconds kLongPhase{1000};

// Which side a thread waits on: host threads wait for the device (its simulator thread),
// the simulator thread waits for the host.
enum class WaitSide : uint8_t { kHost = 0, kDevice = 1 };

// Host cores this process may run on (its CPU affinity, else hardware_concurrency()).
unsigned usable_cores();
// Threads of this process inside a spin phase right now.
int spinning_threads();
// Other threads the emulator may keep busy right now beside the simulator thread (the PE
// helper threads while a launch runs): the simulator adds them at a launch's start and takes
// them off at its end.
void add_busy_threads(int delta);
int busy_threads();
// Tasks runnable on the whole host (the fourth field of /proc/loadavg, "R/total"), read at
// most every 10 ms; -1 when unknown.
int host_runnable_tasks();
// Records the CPU the calling thread runs on as the latest of `side` (sched_getcpu: a few
// nanoseconds). Each side notes it when it hands work to the other and when it starts to wait.
void note_cpu(WaitSide side);
// The rule of `auto` for a thread of side `self`: spin only when a core is left for the
// spinner, that is when
//  - usable_cores() >= 2 + spinning_threads() + busy_threads(): one core for the thread it
//    waits for, one for each thread already spinning or busy, one for itself, and
//  - the host has no more runnable tasks than usable cores (/proc/loadavg, read at most every
//    10 ms): on a loaded machine a spin takes a core that another task waits for, and
//  - the other side's thread was last seen on another CPU than this one: when the scheduler
//    put both on one CPU (other processes hold the rest), spinning would only keep the other
//    side from running, so the waiter yields to it at once.
bool spin_pays(WaitSide self);

namespace detail {
extern std::atomic<int> g_spinning;
void yield_thread();
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace detail

// Polls `ready` through the policy's spin and yield phases, for a thread of side `self`. True
// as soon as it holds; false when the phases ran out and the caller should block (its own
// condition variable, futex or event: this never blocks).
template <class Ready>
bool poll_before_block(WaitPolicy policy, WaitSide self, Ready&& ready) {
  using Clock = std::chrono::steady_clock;
  if (policy == WaitPolicy::kBlock) return false;
  std::chrono::nanoseconds spin{0}, yield{0};
  switch (policy) {
    case WaitPolicy::kAuto:
      spin = spin_pays(self) ? kAutoSpin : std::chrono::nanoseconds{0};
      yield = kAutoYield;
      break;
    case WaitPolicy::kSpin:
      spin = kLongPhase;
      break;
    case WaitPolicy::kYield:
      yield = kLongPhase;
      break;
    case WaitPolicy::kBlock:
      break;
  }
  const auto start = Clock::now();
  if (spin.count() > 0) {
    detail::g_spinning.fetch_add(1, std::memory_order_relaxed);
    bool done = false;
    for (unsigned i = 1;; ++i) {
      if (ready()) {
        done = true;
        break;
      }
      detail::cpu_relax();
      // The clock costs ~20 ns: look at it now and then.
      if (i % 32 == 0 && Clock::now() - start >= spin) break;
    }
    detail::g_spinning.fetch_sub(1, std::memory_order_relaxed);
    if (done) return true;
  }
  if (yield.count() > 0) {
    const auto until = Clock::now() + yield;
    do {
      if (ready()) return true;
      detail::yield_thread();
    } while (Clock::now() < until);
  }
  return ready();
}

}  // namespace mtia::host
