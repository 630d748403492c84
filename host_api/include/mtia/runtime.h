// The host API in one include: devices, memory, strided copies, streams and events.
#pragma once

#include <string>
#include <vector>

#include "mtia/copy_plan.h"
#include "mtia/device.h"
#include "mtia/device_properties.h"
#include "mtia/device_ptr.h"
#include "mtia/error.h"
#include "mtia/layout.h"
#include "mtia/memory_stats.h"
#include "mtia/stream.h"
#include "mtia/trace.h"

namespace mtia {

// Backends linked into this program: "inprocess" (the simulator in this process) and
// "socket" (a device server in another process).
std::vector<std::string> backend_names();
// Devices this process can open (DeviceOptions::index from 0 to one less). With `backend`
// "" (as DeviceOptions::backend chooses): the number of $MTIA_EMU_SERVER paths, else
// $MTIA_EMU_DEVICES, else 1. "inprocess": 1 (SystemC runs one device per process). "socket":
// as "", or 1 when neither variable is set (a server started for the device). Throws
// kInvalidArgument for an unknown backend, naming the known ones, or a malformed variable.
int device_count(const std::string& backend = "");
// Opens the device briefly to read its properties. With the in-process backend this cannot
// be called while a Device is open (use Device::properties() instead).
DeviceProperties get_device_properties(const DeviceOptions& options = {});

}  // namespace mtia
