// The SystemC modules of one device. Private to sim/: SystemC never appears in public headers.
//
//   host threads --(HostInbox + HostChannel: async_request_update)--> Bridge (SC_THREAD)
//   Bridge --TLM-2.0 b_transport--> RegisterFile (BAR0, TLM target) --> firmware registers
//   CommandProcessorModule (SC_THREAD running firmware::CommandProcessor, implements Platform)
//   DmaEngine x N (SC_THREADs executing N-D jobs through the MemorySystem's timing model)
//   PeGrid (one SC_THREAD running kernel launches on the PE cores; see grid/pe_grid.h)
//
// Every SystemC object lives on the simulator thread. The only cross-thread state is the
// HostInbox (mutex), the atomic clock view and device memory contents (ordered by doorbells).
#pragma once

// The Debian libsystemc is built as C++17 and its API-version check symbol names the standard;
// sim/CMakeLists.txt defines SC_CPLUSPLUS=201703L so this C++20 code links against it.
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>
#include <systemc>
#include <tlm>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grid/pe_grid.h"
#include "initcheck.h"
#include "memcheck.h"
#include "mtia/firmware/command_processor.h"
#include "mtia/firmware/platform.h"
#include "mtia/isa/result.h"
#include "mtia/isa/wait.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/device.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/memory_system.h"
#include "trace.h"

namespace mtia::sim::detail {

using Json = nlohmann::ordered_json;

// Adds {"value", "unit", "description"} under `key`.
void add_stat(Json& module, const char* key, Json value, const char* unit, const char* description);

class Reply;

// A host thread's request to the simulator.
struct HostRequest {
  enum class Kind { kWriteRegister, kReadRegister, kCall, kStop };
  Kind kind = Kind::kCall;
  uint64_t offset = 0;
  uint64_t value = 0;
  std::function<void()> call;  // kCall: runs on the simulator thread
  // Answered when the request has been handled (reads: the value; others: 0), or with a
  // rejection if the simulator stopped first. Owned by the waiting host thread; null for
  // posted writes.
  Reply* reply = nullptr;
};

// The answer to a host request, waited for with the device's wait policy (isa/wait.h).
class Reply {
 public:
  void set_value(isa::Result<uint64_t> value);  // once, from the simulator thread
  isa::Result<uint64_t> get(isa::WaitPolicy policy);

 private:
  std::atomic<bool> ready_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<isa::Result<uint64_t>> value_;
};

class HostChannel;

// The mutex-protected queue between host threads and the simulator.
class HostInbox {
 public:
  // Queues `r` and wakes the simulator. False if the simulator is not running (then `r` was
  // not queued and nobody will answer it).
  bool push(HostRequest r);
  // Simulator thread: the oldest request, if any.
  bool pop(HostRequest& r);
  // Simulator thread: whether a request is queued, without the lock (for polling).
  bool has_request() const { return queued_.load(std::memory_order_acquire) != 0; }
  // Simulator thread, around a poll of has_request(): while polling, push() does not wake the
  // kernel, which is running the poll (that saves the host the wake-up). end_polling() says
  // whether a request came meanwhile; after false, push() wakes the kernel again.
  void begin_polling();
  bool end_polling();
  // Simulator thread: starts / stops accepting. close() answers every queued request with a
  // rejection carrying `why`.
  void open(HostChannel* channel);
  void close(const std::string& why);
  std::string closed_reason() const;

 private:
  mutable std::mutex mu_;
  std::deque<HostRequest> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), for has_request()
  bool polling_ = false;
  HostChannel* channel_ = nullptr;
  std::string closed_reason_ = "the simulator has not started";
};

