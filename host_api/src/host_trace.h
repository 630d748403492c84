// The host API's side of the trace: each traced public call is an ApiCall on the caller's
// stack; when it returns, the call, the packets it submitted and its host-clock times go to the
// device's trace channel (driver::TraceChannel::trace_host_call), which puts them on the device's
// trace.
//
// Host clock (docs/architecture.md, "Traces"): per host thread, the latest simulated time the
// thread has observed, i.e. the end time of every packet it waited for (observed()). Async
// calls take no simulated time; a call that waits ends at the end of what it waited for.
//
// Activity observers (mtia/activity.h) ride on the same objects: HostTrace holds the device's
// observer, and the outermost ApiCall a thread makes while one is installed reports itself as
// a RuntimeCall and lends its id and label to the packets it submits (observed_call()).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mtia/activity.h"
#include "mtia/driver/trace_channel.h"
#include "mtia/trace.h"
#include "mtia/trace/host_call.h"

namespace mtia {

class HostTrace {
 public:
  HostTrace(driver::TraceChannel& channel, TraceLevel level);

  bool on() const { return level_.load(std::memory_order_relaxed) != TraceLevel::kOff; }
  TraceLevel level() const { return level_.load(std::memory_order_relaxed); }
  void set_level(TraceLevel level);

  // The calling thread's number (1 = first) and host clock.
  struct Clock {
    uint32_t thread = 0;
    uint64_t now_ps = 0;
  };
  Clock clock();
  // The calling thread waited for a packet that ended at `end_ps`.
  void observed(uint64_t end_ps);
  double wall_us() const;  // since the device opened
  uint64_t next_order() { return order_.fetch_add(1, std::memory_order_relaxed); }
  void record(trace::HostCall call) { channel_.trace_host_call(std::move(call)); }

  // The activity observer (null when none); one relaxed load when none is installed.
  std::shared_ptr<ActivityObserver> observer() const {
    if (!observing_.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(observer_mu_);
    return observer_;
  }
  void set_observer(std::shared_ptr<ActivityObserver> observer) {
    std::lock_guard lock(observer_mu_);
    observer_ = std::move(observer);
    observing_.store(observer_ != nullptr, std::memory_order_release);
  }
  uint32_t device_index = 0;

 private:
  driver::TraceChannel& channel_;
  std::atomic<TraceLevel> level_;
  std::atomic<uint64_t> order_{0};
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  std::mutex mu_;
  std::map<std::thread::id, Clock> threads_;
  std::atomic<bool> observing_{false};
  mutable std::mutex observer_mu_;
  std::shared_ptr<ActivityObserver> observer_;
};

// One traced public call. Inactive (a few loads) when tracing is off.
class ApiCall {
 public:
  ApiCall(HostTrace& trace, const char* name);
  ~ApiCall();
  ApiCall(const ApiCall&) = delete;
  ApiCall& operator=(const ApiCall&) = delete;

  bool active() const { return trace_ != nullptr; }
  // Whether anyone reads the label: the trace or an activity observer.
  bool labelled() const { return trace_ != nullptr || observer_ != nullptr; }
  // What the call did, for people; and the label of the packets it submits (e.g. the kernel).
  void set_detail(std::string detail) {
    if (trace_ != nullptr) call_.detail = std::move(detail);
  }
  void set_label(std::string label) {
    if (trace_ != nullptr || observer_ != nullptr) label_ = std::move(label);
  }

  // A packet was submitted on this thread: it belongs to the innermost active call.
  static void submitted(HostTrace& trace, uint32_t queue, uint64_t seq);

  // The outermost call of this thread that an activity observer sees (null when none): its id
  // and label go with the packets it submits.
  struct Observed {
    uint64_t id = 0;
    const std::string* label = nullptr;
    const char* name = "";
  };
  static Observed observed_call();

 private:
  HostTrace* trace_ = nullptr;
  ApiCall* parent_ = nullptr;
  int exceptions_ = 0;
  std::chrono::steady_clock::time_point wall_start_;
  std::string label_;
  trace::HostCall call_;
  // The activity observer's view of the call (only for the thread's outermost call).
  std::shared_ptr<ActivityObserver> observer_;
  RuntimeCall runtime_;
};

}  // namespace mtia
