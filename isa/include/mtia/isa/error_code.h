// Error codes carried in completion records and decoder rejections.
#pragma once

#include <cstdint>

namespace mtia::isa {

enum class ErrorCode : uint16_t {
  kNone = 0,
  kBadOpcode = 1,           // opcode is Illegal or unknown
  kBadVersion = 2,          // packet version this firmware does not speak
  kReservedNotZero = 3,     // a must-be-zero field or flag bit is set
  kBadDims = 4,             // ndims out of 1..kMaxDims, or a size of zero
  kBadElementSize = 5,      // element / pattern size not 1, 2, 4 or 8
  kMisaligned = 6,          // address or stride not a multiple of the element size
  kExtentOverflow = 7,      // sizes * strides overflow 64 bits
  kBadAddressSpace = 8,     // address space field not Device or Host
  kDeviceAddressFault = 9,  // region outside device memory (arg0 = address, arg1 = bytes)
  kHostAddressFault = 10,   // region outside registered host memory (arg0 = address, arg1 = bytes)
  kUnsupported = 11,        // well-formed but not implemented by this firmware (e.g. launch)
  kBadQueueConfig = 12,     // ring base / size / completion base invalid
  kBadRegister = 13,        // access to an unmapped or read-only register
  kBadKernelImage = 14,     // launch image is not a loadable kernel ELF (arg0 = image address)
  kKernelFault = 15,        // a PE faulted or exited non-zero (arg0 = pc, arg1 = PE index)
  kWatchdog = 16,           // a PE ran past the launch's cycle limit (arg0 = pc, arg1 = PE index)
  kBadLink = 17,  // a link transfer names a link the chip lacks (arg0 = link, arg1 = links)
  // The sanitizer (docs/sanitizer.md) found a bad access in a launch (arg0 = pc, arg1 = PE index)
  kSanitizerError = 18,
  kCount,  // one past the last code a device reports

  // Host-side failures below the public API (driver, backends, the simulator's set-up). They
  // never travel in a completion or error record; host_api maps each to an mtia::ErrorKind.
  kInvalidArgument = 0x100,    // a malformed request or option
  kInvalidPointer = 0x101,     // an address that is not (inside) a live allocation or mapping
  kOutOfMemory = 0x102,        // no free range can hold the request
  kDeviceUnavailable = 0x103,  // the device could not be opened or does not answer
  kDeviceLost = 0x104,         // the device died; nothing more completes on it
};

// A short stable name for logs and messages ("device address fault").
const char* error_code_name(ErrorCode code);

}  // namespace mtia::isa
