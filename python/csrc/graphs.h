// torch.mtia.MTIAGraph over the host API's graphs: what the MTIA hooks' mtiagraph* calls do.
//
// A graph captures the work PyTorch queues on the capturing stream (mtia::Device's
// begin_capture/end_capture: device copies, fills and kernel launches) while the caching
// allocator serves that stream from the graph's memory pool, so the tensors made during capture
// keep their addresses for every replay. Graphs share a pool when captured with the same
// handle (graph_pool_handle() or another graph's pool()). Replay queues the captured work as
// one packet on the current stream.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>

#include <cstdint>
#include <optional>

#include "mtia/device_ptr.h"

namespace mtia::torch_backend::graphs {

int64_t create(bool keep_graph);
// Ends and discards a capture still in progress; reports failures in the log (it runs in
// destructors).
void destroy(int64_t handle);
void capture_begin(int64_t handle, c10::MempoolId_t pool);
void capture_end(int64_t handle);
void instantiate(int64_t handle);
void replay(int64_t handle);
void reset(int64_t handle);
c10::MempoolId_t pool(int64_t handle);
c10::MempoolId_t new_pool_handle();

// A random op inside a capture draws on the device (random.h): its launch reads the seed at
// `seed` when it runs. Each replay of the graph first writes a new seed there, drawn from
// `host_generator` (so the generator advances once per replay, and set_rng_state() before a
// replay repeats its numbers). `stream` is this op's number within the graph, so that no two
// random ops of a replay draw the same numbers.
struct CapturedDraw {
  mtia::DevicePtr seed;
  uint64_t stream = 0;
};
// The draw for the graph capturing on the current device, for the CPU generator that draws
// for the op; nullopt when no graph captures there.
std::optional<CapturedDraw> captured_draw(const at::Generator& host_generator);

}  // namespace mtia::torch_backend::graphs
