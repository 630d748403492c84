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
#include "mtia/isa/sanitize.h"
#include "mtia/log/logger.h"
#include "mtia/runtime.h"
#include "mtia/settings/settings.h"

namespace mtia {
namespace {

// DeviceOptions::trace, else $MTIA_EMU_TRACE, else off.
TraceLevel resolve_trace_level(const DeviceOptions& o) {
  if (o.trace) return *o.trace;
  const std::optional<std::string> env = settings::read("MTIA_EMU_TRACE");
  if (!env) return TraceLevel::kOff;
  if (auto level = parse_trace_level(*env)) return *level;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("MTIA_EMU_TRACE={} is not a trace level; use off, kernels (packets, "
                          "copies, launches) or units (every PE unit operation too)",
                          *env));
}

// DeviceOptions::trace_max_events, else $MTIA_EMU_TRACE_MAX_EVENTS, else the default.
uint64_t resolve_trace_max_events(const DeviceOptions& o) {
  if (o.trace_max_events != 0) return o.trace_max_events;
  const std::optional<std::string> text = settings::read("MTIA_EMU_TRACE_MAX_EVENTS");
  if (!text) return kDefaultTraceMaxEvents;
  const char* env = text->c_str();
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
  return value_or_raise(host::wait_policy_from_environment());
}

// DeviceOptions::sanitize, else $MTIA_EMU_SANITIZE, else off: SanitizeCheck bits.
uint64_t resolve_sanitize(const DeviceOptions& o) {
  isa::Result<uint64_t> checks =
      o.sanitize ? isa::parse_sanitize_checks(*o.sanitize, "DeviceOptions::sanitize")
                 : isa::sanitize_checks_from_environment();
  if (!checks) throw Error(ErrorKind::kInvalidArgument, checks.error().reason);
  return checks.value();
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
  bo.sanitize = resolve_sanitize(o);
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
  memory = std::make_unique<AccountedAllocator>(dev->allocator());
  trace = std::make_unique<HostTrace>(dev->trace(), trace_level);
  trace->device_index = options.index;
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
  props.sanitize = isa::sanitize_checks_name(bo.sanitize);

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
  streams.emplace(0, std::make_shared<StreamState>(0, 0));
  worker = std::thread([this] { worker_loop(); });
  life->impl = this;
  log->debug("opened device '{}' through backend '{}' (timing {})", props.name, choice.backend,
             o.timing ? "on" : "off");
}

Device::Impl::~Impl() {
  // 1. Let all user work finish (faults nobody asked about are logged), graph replays' parts
  // on queues of their own included (graph.cpp), and drop captures still open (a capturing
  // stream and its graph hold each other).
  std::vector<std::shared_ptr<StreamState>> all;
  std::vector<std::pair<uint32_t, uint64_t>> graph_parts;
  {
    std::lock_guard lock(mu);
    for (auto& [id, s] : streams) all.push_back(s);
    for (auto& [id, g] : graphs) {
      for (const auto& part : g->replay_parts) graph_parts.push_back(part);
      for (GraphBranch& b : g->branches) b.stream->capture.reset();
    }
  }
  for (const auto& [queue, seq] : graph_parts) {
    if (auto waited = dev->wait(queue, seq); !waited) {
      log->error("closing the device: waiting for a graph's replay failed: {}",
                 waited.error().reason);
    }
  }
  for (auto& s : all) {
    try {
      drain_stream(s);
    } catch (const std::exception& e) {
      log->error("closing the device: waiting for stream {} failed: {}", s->id, e.what());
    }
    if (auto error = s->pending_error()) {
      log->warn("closing the device: stream {} had an unreported error: {}", s->id, *error);
    }
  }
  // Other devices' completions hand this one no more work from now on.
  {
    std::lock_guard lock(life->mu);
    life->impl = nullptr;
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
  for (auto& r : host.take_all()) release_region(r);
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

uint32_t Device::index() const {
  return impl_->options.index;
}
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
  return DevicePtr(impl_->memory->allocate(bytes));
}

void Device::free(DevicePtr ptr) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "free");
  call.set_detail(fmt::format("0x{:x}", ptr.address()));
  d.memory->free(ptr.address());
}

MemoryStats Device::memory_stats() const {
  MemoryStats s;
  impl_->memory->stats(s);
  s.pinned_host_bytes = impl_->host.pinned_bytes();
  s.staging_host_bytes = impl_->host.staging_bytes();
  return s;
}

void Device::reset_peak_memory_stats() {
  impl_->memory->reset_peak();
}

// --- pinned host memory -------------------------------------------------------------------

void* Device::host_alloc(size_t bytes) {
  Impl& d = *impl_;
  if (bytes == 0) {
    throw Error(ErrorKind::kInvalidArgument, "host_alloc(0): cannot pin 0 bytes");
  }
  auto r = d.alloc_mapped(bytes, HostRegion::Kind::kAllocated,
                          fmt::format("host_alloc({} bytes)", bytes));
  d.host.add_pinned(r);
  return r->ptr;
}

void Device::host_free(void* ptr) {
  auto r = impl_->host.close_pinned(ptr, HostRegion::Kind::kAllocated, "host_free");
  impl_->release_region(r);
}

void Device::host_register(void* ptr, size_t bytes) {
  Impl& d = *impl_;
  if (!ptr || bytes == 0) {
    throw Error(
        ErrorKind::kInvalidArgument,
        fmt::format("host_register({}, {}): need a non-null pointer and bytes > 0", ptr, bytes));
  }
  d.host.check_disjoint(ptr, bytes, "host_register");
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
  d.host.add_pinned(std::move(r));
}

void Device::host_unregister(void* ptr) {
  auto r = impl_->host.close_pinned(ptr, HostRegion::Kind::kRegistered, "host_unregister");
  impl_->release_region(r);
}

bool Device::is_pinned(const void* ptr, size_t bytes) const {
  return impl_->host.is_pinned(ptr, bytes);
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
