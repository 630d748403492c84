// torch.mtia.MTIAGraph over the host API's graphs: what the MTIA hooks' mtiagraph* calls do.
//
// A graph captures the work PyTorch queues on the capturing stream (mtia::Device's
// begin_capture/end_capture: device copies, fills and kernel launches) while the caching
// allocator serves that stream from the graph's memory pool, so the tensors made during capture
// keep their addresses for every replay. Graphs share a pool when captured with the same
// handle (graph_pool_handle() or another graph's pool()). Replay queues the captured work as
// one packet on the current stream.
#pragma once

#include <c10/core/Allocator.h>

#include <cstdint>

namespace mtia::torch_backend::graphs {

int64_t create(bool keep_graph);
void destroy(int64_t handle);
void capture_begin(int64_t handle, c10::MempoolId_t pool);
void capture_end(int64_t handle);
void instantiate(int64_t handle);
void replay(int64_t handle);
void reset(int64_t handle);
c10::MempoolId_t pool(int64_t handle);
c10::MempoolId_t new_pool_handle();

}  // namespace mtia::torch_backend::graphs
