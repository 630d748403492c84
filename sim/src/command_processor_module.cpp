#include "command_processor_module.h"

#include <cassert>
#include <cstring>
#include <exception>

#include "dma_engine.h"
#include "sim_loggers.h"

namespace mtia::sim::detail {

using sc_core::sc_time;

namespace {

firmware::FirmwareConfig firmware_config(const ChipConfig& c) {
  firmware::FirmwareConfig f;
  f.num_queues = c.num_queues;
  f.generation = c.generation;
  f.dram_bytes = c.dram_bytes;
  f.sram_bytes = c.sram_bytes;
  f.local_store_bytes = c.local_store_bytes;
  f.pe_rows = c.pe_rows;
  f.pe_cols = c.pe_cols;
  f.clock_hz = c.clock_hz;
  f.preset_name = c.name;
  f.link_count = c.link_count;
  return f;
}

}  // namespace

CommandProcessorModule::CommandProcessorModule(sc_core::sc_module_name name, SimShared& shared,
                                               std::vector<DmaEngine*> engines, PeGrid& grid,
                                               HostChannel& channel)
    : sc_core::sc_module(name),
      shared_(shared),
      engines_(std::move(engines)),
      grid_(grid),
      channel_(channel),
      fw_(*this, firmware_config(shared.config)),
      packet_time_(shared.config.timing ? ps(ns_to_ps(shared.config.cp_packet_ns))
                                        : sc_core::SC_ZERO_TIME),
      replay_packet_time_(shared.config.timing ? ps(ns_to_ps(shared.config.cp_replay_packet_ns))
                                               : sc_core::SC_ZERO_TIME) {
  SC_HAS_PROCESS(CommandProcessorModule);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
}

void CommandProcessorModule::run() {
  // Each step that made progress occupies the command processor for cp_packet_ns (for
  // cp_replay_packet_ns if it dispatched a command buffer's packet); with nothing to do it
  // sleeps until a register write or a DMA completion.
  for (;;) {
    const bool progressed = fw_.step();
    if (progressed) {
      const sc_core::sc_time step = fw_.last_step_replayed() ? replay_packet_time_ : packet_time_;
      ++busy_steps_;
      busy_ps_ += step.value();
      shared_.tracer->cp_step(sc_core::sc_time_stamp().value(), step.value());
      wait(step);
    } else {
      // Nothing to dispatch: the device may be going idle (the bridge checks).
      channel_.device_idle.notify(sc_core::SC_ZERO_TIME);
      wait(work_);
    }
    shared_.sync_time();
  }
}

void CommandProcessorModule::notify_work() {
  work_.notify(sc_core::SC_ZERO_TIME);
}

void CommandProcessorModule::dma_done(unsigned engine, const isa::Status& outcome) {
  fw_.on_dma_done(engine, outcome);
  notify_work();
}

namespace {

isa::Failure device_fault(uint64_t addr, uint64_t bytes) {
  return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                     fmt::format("0x{:x} + {} bytes is not device memory", addr, bytes), addr,
                     bytes);
}

}  // namespace

isa::Status CommandProcessorModule::read_device(uint64_t addr, void* dst, size_t bytes) {
  const uint8_t* p = shared_.memory->device().translate(addr, bytes);
  if (p == nullptr) return device_fault(addr, bytes);
  shared_.memory->notify_device_access({addr, addr + bytes}, false);
  std::memcpy(dst, p, bytes);
  return {};
}

bool CommandProcessorModule::device_range_valid(uint64_t addr, uint64_t bytes) const {
  return shared_.memory->device().translate(addr, bytes) != nullptr;
}

isa::Status CommandProcessorModule::write_device(uint64_t addr, const void* src, size_t bytes) {
  uint8_t* p = shared_.memory->device().translate(addr, bytes);
  if (p == nullptr) return device_fault(addr, bytes);
  shared_.memory->notify_device_access({addr, addr + bytes}, true);
  std::memcpy(p, src, bytes);
  shared_.memory->device().note_written(addr, bytes);
  return {};
}

isa::Status CommandProcessorModule::write_host(uint64_t addr, const void* src, size_t bytes,
                                               uint32_t context) {
  uint8_t* p = shared_.memory->host().translate_in(context, addr, bytes);
  if (p == nullptr) {
    return isa::reject(isa::ErrorCode::kHostAddressFault,
                       fmt::format("0x{:x} + {} bytes is not registered host memory", addr, bytes),
                       addr, bytes);
  }
  std::memcpy(p, src, bytes);
  return {};
}

unsigned CommandProcessorModule::dma_engine_count() const {
  return static_cast<unsigned>(engines_.size());
}

void CommandProcessorModule::dma_start(unsigned engine, const firmware::DmaJob& job) {
  assert(engine < engines_.size() && !engines_[engine]->busy());
  engines_[engine]->submit(job, shared_.tracer->on() ? dispatch_queue_ : Tracer::kNoQueue);
}

isa::Status CommandProcessorModule::set_sanitize(uint64_t checks) {
  if (grid_.busy()) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "the sanitizer cannot be switched while a launch runs");
  }
  shared_.sanitize = checks;
  shared_.memcheck.enable((checks & isa::kSanitizeAllocationTable) != 0);
  shared_.initcheck.enable((checks & isa::kSanitizeInitcheck) != 0);
  return {};
}

