// StreamState: a stream (stream.cpp) is a hardware queue plus the seq of the last packet
// submitted for it, and the first device error on it since it was last reported. It owns that
// state: its own mutex, a leaf, guards it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace mtia {

struct GraphState;

class StreamState {
 public:
  StreamState(uint32_t stream_id, uint32_t hardware_queue) : id(stream_id), queue(hardware_queue) {}
  StreamState(const StreamState&) = delete;
  StreamState& operator=(const StreamState&) = delete;

  const uint32_t id;
  const uint32_t queue;
  // The graph being captured from it, if any. Guarded by Device::Impl::mu, as the graph table
  // is (graph.cpp).
  std::shared_ptr<GraphState> capture;
  uint32_t capture_branch = 0;  // its branch in that graph (0: it began the capture)
  // Latest of its packets whose completion has been handled here, set before the packet's own
  // callback runs: an event recorded on the stream is seen done only after the work before it.
  std::atomic<uint64_t> done_seq{0};

  // Packet `seq` was submitted for the stream on its queue.
  void note_submitted(uint64_t seq) {
    std::lock_guard lock(mu_);
    last_seq_ = std::max(last_seq_, seq);
  }
  // Latest packet submitted for the stream (0 if none).
  uint64_t last_seq() const {
    std::lock_guard lock(mu_);
    return last_seq_;
  }

  // A packet failed. The first failure is the cause; what was aborted after it adds nothing.
  void note_failure(const std::string& message) {
    std::lock_guard lock(mu_);
    if (has_error_) return;
    has_error_ = true;
    error_ = message;
  }
  // Replaces the pending error `was` with a better account of the same failure.
  void refine_failure(const std::string& was, std::string now) {
    std::lock_guard lock(mu_);
    if (has_error_ && error_ == was) error_ = std::move(now);
  }
  // The pending error, if any (for logs; it stays pending).
  std::optional<std::string> pending_error() const {
    std::lock_guard lock(mu_);
    if (!has_error_) return std::nullopt;
    return error_;
  }
  // The pending error, if any, which is then reported: the stream has none pending after.
  std::optional<std::string> take_error() {
    std::lock_guard lock(mu_);
    if (!has_error_) return std::nullopt;
    has_error_ = false;
    return std::exchange(error_, std::string());
  }

 private:
  mutable std::mutex mu_;
  uint64_t last_seq_ = 0;
  bool has_error_ = false;
  std::string error_;  // sticky device error, reported once
};

}  // namespace mtia
