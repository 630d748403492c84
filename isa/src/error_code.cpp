#include "mtia/isa/error_code.h"

namespace mtia::isa {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNone:
      return "no error";
    case ErrorCode::kBadOpcode:
      return "bad opcode";
    case ErrorCode::kBadVersion:
      return "unsupported packet version";
    case ErrorCode::kReservedNotZero:
      return "reserved field not zero";
    case ErrorCode::kBadDims:
      return "bad dimensions";
    case ErrorCode::kBadElementSize:
      return "bad element size";
    case ErrorCode::kMisaligned:
      return "misaligned address or stride";
    case ErrorCode::kExtentOverflow:
      return "extent overflows 64 bits";
    case ErrorCode::kBadAddressSpace:
      return "bad address space";
    case ErrorCode::kDeviceAddressFault:
      return "device address fault";
    case ErrorCode::kHostAddressFault:
      return "host address fault";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kBadQueueConfig:
      return "bad queue configuration";
    case ErrorCode::kBadRegister:
      return "bad register access";
    case ErrorCode::kBadKernelImage:
      return "bad kernel image";
    case ErrorCode::kKernelFault:
      return "kernel fault";
    case ErrorCode::kWatchdog:
      return "kernel watchdog";
    case ErrorCode::kBadLink:
      return "bad link";
    case ErrorCode::kSanitizerError:
      return "sanitizer error";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kInvalidPointer:
      return "invalid pointer";
    case ErrorCode::kOutOfMemory:
      return "out of memory";
    case ErrorCode::kDeviceUnavailable:
      return "device unavailable";
    case ErrorCode::kDeviceLost:
      return "device lost";
    case ErrorCode::kCount:
      break;
  }
  return "unknown error code";
}

}  // namespace mtia::isa
