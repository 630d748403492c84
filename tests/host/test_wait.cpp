// The wait policy (isa/wait.h): names, $MTIA_EMU_WAIT, and that every phase is bounded.
#include <pthread.h>
#include <sched.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include "mtia/host/wait.h"
#include "scoped_env.h"

using namespace mtia::host;
using mtia::isa::ErrorCode;
using mtia::isa::Result;
using Clock = std::chrono::steady_clock;

namespace {

using mtia::test::ScopedEnv;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

constexpr WaitPolicy kAll[] = {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kYield,
                               WaitPolicy::kBlock};

}  // namespace

TEST_CASE("wait policies have names that parse back", "[wait]") {
  for (WaitPolicy p : kAll) CHECK(parse_wait_policy(wait_policy_name(p)) == p);
  CHECK(std::string(wait_policy_name(WaitPolicy::kYield)) == "yield");
  CHECK_FALSE(parse_wait_policy("Spin"));
  CHECK_FALSE(parse_wait_policy(""));
  CHECK_FALSE(parse_wait_policy("busy"));
}

TEST_CASE("MTIA_EMU_WAIT picks the policy and a bad value names the choices", "[wait]") {
  {
    ScopedEnv env("MTIA_EMU_WAIT", nullptr);
    CHECK(wait_policy_from_environment().value() == WaitPolicy::kAuto);
    CHECK(wait_policy_from_environment(WaitPolicy::kBlock).value() == WaitPolicy::kBlock);
  }
  {
    ScopedEnv env("MTIA_EMU_WAIT", "");
    CHECK(wait_policy_from_environment().value() == WaitPolicy::kAuto);
  }
  for (WaitPolicy p : kAll) {
    ScopedEnv env("MTIA_EMU_WAIT", wait_policy_name(p));
    CHECK(wait_policy_from_environment().value() == p);
  }
  ScopedEnv env("MTIA_EMU_WAIT", "fast");
  const Result<WaitPolicy> bad = wait_policy_from_environment();
  if (bad.ok()) {
    FAIL("a bad MTIA_EMU_WAIT was accepted");
  } else {
    CHECK(bad.error().code == ErrorCode::kInvalidArgument);
    const std::string what = bad.error().reason;
    CHECK(what.find("MTIA_EMU_WAIT=fast") != std::string::npos);
    CHECK(what.find("auto") != std::string::npos);
    CHECK(what.find("spin") != std::string::npos);
    CHECK(what.find("yield") != std::string::npos);
    CHECK(what.find("block") != std::string::npos);
  }
}

TEST_CASE("block polls nothing; a ready condition returns at once under every policy", "[wait]") {
  int calls = 0;
  CHECK_FALSE(poll_before_block(WaitPolicy::kBlock, WaitSide::kHost, [&] {
    ++calls;
    return true;
  }));
  CHECK(calls == 0);
  for (WaitPolicy p : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kYield}) {
    const auto t0 = Clock::now();
    CHECK(poll_before_block(p, WaitSide::kHost, [] { return true; }));
    CHECK(us_since(t0) < 1000);
  }
  CHECK(spinning_threads() == 0);
}

TEST_CASE("polling gives up after a bounded time when nothing comes", "[wait]") {
  // Generous bounds: a loaded machine may deschedule the poller for a while.
  const std::pair<WaitPolicy, double> limits[] = {
      {WaitPolicy::kAuto, 20'000}, {WaitPolicy::kSpin, 50'000}, {WaitPolicy::kYield, 50'000}};
  for (auto [p, limit_us] : limits) {
    const auto t0 = Clock::now();
    CHECK_FALSE(poll_before_block(p, WaitSide::kDevice, [] { return false; }));
    const double took = us_since(t0);
    CHECK(took < limit_us);
    if (p != WaitPolicy::kAuto) {
      CHECK(took >= std::chrono::duration<double, std::micro>(kLongPhase).count());
    }
  }
  CHECK(spinning_threads() == 0);
}

TEST_CASE("a poll sees a condition another thread makes true", "[wait]") {
  for (WaitPolicy p : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kYield}) {
    std::atomic<bool> flag{false};
    std::thread t([&] {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      flag.store(true, std::memory_order_release);
    });
    // Under a loaded machine the setter may come late: then the poll gives up (false) and a
    // caller would block; either way it must come back and then see the flag.
    const bool seen =
        poll_before_block(p, WaitSide::kHost, [&] { return flag.load(std::memory_order_acquire); });
    t.join();
    if (!seen) WARN("the setter thread ran only after the poll gave up (a loaded machine)");
    CHECK(flag.load());
  }
}

TEST_CASE("auto spins only with a core to spare, never on the other side's CPU", "[wait]") {
  const unsigned cores = usable_cores();
  REQUIRE(cores >= 1);
  const int before = busy_threads();
  add_busy_threads(static_cast<int>(cores));
  CHECK_FALSE(spin_pays(WaitSide::kHost));  // every core is taken
  add_busy_threads(-static_cast<int>(cores));
  CHECK(busy_threads() == before);
  if (cores < 2 || before != 0) return;

  cpu_set_t old;
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof old, &old) == 0);
  const int here = sched_getcpu();
  int there = -1;
  for (int c = 0; c < CPU_SETSIZE && there < 0; ++c) {
    if (c != here && CPU_ISSET(c, &old)) there = c;
  }
  REQUIRE(there >= 0);
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(here, &one);
  REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0);
  // The device side last seen on this very CPU: spinning would only keep it from running.
  note_cpu(WaitSide::kDevice);
  CHECK_FALSE(spin_pays(WaitSide::kHost));
  // The device side on another CPU: a core is free for the spinner.
  std::thread other([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(there, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    note_cpu(WaitSide::kDevice);
  });
  other.join();
  // Unless other processes keep more tasks runnable than there are cores.
  if (host_runnable_tasks() <= static_cast<int>(cores)) {
    CHECK(spin_pays(WaitSide::kHost));
  } else {
    CHECK_FALSE(spin_pays(WaitSide::kHost));
  }
  pthread_setaffinity_np(pthread_self(), sizeof old, &old);
}
