// The command processor firmware: serves the hardware queues described in isa/registers.h.
//
// It is event-driven and single-threaded: the platform delivers register accesses and DMA
// completions, and calls step() to let the firmware make progress. Each step dispatches at
// most one packet, taking queues in round-robin order so that no queue starves another.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/firmware/platform.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/registers.h"
#include "mtia/isa/result.h"

namespace mtia::firmware {

// Identity and properties the firmware reports through its read-only registers.
struct FirmwareConfig {
  uint32_t num_queues = 8;         // hardware queues served, 1..isa::kMaxQueues
  uint32_t generation = 2;         // chip generation reported in reg::kDeviceId
  uint64_t dram_bytes = 0;         // LPDDR capacity, bytes
  uint64_t sram_bytes = 0;         // on-chip SRAM capacity, bytes
  uint64_t local_store_bytes = 0;  // per-PE local store, bytes
  uint32_t pe_rows = 8;
  uint32_t pe_cols = 8;
  uint64_t clock_hz = 0;    // PE clock, Hz
  std::string preset_name;  // at most 16 characters are reported
  uint32_t link_count = 1;  // inter-chip links a link transfer may name, 0..isa::kMaxLinks
};

// Counters the firmware keeps about its own work (units in the names).
struct FirmwareStats {
  uint64_t packets_completed = 0;
  uint64_t packets_failed = 0;
  uint64_t interrupts_raised = 0;
  uint64_t dma_jobs_started = 0;
  uint64_t launches_started = 0;
  uint64_t buffer_packets_dispatched = 0;  // packets run from command buffers (ExecBuffer)
};

class CommandProcessor {
 public:
  CommandProcessor(Platform& platform, FirmwareConfig config);

  // BAR0 accesses from the host. Offsets and semantics are those of isa/registers.h.
  isa::Result<uint64_t> read_register(uint64_t offset) const;
  isa::Result<bool> write_register(uint64_t offset, uint64_t value);

  // Dispatches at most one packet (or finishes one non-DMA packet). Returns true if it did
  // anything, false if nothing can move until a register write or a DMA completion.
  bool step();
  // Whether the last step() that did something dispatched a packet from a command buffer
  // (an ExecBuffer packet's), which the platform charges at its cheaper replay cost.
  bool last_step_replayed() const { return last_step_replayed_; }

  // The platform reports that the job started on `engine` has finished.
  void on_dma_done(unsigned engine, const isa::Status& outcome);
  // The platform reports that the launch started with Platform::launch_start has finished.
  void on_launch_done(const isa::Status& outcome);

  const FirmwareStats& stats() const { return stats_; }
  const FirmwareConfig& config() const { return config_; }

 private:
  struct Queue {
    uint64_t base = 0;          // ring device address
    uint64_t size = 0;          // slots
    uint64_t completion = 0;    // completion ring device address
    uint64_t error_record = 0;  // device address of the error record, 0 = none
    isa::AccessScope scope{};   // what the queue's packets may reach (kQueueContext, ...)
    uint64_t head = 0;          // packets fetched
    uint64_t tail = 0;          // packets the driver has written
    uint64_t completed = 0;     // packets completed
    isa::QueueState state = isa::QueueState::kDisabled;
    // The packet being executed, if any (a DMA in flight or a wait not yet satisfied).
    bool busy = false;
    std::optional<isa::WaitPacket> waiting;
    isa::PacketHeader current{};
    uint64_t current_start_ps = 0;
    // The command buffer of the ExecBuffer packet being executed: its packets run one at a
    // time instead of the ring's, and `current` stays the ExecBuffer packet's header (its
    // completion record is written after the last of them).
    struct Buffer {
      uint64_t addr = 0;
      uint32_t count = 0;
      uint32_t next = 0;        // packets dispatched so far
      uint8_t opcode = 0;       // of the buffer packet running now
      uint64_t fence_base = 0;  // added to fence-relative Signal and Wait values
    };
    std::optional<Buffer> buffer;
  };

  bool try_dispatch(uint32_t q);
  // Dispatches the next packet of the queue's command buffer; false if it must wait for a
  // DMA engine or the PE grid.
  bool dispatch_from_buffer(uint32_t q);
  // Finishes the queue's current packet. A failure's code and details go into its completion
  // record; its reason (and a kernel's non-zero exit status) to the log and to the queue's
  // error record, if it has one.
  void complete(uint32_t q, const isa::Status& outcome);
  // Why the queue's base/size/completion/error record cannot be served, or "" if they can.
  std::string queue_config_problem(const Queue& queue) const;
  // Re-checks a held Wait packet; true if the queue moved (released or faulted).
  bool poll_wait(uint32_t q);
  void reset_queue(uint32_t q);
  isa::Result<bool> write_queue_register(uint32_t q, uint64_t field, uint64_t value);
  void execute(uint32_t q, const isa::Packet& packet);

  Platform& platform_;
  FirmwareConfig config_;
  std::array<Queue, isa::kMaxQueues> queues_{};
  uint64_t int_status_ = 0;
  uint64_t int_enable_ = 0;
  uint64_t sanitize_ = 0;  // reg::kSanitize
  uint64_t memcheck_base_ = 0, memcheck_bytes_ = 0;
  uint32_t next_queue_ = 0;  // round-robin cursor
  bool last_step_replayed_ = false;
  // Which queue each DMA engine is working for, if any.
  std::vector<std::optional<uint32_t>> engine_owner_;
  // Whether each engine is running a job. An engine can be busy without an owner when its
  // queue was reset mid-transfer: the job's completion must then be dropped.
  std::vector<bool> engine_busy_;
  // The PE grid runs one launch at a time, device-wide; a queue whose next packet is a launch
  // waits (its packet stays in the ring) while another is running. As with the engines, the
  // grid can be busy without an owner when the owning queue was reset mid-launch.
  bool launch_busy_ = false;
  std::optional<uint32_t> launch_owner_;
  FirmwareStats stats_;
};

}  // namespace mtia::firmware
