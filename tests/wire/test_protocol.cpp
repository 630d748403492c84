// The device server's wire format (wire/protocol.h): headers and replies round-trip,
// and every malformed header or reply is rejected with the reason.
#include <catch2/catch.hpp>

#include <cstring>

#include "mtia/wire/protocol.h"

using namespace mtia::isa;
using namespace mtia::wire;

namespace {

std::vector<uint8_t> header_bytes(MessageType type, uint32_t flags, uint64_t id, uint64_t n) {
  std::vector<uint8_t> b(kHeaderBytes);
  encode_header({type, flags, id, n}, b.data());
  return b;
}

void expect_rejected(const std::vector<uint8_t>& b, const std::string& text) {
  Result<MessageHeader> h = decode_header(b.data());
  REQUIRE_FALSE(h.ok());
  CHECK(h.error().code == ErrorCode::kInvalidArgument);
  CHECK_THAT(h.error().reason, Catch::Contains(text));
}

}  // namespace

TEST_CASE("a message header has a fixed little-endian layout and round-trips", "[server]") {
  const auto b = header_bytes(MessageType::kMapHost, kMessageCarriesFd, 0x0102030405060708, 24);
  // Field by field, as the header comment lays them out.
  CHECK(b[0] == 'M');
  CHECK(b[1] == 'T');
  CHECK(b[2] == 'S');
  CHECK(b[3] == 'V');
  CHECK((b[4] | b[5] << 8) == kProtocolVersion);
  CHECK((b[6] | b[7] << 8) == static_cast<int>(MessageType::kMapHost));
  CHECK(b[8] == kMessageCarriesFd);
  CHECK(b[16] == 0x08);
  CHECK(b[23] == 0x01);
  CHECK(b[24] == 24);
  Result<MessageHeader> h = decode_header(b.data());
  REQUIRE(h.ok());
  CHECK(h.value().type == MessageType::kMapHost);
  CHECK(h.value().flags == kMessageCarriesFd);
  CHECK(h.value().request_id == 0x0102030405060708);
  CHECK(h.value().payload_bytes == 24);
}

TEST_CASE("malformed headers are rejected with the reason", "[server]") {
  auto b = header_bytes(MessageType::kNow, 0, 1, 0);
  SECTION("magic") {
    b[0] = 'X';
    expect_rejected(b, "bad magic");
  }
  SECTION("version") {
    b[4] = 99;
    expect_rejected(b, "protocol version 99");
  }
  SECTION("unknown type") {
    b[6] = 0x77;
    expect_rejected(b, "unknown type 0x77");
  }
  SECTION("unknown flag bits") {
    b[8] = 0x80;
    expect_rejected(b, "unknown flag bits");
  }
  SECTION("reserved field") {
    b[13] = 1;
    expect_rejected(b, "reserved field");
  }
  SECTION("payload over the limit") {
    b = header_bytes(MessageType::kWriteMemory, 0, 1, kMaxPayloadBytes + 1);
    expect_rejected(b, "over the limit");
  }
}

TEST_CASE("replies round-trip and malformed ones are rejected", "[server]") {
  Reply r;
  r.code = ErrorCode::kInvalidPointer;
  r.value = 7;
  r.value2 = 9;
  r.text = "not a live allocation";
  r.data = {1, 2, 3};
  const std::vector<uint8_t> bytes = encode_reply(r);
  Result<Reply> back = decode_reply(bytes.data(), bytes.size());
  REQUIRE(back.ok());
  CHECK(back.value().code == r.code);
  CHECK(back.value().value == 7);
  CHECK(back.value().value2 == 9);
  CHECK(back.value().text == r.text);
  CHECK(back.value().data == r.data);

  for (size_t n = 0; n < 32 + r.text.size(); ++n) {  // every cut inside the fixed part and text
    INFO("cut at " << n);
    CHECK_FALSE(decode_reply(bytes.data(), n).ok());
  }
  std::vector<uint8_t> bad = bytes;
  bad[0] = 0xEE;  // error code 0x..EE is no code
  CHECK_THAT(decode_reply(bad.data(), bad.size()).error().reason, Catch::Contains("unknown error"));
  bad = bytes;
  bad[3] = 1;  // reserved
  CHECK_THAT(decode_reply(bad.data(), bad.size()).error().reason, Catch::Contains("reserved"));
  bad = bytes;
  bad[24] = 0xFF;  // text length far past the end
  bad[30] = 0x7F;
  CHECK_FALSE(decode_reply(bad.data(), bad.size()).ok());
}

TEST_CASE("a payload reader stops at the end and reports leftovers", "[server]") {
  PayloadWriter w;
  w.u32(5).u64(6).text("abc");
  const auto& d = w.data();
  PayloadReader in(d.data(), d.size(), MessageType::kMapHost);
  CHECK(in.u32().value() == 5);
  CHECK(in.u64().value() == 6);
  CHECK(in.text(2).error().reason.find("over its limit") != std::string::npos);
  PayloadReader again(d.data(), d.size(), MessageType::kMapHost);
  (void)again.u32();
  CHECK(again.finish().error().reason.find("bytes past its end") != std::string::npos);
  (void)again.u64();
  CHECK(again.text(16).value() == "abc");
  CHECK(again.finish().ok());
  CHECK_THAT(again.u16().error().reason, Catch::Contains("map host message is truncated"));
}

TEST_CASE("the posted messages are the ones no reply answers", "[server]") {
  // A client waits for a reply to every request but these: a posted one it waited for would
  // never come, and one the server answered would be taken for another request's reply.
  for (const MessageType t :
       {MessageType::kWriteRegister, MessageType::kTraceHostCall, MessageType::kNoteWritten}) {
    CHECK(is_posted(t));
  }
  for (const MessageType t :
       {MessageType::kHello, MessageType::kReadRegister, MessageType::kReadMemory,
        MessageType::kWriteMemory, MessageType::kMapHost, MessageType::kNow}) {
    CHECK_FALSE(is_posted(t));
  }
  CHECK(message_type_name(static_cast<uint16_t>(MessageType::kNoteWritten)) == "note written");
  // Its header decodes (the type is known to this release).
  const auto b = header_bytes(MessageType::kNoteWritten, 0, 9, 16);
  const auto h = decode_header(b.data());
  REQUIRE(h.ok());
  CHECK(h.value().type == MessageType::kNoteWritten);
}
