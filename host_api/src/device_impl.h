// Device::Impl: the state behind mtia::Device, shared by the source files of host_api/. It is
// split as IREE's HAL is, a file per concept: device memory and its accounting (AccountedAllocator,
// accounted_allocator.h), the registry of host memory (HostRegistry, host_registry.h), streams and
// events that own their state (StreamState, stream_state.h; EventState and the pool of fence
// slots, event_state.h) and graphs (GraphState, graph_state.h). What is left here ties them
// together: the driver device, the handle tables, the launch-argument arena, the worker.
//
// Locking: `mu` guards the handle tables (streams, events, graphs), graph capture and graph
// state, and the worker's task queue. Every part above has its own mutex, a leaf: nothing
// else of the runtime is called while it is held (AccountedAllocator calls only the driver's
// allocator), so a part may be called with `mu` held, never the other way round. Lock order:
// args_mu, then mu, then a part's mutex. No lock is held while calling into the driver's
// queues or host mappings (submit, wait, map_host...), so completion callbacks, which run on
// the backend's thread and take these locks, never wait for a host thread that waits for the
// device. Waits on a condition variable (an event's record, a pinned region going quiet)
// hold only that part's own mutex.
#pragma once

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "accounted_allocator.h"
#include "event_state.h"
#include "graph_state.h"
#include "host_registry.h"
#include "host_trace.h"
#include "mtia/copy_plan.h"
#include "mtia/device.h"
#include "mtia/driver/userspace_driver.h"
#include "mtia/error.h"
#include "raise.h"
#include "stream_state.h"

namespace mtia {

// The DMA packet for one piece of a copy plan, from src_base to dst_base (copy.cpp).
isa::DmaCopyPacket copy_packet(const CopyPiece& piece, size_t elem, uint64_t src_base,
                               isa::AddressSpace src_space, uint64_t dst_base,
                               isa::AddressSpace dst_space);

// Whether a Device::Impl still exists, for work another device's completions hand it (a peer
// copy, a wait for another device's event: peer.cpp). `impl` is cleared under `mu` when the
// device closes, after its streams have drained.
struct ImplLife {
  std::mutex mu;
  Device::Impl* impl = nullptr;
};

// A stream held on the device until the host releases it (peer.cpp): a WaitPacket on a fence
// slot of this device, released by a SignalPacket the host submits later.
struct HostFence {
  FenceSlot slot;
  uint64_t value = 0;
};

struct Device::Impl {
  explicit Impl(const DeviceOptions& options);
  ~Impl();

  // --- helpers used across the source files -------------------------------------------------
  std::shared_ptr<StreamState> stream_state(Stream s) const;  // throws kInvalidHandle
  std::shared_ptr<EventState> event_state(Event e) const;     // throws kInvalidHandle

  // Submits one packet on the stream's queue; `extra` runs on completion after the stream's
  // bookkeeping (under no lock). Returns the packet's seq.
  uint64_t submit(const std::shared_ptr<StreamState>& s, const isa::Packet& packet,
                  std::function<void(const driver::Completion&)> extra = {});
  // Waits until the stream's packet `seq` is done (callbacks included).
  void wait_seq(const StreamState& s, uint64_t seq);
  // Throws the stream's sticky error, if any, and clears it.
  void throw_pending(StreamState& s);
  // Throws Error(kDeviceLost), naming the cause, once the device is lost.
  void check_lost() const;
  // Waits for everything submitted to the stream so far.
  void drain_stream(const std::shared_ptr<StreamState>& s);

  // Runs `task` on the runtime's worker thread (for work a completion callback must not do).
  void defer(std::function<void()> task);
  void worker_loop();

  enum class Dir { kHostToDevice, kDeviceToHost, kDeviceToDevice };
  void copy(Dir dir, uint64_t dst, const Layout& dl, uint64_t src, const Layout& sl, Stream stream,
            bool async);
  void fill(DevicePtr dst, const Layout& layout, uint64_t pattern, Stream stream, bool async);

  void release_region(const std::shared_ptr<HostRegion>& r);  // unmap (+ free if owned)
  // Page-aligned host memory from the backend (driver::Device::alloc_host), mapped for DMA.
  // Throws kOutOfMemory naming `what` when there is none or it cannot be mapped.
  std::shared_ptr<HostRegion> alloc_mapped(uint64_t bytes, HostRegion::Kind kind,
                                           const std::string& what);
  // A mapped staging buffer of at least `bytes` (from the cache when one fits).
  std::shared_ptr<HostRegion> take_staging(uint64_t bytes);
  // Back to the cache, or released if the cache is full. Safe from completion callbacks.
  void return_staging(const std::shared_ptr<HostRegion>& r);
  FenceSlot take_fence_slot();
  // Waits (under the wait policy; `lock` holds ev.mu, released meanwhile) until the event's
  // latest record has been reported done.
  void wait_event_done(EventState& ev, std::unique_lock<std::mutex>& lock);
  // A device block for a launch's argument block of `bytes` (at most 512), and back.
  isa::Result<uint64_t> take_arg_block(uint64_t bytes);
  void give_arg_block(uint64_t addr);
  void record(Event e, Stream s);

