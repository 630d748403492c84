// Host threads that run the units' math and the local DMA copies while the simulator thread
// goes on interpreting the PE cores. The matmul of a DPE operation is by far the most host work
// a kernel causes; the PE model validates and times it at issue (so faults and timing stay on
// the simulator thread) and posts the math here. The result is the same as running it at
// issue, because
//  - one PE's posted operations run one at a time, in the order they were posted, and
//  - the PE model joins a PE's operations before anything else touches the local-store bytes
//    they use (core loads and stores, other units, DMA), and joins all of them before
//    simulated time moves on or the launch ends.
// With zero threads, post() runs the work at once on the caller.
//
// Operations are small (a few microseconds on mtia-v1's tiles), so handing one over must cost
// much less than that: each PE has a ring that only the simulator thread fills, a thread
// claims a PE (an atomic flag) and runs everything queued on it; no lock is taken on the way
// unless a thread sleeps.
//
// Idle threads spin only where it pays and costs no one: at most one helper looks for work at a
// time (a post wakes a sleeper only when none does; the one that finds work wakes a sleeper
// to look in its place, so that posts rarely pay for a wake-up), only while the machine has a core
// free (no more runnable tasks than cores), and each helper spins only as long as its recent idle
// gaps suggest work is coming soon (halving the spin after every long gap). So helpers that
// have nothing to do sleep, and the process's CPU time stays near the work it does.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "mtia/sim/pe/unit_task.h"

namespace mtia::sim::pe {

class UnitWorkers {
 public:
  // `threads` helper threads (0: none) for `pes` PEs.
  UnitWorkers(unsigned threads, uint32_t pes);
  ~UnitWorkers();
  UnitWorkers(const UnitWorkers&) = delete;
  UnitWorkers& operator=(const UnitWorkers&) = delete;

  // Queues `work` behind the PE's earlier work and returns its number: 1, 2, ... per PE.
  // `wake`: wake a sleeping helper for it; otherwise it waits for a helper that is awake
  // anyway, or for join() (a wake-up costs more than small work). Simulator thread only.
  uint64_t post(uint32_t pe, UnitTask&& work, bool wake = true);
  // Returns when the PE's operations up to number `upto` have run (all of them by default);
  // the caller runs queued ones itself rather than sit idle, and while a helper runs this PE's,
  // other PEs' (one operation at a time). Simulator thread only.
  void join(uint32_t pe, uint64_t upto = ~0ull);
  // The same for every PE.
  void join_all();

  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }
  uint64_t posted() const { return posted_; }  // operations posted since construction

 private:
  // Operations one PE may have queued; post() runs the oldest itself when the ring is full.
  static constexpr uint64_t kRing = 32;

  // The simulator thread writes `posted` and the ring, the thread running the PE's work writes
  // `done` and `claimed`: on separate cache lines, so that neither write stalls the other.
  struct Queue {
    alignas(64) std::atomic<uint64_t> posted{0};  // operations posted, ever
    alignas(64) std::atomic<uint64_t> done{0};    // operations finished, ever
    std::atomic<bool> claimed{false};
    // Operation n sits in ring[(n - 1) % kRing]; the simulator thread destroys it when it
    // reuses the slot, so that the runner only reads the slot.
    alignas(64) UnitTask ring[kRing];
  };

  // Claims PE `pe` if no thread has it and runs its queued operations, up to number `upto`;
  // false if it ran none.
  bool run_queued(uint32_t pe, uint64_t upto = ~0ull);
  // Runs some PE's queued operations (`prefer` first if it has any, then round robin from
  // `cursor`): the PE, or -1 if none could be run.
  int64_t run_any(int64_t prefer, uint32_t& cursor);
  // Counts a post (wakes one sleeping helper if `wake` and none is looking for work).
  void note_posted(bool wake);
  // Counts a finished batch (wakes the simulator thread if it sleeps in join()).
  void note_done();
  // A helper with nothing to run: returns once work has been posted since `seen` (of
  // `posted_seq_`), or on stop. `spin_ns` is the helper's spin budget, adapted here.
  void helper_idle(uint64_t seen, int64_t& spin_ns);
  // The simulator thread in join(): returns once a batch has finished since `seen` (of
  // `done_seq_`).
  void join_idle(uint64_t seen);
  void worker(unsigned index);

  std::unique_ptr<Queue[]> queues_;
  uint32_t pes_;
  uint64_t posted_ = 0;
  std::atomic<uint64_t> posted_seq_{0};     // bumped when work is posted to an idle PE
  std::atomic<uint64_t> done_seq_{0};       // bumped when a batch of work has finished
  std::atomic<uint64_t> handoff_seq_{0};    // bumped when a helper wakes another to look
  std::atomic<unsigned> sleepers_{0};       // helpers asleep (or about to be) on helper_cv_
  std::atomic<unsigned> spinners_{0};       // helpers looking for work (at most one)
  std::atomic<bool> joiner_asleep_{false};  // the simulator thread sleeps on join_cv_
  std::atomic<bool> stop_{false};
  unsigned cores_;  // host cores this process may run on
  std::mutex sleep_mu_;
  std::condition_variable helper_cv_;
  std::condition_variable join_cv_;
  std::vector<std::thread> threads_;
};

}  // namespace mtia::sim::pe
