// The PE grid's host threads (sim/src/grid/pe_threads.h): every index of every round runs
// exactly once, on some thread, and run() returns only after all of them have returned,
// however the helpers wait between rounds. Built a second time with ThreadSanitizer.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "grid/pe_threads.h"

using mtia::host::WaitPolicy;
using mtia::sim::detail::PeThreads;

TEST_CASE("every index of every round runs once, before run() returns", "[grid][threads]") {
  for (const WaitPolicy policy : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kBlock}) {
    for (const unsigned helpers : {0u, 1u, 3u, 7u}) {
      INFO("policy " << mtia::host::wait_policy_name(policy) << ", " << helpers << " helpers");
      PeThreads threads(helpers, policy);
      CHECK(threads.helpers() == helpers);
      std::vector<uint32_t> ran(64);
      for (uint32_t round = 0; round < 300; ++round) {
        const uint32_t n = round % 65;  // 0 and 1 included: run on the caller alone
        std::vector<std::atomic<uint32_t>> hits(n);
        threads.run(n, [&](uint32_t i) {
          hits[i].fetch_add(1, std::memory_order_relaxed);
          ran[i] += 1;  // each index on one thread at a time: no race
        });
        uint32_t wrong = 0;
        for (uint32_t i = 0; i < n; ++i) wrong += hits[i].load() != 1;
        REQUIRE(wrong == 0);  // all done, each once, when run() returned
      }
      uint32_t total = 0;
      for (uint32_t v : ran) total += v;
      uint32_t expected = 0;
      for (uint32_t round = 0; round < 300; ++round) expected += round % 65;
      CHECK(total == expected);
    }
  }
}

TEST_CASE("a round's indexes run on several threads when there are helpers", "[grid][threads]") {
  PeThreads threads(3, WaitPolicy::kSpin);
  std::set<std::thread::id> seen;
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::mutex mu;
  // Each index waits for a second index to be running at the same time (or 200 ms): only
  // several threads can give that.
  threads.run(8, [&](uint32_t) {
    const int now = inside.fetch_add(1) + 1;
    int m = most.load();
    while (now > m && !most.compare_exchange_weak(m, now)) {
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    while (most.load() < 2 && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      seen.insert(std::this_thread::get_id());
    }
    inside.fetch_sub(1);
  });
  CHECK(most.load() >= 2);
  CHECK(seen.size() >= 2);
}

TEST_CASE("threads that sleep between rounds wake for the next and at the end", "[grid][threads]") {
  for (int repeat = 0; repeat < 20; ++repeat) {
    PeThreads threads(2, WaitPolicy::kBlock);
    std::atomic<uint32_t> sum{0};
    for (int round = 0; round < 5; ++round) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the helpers block
      threads.run(16, [&](uint32_t i) { sum.fetch_add(i + 1); });
    }
    CHECK(sum.load() == 5 * (16 * 17 / 2));
  }  // each destructor wakes its sleeping helpers and joins them
}
