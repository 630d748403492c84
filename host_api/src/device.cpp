// mtia::Device: opening and closing, properties, device and pinned host memory.
#include <spdlog/fmt/fmt.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "device_choice.h"
#include "device_impl.h"
#include "mtia/log/logger.h"
#include "mtia/runtime.h"

namespace mtia {
namespace {

constexpr size_t kRememberFreed = 4096;  // freed addresses kept for error messages

// DeviceOptions::trace, else $MTIA_EMU_TRACE, else off.
TraceLevel resolve_trace_level(const DeviceOptions& o) {
  if (o.trace) return *o.trace;
  const char* env = std::getenv("MTIA_EMU_TRACE");
  if (env == nullptr || *env == 0) return TraceLevel::kOff;
  if (auto level = parse_trace_level(env)) return *level;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("MTIA_EMU_TRACE={} is not a trace level; use off, kernels (packets, "
                          "copies, launches) or units (every PE unit operation too)",
                          env));
}

// DeviceOptions::trace_max_events, else $MTIA_EMU_TRACE_MAX_EVENTS, else the default.
uint64_t resolve_trace_max_events(const DeviceOptions& o) {
  if (o.trace_max_events != 0) return o.trace_max_events;
  const char* env = std::getenv("MTIA_EMU_TRACE_MAX_EVENTS");
  if (env == nullptr || *env == 0) return kDefaultTraceMaxEvents;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(env, &end, 10);
  if (errno != 0 || end == env || *end != 0 || n == 0 || env[0] == '-') {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("MTIA_EMU_TRACE_MAX_EVENTS={} is not a positive number of events", env));
  }
  return n;
}

// DeviceOptions::wait, else $MTIA_EMU_WAIT, else auto.
WaitPolicy resolve_wait_policy(const DeviceOptions& o) {
  if (o.wait) {
    const auto p = static_cast<uint8_t>(*o.wait);
    if (p > static_cast<uint8_t>(WaitPolicy::kBlock)) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("DeviceOptions::wait = {} is not a wait policy; use "
                              "WaitPolicy::kAuto, kSpin, kYield or kBlock",
                              p));
    }
    return *o.wait;
  }
  return value_or_raise(isa::wait_policy_from_environment());
}

}  // namespace

std::shared_ptr<spdlog::logger> host_api_logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("host_api");
  return log;
}

// --- open / close -------------------------------------------------------------------------

Device::Impl::Impl(const DeviceOptions& o) : log(host_api_logger()), options(o) {
  const DeviceChoice choice = choose_device(o);
  options.backend = choice.backend;
  driver::BackendOptions bo;
  bo.preset = o.preset;
  bo.overrides = o.overrides;
  bo.timing = o.timing;
  const TraceLevel trace_level = resolve_trace_level(o);
  bo.trace.level = trace_level;
  bo.trace.max_events = resolve_trace_max_events(o);
  bo.wait = resolve_wait_policy(o);
  bo.unit_threads = o.unit_threads;
  bo.inline_work_ns = o.inline_work_ns;
  bo.lazy_loads = o.lazy_loads;
  bo.server = choice.server;
  isa::Result<std::unique_ptr<driver::Device>> opened = driver::Device::open(choice.backend, bo);
  if (!opened) {
    const isa::Failure& f = opened.error();
    if (f.code == isa::ErrorCode::kInvalidArgument) {
      raise(f, fmt::format("cannot open a device with preset '{}': ", o.preset));
    }
    throw Error(ErrorKind::kDeviceUnavailable,
                fmt::format("cannot open the '{}' device: {}", choice.backend, f.reason));
  }
  dev = std::move(opened).value();
  trace = std::make_unique<HostTrace>(dev->trace(), trace_level);
  const driver::DeviceInfo& info = dev->info();
  props.backend = choice.backend;
  props.name = info.preset_name;
  props.generation = info.generation;
  props.firmware_version = info.firmware_version;
  props.dram_bytes = info.dram_bytes;
  props.sram_bytes = info.sram_bytes;
  props.local_store_bytes = info.local_store_bytes;
  props.pe_rows = info.pe_rows;
  props.pe_cols = info.pe_cols;
  props.clock_hz = info.clock_hz;
  props.dma_engines = info.dma_engines;
  props.hardware_queues = info.num_queues;
  props.timing = o.timing;
  if (choice.backend == "socket" && !choice.server.empty()) {
    // A running server's device is configured by the server: report what it does.
    const auto config = nlohmann::json::parse(dev->trace().config_json(), nullptr, false);
    if (config.is_object() && config.contains("timing") && config["timing"].is_object() &&
        config["timing"].value("value", o.timing) != o.timing) {
      props.timing = !o.timing;
    }
  }
  props.wait = bo.wait;

  // Queue 0: default stream. The last queue: fence repairs only, so a repair never waits
  // behind user work. The rest: created streams, round-robin.
  const uint32_t nq = dev->num_queues();
  if (nq >= 3) {
    repair_queue = nq - 1;
    first_user_queue = 1;
    last_user_queue = nq - 2;
  } else {
    repair_queue = 0;
    first_user_queue = nq - 1;
    last_user_queue = nq - 1;
  }
  auto def = std::make_shared<StreamState>();
  def->id = 0;
  def->queue = 0;
  streams.emplace(0, def);
  worker = std::thread([this] { worker_loop(); });
  log->debug("opened device '{}' through backend '{}' (timing {})", props.name, choice.backend,
             o.timing ? "on" : "off");
}

