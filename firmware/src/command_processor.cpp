// The command processor: see command_processor.h and isa/registers.h for the protocol.
#include "mtia/firmware/command_processor.h"

#include <fmt/format.h>

#include <bit>
#include <cassert>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <utility>

#include "mtia/isa/address_map.h"
#include "mtia/isa/error_record.h"

namespace mtia::firmware {
namespace {

using isa::ErrorCode;
using isa::Failure;
using isa::QueueState;

// Ring limits. Slots are 256 bytes, so a ring is at most 16 MiB.
constexpr uint64_t kMinRingSlots = 2;
constexpr uint64_t kMaxRingSlots = 65536;
// Packet slots are 256-byte aligned so a slot never straddles a 256-byte line; completion
// records are 64 bytes and aligned to their size.
constexpr uint64_t kRingAlign = isa::kPacketSlotBytes;
constexpr uint64_t kCompletionAlign = isa::kCompletionRecordBytes;
constexpr size_t kPresetNameBytes = 16;

// Logs through the platform, formatting only when the platform wants the level.
template <typename... Args>
void log_message(Platform& platform, LogLevel level, fmt::format_string<Args...> format,
                 Args&&... args) {
  if (platform.log_enabled(level)) {
    platform.log(level, fmt::format(format, std::forward<Args>(args)...));
  }
}

Failure bad_register(uint64_t offset, std::string_view what) {
  return isa::reject(ErrorCode::kBadRegister,
                     fmt::format("BAR0 offset 0x{:04x}: {}", offset, what));
}

// `bytes` starting at `addr`, as a device-memory range that must be fully backed.
// Device memory has holes (e.g. between PE local-store windows): the whole range must be backed.
bool range_backed(const Platform& platform, uint64_t addr, uint64_t bytes) {
  return platform.device_range_valid(addr, bytes);
}

// A device address outside the queue's window: to the queue it is not device memory at all.
Failure outside_window(uint64_t addr, uint64_t bytes) {
  return isa::reject(ErrorCode::kDeviceAddressFault, {}, addr, bytes);
}

}  // namespace

CommandProcessor::CommandProcessor(Platform& platform, FirmwareConfig config)
    : platform_(platform), config_(std::move(config)) {
  if (config_.num_queues < 1 || config_.num_queues > isa::kMaxQueues) {
    throw std::invalid_argument(
        fmt::format("firmware: num_queues = {} is out of range; it must be between 1 and {}",
                    config_.num_queues, isa::kMaxQueues));
  }
  const unsigned engines = platform_.dma_engine_count();
  if (engines == 0) {
    throw std::invalid_argument(
        "firmware: the platform reports 0 DMA engines; DMA packets could never run. "
        "Configure at least one engine");
  }
  engine_owner_.assign(engines, std::nullopt);
  engine_busy_.assign(engines, false);
}

// --- registers ------------------------------------------------------------------------------

isa::Result<uint64_t> CommandProcessor::read_register(uint64_t offset) const {
  namespace reg = isa::reg;
  if (offset % 8 != 0) return bad_register(offset, "registers are 8 bytes wide and 8-byte aligned");
  switch (offset) {
    case reg::kDeviceId:
      return isa::kDeviceIdMagic | config_.generation;
    case reg::kIsaVersion:
      return uint64_t{isa::kPacketVersion};
    case reg::kFirmwareVer:
      return isa::kFirmwareVersion;
    case reg::kNumQueues:
      return uint64_t{config_.num_queues};
    case reg::kDramBytes:
      return config_.dram_bytes;
    case reg::kSramBytes:
      return config_.sram_bytes;
    case reg::kLocalStoreBytes:
      return config_.local_store_bytes;
    case reg::kPeGrid:
      return uint64_t{config_.pe_rows} << 8 | config_.pe_cols;
    case reg::kDramWindowBase:
      return isa::kDramBase;  // the driver of this device owns all of its DRAM
    case reg::kDramWindowBytes:
      return config_.dram_bytes;
    case reg::kClockHz:
      return config_.clock_hz;
    case reg::kNumDmaEngines:
      return uint64_t{platform_.dma_engine_count()};
    case reg::kPresetName0:
    case reg::kPresetName1: {
      // Bytes 0..7 of the name in kPresetName0, 8..15 in kPresetName1, little-endian.
      const size_t first = offset == reg::kPresetName0 ? 0 : 8;
      uint64_t word = 0;
      for (size_t i = 0; i < 8; ++i) {
        const size_t pos = first + i;
        if (pos < config_.preset_name.size() && pos < kPresetNameBytes) {
          word |= uint64_t{static_cast<uint8_t>(config_.preset_name[pos])} << (8 * i);
        }
      }
      return word;
    }
    case reg::kSanitize:
      return sanitize_;
    case reg::kMemcheckBase:
      return memcheck_base_;
    case reg::kMemcheckBytes:
      return memcheck_bytes_;
    case reg::kMemcheckOp:
      return uint64_t{0};  // write-only command register
    case reg::kIntStatus:
      return int_status_;
    case reg::kIntEnable:
      return int_enable_;
    default:
      break;
  }
  if (offset >= reg::kQueueBlock && offset < isa::kBar0Bytes) {
    const uint64_t q = (offset - reg::kQueueBlock) / reg::kQueueStride;
    const uint64_t field = (offset - reg::kQueueBlock) % reg::kQueueStride;
    if (q < config_.num_queues) {
      const Queue& queue = queues_[q];
      switch (field) {
        case reg::kQueueBase:
          return queue.base;
        case reg::kQueueSize:
          return queue.size;
        case reg::kQueueCompletion:
          return queue.completion;
        case reg::kQueueHead:
          return queue.head;
        case reg::kQueueTail:
          return queue.tail;
        case reg::kQueueControl:
          return uint64_t{0};  // write-only command register: reads as zero
        case reg::kQueueState:
          return static_cast<uint64_t>(queue.state);
        case reg::kQueueCompleted:
          return queue.completed;
        case reg::kQueueErrorRecord:
          return queue.error_record;
        case reg::kQueueContext:
          return uint64_t{queue.scope.context};
        case reg::kQueueWindowBase:
          return queue.scope.window_base;
        case reg::kQueueWindowBytes:
          return queue.scope.window_bytes;
        default:
          break;
      }
    }
  }
  return bad_register(offset, "no register at this offset");
}

isa::Result<bool> CommandProcessor::write_register(uint64_t offset, uint64_t value) {
  namespace reg = isa::reg;
  if (offset % 8 != 0) return bad_register(offset, "registers are 8 bytes wide and 8-byte aligned");
  if (offset == reg::kIntStatus) {
    int_status_ &= ~value;  // write 1 to clear
    return true;
  }
  if (offset == reg::kIntEnable) {
    // Only queues that exist have an interrupt; other bits read back as zero.
    const uint64_t queue_mask =
        config_.num_queues >= 64 ? ~uint64_t{0} : (uint64_t{1} << config_.num_queues) - 1;
    int_enable_ = value & queue_mask;
    return true;
  }
  if (offset == reg::kSanitize) {
    if ((value & ~isa::kSanitizeChecksMask) != 0) {
      return bad_register(offset, fmt::format("sanitizer checks 0x{:x} are not implemented "
                                              "(this firmware knows 0x{:x})",
                                              value & ~isa::kSanitizeChecksMask,
                                              uint64_t{isa::kSanitizeChecksMask}));
    }
    if (isa::Status set = platform_.set_sanitize(value); !set) {
      return bad_register(offset, set.error().reason);
    }
    sanitize_ = value;
    return true;
  }
  if (offset == reg::kMemcheckBase || offset == reg::kMemcheckBytes) {
    (offset == reg::kMemcheckBase ? memcheck_base_ : memcheck_bytes_) = value;
    return true;
  }
  if (offset == reg::kMemcheckOp) {
    if ((sanitize_ & isa::kSanitizeAllocationTable) == 0) {
      return bad_register(offset, "memcheck and initcheck are off (reg::kSanitize)");
    }
    const auto op = static_cast<isa::MemcheckOp>(value);
    if (op != isa::MemcheckOp::kLive && op != isa::MemcheckOp::kFreed &&
        op != isa::MemcheckOp::kWritten) {
      return bad_register(offset, fmt::format("{} is not a memcheck operation (1: live, 2: "
                                              "freed, 3: written by the host)",
                                              value));
    }
    if (isa::Status done = platform_.memcheck_update(op, memcheck_base_, memcheck_bytes_); !done) {
      return bad_register(offset, done.error().reason);
    }
    return true;
  }
  if (offset >= reg::kQueueBlock && offset < isa::kBar0Bytes) {
    const uint64_t q = (offset - reg::kQueueBlock) / reg::kQueueStride;
    const uint64_t field = (offset - reg::kQueueBlock) % reg::kQueueStride;
    if (q < config_.num_queues) return write_queue_register(static_cast<uint32_t>(q), field, value);
    return bad_register(offset, "no register at this offset");
  }
  // Every other mapped register below the queue blocks is read-only.
  if (read_register(offset).ok()) return bad_register(offset, "register is read-only");
  return bad_register(offset, "no register at this offset");
}

isa::Result<bool> CommandProcessor::write_queue_register(uint32_t q, uint64_t field,
                                                         uint64_t value) {
  namespace reg = isa::reg;
  Queue& queue = queues_[q];
  const uint64_t offset = reg::queue_reg(q, field);
  switch (field) {
    case reg::kQueueBase:
    case reg::kQueueSize:
    case reg::kQueueCompletion:
    case reg::kQueueErrorRecord:
    case reg::kQueueContext:
    case reg::kQueueWindowBase:
    case reg::kQueueWindowBytes: {
      if (queue.state != QueueState::kDisabled) {
        return isa::reject(
            ErrorCode::kBadQueueConfig,
            fmt::format("queue {}: base, size, completion, error record, context and window can "
                        "only be written while the queue is disabled (BAR0 offset 0x{:04x}); "
                        "reset the queue first",
                        q, offset));
      }
      if (field == reg::kQueueContext && value > UINT32_MAX) {
        return isa::reject(ErrorCode::kBadQueueConfig,
                           fmt::format("queue {}: context {} is not a 32-bit number", q, value));
      }
      if (field == reg::kQueueContext) queue.scope.context = static_cast<uint32_t>(value);
      if (field == reg::kQueueWindowBase) queue.scope.window_base = value;
      if (field == reg::kQueueWindowBytes) queue.scope.window_bytes = value;
      // Checked as a whole on kQueueEnable: they are written one at a time.
      if (field == reg::kQueueBase) queue.base = value;
      if (field == reg::kQueueSize) queue.size = value;
      if (field == reg::kQueueCompletion) queue.completion = value;
      if (field == reg::kQueueErrorRecord) queue.error_record = value;
      return true;
    }
    case reg::kQueueTail: {
      if (value < queue.tail) {
        return isa::reject(ErrorCode::kBadQueueConfig,
                           fmt::format("queue {}: doorbell {} is below the current tail {}; the "
                                       "tail is free-running and only grows",
                                       q, value, queue.tail));
      }
      if (value - queue.completed > queue.size) {
        return isa::reject(
            ErrorCode::kBadQueueConfig,
            fmt::format("queue {}: doorbell {} would leave {} packets outstanding ({} completed) "
                        "but the ring holds only {}; wait for completions before writing more",
                        q, value, value - queue.completed, queue.completed, queue.size));
      }
      queue.tail = value;
      return true;
    }
    case reg::kQueueControl: {
      if (value & ~uint64_t{isa::kQueueEnable | isa::kQueueReset}) {
        return isa::reject(ErrorCode::kReservedNotZero,
                           fmt::format("queue {}: control value 0x{:x} sets unknown bits; only "
                                       "kQueueEnable (1) and kQueueReset (2) exist",
                                       q, value));
      }
      if (value & isa::kQueueReset) reset_queue(q);
      if (value & isa::kQueueEnable) {
        if (queue.state == QueueState::kRunning) return true;
        if (queue.state == QueueState::kError) {
          return isa::reject(ErrorCode::kBadQueueConfig,
                             fmt::format("queue {}: cannot enable a queue in the error state; "
                                         "reset it first (kQueueReset)",
                                         q));
        }
        if (std::string problem = queue_config_problem(queue); !problem.empty()) {
          return isa::reject(ErrorCode::kBadQueueConfig,
                             fmt::format("queue {}: cannot enable: {}", q, problem));
        }
        queue.state = QueueState::kRunning;
        log_message(platform_, LogLevel::kDebug,
                    "queue {} enabled: ring 0x{:x} x {} slots, completions at 0x{:x}", q,
                    queue.base, queue.size, queue.completion);
      }
      return true;
    }
    case reg::kQueueHead:
    case reg::kQueueState:
    case reg::kQueueCompleted:
      return bad_register(offset, "register is read-only");
    default:
      return bad_register(offset, "no register at this offset");
  }
}

std::string CommandProcessor::queue_config_problem(const Queue& queue) const {
  if (queue.size < kMinRingSlots || queue.size > kMaxRingSlots ||
      !std::has_single_bit(queue.size)) {
    return fmt::format("size {} is not a power of two between {} and {} slots", queue.size,
                       kMinRingSlots, kMaxRingSlots);
  }
  if (queue.base % kRingAlign != 0) {
    return fmt::format("ring base 0x{:x} is not {}-byte aligned", queue.base, kRingAlign);
  }
  if (queue.completion % kCompletionAlign != 0) {
    return fmt::format("completion ring 0x{:x} is not {}-byte aligned", queue.completion,
                       kCompletionAlign);
  }
  const uint64_t ring_bytes = queue.size * isa::kPacketSlotBytes;
  const uint64_t completion_bytes = queue.size * isa::kCompletionRecordBytes;
  if (queue.base > UINT64_MAX - ring_bytes || queue.completion > UINT64_MAX - completion_bytes) {
    return "ring extends past the end of the address space";
  }
  if (!range_backed(platform_, queue.base, ring_bytes)) {
    return fmt::format("ring [0x{:x}, 0x{:x}) is not inside device memory", queue.base,
                       queue.base + ring_bytes);
  }
  if (!range_backed(platform_, queue.completion, completion_bytes)) {
    return fmt::format("completion ring [0x{:x}, 0x{:x}) is not inside device memory",
                       queue.completion, queue.completion + completion_bytes);
  }
  const isa::AccessScope& scope = queue.scope;
  if (scope.restricted() && scope.window_base > UINT64_MAX - scope.window_bytes) {
    return "its window extends past the end of the address space";
  }
  if (!scope.covers(queue.base, ring_bytes) || !scope.covers(queue.completion, completion_bytes) ||
      (queue.error_record != 0 && !scope.covers(queue.error_record, isa::kErrorRecordBytes))) {
    return fmt::format(
        "its rings and error record must lie inside its window [0x{:x}, 0x{:x}) of device memory",
        scope.window_base, scope.window_base + scope.window_bytes);
  }
  // Completion records would overwrite packets not yet fetched.
  if (queue.base < queue.completion + completion_bytes &&
      queue.completion < queue.base + ring_bytes) {
    return "the packet ring and the completion ring overlap";
  }
  if (queue.error_record != 0) {
    const uint64_t at = queue.error_record, bytes = isa::kErrorRecordBytes;
    if (at % isa::kErrorRecordAlign != 0) {
      return fmt::format("error record 0x{:x} is not {}-byte aligned", at, isa::kErrorRecordAlign);
    }
    if (at > UINT64_MAX - bytes || !range_backed(platform_, at, bytes)) {
      return fmt::format("error record [0x{:x}, +{}) is not inside device memory", at, bytes);
    }
    if ((at < queue.base + ring_bytes && queue.base < at + bytes) ||
        (at < queue.completion + completion_bytes && queue.completion < at + bytes)) {
      return fmt::format("error record [0x{:x}, +{}) overlaps the packet or completion ring", at,
                         bytes);
    }
  }
  return {};
}

void CommandProcessor::reset_queue(uint32_t q) {
  Queue& queue = queues_[q];
  // A DMA still running for this queue keeps its engine busy, but its completion no longer
  // belongs to anyone (see on_dma_done).
  for (auto& owner : engine_owner_) {
    if (owner == q) owner.reset();
  }
  if (launch_owner_ == q) launch_owner_.reset();
  queue.head = queue.tail = queue.completed = 0;
  queue.state = QueueState::kDisabled;
  queue.busy = false;
  queue.waiting.reset();
  queue.current = {};
  queue.current_start_ps = 0;
  queue.buffer.reset();
  int_status_ &= ~(uint64_t{1} << q);  // the records it announced belong to the old ring state
}

// --- execution ------------------------------------------------------------------------------

bool CommandProcessor::step() {
  const bool previous = last_step_replayed_;
  last_step_replayed_ = false;
  const uint32_t n = config_.num_queues;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t q = (next_queue_ + i) % n;
    if (try_dispatch(q)) {
      next_queue_ = (q + 1) % n;  // the next step starts after the queue just served
      return true;
    }
  }
  last_step_replayed_ = previous;  // nothing moved: the last step that did still answers
  return false;
}

