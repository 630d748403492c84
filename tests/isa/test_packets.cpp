#include <catch2/catch.hpp>
#include <cstring>

#include "mtia/isa/decode.h"

using namespace mtia::isa;

namespace {

PacketHeader header(Opcode op) {
  return {static_cast<uint8_t>(op), kPacketVersion, 0, 0, 42};
}

DmaCopyPacket transposed_copy() {
  DmaCopyPacket p{};
  p.header = header(Opcode::kDmaCopy);
  p.ndims = 2;
  p.elem_size = 4;
  p.sizes[0] = 3;
  p.sizes[1] = 5;
  p.src = {0x1000, static_cast<uint8_t>(AddressSpace::kHost), {}, {4, 12}};
  p.dst = {0x2000, static_cast<uint8_t>(AddressSpace::kDevice), {}, {20, 4}};
  return p;
}

struct Slot {
  uint8_t bytes[kPacketSlotBytes];
};

Slot encode(const Packet& p) {
  Slot s;
  encode_packet(p, s.bytes);
  return s;
}

ErrorCode rejection_of(const Slot& s) {
  auto r = decode_packet(s.bytes, sizeof s.bytes);
  REQUIRE_FALSE(r.ok());
  CHECK_FALSE(r.error().reason.empty());
  return r.error().code;
}

template <typename P>
ErrorCode rejection_of(const P& p) {
  return rejection_of(encode(Packet{p}));
}

template <typename P>
bool decode_ok(const P& p) {
  Slot s = encode(Packet{p});
  return decode_packet(s.bytes, sizeof s.bytes).ok();
}

}  // namespace

TEST_CASE("every packet kind survives encode and decode unchanged", "[isa]") {
  FillPacket fill{};
  fill.header = header(Opcode::kFill);
  fill.ndims = 1;
  fill.pattern_size = 2;
  fill.pattern = 0xBEEF;
  fill.sizes[0] = 10;
  fill.dst = {0x40, 0, {}, {2}};
  SignalPacket signal{header(Opcode::kSignal), 0x80, 1, {}, 7};
  WaitPacket wait{header(Opcode::kWait), 0x88, 9, static_cast<uint8_t>(WaitCondition::kEqual), {}};
  LaunchPacket launch{};
  launch.header = header(Opcode::kLaunch);
  launch.grid_rows = 8;
  launch.grid_cols = 2;
  launch.args_addr = 0x100;
  NopPacket nop{header(Opcode::kNop)};
  nop.header.flags = kPacketInterrupt;

  ExecBufferPacket exec{};
  exec.header = header(Opcode::kExecBuffer);
  exec.buffer_addr = 0x4000;
  exec.packet_count = 3;
  exec.fence_base = 0x123456789;

  for (const Packet& original : {Packet{nop}, Packet{transposed_copy()}, Packet{fill},
                                 Packet{signal}, Packet{wait}, Packet{launch}, Packet{exec}}) {
    Slot s = encode(original);
    auto decoded = decode_packet(s.bytes, sizeof s.bytes);
    REQUIRE(decoded.ok());
    CHECK(decoded.value().index() == original.index());
    Slot again = encode(decoded.value());
    CHECK(std::memcmp(s.bytes, again.bytes, kPacketSlotBytes) == 0);
  }
}

TEST_CASE("decoder rejects malformed headers", "[isa]") {
  Slot zero{};
  CHECK(rejection_of(zero) == ErrorCode::kBadOpcode);

  Slot unknown = encode(Packet{NopPacket{header(Opcode::kNop)}});
  unknown.bytes[0] = 0x7f;
  CHECK(rejection_of(unknown) == ErrorCode::kBadOpcode);

  NopPacket v{header(Opcode::kNop)};
  v.header.version = 2;
  CHECK(rejection_of(v) == ErrorCode::kBadVersion);

  NopPacket f{header(Opcode::kNop)};
  f.header.flags = 0x8000;
  CHECK(rejection_of(f) == ErrorCode::kReservedNotZero);

  NopPacket r{header(Opcode::kNop)};
  r.header.reserved = 1;
  CHECK(rejection_of(r) == ErrorCode::kReservedNotZero);

  Slot trailing = encode(Packet{NopPacket{header(Opcode::kNop)}});
  trailing.bytes[200] = 1;
  CHECK(rejection_of(trailing) == ErrorCode::kReservedNotZero);

  Slot s = encode(Packet{NopPacket{header(Opcode::kNop)}});
  CHECK_FALSE(decode_packet(s.bytes, 128).ok());
}