Device::Impl::~Impl() {
  // 1. Let all user work finish (faults nobody asked about are logged).
  std::vector<std::shared_ptr<StreamState>> all;
  {
    std::lock_guard lock(mu);
    for (auto& [id, s] : streams) all.push_back(s);
  }
  for (auto& s : all) {
    try {
      drain_stream(s);
    } catch (const std::exception& e) {
      log->error("closing the device: waiting for stream {} failed: {}", s->id, e.what());
    }
    std::lock_guard lock(mu);
    if (s->has_error) {
      log->warn("closing the device: stream {} had an unreported error: {}", s->id, s->error);
    }
  }
  // 2. Stop the worker after it has run what the completions asked for (repairs, releases).
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  tasks_cv.notify_all();
  if (worker.joinable()) worker.join();
  // 3. Fence repairs the worker submitted.
  if (isa::Result<uint64_t> last = dev->last_submitted(repair_queue); last && last.value() > 0) {
    if (auto waited = dev->wait(repair_queue, last.value()); !waited) {
      log->error("closing the device: waiting for fence repairs failed: {}", waited.error().reason);
    }
  }
  // Anything deferred after the worker stopped runs here, while the device still exists.
  for (;;) {
    std::function<void()> task;
    {
      std::lock_guard lock(mu);
      if (tasks.empty()) break;
      task = std::move(tasks.front());
      tasks.pop_front();
    }
    task();
  }
  // 4. Pinned host memory and idle staging buffers go with the device.
  std::vector<std::shared_ptr<HostRegion>> regions;
  {
    std::lock_guard lock(mu);
    for (auto& [p, r] : pinned) regions.push_back(r);
    pinned.clear();
    for (auto& [capacity, r] : staging_cache) regions.push_back(r);
    staging_cache.clear();
    staging_cache_bytes = 0;
  }
  for (auto& r : regions) release_region(r);
  dev.reset();
}

void Device::Impl::defer(std::function<void()> task) {
  {
    std::lock_guard lock(mu);
    tasks.push_back(std::move(task));
  }
  tasks_cv.notify_one();
}

void Device::Impl::worker_loop() {
  std::unique_lock lock(mu);
  for (;;) {
    tasks_cv.wait(lock, [&] { return stopping || !tasks.empty(); });
    if (tasks.empty()) return;  // stopping, and nothing left to do
    auto task = std::move(tasks.front());
    tasks.pop_front();
    lock.unlock();
    try {
      task();
    } catch (const std::exception& e) {
      log->error("runtime worker task failed: {}", e.what());
    }
    lock.lock();
  }
}

Device Device::open(const DeviceOptions& options) {
  return Device(std::make_unique<Impl>(options));
}

Device::Device(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Device::~Device() = default;
Device::Device(Device&&) noexcept = default;
Device& Device::operator=(Device&&) noexcept = default;

const DeviceProperties& Device::properties() const {
  return impl_->props;
}

uint64_t Device::now_ps() {
  return impl_->dev->trace().now_ps();
}

void Device::write_artifacts(const std::string& dir) {
  if (isa::Status written = impl_->dev->trace().write_artifacts(dir); !written) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("cannot write the device's artifacts to '{}': {}", dir,
                            written.error().reason));
  }
}

void Device::set_trace_level(TraceLevel level) {
  if (isa::Status set = impl_->dev->trace().set_trace_level(level); !set) {
    throw Error(ErrorKind::kDeviceUnavailable,
                fmt::format("cannot change the trace level: {}", set.error().reason));
  }
  impl_->trace->set_level(level);
}

