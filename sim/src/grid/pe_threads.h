// Host threads that run the PEs of a round (pe_grid.h, "DMA timing") side by side. Private to
// sim/; one per PE grid.
//
// The simulator thread takes part: run() hands out the round's PEs one at a time to whichever
// thread asks first (itself included) and returns when every one has run. What a PE does in a
// round depends on nothing another PE does in it, so which thread runs which PE changes
// nothing but wall time.
//
// Between rounds the helpers poll for the next one as the device's wait policy says (a round
// follows the last within microseconds while a launch runs), and only while the host has a core
// for every runnable task; then they block until run() wakes them. A launch of one PE never
// wakes them.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "mtia/host/wait.h"

namespace mtia::sim::detail {

class PeThreads {
 public:
  // `helpers` threads beside the caller of run(), which wait as `policy` says.
  PeThreads(unsigned helpers, host::WaitPolicy policy);
  ~PeThreads();
  PeThreads(const PeThreads&) = delete;
  PeThreads& operator=(const PeThreads&) = delete;

  // Calls `fn(i)` once for every i in [0, n) on the caller and the helpers; returns when all
  // have returned. n < 2^20.
  void run(uint32_t n, const std::function<void(uint32_t)>& fn);

  unsigned helpers() const { return static_cast<unsigned>(threads_.size()); }

 private:
  // The round being handed out: its number (bits 40..63), its size (20..39) and the next
  // index to hand out (0..19). A thread claims index i by raising it to i + 1 while number
  // and size are still those it read, so a helper late for one round never runs part of the
  // next with the old one's function.
  static constexpr int kSizeShift = 20, kRoundShift = 40;
  static constexpr uint64_t kIndexMask = (uint64_t{1} << kSizeShift) - 1;

  // Claims and runs indexes of the round `ticket` names until none is left.
  void work(uint64_t ticket);
  void helper();

  host::WaitPolicy policy_;
  std::vector<std::thread> threads_;
  alignas(64) std::atomic<uint64_t> ticket_{0};
  alignas(64) std::atomic<uint32_t> unfinished_{0};  // indexes of the round not yet returned
  const std::function<void(uint32_t)>* fn_ = nullptr;  // the round's, set before its ticket
  // Blocking, after polling: helpers until the next round, run() until the round's end.
  std::mutex mu_;
  std::condition_variable round_started_, round_finished_;
  std::atomic<int> sleepers_{0};            // helpers blocked
  std::atomic<bool> caller_sleeps_{false};  // run() blocked
  std::atomic<bool> stop_{false};
};

}  // namespace mtia::sim::detail
