// The dictionaries that torch.mtia.get_device_properties() and memory_stats() return, shared
// by the MTIA hooks (hooks.cpp) and the module's bindings.
#pragma once

#include <pybind11/pybind11.h>

namespace mtia::torch_backend {

// Properties of the open device (opens it): preset name, generation, memory sizes, PE grid,
// clock, DMA engines, queues, launch limits, timing, kernel library.
pybind11::dict device_properties_dict();
// The caching allocator's counters in bytes and counts, and the driver's free memory once the
// device is open (docs/tensor-layer.md, "Memory").
pybind11::dict memory_stats_dict();

}  // namespace mtia::torch_backend
