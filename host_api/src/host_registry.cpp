// HostRegistry: pinned regions, their users, and the staging cache.
#include "host_registry.h"

#include <spdlog/fmt/fmt.h>

#include "mtia/error.h"

namespace mtia {
namespace {

constexpr size_t kRememberFreed = 4096;  // freed addresses kept for error messages

// Host memory kept in idle staging buffers for reuse, at most.
constexpr uint64_t kStagingCacheBytes = uint64_t{256} << 20;

}  // namespace

void HostRegistry::check_disjoint(const void* ptr, uint64_t bytes, const char* call) const {
  const auto key = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard lock(mu_);
  for (const auto& [start, r] : pinned_) {
    if (key < start + r->bytes && start < key + bytes) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("{}({}, {}): overlaps the pinned region at {} ({} "
                              "bytes); unregister that first or register disjoint memory",
                              call, ptr, bytes, static_cast<const void*>(r->ptr), r->bytes));
    }
  }
}

void HostRegistry::add_pinned(std::shared_ptr<HostRegion> r) {
  const auto key = reinterpret_cast<uintptr_t>(r->ptr);
  std::lock_guard lock(mu_);
  pinned_bytes_ += r->bytes;
  pinned_[key] = std::move(r);
  freed_.erase(key);
}

std::shared_ptr<HostRegion> HostRegistry::close_pinned(void* ptr, HostRegion::Kind kind,
                                                       const char* call) {
  const auto key = reinterpret_cast<uintptr_t>(ptr);
  std::unique_lock lock(mu_);
  auto it = pinned_.find(key);
  const bool want_alloc = kind == HostRegion::Kind::kAllocated;
  if (it == pinned_.end() || it->second->kind != kind || it->second->closing) {
    std::string why;
    if (it != pinned_.end() && it->second->closing) {
      why = "another thread is releasing it right now";
    } else if (it != pinned_.end()) {
      why = want_alloc ? "it was registered with host_register(); use host_unregister()"
                       : "it came from host_alloc(); use host_free()";
    } else if (freed_.count(key)) {
      why = want_alloc ? "it was already freed" : "it was already unregistered";
    } else {
      why = want_alloc ? "it was not returned by host_alloc()"
                       : "it is not the start of a region passed to host_register()";
      for (const auto& [start, r] : pinned_) {
        if (key > start && key < start + r->bytes) {
          why = fmt::format("it points inside the pinned region at {} ({} bytes), not at its start",
                            static_cast<const void*>(r->ptr), r->bytes);
        }
      }
    }
    throw Error(ErrorKind::kInvalidPointer, fmt::format("{}({}): {}", call, ptr, why));
  }
  auto r = it->second;
  r->closing = true;  // new copies are refused from here on
  idle_cv_.wait(lock, [&] { return r->inflight == 0; });
  pinned_.erase(key);
  pinned_bytes_ -= r->bytes;
  freed_.insert(key);
  if (freed_.size() > kRememberFreed) freed_.erase(freed_.begin());
  return r;
}

bool HostRegistry::is_pinned(const void* ptr, uint64_t bytes) const {
  std::lock_guard lock(mu_);
  try {
    return find_locked(static_cast<const uint8_t*>(ptr), ByteRange{0, bytes}, "") != nullptr;
  } catch (const Error&) {
    return false;  // straddles a region boundary
  }
}

std::shared_ptr<HostRegion> HostRegistry::acquire(const uint8_t* p, const ByteRange& span,
                                                  const char* side, uint64_t packets) {
  std::lock_guard lock(mu_);
  auto r = find_locked(p, span, side);
  if (!r || !r->mapped) return nullptr;
  r->inflight += packets;
  return r;
}

bool HostRegistry::release(const std::shared_ptr<HostRegion>& r, uint64_t packets) {
  bool idle_staging;
  {
    std::lock_guard lock(mu_);
    r->inflight -= packets;
    idle_staging = r->inflight == 0 && r->kind == HostRegion::Kind::kStaging;
  }
  idle_cv_.notify_all();
  return idle_staging;
}

std::shared_ptr<HostRegion> HostRegistry::take_staging(uint64_t capacity) {
  std::lock_guard lock(mu_);
  auto it = staging_cache_.find(capacity);
  if (it == staging_cache_.end()) return nullptr;
  auto r = it->second;
  staging_cache_.erase(it);
  staging_cache_bytes_ -= capacity;
  return r;
}

bool HostRegistry::cache_staging(const std::shared_ptr<HostRegion>& r) {
  std::lock_guard lock(mu_);
  if (staging_closed_ || staging_cache_bytes_ + r->bytes > kStagingCacheBytes) return false;
  r->inflight = 0;
  staging_cache_.emplace(r->bytes, r);
  staging_cache_bytes_ += r->bytes;
  return true;
}

std::vector<std::shared_ptr<HostRegion>> HostRegistry::take_all() {
  std::vector<std::shared_ptr<HostRegion>> regions;
  std::lock_guard lock(mu_);
  staging_closed_ = true;
  for (auto& [p, r] : pinned_) regions.push_back(r);
  pinned_.clear();
  pinned_bytes_ = 0;
  for (auto& [capacity, r] : staging_cache_) regions.push_back(r);
  staging_cache_.clear();
  staging_cache_bytes_ = 0;
  return regions;
}

uint64_t HostRegistry::pinned_bytes() const {
  std::lock_guard lock(mu_);
  return pinned_bytes_;
}

uint64_t HostRegistry::staging_bytes() const {
  std::lock_guard lock(mu_);
  return staging_cache_bytes_;
}

std::shared_ptr<HostRegion> HostRegistry::find_locked(const uint8_t* p, const ByteRange& span,
                                                      const char* side) const {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) + span.lo;
  const uintptr_t hi = reinterpret_cast<uintptr_t>(p) + span.hi;
  auto it = pinned_.upper_bound(lo);
  if (it != pinned_.begin()) {
    const auto& r = std::prev(it)->second;
    const uintptr_t start = reinterpret_cast<uintptr_t>(r->ptr);
    if (lo < start + r->bytes) {
      if (hi > start + r->bytes) {
        throw Error(
            ErrorKind::kInvalidPointer,
            fmt::format("{} host region {} + {} bytes runs {} bytes past the end of the "
                        "pinned region at {} ({} bytes); check the layout",
                        side, reinterpret_cast<const void*>(lo), hi - lo, hi - (start + r->bytes),
                        static_cast<const void*>(r->ptr), r->bytes));
      }
      if (r->closing) {
        throw Error(ErrorKind::kInvalidPointer,
                    fmt::format("{} host region {} is in pinned memory that is being freed", side,
                                reinterpret_cast<const void*>(lo)));
      }
      return r;
    }
  }
  // Pageable, unless it runs into a pinned region that starts inside it.
  if (it != pinned_.end() && reinterpret_cast<uintptr_t>(it->second->ptr) < hi) {
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} host region {} + {} bytes starts in pageable memory but runs into "
                            "the pinned region at {}; keep a copy's host side in one region",
                            side, reinterpret_cast<const void*>(lo), hi - lo,
                            static_cast<const void*>(it->second->ptr)));
  }
  return nullptr;
}

}  // namespace mtia
