#include "mtia/sim/emulated_device.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "device_model.h"
#include "mtia/isa/address_map.h"
#include "sim_loggers.h"

namespace mtia::sim {
namespace {

// SystemC keeps one global simulation context, so only one Device may run at a time.
std::atomic<bool> g_device_alive{false};

// SystemC's own reports: infos and warnings go to our log; errors keep SystemC's default
// behaviour (throwing sc_report out of sc_start, where the simulator thread catches it).
void report_handler(const sc_core::sc_report& report, const sc_core::sc_actions& actions) {
  if (report.get_severity() == sc_core::SC_INFO) {
    detail::logger("sim.systemc")->debug("{}: {}", report.get_msg_type(), report.get_msg());
    return;
  }
  if (report.get_severity() == sc_core::SC_WARNING) {
    detail::logger("sim.systemc")->warn("{}: {}", report.get_msg_type(), report.get_msg());
    return;
  }
  sc_core::sc_report_handler::default_handler(report, actions);
}

void configure_systemc_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The banner is printed when the first simulation starts unless this is set. Done once,
    // before the first simulator thread exists.
    setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
    sc_core::sc_report_handler::set_handler(report_handler);
  });
}

isa::Failure cannot_write(const std::filesystem::path& path) {
  return isa::reject(isa::ErrorCode::kInvalidArgument,
                     "cannot write " + path.string() + ": " + std::strerror(errno));
}

isa::Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return cannot_write(path);
  return {};
}

}  // namespace

struct Device::Impl {
  detail::SimShared shared;
  std::thread thread;
  detail::DeviceModel* model = nullptr;  // simulator thread only

  mutable std::mutex lost_mu;
  std::string lost_reason;  // set once, when the simulator fails
  LostHandler on_lost;
  // Records the failure and tells the handler (simulator thread, as it ends).
  void mark_lost(const std::string& why);

  void sim_main(std::promise<void>& started);
  // Sends a request and waits for its answer.
  isa::Result<uint64_t> call(detail::HostRequest request);
  // Runs `fn` on the simulator thread and waits for it.
  isa::Status run_on_sim(const std::function<void()>& fn, const char* what);
};

void Device::Impl::sim_main(std::promise<void>& started) {
  // A fresh context per device: the previous device's context is gone (or was the one SystemC
  // created at load time, which is left alone), so devices can be opened one after another.
  auto* context = new sc_core::sc_simcontext();
  sc_core::sc_curr_simcontext = context;
  sc_core::sc_default_global_context = context;

  std::unique_ptr<detail::DeviceModel> device_model;
  bool announced = false;
  // Why the simulator failed; empty while it runs (nothing on the heap that only this
  // thread's stack refers to while it runs on SystemC's coroutine stacks, where
  // LeakSanitizer cannot see it).
  std::string why;
  try {
    device_model = std::make_unique<detail::DeviceModel>("mtia", shared);
    model = device_model.get();
    shared.inbox.open(&device_model->channel());
    announced = true;
    started.set_value();
    sc_core::sc_start();  // returns after sc_stop() from the bridge
  } catch (const std::exception& e) {
    if (!announced) {
      started.set_exception(std::current_exception());
    } else {
      why = std::string("the simulator failed: ") + e.what();
      detail::logger("sim")->error("{}", why);
    }
  } catch (...) {
    if (!announced) {
      started.set_exception(std::current_exception());
    } else {
      why = "the simulator failed: a non-standard exception left a model process";
      detail::logger("sim")->error("{}", why);
    }
  }
  // No host thread can reach the channel after this; then the model can go.
  shared.inbox.close(why.empty() ? "the device was closed" : why);
  if (announced && !why.empty()) mark_lost(why);
  model = nullptr;
  device_model.reset();
  delete context;
  sc_core::sc_curr_simcontext = nullptr;
  sc_core::sc_default_global_context = nullptr;
}

void Device::Impl::mark_lost(const std::string& why) {
  LostHandler handler;
  {
    std::lock_guard lock(lost_mu);
    lost_reason = why;
    handler = on_lost;
  }
  if (!handler) return;
  try {
    handler(why);
  } catch (const std::exception& e) {
    detail::logger("sim")->error("device-lost handler threw: {}", e.what());
  }
}