TEST_CASE("decoder rejects malformed DMA copies with the reason", "[isa]") {
  auto p = transposed_copy();
  p.ndims = 0;
  CHECK(rejection_of(p) == ErrorCode::kBadDims);
  p = transposed_copy();
  p.ndims = kMaxDims + 1;
  CHECK(rejection_of(p) == ErrorCode::kBadDims);
  p = transposed_copy();
  p.sizes[1] = 0;
  CHECK(rejection_of(p) == ErrorCode::kBadDims);
  p = transposed_copy();
  p.sizes[4] = 3;  // beyond ndims
  CHECK(rejection_of(p) == ErrorCode::kReservedNotZero);
  p = transposed_copy();
  p.src.strides[3] = 8;  // beyond ndims
  CHECK(rejection_of(p) == ErrorCode::kReservedNotZero);
  p = transposed_copy();
  p.elem_size = 3;
  CHECK(rejection_of(p) == ErrorCode::kBadElementSize);
  p = transposed_copy();
  p.src.addr = 0x1002;
  CHECK(rejection_of(p) == ErrorCode::kMisaligned);
  p = transposed_copy();
  p.dst.strides[0] = 18;
  CHECK(rejection_of(p) == ErrorCode::kMisaligned);
  p = transposed_copy();
  p.src.space = 2;
  CHECK(rejection_of(p) == ErrorCode::kBadAddressSpace);
  p = transposed_copy();
  p.dst.reserved[3] = 1;
  CHECK(rejection_of(p) == ErrorCode::kReservedNotZero);
  p = transposed_copy();
  p.reserved1 = 1;
  CHECK(rejection_of(p) == ErrorCode::kReservedNotZero);
  p = transposed_copy();
  p.sizes[0] = 1ull << 40;
  p.src.strides[0] = 1ull << 40;
  CHECK(rejection_of(p) == ErrorCode::kExtentOverflow);
  p = transposed_copy();
  p.sizes[0] = 1ull << 40;
  p.sizes[1] = 1ull << 40;
  CHECK(rejection_of(p) == ErrorCode::kExtentOverflow);  // element count
  p = transposed_copy();
  p.dst.addr = ~0ull - 7;
  CHECK(rejection_of(p) == ErrorCode::kExtentOverflow);
}

TEST_CASE("decoder rejects malformed fill, signal, wait and launch packets", "[isa]") {
  FillPacket fill{};
  fill.header = header(Opcode::kFill);
  fill.ndims = 1;
  fill.pattern_size = 1;
  fill.pattern = 0x1ff;  // bits above the pattern size
  fill.sizes[0] = 4;
  fill.dst.strides[0] = 1;
  CHECK(rejection_of(fill) == ErrorCode::kReservedNotZero);
  fill.pattern = 0xff;
  fill.pattern_size = 5;
  CHECK(rejection_of(fill) == ErrorCode::kBadElementSize);
  fill.pattern_size = 4;
  fill.dst.strides[0] = 4;
  fill.dst.addr = 2;
  CHECK(rejection_of(fill) == ErrorCode::kMisaligned);

  SignalPacket signal{header(Opcode::kSignal), 0x84, 0, {}, 1};
  CHECK(rejection_of(signal) == ErrorCode::kMisaligned);
  signal.addr = 0x80;
  signal.space = 9;
  CHECK(rejection_of(signal) == ErrorCode::kBadAddressSpace);
  signal.space = 0;
  signal.reserved[0] = 1;
  CHECK(rejection_of(signal) == ErrorCode::kReservedNotZero);

  WaitPacket wait{header(Opcode::kWait), 0x80, 1, 7, {}};
  CHECK(rejection_of(wait) == ErrorCode::kReservedNotZero);
  wait.condition = 0;
  wait.addr = 0x81;
  CHECK(rejection_of(wait) == ErrorCode::kMisaligned);

  LaunchPacket launch{};
  launch.header = header(Opcode::kLaunch);
  launch.grid_rows = 9;
  launch.grid_cols = 1;
  CHECK(rejection_of(launch) == ErrorCode::kBadDims);
  launch.grid_rows = 1;
  launch.reserved[1] = 1;
  CHECK(rejection_of(launch) == ErrorCode::kReservedNotZero);
}

TEST_CASE("region span covers exactly the touched bytes", "[isa]") {
  uint64_t sizes[kMaxDims] = {3, 5};
  NdRegion transposed{0x1000, 0, {}, {4, 12}};
  auto span = region_span(sizes, 2, 4, transposed);
  REQUIRE(span.ok());
  CHECK(span.value().lo == 0x1000);
  // last element at 2*4 + 4*12 = 56, plus 4 bytes
  CHECK(span.value().hi == 0x1000 + 60);

  NdRegion broadcast{0x10, 0, {}, {0, 0}};
  span = region_span(sizes, 2, 8, broadcast);
  REQUIRE(span.ok());
  CHECK(span.value().size() == 8);

  auto count = element_count(sizes, 2);
  REQUIRE(count.ok());
  CHECK(count.value() == 15);
}

