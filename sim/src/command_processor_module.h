// The command processor as a SystemC module: runs the firmware (firmware::CommandProcessor)
// on an SC_THREAD and is its Platform, starting DMA jobs and launches. Private to sim/.
#pragma once

#include <systemc>

#include <cstdint>
#include <string_view>
#include <vector>

#include "dma_engine.h"
#include "grid/pe_grid.h"
#include "host_channel.h"
#include "mtia/firmware/command_processor.h"
#include "mtia/firmware/platform.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

// Runs the firmware and is its Platform.
class CommandProcessorModule : public sc_core::sc_module,
                               public firmware::Platform,
                               public LaunchDoneIf,
                               public DmaDoneIf {
 public:
  CommandProcessorModule(sc_core::sc_module_name name, SimShared& shared,
                         std::vector<DmaEngine*> engines, PeGrid& grid, HostChannel& channel);

  // Something the firmware may react to happened (register write, DMA completion).
  void notify_work();
  // A DMA engine finished its job (through its done_port; simulator thread, at the job's end
  // time).
  void dma_done(unsigned engine, const isa::Status& outcome) override;
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

}  // namespace mtia::sim::detail
