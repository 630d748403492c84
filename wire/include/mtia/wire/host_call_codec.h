// A host-call record (host_call.h) as bytes, for the device server's kTracetrace::HostCall message
// (wire/protocol.h): a client's host API calls go to the trace of the device it uses,
// in whichever process that device runs.
#pragma once

#include <cstdint>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/trace/host_call.h"

namespace mtia::wire {

std::vector<uint8_t> encode_host_call(const trace::HostCall& call);
// kInvalidArgument for a truncated or oversized record (strings over 64 KiB, more than 65,536
// packets, bytes past its end).
isa::Result<trace::HostCall> decode_host_call(const uint8_t* p, uint64_t n);

}  // namespace mtia::wire