TraceLevel Device::trace_level() const {
  return impl_->trace->level();
}

std::string Device::config_json() {
  return impl_->dev->trace().config_json();
}

// --- device memory ------------------------------------------------------------------------

DevicePtr Device::malloc(uint64_t bytes) {
  impl_->check_lost();
  ApiCall call(*impl_->trace, "malloc");
  call.set_detail(fmt::format("{} bytes", bytes));
  if (bytes == 0) {
    throw Error(ErrorKind::kInvalidArgument,
                "malloc(0): cannot allocate 0 bytes of device memory; skip the allocation for "
                "empty tensors");
  }
  isa::Result<uint64_t> allocated = impl_->dev->allocator().allocate(bytes);
  if (!allocated) {
    const isa::Failure& f = allocated.error();
    if (f.code == isa::ErrorCode::kOutOfMemory) {
      raise(f, fmt::format("malloc({} bytes): ", bytes),
            "; free unused allocations or request less");
    }
    raise(f, fmt::format("malloc({} bytes): ", bytes));
  }
  const uint64_t addr = allocated.value();
  std::lock_guard lock(impl_->mu);
  impl_->allocated += bytes;
  impl_->peak = std::max(impl_->peak, impl_->allocated);
  impl_->live_allocations += 1;
  impl_->total_allocations += 1;
  impl_->generation[addr] = impl_->next_generation++;
  return DevicePtr(addr);
}

void Device::free(DevicePtr ptr) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "free");
  call.set_detail(fmt::format("0x{:x}", ptr.address()));
  const uint64_t addr = ptr.address();
  {
    std::lock_guard lock(d.mu);
    if (d.runtime_blocks.count(addr)) {
      throw Error(
          ErrorKind::kInvalidPointer,
          fmt::format("free(0x{:x}): this block belongs to the runtime, not to malloc()", addr));
    }
  }
  const auto alloc = d.dev->allocator().find(addr, 1);
  if (isa::Status freed = d.dev->allocator().free(addr); !freed) {
    raise(freed.error(), fmt::format("free(0x{:x}): ", addr),
          "; pass a pointer malloc() returned, once");
  }
  // The allocator accepted it, so `alloc` was this very block.
  std::lock_guard lock(d.mu);
  const uint64_t bytes = alloc ? alloc->bytes : 0;
  d.allocated -= bytes;
  d.live_allocations -= 1;
  d.generation.erase(addr);
  d.recently_freed[addr] = bytes;
  d.freed_order.push_back(addr);
  if (d.freed_order.size() > kRememberFreed) {
    d.recently_freed.erase(d.freed_order.front());
    d.freed_order.pop_front();
  }
}

MemoryStats Device::memory_stats() const {
  const driver::AllocatorStats a = impl_->dev->allocator().stats();
  std::lock_guard lock(impl_->mu);
  MemoryStats s;
  s.allocated_bytes = impl_->allocated;
  s.reserved_bytes = a.reserved_bytes - impl_->runtime_bytes;  // runtime blocks have no padding
  s.peak_allocated_bytes = impl_->peak;
  s.allocations = impl_->live_allocations;
  s.total_allocations = impl_->total_allocations;
  s.free_bytes = a.free_bytes;
  s.largest_free_bytes = a.largest_free_bytes;
  s.runtime_bytes = impl_->runtime_bytes;
  s.pinned_host_bytes = impl_->pinned_bytes;
  s.staging_host_bytes = impl_->staging_cache_bytes;
  return s;
}

void Device::reset_peak_memory_stats() {
  std::lock_guard lock(impl_->mu);
  impl_->peak = impl_->allocated;
}

