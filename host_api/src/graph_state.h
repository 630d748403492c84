// GraphState: a graph (graph.cpp) as the runtime keeps it. Guarded by Device::Impl::mu, as the
// table of graphs and each stream's capture are.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "mtia/isa/decode.h"
#include "stream_state.h"

namespace mtia {

// A graph (graph.cpp): the packets captured from a stream, and what they need at replay.
struct GraphState {
  uint32_t id = 0;
  uint32_t stream_id = 0;  // captured from
  bool capturing = true;
  std::vector<isa::Packet> packets;
  std::vector<uint64_t> arg_blocks;            // launch argument blocks it owns (take_arg_block)
  std::map<uint64_t, uint64_t> uses;           // malloc() allocation -> its generation at capture
  uint64_t buffer = 0;                         // the command buffer, once instantiated
  std::shared_ptr<StreamState> replay_stream;  // of the latest replay
  uint64_t replay_seq = 0;
};

}  // namespace mtia
