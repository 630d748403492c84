// Each public isa/ header must compile on its own; including them one per line, first in
// nothing, would hide a missing include, so each is checked by a separate translation unit
// generated in tests/CMakeLists (see headers_standalone); this file holds the ABI checks.
#include <cstddef>

#include "mtia/isa/packets.h"
#include "mtia/isa/registers.h"

namespace isa = mtia::isa;

// The wire layout is part of the contract: offsets are spelled out so a reordering fails here.
static_assert(offsetof(isa::DmaCopyPacket, ndims) == 16);
static_assert(offsetof(isa::DmaCopyPacket, sizes) == 24);
static_assert(offsetof(isa::DmaCopyPacket, src) == 72);
static_assert(offsetof(isa::DmaCopyPacket, dst) == 136);
static_assert(offsetof(isa::FillPacket, pattern) == 24);
static_assert(offsetof(isa::FillPacket, dst) == 80);
static_assert(offsetof(isa::CompletionRecord, error_arg0) == 40);
static_assert(isa::reg::queue_reg(1, isa::reg::kQueueTail) == 0x1120);
