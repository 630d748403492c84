// The firmware's view of the chip. The firmware calls these; the simulator (sim/) and the
// unit tests' fake platform implement them. Nothing here may block: long work (DMA, kernel
// launches) is started here and reported back through CommandProcessor::on_dma_done /
// on_launch_done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mtia/isa/packets.h"

namespace mtia::firmware {

// Outcome of a DMA job, reported by the platform when the job finishes.
struct DmaStatus {
  isa::ErrorCode error = isa::ErrorCode::kNone;
  uint64_t arg0 = 0;  // detail, e.g. the faulting address
  uint64_t arg1 = 0;  // detail, e.g. the faulting length
};

// A DMA engine job: exactly one of the two packets, already decoded and validated.
struct DmaJob {
  enum class Kind { kCopy, kFill } kind = Kind::kCopy;
  isa::DmaCopyPacket copy{};
  isa::FillPacket fill{};
};

// Outcome of a kernel launch, reported by the platform when every PE of the launch has
// finished (or the launch failed).
struct LaunchStatus {
  isa::ErrorCode error = isa::ErrorCode::kNone;  // kBadKernelImage, kKernelFault, kWatchdog...
  uint64_t arg0 = 0;  // detail: the faulting pc (kernel faults) or the image address
  uint64_t arg1 = 0;  // detail: the faulting PE index (row * grid_cols + col)
  // Why, for people: names the PE (index, row, column), the pc and the fault. The firmware
  // hands it to the host in the queue's error record (isa/error_record.h).
  std::string message = {};
  // A kernel that exited with a non-zero status (error kKernelFault): that status.
  std::optional<int64_t> exit_status = std::nullopt;
};

// How much a firmware log message matters (Platform::log).
enum class LogLevel { kDebug, kInfo, kWarn, kError };

class Platform {
 public:
  virtual ~Platform() = default;

  // Device memory (rings, completion records, fences). False when the range is not backed
  // by device memory; the firmware turns that into an error record.
  virtual bool read_device(uint64_t addr, void* dst, size_t bytes) = 0;
  virtual bool write_device(uint64_t addr, const void* src, size_t bytes) = 0;
  // True when all of [addr, addr + bytes) is device memory. Checks the range without reading
  // it, so validating a ring never races with the driver filling it.
  virtual bool device_range_valid(uint64_t addr, uint64_t bytes) const = 0;
  // Registered host memory (signals to host fences). False when not registered.
  virtual bool write_host(uint64_t addr, const void* src, size_t bytes) = 0;

  // DMA engines: the firmware starts a job on an idle engine and is told when it finishes
  // through CommandProcessor::on_dma_done(engine, status), never from inside dma_start.
  virtual unsigned dma_engine_count() const = 0;
  virtual void dma_start(unsigned engine, const DmaJob& job) = 0;

  // The PE grid: runs one validated launch (its grid fits the chip) and reports back through
  // CommandProcessor::on_launch_done(status), never from inside launch_start. The firmware
  // starts at most one launch at a time.
  virtual void launch_start(const isa::LaunchPacket& launch) = 0;

  // Current simulated time in picoseconds.
  virtual uint64_t now_ps() const = 0;
  // Assert the host interrupt for the queues in `queue_mask`.
  virtual void raise_interrupt(uint64_t queue_mask) = 0;

  // What the firmware reports about each packet, for a platform that traces them (the
  // simulator's trace learns from these which queue a DMA job or launch works for). The
  // firmware took the packet with `header` from `queue`'s ring - before starting any DMA job or
  // launch for it; the header is as the slot held it, even when it failed to decode. Then,
  // once its completion record is in the ring, that record. The defaults do nothing; an
  // implementation whose trace is off should return at once.
  virtual void packet_dispatched(uint32_t /*queue*/, const isa::PacketHeader& /*header*/) {}
  virtual void packet_completed(uint32_t /*queue*/, const isa::CompletionRecord& /*record*/) {}

  // Log messages for people. The firmware builds a message only when log_enabled says its
  // level is wanted, so a platform that logs nothing (the default) costs nothing.
  virtual bool log_enabled(LogLevel /*level*/) const { return false; }
  virtual void log(LogLevel /*level*/, std::string_view /*message*/) {}
};

}  // namespace mtia::firmware
