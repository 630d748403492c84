// Test backends that wrap the in-process one. WrappingBackend forwards every call; a test
// backend overrides what it disturbs. LosingBackend can lose its device as a failed simulator
// or a dead server would (interrupts stop arriving, then the backend reports the loss).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "mtia/driver/backend.h"

namespace mtia::test {

// Forwards every call to an in-process backend.
class WrappingBackend : public mtia::driver::Backend {
 public:
  explicit WrappingBackend(const mtia::driver::BackendOptions& options)
      : inner_(mtia::driver::create_backend("inprocess", options)) {}

  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    inner_->set_interrupt_handler(std::move(handler));
  }
  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    inner_->set_lost_handler(std::move(handler));
  }
  uint64_t read_register(uint64_t offset) override { return inner_->read_register(offset); }
  void write_register(uint64_t offset, uint64_t value) override {
    inner_->write_register(offset, value);
  }
  void read_memory(uint64_t addr, void* dst, uint64_t bytes) override {
    inner_->read_memory(addr, dst, bytes);
  }
  void write_memory(uint64_t addr, const void* src, uint64_t bytes) override {
    inner_->write_memory(addr, src, bytes);
  }
  uint64_t map_host(void* ptr, uint64_t bytes) override { return inner_->map_host(ptr, bytes); }
  void unmap_host(uint64_t bus_addr) override { inner_->unmap_host(bus_addr); }
  uint64_t now_ps() override { return inner_->now_ps(); }
  void write_artifacts(const std::string& dir) override { inner_->write_artifacts(dir); }
  std::string config_json() override { return inner_->config_json(); }

 protected:
  mtia::driver::Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<mtia::driver::Backend> inner_;
};

// Registered as "losing"; `last` is the most recently opened one.
class LosingBackend final : public WrappingBackend {
 public:
  static inline LosingBackend* last = nullptr;

  // Registers the backend under "losing" (once per process).
  static void register_once() {
    static std::once_flag once;
    std::call_once(once, [] {
      mtia::driver::register_backend("losing", [](const mtia::driver::BackendOptions& o) {
        return std::make_unique<LosingBackend>(o);
      });
    });
  }

  explicit LosingBackend(const mtia::driver::BackendOptions& options) : WrappingBackend(options) {
    last = this;
  }
  ~LosingBackend() override { last = nullptr; }

  // Interrupts no longer reach the driver: packets stay pending.
  void silence() { inner().set_interrupt_handler({}); }
  // Reports the loss, as a backend whose device died does.
  void lose(const std::string& why) {
    std::function<void(const std::string&)> handler;
    {
      std::lock_guard lock(mu_);
      why_ = why;
      handler = lost_handler_;
    }
    if (handler) handler(why);
  }

  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    std::string why;
    {
      std::lock_guard lock(mu_);
      lost_handler_ = handler;
      why = why_;
    }
    if (handler && !why.empty()) handler(why);
  }

 private:
  std::mutex mu_;
  std::string why_;
  std::function<void(const std::string&)> lost_handler_;
};

}  // namespace mtia::test