void Device::Impl::check_device_span(DevicePtr base, const ByteRange& span, size_t elem_size,
                                     const char* side) const {
  uint64_t lo = 0;
  if (__builtin_add_overflow(base.address(), span.lo, &lo)) {
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} device pointer 0x{:x} + layout offset {} bytes overflows 64 bits",
                            side, base.address(), span.lo));
  }
  const uint64_t bytes = span.size();
  if (lo % elem_size != 0) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("{} device address 0x{:x} is not aligned to the element size {}; "
                            "DMA moves naturally aligned elements",
                            side, lo, elem_size));
  }
  const auto alloc = dev->allocator().find(lo, bytes);
  if (alloc) {
    std::lock_guard lock(mu);
    if (!runtime_blocks.count(alloc->address)) return;
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} region 0x{:x} + {} bytes lies in memory the runtime owns, not in "
                            "a malloc() allocation",
                            side, lo, bytes));
  }
  if (const auto start = dev->allocator().find(lo, 1)) {
    const uint64_t end = start->address + start->bytes;
    throw Error(
        ErrorKind::kInvalidPointer,
        fmt::format("{} region 0x{:x} + {} bytes runs {} bytes past the end of its allocation "
                    "(0x{:x}, {} bytes); check the layout's sizes, strides and offset",
                    side, lo, bytes, lo + bytes - end, start->address, start->bytes));
  }
  std::lock_guard lock(mu);
  auto it = recently_freed.upper_bound(lo);
  if (it != recently_freed.begin()) {
    --it;
    if (lo - it->first < std::max<uint64_t>(it->second, 1)) {
      throw Error(ErrorKind::kInvalidPointer,
                  fmt::format("{} region 0x{:x} + {} bytes is in the allocation at 0x{:x} ({} "
                              "bytes), which was freed; use a live allocation",
                              side, lo, bytes, it->first, it->second));
    }
  }
  throw Error(ErrorKind::kInvalidPointer,
              fmt::format("{} region 0x{:x} + {} bytes is not inside any live device allocation; "
                          "pass a pointer from malloc() (plus an offset inside it)",
                          side, lo, bytes));
}

// --- pinned host memory -------------------------------------------------------------------

void* Device::host_alloc(size_t bytes) {
  Impl& d = *impl_;
  if (bytes == 0) {
    throw Error(ErrorKind::kInvalidArgument, "host_alloc(0): cannot pin 0 bytes");
  }
  auto r = d.alloc_mapped(bytes, HostRegion::Kind::kAllocated,
                          fmt::format("host_alloc({} bytes)", bytes));
  void* p = r->ptr;
  std::lock_guard lock(d.mu);
  d.pinned[reinterpret_cast<uintptr_t>(p)] = r;
  d.freed_host.erase(reinterpret_cast<uintptr_t>(p));
  d.pinned_bytes += bytes;
  return p;
}

