// Graphs: the device work of a stream captured as packets, written once into a command buffer
// in device memory, and replayed with one ExecBuffer packet (docs/architecture.md).
//
// Capture happens in Impl::submit (capture_packet) and in launch (capture_launch): the packets
// a call would have queued are kept instead. What a packet's completion would have done at
// once is done by the graph instead: a launch's argument block stays the graph's until it is
// destroyed. Calls that wait for the stream or touch host memory cannot be captured: they end
// the capture (refuse_in_capture). Each allocation the packets touch is noted with its
// generation, so that a replay after it was freed is refused before anything is queued.
#include <fmt/format.h>

#include <cstring>

#include "device_impl.h"
#include "mtia/isa/decode.h"
#include "raise.h"

namespace mtia {

namespace {

std::shared_ptr<GraphState> graph_state(const Device::Impl& d, Graph g) {
  auto it = d.graphs.find(g.id);
  if (it == d.graphs.end()) {
    throw Error(ErrorKind::kInvalidHandle,
                fmt::format("graph {} does not exist (never returned by end_capture, or "
                            "destroyed)",
                            g.id));
  }
  return it->second;
}

}  // namespace

void Device::Impl::note_use_locked(GraphState& g, uint64_t addr) {
  if (const auto use = memory->find_use(addr)) g.uses[use->address] = use->generation;
}

bool Device::Impl::capture_packet(StreamState& s, const isa::Packet& packet) {
  std::lock_guard lock(mu);
  if (!s.capture) return false;
  GraphState& g = *s.capture;
  std::visit(
      [&](const auto& p) {
        using P = std::decay_t<decltype(p)>;
        const auto device = static_cast<uint8_t>(isa::AddressSpace::kDevice);
        if constexpr (std::is_same_v<P, isa::DmaCopyPacket>) {
          if (p.src.space == device) note_use_locked(g, p.src.addr);
          if (p.dst.space == device) note_use_locked(g, p.dst.addr);
        } else if constexpr (std::is_same_v<P, isa::FillPacket>) {
          note_use_locked(g, p.dst.addr);
        }
      },
      packet);
  g.packets.push_back(packet);
  return true;
}

bool Device::Impl::capture_launch(StreamState& s, const isa::LaunchPacket& packet,
                                  uint64_t args_addr, const std::vector<uint64_t>& pointers) {
  std::lock_guard lock(mu);
  if (!s.capture) return false;
  GraphState& g = *s.capture;
  for (uint64_t p : pointers) note_use_locked(g, p);
  if (args_addr != 0) g.arg_blocks.push_back(args_addr);
  g.packets.push_back(packet);
  return true;
}

void Device::Impl::refuse_in_capture(StreamState& s, const std::string& what, const char* why) {
  std::shared_ptr<GraphState> g;
  {
    std::lock_guard lock(mu);
    if (!s.capture) return;
    g = std::move(s.capture);
    s.capture.reset();
    graphs.erase(g->id);
  }
  for (uint64_t block : g->arg_blocks) give_arg_block(block);
  throw Error(
      ErrorKind::kInvalidArgument,
      fmt::format("{} on stream {}, which is capturing a graph: {} cannot be captured ({}); "
                  "the capture has ended and is discarded. Call it after end_capture()",
                  what, s.id, what, why));
}

void Device::begin_capture(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "begin_capture");
  auto s = d.stream_state(stream);
  call.set_detail(fmt::format("stream {}", s->id));
  std::lock_guard lock(d.mu);
  if (s->capture) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("begin_capture: stream {} is already capturing graph {}; call "
                            "end_capture() first",
                            s->id, s->capture->id));
  }
  auto g = std::make_shared<GraphState>();
  g->id = d.next_graph_id++;
  g->stream_id = s->id;
  d.graphs[g->id] = g;
  s->capture = std::move(g);
}

Graph Device::end_capture(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "end_capture");
  auto s = d.stream_state(stream);
  std::lock_guard lock(d.mu);
  if (!s->capture) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("end_capture: stream {} is not capturing (begin_capture() was not "
                            "called, or an error ended the capture)",
                            s->id));
  }
  auto g = std::move(s->capture);
  s->capture.reset();
  g->capturing = false;
  call.set_detail(
      fmt::format("stream {}: graph {} of {} packets", s->id, g->id, g->packets.size()));
  return Graph{g->id};
}

bool Device::is_capturing(Stream stream) const {
  auto s = impl_->stream_state(stream);
  std::lock_guard lock(impl_->mu);
  return s->capture != nullptr;
}

