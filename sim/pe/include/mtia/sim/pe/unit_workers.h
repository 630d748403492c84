// Host threads that run the units' math while the simulator thread goes on interpreting the
// PE cores. The matmul of a DPE operation is by far the most host work a kernel causes; the
// PE model validates and times it at issue (so faults and timing stay on the simulator thread)
// and posts the math here. The result is the same as running it at issue, because
//  - one PE's posted operations run one at a time, in the order they were posted, and
//  - the PE model joins a PE's operations before anything else touches the local-store bytes
//    they use (core loads and stores, other units, DMA), and joins all of them before
//    simulated time moves on or the launch ends.
// With zero threads, post() runs the work at once on the caller.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mtia::sim::pe {

class UnitWorkers {
 public:
  // `threads` helper threads (0: none) for `pes` PEs.
  UnitWorkers(unsigned threads, uint32_t pes);
  ~UnitWorkers();
  UnitWorkers(const UnitWorkers&) = delete;
  UnitWorkers& operator=(const UnitWorkers&) = delete;

  // Queues `work` behind the PE's earlier work and returns its number: 1, 2, ... per PE.
  // `wake`: wake a sleeping helper for it; otherwise it waits for a helper that is busy with
  // the PE's earlier work anyway, or for join() (a wake-up costs more than small work).
  // Simulator thread only.
  uint64_t post(uint32_t pe, std::function<void()> work, bool wake = true);
  // Returns when the PE's operations up to number `upto` have run (all of them by default);
  // the caller runs queued ones itself rather than sit idle.
  void join(uint32_t pe, uint64_t upto = ~0ull);
  // The same for every PE.
  void join_all();

  unsigned threads() const { return static_cast<unsigned>(threads_.size()); }
  uint64_t posted() const { return posted_; }  // operations posted since construction

 private:
  struct Queue {
    std::deque<std::function<void()>> work;
    bool running = false;  // a thread is running the front's predecessor
    uint64_t posted = 0;   // operations posted, ever
    uint64_t done = 0;     // operations finished, ever
  };
  // A PE whose next operation may start (none of its work running), or -1: `prefer` if it
  // qualifies, else the next in round-robin order. Caller holds mu_.
  int64_t pick_locked(int64_t prefer = -1);
  // Runs the front of PE pe's queue outside the lock. Caller holds `lock` on entry and exit.
  void run_one(uint32_t pe, std::unique_lock<std::mutex>& lock);
  bool idle_locked(uint32_t pe) const { return queues_[pe].work.empty() && !queues_[pe].running; }
  void worker();

  std::mutex mu_;
  std::condition_variable work_cv_;  // work was posted, or stopping
  std::condition_variable done_cv_;  // an operation finished
  std::vector<Queue> queues_;
  uint64_t queued_ = 0;  // operations waiting, all PEs
  uint32_t next_ = 0;    // round-robin start of pick_locked
  uint64_t posted_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace mtia::sim::pe
