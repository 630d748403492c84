#include "mtia/sim/pe/unit_workers.h"

#include <cassert>

namespace mtia::sim::pe {

UnitWorkers::UnitWorkers(unsigned threads, uint32_t pes) : queues_(pes) {
  threads_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { worker(); });
}

UnitWorkers::~UnitWorkers() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

uint64_t UnitWorkers::post(uint32_t pe, std::function<void()> work, bool wake) {
  assert(pe < queues_.size());
  ++posted_;
  if (threads_.empty()) {
    work();
    ++queues_[pe].done;
    return ++queues_[pe].posted;
  }
  uint64_t number = 0;
  {
    std::lock_guard lock(mu_);
    queues_[pe].work.push_back(std::move(work));
    number = ++queues_[pe].posted;
    ++queued_;
  }
  if (wake) work_cv_.notify_one();
  return number;
}

int64_t UnitWorkers::pick_locked(int64_t prefer) {
  // The PE this thread ran last, if it has more: its local store is still in this core's cache.
  if (prefer >= 0 && !queues_[prefer].running && !queues_[prefer].work.empty()) return prefer;
  const uint32_t n = static_cast<uint32_t>(queues_.size());
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t pe = (next_ + i) % n;
    if (!queues_[pe].running && !queues_[pe].work.empty()) {
      next_ = (pe + 1) % n;
      return pe;
    }
  }
  return -1;
}

void UnitWorkers::run_one(uint32_t pe, std::unique_lock<std::mutex>& lock) {
  Queue& q = queues_[pe];
  std::function<void()> work = std::move(q.work.front());
  q.work.pop_front();
  --queued_;
  q.running = true;
  lock.unlock();
  work();
  lock.lock();
  q.running = false;
  ++q.done;
  done_cv_.notify_all();
  if (queued_ > 0) work_cv_.notify_one();  // the PE's next operation may start now
}

void UnitWorkers::worker() {
  std::unique_lock lock(mu_);
  int64_t last = -1;
  for (;;) {
    int64_t pe = -1;
    work_cv_.wait(lock, [&] { return stop_ || (pe = pick_locked(last)) >= 0; });
    if (stop_) return;
    run_one(static_cast<uint32_t>(pe), lock);
    last = pe;
  }
}

void UnitWorkers::join(uint32_t pe, uint64_t upto) {
  if (threads_.empty()) return;
  std::unique_lock lock(mu_);
  while (!idle_locked(pe) && queues_[pe].done < upto) {
    if (!queues_[pe].running) {
      run_one(pe, lock);  // its next operation is free: run it here
    } else {
      done_cv_.wait(lock);
    }
  }
}

void UnitWorkers::join_all() {
  if (threads_.empty()) return;
  std::unique_lock lock(mu_);
  int64_t last = -1;
  for (;;) {
    const int64_t pe = pick_locked(last);
    if (pe >= 0) {
      run_one(static_cast<uint32_t>(pe), lock);
      last = pe;
      continue;
    }
    bool busy = false;
    for (const Queue& q : queues_) busy = busy || q.running || !q.work.empty();
    if (!busy) return;
    done_cv_.wait(lock);
  }
}

}  // namespace mtia::sim::pe
