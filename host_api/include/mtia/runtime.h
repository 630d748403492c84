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

// Backends linked into this program (the in-process simulator registers "inprocess").
std::vector<std::string> backend_names();

// Devices reachable through `backend`. Every backend exposes one device: the in-process
// backend simulates exactly one device per process. Throws kInvalidArgument for an unknown
// backend, naming the known ones.
int device_count(const std::string& backend = "inprocess");

// Opens the device briefly to read its properties. With the in-process backend this cannot
// be called while a Device is open (use Device::properties() instead).
DeviceProperties get_device_properties(const DeviceOptions& options = {});

}  // namespace mtia
