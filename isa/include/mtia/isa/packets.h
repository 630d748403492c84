// Command-queue packets and completion records: the wire format between driver and firmware.
//
// A queue is a ring of kPacketSlotBytes slots in device memory. The driver writes packets into
// slots, then writes the new free-running tail to the queue's doorbell register. The firmware
// fetches packets in order, executes them, and for the packet with index i writes a
// CompletionRecord into slot (i % size) of the queue's completion ring.
//
// Every structure is fixed-width and little-endian (the only byte order this emulator runs
// on), has a version and flags, and carries reserved fields that must be zero; the decoders
// in decode.h reject anything else with a reason.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "mtia/isa/error_code.h"

namespace mtia::isa {

static_assert(std::endian::native == std::endian::little, "isa/ formats are little-endian");

inline constexpr uint8_t kPacketVersion = 1;
inline constexpr size_t kPacketSlotBytes = 256;
inline constexpr int kMaxDims = 6;

enum class Opcode : uint8_t {
  kIllegal = 0,  // an all-zero slot is never a valid packet
  kNop = 1,
  kDmaCopy = 2,
  kFill = 3,
  kSignal = 4,
  kWait = 5,
  kLaunch = 6,
  kExecBuffer = 7,
  kLinkTransfer = 8,
  kCount
};

// Bits of PacketHeader::flags.
enum PacketFlags : uint16_t {
  kPacketInterrupt = 1u << 0,  // raise the queue's interrupt when this packet completes
  // On a Signal or Wait packet inside a command buffer only: its value is relative, the
  // enclosing ExecBuffer packet's fence_base is added to it. A graph's fences thereby take new,
  // growing values at each replay without rewriting the buffer (docs/architecture.md, Graphs).
  kPacketFenceRelative = 1u << 1,
  kPacketFlagsMask = kPacketInterrupt | kPacketFenceRelative,
};

enum class AddressSpace : uint8_t {
  kDevice = 0,  // device physical address (see docs/architecture.md for the map)
  kHost = 1,    // host bus address of memory the driver registered for DMA
  kCount
};

struct PacketHeader {
  uint8_t opcode;     // Opcode
  uint8_t version;    // kPacketVersion
  uint16_t flags;     // PacketFlags
  uint32_t reserved;  // must be zero
  uint64_t seq;       // driver's sequence number, echoed in the completion record
};
static_assert(sizeof(PacketHeader) == 16);

// One side of an N-D transfer. Dimension 0 is outermost; strides are in bytes and apply to
// the first `ndims` dimensions of the packet; unused strides must be zero.
struct NdRegion {
  uint64_t addr;
  uint8_t space;  // AddressSpace
  uint8_t reserved[7];
  uint64_t strides[kMaxDims];
};
static_assert(sizeof(NdRegion) == 64);

struct NopPacket {
  PacketHeader header;
};
static_assert(sizeof(NopPacket) == 16);

// Copies sizes[0] x ... x sizes[ndims-1] elements of elem_size bytes from src to dst.
struct DmaCopyPacket {
  PacketHeader header;
  uint8_t ndims;      // 1..kMaxDims
  uint8_t elem_size;  // 1, 2, 4 or 8 bytes; addresses and strides are multiples of it
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t sizes[kMaxDims];  // elements per dimension, each >= 1; unused entries zero
  NdRegion src;
  NdRegion dst;
};
static_assert(sizeof(DmaCopyPacket) == 200);

// Writes a repeating pattern of pattern_size bytes (the low bytes of `pattern`) to every
// element of an N-D region whose element size is pattern_size.
struct FillPacket {
  PacketHeader header;
  uint8_t ndims;
  uint8_t pattern_size;  // 1, 2, 4 or 8
  uint16_t reserved0;
  uint32_t reserved1;
  uint64_t pattern;  // bytes above pattern_size must be zero
  uint64_t sizes[kMaxDims];
  NdRegion dst;
};
static_assert(sizeof(FillPacket) == 144);

// Writes a 64-bit fence value (8-byte aligned) to device or host memory. With
// kPacketInterrupt in the header flags it also raises the queue's interrupt.
struct SignalPacket {
  PacketHeader header;
  uint64_t addr;
  uint8_t space;  // AddressSpace
  uint8_t reserved[7];
  uint64_t value;
};
static_assert(sizeof(SignalPacket) == 40);

enum class WaitCondition : uint8_t {
  kGreaterEqual = 0,  // proceed once *addr >= value (fences only grow)
  kEqual = 1,
  kCount
};

// Holds the queue until the 64-bit fence at a device address satisfies the condition.
// Other queues keep running; this is how one queue waits for another.
struct WaitPacket {
  PacketHeader header;
  uint64_t addr;  // device address, 8-byte aligned
  uint64_t value;
  uint8_t condition;  // WaitCondition
  uint8_t reserved[7];
};
static_assert(sizeof(WaitPacket) == 40);

// Runs a kernel on a grid of PEs. The kernel image and its argument block live in device
// memory. Firmware that cannot run kernels completes it with ErrorCode::kUnsupported.
struct LaunchPacket {
  PacketHeader header;
  uint64_t image_addr;       // device address of the kernel image (kernel binary format)
  uint64_t entry_offset;     // byte offset of the entry point within the image
  uint64_t args_addr;        // device address of the argument block
  uint32_t args_bytes;       // size of the argument block
  uint16_t grid_rows;        // PE rows used, 1..8
  uint16_t grid_cols;        // PE columns used, 1..8
  uint64_t watchdog_cycles;  // 0 = the device's default limit
  uint64_t reserved[2];
};
static_assert(sizeof(LaunchPacket) == 72);

// Runs `packet_count` packets from a command buffer in device memory: consecutive
// kPacketSlotBytes slots starting at buffer_addr (slot-aligned), encoded as in a ring. They
// execute in order on this queue, each dispatched at the device's replay cost (cheaper than a
// packet fetched from the ring: no doorbell, ring or completion bookkeeping), and the queue
// writes one completion record, for this packet, after the last of them. A buffer packet that
// fails ends the buffer and fails this packet with its error and arguments; the error record's
// reason names its position in the buffer. Buffers do not nest. This is how a captured graph
// replays with one submission. Buffer packets flagged kPacketFenceRelative (Signal and Wait)
// have fence_base added to their value; the sum must not overflow 64 bits.
struct ExecBufferPacket {
  PacketHeader header;
  uint64_t buffer_addr;   // device address, kPacketSlotBytes-aligned
  uint32_t packet_count;  // 1..kMaxExecBufferPackets
  uint32_t reserved0;
  uint64_t reserved[2];
  uint64_t fence_base;  // added to the buffer's fence-relative values (0 if it has none)
};
static_assert(sizeof(ExecBufferPacket) == 56);

inline constexpr uint32_t kMaxExecBufferPackets = 1u << 20;

// Which way a link transfer moves its bytes (LinkTransferPacket::direction).
enum class LinkDirection : uint8_t {
  kSend = 0,     // device memory -> the link's transmit side (landing in host staging memory)
  kReceive = 1,  // the link's receive side (from host staging memory) -> device memory
  kCount
};

inline constexpr uint64_t kMaxLinkTransferBytes = uint64_t{1} << 40;  // 1 TiB: above any memory
inline constexpr uint32_t kMaxLinks = 16;
// Latest sent_ps a receive may give (2^62 ps, 53 days): with at most kMaxLinkTransferBytes at
// the slowest bandwidth a preset allows, the arrival time still fits in 63 bits.
inline constexpr uint64_t kMaxLinkSentPs = uint64_t{1} << 62;

// A transfer over one of the chip's inter-chip links (docs/architecture.md, "Inter-chip
// links"). The emulator carries a link's bytes between processes through host memory: a send
// copies `bytes` contiguous bytes of device memory into a host staging buffer (registered host
// memory), a receive copies them from one into device memory. Both are timed on the link, not
// on PCIe: each direction of each link is one timeline, and a transfer takes the link's latency
// plus bytes / bandwidth. A send starts when its DMA engine is set up and the transmit side is
// free; a receive's bytes cross from `sent_ps` (the simulated time the peer's send packet
// started) or when the receive side is free, whichever is later, and it completes no earlier
// than they have arrived.
struct LinkTransferPacket {
  PacketHeader header;
  uint8_t direction;   // LinkDirection
  uint8_t link;        // which link, 0 .. the chip's link_count - 1
  uint16_t reserved0;  // must be zero
  uint32_t peer;       // the chip at the other end (a rank), for the trace
  uint64_t device_addr;
  uint64_t host_addr;  // host bus address of the staging buffer
  uint64_t bytes;      // 1..kMaxLinkTransferBytes
  uint64_t sent_ps;    // receive: when the peer's send packet started; send: must be zero
  uint64_t reserved[2];
};
static_assert(sizeof(LinkTransferPacket) == 72);

enum class CompletionStatus : uint16_t {
  kOk = 0,
  kError = 1,  // the packet failed; the queue is now in QueueState::kError
};

// Written by the firmware for every packet it finishes, successful or not.
struct CompletionRecord {
  uint64_t seq;         // PacketHeader::seq of the packet
  uint64_t index;       // the packet's index in its queue (free-running)
  uint64_t start_ps;    // simulated time the packet started executing, picoseconds
  uint64_t end_ps;      // simulated time it completed, picoseconds
  uint16_t status;      // CompletionStatus
  uint16_t error;       // ErrorCode, kNone on success
  uint8_t opcode;       // Opcode of the packet
  uint8_t version;      // kPacketVersion
  uint16_t reserved0;   // zero
  uint64_t error_arg0;  // detail for the error (e.g. faulting address)
  uint64_t error_arg1;  // detail for the error (e.g. length)
  uint64_t reserved1;   // zero
};
static_assert(sizeof(CompletionRecord) == 64);
static_assert(offsetof(CompletionRecord, status) == 32);

inline constexpr size_t kCompletionRecordBytes = sizeof(CompletionRecord);

}  // namespace mtia::isa