isa::Result<uint64_t> Device::Impl::call(detail::HostRequest request) {
  if (std::this_thread::get_id() == thread.get_id()) {
    // From the interrupt handler: waiting for the simulator thread on itself would hang.
    return isa::reject(isa::ErrorCode::kBadRegister,
                       "called on the simulator thread (from the interrupt handler?); the handler "
                       "may only use read_memory / write_memory, do register accesses from "
                       "another thread");
  }
  detail::Reply reply;
  request.reply = &reply;
  if (!shared.inbox.push(std::move(request))) {
    return isa::reject(isa::ErrorCode::kBadRegister,
                       "device is not running: " + shared.inbox.closed_reason());
  }
  return reply.get(shared.wait);
}

isa::Status Device::Impl::run_on_sim(const std::function<void()>& fn, const char* what) {
  detail::HostRequest r;
  r.kind = detail::HostRequest::Kind::kCall;
  r.call = fn;
  auto done = call(std::move(r));
  if (!done) {
    return isa::reject(isa::ErrorCode::kDeviceLost, std::string(what) + ": " + done.error().reason);
  }
  return {};
}

isa::Result<std::unique_ptr<Device>> Device::open(const ChipConfig& config, HostMemory& host_memory,
                                                  InterruptHandler on_interrupt,
                                                  trace::TraceOptions trace, host::WaitPolicy wait,
                                                  const PeGridHostOptions& grid) {
  if (isa::Status valid = validate(config); !valid) return valid.error();
  isa::Result<PeGridHostSettings> grid_host = resolve(grid);
  if (!grid_host) return grid_host.error();
  bool expected = false;
  if (!g_device_alive.compare_exchange_strong(expected, true)) {
    return isa::reject(
        isa::ErrorCode::kDeviceUnavailable,
        "another mtia::sim::Device is open in this process; SystemC has one simulation "
        "context per process, so destroy the first device before creating a second");
  }
  std::unique_ptr<Device> device(new Device());
  // Building the model runs SystemC's and the memories' constructors, which report failure
  // (a SystemC error, host address space refused, no memory) only by exception: they end here.
  try {
    configure_systemc_once();
    device->impl_ = std::make_unique<Impl>();
    Impl* impl = device->impl_.get();
    auto& s = impl->shared;
    s.config = config;
    s.wait = wait;
    s.grid_host = grid_host.value();
    s.memory = std::make_unique<MemorySystem>(config, host_memory);
    s.on_interrupt = std::move(on_interrupt);
    s.tracer =
        std::make_unique<detail::Tracer>("mtia-emu device 0 (" + config.name + ")", config, trace);
    std::promise<void> started;
    auto ready = started.get_future();
    impl->thread = std::thread([impl, &started] { impl->sim_main(started); });
    try {
      ready.get();
    } catch (...) {
      impl->thread.join();
      throw;
    }
  } catch (const std::exception& e) {
    device->impl_.reset();
    g_device_alive = false;
    return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                       std::string("the simulator could not start: ") + e.what());
  } catch (...) {
    device->impl_.reset();
    g_device_alive = false;
    return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                       "the simulator could not start: a non-standard exception");
  }
  detail::logger("sim")->info("device started: preset {}, {} DMA engines, timing {}", config.name,
                              config.dma_engines, config.timing ? "on" : "off");
  return device;
}

Device::~Device() {
  if (!impl_) return;  // never started
  detail::HostRequest stop;
  stop.kind = detail::HostRequest::Kind::kStop;
  // Answered by the bridge, or at once if already stopped: either way the thread ends.
  (void)impl_->call(std::move(stop));
  impl_->thread.join();
  impl_.reset();
  g_device_alive = false;
}

void Device::write_register(uint64_t offset, uint64_t value) {
  detail::HostRequest r;
  r.kind = detail::HostRequest::Kind::kWriteRegister;
  r.offset = offset;
  r.value = value;
  if (!impl_->shared.inbox.push(std::move(r))) {
    detail::logger("sim.bridge")
        ->warn("BAR0 write at 0x{:x} dropped: device is not running ({})", offset,
               impl_->shared.inbox.closed_reason());
  }
}

void Device::set_lost_handler(LostHandler handler) {
  std::string already;
  {
    std::lock_guard lock(impl_->lost_mu);
    impl_->on_lost = handler;
    already = impl_->lost_reason;
  }
  if (handler && !already.empty()) handler(already);
}

std::string Device::lost_reason() const {
  std::lock_guard lock(impl_->lost_mu);
  return impl_->lost_reason;
}

isa::Result<uint64_t> Device::read_register(uint64_t offset) {
  detail::HostRequest r;
  r.kind = detail::HostRequest::Kind::kReadRegister;
  r.offset = offset;
  return impl_->call(std::move(r));
}

