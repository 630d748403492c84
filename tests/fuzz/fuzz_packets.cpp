// The decoders of what the device and the driver read from memory: queue packets, completion
// records and error records. Any bytes must decode or be rejected with a reason; a packet
// that decodes must encode back to a slot that decodes to the same encoding.
#include <cstdint>
#include <cstring>

#include "fuzz_check.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/error_record.h"
#include "mtia/isa/packets.h"

namespace isa = mtia::isa;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The same bytes as a packet slot (zero-padded, as rings start), a completion record and an
  // error record.
  uint8_t slot[isa::kPacketSlotBytes] = {};
  std::memcpy(slot, data, size < sizeof slot ? size : sizeof slot);
  const auto packet = isa::decode_packet(slot, sizeof slot);
  if (packet) {
    uint8_t again[isa::kPacketSlotBytes];
    isa::encode_packet(packet.value(), again);
    const auto redecoded = isa::decode_packet(again, sizeof again);
    FUZZ_CHECK(redecoded.ok());
    uint8_t third[isa::kPacketSlotBytes];
    isa::encode_packet(redecoded.value(), third);
    FUZZ_CHECK(std::memcmp(again, third, sizeof again) == 0);
    FUZZ_CHECK(isa::opcode_of(redecoded.value()) == isa::opcode_of(packet.value()));
  } else {
    FUZZ_CHECK(!packet.error().reason.empty());
  }
  // Any length, as a reader may be handed a short buffer.
  const auto short_packet = isa::decode_packet(data, size);
  if (size != isa::kPacketSlotBytes) FUZZ_CHECK(!short_packet.ok());

  const auto completion = isa::decode_completion(data, size);
  if (!completion) FUZZ_CHECK(!completion.error().reason.empty());

  uint8_t record[isa::kErrorRecordBytes] = {};
  std::memcpy(record, data, size < sizeof record ? size : sizeof record);
  const auto error = isa::decode_error_record(record, sizeof record);
  if (error) {
    const auto text = isa::error_record_text(error.value());
    FUZZ_CHECK(text.size() < isa::kErrorTextBytes);
  }
  return 0;
}