bool CommandProcessor::try_dispatch(uint32_t q) {
  Queue& queue = queues_[q];
  if (queue.state != QueueState::kRunning) return false;
  if (queue.busy) return queue.waiting ? poll_wait(q) : false;  // else a DMA is in flight
  if (queue.buffer) return dispatch_from_buffer(q);
  if (queue.head >= queue.tail) return false;

  const uint64_t slot_addr = queue.base + (queue.head % queue.size) * isa::kPacketSlotBytes;
  uint8_t slot[isa::kPacketSlotBytes];
  if (!platform_.read_device(slot_addr, slot, sizeof(slot))) {
    // Only possible if device memory changed under an enabled queue; still an error record.
    queue.current = {};
    queue.current_start_ps = platform_.now_ps();
    queue.busy = true;
    ++queue.head;
    platform_.packet_dispatched(q, queue.current);
    complete(q, isa::reject(ErrorCode::kDeviceAddressFault, {}, slot_addr, isa::kPacketSlotBytes));
    return true;
  }

  isa::Result<isa::Packet> decoded = isa::decode_packet(slot, sizeof(slot));
  if (!decoded.ok()) {
    // Echo what the header claims so the driver can match the record to its submission.
    isa::PacketHeader raw{};
    std::memcpy(&raw, slot, sizeof(raw));
    queue.current = raw;
    queue.current_start_ps = platform_.now_ps();
    queue.busy = true;
    ++queue.head;
    platform_.packet_dispatched(q, queue.current);
    complete(q, decoded.error());
    return true;
  }

  const isa::Packet& packet = decoded.value();
  const isa::Opcode op = isa::opcode_of(packet);
  if (const isa::PacketHeader h = std::visit([](const auto& p) { return p.header; }, packet);
      h.flags & isa::kPacketFenceRelative) {
    // Relative to what? Only an ExecBuffer packet gives a base.
    queue.current = h;
    queue.current_start_ps = platform_.now_ps();
    queue.busy = true;
    ++queue.head;
    platform_.packet_dispatched(q, queue.current);
    complete(q, isa::reject(ErrorCode::kReservedNotZero,
                            "a fence-relative packet runs only inside a command buffer"));
    return true;
  }
  if (op == isa::Opcode::kDmaCopy || op == isa::Opcode::kFill || op == isa::Opcode::kLinkTransfer) {
    bool engine_idle = false;
    for (bool busy : engine_busy_) engine_idle = engine_idle || !busy;
    // Leave the packet in the ring; it is fetched again once an engine frees up.
    if (!engine_idle) return false;
  }
  // Likewise a launch waits in the ring while the PE grid runs another queue's launch.
  if (op == isa::Opcode::kLaunch && launch_busy_) return false;

  queue.current = std::visit([](const auto& p) { return p.header; }, packet);
  queue.current_start_ps = platform_.now_ps();
  queue.busy = true;
  ++queue.head;
  platform_.packet_dispatched(q, queue.current);
  execute(q, packet);
  return true;
}

