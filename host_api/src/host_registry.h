// HostRegistry: the host memory the runtime knows, as a registry of regions: pinned memory
// (host_alloc, host_register), idle staging buffers kept for reuse, and the addresses freed
// lately (for messages). It tracks how many submitted packets use each region, so that freeing
// one waits until the device is done with it.
//
// It owns no memory and never calls the driver: Device::Impl allocates, maps, unmaps and
// frees regions (alloc_mapped, release_region) and hands them to the registry.
//
// Locking: its own mutex guards the regions, their `inflight` and `closing` fields and the
// staging cache; it is a leaf (nothing else is called while it is held), so callers may hold
// Device::Impl::mu, and completion callbacks on the backend's thread may call it.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "mtia/copy_plan.h"

namespace mtia {

// Host memory the device can reach by DMA (or, when !mapped, registered memory it cannot).
struct HostRegion {
  enum class Kind {
    kAllocated,   // host_alloc: owned by the runtime, freed by host_free
    kRegistered,  // host_register: owned by the caller
    kStaging,     // a copy of pageable memory (copy_async, bounce buffers): owned by the
                  // runtime, back to the staging cache when its packets complete
    kTemporary,   // pageable memory mapped for the duration of one synchronous call
  };
  uint8_t* ptr = nullptr;
  uint64_t bytes = 0;
  uint64_t bus = 0;  // bus address of ptr
  Kind kind = Kind::kAllocated;
  // False for registered memory the backend cannot map (map_host said kUnsupported: a device
  // in another process reaches only memory from alloc_host). Copies then stage it, as they do
  // pageable memory.
  bool mapped = true;
  // Guarded by the registry's mutex once the region is shared (HostRegistry::acquire/release).
  uint64_t inflight = 0;  // submitted packets that touch it and have not completed
  bool closing = false;   // host_free / host_unregister is waiting for inflight == 0
};

class HostRegistry {
 public:
  // Throws kInvalidArgument when [ptr, ptr + bytes) overlaps a pinned region (`call` names the
  // public call for the message).
  void check_disjoint(const void* ptr, uint64_t bytes, const char* call) const;
  // A new pinned region (host_alloc, host_register).
  void add_pinned(std::shared_ptr<HostRegion> r);
  // Removes the pinned region starting at `ptr`, of `kind`, once no packet uses it any more;
  // new copies of it are refused meanwhile. Throws kInvalidPointer saying why `ptr` is not
  // such a region. The caller releases what it returns.
  std::shared_ptr<HostRegion> close_pinned(void* ptr, HostRegion::Kind kind, const char* call);
  // True when [ptr, ptr + bytes) lies inside one pinned region.
  bool is_pinned(const void* ptr, uint64_t bytes) const;

  // The mapped pinned region holding [p + span), with `packets` more uses counted, or nullptr
  // for pageable memory and for registered memory the backend could not map. Throws
  // kInvalidPointer when the span straddles a region's boundary or its region is closing.
  std::shared_ptr<HostRegion> acquire(const uint8_t* p, const ByteRange& span, const char* side,
                                      uint64_t packets);
  // `packets` uses of `r` ended (wakes close_pinned). True when it was a staging buffer that
  // is now idle: the caller gives it back (cache_staging) or releases it.
  bool release(const std::shared_ptr<HostRegion>& r, uint64_t packets);

  // An idle staging buffer of exactly `capacity` bytes from the cache, or nullptr.
  std::shared_ptr<HostRegion> take_staging(uint64_t capacity);
  // Keeps an idle staging buffer for reuse; false (the caller releases it) when the cache is
  // full or closed.
  bool cache_staging(const std::shared_ptr<HostRegion>& r);
  // Closes the staging cache and takes every pinned region and cached buffer out of the
  // registry, for the caller to release (the device is closing).
  std::vector<std::shared_ptr<HostRegion>> take_all();

  uint64_t pinned_bytes() const;
  uint64_t staging_bytes() const;

 private:
  // Requires mu_.
  std::shared_ptr<HostRegion> find_locked(const uint8_t* p, const ByteRange& span,
                                          const char* side) const;

  mutable std::mutex mu_;
  std::condition_variable idle_cv_;                          // a region's inflight count dropped
  std::map<uintptr_t, std::shared_ptr<HostRegion>> pinned_;  // host_alloc + host_register
  std::set<uintptr_t> freed_;                                // for "freed before" messages
  uint64_t pinned_bytes_ = 0;
  // Idle staging buffers, kept mapped so that async copies from pageable memory skip the
  // allocate/map/unmap/free cycle: capacity (a power of two) -> buffers.
  std::multimap<uint64_t, std::shared_ptr<HostRegion>> staging_cache_;
  uint64_t staging_cache_bytes_ = 0;
  bool staging_closed_ = false;
};

}  // namespace mtia
