// How host threads reach the simulator thread: a request (HostRequest) queued on the inbox
// (HostInbox, a mutex), the kernel woken through a primitive channel (HostChannel,
// async_request_update), and the answer waited for (Reply). Private to sim/.
#pragma once

#include <systemc>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "mtia/host/wait.h"
#include "mtia/isa/result.h"

namespace mtia::sim::detail {

class Reply;

// A host thread's request to the simulator.
struct HostRequest {
  enum class Kind { kWriteRegister, kReadRegister, kCall, kStop };
  Kind kind = Kind::kCall;
  uint64_t offset = 0;
  uint64_t value = 0;
  std::function<void()> call;  // kCall: runs on the simulator thread
  // Answered when the request has been handled (reads: the value; others: 0), or with a
  // rejection if the simulator stopped first. Owned by the waiting host thread; null for
  // posted writes.
  Reply* reply = nullptr;
};

// The answer to a host request, waited for with the device's wait policy (isa/wait.h).
class Reply {
 public:
  void set_value(isa::Result<uint64_t> value);  // once, from the simulator thread
  isa::Result<uint64_t> get(host::WaitPolicy policy);

 private:
  std::atomic<bool> ready_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<isa::Result<uint64_t>> value_;
};

class HostChannel;

// The mutex-protected queue between host threads and the simulator.
class HostInbox {
 public:
  // Queues `r` and wakes the simulator. False if the simulator is not running (then `r` was
  // not queued and nobody will answer it).
  bool push(HostRequest r);
  // Simulator thread: the oldest request, if any.
  bool pop(HostRequest& r);
  // Simulator thread: whether a request is queued, without the lock (for polling).
  bool has_request() const { return queued_.load(std::memory_order_acquire) != 0; }
  // Simulator thread, around a poll of has_request(): while polling, push() does not wake the
  // kernel, which is running the poll (that saves the host the wake-up). end_polling() says
  // whether a request came meanwhile; after false, push() wakes the kernel again.
  void begin_polling();
  bool end_polling();
  // Simulator thread: starts / stops accepting. close() answers every queued request with a
  // rejection carrying `why`.
  void open(HostChannel* channel);
  void close(const std::string& why);
  std::string closed_reason() const;

 private:
  mutable std::mutex mu_;
  std::deque<HostRequest> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), for has_request()
  bool polling_ = false;
  HostChannel* channel_ = nullptr;
  std::string closed_reason_ = "the simulator has not started";
};

// The primitive channel host threads wake the kernel through (async_request_update). It is
// attached as "suspending", so an idle kernel sleeps in it instead of ending the simulation.
class HostChannel : public sc_core::sc_prim_channel {
 public:
  HostChannel();
  ~HostChannel() override;
  void wake() { async_request_update(); }  // any thread
  sc_core::sc_event arrived;
  // The command processor ran out of work: the bridge looks whether the whole kernel is idle,
  // and if so polls the inbox before the kernel suspends (Bridge::run).
  sc_core::sc_event device_idle;

 private:
  void update() override;
};

}  // namespace mtia::sim::detail
