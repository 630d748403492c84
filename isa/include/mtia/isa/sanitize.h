// The device sanitizer's settings (docs/sanitizer.md): which checks run on a device's launches,
// as the driver programs them (registers.h, reg::kSanitize) and as people name them
// ($MTIA_EMU_SANITIZE, `mtia-emu run --sanitize`, DeviceOptions::sanitize).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mtia/isa/result.h"

namespace mtia::isa {

// Bits of reg::kSanitize.
enum SanitizeCheck : uint64_t {
  // Every PE DMA to or from DRAM lies inside one live allocation of the driver's allocator.
  kSanitizeMemcheck = 1u << 0,
  // No two PEs touch the same DRAM or SRAM bytes by DMA between two barriers, one of them
  // writing.
  kSanitizeRacecheck = 1u << 1,
  // No PE DMA reads DRAM bytes of a live allocation that nothing wrote since it was made, and
  // no PE reads local-store bytes that nothing wrote since its launch started.
  kSanitizeInitcheck = 1u << 2,
  // Every PE reaches every barrier the others wait at (none exits instead), and pe.wait and
  // pe.poll name operations the PE issued.
  kSanitizeSynccheck = 1u << 3,
  kSanitizeChecksMask =
      kSanitizeMemcheck | kSanitizeRacecheck | kSanitizeInitcheck | kSanitizeSynccheck,
  // The checks that need the driver's allocation table (reg::kMemcheckOp).
  kSanitizeAllocationTable = kSanitizeMemcheck | kSanitizeInitcheck,
};

// Operations written to reg::kMemcheckOp, on [kMemcheckBase, + kMemcheckBytes), while memcheck
// or initcheck is on.
enum class MemcheckOp : uint64_t {
  kLive = 1,     // a new allocation (bytes >= 1, not overlapping a live one)
  kFreed = 2,    // the live allocation that starts at the base was freed (bytes: its size)
  kWritten = 3,  // the host wrote these bytes past the device (a device server's client,
                 // through its mapping of device memory): initcheck counts them written
};

// A comma-separated list of check names ("memcheck,racecheck"; spaces around names are
// ignored) to SanitizeCheck bits. "" and "off" are 0. Fails (kInvalidArgument) for an unknown
// name, naming it; `source` (e.g. "MTIA_EMU_SANITIZE") begins the message.
Result<uint64_t> parse_sanitize_checks(std::string_view list, std::string_view source);

// $MTIA_EMU_SANITIZE, parsed as above; 0 when unset or empty.
Result<uint64_t> sanitize_checks_from_environment();

// The checks' names in the order memcheck, racecheck, initcheck, synccheck, comma-separated
// ("memcheck,initcheck"), or "off" for 0.
std::string sanitize_checks_name(uint64_t checks);

}  // namespace mtia::isa
