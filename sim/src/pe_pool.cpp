#include "pe_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace mtia::sim::detail {
namespace {

// How long a waiting thread spins before it sleeps. A quantum's SystemC sync, and the next
// launch of a stream of small ops, usually come sooner; an idle device sleeps after this.
constexpr auto kSpin = std::chrono::microseconds(30);

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

}  // namespace

void PePool::await_change(const std::atomic<uint64_t>& value, uint64_t old) {
  if (value.load(std::memory_order_acquire) != old) return;
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (unsigned i = 1;; ++i) {
    cpu_relax();
    if (value.load(std::memory_order_acquire) != old) return;
    if (i % 64 == 0 && std::chrono::steady_clock::now() >= until) break;
  }
  while (value.load(std::memory_order_acquire) == old) value.wait(old, std::memory_order_acquire);
}

PePool::PePool(unsigned helpers) {
  threads_.reserve(helpers);
  for (unsigned i = 0; i < helpers; ++i) threads_.emplace_back([this] { helper_main(); });
}

PePool::~PePool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void PePool::helper_main() {
  uint64_t seen = 0;
  for (;;) {
    await_change(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    (*work_)();
    if (running_.fetch_sub(1, std::memory_order_acq_rel) == 1) running_.notify_all();
  }
}

void PePool::run_on_all(const std::function<void()>& work) {
  work_ = &work;
  running_.store(threads_.size(), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work();
  for (uint64_t left = running_.load(std::memory_order_acquire); left != 0;
       left = running_.load(std::memory_order_acquire)) {
    await_change(running_, left);
  }
}

}  // namespace mtia::sim::detail