namespace {

isa::Failure outside_device_memory(const char* what, uint64_t addr, uint64_t bytes) {
  return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                     fmt::format("memory window {} of 0x{:x} + {} bytes is outside device memory",
                                 what, addr, bytes),
                     addr, bytes);
}

}  // namespace

isa::Status Device::read_memory(uint64_t addr, void* dst, uint64_t bytes) {
  const uint8_t* p = impl_->shared.memory->device().translate(addr, bytes);
  if (p == nullptr) return outside_device_memory("read", addr, bytes);
  if (bytes > 0) std::memcpy(dst, p, bytes);  // an empty read may have no buffer at all
  return {};
}

Device::MemoryWindow Device::dram_window() const {
  const DeviceMemory& mem = impl_->shared.memory->device();
  return {mem.dram_fd(), isa::kDramBase, mem.dram_bytes()};
}

isa::Result<Device::MemoryWindow> Device::split_dram_window(uint64_t device_addr, uint64_t bytes) {
  MTIA_ASSIGN_OR_RETURN(const int fd,
                        impl_->shared.memory->device().split_dram(device_addr, bytes));
  return MemoryWindow{fd, device_addr, bytes};
}

isa::Status Device::write_memory(uint64_t addr, const void* src, uint64_t bytes) {
  uint8_t* p = impl_->shared.memory->device().translate(addr, bytes);
  if (p == nullptr) return outside_device_memory("write", addr, bytes);
  if (bytes > 0) std::memcpy(p, src, bytes);
  impl_->shared.memory->device().note_written(addr, bytes);
  if (impl_->shared.initcheck.on()) [[unlikely]] {
    impl_->shared.initcheck.written_by_host(addr, addr + bytes);
  }
  return {};
}

uint64_t Device::now_ps() const {
  return impl_->shared.now_ps.load(std::memory_order_relaxed);
}

const ChipConfig& Device::config() const {
  return impl_->shared.config;
}

isa::Status Device::write_artifacts(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "cannot create directory " + dir + ": " + ec.message());
  }
  const std::filesystem::path base(dir);
  // The trace streams into its file on the simulator thread, which holds still meanwhile.
  const std::filesystem::path trace_path = base / "trace.json";
  std::ofstream trace(trace_path, std::ios::binary | std::ios::trunc);
  std::string stats;
  std::optional<isa::Result<trace::TraceSummary>> summary;
  uint64_t dropped = 0, dropped_detail = 0;
  Impl* impl = impl_.get();
  isa::Status snapshot = impl_->run_on_sim(
      [impl, &trace, &stats, &summary, &dropped, &dropped_detail] {
        const detail::Tracer& tracer = *impl->shared.tracer;
        const uint64_t now = sc_core::sc_time_stamp().value();
        if (trace) tracer.write_json(trace, now);
        summary = tracer.summary(now);
        stats = impl->model->stats_json();
        dropped = tracer.dropped();
        dropped_detail = tracer.dropped_detail();
      },
      "cannot snapshot the device for write_artifacts");
  if (!snapshot) return snapshot;
  if (!summary->ok()) return summary->error();
  trace.close();
  if (!trace) return cannot_write(trace_path);
  MTIA_RETURN_IF_ERROR(write_file(base / "stats.json", stats));
  MTIA_RETURN_IF_ERROR(write_file(base / "summary.json", summary->value().to_json()));
  MTIA_RETURN_IF_ERROR(write_file(base / "config.json", to_json(impl_->shared.config)));
  if (dropped > 0) {
    detail::logger("sim.trace")
        ->warn(
            "{}/trace.json: {} events dropped at the limit of {} events ({} of them unit "
            "operations); see otherData in the trace",
            dir, dropped, impl_->shared.tracer->max_events(), dropped_detail);
  }
  return {};
}

isa::Status Device::set_trace_level(trace::TraceLevel level) {
  Impl* impl = impl_.get();
  return impl_->run_on_sim([impl, level] { impl->shared.tracer->set_level(level); },
                           "cannot change the trace level");
}

trace::TraceLevel Device::trace_level() const {
  return impl_->shared.tracer->level();
}

void Device::trace_host_call(trace::HostCall call) {
  impl_->shared.tracer->host_call(std::move(call));
}

isa::Result<std::string> Device::stats_json() {
  std::string stats;
  Impl* impl = impl_.get();
  isa::Status snapshot = impl_->run_on_sim([impl, &stats] { stats = impl->model->stats_json(); },
                                           "cannot snapshot the device statistics");
  if (!snapshot) return snapshot.error();
  return stats;
}

}  // namespace mtia::sim