bool CommandProcessor::dispatch_from_buffer(uint32_t q) {
  Queue& queue = queues_[q];
  Queue::Buffer& buffer = *queue.buffer;
  const uint32_t position = buffer.next;
  const uint64_t slot_addr = buffer.addr + uint64_t{position} * isa::kPacketSlotBytes;
  uint8_t slot[isa::kPacketSlotBytes];
  const auto fail = [&](isa::Failure why) {
    buffer.opcode = slot[0];
    ++buffer.next;
    queue.busy = true;
    complete(q, std::move(why));
    return true;
  };
  if (!platform_.read_device(slot_addr, slot, sizeof(slot))) {
    slot[0] = 0;
    return fail(isa::reject(ErrorCode::kDeviceAddressFault,
                            "the command buffer's slot cannot be read", slot_addr,
                            isa::kPacketSlotBytes));
  }
  isa::Result<isa::Packet> decoded = isa::decode_packet(slot, sizeof(slot));
  if (!decoded.ok()) return fail(decoded.error());
  isa::Packet& packet = decoded.value();
  const isa::Opcode op = isa::opcode_of(packet);
  if (op == isa::Opcode::kExecBuffer) {
    return fail(isa::reject(ErrorCode::kBadOpcode, "command buffers do not nest"));
  }
  // A graph's fence values: the buffer's base plus the packet's own (decode allows the flag on
  // Signal and Wait packets only).
  bool overflow = false;
  std::visit(
      [&](auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, isa::SignalPacket> || std::is_same_v<P, isa::WaitPacket>) {
          if (p.header.flags & isa::kPacketFenceRelative) {
            overflow = __builtin_add_overflow(p.value, buffer.fence_base, &p.value);
          }
        }
      },
      packet);
  if (overflow) {
    return fail(isa::reject(ErrorCode::kExtentOverflow,
                            "the fence-relative value plus the buffer's fence base overflows "
                            "64 bits",
                            buffer.fence_base));
  }
  // As from the ring: wait for a free DMA engine, or for the PE grid.
  if (op == isa::Opcode::kDmaCopy || op == isa::Opcode::kFill || op == isa::Opcode::kLinkTransfer) {
    bool engine_idle = false;
    for (bool busy : engine_busy_) engine_idle = engine_idle || !busy;
    if (!engine_idle) return false;
  }
  if (op == isa::Opcode::kLaunch && launch_busy_) return false;

  buffer.opcode = static_cast<uint8_t>(op);
  ++buffer.next;
  queue.busy = true;
  last_step_replayed_ = true;
  ++stats_.buffer_packets_dispatched;
  platform_.packet_dispatched(q, std::visit([](const auto& p) { return p.header; }, packet));
  execute(q, packet);
  return true;
}

