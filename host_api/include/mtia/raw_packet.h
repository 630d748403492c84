// Expert escape hatch: queue a raw isa/ packet on a stream, bypassing the API's validation.
// For tests, fault injection and experiments with the command protocol; applications use the
// typed calls of device.h. The driver sets the header's opcode, version, seq and flags.
#pragma once

#include "mtia/device.h"
#include "mtia/isa/decode.h"

namespace mtia {

// Queues `packet` on `stream` and returns at once. A failure is reported like any other
// device fault of the stream (sticky until its next synchronize/query). Throws
// kInvalidHandle for a destroyed stream.
void submit_raw_packet(Device& device, Stream stream, const isa::Packet& packet);

}  // namespace mtia
