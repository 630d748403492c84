// The host-side helpers of the PE model: UnitWorkers (unit math and local DMA copies on helper
// threads, in order per PE) and UnitTask (what it runs). Also built with ThreadSanitizer
// (test_unit_workers_tsan), so the checks read only what join() has made safe to read.
#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <ctime>
#include <memory>
#include <thread>
#include <vector>

#include "mtia/sim/pe/unit_workers.h"

using mtia::sim::pe::UnitWorkers;

TEST_CASE("unit workers run each PE's work in order, and join waits for it", "[pe][workers]") {
  const unsigned threads = GENERATE(0u, 1u, 3u);
  INFO(threads << " helper threads");
  constexpr uint32_t kPes = 4;
  constexpr int kOps = 50;
  UnitWorkers workers(threads, kPes);
  // Slots filled in run order; what join() has not covered may still be running, so the
  // checks read the counts (atomic) and only slots that are already written.
  std::vector<std::vector<int>> seen(kPes, std::vector<int>(kOps, -1));
  std::atomic<int> count[kPes] = {};
  std::atomic<int> running_on_pe[kPes] = {};
  std::atomic<bool> overlap{false};
  for (int i = 0; i < kOps; ++i) {
    for (uint32_t pe = 0; pe < kPes; ++pe) {
      const uint64_t number = workers.post(pe, [&, pe, i] {
        if (running_on_pe[pe].fetch_add(1) != 0) overlap = true;
        if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
        seen[pe][count[pe]++] = i;
        running_on_pe[pe].fetch_sub(1);
      });
      CHECK(number == uint64_t(i) + 1);  // numbered 1, 2, ... per PE
    }
  }
  // Up to op 10 of PE 2: at least those have run, in order.
  workers.join(2, 10);
  REQUIRE(count[2].load() >= 10);
  for (int i = 0; i < 10; ++i) CHECK(seen[2][i] == i);
  workers.join_all();
  CHECK_FALSE(overlap.load());
  for (uint32_t pe = 0; pe < kPes; ++pe) {
    REQUIRE(count[pe].load() == kOps);
    for (int i = 0; i < kOps; ++i) CHECK(seen[pe][i] == i);
  }
  CHECK(workers.posted() == uint64_t{kOps} * kPes);
  CHECK(workers.threads() == threads);
}

TEST_CASE("work posted without waking a helper still runs, in order, by join at the latest",
          "[pe][workers]") {
  const unsigned threads = GENERATE(0u, 1u, 2u);
  INFO(threads << " helper threads");
  UnitWorkers workers(threads, 2);
  std::vector<int> seen;
  // A long operation that wakes a helper, then small ones behind it that do not.
  workers.post(0, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    seen.push_back(0);
  });
  for (int i = 1; i < 20; ++i)
    workers.post(
        0, [&, i] { seen.push_back(i); }, /*wake=*/false);
  // Only unwoken work on the other PE: nobody runs it until the join.
  int other = 0;
  workers.post(
      1, [&] { ++other; }, /*wake=*/false);
  workers.join(0);
  REQUIRE(seen.size() == 20);
  for (int i = 0; i < 20; ++i) CHECK(seen[i] == i);
  workers.join_all();
  CHECK(other == 1);
}

TEST_CASE("idle helpers sleep: a trickle of small work costs little more CPU than the work",
          "[pe][workers]") {
  auto cpu_seconds = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  };
  constexpr uint32_t kPes = 8;
  UnitWorkers workers(6, kPes);
  std::atomic<int> ran{0};
  // One tiny operation every 300 us, each to an idle PE: helpers that spun for every post (or
  // all woke for it) would burn several cores' worth of the wall time in between.
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  constexpr int kPosts = 200;
  for (int i = 0; i < kPosts; ++i) {
    workers.post(static_cast<uint32_t>(i) % kPes, [&] { ran.fetch_add(1); });
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  workers.join_all();
  const double cpu = cpu_seconds() - cpu0;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  CHECK(ran.load() == kPosts);
  INFO("CPU " << cpu * 1e3 << " ms over " << wall * 1e3 << " ms of wall time");
  CHECK(cpu < 0.5 * wall);
}

TEST_CASE("a PE with more work queued than its ring holds still runs it all, in order",
          "[pe][workers]") {
  const unsigned threads = GENERATE(1u, 2u);
  INFO(threads << " helper threads");
  UnitWorkers workers(threads, 3);
  std::vector<int> seen;
  std::atomic<int> ran{0};  // read while operations may still run; `seen` is not
  // The first operation is slow, so the ring fills up behind it and post() has to wait (or run
  // operations itself) before it can queue more.
  workers.post(1, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    seen.push_back(0);
    ++ran;
  });
  constexpr int kOps = 1000;
  for (int i = 1; i < kOps; ++i) {
    CHECK(workers.post(1, [&, i] {
      seen.push_back(i);
      ++ran;
    }) == uint64_t(i) + 1);
  }
  workers.join(1, 500);
  CHECK(ran.load() >= 500);
  workers.join_all();
  REQUIRE(seen.size() == size_t{kOps});
  for (int i = 0; i < kOps; ++i) CHECK(seen[i] == i);
}

TEST_CASE("a unit task keeps its callable in place, moves it, and destroys it once",
          "[pe][workers]") {
  using mtia::sim::pe::UnitTask;
  auto token = std::make_shared<int>(0);
  std::array<unsigned char, 300> big{};  // as large as the PE model's bound DMAs
  big[299] = 7;
  UnitTask a = [token, big] { *token += big[299]; };
  CHECK(token.use_count() == 2);
  UnitTask b = std::move(a);
  CHECK_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty, by contract
  REQUIRE(b);
  CHECK(token.use_count() == 2);  // moved, not copied
  b();
  b();
  CHECK(*token == 14);
  UnitTask c;
  c = std::move(b);
  c();
  CHECK(*token == 21);
  c.reset();
  CHECK_FALSE(c);
  CHECK(token.use_count() == 1);  // the capture is gone
  {
    UnitTask d = [token] {};
    CHECK(token.use_count() == 2);
  }
  CHECK(token.use_count() == 1);  // and gone with the task
}
