// One unit operation's math or one DMA's copy loop, as the PE model hands it to UnitWorkers: a
// callable stored in place, never on the heap. The simulator thread makes one per operation
// and a helper thread runs it; with std::function every one of them was a heap block
// allocated on one thread and freed on another, which cost more (malloc's arena locks) than
// the smallest operations themselves. It is passed along by rvalue reference: each move
// copies the callable (up to kBytes) into the new place.
#pragma once

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace mtia::sim::pe {

class UnitTask {
 public:
  // Room for the largest callable the PE model makes (a bound DMA, 392 bytes).
  static constexpr size_t kBytes = 400;

  UnitTask() = default;
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, UnitTask>>>
  UnitTask(F&& f) {  // NOLINT(google-explicit-constructor): lambdas convert, as to std::function
    using Fn = std::decay_t<F>;
    static_assert(sizeof(Fn) <= kBytes, "UnitTask: callable too large; raise kBytes");
    static_assert(alignof(Fn) <= alignof(std::max_align_t), "UnitTask: over-aligned callable");
    static_assert(std::is_nothrow_move_constructible_v<Fn>, "UnitTask: callable must move");
    ::new (static_cast<void*>(storage_)) Fn(std::forward<F>(f));
    ops_ = &kOps<Fn>;
  }
  UnitTask(UnitTask&& other) noexcept { take(other); }
  UnitTask& operator=(UnitTask&& other) noexcept {
    if (this != &other) {
      reset();
      take(other);
    }
    return *this;
  }
  UnitTask(const UnitTask&) = delete;
  UnitTask& operator=(const UnitTask&) = delete;
  ~UnitTask() { reset(); }

  explicit operator bool() const { return ops_ != nullptr; }
  void operator()() { ops_->call(storage_); }
  // Destroys the callable (and what it captured) now.
  void reset() {
    if (ops_ != nullptr) ops_->destroy(storage_);
    ops_ = nullptr;
  }

 private:
  struct Ops {
    void (*call)(void* self);
    void (*move)(void* to, void* from);  // move-constructs at `to` and destroys `from`
    void (*destroy)(void* self);
  };
  template <class Fn>
  static constexpr Ops kOps = {[](void* self) { (*static_cast<Fn*>(self))(); },
                               [](void* to, void* from) {
                                 ::new (to) Fn(std::move(*static_cast<Fn*>(from)));
                                 static_cast<Fn*>(from)->~Fn();
                               },
                               [](void* self) { static_cast<Fn*>(self)->~Fn(); }};

  void take(UnitTask& other) {
    if (other.ops_ == nullptr) return;
    other.ops_->move(storage_, other.storage_);
    ops_ = std::exchange(other.ops_, nullptr);
  }

  alignas(std::max_align_t) unsigned char storage_[kBytes];
  const Ops* ops_ = nullptr;
};

}  // namespace mtia::sim::pe
