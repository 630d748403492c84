// Which backend and server a DeviceOptions means: explicit, or from the environment
// ($MTIA_EMU_SERVER, $MTIA_EMU_DEVICES), as DeviceOptions::backend documents.
#pragma once

#include <string>

#include "mtia/device_properties.h"

namespace mtia {

struct DeviceChoice {
  std::string backend;  // a registered backend's name
  std::string server;   // backend "socket": the server's socket path, "" to start one
};

// Throws Error(kInvalidArgument) for an unknown backend, an index past device_count(), or a
// malformed variable; the message says what to change.
DeviceChoice choose_device(const DeviceOptions& options);
int count_devices(const std::string& backend);

}  // namespace mtia
