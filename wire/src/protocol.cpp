#include "mtia/wire/protocol.h"

#include <cstdio>

namespace mtia::wire {
namespace {

constexpr uint64_t kMaxReplyText = 1ull << 20;

uint64_t load(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

bool known_type(uint16_t t) {
  return (t >= static_cast<uint16_t>(MessageType::kHello) &&
          t <= static_cast<uint16_t>(MessageType::kNoteWritten)) ||
         (t >= static_cast<uint16_t>(MessageType::kReply) &&
          t <= static_cast<uint16_t>(MessageType::kLost));
}

isa::Failure malformed(std::string why) {
  return isa::reject(ErrorCode::kInvalidArgument, "malformed server message: " + std::move(why));
}

}  // namespace

std::string message_type_name(uint16_t type) {
  switch (static_cast<MessageType>(type)) {
    case MessageType::kHello:
      return "hello";
    case MessageType::kReadRegister:
      return "read register";
    case MessageType::kWriteRegister:
      return "write register";
    case MessageType::kReadMemory:
      return "read memory";
    case MessageType::kWriteMemory:
      return "write memory";
    case MessageType::kMapHost:
      return "map host";
    case MessageType::kUnmapHost:
      return "unmap host";
    case MessageType::kNow:
      return "now";
    case MessageType::kWriteArtifacts:
      return "write artifacts";
    case MessageType::kConfigJson:
      return "config json";
    case MessageType::kSetTraceLevel:
      return "set trace level";
    case MessageType::kTraceHostCall:
      return "trace host call";
    case MessageType::kNoteWritten:
      return "note written";
    case MessageType::kReply:
      return "reply";
    case MessageType::kInterrupt:
      return "interrupt";
    case MessageType::kLost:
      return "lost";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "type 0x%x", type);
  return buf;
}

bool is_posted(MessageType type) {
  return type == MessageType::kWriteRegister || type == MessageType::kTraceHostCall ||
         type == MessageType::kNoteWritten;
}

void encode_header(const MessageHeader& h, uint8_t out[kHeaderBytes]) {
  store(out + 0, kServerMagic, 4);
  store(out + 4, kProtocolVersion, 2);
  store(out + 6, static_cast<uint16_t>(h.type), 2);
  store(out + 8, h.flags, 4);
  store(out + 12, 0, 4);
  store(out + 16, h.request_id, 8);
  store(out + 24, h.payload_bytes, 8);
}

Result<MessageHeader> decode_header(const uint8_t in[kHeaderBytes]) {
  const uint64_t magic = load(in, 4);
  if (magic != kServerMagic) {
    return malformed("bad magic 0x" + std::to_string(magic) +
                     " (is the peer an mtia-emu device server of this release?)");
  }
  const uint64_t version = load(in + 4, 2);
  if (version != kProtocolVersion) {
    return malformed("protocol version " + std::to_string(version) + ", this side speaks " +
                     std::to_string(kProtocolVersion) +
                     "; run a client and server of the same mtia-emu release");
  }
  const auto type = static_cast<uint16_t>(load(in + 6, 2));
  if (!known_type(type)) return malformed("unknown " + message_type_name(type));
  MessageHeader h;
  h.type = static_cast<MessageType>(type);
  h.flags = static_cast<uint32_t>(load(in + 8, 4));
  if ((h.flags & ~kMessageCarriesFd) != 0) {
    return malformed(message_type_name(type) + " has unknown flag bits set");
  }
  if (load(in + 12, 4) != 0) {
    return malformed(message_type_name(type) + " has its reserved field set");
  }
  h.request_id = load(in + 16, 8);
  h.payload_bytes = load(in + 24, 8);
  if (h.payload_bytes > kMaxPayloadBytes) {
    return malformed(message_type_name(type) + " announces " + std::to_string(h.payload_bytes) +
                     " payload bytes, over the limit of " + std::to_string(kMaxPayloadBytes));
  }
  return h;
}

PayloadWriter& PayloadWriter::put(uint64_t v, int n) {
  const size_t at = data_.size();
  data_.resize(at + n);
  store(data_.data() + at, v, n);
  return *this;
}

PayloadWriter& PayloadWriter::bytes(const void* p, uint64_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  data_.insert(data_.end(), b, b + n);
  return *this;
}

PayloadWriter& PayloadWriter::text(std::string_view s) {
  u64(s.size());
  return bytes(s.data(), s.size());
}

Result<uint64_t> PayloadReader::get(int n) {
  if (remaining() < static_cast<uint64_t>(n)) {
    return malformed(message_type_name(static_cast<uint16_t>(type_)) + " message is truncated");
  }
  const uint64_t v = load(p_ + at_, n);
  at_ += n;
  return v;
}

Result<uint16_t> PayloadReader::u16() {
  MTIA_ASSIGN_OR_RETURN(const uint64_t v, get(2));
  return static_cast<uint16_t>(v);
}
Result<uint32_t> PayloadReader::u32() {
  MTIA_ASSIGN_OR_RETURN(const uint64_t v, get(4));
  return static_cast<uint32_t>(v);
}
Result<uint64_t> PayloadReader::u64() {
  return get(8);
}

Result<std::string> PayloadReader::text(uint64_t max_bytes) {
  MTIA_ASSIGN_OR_RETURN(const uint64_t n, get(8));
  const std::string what = message_type_name(static_cast<uint16_t>(type_));
  if (n > max_bytes) {
    return malformed(what + " carries a text of " + std::to_string(n) +
                     " bytes, over its limit of " + std::to_string(max_bytes));
  }
  if (n > remaining()) return malformed(what + " message is truncated");
  std::string s(reinterpret_cast<const char*>(p_ + at_), n);
  at_ += n;
  return s;
}

Status PayloadReader::finish() const {
  if (remaining() != 0) {
    return malformed(message_type_name(static_cast<uint16_t>(type_)) + " message has " +
                     std::to_string(remaining()) + " bytes past its end");
  }
  return {};
}

std::vector<uint8_t> encode_reply(const Reply& r) {
  PayloadWriter w;
  w.u16(static_cast<uint16_t>(r.code)).u16(0).u32(0).u64(r.value).u64(r.value2).text(r.text);
  w.bytes(r.data.data(), r.data.size());
  return w.take();
}

Result<Reply> decode_reply(const uint8_t* p, uint64_t n) {
  PayloadReader in(p, n, MessageType::kReply);
  Reply r;
  MTIA_ASSIGN_OR_RETURN(const uint16_t code, in.u16());
  MTIA_ASSIGN_OR_RETURN(const uint16_t pad16, in.u16());
  MTIA_ASSIGN_OR_RETURN(const uint32_t pad32, in.u32());
  if (pad16 != 0 || pad32 != 0) return malformed("reply has its reserved fields set");
  r.code = static_cast<ErrorCode>(code);
  if (r.code != ErrorCode::kNone && std::string(error_code_name(r.code)) == "unknown error code") {
    return malformed("reply carries unknown error code " + std::to_string(code));
  }
  MTIA_ASSIGN_OR_RETURN(r.value, in.u64());
  MTIA_ASSIGN_OR_RETURN(r.value2, in.u64());
  MTIA_ASSIGN_OR_RETURN(r.text, in.text(kMaxReplyText));
  r.data.assign(in.rest(), in.rest() + in.remaining());
  return r;
}

}  // namespace mtia::wire
