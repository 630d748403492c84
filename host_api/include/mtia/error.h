// The one exception type of the host API. Every public call reports misuse and device
// failures by throwing mtia::Error; its message names what was wrong and what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace mtia {

enum class ErrorKind {
  kInvalidArgument,    // a malformed request: bad layout, shape mismatch, bad size or option
  kInvalidPointer,     // an address that is not (inside) a live allocation or pinned region
  kInvalidHandle,      // a stream or event that was destroyed or never existed
  kOutOfMemory,        // the device (or host) cannot satisfy an allocation
  kDeviceFault,        // the device failed a command (bad address, bad packet, ...)
  kDeviceUnavailable,  // the device could not be opened or stopped answering
  kDeviceLost,         // the device died (its simulator failed); every later call on it fails
};

// A short stable name ("invalid pointer").
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const noexcept { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace mtia
