#include "model.h"

#include <cassert>
#include <cstring>
#include <exception>

#include "log.h"
#include "mtia/isa/decode.h"

namespace mtia::sim::detail {
namespace {

using sc_core::sc_time;

// Coroutine stacks for our SC_THREADs. The firmware formats messages and the interrupt
// handler runs user code on them, and sanitizer builds need several times the usual stack.
constexpr size_t kThreadStackBytes = 1 << 20;

sc_time ps(uint64_t picoseconds) {
  return sc_time::from_value(picoseconds);
}

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

void add_stat(Json& module, const char* key, Json value, const char* unit,
              const char* description) {
  Json entry;
  entry["value"] = std::move(value);
  entry["unit"] = unit;
  entry["description"] = description;
  module[key] = std::move(entry);
}

// ---- host inbox and channel -----------------------------------------------------------------

void Reply::set_value(isa::Result<uint64_t> value) {
  // Notified under the lock: the waiter takes it before it returns and destroys the reply.
  std::lock_guard lock(mu_);
  value_ = std::move(value);
  ready_.store(true, std::memory_order_release);
  cv_.notify_one();
}

isa::Result<uint64_t> Reply::get(isa::WaitPolicy policy) {
  if (!isa::poll_before_block(policy, isa::WaitSide::kHost,
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

void SimShared::sync_time() {
  now_ps.store(sc_core::sc_time_stamp().value(), std::memory_order_relaxed);
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

// ---- command processor ------------------------------------------------------------------------

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

// ---- DMA engine -------------------------------------------------------------------------------

DmaEngine::DmaEngine(sc_core::sc_module_name name, unsigned index, SimShared& shared)
    : sc_core::sc_module(name), index_(index), shared_(shared) {
  SC_HAS_PROCESS(DmaEngine);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
}

void DmaEngine::submit(const firmware::DmaJob& job, uint32_t queue) {
  assert(!job_);
  job_ = job;
  job_queue_ = queue;
  start_.notify(sc_core::SC_ZERO_TIME);
}

void DmaEngine::run() {
  MemorySystem& memory = *shared_.memory;
  for (;;) {
    while (!job_) wait(start_);
    shared_.sync_time();
    const uint64_t begin = sc_core::sc_time_stamp().value();
    const bool fill = job_->kind == firmware::DmaJob::Kind::kFill;
    const bool link = job_->kind == firmware::DmaJob::Kind::kLink;
    const DmaReach reach{job_->scope, /*launch_scratch=*/false};
    const DmaPlan plan = fill   ? memory.schedule_fill(job_->fill, begin, reach)
                         : link ? memory.schedule_link(job_->link, begin, reach)
                                : memory.schedule_copy(job_->copy, begin, reach);
    // One wait per job: the data moves at the end, when the transfer is complete.
    wait(ps(plan.end_ps - begin));
    shared_.sync_time();
    const isa::Status result = plan.status.ok() ? memory.perform(plan) : plan.status;

    // The trace shows the bytes charged on the path's bottleneck (the busiest resource).
    int busiest = -1;
    for (int r = 0; r < kNumResources; ++r) {
      effective_bytes_ += plan.effective_bytes[r];
      if (plan.effective_bytes[r] == 0) continue;
      if (busiest < 0 || plan.busy_ps[r] > plan.busy_ps[busiest] ||
          (plan.busy_ps[r] == plan.busy_ps[busiest] &&
           plan.effective_bytes[r] > plan.effective_bytes[busiest])) {
        busiest = r;
      }
    }
    const uint64_t eff = busiest < 0 ? 0 : plan.effective_bytes[busiest];
    ++jobs_;
    busy_ps_ += plan.end_ps - begin;
    if (result.ok()) {
      bytes_ += plan.payload_bytes;
    } else {
      ++faults_;
    }
    Tracer::DmaEvent ev;
    ev.start_ps = begin;
    ev.end_ps = plan.end_ps;
    ev.fill = fill;
    ev.bytes = plan.payload_bytes;
    ev.src = fill ? 0 : plan.copy.src.addr;
    ev.src_space = fill ? 0 : plan.copy.src.space;
    ev.dst = fill ? plan.fill.dst.addr : plan.copy.dst.addr;
    ev.dst_space = fill ? plan.fill.dst.space : plan.copy.dst.space;
    ev.effective_bytes = eff;
    ev.error = static_cast<uint16_t>(isa::error_code(result));
    ev.queue = job_queue_;
    ev.seq = fill ? plan.fill.header.seq : plan.copy.header.seq;
    if (link) {
      ev.link = true;
      ev.link_receive = plan.link.direction == static_cast<uint8_t>(isa::LinkDirection::kReceive);
      ev.link_index = plan.link.link;
      ev.peer = plan.link.peer;
      ev.link_start_ps = plan.status.ok() ? plan.link_start_ps : begin;
      ev.link_end_ps = plan.status.ok() ? plan.link_end_ps : begin;
      ev.link_busy_ps = plan.link_busy_ps;
    }
    shared_.tracer->dma(index_, ev);
    shared_.tracer->reservations(plan);
    if (!result.ok()) {
      const isa::Failure& f = result.error();
      logger("sim.dma")->info("dma {}: {} failed: {} (arg0 0x{:x}, arg1 {})", index_,
                              fill   ? "fill"
                              : link ? "link transfer"
                                     : "copy",
                              isa::error_code_name(f.code), f.arg0, f.arg1);
    } else {
      logger("sim.dma")->debug("dma {}: {} of {} bytes, {} ps -> {} ps", index_,
                               fill   ? "fill"
                               : link ? "link transfer"
                                      : "copy",
                               plan.payload_bytes, begin, plan.end_ps);
    }
    job_.reset();
    cp_->dma_done(index_, result);
  }
}

Json DmaEngine::stats_json() const {
  Json m = Json::object();
  add_stat(m, "jobs", jobs_, "jobs", "copy and fill jobs executed, faulted ones included");
  add_stat(m, "bytes", bytes_, "bytes", "payload bytes moved by successful jobs");
  add_stat(m, "effective_bytes", effective_bytes_, "bytes",
           "bytes charged to memories and links, burst waste included");
  add_stat(m, "busy_ps", busy_ps_, "ps", "time from taking a job to reporting it done");
  add_stat(m, "faults", faults_, "jobs", "jobs that ended in an address fault");
  return m;
}

// ---- BAR0 register file -------------------------------------------------------------------------

RegisterFile::RegisterFile(sc_core::sc_module_name name, CommandProcessorModule& cp)
    : sc_core::sc_module(name), socket("socket"), cp_(cp) {
  socket.register_b_transport(this, &RegisterFile::b_transport);
}

void RegisterFile::b_transport(tlm::tlm_generic_payload& p, sc_core::sc_time& /*delay*/) {
  const uint64_t offset = p.get_address();
  auto reject = [&](tlm::tlm_response_status status, isa::Failure why) {
    ++rejected_;
    logger("sim.bridge")
        ->warn("BAR0 {} at offset 0x{:x} rejected: {}", p.is_read() ? "read" : "write", offset,
               why.reason);
    last_rejection_ = std::move(why);
    p.set_response_status(status);
  };
  if (p.get_data_length() != 8 || p.get_streaming_width() != 8 ||
      p.get_byte_enable_ptr() != nullptr) {
    reject(tlm::TLM_BURST_ERROR_RESPONSE,
           isa::reject(isa::ErrorCode::kBadRegister,
                       "BAR0 registers take whole, naturally aligned 8-byte accesses"));
    return;
  }
  if (p.is_read()) {
    ++reads_;
    auto value = cp_.firmware().read_register(offset);
    if (!value) return reject(tlm::TLM_ADDRESS_ERROR_RESPONSE, value.error());
    std::memcpy(p.get_data_ptr(), &value.value(), 8);
  } else if (p.is_write()) {
    ++writes_;
    uint64_t v = 0;
    std::memcpy(&v, p.get_data_ptr(), 8);
    auto done = cp_.firmware().write_register(offset, v);
    if (!done) return reject(tlm::TLM_ADDRESS_ERROR_RESPONSE, done.error());
    cp_.notify_work();
  } else {
    return reject(tlm::TLM_COMMAND_ERROR_RESPONSE,
                  isa::reject(isa::ErrorCode::kBadRegister, "only reads and writes exist"));
  }
  p.set_response_status(tlm::TLM_OK_RESPONSE);
}

Json RegisterFile::stats_json() const {
  Json m = Json::object();
  add_stat(m, "register_reads", reads_, "accesses", "BAR0 reads that reached the register file");
  add_stat(m, "register_writes", writes_, "accesses", "BAR0 writes that reached the register file");
  add_stat(m, "rejected_accesses", rejected_, "accesses",
           "BAR0 accesses the firmware rejected (unmapped, read-only, bad value); logged");
  return m;
}

// ---- host bridge --------------------------------------------------------------------------------

Bridge::Bridge(sc_core::sc_module_name name, SimShared& shared, HostChannel& channel,
               RegisterFile& regs)
    : sc_core::sc_module(name), socket("socket"), shared_(shared), channel_(channel), regs_(regs) {
  SC_HAS_PROCESS(Bridge);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
  arrived_or_idle_ |= channel_.arrived;
  arrived_or_idle_ |= channel_.device_idle;
}

void Bridge::run() {
  for (;;) {
    HostRequest request;
    // Checking and waiting happen in one evaluation phase; the channel's update (and so the
    // notification) comes after it, so a request pushed in between is never missed.
    while (!shared_.inbox.pop(request)) {
      if (poll_inbox()) continue;
      if (shared_.wait == isa::WaitPolicy::kBlock) {
        wait(channel_.arrived);  // no poll to make when the device goes idle
      } else {
        wait(arrived_or_idle_);
      }
    }
    // Where the device side runs now, for the host's wait policy (isa/wait.h, spin_pays).
    if (shared_.wait == isa::WaitPolicy::kAuto) isa::note_cpu(isa::WaitSide::kDevice);
    shared_.sync_time();
    handle(request);
  }
}

bool Bridge::poll_inbox() {
  // Only when the kernel has nothing else to do at any time: then it would suspend now, and
  // polling in its place neither delays other processes nor lets simulated time move on, so
  // a request found here is handled at the very simulated time it would have been.
  if (stopping_ || shared_.wait == isa::WaitPolicy::kBlock || sc_core::sc_pending_activity()) {
    return false;
  }
  shared_.inbox.begin_polling();
  isa::poll_before_block(shared_.wait, isa::WaitSide::kDevice,
                         [&] { return shared_.inbox.has_request(); });
  return shared_.inbox.end_polling();
}

void Bridge::handle(HostRequest& r) {
  using Kind = HostRequest::Kind;
  switch (r.kind) {
    case Kind::kWriteRegister:
    case Kind::kReadRegister: {
      const bool read = r.kind == Kind::kReadRegister;
      uint64_t data = r.value;
      tlm::tlm_generic_payload p;
      p.set_command(read ? tlm::TLM_READ_COMMAND : tlm::TLM_WRITE_COMMAND);
      p.set_address(r.offset);
      p.set_data_ptr(reinterpret_cast<unsigned char*>(&data));
      p.set_data_length(8);
      p.set_streaming_width(8);
      p.set_byte_enable_ptr(nullptr);
      p.set_dmi_allowed(false);
      p.set_response_status(tlm::TLM_INCOMPLETE_RESPONSE);
      sc_time delay = sc_core::SC_ZERO_TIME;
      socket->b_transport(p, delay);
      (read ? reads_ : writes_) += 1;
      const bool ok = p.is_response_ok();
      if (!ok) ++rejected_;
      if (r.reply != nullptr) {
        if (ok) {
          r.reply->set_value(read ? data : uint64_t{0});
        } else {
          r.reply->set_value(regs_.last_rejection());
        }
      }
      return;
    }
    case Kind::kCall:
      ++calls_;
      try {
        r.call();
        if (r.reply != nullptr) r.reply->set_value(uint64_t{0});
      } catch (const std::exception& e) {
        if (r.reply != nullptr) {
          r.reply->set_value(isa::reject(isa::ErrorCode::kUnsupported, e.what()));
        }
      }
      return;
    case Kind::kStop:
      stopping_ = true;
      if (r.reply != nullptr) r.reply->set_value(uint64_t{0});
      sc_core::sc_stop();
      return;
  }
}

Json Bridge::stats_json() const {
  Json m = Json::object();
  add_stat(m, "register_reads", reads_, "accesses", "host BAR0 reads");
  add_stat(m, "register_writes", writes_, "accesses", "host BAR0 writes (posted)");
  add_stat(m, "rejected_accesses", rejected_, "accesses",
           "host BAR0 accesses answered with a TLM error response");
  add_stat(m, "snapshot_calls", calls_, "calls", "host requests run on the simulator thread");
  return m;
}

// ---- the device
// -----------------------------------------------------------------------------------

namespace {
std::vector<std::unique_ptr<DmaEngine>> make_engines(SimShared& shared) {
  std::vector<std::unique_ptr<DmaEngine>> engines;
  for (unsigned i = 0; i < shared.config.dma_engines; ++i) {
    engines.push_back(std::make_unique<DmaEngine>(("dma" + std::to_string(i)).c_str(), i, shared));
  }
  return engines;
}
}  // namespace

std::vector<DmaEngine*> DeviceModel::raw(const std::vector<std::unique_ptr<DmaEngine>>& v) {
  std::vector<DmaEngine*> out;
  for (const auto& e : v) out.push_back(e.get());
  return out;
}

DeviceModel::DeviceModel(sc_core::sc_module_name name, SimShared& shared)
    : sc_core::sc_module(name),
      shared_(shared),
      engines_(make_engines(shared)),
      grid_("pe_grid", shared),
      cp_("command_processor", shared, raw(engines_), grid_, channel_),
      regs_("bar0", cp_),
      bridge_("host_bridge", shared, channel_, regs_) {
  for (auto& e : engines_) e->connect(&cp_);
  grid_.launch_done_port.bind(cp_);
  bridge_.socket.bind(regs_.socket);
}

DeviceModel::~DeviceModel() = default;

std::string DeviceModel::stats_json() const {
  Json doc = Json::object();
  const uint64_t now = sc_core::sc_time_stamp().value();
  Json dev = Json::object();
  add_stat(dev, "simulated_time_ps", now, "ps", "simulated time reached");
  doc["device"] = dev;
  doc["command_processor"] = cp_.stats_json();
  Json bridge = bridge_.stats_json();
  const Json regs = regs_.stats_json();
  for (auto it = regs.begin(); it != regs.end(); ++it) bridge["bar0_" + it.key()] = it.value();
  doc["bridge"] = bridge;
  for (size_t i = 0; i < engines_.size(); ++i) {
    doc["dma" + std::to_string(i)] = engines_[i]->stats_json();
  }
  doc["pe_grid"] = grid_.stats_json();
  for (int i = 0; i < kNumResources; ++i) {
    const auto r = static_cast<Resource>(i);
    const ResourceStats& s = shared_.memory->stats(r);
    Json m = Json::object();
    add_stat(m, "jobs", s.jobs, "jobs", "DMA jobs that used this memory or link");
    add_stat(m, "bytes", s.bytes, "bytes",
             "payload bytes moved through it (a copy within one memory counts twice)");
    add_stat(m, "effective_bytes", s.effective_bytes, "bytes",
             "bytes charged, burst waste included");
    add_stat(m, "busy_ps", s.busy_ps, "ps", "time reserved on its bandwidth timeline");
    const double achieved = s.busy_ps == 0 ? 0.0 : double(s.bytes) * 1000.0 / double(s.busy_ps);
    add_stat(m, "achieved_GBps", achieved, "GB/s", "payload bytes per busy time (10^9 B/s)");
    const double util = now == 0 ? 0.0 : double(s.busy_ps) / double(now);
    add_stat(m, "utilization", util, "fraction", "busy time over simulated time");
    add_stat(m, "configured_GBps", double(shared_.memory->params(r).bandwidth_MBps) / 1000.0,
             "GB/s", "bandwidth from the configuration");
    doc[resource_name(r)] = m;
  }
  // Inter-chip links: each direction of each link that carried something, as "link0_send".
  for (uint32_t l = 0; l < shared_.memory->link_count(); ++l) {
    for (const auto dir : {isa::LinkDirection::kSend, isa::LinkDirection::kReceive}) {
      const LinkStats& s = shared_.memory->link_stats(l, dir);
      if (s.transfers == 0) continue;
      Json m = Json::object();
      add_stat(m, "transfers", s.transfers, "transfers", "link transfers in this direction");
      add_stat(m, "bytes", s.bytes, "bytes", "payload bytes carried");
      add_stat(m, "busy_ps", s.busy_ps, "ps", "time reserved on the direction's timeline");
      const bool send = dir == isa::LinkDirection::kSend;
      doc["link" + std::to_string(l) + (send ? "_send" : "_receive")] = m;
    }
  }
  Json trace = Json::object();
  add_stat(trace, "events", shared_.tracer->events(), "events", "trace events kept");
  add_stat(trace, "dropped_events", shared_.tracer->dropped(), "events",
           "trace events dropped after the buffer limit");
  doc["trace"] = trace;
  return doc.dump(2) + "\n";
}

}  // namespace mtia::sim::detail