void CommandProcessor::execute(uint32_t q, const isa::Packet& packet) {
  Queue& queue = queues_[q];
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, isa::NopPacket>) {
          complete(q, isa::Status{});
        } else if constexpr (std::is_same_v<P, isa::DmaCopyPacket> ||
                             std::is_same_v<P, isa::FillPacket> ||
                             std::is_same_v<P, isa::LinkTransferPacket>) {
          DmaJob job;
          if constexpr (std::is_same_v<P, isa::DmaCopyPacket>) {
            job.kind = DmaJob::Kind::kCopy;
            job.copy = p;
          } else if constexpr (std::is_same_v<P, isa::FillPacket>) {
            job.kind = DmaJob::Kind::kFill;
            job.fill = p;
          } else {
            if (p.link >= config_.link_count) {
              complete(q, isa::reject(ErrorCode::kBadLink,
                                      fmt::format("link {} does not exist: this chip has {} "
                                                  "link(s) (preset link_count)",
                                                  p.link, config_.link_count),
                                      p.link, config_.link_count));
              return;
            }
            job.kind = DmaJob::Kind::kLink;
            job.link = p;
          }
          job.scope = queue.scope;
          unsigned engine = 0;
          while (engine_busy_[engine]) ++engine;  // try_dispatch checked one is idle
          assert(engine < engine_busy_.size());
          engine_busy_[engine] = true;
          engine_owner_[engine] = q;
          ++stats_.dma_jobs_started;
          platform_.dma_start(engine, job);
        } else if constexpr (std::is_same_v<P, isa::SignalPacket>) {
          const bool host = p.space == static_cast<uint8_t>(isa::AddressSpace::kHost);
          if (!host && !queue.scope.covers(p.addr, sizeof(p.value))) {
            complete(q, outside_window(p.addr, sizeof(p.value)));
            return;
          }
          const isa::Status written =
              host ? platform_.write_host(p.addr, &p.value, sizeof(p.value), queue.scope.context)
                   : platform_.write_device(p.addr, &p.value, sizeof(p.value));
          // The driver words an address fault from its numbers: the record carries no text.
          complete(q, written ? written
                              : isa::reject(written.error().code, {}, written.error().arg0,
                                            written.error().arg1));
        } else if constexpr (std::is_same_v<P, isa::WaitPacket>) {
          if (!queue.scope.covers(p.addr, sizeof(uint64_t))) {
            complete(q, outside_window(p.addr, sizeof(uint64_t)));
            return;
          }
          queue.waiting = p;
          poll_wait(q);  // an already-satisfied wait completes at once
        } else if constexpr (std::is_same_v<P, isa::LaunchPacket>) {
          if (p.grid_rows > config_.pe_rows || p.grid_cols > config_.pe_cols) {
            complete(q, isa::reject(
                            ErrorCode::kBadDims,
                            fmt::format("launch grid {}x{} does not fit the chip's {}x{} PEs",
                                        p.grid_rows, p.grid_cols, config_.pe_rows, config_.pe_cols),
                            p.grid_rows, p.grid_cols));
            return;
          }
          assert(!launch_busy_);  // try_dispatch held the packet back otherwise
          launch_busy_ = true;
          launch_owner_ = q;
          ++stats_.launches_started;
          platform_.launch_start(p, queue.scope);
        } else if constexpr (std::is_same_v<P, isa::ExecBufferPacket>) {
          const uint64_t bytes = uint64_t{p.packet_count} * isa::kPacketSlotBytes;
          if (!queue.scope.covers(p.buffer_addr, bytes)) {
            complete(q, outside_window(p.buffer_addr, bytes));
            return;
          }
          if (!range_backed(platform_, p.buffer_addr, bytes)) {
            complete(
                q, isa::reject(ErrorCode::kDeviceAddressFault,
                               "the command buffer is not in device memory", p.buffer_addr, bytes));
            return;
          }
          // Its packets run from the next steps on; this packet completes after the last.
          queue.buffer = Queue::Buffer{p.buffer_addr, p.packet_count, 0, 0, p.fence_base};
          queue.busy = false;
        } else {
          static_assert(!sizeof(P), "every packet type must be handled");
        }
      },
      packet);
}

