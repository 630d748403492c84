// Host threads that run the PEs of a launch beside the simulator thread (PeGrid's pool mode,
// pe_grid.h). The pool only provides threads: PeGrid decides what each of them runs.
//
// run_on_all() wakes every helper, runs the same work on each and on the calling thread, and
// returns when all have returned. Between calls a helper looks for the next call for a short
// while (a quantum's SystemC sync is usually that short), then sleeps on a futex: an idle
// device costs no CPU. Private to sim/.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace mtia::sim::detail {

class PePool {
 public:
  // `helpers` threads beside the caller of run_on_all().
  explicit PePool(unsigned helpers);
  ~PePool();
  PePool(const PePool&) = delete;
  PePool& operator=(const PePool&) = delete;

  unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

  // Runs `work` on every helper and on the calling thread at once; returns when every call has
  // returned. One caller at a time.
  void run_on_all(const std::function<void()>& work);

  // Waits until `value` differs from `old`: spins for a short while, then sleeps on the
  // atomic (woken by its notify_all()).
  static void await_change(const std::atomic<uint64_t>& value, uint64_t old);

 private:
  void helper_main();

  std::vector<std::thread> threads_;
  std::atomic<uint64_t> generation_{0};  // bumped by each run_on_all
  std::atomic<uint64_t> running_{0};     // helpers still in the current call's work
  const std::function<void()>* work_ = nullptr;
  bool stop_ = false;
};

}  // namespace mtia::sim::detail