// Everything the modules share with the Device (owned by Device::Impl).
struct SimShared {
  ChipConfig config;
  std::unique_ptr<MemorySystem> memory;
  InterruptHandler on_interrupt;
  std::atomic<uint64_t> now_ps{0};
  HostInbox inbox;
  std::unique_ptr<Tracer> tracer;
  // How the simulator thread waits for host requests and host threads for its answers.
  isa::WaitPolicy wait = isa::WaitPolicy::kAuto;
  // How the PE grid uses the host (threads, hand-off threshold, lazy loads).
  PeGridHostSettings grid_host;
  // The sanitizer's checks (isa/sanitize.h SanitizeCheck bits), 0 unless the driver switches
  // them on, the allocation table of memcheck and initcheck (memcheck.h), and initcheck's
  // record of the device bytes written (initcheck.h).
  uint64_t sanitize = 0;
  Memcheck memcheck;
  Initcheck initcheck;

  // Publishes the simulator's current time to host threads (simulator thread only).
  void sync_time();
};

// The primitive channel host threads wake the kernel through (async_request_update). It is
// attached as "suspending", so an idle kernel sleeps in it instead of ending the simulation.
class HostChannel : public sc_core::sc_prim_channel {
 public:
  HostChannel();
  ~HostChannel() override;
  void wake() { async_request_update(); }  // any thread
  sc_core::sc_event arrived;
  // The command processor ran out of work: the bridge looks whether the whole kernel is idle,
  // and if so polls the inbox before the kernel suspends (Bridge::run).
  sc_core::sc_event device_idle;

 private:
  void update() override;
};

class DmaEngine;

// Runs the firmware and is its Platform.
class CommandProcessorModule : public sc_core::sc_module,
                               public firmware::Platform,
                               public LaunchDoneIf {
 public:
  CommandProcessorModule(sc_core::sc_module_name name, SimShared& shared,
                         std::vector<DmaEngine*> engines, PeGrid& grid, HostChannel& channel);

  // Something the firmware may react to happened (register write, DMA completion).
  void notify_work();
  // A DMA engine finished its job (simulator thread, at the job's end time).
  void dma_done(unsigned engine, const isa::Status& outcome);
  // The PE grid finished its launch (through its launch_done_port; simulator thread, at the
  // launch's end time).
  void launch_done(const isa::Status& outcome) override;

  firmware::CommandProcessor& firmware() { return fw_; }
  Json stats_json() const;

  // firmware::Platform
  isa::Status read_device(uint64_t addr, void* dst, size_t bytes) override;
  isa::Status write_device(uint64_t addr, const void* src, size_t bytes) override;
  bool device_range_valid(uint64_t addr, uint64_t bytes) const override;
  isa::Status write_host(uint64_t addr, const void* src, size_t bytes, uint32_t context) override;
  unsigned dma_engine_count() const override;
  void dma_start(unsigned engine, const firmware::DmaJob& job) override;
  void launch_start(const isa::LaunchPacket& launch, const isa::AccessScope& scope) override;
  isa::Status set_sanitize(uint64_t checks) override;
  isa::Status memcheck_update(isa::MemcheckOp op, uint64_t base, uint64_t bytes) override;
  uint64_t now_ps() const override;
  void raise_interrupt(uint64_t queue_mask) override;
  // For the trace: nothing happens here while it is off.
  void packet_dispatched(uint32_t queue, const isa::PacketHeader& header) override;
  void packet_completed(uint32_t queue, const isa::CompletionRecord& record) override;
  bool log_enabled(firmware::LogLevel level) const override;
  void log(firmware::LogLevel level, std::string_view message) override;

 private:
  void run();

  SimShared& shared_;
  std::vector<DmaEngine*> engines_;  // before fw_: its constructor asks for the engine count
  PeGrid& grid_;
  HostChannel& channel_;
  firmware::CommandProcessor fw_;
  sc_core::sc_event work_;
  sc_core::sc_time packet_time_;
  sc_core::sc_time replay_packet_time_;  // a command buffer's packet (cp_replay_packet_ns)
  // The queue of the packet being dispatched (as the firmware reported it), which the DMA job
  // or launch it starts works for; kept only while tracing.
  uint32_t dispatch_queue_ = Tracer::kNoQueue;
  uint64_t busy_steps_ = 0;
  uint64_t busy_ps_ = 0;
  uint64_t interrupts_ = 0;
  uint64_t handler_errors_ = 0;
  uint64_t records_traced_ = 0;
};