bool CommandProcessor::poll_wait(uint32_t q) {
  Queue& queue = queues_[q];
  assert(queue.waiting);
  const isa::WaitPacket& wait = *queue.waiting;
  uint64_t fence = 0;
  if (!platform_.read_device(wait.addr, &fence, sizeof(fence))) {
    const uint64_t addr = wait.addr;
    queue.waiting.reset();
    complete(q, isa::reject(ErrorCode::kDeviceAddressFault, {}, addr, sizeof(fence)));
    return true;
  }
  bool released = false;
  switch (static_cast<isa::WaitCondition>(wait.condition)) {
    case isa::WaitCondition::kGreaterEqual:
      released = fence >= wait.value;
      break;
    case isa::WaitCondition::kEqual:
      released = fence == wait.value;
      break;
    default:
      assert(false && "decode_packet accepted an unknown wait condition");
      break;
  }
  if (!released) return false;
  queue.waiting.reset();
  complete(q, isa::Status{});
  return true;
}

void CommandProcessor::on_dma_done(unsigned engine, const isa::Status& outcome) {
  if (engine >= engine_busy_.size() || !engine_busy_[engine]) {
    // A platform bug, not a user error: report it loudly but keep the device alive.
    log_message(platform_, LogLevel::kError,
                "DMA completion from engine {} which has no job running; ignored", engine);
    return;
  }
  engine_busy_[engine] = false;
  const std::optional<uint32_t> owner = engine_owner_[engine];
  engine_owner_[engine].reset();
  if (!owner) {
    log_message(platform_, LogLevel::kDebug,
                "DMA engine {} finished a job of a queue that was reset; dropped", engine);
    return;
  }
  complete(*owner, outcome);
}

