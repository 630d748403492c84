// GraphState: a graph (graph.cpp) as the runtime keeps it. Guarded by Device::Impl::mu, as the
// table of graphs and each stream's capture are.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "event_state.h"
#include "mtia/isa/decode.h"
#include "stream_state.h"

namespace mtia {

// The work one stream added to a capture: the origin stream's (branch 0), or that of a stream
// that joined it by waiting for an event recorded in it (a fork).
//
// Event records and waits between branches are kept as fence-relative Signal and Wait packets
// (isa::kPacketFenceRelative) on the graph's own fences, one per branch: a record is the
// branch's k-th fence value (value = k), a wait names the branch whose fence it waits for in
// `addr` (its index) until instantiate() puts in the fence's device address.
struct GraphBranch {
  std::shared_ptr<StreamState> stream;  // captured from
  std::vector<isa::Packet> packets;
  uint64_t records = 0;  // fence values its records took so far (1..records)
};

// A graph (graph.cpp): the packets captured from its streams, and what they need at replay.
struct GraphState {
  uint32_t id = 0;
  uint32_t stream_id = 0;  // the origin stream: the one that began (and ends) the capture
  bool capturing = true;
  std::vector<GraphBranch> branches;  // [0]: the origin stream's
  std::vector<uint64_t> arg_blocks;   // launch argument blocks it owns (take_arg_block)
  std::map<uint64_t, uint64_t> uses;  // malloc() allocation -> its generation at capture

  // Once instantiated. The command buffer holds each branch's packets, one after the other.
  uint64_t buffer = 0;
  uint64_t buffer_bytes = 0;
  std::vector<std::pair<uint32_t, uint32_t>> parts;  // per branch: first slot, packet count
  // A graph of several branches runs each on its own hardware queue, ordered by its fences
  // (graph.cpp, replay): their values at a replay are fence_base + k, and fence_base grows by
  // fence_stride at each replay. Empty for a graph of one branch.
  std::vector<FenceSlot> fences;
  uint64_t fence_base = 0;  // of the next replay
  uint64_t fence_stride = 0;
  // Fence repairs of failed replays still in flight (their fences are given back after).
  std::shared_ptr<std::atomic<int>> repairs = std::make_shared<std::atomic<int>>(0);

  // The latest replay's parts: (hardware queue, seq), the origin's first.
  std::shared_ptr<StreamState> replay_stream;
  std::vector<std::pair<uint32_t, uint64_t>> replay_parts;

  uint64_t packet_count() const {
    uint64_t n = 0;
    for (const auto& b : branches) n += b.packets.size();
    return n;
  }
};

}  // namespace mtia