TEST_CASE("completion records round trip and reject garbage", "[isa]") {
  CompletionRecord rec{};
  rec.seq = 9;
  rec.index = 8;
  rec.start_ps = 100;
  rec.end_ps = 250;
  rec.opcode = static_cast<uint8_t>(Opcode::kDmaCopy);
  rec.version = kPacketVersion;
  auto ok = decode_completion(&rec, sizeof rec);
  REQUIRE(ok.ok());
  CHECK(ok.value().seq == 9);
  CHECK(ok.value().end_ps == 250);

  auto bad = rec;
  bad.reserved1 = 1;
  CHECK_FALSE(decode_completion(&bad, sizeof bad).ok());
  bad = rec;
  bad.status = 1;  // error status without an error code
  CHECK_FALSE(decode_completion(&bad, sizeof bad).ok());
  bad.error = static_cast<uint16_t>(ErrorCode::kCount);
  CHECK_FALSE(decode_completion(&bad, sizeof bad).ok());
  bad = rec;
  bad.end_ps = 10;
  CHECK_FALSE(decode_completion(&bad, sizeof bad).ok());
  bad = rec;
  bad.version = 0;
  CHECK_FALSE(decode_completion(&bad, sizeof bad).ok());
  CHECK_FALSE(decode_completion(&rec, 10).ok());

  auto failed = rec;
  failed.status = static_cast<uint16_t>(CompletionStatus::kError);
  failed.error = static_cast<uint16_t>(ErrorCode::kBadOpcode);
  failed.opcode = 0;  // the packet that failed had no valid opcode
  CHECK(decode_completion(&failed, sizeof failed).ok());
}

TEST_CASE("every error code has a name", "[isa]") {
  for (uint16_t c = 0; c < static_cast<uint16_t>(ErrorCode::kCount); ++c) {
    CHECK(std::string(error_code_name(static_cast<ErrorCode>(c))) != "unknown error code");
  }
}

TEST_CASE("a destination that would be written more than once per byte is rejected", "[isa]") {
  // 10^18 writes to one byte were a valid packet that kept the DMA engine busy for ever.
  DmaCopyPacket p = transposed_copy();
  p.dst.strides[0] = 0;  // all 3 rows onto one
  CHECK(rejection_of(encode(p)) == ErrorCode::kBadDims);
  auto r = decode_packet(encode(p).bytes, kPacketSlotBytes);
  CHECK_THAT(r.error().reason, Catch::Contains("overlaps itself") &&
                                   Catch::Contains("15 elements of 4 bytes into a span of 20"));
  p.dst.strides[0] = 4;  // rows 4 bytes apart, each 5 elements long: they overlap
  p.dst.strides[1] = 4;
  CHECK(rejection_of(encode(p)) == ErrorCode::kBadDims);
  p.dst.strides[0] = 20;  // dense again; a broadcast source (stride 0) is fine
  p.src.strides[0] = 0;
  p.src.strides[1] = 0;
  CHECK(decode_packet(encode(p).bytes, kPacketSlotBytes).ok());

  FillPacket f{};
  f.header = header(Opcode::kFill);
  f.ndims = 2;
  f.pattern_size = 8;
  f.sizes[0] = 1ull << 30;
  f.sizes[1] = 1ull << 30;
  f.dst = {0x1000, static_cast<uint8_t>(AddressSpace::kDevice), {}, {0, 8}};
  CHECK(rejection_of(encode(f)) == ErrorCode::kBadDims);
  f.sizes[0] = 2;
  f.dst.strides[0] = 8ull << 30;
  CHECK(decode_packet(encode(f).bytes, kPacketSlotBytes).ok());
}