void Device::instantiate(Graph graph) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "instantiate");
  std::shared_ptr<GraphState> g;
  {
    std::lock_guard lock(d.mu);
    g = graph_state(d, graph);
    if (g->capturing) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("instantiate: graph {} is still being captured on stream {}; call "
                              "end_capture() first",
                              g->id, g->stream_id));
    }
    if (g->buffer != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("instantiate: graph {} is already instantiated", g->id));
    }
  }
  call.set_detail(fmt::format("graph {}: {} packets", g->id, g->packets.size()));
  if (g->packets.empty()) return;  // nothing to run: replay queues nothing
  if (g->packets.size() > isa::kMaxExecBufferPackets) {
    throw Error(ErrorKind::kInvalidArgument,
                fmt::format("instantiate: graph {} has {} packets; a command buffer holds at "
                            "most {}",
                            g->id, g->packets.size(), isa::kMaxExecBufferPackets));
  }
  // The packets as the driver would have written them into a ring (its submit sets these).
  std::vector<uint8_t> bytes(g->packets.size() * isa::kPacketSlotBytes);
  for (size_t i = 0; i < g->packets.size(); ++i) {
    isa::Packet p = g->packets[i];
    const auto opcode = static_cast<uint8_t>(p.index() + 1);
    std::visit(
        [&](auto& pk) {
          pk.header.opcode = opcode;
          pk.header.version = isa::kPacketVersion;
          pk.header.flags = 0;
          pk.header.seq = 0;
        },
        p);
    uint8_t slot[isa::kPacketSlotBytes];
    isa::encode_packet(p, slot);
    std::memcpy(bytes.data() + i * isa::kPacketSlotBytes, slot, sizeof slot);
  }
  isa::Result<uint64_t> allocated = d.memory->allocator().allocate(bytes.size());
  if (!allocated) {
    throw Error(ErrorKind::kOutOfMemory,
                fmt::format("instantiate: no device memory for graph {}'s command buffer of {} "
                            "bytes: {}",
                            g->id, bytes.size(), allocated.error().reason));
  }
  const uint64_t buffer = allocated.value();
  if (isa::Status written = d.dev->write_memory(buffer, bytes.data(), bytes.size()); !written) {
    (void)d.memory->allocator().free(buffer);
    raise(written.error(), fmt::format("instantiate: writing graph {}'s command buffer: ", g->id));
  }
  d.memory->add_runtime_block(buffer, bytes.size());
  std::lock_guard lock(d.mu);
  g->buffer = buffer;
}

void Device::replay(Graph graph, Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "replay");
  auto s = d.stream_state(stream);
  d.refuse_in_capture(*s, "replay", "command buffers do not nest");
  std::shared_ptr<GraphState> g;
  isa::ExecBufferPacket p{};
  {
    std::lock_guard lock(d.mu);
    g = graph_state(d, graph);
    if (g->capturing || (g->buffer == 0 && !g->packets.empty())) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("replay: graph {} is not instantiated; call instantiate() after "
                              "end_capture()",
                              g->id));
    }
    for (const auto& [address, number] : g->uses) {
      if (!d.memory->is_live(address, number)) {
        throw Error(ErrorKind::kInvalidPointer,
                    fmt::format("replay: graph {} uses the allocation at 0x{:x}, which was freed "
                                "after the capture; capture the graph again with live buffers",
                                g->id, address));
      }
    }
    p.buffer_addr = g->buffer;
    p.packet_count = static_cast<uint32_t>(g->packets.size());
  }
  call.set_detail(fmt::format("graph {} ({} packets) on stream {}", g->id, p.packet_count, s->id));
  if (p.packet_count == 0) return;
  const uint64_t seq = d.submit(s, p);
  std::lock_guard lock(d.mu);
  g->replay_stream = s;
  g->replay_seq = seq;
}

std::vector<DevicePtr> Device::graph_allocations(Graph graph) const {
  const Impl& d = *impl_;
  std::lock_guard lock(d.mu);
  const auto g = graph_state(d, graph);
  std::vector<DevicePtr> out;
  for (const auto& [address, number] : g->uses) out.emplace_back(address);
  return out;
}

void Device::destroy_graph(Graph graph) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "destroy_graph");
  std::shared_ptr<GraphState> g;
  {
    std::lock_guard lock(d.mu);
    g = graph_state(d, graph);
    if (g->capturing) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("destroy_graph: graph {} is being captured on stream {}; call "
                              "end_capture() first",
                              g->id, g->stream_id));
    }
    d.graphs.erase(g->id);
  }
  // Its buffers may be freed only once no replay can still read them.
  if (g->replay_stream) d.wait_seq(*g->replay_stream, g->replay_seq);
  for (uint64_t block : g->arg_blocks) d.give_arg_block(block);
  if (g->buffer != 0) {
    if (isa::Status freed = d.memory->allocator().free(g->buffer); !freed) {
      d.log->error("freeing graph {}'s command buffer: {}", g->id, freed.error().reason);
    }
    d.memory->remove_runtime_block(g->buffer, g->packets.size() * isa::kPacketSlotBytes);
  }
}

}  // namespace mtia
