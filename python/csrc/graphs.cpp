#include "graphs.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>
#include <ATen/core/GraphImplInterface.h>
#include <c10/util/Exception.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "caching_allocator.h"
#include "devices.h"
#include "launch.h"
#include "torch_logger.h"

namespace mtia::torch_backend::graphs {

namespace {

struct TorchGraph {
  bool keep_graph = false;
  c10::DeviceIndex device = -1;           // the device it captures on (current at capture_begin)
  std::optional<mtia::Stream> capturing;  // the stream, while capturing
  std::optional<mtia::Graph> graph;       // once captured
  bool instantiated = false;
  c10::MempoolId_t pool{0, 0};  // {0, 0}: none yet
  // The caching allocator's blocks the graph uses, as they were at capture: a replay after
  // their tensor was freed (the block is cached or another tensor's now) would write memory
  // the graph no longer owns.
  std::vector<std::pair<uint64_t, CachingAllocator::BlockUse>> uses;
  // Random ops captured: one device seed per generator they drew with, rewritten by each
  // replay (captured_draw), and how many random ops the capture holds.
  struct Seed {
    at::Generator host_generator;
    at::Tensor slot;  // one int64, in the graph's pool
  };
  std::vector<Seed> seeds;
  uint64_t random_ops = 0;

  mtia::Device& dev() const { return Runtime::get().device(device); }
  CachingAllocator& allocator() const { return DeviceAllocator::instance().device(device); }
};

std::mutex mu;
std::map<int64_t, std::unique_ptr<TorchGraph>> registry;
int64_t next_handle = 1;
uint64_t next_pool = 1;
// Graphs holding each pool, per device: a pool handle used on two devices is two pools, one in
// each device's allocator.
std::map<std::pair<c10::DeviceIndex, c10::MempoolId_t>, int> pool_users;

TorchGraph& get(int64_t handle) {
  auto it = registry.find(handle);
  TORCH_CHECK_VALUE(it != registry.end(), "torch_mtia_emu: MTIA graph ", handle,
                    " does not exist (destroyed?)");
  return *it->second;
}

// Drops the graph's captured work and its hold on its pool. Caller holds mu.
void reset_locked(TorchGraph& g) {
  TORCH_CHECK(!g.capturing,
              "torch_mtia_emu: the MTIA graph is being captured; call "
              "capture_end() before reset()");
  if (g.graph) {
    guarded("destroying an MTIA graph", [&] { g.dev().destroy_graph(*g.graph); });
    g.graph.reset();
  }
  g.instantiated = false;
  g.uses.clear();
  g.seeds.clear();  // before the pool goes: the slots are its blocks
  g.random_ops = 0;
  if (g.pool != c10::MempoolId_t{0, 0}) {
    const auto key = std::make_pair(g.device, g.pool);
    if (--pool_users[key] == 0) {
      pool_users.erase(key);
      g.allocator().release_pool(g.pool);
    }
    g.pool = {0, 0};
  }
}

// Ends a capture in progress and discards it (the graph is being destroyed): the stream stops
// capturing and the allocator stops serving it from the graph's pool. Caller holds mu.
void abandon_capture_locked(TorchGraph& g) {
  const mtia::Stream stream = *g.capturing;
  g.capturing.reset();
  g.allocator().end_pool_capture();
  mtia::Device& dev = g.dev();
  try {
    if (dev.is_capturing(stream)) dev.destroy_graph(dev.end_capture(stream));
  } catch (const std::exception& e) {
    // end_capture discards what it refuses (unjoined work): the stream has stopped capturing.
    log::warn(c10::str("discarding the capture of a destroyed MTIA graph: ", e.what()));
  }
}

}  // namespace

int64_t create(bool keep_graph) {
  std::lock_guard lock(mu);
  const int64_t handle = next_handle++;
  auto g = std::make_unique<TorchGraph>();
  g->keep_graph = keep_graph;
  registry[handle] = std::move(g);
  return handle;
}

void destroy(int64_t handle) {
  std::lock_guard lock(mu);
  auto it = registry.find(handle);
  if (it == registry.end()) return;
  TorchGraph& g = *it->second;
  if (Runtime::is_initialized() && !Runtime::is_shut_down()) {
    // Called from destructors: what fails is reported, not raised.
    try {
      if (g.capturing) abandon_capture_locked(g);
      reset_locked(g);
    } catch (const std::exception& e) {
      log::warn(c10::str("destroying an MTIA graph: ", e.what()));
    }
  }
  registry.erase(it);
}

void capture_begin(int64_t handle, c10::MempoolId_t pool) {
  std::lock_guard lock(mu);
  TorchGraph& g = get(handle);
  TORCH_CHECK(!g.capturing && !g.graph,
              "torch_mtia_emu: this MTIA graph already holds a "
              "capture; call reset() before capturing again");
  if (pool == c10::MempoolId_t{0, 0}) pool = {next_pool++, 0};  // a private pool
  g.device = current_device();
  const mtia::Stream stream = current_stream();
  g.allocator().begin_pool_capture(stream.id, pool);  // one capture at a time per device
  try {
    guarded("beginning an MTIA graph capture", [&] { g.dev().begin_capture(stream); });
  } catch (...) {
    g.allocator().end_pool_capture();
    throw;
  }
  g.capturing = stream;
  g.pool = pool;
  ++pool_users[std::make_pair(g.device, pool)];
}

void capture_end(int64_t handle) {
  std::lock_guard lock(mu);
  TorchGraph& g = get(handle);
  TORCH_CHECK(g.capturing, "torch_mtia_emu: capture_end() without capture_begin()");
  const mtia::Stream stream = *g.capturing;
  g.capturing.reset();
  g.allocator().end_pool_capture();
  mtia::Device& dev = g.dev();
  if (!dev.is_capturing(stream)) {
    // A call during the capture ended it with an error, raised then; raising again here would
    // hide it (and keep torch.mtia.graph's __exit__ from restoring the stream). The graph
    // stays empty: replay() says so.
    reset_locked(g);
    return;
  }
  try {
    g.graph = guarded("ending an MTIA graph capture", [&] { return dev.end_capture(stream); });
  } catch (...) {
    // The capture is discarded (e.g. a side stream's unjoined work): so is the graph's hold on
    // its pool. The error says why.
    reset_locked(g);
    throw;
  }
  g.uses.clear();
  for (const mtia::DevicePtr p : dev.graph_allocations(*g.graph)) {
    g.uses.emplace_back(p.address(), g.allocator().block_use(p.address()));
  }
  if (!g.keep_graph) {
    guarded("instantiating an MTIA graph", [&] { dev.instantiate(*g.graph); });
    g.instantiated = true;
  }
}

void instantiate(int64_t handle) {
  std::lock_guard lock(mu);
  TorchGraph& g = get(handle);
  TORCH_CHECK(g.graph,
              "torch_mtia_emu: instantiate() needs a captured graph "
              "(capture_begin() ... capture_end() first)");
  TORCH_CHECK(!g.instantiated, "torch_mtia_emu: the MTIA graph is already instantiated");
  guarded("instantiating an MTIA graph", [&] { g.dev().instantiate(*g.graph); });
  g.instantiated = true;
}

void replay(int64_t handle) {
  std::lock_guard lock(mu);
  TorchGraph& g = get(handle);
  TORCH_CHECK(g.graph,
              "torch_mtia_emu: replay() needs a captured graph (capture_begin() ... "
              "capture_end() first; a capture that an error ended captured nothing)");
  for (const auto& [address, use] : g.uses) {
    TORCH_CHECK(g.allocator().block_use(address) == use,
                "torch_mtia_emu: the MTIA graph uses device memory at ",
                reinterpret_cast<void*>(address),
                " whose tensor was freed after the capture; keep the tensors a graph reads and "
                "writes (its static inputs, outputs and parameters) alive while you replay it, "
                "or capture it again");
  }
  mtia::Device& dev = g.dev();
  if (!g.instantiated) {
    guarded("instantiating an MTIA graph", [&] { dev.instantiate(*g.graph); });
    g.instantiated = true;
  }
  // On the graph's device, on that device's current stream: first the new seeds of its random
  // ops, queued before the replay so that earlier replays still read theirs.
  const mtia::Stream stream = current_stream(g.device);
  for (TorchGraph::Seed& s : g.seeds) {
    uint64_t seed;
    {
      std::lock_guard gen_lock(s.host_generator.mutex());
      seed = at::check_generator<at::CPUGeneratorImpl>(s.host_generator)->random64();
    }
    guarded("writing an MTIA graph's random seed", [&] {
      dev.fill_async(tensor_address(s.slot), mtia::Layout::contiguous({1}, 8), seed, stream);
    });
  }
  guarded("replaying an MTIA graph", [&] { dev.replay(*g.graph, stream); });
}

void reset(int64_t handle) {
  std::lock_guard lock(mu);
  reset_locked(get(handle));
}

c10::MempoolId_t pool(int64_t handle) {
  std::lock_guard lock(mu);
  const TorchGraph& g = get(handle);
  TORCH_CHECK(g.pool != c10::MempoolId_t({0, 0}),
              "torch_mtia_emu: the MTIA graph has no pool before capture_begin()");
  return g.pool;
}

c10::MempoolId_t new_pool_handle() {
  std::lock_guard lock(mu);
  return {0, next_pool++};
}

std::optional<CapturedDraw> captured_draw(const at::Generator& host_generator) {
  const c10::DeviceIndex device = current_device();
  std::lock_guard lock(mu);
  for (auto& [handle, graph] : registry) {
    TorchGraph& g = *graph;
    if (!g.capturing || g.device != device) continue;  // one capture at a time per device
    auto it = std::find_if(g.seeds.begin(), g.seeds.end(), [&](const TorchGraph::Seed& s) {
      return s.host_generator.unsafeGetGeneratorImpl() == host_generator.unsafeGetGeneratorImpl();
    });
    if (it == g.seeds.end()) {
      // host_generator() has refused every generator but an mtia or a CPU one.
      at::Tensor slot =
          at::empty({1}, at::TensorOptions().dtype(at::kLong).device(kDeviceType, device));
      it = g.seeds.insert(g.seeds.end(), TorchGraph::Seed{host_generator, std::move(slot)});
    }
    return CapturedDraw{tensor_address(it->slot), g.random_ops++};
  }
  return std::nullopt;
}

// torch.accelerator.Graph on MTIA: PyTorch's device-generic graph over the graphs above, found
// in at::GraphImplRegistry by the device type's name.
namespace {

struct AcceleratorGraph final : public at::GraphImplInterface {
  explicit AcceleratorGraph(const at::GraphImplArgs& args) : handle_(create(args.keep_graph)) {}
  // A capture still in progress is ended and discarded.
  ~AcceleratorGraph() override { destroy(handle_); }

