#include "mtia/error.h"

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

}  // namespace mtia
