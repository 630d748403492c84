// One trace of several devices: the trace.json files that several devices wrote (each device
// writes its own, in the process that runs it), merged so that ui.perfetto.dev shows them
// together, one process track per device and its host calls beside it.
#pragma once

#include <string>
#include <vector>

#include "mtia/isa/result.h"

namespace mtia::trace {

// Merges the texts of trace.json files, device k being the k-th. Device k's processes get
// pids 100 * (k + 1) + their pid and names that start with "mtia:k"; each device keeps its own
// simulated clock (the devices are not synchronised: time 0 is each one's start).
// otherData becomes {"devices": [each trace's otherData]}. kInvalidArgument naming the trace
// (by its position) that is not a trace written by a device.
isa::Result<std::string> merge_traces(const std::vector<std::string>& traces);

}  // namespace mtia::trace