void CommandProcessor::on_launch_done(const isa::Status& outcome) {
  if (!launch_busy_) {
    log_message(platform_, LogLevel::kError,
                "launch completion while no launch is running; ignored");
    return;
  }
  launch_busy_ = false;
  const std::optional<uint32_t> owner = launch_owner_;
  launch_owner_.reset();
  if (!owner) {
    log_message(platform_, LogLevel::kDebug,
                "a launch of a queue that was reset has finished; dropped");
    return;
  }
  complete(*owner, outcome);
}

void CommandProcessor::complete(uint32_t q, const isa::Status& buffer_outcome) {
  Queue& queue = queues_[q];
  assert(queue.busy && queue.state == QueueState::kRunning);
  isa::Status outcome = buffer_outcome;
  if (queue.buffer) {
    const Queue::Buffer buffer = *queue.buffer;
    if (buffer_outcome.ok() && buffer.next < buffer.count) {
      queue.busy = false;  // the buffer goes on; its ExecBuffer packet is not done yet
      return;
    }
    queue.buffer.reset();
    if (!buffer_outcome.ok()) {
      // The ExecBuffer packet fails with the buffer packet's failure; the reason says which.
      const isa::Failure& f = buffer_outcome.error();
      outcome = isa::with_context(
          f, fmt::format("command buffer packet {} of {} ({}){}", buffer.next - 1, buffer.count,
                         isa::opcode_name(static_cast<isa::Opcode>(buffer.opcode)),
                         f.reason.empty() ? "" : ": "));
    }
  }
  const bool failed = !outcome.ok();
  const isa::ErrorCode error = isa::error_code(outcome);
  const uint64_t arg0 = failed ? outcome.error().arg0 : 0;
  const uint64_t arg1 = failed ? outcome.error().arg1 : 0;
  const std::string_view detail = failed ? std::string_view(outcome.error().reason) : "";
  const uint64_t index = queue.completed;  // one packet in flight: it is the oldest

  isa::CompletionRecord record{};
  record.seq = queue.current.seq;
  record.index = index;
  record.start_ps = queue.current_start_ps;
  record.end_ps = platform_.now_ps();
  record.status =
      static_cast<uint16_t>(failed ? isa::CompletionStatus::kError : isa::CompletionStatus::kOk);
  record.error = static_cast<uint16_t>(error);
  record.opcode = queue.current.opcode;
  record.version = isa::kPacketVersion;
  record.error_arg0 = arg0;
  record.error_arg1 = arg1;

  queue.busy = false;
  // The error record goes first: once the driver sees the failed completion, it is there.
  if (failed && queue.error_record != 0) {
    const isa::ErrorRecord why = isa::make_error_record(record.seq, index, record.opcode, error,
                                                        detail, outcome.error().exit_status);
    if (!platform_.write_device(queue.error_record, &why, sizeof why)) {
      log_message(platform_, LogLevel::kError,
                  "queue {} packet {}: cannot write its error record at 0x{:x}", q, index,
                  queue.error_record);
    }
  }
  const uint64_t record_addr =
      queue.completion + (index % queue.size) * isa::kCompletionRecordBytes;
  const isa::Status written = platform_.write_device(record_addr, &record, sizeof(record));
  if (!written) {
    // The driver cannot learn the outcome from the ring; the error state (and the interrupt,
    // if enabled) is how it finds out. `completed` stays put: there is no record to read.
    log_message(platform_, LogLevel::kError,
                "queue {} packet {}: cannot write its completion record at 0x{:x}; queue halted", q,
                index, record_addr);
    queue.state = QueueState::kError;
    ++stats_.packets_failed;
  } else {
    ++queue.completed;
    platform_.packet_completed(q, record);
    if (failed) {
      log_message(
          platform_, LogLevel::kWarn,
          "queue {} packet {} ({}) failed: {}{}{} (arg0 0x{:x}, arg1 {}); queue halted until "
          "reset",
          q, index, isa::opcode_name(static_cast<isa::Opcode>(record.opcode)),
          isa::error_code_name(error), detail.empty() ? "" : ": ", detail, arg0, arg1);
      queue.state = QueueState::kError;
      ++stats_.packets_failed;
    } else {
      ++stats_.packets_completed;
    }
  }

  const uint64_t bit = uint64_t{1} << q;
  int_status_ |= bit;
  const bool wants_irq = failed || !written || (queue.current.flags & isa::kPacketInterrupt);
  if (wants_irq && (int_enable_ & bit)) {
    ++stats_.interrupts_raised;
    platform_.raise_interrupt(bit);
  }
}

}  // namespace mtia::firmware
