#include "mtia/isa/decode.h"

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

namespace mtia::isa {
namespace {

bool all_zero(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

bool valid_element_size(uint64_t size) {
  return size == 1 || size == 2 || size == 4 || size == 8;
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// Checks sizes[0..ndims) >= 1 and unused sizes zero.
Status check_shape(const uint64_t* sizes, int ndims) {
  if (ndims < 1 || ndims > kMaxDims) {
    return reject(ErrorCode::kBadDims,
                  "ndims is " + std::to_string(ndims) + ", must be 1.." + std::to_string(kMaxDims));
  }
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < ndims && sizes[d] == 0) {
      return reject(ErrorCode::kBadDims, "size of dimension " + std::to_string(d) + " is zero");
    }
    if (d >= ndims && sizes[d] != 0) {
      return reject(ErrorCode::kReservedNotZero,
                    "size of unused dimension " + std::to_string(d) + " must be zero");
    }
  }
  if (auto count = element_count(sizes, ndims); !count) return count.error();
  return {};
}

Status check_region(const char* side, const uint64_t* sizes, int ndims, uint64_t elem_size,
                    const NdRegion& r) {
  const std::string who = side;
  if (r.space >= static_cast<uint8_t>(AddressSpace::kCount)) {
    return reject(ErrorCode::kBadAddressSpace, who + " address space " + std::to_string(r.space) +
                                                   " is not device (0) or host (1)");
  }
  if (!all_zero(r.reserved, sizeof r.reserved)) {
    return reject(ErrorCode::kReservedNotZero, who + " reserved bytes must be zero");
  }
  if (r.addr % elem_size != 0) {
    return reject(ErrorCode::kMisaligned, who + " address " + hex(r.addr) +
                                              " is not a multiple of the element size " +
                                              std::to_string(elem_size));
  }
  for (int d = 0; d < kMaxDims; ++d) {
    if (d < ndims && r.strides[d] % elem_size != 0) {
      return reject(ErrorCode::kMisaligned, who + " stride of dimension " + std::to_string(d) +
                                                " (" + std::to_string(r.strides[d]) +
                                                " bytes) is not a multiple of the element size");
    }
    if (d >= ndims && r.strides[d] != 0) {
      return reject(ErrorCode::kReservedNotZero,
                    who + " stride of unused dimension " + std::to_string(d) + " must be zero");
    }
  }
  if (auto span = region_span(sizes, ndims, elem_size, r); !span) {
    return reject(span.error().code, who + ": " + span.error().reason);
  }
  return {};
}

// A destination written more than once per byte: more elements than its span has room for
// (by pigeonhole, two of them share bytes; a zero stride is the plain case). The result would
// depend on the order of the writes, and the count is unbounded by memory: 2^60 writes to one
// byte would keep the DMA engine busy for ever. Rejected, so work is bounded by memory size.
Status check_destination_fits(const uint64_t* sizes, int ndims, uint64_t elem_size,
                              const NdRegion& dst) {
  const auto count = element_count(sizes, ndims);
  const auto span = region_span(sizes, ndims, elem_size, dst);
  if (!count || !span) return {};  // reported by the shape and region checks
  if (count.value() > span.value().size() / elem_size) {
    return reject(ErrorCode::kBadDims,
                  "the destination writes " + std::to_string(count.value()) + " elements of " +
                      std::to_string(elem_size) + " bytes into a span of " +
                      std::to_string(span.value().size()) +
                      " bytes: it overlaps itself (a zero or too small stride)");
  }
  return {};
}

Status check_header(const PacketHeader& h, Opcode expected) {
  if (h.version != kPacketVersion) {
    return reject(ErrorCode::kBadVersion, "packet version " + std::to_string(h.version) +
                                              ", this firmware speaks version " +
                                              std::to_string(kPacketVersion));
  }
  if ((h.flags & ~kPacketFlagsMask) != 0) {
    return reject(ErrorCode::kReservedNotZero,
                  "unknown flag bits " + hex(h.flags & ~kPacketFlagsMask));
  }
  if (h.reserved != 0) return reject(ErrorCode::kReservedNotZero, "header reserved field not zero");
  if ((h.flags & kPacketFenceRelative) != 0 && expected != Opcode::kSignal &&
      expected != Opcode::kWait) {
    return reject(ErrorCode::kReservedNotZero,
                  "the fence-relative flag is only for signal and wait packets");
  }
  return {};
}

Status check_body(const NopPacket&) {
  return {};
}

Status check_body(const DmaCopyPacket& p) {
  if (p.reserved0 != 0 || p.reserved1 != 0) {
    return reject(ErrorCode::kReservedNotZero, "DMA copy reserved fields must be zero");
  }
  if (!valid_element_size(p.elem_size)) {
    return reject(ErrorCode::kBadElementSize,
                  "element size " + std::to_string(p.elem_size) + " is not 1, 2, 4 or 8");
  }
  if (Status r = check_shape(p.sizes, p.ndims); !r) return r;
  if (Status r = check_region("source", p.sizes, p.ndims, p.elem_size, p.src); !r) return r;
  if (Status r = check_region("destination", p.sizes, p.ndims, p.elem_size, p.dst); !r) return r;
  return check_destination_fits(p.sizes, p.ndims, p.elem_size, p.dst);
}

Status check_body(const FillPacket& p) {
  if (p.reserved0 != 0 || p.reserved1 != 0) {
    return reject(ErrorCode::kReservedNotZero, "fill reserved fields must be zero");
  }
  if (!valid_element_size(p.pattern_size)) {
    return reject(ErrorCode::kBadElementSize,
                  "pattern size " + std::to_string(p.pattern_size) + " is not 1, 2, 4 or 8");
  }
  if (p.pattern_size < 8 && (p.pattern >> (8 * p.pattern_size)) != 0) {
    return reject(ErrorCode::kReservedNotZero, "pattern has bits above its pattern size");
  }
  if (Status r = check_shape(p.sizes, p.ndims); !r) return r;
  if (Status r = check_region("destination", p.sizes, p.ndims, p.pattern_size, p.dst); !r) return r;
  return check_destination_fits(p.sizes, p.ndims, p.pattern_size, p.dst);
}

Status check_body(const SignalPacket& p) {
  if (p.space >= static_cast<uint8_t>(AddressSpace::kCount)) {
    return reject(ErrorCode::kBadAddressSpace, "signal address space " + std::to_string(p.space) +
                                                   " is not device (0) or host (1)");
  }
  if (!all_zero(p.reserved, sizeof p.reserved)) {
    return reject(ErrorCode::kReservedNotZero, "signal reserved bytes must be zero");
  }
  if (p.addr % 8 != 0) {
    return reject(ErrorCode::kMisaligned,
                  "signal address " + hex(p.addr) + " is not 8-byte aligned");
  }
  return {};
}

Status check_body(const WaitPacket& p) {
  if (p.condition >= static_cast<uint8_t>(WaitCondition::kCount)) {
    return reject(ErrorCode::kReservedNotZero,
                  "wait condition " + std::to_string(p.condition) + " is unknown");
  }
  if (!all_zero(p.reserved, sizeof p.reserved)) {
    return reject(ErrorCode::kReservedNotZero, "wait reserved bytes must be zero");
  }
  if (p.addr % 8 != 0) {
    return reject(ErrorCode::kMisaligned, "wait address " + hex(p.addr) + " is not 8-byte aligned");
  }
  return {};
}

Status check_body(const LaunchPacket& p) {
  if (!all_zero(p.reserved, sizeof p.reserved)) {
    return reject(ErrorCode::kReservedNotZero, "launch reserved fields must be zero");
  }
  if (p.grid_rows < 1 || p.grid_rows > 8 || p.grid_cols < 1 || p.grid_cols > 8) {
    return reject(ErrorCode::kBadDims, "launch grid " + std::to_string(p.grid_rows) + "x" +
                                           std::to_string(p.grid_cols) +
                                           " is not within 1..8 x 1..8");
  }
  return {};
}

Status check_body(const ExecBufferPacket& p) {
  if (p.reserved0 != 0 || !all_zero(p.reserved, sizeof p.reserved)) {
    return reject(ErrorCode::kReservedNotZero, "exec buffer reserved fields must be zero");
  }
  if (p.packet_count < 1 || p.packet_count > kMaxExecBufferPackets) {
    return reject(ErrorCode::kBadDims, "exec buffer packet count " +
                                           std::to_string(p.packet_count) + " is not within 1.." +
                                           std::to_string(kMaxExecBufferPackets));
  }
  if (p.buffer_addr % kPacketSlotBytes != 0) {
    return reject(ErrorCode::kMisaligned, "exec buffer address " + hex(p.buffer_addr) + " is not " +
                                              std::to_string(kPacketSlotBytes) + "-byte aligned");
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(p.buffer_addr, uint64_t{p.packet_count} * kPacketSlotBytes, &end)) {
    return reject(ErrorCode::kExtentOverflow,
                  "exec buffer at " + hex(p.buffer_addr) + " runs past the 64-bit address space");
  }
  return {};
}

Status check_body(const LinkTransferPacket& p) {
  if (p.reserved0 != 0 || !all_zero(p.reserved, sizeof p.reserved)) {
    return reject(ErrorCode::kReservedNotZero, "link transfer reserved fields must be zero");
  }
  if (p.direction >= static_cast<uint8_t>(LinkDirection::kCount)) {
    return reject(ErrorCode::kBadLink, "link transfer direction " + std::to_string(p.direction) +
                                           " is not send (0) or receive (1)");
  }
  if (p.link >= kMaxLinks) {
    return reject(
        ErrorCode::kBadLink,
        "link " + std::to_string(p.link) + " is not within 0.." + std::to_string(kMaxLinks - 1),
        p.link, kMaxLinks);
  }
  if (p.bytes < 1 || p.bytes > kMaxLinkTransferBytes) {
    return reject(ErrorCode::kBadDims, "link transfer of " + std::to_string(p.bytes) +
                                           " bytes is not within 1.." +
                                           std::to_string(kMaxLinkTransferBytes));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(p.device_addr, p.bytes, &end) ||
      __builtin_add_overflow(p.host_addr, p.bytes, &end)) {
    return reject(ErrorCode::kExtentOverflow, "link transfer runs past the 64-bit address space");
  }
  if (p.direction == static_cast<uint8_t>(LinkDirection::kSend) && p.sent_ps != 0) {
    return reject(ErrorCode::kReservedNotZero, "a link send's sent_ps must be zero");
  }
  if (p.sent_ps > kMaxLinkSentPs) {
    return reject(ErrorCode::kBadDims, "link receive sent_ps " + std::to_string(p.sent_ps) +
                                           " is past the latest simulated time, " +
                                           std::to_string(kMaxLinkSentPs) + " ps");
  }
  return {};
}

template <typename P>
Result<Packet> decode_as(const uint8_t* slot) {
  P p;
  std::memcpy(&p, slot, sizeof p);
  if (!all_zero(slot + sizeof p, kPacketSlotBytes - sizeof p)) {
    return reject(ErrorCode::kReservedNotZero,
                  std::string(opcode_name(static_cast<Opcode>(p.header.opcode))) +
                      " packet has non-zero bytes after its " + std::to_string(sizeof p) +
                      "-byte body");
  }
  if (Status r = check_header(p.header, static_cast<Opcode>(p.header.opcode)); !r) {
    return r.error();
  }
  if (Status r = check_body(p); !r) return r.error();
  return Packet{p};
}

}  // namespace

Result<uint64_t> element_count(const uint64_t* sizes, int ndims) {
  uint64_t n = 1;
  for (int d = 0; d < ndims; ++d) {
    if (__builtin_mul_overflow(n, sizes[d], &n)) {
      return reject(ErrorCode::kExtentOverflow, "element count overflows 64 bits");
    }
  }
  return n;
}

Result<ByteSpan> region_span(const uint64_t* sizes, int ndims, uint64_t elem_size,
                             const NdRegion& region) {
  // Strides are unsigned, so the lowest address is the base and the highest is the base plus
  // the sum of (size - 1) * stride over the dimensions, plus one element.
  uint64_t last = 0;
  for (int d = 0; d < ndims; ++d) {
    uint64_t step = 0;
    if (sizes[d] == 0) return ByteSpan{region.addr, region.addr};
    if (__builtin_mul_overflow(sizes[d] - 1, region.strides[d], &step) ||
        __builtin_add_overflow(last, step, &last)) {
      return reject(ErrorCode::kExtentOverflow,
                    "region extent overflows 64 bits at dimension " + std::to_string(d));
    }
  }
  uint64_t hi = 0;
  if (__builtin_add_overflow(region.addr, last, &hi) ||
      __builtin_add_overflow(hi, elem_size, &hi)) {
    return reject(ErrorCode::kExtentOverflow,
                  "region starting at " + hex(region.addr) + " runs past the 64-bit address space");
  }
  return ByteSpan{region.addr, hi};
}

void encode_packet(const Packet& packet, uint8_t (&slot)[kPacketSlotBytes]) {
  std::memset(slot, 0, kPacketSlotBytes);
  std::visit(
      [&](const auto& p) {
        static_assert(sizeof p <= kPacketSlotBytes);
        std::memcpy(slot, &p, sizeof p);
      },
      packet);
}

Result<Packet> decode_packet(const void* data, size_t bytes) {
  if (bytes != kPacketSlotBytes) {
    return reject(ErrorCode::kBadDims, "a packet slot is " + std::to_string(kPacketSlotBytes) +
                                           " bytes, got " + std::to_string(bytes));
  }
  const auto* slot = static_cast<const uint8_t*>(data);
  switch (static_cast<Opcode>(slot[0])) {
    case Opcode::kNop:
      return decode_as<NopPacket>(slot);
    case Opcode::kDmaCopy:
      return decode_as<DmaCopyPacket>(slot);
    case Opcode::kFill:
      return decode_as<FillPacket>(slot);
    case Opcode::kSignal:
      return decode_as<SignalPacket>(slot);
    case Opcode::kWait:
      return decode_as<WaitPacket>(slot);
    case Opcode::kLaunch:
      return decode_as<LaunchPacket>(slot);
    case Opcode::kExecBuffer:
      return decode_as<ExecBufferPacket>(slot);
    case Opcode::kLinkTransfer:
      return decode_as<LinkTransferPacket>(slot);
    case Opcode::kIllegal:
      return reject(ErrorCode::kBadOpcode, "opcode 0 (illegal): the slot was never written");
    case Opcode::kCount:
      break;
  }
  return reject(ErrorCode::kBadOpcode, "unknown opcode " + std::to_string(slot[0]));
}

Result<CompletionRecord> decode_completion(const void* data, size_t bytes) {
  if (bytes != sizeof(CompletionRecord)) {
    return reject(ErrorCode::kBadDims, "a completion record is " +
                                           std::to_string(sizeof(CompletionRecord)) +
                                           " bytes, got " + std::to_string(bytes));
  }
  CompletionRecord r;
  std::memcpy(&r, data, sizeof r);
  if (r.version != kPacketVersion) {
    return reject(ErrorCode::kBadVersion, "completion record version " + std::to_string(r.version));
  }
  if (r.reserved0 != 0 || r.reserved1 != 0) {
    return reject(ErrorCode::kReservedNotZero, "completion record reserved fields must be zero");
  }
  if (r.status > static_cast<uint16_t>(CompletionStatus::kError)) {
    return reject(ErrorCode::kReservedNotZero,
                  "unknown completion status " + std::to_string(r.status));
  }
  if (r.error >= static_cast<uint16_t>(ErrorCode::kCount)) {
    return reject(ErrorCode::kReservedNotZero, "unknown error code " + std::to_string(r.error));
  }
  if ((r.status == static_cast<uint16_t>(CompletionStatus::kOk)) !=
      (r.error == static_cast<uint16_t>(ErrorCode::kNone))) {
    return reject(ErrorCode::kReservedNotZero, "completion status and error code disagree");
  }
  // A failed packet may have had any opcode (that can be why it failed).
  if (r.status == static_cast<uint16_t>(CompletionStatus::kOk) &&
      (r.opcode == 0 || r.opcode >= static_cast<uint8_t>(Opcode::kCount))) {
    return reject(ErrorCode::kBadOpcode,
                  "completion record names opcode " + std::to_string(r.opcode));
  }
  if (r.end_ps < r.start_ps) {
    return reject(ErrorCode::kReservedNotZero, "completion record ends before it starts");
  }
  return r;
}

Opcode opcode_of(const Packet& packet) {
  return std::visit([](const auto& p) { return static_cast<Opcode>(p.header.opcode); }, packet);
}

const char* opcode_name(Opcode op) {
  switch (op) {
    case Opcode::kIllegal:
      return "illegal";
    case Opcode::kNop:
      return "nop";
    case Opcode::kDmaCopy:
      return "DMA copy";
    case Opcode::kFill:
      return "fill";
    case Opcode::kSignal:
      return "signal";
    case Opcode::kWait:
      return "wait";
    case Opcode::kLaunch:
      return "launch";
    case Opcode::kExecBuffer:
      return "exec buffer";
    case Opcode::kLinkTransfer:
      return "link transfer";
    case Opcode::kCount:
      break;
  }
  return "unknown";
}

}  // namespace mtia::isa
