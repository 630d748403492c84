#include "mtia/sim/pe/unit_workers.h"

#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdlib>

namespace mtia::sim::pe {
namespace {

using Clock = std::chrono::steady_clock;

// The longest a thread with nothing to run looks for work before it sleeps: longer than the
// simulator thread takes to post the next operation as a rule (a sleeping thread costs the one
// that wakes it tens of microseconds in a virtual machine).
constexpr int64_t kSpinNs = 50'000;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

unsigned host_cores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
#endif
  return std::max(1u, std::thread::hardware_concurrency());
}

// Tasks runnable on the whole machine at this moment (the kernel's count in /proc/loadavg,
// which includes the caller), read at most once a millisecond; -1 where unknown.
int64_t runnable_tasks() {
  static std::atomic<int64_t> value{-1};
  static std::atomic<int64_t> read_at{0};
  static const int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
  int64_t last = read_at.load(std::memory_order_relaxed);
  if (now - last < 1'000'000 ||
      !read_at.compare_exchange_strong(last, now, std::memory_order_relaxed)) {
    return value.load(std::memory_order_relaxed);
  }
  // "0.52 0.58 0.59 3/467 12345": the fourth field is runnable/total.
  char buf[128];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  int64_t runnable = -1;
  if (n > 0) {
    buf[n] = '\0';
    const char* p = buf;
    for (int spaces = 0; *p != '\0' && spaces < 3; ++p) spaces += *p == ' ';
    if (*p >= '0' && *p <= '9') runnable = std::strtoll(p, nullptr, 10);
  }
  value.store(runnable, std::memory_order_relaxed);
  return runnable;
}

}  // namespace

UnitWorkers::UnitWorkers(unsigned threads, uint32_t pes)
    : queues_(std::make_unique<Queue[]>(pes)), pes_(pes), cores_(host_cores()) {
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
  helper_cv_.notify_all();
  join_cv_.notify_all();
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
  if (done == n || (wake && sleepers_.load(std::memory_order_relaxed) > 0)) note_posted(wake);
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
    if (batch) note_done();
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

void UnitWorkers::note_posted(bool wake) {
  posted_seq_.fetch_add(1, std::memory_order_seq_cst);
  // Pairs with helper_idle(): either a sleeper sees the new count before it waits, or this sees
  // it counted among the sleepers and wakes one. A helper that is looking takes the work.
  if (wake && spinners_.load(std::memory_order_seq_cst) == 0 &&
      sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(sleep_mu_);
    helper_cv_.notify_one();
  }
}

void UnitWorkers::note_done() {
  done_seq_.fetch_add(1, std::memory_order_seq_cst);
  if (joiner_asleep_.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(sleep_mu_);
    join_cv_.notify_all();
  }
}

void UnitWorkers::helper_idle(uint64_t seen, int64_t& spin_ns) {
  const auto start = Clock::now();
  const uint64_t seen_handoff = handoff_seq_.load(std::memory_order_seq_cst);
  auto posted = [&] {
    return stop_.load(std::memory_order_relaxed) ||
           posted_seq_.load(std::memory_order_seq_cst) != seen;
  };
  // Spin only as the one helper looking, with a core free: otherwise the spin takes a core from
  // a thread with work (the simulator thread, another helper, another process).
  auto core_free = [this] {
    const int64_t runnable = runnable_tasks();
    return runnable < 0 || runnable <= static_cast<int64_t>(cores_);
  };
  unsigned none = 0;
  bool found = false;
  if (spin_ns > 0 && core_free() &&
      spinners_.compare_exchange_strong(none, 1, std::memory_order_seq_cst)) {
    const auto until = start + std::chrono::nanoseconds(spin_ns);
    for (unsigned i = 1; !(found = posted()); ++i) {
      cpu_relax();
      if (i % 64 == 0 && Clock::now() >= until) break;
    }
    spinners_.fetch_sub(1, std::memory_order_seq_cst);
    // Going to work: wake a sleeper to look in its place, so that the next post finds a helper
    // awake and the simulator thread does not pay for the wake-up.
    if (found && spinners_.load(std::memory_order_seq_cst) == 0 &&
        sleepers_.load(std::memory_order_seq_cst) > 0 && core_free()) {
      handoff_seq_.fetch_add(1, std::memory_order_seq_cst);
      std::lock_guard lock(sleep_mu_);
      helper_cv_.notify_one();
    }
  }
  if (!found) {
    std::unique_lock lock(sleep_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    helper_cv_.wait(lock, [&] {
      return posted() || handoff_seq_.load(std::memory_order_seq_cst) != seen_handoff;
    });
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    if (!posted()) return;  // woken to look for work: its spin budget stays as it was
  }
  // Work that came within the longest spin says spinning pays: spin in full next time. After a
  // longer gap spin half as long, down to not at all; one short gap brings it back.
  const int64_t gap =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
  spin_ns = gap <= kSpinNs ? kSpinNs : spin_ns / 2 < 1'000 ? 0 : spin_ns / 2;
}

void UnitWorkers::join_idle(uint64_t seen) {
  auto finished = [&] {
    return stop_.load(std::memory_order_relaxed) ||
           done_seq_.load(std::memory_order_seq_cst) != seen;
  };
  // The helper it waits for is running: spin only where that takes no core from it.
  const int64_t runnable = runnable_tasks();
  if (runnable < 0 || runnable <= static_cast<int64_t>(cores_)) {
    const auto until = Clock::now() + std::chrono::nanoseconds(kSpinNs);
    for (unsigned i = 1;; ++i) {
      if (finished()) return;
      cpu_relax();
      if (i % 64 == 0 && Clock::now() >= until) break;
    }
  }
  std::unique_lock lock(sleep_mu_);
  joiner_asleep_.store(true, std::memory_order_seq_cst);
  join_cv_.wait(lock, finished);
  joiner_asleep_.store(false, std::memory_order_seq_cst);
}

void UnitWorkers::worker(unsigned index) {
  int64_t last = -1;
  uint32_t cursor = pes_ > 0 ? index * 7 % pes_ : 0;  // helpers start their scans apart
  int64_t spin_ns = kSpinNs;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t seen = posted_seq_.load(std::memory_order_seq_cst);
    const int64_t pe = run_any(last, cursor);
    if (pe >= 0) {
      last = pe;
      continue;
    }
    helper_idle(seen, spin_ns);  // until something is posted
  }
}

void UnitWorkers::join(uint32_t pe, uint64_t upto) {
  if (threads_.empty()) return;
  Queue& q = queues_[pe];
  upto = std::min(upto, q.posted.load(std::memory_order_relaxed));
  uint32_t cursor = (pe + 1) % pes_;
  while (q.done.load(std::memory_order_acquire) < upto) {
    const uint64_t seen = done_seq_.load(std::memory_order_seq_cst);
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
    if (!helped) join_idle(seen);
  }
}

void UnitWorkers::join_all() {
  if (threads_.empty()) return;
  int64_t last = -1;
  uint32_t cursor = 0;
  for (;;) {
    const uint64_t seen = done_seq_.load(std::memory_order_seq_cst);
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
    join_idle(seen);
  }
}

}  // namespace mtia::sim::pe