isa::Status CommandProcessorModule::memcheck_update(isa::MemcheckOp op, uint64_t base,
                                                    uint64_t bytes) {
  if (op == isa::MemcheckOp::kWritten) {
    if (shared_.initcheck.on() && base + bytes >= base) {
      shared_.initcheck.written_by_host(base, base + bytes);
    }
    return {};
  }
  MTIA_RETURN_IF_ERROR(shared_.memcheck.update(op, base, bytes));
  if (shared_.initcheck.on()) shared_.initcheck.update(op, base, bytes);
  return {};
}

void CommandProcessorModule::launch_start(const isa::LaunchPacket& launch,
                                          const isa::AccessScope& scope) {
  assert(!grid_.busy());
  if (shared_.tracer->on()) {
    Tracer::LaunchInfo info;
    info.queue = dispatch_queue_;
    info.seq = launch.header.seq;
    info.image_addr = launch.image_addr;
    info.entry_offset = launch.entry_offset;
    info.grid_rows = launch.grid_rows;
    info.grid_cols = launch.grid_cols;
    info.start_ps = sc_core::sc_time_stamp().value();
    shared_.tracer->launch_begin(info);
  }
  grid_.submit(launch, scope);
}

void CommandProcessorModule::launch_done(const isa::Status& outcome) {
  shared_.tracer->launch_end(sc_core::sc_time_stamp().value(),
                             static_cast<uint16_t>(isa::error_code(outcome)));
  fw_.on_launch_done(outcome);
  notify_work();
}

void CommandProcessorModule::packet_dispatched(uint32_t queue,
                                               const isa::PacketHeader& /*header*/) {
  if (!shared_.tracer->on()) return;
  dispatch_queue_ = queue;  // the firmware dispatches one packet at a time
}

void CommandProcessorModule::packet_completed(uint32_t queue, const isa::CompletionRecord& r) {
  if (!shared_.tracer->on()) return;
  shared_.tracer->packet(queue, r.start_ps, r.end_ps, r.seq, r.index, r.opcode, r.status, r.error);
  ++records_traced_;
}

uint64_t CommandProcessorModule::now_ps() const {
  return sc_core::sc_time_stamp().value();
}

void CommandProcessorModule::raise_interrupt(uint64_t queue_mask) {
  ++interrupts_;
  if (!shared_.on_interrupt) return;
  // The handler is the driver's code running on our thread: it must not take the simulator
  // down with it.
  try {
    shared_.on_interrupt(queue_mask);
  } catch (const std::exception& e) {
    ++handler_errors_;
    logger("sim.cp")->error("interrupt handler threw: {}", e.what());
  } catch (...) {
    ++handler_errors_;
    logger("sim.cp")->error("interrupt handler threw a non-standard exception");
  }
}

namespace {

spdlog::level::level_enum spdlog_level(firmware::LogLevel level) {
  switch (level) {
    case firmware::LogLevel::kDebug:
      return spdlog::level::debug;
    case firmware::LogLevel::kInfo:
      return spdlog::level::info;
    case firmware::LogLevel::kWarn:
      return spdlog::level::warn;
    case firmware::LogLevel::kError:
      return spdlog::level::err;
  }
  return spdlog::level::err;
}

const std::shared_ptr<spdlog::logger>& firmware_logger() {
  static const std::shared_ptr<spdlog::logger> log = logger("firmware");
  return log;
}

}  // namespace

bool CommandProcessorModule::log_enabled(firmware::LogLevel level) const {
  return firmware_logger()->should_log(spdlog_level(level));
}

void CommandProcessorModule::log(firmware::LogLevel level, std::string_view message) {
  firmware_logger()->log(spdlog_level(level), "{}", message);
}

Json CommandProcessorModule::stats_json() const {
  Json m = Json::object();
  const auto& fs = fw_.stats();
  add_stat(m, "busy_steps", busy_steps_, "steps",
           "firmware steps that dispatched or finished a packet");
  add_stat(m, "busy_ps", busy_ps_, "ps",
           "time charged for those steps (cp_packet_ns each, cp_replay_packet_ns for a command "
           "buffer's packet)");
  add_stat(m, "packets_completed", fs.packets_completed, "packets",
           "packets completed successfully");
  add_stat(m, "packets_failed", fs.packets_failed, "packets", "packets completed with an error");
  add_stat(m, "dma_jobs_started", fs.dma_jobs_started, "jobs", "jobs handed to DMA engines");
  add_stat(m, "launches_started", fs.launches_started, "launches",
           "kernel launches handed to the PE grid");
  add_stat(m, "interrupts_raised", fs.interrupts_raised, "interrupts",
           "interrupts the firmware raised");
  add_stat(m, "interrupt_handler_errors", handler_errors_, "calls",
           "interrupt handler calls that threw (logged)");
  add_stat(m, "records_traced", records_traced_, "records",
           "completion records seen by the tracer");
  return m;
}

}  // namespace mtia::sim::detail