namespace {

// Removes a pinned region of the expected kind once no copy uses it any more.
std::shared_ptr<HostRegion> close_region(Device::Impl& d, void* ptr, HostRegion::Kind kind,
                                         const char* call) {
  const auto key = reinterpret_cast<uintptr_t>(ptr);
  std::unique_lock lock(d.mu);
  auto it = d.pinned.find(key);
  const bool want_alloc = kind == HostRegion::Kind::kAllocated;
  if (it == d.pinned.end() || it->second->kind != kind || it->second->closing) {
    std::string why;
    if (it != d.pinned.end() && it->second->closing) {
      why = "another thread is releasing it right now";
    } else if (it != d.pinned.end()) {
      why = want_alloc ? "it was registered with host_register(); use host_unregister()"
                       : "it came from host_alloc(); use host_free()";
    } else if (d.freed_host.count(key)) {
      why = want_alloc ? "it was already freed" : "it was already unregistered";
    } else {
      why = want_alloc ? "it was not returned by host_alloc()"
                       : "it is not the start of a region passed to host_register()";
      for (const auto& [start, r] : d.pinned) {
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
  d.cv.wait(lock, [&] { return r->inflight == 0; });
  d.pinned.erase(key);
  d.pinned_bytes -= r->bytes;
  d.freed_host.insert(key);
  if (d.freed_host.size() > kRememberFreed) d.freed_host.erase(d.freed_host.begin());
  return r;
}

}  // namespace

void Device::host_free(void* ptr) {
  auto r = close_region(*impl_, ptr, HostRegion::Kind::kAllocated, "host_free");
  impl_->release_region(r);
}

void Device::host_register(void* ptr, size_t bytes) {
  Impl& d = *impl_;
  if (!ptr || bytes == 0) {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("host_register({}, {}): need a non-null pointer and bytes > 0", ptr, bytes));
  }
  const auto key = reinterpret_cast<uintptr_t>(ptr);
  {
    std::lock_guard lock(d.mu);
    for (const auto& [start, r] : d.pinned) {
      if (key < start + r->bytes && start < key + bytes) {
        throw Error(ErrorKind::kInvalidArgument,
                    fmt::format("host_register({}, {}): overlaps the pinned region at {} ({} "
                                "bytes); unregister that first or register disjoint memory",
                                ptr, bytes, static_cast<const void*>(r->ptr), r->bytes));
      }
    }
  }
  auto r = std::make_shared<HostRegion>();
  r->ptr = static_cast<uint8_t*>(ptr);
  r->bytes = bytes;
  r->kind = HostRegion::Kind::kRegistered;
  isa::Result<uint64_t> bus = d.dev->map_host(ptr, bytes);
  if (bus) {
    r->bus = bus.value();
  } else if (bus.error().code == isa::ErrorCode::kUnsupported) {
    // The backend reaches only memory from its alloc_host: the region is registered (the
    // caller's view is the same) but copies stage it, as they do pageable memory.
    r->mapped = false;
    d.log->debug("host_register({}, {}): the backend cannot map it ({}); copies will stage it", ptr,
                 bytes, bus.error().reason);
  } else {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("host_register({}, {}): cannot map it for DMA: {}", ptr, bytes,
                            bus.error().reason));
  }
  std::lock_guard lock(d.mu);
  d.pinned[key] = r;
  d.freed_host.erase(key);
  d.pinned_bytes += bytes;
}

void Device::host_unregister(void* ptr) {
  auto r = close_region(*impl_, ptr, HostRegion::Kind::kRegistered, "host_unregister");
  impl_->release_region(r);
}

bool Device::is_pinned(const void* ptr, size_t bytes) const {
  std::lock_guard lock(impl_->mu);
  try {
    return impl_->find_host_span(static_cast<const uint8_t*>(ptr), ByteRange{0, bytes}, "") !=
           nullptr;
  } catch (const Error&) {
    return false;  // straddles a region boundary
  }
}

void Device::Impl::release_region(const std::shared_ptr<HostRegion>& r) {
  if (r->mapped) {
    if (isa::Status unmapped = dev->unmap_host(r->bus); !unmapped) {
      log->error("unmapping host memory at {} ({} bytes) failed: {}",
                 static_cast<const void*>(r->ptr), r->bytes, unmapped.error().reason);
    }
  }
  if (r->kind == HostRegion::Kind::kAllocated || r->kind == HostRegion::Kind::kStaging) {
    if (isa::Status freed = dev->free_host(r->ptr); !freed) {
      log->error("freeing host memory at {} ({} bytes) failed: {}",
                 static_cast<const void*>(r->ptr), r->bytes, freed.error().reason);
    }
  }
  r->ptr = nullptr;
}

std::shared_ptr<HostRegion> Device::Impl::alloc_mapped(uint64_t bytes, HostRegion::Kind kind,
                                                       const std::string& what) {
  isa::Result<void*> p = dev->alloc_host(bytes);
  if (!p) {
    throw Error(ErrorKind::kOutOfMemory,
                fmt::format("{}: no host memory for it: {}", what, p.error().reason));
  }
  auto r = std::make_shared<HostRegion>();
  r->ptr = static_cast<uint8_t*>(p.value());
  r->bytes = bytes;
  r->kind = kind;
  isa::Result<uint64_t> bus = dev->map_host(r->ptr, bytes);
  if (!bus) {
    (void)dev->free_host(r->ptr);  // it was just allocated
    throw Error(ErrorKind::kOutOfMemory,
                fmt::format("{}: cannot map it for DMA: {}", what, bus.error().reason));
  }
  r->bus = bus.value();
  return r;
}

std::shared_ptr<HostRegion> Device::Impl::find_host_span(const uint8_t* p, const ByteRange& span,
                                                         const char* side) const {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) + span.lo;
  const uintptr_t hi = reinterpret_cast<uintptr_t>(p) + span.hi;
  auto it = pinned.upper_bound(lo);
  if (it != pinned.begin()) {
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
  if (it != pinned.end() && reinterpret_cast<uintptr_t>(it->second->ptr) < hi) {
    throw Error(ErrorKind::kInvalidPointer,
                fmt::format("{} host region {} + {} bytes starts in pageable memory but runs into "
                            "the pinned region at {}; keep a copy's host side in one region",
                            side, reinterpret_cast<const void*>(lo), hi - lo,
                            static_cast<const void*>(it->second->ptr)));
  }
  return nullptr;
}

// --- runtime-level functions ---------------------------------------------------------------

std::vector<std::string> backend_names() {
  return driver::backend_names();
}

int device_count(const std::string& backend) {
  return count_devices(backend);
}

DeviceProperties get_device_properties(const DeviceOptions& options) {
  return Device::open(options).properties();
}

}  // namespace mtia