  // The emulator's captures behave as "global" ones: a synchronization of the capturing
  // device from any thread ends the capture with an error. "default" is that mode.
  void capture_begin(c10::MempoolId_t pool, at::GraphCaptureMode mode) override {
    TORCH_CHECK_NOT_IMPLEMENTED(
        mode == at::GraphCaptureMode::Default || mode == at::GraphCaptureMode::Global,
        "torch.accelerator.Graph on mtia: capture_error_mode=\"",
        mode == at::GraphCaptureMode::ThreadLocal ? "thread_local" : "relaxed",
        "\" is not supported; the emulator's captures refuse device-wide synchronization from "
        "every thread, so use \"default\" or \"global\"");
    graphs::capture_begin(handle_, pool);
  }
  void capture_end() override { graphs::capture_end(handle_); }
  void instantiate() override { graphs::instantiate(handle_); }
  // Replay and reset may wait for the device: without the GIL, when the caller holds it.
  void replay() override {
    std::optional<pybind11::gil_scoped_release> no_gil;
    if (PyGILState_Check()) no_gil.emplace();
    graphs::replay(handle_);
  }
  void reset() override {
    std::optional<pybind11::gil_scoped_release> no_gil;
    if (PyGILState_Check()) no_gil.emplace();
    graphs::reset(handle_);
  }
  c10::MempoolId_t pool() const override { return graphs::pool(handle_); }
  // The emulator checks captures fully in every mode; there is no extra debug behaviour.
  void enable_debug_mode() override {}
  void debug_dump(const std::string&) override {
    TORCH_CHECK_NOT_IMPLEMENTED(false,
                                "torch.accelerator.Graph.debug_dump is not supported on mtia; the "
                                "emulator's trace (torch_mtia_emu.write_artifacts()) shows a "
                                "replay's packets");
  }

 private:
  int64_t handle_;
};

}  // namespace

}  // namespace mtia::torch_backend::graphs

namespace at {
C10_REGISTER_CLASS(GraphImplRegistry, MTIA, mtia::torch_backend::graphs::AcceleratorGraph)
}  // namespace at
