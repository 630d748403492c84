#include "pe_threads.h"

#include <cassert>
#include <chrono>

namespace mtia::sim::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Polls `ready` for as long as `policy` allows a thread to wait without blocking (a helper
// waiting for the next round, or the caller for the PEs still running on helpers); true as
// soon as it holds. `auto` polls only while the host has a core for every runnable task.
template <class Ready>
bool poll(host::WaitPolicy policy, Ready&& ready) {
  std::chrono::nanoseconds spin{0}, yield{0};
  switch (policy) {
    case host::WaitPolicy::kAuto:
      if (host::host_runnable_tasks() <= static_cast<int>(host::usable_cores())) {
        spin = host::kAutoSpin;
      }
      break;
    case host::WaitPolicy::kSpin:
      spin = host::kLongPhase;
      break;
    case host::WaitPolicy::kYield:
      yield = host::kLongPhase;
      break;
    case host::WaitPolicy::kBlock:
      break;
  }
  const auto start = Clock::now();
  for (unsigned i = 1; spin.count() > 0; ++i) {
    if (ready()) return true;
    host::detail::cpu_relax();
    // The clock costs ~20 ns: look at it now and then.
    if (i % 32 == 0 && Clock::now() - start >= spin) break;
  }
  while (yield.count() > 0 && Clock::now() - start < yield) {
    if (ready()) return true;
    std::this_thread::yield();
  }
  return ready();
}

}  // namespace

PeThreads::PeThreads(unsigned helpers, host::WaitPolicy policy) : policy_(policy) {
  threads_.reserve(helpers);
  for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { helper(); });
}

PeThreads::~PeThreads() {
  stop_.store(true, std::memory_order_seq_cst);
  ticket_.fetch_add(uint64_t{1} << kRoundShift, std::memory_order_seq_cst);  // a round of none
  {
    std::lock_guard<std::mutex> lock(mu_);
    round_started_.notify_all();
  }
  for (std::thread& t : threads_) t.join();
}

void PeThreads::run(uint32_t n, const std::function<void(uint32_t)>& fn) {
  assert(n <= kIndexMask);
  if (threads_.empty() || n <= 1) {
    for (uint32_t i = 0; i < n; ++i) fn(i);
    return;
  }
  fn_ = &fn;
  unfinished_.store(n, std::memory_order_relaxed);
  const uint64_t round = (ticket_.load(std::memory_order_relaxed) >> kRoundShift) + 1;
  const uint64_t ticket = (round << kRoundShift) | (uint64_t{n} << kSizeShift);
  ticket_.store(ticket, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    round_started_.notify_all();
  }
  work(ticket);
  // The last indexes may still run on helpers.
  auto finished = [this] { return unfinished_.load(std::memory_order_seq_cst) == 0; };
  if (!poll(policy_, finished)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeps_.store(true, std::memory_order_seq_cst);
    round_finished_.wait(lock, finished);
    caller_sleeps_.store(false, std::memory_order_relaxed);
  }
  fn_ = nullptr;
}

void PeThreads::work(uint64_t ticket) {
  const uint64_t round = ticket & ~kIndexMask;  // its number and size
  const uint64_t n = (ticket >> kSizeShift) & kIndexMask;
  for (;;) {
    uint64_t cur = ticket_.load(std::memory_order_acquire);
    uint64_t index;
    for (;;) {
      if ((cur & ~kIndexMask) != round) return;  // a later round: not this thread's to start
      index = cur & kIndexMask;
      if (index >= n) return;
      if (ticket_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        break;
      }
    }
    (*fn_)(static_cast<uint32_t>(index));
    if (unfinished_.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeps_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      round_finished_.notify_one();
    }
  }
}

void PeThreads::helper() {
  uint64_t seen = ticket_.load(std::memory_order_acquire) >> kRoundShift;
  for (;;) {
    // stop_ too: the destructor may have started its round of none before `seen` was read.
    auto next_round = [&] {
      return (ticket_.load(std::memory_order_seq_cst) >> kRoundShift) != seen ||
             stop_.load(std::memory_order_seq_cst);
    };
    if (!poll(policy_, next_round)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      round_started_.wait(lock, next_round);
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    const uint64_t ticket = ticket_.load(std::memory_order_acquire);
    seen = ticket >> kRoundShift;
    work(ticket);
  }
}

}  // namespace mtia::sim::detail
