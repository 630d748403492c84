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

#include "mtia/isa/access_scope.h"
#include "mtia/isa/packets.h"
#include "mtia/isa/result.h"
#include "mtia/isa/sanitize.h"

namespace mtia::firmware {

// A DMA engine job: exactly one of the packets, already decoded and validated (a link
// transfer's link exists on the chip).
struct DmaJob {
  enum class Kind { kCopy, kFill, kLink } kind = Kind::kCopy;
  isa::DmaCopyPacket copy{};
  isa::FillPacket fill{};
  isa::LinkTransferPacket link{};
  // What the job may reach: its queue's scope. Device ranges outside the window fail with
  // kDeviceAddressFault, host ranges of another context with kHostAddressFault.
  isa::AccessScope scope{};
};

// How much a firmware log message matters (Platform::log).
enum class LogLevel { kDebug, kInfo, kWarn, kError };

class Platform {
 public:
  virtual ~Platform() = default;

  // Device memory (rings, completion records, fences). A range not backed by device memory
  // fails with kDeviceAddressFault (arg0/arg1: the address and length); the firmware turns
  // that into an error record.
  virtual isa::Status read_device(uint64_t addr, void* dst, size_t bytes) = 0;
  virtual isa::Status write_device(uint64_t addr, const void* src, size_t bytes) = 0;
  // True when all of [addr, addr + bytes) is device memory. Checks the range without reading
  // it, so validating a ring never races with the driver filling it.
  virtual bool device_range_valid(uint64_t addr, uint64_t bytes) const = 0;
  // Registered host memory (signals to host fences). A range that is not registered, or not
  // reachable from `context` (isa::AccessScope::reaches_host), fails with kHostAddressFault.
  virtual isa::Status write_host(uint64_t addr, const void* src, size_t bytes,
                                 uint32_t context) = 0;

  // DMA engines: the firmware starts a job on an idle engine and is told when it finishes
  // through CommandProcessor::on_dma_done(engine, outcome), never from inside dma_start. A
  // failed job's outcome carries its code and details (e.g. kDeviceAddressFault with the
  // faulting address and length in arg0 and arg1).
  virtual unsigned dma_engine_count() const = 0;
  virtual void dma_start(unsigned engine, const DmaJob& job) = 0;

  // The PE grid: runs one validated launch (its grid fits the chip) and reports back through
  // CommandProcessor::on_launch_done(outcome), never from inside launch_start. The firmware
  // starts at most one launch at a time. A failed launch's outcome carries its code
  // (kBadKernelImage, kKernelFault, kWatchdog...), details (arg0: the faulting pc or the image
  // address; arg1: the faulting PE index, row * grid_cols + col), its reason for people
  // (naming the PE, the pc and the fault; it goes to the queue's error record) and, for a
  // kernel that exited non-zero, its exit status. The launch's image, arguments and its PEs'
  // DMA reach only `scope`'s window (and the launch's scratch: the PE local stores and SRAM);
  // anything else fails the launch with kDeviceAddressFault or kKernelFault.
  virtual void launch_start(const isa::LaunchPacket& launch, const isa::AccessScope& scope) = 0;

  // The sanitizer (isa/sanitize.h, docs/sanitizer.md). set_sanitize: the checks (SanitizeCheck
  // bits, only implemented ones) that run on later launches; 0 turns them off and forgets the
  // allocation table. memcheck_update: one change to memcheck's table of the driver's
  // allocations. A platform without a sanitizer (the default) rejects both (kUnsupported),
  // but accepts set_sanitize(0).
  virtual isa::Status set_sanitize(uint64_t checks) {
    if (checks == 0) return {};
    return isa::reject(isa::ErrorCode::kUnsupported, "this device has no sanitizer");
  }
  virtual isa::Status memcheck_update(isa::MemcheckOp /*op*/, uint64_t /*base*/,
                                      uint64_t /*bytes*/) {
    return isa::reject(isa::ErrorCode::kUnsupported, "this device has no sanitizer");
  }

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