TEST_CASE("decoder checks exec buffer packets", "[isa]") {
  const auto exec = [] {
    ExecBufferPacket p{};
    p.header = header(Opcode::kExecBuffer);
    p.buffer_addr = 0x10000;
    p.packet_count = 4;
    return p;
  };
  CHECK(decode_ok(exec()));
  CHECK(opcode_of(Packet{exec()}) == Opcode::kExecBuffer);
  CHECK(std::string(opcode_name(Opcode::kExecBuffer)) == "exec buffer");

  auto empty = exec();
  empty.packet_count = 0;
  CHECK(rejection_of(empty) == ErrorCode::kBadDims);
  auto huge = exec();
  huge.packet_count = kMaxExecBufferPackets + 1;
  CHECK(rejection_of(huge) == ErrorCode::kBadDims);
  auto largest = exec();
  largest.packet_count = kMaxExecBufferPackets;
  CHECK(decode_ok(largest));

  auto misaligned = exec();
  misaligned.buffer_addr = 0x10000 + 128;
  CHECK(rejection_of(misaligned) == ErrorCode::kMisaligned);
  auto wraps = exec();
  wraps.buffer_addr = ~uint64_t{0} - 255;  // slot-aligned, but 4 slots run past 2^64
  CHECK(rejection_of(wraps) == ErrorCode::kExtentOverflow);

  auto reserved = exec();
  reserved.reserved0 = 1;
  CHECK(rejection_of(reserved) == ErrorCode::kReservedNotZero);
  auto reserved2 = exec();
  reserved2.reserved[1] = 1;
  CHECK(rejection_of(reserved2) == ErrorCode::kReservedNotZero);
}

TEST_CASE("the fence-relative flag is for signal and wait packets only", "[isa]") {
  SignalPacket signal{header(Opcode::kSignal), 0x80, 0, {}, 1};
  signal.header.flags = kPacketFenceRelative | kPacketInterrupt;
  CHECK(decode_ok(signal));
  WaitPacket wait{header(Opcode::kWait), 0x80, 1, 0, {}};
  wait.header.flags = kPacketFenceRelative;
  CHECK(decode_ok(wait));
  NopPacket nop{header(Opcode::kNop)};
  nop.header.flags = kPacketFenceRelative;
  CHECK(rejection_of(nop) == ErrorCode::kReservedNotZero);
  ExecBufferPacket exec{};
  exec.header = header(Opcode::kExecBuffer);
  exec.header.flags = kPacketFenceRelative;
  exec.buffer_addr = 0x4000;
  exec.packet_count = 1;
  CHECK(rejection_of(exec) == ErrorCode::kReservedNotZero);
  nop.header.flags = 1u << 2;  // no such flag
  CHECK(rejection_of(nop) == ErrorCode::kReservedNotZero);
}

TEST_CASE("decoder checks link transfer packets", "[isa][link]") {
  const auto link = [] {
    LinkTransferPacket p{};
    p.header = header(Opcode::kLinkTransfer);
    p.direction = static_cast<uint8_t>(LinkDirection::kReceive);
    p.link = 0;
    p.peer = 3;
    p.device_addr = 0x1000;
    p.host_addr = 0x7000'0000'0000;
    p.bytes = 4096;
    p.sent_ps = 123'456;
    return p;
  };
  CHECK(decode_ok(link()));
  CHECK(opcode_of(Packet{link()}) == Opcode::kLinkTransfer);
  CHECK(std::string(opcode_name(Opcode::kLinkTransfer)) == "link transfer");
  CHECK(std::string(error_code_name(ErrorCode::kBadLink)) == "bad link");

  auto send = link();
  send.direction = static_cast<uint8_t>(LinkDirection::kSend);
  CHECK(rejection_of(encode(send)) == ErrorCode::kReservedNotZero);  // a send has no sent_ps
  send.sent_ps = 0;
  CHECK(decode_ok(send));

  auto direction = link();
  direction.direction = 2;
  CHECK(rejection_of(encode(direction)) == ErrorCode::kBadLink);
  auto far = link();
  far.link = kMaxLinks;
  CHECK(rejection_of(encode(far)) == ErrorCode::kBadLink);
  auto empty = link();
  empty.bytes = 0;
  CHECK(rejection_of(encode(empty)) == ErrorCode::kBadDims);
  auto huge = link();
  huge.bytes = kMaxLinkTransferBytes + 1;
  CHECK(rejection_of(encode(huge)) == ErrorCode::kBadDims);
  auto wraps = link();
  wraps.device_addr = ~uint64_t{0} - 100;
  CHECK(rejection_of(encode(wraps)) == ErrorCode::kExtentOverflow);
  auto late = link();
  late.sent_ps = kMaxLinkSentPs + 1;
  CHECK(rejection_of(encode(late)) == ErrorCode::kBadDims);
  late.sent_ps = kMaxLinkSentPs;
  CHECK(decode_ok(late));
  auto reserved = link();
  reserved.reserved0 = 1;
  CHECK(rejection_of(encode(reserved)) == ErrorCode::kReservedNotZero);
  auto reserved2 = link();
  reserved2.reserved[0] = 1;
  CHECK(rejection_of(encode(reserved2)) == ErrorCode::kReservedNotZero);
}
