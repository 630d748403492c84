#include "mtia/sim/pe/unit_workers.h"

#include <algorithm>
#include <cassert>
#include <chrono>

namespace mtia::sim::pe {
namespace {

// How long a thread with nothing to run keeps looking before it sleeps: longer than the
// simulator thread takes to post the next operation as a rule (a sleeping thread costs the
// one that wakes it tens of microseconds in a virtual machine), short enough that idle helpers
// do not burden the rest of the host.
constexpr std::chrono::microseconds kSpin{50};

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

UnitWorkers::UnitWorkers(unsigned threads, uint32_t pes)
    : queues_(std::make_unique<Queue[]>(pes)), pes_(pes) {
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this, i] { worker(i); });
}

UnitWorkers::~UnitWorkers() {
  stop_.store(true);
  {
    // A thread between its last look at stop_ and its wait holds the lock: taking it here
    // means the notification cannot fall in between.
    std::lock_guard lock(sleep_mu_);
  }
  wake_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t UnitWorkers::post(uint32_t pe, UnitTask&& work, bool wake) {
  assert(pe < pes_);
  ++posted_;
  Queue& q = queues_[pe];
  const uint64_t n = q.posted.load(std::memory_order_relaxed);
  if (threads_.empty()) {
    work();
    q.done.store(n + 1, std::memory_order_relaxed);
    q.posted.store(n + 1, std::memory_order_relaxed);
    return n + 1;
  }
  uint64_t done = q.done.load(std::memory_order_acquire);
  while (n - done >= kRing) {
    if (!run_queued(pe, n + 1 - kRing)) cpu_relax();  // full: the oldest must finish first
    done = q.done.load(std::memory_order_acquire);
  }
  q.ring[n % kRing] = std::move(work);
  q.posted.store(n + 1, std::memory_order_release);
  // Work queued behind the PE's earlier work is found by whoever runs that (it runs until the
  // queue is empty) or by its end-of-batch progress: only a PE that was idle needs telling.
  if (done == n || (wake && sleepers_.load(std::memory_order_relaxed) > 0)) note_progress(wake);
  return n + 1;
}

bool UnitWorkers::run_queued(uint32_t pe, uint64_t upto) {
  Queue& q = queues_[pe];
  bool ran = false;
  for (;;) {
    if (q.done.load(std::memory_order_acquire) >=
        std::min(upto, q.posted.load(std::memory_order_acquire))) {
      break;
    }
    bool unclaimed = false;
    if (!q.claimed.compare_exchange_strong(unclaimed, true, std::memory_order_acquire)) break;
    uint64_t n = q.done.load(std::memory_order_relaxed);
    bool batch = false;
    while (n < std::min(upto, q.posted.load(std::memory_order_acquire))) {
      q.ring[n % kRing]();
      q.done.store(++n, std::memory_order_release);
      batch = true;
    }
    q.claimed.store(false, std::memory_order_seq_cst);
    if (batch) note_progress(/*wake=*/true);
    ran = ran || batch;
    // Look again: what was posted after the last look but before the release is nobody's.
  }
  return ran;
}

int64_t UnitWorkers::run_any(int64_t prefer, uint32_t& cursor) {
  // The PE run last first: its local store is still in this core's cache.
  if (prefer >= 0 && run_queued(static_cast<uint32_t>(prefer))) return prefer;
  for (uint32_t i = 0; i < pes_; ++i) {
    const uint32_t pe = (cursor + i) % pes_;
    if (run_queued(pe)) {
      cursor = (pe + 1) % pes_;
      return pe;
    }
  }
  return -1;
}

void UnitWorkers::note_progress(bool wake) {
  progress_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with idle(): either a sleeper sees the new count before it waits, or this sees it
  // counted among the sleepers and wakes it.
  if (wake && sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(sleep_mu_);
    wake_cv_.notify_all();
  }
}

void UnitWorkers::idle(uint64_t seen) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    if (stop_.load(std::memory_order_relaxed) ||
        progress_.load(std::memory_order_acquire) != seen) {
      return;
    }
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  std::unique_lock lock(sleep_mu_);
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  wake_cv_.wait(lock,
                [&] { return stop_.load() || progress_.load(std::memory_order_seq_cst) != seen; });
  sleepers_.fetch_sub(1, std::memory_order_seq_cst);
}

void UnitWorkers::worker(unsigned index) {
  int64_t last = -1;
  uint32_t cursor = pes_ > 0 ? index * 7 % pes_ : 0;  // helpers start their scans apart
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t seen = progress_.load(std::memory_order_seq_cst);
    const int64_t pe = run_any(last, cursor);
    if (pe >= 0) {
      last = pe;
      continue;
    }
    idle(seen);  // until something is posted or finished
  }
}

void UnitWorkers::join(uint32_t pe, uint64_t upto) {
  if (threads_.empty()) return;
  Queue& q = queues_[pe];
  upto = std::min(upto, q.posted.load(std::memory_order_relaxed));
  uint32_t cursor = (pe + 1) % pes_;
  while (q.done.load(std::memory_order_acquire) < upto) {
    const uint64_t seen = progress_.load(std::memory_order_seq_cst);
    if (run_queued(pe, upto)) continue;  // its next operation is free: run it here
    if (q.done.load(std::memory_order_acquire) >= upto) break;
    // A helper is running it: meanwhile run another PE's next operation, one at a time so as
    // to look again soon, rather than sit idle.
    bool helped = false;
    for (uint32_t i = 0; i < pes_ && !helped; ++i) {
      const uint32_t other = (cursor + i) % pes_;
      if (other == pe) continue;
      helped = run_queued(other, queues_[other].done.load(std::memory_order_acquire) + 1);
      if (helped) cursor = other;
    }
    if (!helped) idle(seen);
  }
}

void UnitWorkers::join_all() {
  if (threads_.empty()) return;
  int64_t last = -1;
  uint32_t cursor = 0;
  for (;;) {
    const uint64_t seen = progress_.load(std::memory_order_seq_cst);
    const int64_t pe = run_any(last, cursor);
    if (pe >= 0) {
      last = pe;
      continue;
    }
    bool busy = false;
    for (uint32_t i = 0; i < pes_ && !busy; ++i) {
      busy = queues_[i].done.load(std::memory_order_acquire) <
             queues_[i].posted.load(std::memory_order_relaxed);
    }
    if (!busy) return;
    idle(seen);
  }
}

}  // namespace mtia::sim::pe
