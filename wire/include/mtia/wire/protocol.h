// The device server's wire protocol: what a client (the driver's socket backend) and a device
// server (`mtia-emu serve`) say to each other over a Unix-domain stream socket.
//
// The protocol carries exactly what a PCIe device offers its driver: register reads and writes
// (doorbells are register writes), the device-memory window, host memory made reachable for
// DMA, and interrupts; plus the trace channel (simulated time, artifacts, host-call records).
// Bulk data never crosses the socket: device DRAM and the client's DMA-able host buffers are
// shared memory (memfd) whose file descriptors travel as SCM_RIGHTS ancillary data.
//
// Every message is a 32-byte header followed by `payload_bytes` of payload, all fields
// little-endian and fixed width:
//   u32 magic (kServerMagic)  u16 version  u16 type  u32 flags  u32 reserved (0)
//   u64 request_id            u64 payload_bytes
// Flag kMessageCarriesFd: one file descriptor was sent with the message's bytes.
//
// Requests (client -> server); each is answered by one kReply with the same request_id, in
// order, except the posted ones (no reply):
//   kHello           u32 protocol version, u32 0            -> value = device memory window
//                    size in bytes, text = "" ; carries the DRAM window's fd (flag set)
//                    when the server shares it. value2 = device address of the window.
//   kReadRegister    u64 offset                             -> value = register value
//   kWriteRegister   u64 offset, u64 value                  (posted)
//   kReadMemory      u64 device address, u64 bytes         -> data = the bytes
//   kWriteMemory     u64 device address, then the bytes     -> ok
//   kMapHost         u64 offset into the fd, u64 bytes; carries a memfd -> value = bus address
//   kUnmapHost       u64 bus address                        -> ok
//   kNow             (empty)                                -> value = simulated time, ps
//   kWriteArtifacts  the folder (text)                      -> ok
//   kConfigJson      (empty)                                -> text = configuration JSON
//   kSetTraceLevel   u32 level (trace::TraceLevel)          -> ok
//   kTraceHostCall   a host-call record (wire/host_call_codec.h) (posted)
//   kNoteWritten     u64 device address, u64 bytes: the client wrote them through its mapping
//                    of the window (the sanitizer's initcheck counts them written) (posted)
// Server -> client, unrequested:
//   kInterrupt       u64 queue mask
//   kLost            the reason (text): the device died; the server closes the connection
// kReply payload: u16 error code (0 = ok), u16 0, u32 0, u64 value, u64 value2, u64 text
// bytes, the text (the reason when failed), then the data (the rest).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/isa/result.h"

namespace mtia::wire {

// The protocol reports through the error type the layers below share.
using isa::ErrorCode;
using isa::Result;
using isa::Status;

constexpr uint32_t kServerMagic = 0x5653544D;  // "MTSV"
constexpr uint16_t kProtocolVersion = 1;
constexpr uint64_t kHeaderBytes = 32;
// The largest payload either side accepts: a memory-window transfer of 64 MiB plus its fields.
// A peer that announces more is malformed.
constexpr uint64_t kMaxPayloadBytes = (64ull << 20) + 4096;
// The most a kReadMemory / kWriteMemory moves at once (larger transfers are split).
constexpr uint64_t kMaxMemoryChunk = 64ull << 20;
constexpr uint32_t kMessageCarriesFd = 1u << 0;

enum class MessageType : uint16_t {
  kHello = 1,
  kReadRegister = 2,
  kWriteRegister = 3,
  kReadMemory = 4,
  kWriteMemory = 5,
  kMapHost = 6,
  kUnmapHost = 7,
  kNow = 8,
  kWriteArtifacts = 9,
  kConfigJson = 10,
  kSetTraceLevel = 11,
  kTraceHostCall = 12,
  kNoteWritten = 13,
  kReply = 32,
  kInterrupt = 33,
  kLost = 34,
};

// "read register", or "type 0x17" for a value that is not a MessageType.
std::string message_type_name(uint16_t type);
// True for the requests that get no kReply.
bool is_posted(MessageType type);

struct MessageHeader {
  MessageType type = MessageType::kHello;
  uint32_t flags = 0;
  uint64_t request_id = 0;
  uint64_t payload_bytes = 0;
};

void encode_header(const MessageHeader& h, uint8_t out[kHeaderBytes]);
// kInvalidArgument naming what is wrong: magic, version, unknown type, unknown flag bits,
// reserved bits, or a payload over kMaxPayloadBytes.
Result<MessageHeader> decode_header(const uint8_t in[kHeaderBytes]);

// Little-endian payload building and bounds-checked parsing.
class PayloadWriter {
 public:
  PayloadWriter& u16(uint16_t v) { return put(v, 2); }
  PayloadWriter& u32(uint32_t v) { return put(v, 4); }
  PayloadWriter& u64(uint64_t v) { return put(v, 8); }
  PayloadWriter& bytes(const void* p, uint64_t n);
  // A u64 length, then the bytes.
  PayloadWriter& text(std::string_view s);
  const std::vector<uint8_t>& data() const { return data_; }
  std::vector<uint8_t>&& take() { return std::move(data_); }

 private:
  PayloadWriter& put(uint64_t v, int n);
  std::vector<uint8_t> data_;
};

class PayloadReader {
 public:
  PayloadReader(const uint8_t* p, uint64_t n, MessageType type) : p_(p), n_(n), type_(type) {}
  // kInvalidArgument "<type> message is truncated" when fewer bytes remain.
  Result<uint16_t> u16();
  Result<uint32_t> u32();
  Result<uint64_t> u64();
  // A u64 length (at most `max_bytes`), then that many bytes.
  Result<std::string> text(uint64_t max_bytes);
  // The bytes not read yet.
  const uint8_t* rest() const { return p_ + at_; }
  uint64_t remaining() const { return n_ - at_; }
  // kInvalidArgument when bytes remain that the message's layout does not have.
  Status finish() const;

 private:
  Result<uint64_t> get(int n);
  const uint8_t* p_;
  uint64_t n_;
  uint64_t at_ = 0;
  MessageType type_;
};

// A kReply's payload.
struct Reply {
  ErrorCode code = ErrorCode::kNone;  // kNone: the request succeeded
  uint64_t value = 0;
  uint64_t value2 = 0;
  std::string text;           // the failure's reason, or a textual answer
  std::vector<uint8_t> data;  // a memory read's bytes
};
std::vector<uint8_t> encode_reply(const Reply& r);
Result<Reply> decode_reply(const uint8_t* p, uint64_t n);

}  // namespace mtia::wire