  // Graph capture (graph.cpp). If `s` is capturing, records the packet (and the allocations
  // its regions touch) into its graph and returns true; submit() calls it first.
  bool capture_packet(StreamState& s, const isa::Packet& packet);
  // If `s` is capturing: records a launch packet, hands its argument block to the graph, notes
  // the allocations its pointer arguments point into, and returns true.
  bool capture_launch(StreamState& s, const isa::LaunchPacket& packet, uint64_t args_addr,
                      const std::vector<uint64_t>& pointers);
  // If `s` is capturing, ends and discards the capture and throws kInvalidArgument saying that
  // `what` cannot be captured and why.
  void refuse_in_capture(StreamState& s, const std::string& what, const char* why);
  // Ends a capture on all its streams and drops the graph; returns the argument blocks to give
  // back (give_arg_block, without `mu`). Requires mu.
  std::vector<uint64_t> discard_capture_locked(std::shared_ptr<GraphState> g);
  // If `s` is capturing: records the event into its graph (a Signal on the graph's fence of
  // the stream's branch) and returns true. Otherwise clears the event's captured record.
  bool capture_record(StreamState& s, EventState& ev);
  // A wait in a capture. If the event was recorded in a capture, `s` joins it (if it was not
  // capturing) and the wait becomes the graph's; returns true. If `s` is capturing and the
  // event was recorded outside, or in another capture, ends the capture and throws
  // kInvalidArgument. False when no capture is involved.
  bool capture_wait(const std::shared_ptr<StreamState>& s, EventState& ev);
  // Throws kInvalidArgument naming `what` if the event's latest record was captured (it has
  // not run and will only run at replay).
  void refuse_captured_event(EventState& ev, const char* what);
  // Writes `value` into each of a graph's fences from the repair queue (a replay failed), then
  // decrements `pending`.
  void repair_graph_fences(std::vector<FenceSlot> fences, uint64_t value,
                           std::shared_ptr<std::atomic<int>> pending);
  // Notes the malloc() allocation holding `addr`, if any, as used by `g`. Requires mu.
  void note_use_locked(GraphState& g, uint64_t addr);
  void repair_fence(std::shared_ptr<EventState> ev, uint64_t value, std::string failure);

  // Devices working together (peer.cpp). hold_stream_for_host queues a wait on `s` that
  // release_host_fence (from the worker thread, never the backend's) lets go; `failure`, if
  // not empty, becomes the stream's error. run_on_worker_of hands `task` to the worker of the
  // device `life` names, if it is still open (any thread, also a backend's).
  HostFence hold_stream_for_host(const std::shared_ptr<StreamState>& s);
  void release_host_fence(const HostFence& f, const std::shared_ptr<StreamState>& s,
                          const std::string& failure);
  static void run_on_worker_of(const std::shared_ptr<ImplLife>& life,
                               std::function<void(Impl&)> task);

  // --- state ----------------------------------------------------------------------------------
  std::shared_ptr<spdlog::logger> log;
  DeviceOptions options;
  DeviceProperties props;
  std::unique_ptr<driver::Device> dev;
  // Device memory and its accounting (accounted_allocator.h), over dev's allocator; own mutex.
  std::unique_ptr<AccountedAllocator> memory;
  // Pinned host memory, staging buffers and their users (host_registry.h); own mutex.
  HostRegistry host;
  std::unique_ptr<HostTrace> trace;  // host API calls for the device's trace (host_trace.h)
  std::shared_ptr<ImplLife> life = std::make_shared<ImplLife>();
  uint32_t repair_queue = 0;      // queue for fence repairs (never carries user work)
  uint32_t first_user_queue = 0;  // created streams use [first_user_queue, last_user_queue]
  uint32_t last_user_queue = 0;

  mutable std::mutex mu;
  // Held while queuing a cross-queue wait (wait_event) or the parts of a graph's replay on
  // several queues, so no wait lands between a replay's parts and closes a cycle (graph.cpp).
  // Taken before no other lock.
  std::mutex order_mu;

  std::map<uint32_t, std::shared_ptr<GraphState>> graphs;
  uint32_t next_graph_id = 1;

  std::map<uint32_t, std::shared_ptr<StreamState>> streams;  // includes the default stream
  uint32_t next_stream_id = 1;
  uint32_t next_stream_queue = 0;  // round-robin cursor over the user queues

  std::map<uint32_t, std::shared_ptr<EventState>> events;
  uint32_t next_event_id = 1;
  FenceSlots fence_slots;  // own mutex

  // Launch argument slots (kernel.cpp): a runtime block made at the first launch.
  std::mutex args_mu;
  std::atomic<uint64_t> arg_arena{0};  // set once, under args_mu
  bool arg_arena_failed = false;
  std::vector<uint32_t> arg_slots_free;

  std::deque<std::function<void()>> tasks;
  std::condition_variable tasks_cv;
  bool stopping = false;
  uint64_t tasks_running = 0;
  std::thread worker;
};

std::shared_ptr<spdlog::logger> host_api_logger();

}  // namespace mtia
