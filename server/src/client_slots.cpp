#include "client_slots.h"

#include <fcntl.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "mtia/isa/address_map.h"
#include "mtia/isa/registers.h"
#include "mtia/isa/sanitize.h"
#include "mtia/log/logger.h"

namespace mtia::server {
namespace {

std::shared_ptr<spdlog::logger> logger() {
  static const std::shared_ptr<spdlog::logger> log = mtia::log::get("server");
  return log;
}

// Client windows start and end on this boundary (a huge page), and are at least the minimum.
constexpr uint64_t kWindowAlign = 2ull << 20;
constexpr uint64_t kMinWindowBytes = 64ull << 20;

bool is_privileged_queue_field(uint64_t field) {
  return field == isa::reg::kQueueContext || field == isa::reg::kQueueWindowBase ||
         field == isa::reg::kQueueWindowBytes;
}

// A BAR0 offset inside the per-queue blocks as its queue and field; nullopt for other offsets.
struct QueueRegister {
  uint64_t queue = 0;
  uint64_t field = 0;
};
std::optional<QueueRegister> queue_register(uint64_t offset) {
  if (offset < isa::reg::kQueueBlock || offset >= isa::kBar0Bytes) return std::nullopt;
  const uint64_t at = offset - isa::reg::kQueueBlock;
  return QueueRegister{at / isa::reg::kQueueStride, at % isa::reg::kQueueStride};
}

}  // namespace

// Work already running on a DMA engine or the PE grid finishes on its own; the server's
// retire() keeps it harmless.
void ClientSlots::reset_queues(const Slot& slot) {
  if (!lost_.empty()) return;
  for (uint32_t i = 0; i < slot.queues; ++i) {
    device_->write_register(isa::reg::queue_reg(slot.first_queue + i, isa::reg::kQueueControl),
                            isa::kQueueReset);
  }
}

void ClientSlots::note_written(const Slot& slot, uint64_t client, uint64_t addr, uint64_t bytes) {
  if (!lost_.empty() || slots_.size() != 1 || bytes == 0) return;
  if (isa::Status in = check_window(slot, "note_written", addr, bytes); !in) {
    logger()->warn("client {}: {}", client, in.error().reason);  // posted: nobody to answer
    return;
  }
  // The client may be between the writes of an allocation's base and bytes and its operation
  // (another thread of it sent this note): put its two registers back afterwards.
  const isa::Result<uint64_t> base = device_->read_register(isa::reg::kMemcheckBase);
  const isa::Result<uint64_t> size = device_->read_register(isa::reg::kMemcheckBytes);
  if (!base || !size) return;  // the device is gone: nothing to note
  device_->write_register(isa::reg::kMemcheckBase, addr);
  device_->write_register(isa::reg::kMemcheckBytes, bytes);
  device_->write_register(isa::reg::kMemcheckOp, static_cast<uint64_t>(isa::MemcheckOp::kWritten));
  device_->write_register(isa::reg::kMemcheckBase, base.value());
  device_->write_register(isa::reg::kMemcheckBytes, size.value());
}

void ClientSlots::stop_sanitizer() {
  if (lost_.empty() && slots_.size() == 1) device_->write_register(isa::reg::kSanitize, 0);
}

void ClientSlots::clear_window(const Slot& slot) {
  if (fallocate(slot.window.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                static_cast<off_t>(slot.window.bytes)) != 0) {
    logger()->warn("cannot clear the DRAM window of client slot {}: {}", slot.index,
                   std::strerror(errno));
  }
}

uint64_t ClientSlots::resident_bytes(const Slot& slot) {
  struct stat st {};
  if (fstat(slot.window.fd, &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

void ClientSlots::write_int_enable() {
  if (!lost_.empty()) return;
  uint64_t all = 0;
  for (const Slot& slot : slots_) all |= (slot.int_enable & slot.mask()) << slot.first_queue;
  device_->write_register(isa::reg::kIntEnable, all);
}

// Gives each client slot its queues, context and window (ServerOptions::clients).
isa::Status ClientSlots::partition(driver::Backend& device, uint32_t clients) {
  device_ = &device;
  MTIA_ASSIGN_OR_RETURN(const uint64_t nq, device_->read_register(isa::reg::kNumQueues));
  MTIA_ASSIGN_OR_RETURN(const uint64_t dram, device_->read_register(isa::reg::kDramBytes));
  const uint32_t n = clients;
  if (n == 0 || n > nq) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format(
            "--clients {}: the device has {} hardware queues, so it serves 1 to {} clients at once",
            n, nq, nq));
  }
  const uint64_t window = dram / n / kWindowAlign * kWindowAlign;
  if (window < kMinWindowBytes) {
    return isa::reject(
        isa::ErrorCode::kInvalidArgument,
        fmt::format(
            "--clients {}: the device's {} MiB of DRAM leave each client {} MiB, under the {} MiB "
            "a client needs; serve fewer clients or give the device more DRAM",
            n, dram >> 20, window >> 20, kMinWindowBytes >> 20));
  }
  slots_.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Slot& slot = slots_[i];
    slot.index = i;
    slot.queues = static_cast<uint32_t>(nq / n);
    slot.first_queue = i * slot.queues;
    slot.scope = {i + 1, isa::kDramBase + i * window, window};
    MTIA_ASSIGN_OR_RETURN(slot.window, device_->split_window(slot.scope.window_base, window));
    for (uint32_t k = 0; k < slot.queues; ++k) {
      auto reg = [&](uint64_t field) { return isa::reg::queue_reg(slot.first_queue + k, field); };
      device_->write_register(reg(isa::reg::kQueueControl), isa::kQueueReset);
      device_->write_register(reg(isa::reg::kQueueContext), slot.scope.context);
      device_->write_register(reg(isa::reg::kQueueWindowBase), slot.scope.window_base);
      device_->write_register(reg(isa::reg::kQueueWindowBytes), slot.scope.window_bytes);
    }
  }
  // Posted writes are answered in order: this read sees them, and checks they took.
  MTIA_ASSIGN_OR_RETURN(
      const uint64_t last,
      device_->read_register(isa::reg::queue_reg(
          slots_.back().first_queue + slots_.back().queues - 1, isa::reg::kQueueWindowBytes)));
  if (last != window) {
    return isa::reject(isa::ErrorCode::kDeviceUnavailable,
                       "the device did not take its queues' windows");
  }
  logger()->info("serving up to {} client{} at once: {} queues and {} MiB of DRAM each", n,
                 n == 1 ? "" : "s", nq / n, window >> 20);
  return {};
}

isa::Result<uint64_t> ClientSlots::read_register(const Slot& slot, uint64_t offset) {
  namespace reg = isa::reg;
  switch (offset) {
    case reg::kNumQueues:
      return uint64_t{slot.queues};
    case reg::kDramWindowBase:
      return slot.window.device_addr;
    case reg::kDramWindowBytes:
      return slot.window.bytes;
    case reg::kIntEnable:
      return slot.int_enable;
    case reg::kSanitize:
      // The sanitizer's allocation table is the device's: offered to a server's only client.
      if (slots_.size() != 1) return uint64_t{0};
      break;
    case reg::kIntStatus: {
      MTIA_ASSIGN_OR_RETURN(const uint64_t all, device_->read_register(offset));
      return (all >> slot.first_queue) & slot.mask();
    }
    default:
      break;
  }
  if (const auto q = queue_register(offset)) {
    if (q->queue >= slot.queues) {
      return isa::reject(isa::ErrorCode::kBadRegister,
                         fmt::format("BAR0 offset 0x{:04x}: no register at this offset (this "
                                     "client has {} queues)",
                                     offset, slot.queues));
    }
    return device_->read_register(reg::queue_reg(slot.first_queue + q->queue, q->field));
  }
  return device_->read_register(offset);
}

void ClientSlots::write_register(Slot& slot, uint64_t client, uint64_t offset, uint64_t value) {
  namespace reg = isa::reg;
  if (offset == reg::kIntEnable) {
    slot.int_enable = value & slot.mask();
    return write_int_enable();
  }
  if (offset == reg::kIntStatus) {
    return device_->write_register(offset, (value & slot.mask()) << slot.first_queue);
  }
  if (const auto q = queue_register(offset)) {
    const bool not_its_queue = q->queue >= slot.queues;
    if (not_its_queue || is_privileged_queue_field(q->field)) {
      // A posted write has no answer: dropped and logged, as the device does with a bad one.
      logger()->warn("client {}: register write at BAR0 offset 0x{:04x} dropped: {}", client,
                     offset,
                     not_its_queue ? fmt::format("it has {} queues", slot.queues)
                                   : std::string("a queue's context and window are the "
                                                 "server's to set"));
      return;
    }
    return device_->write_register(reg::queue_reg(slot.first_queue + q->queue, q->field), value);
  }
  if ((offset == reg::kSanitize || offset == reg::kMemcheckBase || offset == reg::kMemcheckBytes ||
       offset == reg::kMemcheckOp) &&
      slots_.size() != 1) {
    logger()->warn(
        "client {}: register write at BAR0 offset 0x{:04x} dropped: a server of {} clients "
        "does not run the sanitizer (its allocation table is the device's); serve one client",
        client, offset, slots_.size());
    return;
  }
  device_->write_register(offset, value);
}

isa::Status ClientSlots::check_window(const Slot& slot, const char* what, uint64_t addr,
                                      uint64_t bytes) {
  if (slot.scope.covers(addr, bytes)) return {};
  return isa::reject(isa::ErrorCode::kDeviceAddressFault,
                     fmt::format("{} 0x{:x} + {} bytes: outside this client's device memory "
                                 "[0x{:x}, 0x{:x})",
                                 what, addr, bytes, slot.scope.window_base,
                                 slot.scope.window_base + slot.scope.window_bytes),
                     addr, bytes);
}

}  // namespace mtia::server
