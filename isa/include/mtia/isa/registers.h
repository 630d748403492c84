// BAR0 register map of the emulated device: the host's only way to talk to the firmware.
//
// All registers are 64 bits wide, little-endian, and accessed with naturally aligned 8-byte
// reads and writes. Read-only registers ignore nothing: a write to one is rejected
// (ErrorCode::kBadRegister), as is any access to an offset not listed here.
#pragma once

#include <cstdint>

namespace mtia::isa {

inline constexpr uint64_t kBar0Bytes = 0x10000;

// 'MTIA' in the upper half, generation (1 or 2) in the lower half.
inline constexpr uint64_t kDeviceIdMagic = 0x4D544941ull << 32;
// major.minor as 16.16; 1.1 added the per-queue error record (kQueueErrorRecord); 1.2 the DRAM
// window registers and each queue's context and window (several clients, access_scope.h); 1.3
// the sanitizer registers (sanitize.h).
inline constexpr uint64_t kFirmwareVersion = 0x0001'0003;
inline constexpr uint32_t kMaxQueues = 16;

namespace reg {
// --- device identity and properties (read-only) -------------------------------------------
inline constexpr uint64_t kDeviceId = 0x0000;         // kDeviceIdMagic | generation
inline constexpr uint64_t kIsaVersion = 0x0008;       // kPacketVersion the firmware accepts
inline constexpr uint64_t kFirmwareVer = 0x0010;      // kFirmwareVersion
inline constexpr uint64_t kNumQueues = 0x0018;        // hardware queues served by the firmware
inline constexpr uint64_t kDramBytes = 0x0020;        // LPDDR capacity
inline constexpr uint64_t kSramBytes = 0x0028;        // on-chip SRAM capacity
inline constexpr uint64_t kLocalStoreBytes = 0x0030;  // per-PE local store
inline constexpr uint64_t kPeGrid = 0x0038;           // rows << 8 | cols
inline constexpr uint64_t kClockHz = 0x0040;          // PE clock
inline constexpr uint64_t kNumDmaEngines = 0x0048;
inline constexpr uint64_t kPresetName0 = 0x0050;  // preset name, 16 ASCII bytes, NUL padded
inline constexpr uint64_t kPresetName1 = 0x0058;
// The part of DRAM this function may use: [base, base + bytes). The whole of DRAM on a device
// the driver owns; a client's window on a shared device (a device server answers these for
// its clients, as a PCIe virtual function's registers would).
inline constexpr uint64_t kDramWindowBase = 0x0060;
inline constexpr uint64_t kDramWindowBytes = 0x0068;

// --- the sanitizer (sanitize.h, docs/sanitizer.md) --------------------------------------------
// RW: the checks that run on the device's launches (SanitizeCheck bits); a bit the device does
// not implement is rejected. 0 (the default): none, and the device keeps no allocation table.
inline constexpr uint64_t kSanitize = 0x0070;
// The allocation table of memcheck and initcheck: write base and bytes, then an operation
// (MemcheckOp) to kMemcheckOp, which applies it; the driver's allocator does this for each
// allocation and free. Rejected while both checks are off.
inline constexpr uint64_t kMemcheckBase = 0x0078;   // RW device address
inline constexpr uint64_t kMemcheckBytes = 0x0080;  // RW bytes
inline constexpr uint64_t kMemcheckOp = 0x0088;     // W  MemcheckOp; reads as zero

// --- interrupts ------------------------------------------------------------------------------
inline constexpr uint64_t kIntStatus = 0x0100;  // bit q: queue q has new completion records; W1C
inline constexpr uint64_t kIntEnable = 0x0108;  // bit q: raise the interrupt line for queue q

// --- per-queue blocks: kQueueBlock + q * kQueueStride ------------------------------------------
inline constexpr uint64_t kQueueBlock = 0x1000;
inline constexpr uint64_t kQueueStride = 0x100;
// Offsets within a queue block.
inline constexpr uint64_t kQueueBase = 0x00;        // RW device address of the packet ring
inline constexpr uint64_t kQueueSize = 0x08;        // RW slots in the ring, a power of two
inline constexpr uint64_t kQueueCompletion = 0x10;  // RW device address of the completion ring
inline constexpr uint64_t kQueueHead = 0x18;        // RO packets fetched so far (free-running)
inline constexpr uint64_t kQueueTail = 0x20;        // RW doorbell: packets written (free-running)
inline constexpr uint64_t kQueueControl = 0x28;     // W  QueueControl bits
inline constexpr uint64_t kQueueState = 0x30;       // RO QueueState
inline constexpr uint64_t kQueueCompleted = 0x38;   // RO packets completed (free-running)
// RW device address of the queue's error record (error_record.h: kErrorRecordBytes, aligned to
// kErrorRecordAlign), or 0 for none. Like base, size and completion: written while disabled,
// checked on enable, kept across resets.
inline constexpr uint64_t kQueueErrorRecord = 0x40;
// The queue's access scope (access_scope.h), RW while disabled and kept across resets, like
// base and size. Privileged: whoever shares the device programs them (a device server for its
// clients' queues, and it never lets a client's access through); 0, 0, 0 (the default) lets the
// queue reach all of device memory and every mapped host range.
inline constexpr uint64_t kQueueContext = 0x48;      // host memory: only this context's mappings
inline constexpr uint64_t kQueueWindowBase = 0x50;   // device memory: only this window
inline constexpr uint64_t kQueueWindowBytes = 0x58;  // 0: all of device memory

constexpr uint64_t queue_reg(uint32_t queue, uint64_t offset) {
  return kQueueBlock + queue * kQueueStride + offset;
}
}  // namespace reg

// Bits of reg::kQueueControl.
enum QueueControl : uint64_t {
  kQueueEnable = 1u << 0,  // start serving the queue with the configured base/size/completion
  kQueueReset = 1u << 1,   // stop, drop unfetched packets, clear the error, head = tail = 0
};

enum class QueueState : uint64_t {
  kDisabled = 0,
  kRunning = 1,
  kError = 2,  // halted after a failed packet until the driver resets the queue
};

}  // namespace mtia::isa
