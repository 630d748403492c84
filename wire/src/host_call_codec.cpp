#include "mtia/wire/host_call_codec.h"

#include <cstring>

#include "mtia/wire/protocol.h"

namespace mtia::wire {
namespace {

constexpr uint64_t kMaxText = 64ull << 10;
constexpr uint64_t kMaxPackets = 65536;

uint64_t bits(double d) {
  uint64_t v = 0;
  std::memcpy(&v, &d, sizeof v);
  return v;
}

double from_bits(uint64_t v) {
  double d = 0;
  std::memcpy(&d, &v, sizeof d);
  return d;
}

}  // namespace

std::vector<uint8_t> encode_host_call(const trace::HostCall& c) {
  PayloadWriter w;
  w.u32(c.thread).u64(c.order).text(c.name).text(c.detail).u64(c.start_ps).u64(c.end_ps);
  w.u64(bits(c.wall_start_us)).u64(bits(c.wall_us)).text(c.error).u64(c.packets.size());
  for (const trace::HostPacket& p : c.packets)
    w.u32(p.queue).u64(p.seq).u64(p.submit_ps).text(p.label);
  return w.take();
}

isa::Result<trace::HostCall> decode_host_call(const uint8_t* p, uint64_t n) {
  PayloadReader in(p, n, MessageType::kTraceHostCall);
  trace::HostCall c;
  MTIA_ASSIGN_OR_RETURN(c.thread, in.u32());
  MTIA_ASSIGN_OR_RETURN(c.order, in.u64());
  MTIA_ASSIGN_OR_RETURN(c.name, in.text(kMaxText));
  MTIA_ASSIGN_OR_RETURN(c.detail, in.text(kMaxText));
  MTIA_ASSIGN_OR_RETURN(c.start_ps, in.u64());
  MTIA_ASSIGN_OR_RETURN(c.end_ps, in.u64());
  MTIA_ASSIGN_OR_RETURN(const uint64_t wall_start, in.u64());
  MTIA_ASSIGN_OR_RETURN(const uint64_t wall, in.u64());
  c.wall_start_us = from_bits(wall_start);
  c.wall_us = from_bits(wall);
  MTIA_ASSIGN_OR_RETURN(c.error, in.text(kMaxText));
  MTIA_ASSIGN_OR_RETURN(const uint64_t packets, in.u64());
  if (packets > kMaxPackets) {
    return isa::reject(isa::ErrorCode::kInvalidArgument,
                       "malformed host-call record: " + std::to_string(packets) +
                           " packets, over the limit of " + std::to_string(kMaxPackets));
  }
  for (uint64_t i = 0; i < packets; ++i) {
    trace::HostPacket hp;
    MTIA_ASSIGN_OR_RETURN(hp.queue, in.u32());
    MTIA_ASSIGN_OR_RETURN(hp.seq, in.u64());
    MTIA_ASSIGN_OR_RETURN(hp.submit_ps, in.u64());
    MTIA_ASSIGN_OR_RETURN(hp.label, in.text(kMaxText));
    c.packets.push_back(std::move(hp));
  }
  MTIA_RETURN_IF_ERROR(in.finish());
  return c;
}

}  // namespace mtia::wire
