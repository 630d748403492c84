// The wire layout is part of the driver/firmware contract: these compile-time checks fail the
// build if a field moves. (That each public header compiles on its own is checked by the
// generated `headers_standalone` target in tests/CMakeLists.txt.)
#include <cstddef>

#include "mtia/isa/packets.h"
#include "mtia/isa/registers.h"

namespace isa = mtia::isa;

static_assert(offsetof(isa::DmaCopyPacket, ndims) == 16);
static_assert(offsetof(isa::DmaCopyPacket, sizes) == 24);
static_assert(offsetof(isa::DmaCopyPacket, src) == 72);
static_assert(offsetof(isa::DmaCopyPacket, dst) == 136);
static_assert(offsetof(isa::FillPacket, pattern) == 24);
static_assert(offsetof(isa::FillPacket, dst) == 80);
static_assert(offsetof(isa::CompletionRecord, error_arg0) == 40);
static_assert(isa::reg::queue_reg(1, isa::reg::kQueueTail) == 0x1120);
