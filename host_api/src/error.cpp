#include "mtia/error.h"

#include "raise.h"

namespace mtia {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kInvalidArgument:
      return "invalid argument";
    case ErrorKind::kInvalidPointer:
      return "invalid pointer";
    case ErrorKind::kInvalidHandle:
      return "invalid handle";
    case ErrorKind::kOutOfMemory:
      return "out of memory";
    case ErrorKind::kDeviceFault:
      return "device fault";
    case ErrorKind::kDeviceUnavailable:
      return "device unavailable";
    case ErrorKind::kDeviceLost:
      return "device lost";
  }
  return "unknown error";
}

Error::Error(ErrorKind kind, const std::string& message)
    : std::runtime_error(std::string(error_kind_name(kind)) + ": " + message), kind_(kind) {}

ErrorKind error_kind(isa::ErrorCode code) {
  switch (code) {
    case isa::ErrorCode::kInvalidArgument:
      return ErrorKind::kInvalidArgument;
    case isa::ErrorCode::kInvalidPointer:
      return ErrorKind::kInvalidPointer;
    case isa::ErrorCode::kOutOfMemory:
      return ErrorKind::kOutOfMemory;
    case isa::ErrorCode::kDeviceUnavailable:
      return ErrorKind::kDeviceUnavailable;
    case isa::ErrorCode::kDeviceLost:
      return ErrorKind::kDeviceLost;
    default:
      return ErrorKind::kDeviceFault;  // a code the device reported
  }
}

void raise(const isa::Failure& failure, const std::string& context, const std::string& advice) {
  throw Error(error_kind(failure.code), context + failure.reason + advice);
}

}  // namespace mtia
