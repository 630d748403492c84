#include "host_channel.h"

namespace mtia::sim::detail {

void Reply::set_value(isa::Result<uint64_t> value) {
  // Notified under the lock: the waiter takes it before it returns and destroys the reply.
  std::lock_guard lock(mu_);
  value_ = std::move(value);
  ready_.store(true, std::memory_order_release);
  cv_.notify_one();
}

isa::Result<uint64_t> Reply::get(host::WaitPolicy policy) {
  if (!host::poll_before_block(policy, host::WaitSide::kHost,
                               [&] { return ready_.load(std::memory_order_acquire); })) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_.load(std::memory_order_acquire); });
  }
  // The lock orders the value before the reader even when the poll saw the flag first.
  std::lock_guard lock(mu_);
  return std::move(*value_);
}

bool HostInbox::push(HostRequest r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (channel_ == nullptr) return false;
  queue_.push_back(std::move(r));
  queued_.store(queue_.size(), std::memory_order_release);
  // Under the lock, so the channel cannot be destroyed in between (close() takes the lock).
  // async_request_update takes only the kernel's own lock and never calls back into us. A
  // polling bridge finds the request without it.
  if (!polling_) channel_->wake();
  return true;
}

bool HostInbox::pop(HostRequest& r) {
  std::lock_guard<std::mutex> lock(mu_);
  if (queue_.empty()) return false;
  r = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_release);
  return true;
}

void HostInbox::begin_polling() {
  std::lock_guard<std::mutex> lock(mu_);
  polling_ = true;
}

bool HostInbox::end_polling() {
  std::lock_guard<std::mutex> lock(mu_);
  polling_ = false;
  return !queue_.empty();
}

void HostInbox::open(HostChannel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channel_ = channel;
  closed_reason_.clear();
}

void HostInbox::close(const std::string& why) {
  std::deque<HostRequest> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    channel_ = nullptr;
    closed_reason_ = why;
    dropped.swap(queue_);
    queued_.store(0, std::memory_order_release);
  }
  for (auto& r : dropped) {
    if (r.reply != nullptr) {
      r.reply->set_value(isa::reject(isa::ErrorCode::kBadRegister, "device stopped: " + why));
    }
  }
}

std::string HostInbox::closed_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_reason_;
}

HostChannel::HostChannel() : sc_core::sc_prim_channel("host_channel") {
  // Without this an idle kernel would find no events and end the simulation.
  async_attach_suspending();
}

HostChannel::~HostChannel() {
  async_detach_suspending();
}

void HostChannel::update() {
  // Update phase: immediate notification is not allowed here, a delta notification is.
  arrived.notify(sc_core::SC_ZERO_TIME);
}

}  // namespace mtia::sim::detail
