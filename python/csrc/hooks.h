// The dictionaries that torch.mtia.get_device_properties() and memory_stats() return, shared
// by the MTIA hooks (hooks.cpp) and the module's bindings.
#pragma once

#include <c10/core/Device.h>
#include <pybind11/pybind11.h>

namespace mtia::torch_backend {

// Properties of device `index` (-1: the current one; opens it): preset name, generation,
// memory sizes, PE grid, clock, DMA engines, queues, launch limits, timing, kernel library.
pybind11::dict device_properties_dict(c10::DeviceIndex index);
// Device `index`'s caching allocator counters in bytes and counts, and the driver's free memory
// once the device is open (docs/tensor-layer.md, "Memory").
pybind11::dict memory_stats_dict(c10::DeviceIndex index);
// Adds device `index`'s allocator statistics under CUDA's flat names
// ("allocated_bytes.all.current", "num_alloc_retries", ...) to `d`, as torch.cuda.memory_stats()
// has them.
void add_cuda_style_stats(pybind11::dict& d, c10::DeviceIndex index);
// Every device's allocator state and recorded history in torch.cuda.memory._snapshot()'s
// structure (segments name their device; device_traces has one list per device).
pybind11::dict memory_snapshot_dict();

}  // namespace mtia::torch_backend
