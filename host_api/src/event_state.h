// Events (stream.cpp): fences in device memory. EventState is one event's fence slot and the
// state of its latest record, guarded by the event's own mutex; FenceSlots is the pool of
// fence words events take and give back. Both mutexes are leaves.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace mtia {

// An 8-byte fence word in device memory. Values written to a slot only grow, also across
// the events that reuse it, so a stale WaitPacket can never be released too late.
struct FenceSlot {
  uint64_t addr = 0;
  uint64_t value = 0;  // highest value ever recorded into it
};

struct EventState {
  uint32_t id = 0;  // set before the event is published
  FenceSlot slot;   // slot.addr is fixed; slot.value is updated when the slot is given back

  std::mutex mu;                    // guards the fields below
  std::condition_variable done_cv;  // done_value grew
  bool recorded = false;
  uint32_t queue = 0;       // hardware queue of the latest record
  uint32_t stream_id = 0;   // stream of the latest record
  uint64_t value = 0;       // fence value of the latest record
  uint64_t done_value = 0;  // highest record value whose fence write has happened
  // done_value for waiters that poll without `mu` (the wait policy); stored under `mu`.
  std::atomic<uint64_t> done_published{0};
  // The latest record was captured into graph `capture_graph` (0: it was not), as fence
  // value `capture_value` of its branch `capture_branch` (graph.cpp). It runs only at replay.
  uint32_t capture_graph = 0;
  uint32_t capture_branch = 0;
  uint64_t capture_value = 0;
  uint64_t time_ps = 0;  // simulated end time of the latest completed record
  bool failed = false;   // the latest completed record's stream faulted before it
  std::string failure;
  // Run once done_value reaches their value (a stream of another device waits for this event:
  // peer.cpp). Whoever raises done_value takes them and runs them after unlocking `mu`.
  std::vector<std::pair<uint64_t, std::function<void()>>> watchers;

  // The watchers done_value has now reached, removed. Requires `mu`.
  std::vector<std::function<void()>> take_ready_watchers() {
    std::vector<std::function<void()>> ready;
    for (auto it = watchers.begin(); it != watchers.end();) {
      if (it->first <= done_value) {
        ready.push_back(std::move(it->second));
        it = watchers.erase(it);
      } else {
        ++it;
      }
    }
    return ready;
  }
};

// Free fence slots. The device memory behind them (slabs) is the runtime's: Device::Impl
// allocates a slab when the pool is empty and adds its slots here.
class FenceSlots {
 public:
  // A free slot, or nothing when the pool is empty.
  std::optional<FenceSlot> take() {
    std::lock_guard lock(mu_);
    if (free_.empty()) return std::nullopt;
    FenceSlot slot = free_.back();
    free_.pop_back();
    return slot;
  }
  // Back to the pool: a destroyed event's slot, or a new slab's.
  void give(const FenceSlot& slot) {
    std::lock_guard lock(mu_);
    free_.push_back(slot);
  }

 private:
  std::mutex mu_;
  std::vector<FenceSlot> free_;
};

}  // namespace mtia
