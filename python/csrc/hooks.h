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
// Adds the allocator's statistics under CUDA's flat names ("allocated_bytes.all.current",
// "num_alloc_retries", ...) to `d`, as torch.cuda.memory_stats() has them.
void add_cuda_style_stats(pybind11::dict& d);
// The allocator's state and recorded history in torch.cuda.memory._snapshot()'s structure.
pybind11::dict memory_snapshot_dict();

}  // namespace mtia::torch_backend
