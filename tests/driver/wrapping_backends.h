// Test backends that wrap the in-process one. WrappingBackend forwards every call; a test
// backend overrides what it disturbs. LosingBackend can lose its device as a failed simulator
// or a dead server would (interrupts stop arriving, then the backend reports the loss).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "mtia/driver/backend.h"

namespace mtia::test {

// Forwards every call to an in-process backend.
class WrappingBackend : public mtia::driver::Backend {
 public:
  // Forwards to `inner`, an in-process backend.
  explicit WrappingBackend(std::unique_ptr<mtia::driver::Backend> inner)
      : inner_(std::move(inner)) {}

  void set_interrupt_handler(std::function<void(uint64_t)> handler) override {
    inner_->set_interrupt_handler(std::move(handler));
  }
  void set_lost_handler(std::function<void(const std::string&)> handler) override {
    inner_->set_lost_handler(std::move(handler));
  }
  mtia::isa::Result<uint64_t> read_register(uint64_t offset) override {
    return inner_->read_register(offset);
  }
  void write_register(uint64_t offset, uint64_t value) override {
    inner_->write_register(offset, value);
  }
  mtia::isa::Status read_memory(uint64_t addr, void* dst, uint64_t bytes) override {
    return inner_->read_memory(addr, dst, bytes);
  }
  mtia::isa::Status write_memory(uint64_t addr, const void* src, uint64_t bytes) override {
    return inner_->write_memory(addr, src, bytes);
  }
  mtia::isa::Result<void*> alloc_host(uint64_t bytes) override { return inner_->alloc_host(bytes); }
  mtia::isa::Status free_host(void* ptr) override { return inner_->free_host(ptr); }
  mtia::isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) override {
    return inner_->map_host(ptr, bytes);
  }
  mtia::isa::Status unmap_host(uint64_t bus_addr) override { return inner_->unmap_host(bus_addr); }
  mtia::driver::TraceChannel& trace() override { return inner_->trace(); }

 protected:
  mtia::driver::Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<mtia::driver::Backend> inner_;
};

// Registered as "tapped": forwards everything, and lets a test read the device's registers
// (the driver no longer hands out its backend). `last` is the most recently opened one.
class TappedBackend final : public WrappingBackend {
 public:
  static inline TappedBackend* last = nullptr;

  // Registers the backend under "tapped" (once per process).
  static void register_once() {
    static std::once_flag once;
    std::call_once(once, [] {
      const mtia::isa::Status added = mtia::driver::register_backend(
          "tapped",
          [](const mtia::driver::BackendOptions& o)
              -> mtia::isa::Result<std::unique_ptr<mtia::driver::Backend>> {
            auto inner = mtia::driver::create_backend("inprocess", o);
            if (!inner) return inner.error();
            return std::unique_ptr<mtia::driver::Backend>(
                std::make_unique<TappedBackend>(std::move(inner).value()));
          });
      if (!added) throw std::logic_error(added.error().reason);
    });
  }

  explicit TappedBackend(std::unique_ptr<mtia::driver::Backend> inner)
      : WrappingBackend(std::move(inner)) {
    last = this;
  }
  ~TappedBackend() override { last = nullptr; }
};

// Registered as "shared-host-only": a device that, like one in another process, reaches only
// the host memory it shares with its client, i.e. memory from its own alloc_host. map_host of
// any other memory fails with kUnsupported; `refused` counts those refusals.
class SharedHostOnlyBackend final : public WrappingBackend {
 public:
  static inline std::atomic<uint64_t> refused{0};

  // Registers the backend under "shared-host-only" (once per process).
  static void register_once() {
    static std::once_flag once;
    std::call_once(once, [] {
      const mtia::isa::Status added = mtia::driver::register_backend(
          "shared-host-only",
          [](const mtia::driver::BackendOptions& o)
              -> mtia::isa::Result<std::unique_ptr<mtia::driver::Backend>> {
            auto inner = mtia::driver::create_backend("inprocess", o);
            if (!inner) return inner.error();
            return std::unique_ptr<mtia::driver::Backend>(
                std::make_unique<SharedHostOnlyBackend>(std::move(inner).value()));
          });
      if (!added) throw std::logic_error(added.error().reason);
    });
  }

  explicit SharedHostOnlyBackend(std::unique_ptr<mtia::driver::Backend> inner)
      : WrappingBackend(std::move(inner)) {}

  mtia::isa::Result<void*> alloc_host(uint64_t bytes) override {
    auto p = WrappingBackend::alloc_host(bytes);
    if (p) {
      std::lock_guard lock(mu_);
      shared_[reinterpret_cast<uintptr_t>(p.value())] = bytes;
    }
    return p;
  }
  mtia::isa::Status free_host(void* ptr) override {
    {
      std::lock_guard lock(mu_);
      shared_.erase(reinterpret_cast<uintptr_t>(ptr));
    }
    return WrappingBackend::free_host(ptr);
  }
  mtia::isa::Result<uint64_t> map_host(void* ptr, uint64_t bytes) override {
    const auto start = reinterpret_cast<uintptr_t>(ptr);
    bool shared = false;
    {
      std::lock_guard lock(mu_);
      auto next = shared_.upper_bound(start);
      if (next != shared_.begin()) {
        const auto& [base, len] = *std::prev(next);
        shared = start - base < len && bytes <= len - (start - base);
      }
    }
    if (!shared) {
      ++refused;
      return mtia::isa::reject(mtia::isa::ErrorCode::kUnsupported,
                               "map_host: this device reaches only host memory from alloc_host");
    }
    return WrappingBackend::map_host(ptr, bytes);
  }

 private:
  std::mutex mu_;
  std::map<uintptr_t, uint64_t> shared_;  // alloc_host pointer -> bytes asked for
};

// Registered as "losing"; `last` is the most recently opened one.
class LosingBackend final : public WrappingBackend {
 public:
  static inline LosingBackend* last = nullptr;

  // Registers the backend under "losing" (once per process).
  static void register_once() {
    static std::once_flag once;
    std::call_once(once, [] {
      const mtia::isa::Status added = mtia::driver::register_backend(
          "losing",
          [](const mtia::driver::BackendOptions& o)
              -> mtia::isa::Result<std::unique_ptr<mtia::driver::Backend>> {
            auto inner = mtia::driver::create_backend("inprocess", o);
            if (!inner) return inner.error();
            return std::unique_ptr<mtia::driver::Backend>(
                std::make_unique<LosingBackend>(std::move(inner).value()));
          });
      if (!added) throw std::logic_error(added.error().reason);
    });
  }

  explicit LosingBackend(std::unique_ptr<mtia::driver::Backend> inner)
      : WrappingBackend(std::move(inner)) {
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
