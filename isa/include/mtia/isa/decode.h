// Encoders and validating decoders for the formats in packets.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <variant>

#include "mtia/isa/packets.h"
#include "mtia/isa/result.h"

namespace mtia::isa {

// Alternative i holds opcode i + 1 (the driver relies on it).
using Packet = std::variant<NopPacket, DmaCopyPacket, FillPacket, SignalPacket, WaitPacket,
                            LaunchPacket, ExecBufferPacket, LinkTransferPacket>;

// Writes `packet` into a zero-filled slot. Never fails: validation happens on decode.
void encode_packet(const Packet& packet, uint8_t (&slot)[kPacketSlotBytes]);

// Decodes one ring slot. `bytes` must be kPacketSlotBytes. Rejects unknown opcodes, other
// versions, set reserved fields or flag bits, non-zero bytes after the packet, and bodies
// that are structurally invalid (dims, element sizes, alignment, extent overflow). Whether
// addresses lie inside memory is for the executor to check: it knows the memory map.
Result<Packet> decode_packet(const void* slot, size_t bytes);

// Decodes a completion record, rejecting set reserved fields and unknown status codes.
Result<CompletionRecord> decode_completion(const void* data, size_t bytes);

// Bytes touched by an N-D region: [lo, hi) relative to nothing (absolute addresses).
struct ByteSpan {
  uint64_t lo = 0;
  uint64_t hi = 0;  // exclusive
  uint64_t size() const { return hi - lo; }
};

// The smallest span covering every element of `region` with the given shape. Rejects
// overflow of the 64-bit address space.
Result<ByteSpan> region_span(const uint64_t* sizes, int ndims, uint64_t elem_size,
                             const NdRegion& region);

// Total elements of a shape (product of sizes), or a rejection on overflow.
Result<uint64_t> element_count(const uint64_t* sizes, int ndims);

Opcode opcode_of(const Packet& packet);
const char* opcode_name(Opcode op);

}  // namespace mtia::isa