// One DMA engine: takes a job from the firmware, validates and times it through the
// MemorySystem, waits once until its end, moves the data and reports back.
class DmaEngine : public sc_core::sc_module {
 public:
  DmaEngine(sc_core::sc_module_name name, unsigned index, SimShared& shared);
  void connect(CommandProcessorModule* cp) { cp_ = cp; }
  // Called from the firmware's dma_start; the job starts in a later delta cycle, so the
  // completion never re-enters the firmware from inside dma_start. `queue` is the queue of
  // the packet it runs, for the trace (Tracer::kNoQueue when unknown).
  void submit(const firmware::DmaJob& job, uint32_t queue);
  bool busy() const { return job_.has_value(); }
  Json stats_json() const;

 private:
  void run();

  unsigned index_;
  SimShared& shared_;
  CommandProcessorModule* cp_ = nullptr;
  std::optional<firmware::DmaJob> job_;
  uint32_t job_queue_ = Tracer::kNoQueue;
  sc_core::sc_event start_;
  uint64_t jobs_ = 0;
  uint64_t bytes_ = 0;
  uint64_t effective_bytes_ = 0;
  uint64_t busy_ps_ = 0;
  uint64_t faults_ = 0;
};

// BAR0 as a TLM-2.0 target: forwards 8-byte accesses to the firmware's registers and answers
// TLM_ADDRESS_ERROR_RESPONSE when the firmware rejects one.
class RegisterFile : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<RegisterFile> socket;

  RegisterFile(sc_core::sc_module_name name, CommandProcessorModule& cp);
  // Why the most recent access was rejected (valid right after an error response).
  const isa::Failure& last_rejection() const { return last_rejection_; }
  Json stats_json() const;

 private:
  void b_transport(tlm::tlm_generic_payload& payload, sc_core::sc_time& delay);

  CommandProcessorModule& cp_;
  isa::Failure last_rejection_;
  uint64_t reads_ = 0;
  uint64_t writes_ = 0;
  uint64_t rejected_ = 0;
};

// The host side of the device: takes host requests off the inbox and performs them, register
// accesses as TLM transactions into the RegisterFile.
class Bridge : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Bridge> socket;

  Bridge(sc_core::sc_module_name name, SimShared& shared, HostChannel& channel, RegisterFile& regs);
  Json stats_json() const;

 private:
  void run();
  void handle(HostRequest& request);
  // With nothing else pending in the kernel, polls the inbox per the wait policy; true when a
  // request came (then the kernel never suspended).
  bool poll_inbox();

  SimShared& shared_;
  HostChannel& channel_;
  RegisterFile& regs_;
  // A request or the device going idle. Built once and owned here: the temporary list that
  // `a | b` allocates is freed only when the wait returns, and the last wait never does.
  sc_core::sc_event_or_list arrived_or_idle_;
  bool stopping_ = false;
  uint64_t reads_ = 0;
  uint64_t writes_ = 0;
  uint64_t rejected_ = 0;
  uint64_t calls_ = 0;
};

// The whole device.
class DeviceModel : public sc_core::sc_module {
 public:
  DeviceModel(sc_core::sc_module_name name, SimShared& shared);
  ~DeviceModel() override;

  HostChannel& channel() { return channel_; }
  // Statistics of every module (simulator thread).
  std::string stats_json() const;

 private:
  static std::vector<DmaEngine*> raw(const std::vector<std::unique_ptr<DmaEngine>>& v);

  SimShared& shared_;
  HostChannel channel_;
  std::vector<std::unique_ptr<DmaEngine>> engines_;
  PeGrid grid_;
  CommandProcessorModule cp_;
  RegisterFile regs_;
  Bridge bridge_;
};

}  // namespace mtia::sim::detail
