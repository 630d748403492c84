// Graphs: the device work of one or more streams captured as packets, written once into a
// command buffer in device memory, and replayed with ExecBuffer packets (docs/architecture.md,
// "Graphs").
//
// Capture happens in Impl::submit (capture_packet), in launch (capture_launch) and in event
// records and waits (capture_record, capture_wait): the packets a call would have queued are
// kept instead, in the branch of the stream that made the call. A stream joins a capture
// (forks) by waiting for an event recorded in it; the origin stream must wait for the work of
// every stream that joined before end_capture (joins). What a packet's completion would have
// done at once is done by the graph instead: a launch's argument block stays the graph's until
// it is destroyed. Calls that wait for a stream or touch host memory cannot be captured: they
// end the capture (refuse_in_capture). Each allocation the packets touch is noted with its
// generation, so that a replay after it was freed is refused before anything is queued.
//
// Replay of a graph of several branches: each branch runs from its part of the command buffer
// on its own hardware queue, so the branches run at once. Records and waits between them are
// Signal and Wait packets on the graph's fences whose values are relative to the ExecBuffer
// packet's fence_base (isa::kPacketFenceRelative), and the base grows by the graph's stride at
// every replay, so a replay's fence values are above all earlier ones. The origin's part
// begins by waiting for the previous replay's last value on its fence and ends by signalling
// it: replays of one graph run one after the other, as CUDA's do, whatever streams they are
// on. The parts of one replay are queued under order_mu, as cross-queue waits are, so no other
// wait can come between them and close a cycle; the origin's part is queued last, so the
// branches wait on the device for its fork before it runs.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

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

bool is_fence_relative(const isa::Packet& p) {
  return std::visit([](const auto& pk) { return (pk.header.flags & isa::kPacketFenceRelative); },
                    p) != 0;
}

isa::SignalPacket graph_signal(uint32_t branch, uint64_t k) {
  isa::SignalPacket s{};
  s.header.flags = isa::kPacketFenceRelative;
  s.addr = branch;  // the fence's address once instantiated
  s.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
  s.value = k;
  return s;
}

isa::WaitPacket graph_wait(uint32_t branch, uint64_t k) {
  isa::WaitPacket w{};
  w.header.flags = isa::kPacketFenceRelative;
  w.addr = branch;  // the fence's address once instantiated
  w.value = k;
  w.condition = static_cast<uint8_t>(isa::WaitCondition::kGreaterEqual);
  return w;
}

// The hardware queues graph replays may use: every queue but the repair queue.
std::vector<uint32_t> replay_queues(const Device::Impl& d) {
  std::vector<uint32_t> out;
  for (uint32_t q = 0; q < d.dev->num_queues(); ++q) {
    if (q != d.repair_queue || d.dev->num_queues() == 1) out.push_back(q);
  }
  return out;
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
  // Fence-relative packets are the graph's own (records and waits), never a caller's.
  isa::Packet kept = packet;
  std::visit([](auto& p) { p.header.flags &= static_cast<uint16_t>(~isa::kPacketFenceRelative); },
             kept);
  g.branches[s.capture_branch].packets.push_back(kept);
  return true;
}

bool Device::Impl::capture_launch(StreamState& s, const isa::LaunchPacket& packet,
                                  uint64_t args_addr, const std::vector<uint64_t>& pointers) {
  std::lock_guard lock(mu);
  if (!s.capture) return false;
  GraphState& g = *s.capture;
  for (uint64_t p : pointers) note_use_locked(g, p);
  if (args_addr != 0) g.arg_blocks.push_back(args_addr);
  g.branches[s.capture_branch].packets.push_back(packet);
  return true;
}

std::vector<uint64_t> Device::Impl::discard_capture_locked(std::shared_ptr<GraphState> g) {
  // `g` is a copy: the streams' own pointers to it are reset below.
  for (GraphBranch& b : g->branches) {
    if (b.stream->capture == g) {
      b.stream->capture.reset();
      b.stream->capture_branch = 0;
    }
  }
  graphs.erase(g->id);
  g->capturing = false;
  return std::move(g->arg_blocks);
}

void Device::Impl::refuse_in_capture(StreamState& s, const std::string& what, const char* why) {
  std::vector<uint64_t> blocks;
  uint32_t graph = 0;
  {
    std::lock_guard lock(mu);
    if (!s.capture) return;
    graph = s.capture->id;
    blocks = discard_capture_locked(s.capture);
  }
  for (uint64_t block : blocks) give_arg_block(block);
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("{} on stream {}, which is capturing graph {}: {} cannot be captured "
                          "({}); the capture has ended and is discarded. Call it after "
                          "end_capture()",
                          what, s.id, graph, what, why));
}

bool Device::Impl::capture_record(StreamState& s, EventState& ev) {
  std::lock_guard lock(mu);
  std::lock_guard event_lock(ev.mu);
  if (!s.capture) {
    ev.capture_graph = 0;  // a record outside any capture replaces a captured one
    return false;
  }
  GraphBranch& b = s.capture->branches[s.capture_branch];
  const uint64_t k = ++b.records;
  b.packets.push_back(graph_signal(s.capture_branch, k));
  ev.capture_graph = s.capture->id;
  ev.capture_branch = s.capture_branch;
  ev.capture_value = k;
  return true;
}

bool Device::Impl::capture_wait(const std::shared_ptr<StreamState>& s, EventState& ev) {
  std::string refusal;
  std::vector<uint64_t> blocks;
  {
    std::lock_guard lock(mu);
    uint32_t event_graph = 0, event_branch = 0;
    uint64_t event_value = 0;
    bool recorded = false;
    {
      std::lock_guard event_lock(ev.mu);
      event_graph = ev.capture_graph;
      event_branch = ev.capture_branch;
      event_value = ev.capture_value;
      recorded = ev.recorded;
    }
    const std::shared_ptr<GraphState> mine = s->capture;
    if (event_graph == 0 && !mine) return false;  // no capture involved
    if (event_graph == 0) {
      if (!recorded) return true;  // nothing to wait for, as outside a capture
      refusal = fmt::format(
          "wait_event on stream {}, which is capturing graph {}, for event {} recorded outside "
          "the capture: a graph can only depend on work captured in it (CUDA refuses this "
          "too). The capture has ended and is discarded. Wait for the event before "
          "begin_capture(), or record it inside the capture",
          s->id, mine->id, ev.id);
    } else {
      auto it = graphs.find(event_graph);
      const std::shared_ptr<GraphState> theirs =
          it != graphs.end() && it->second->capturing ? it->second : nullptr;
      if (!theirs) {
        refusal = fmt::format(
            "wait_event on stream {} for event {}: the event was last recorded during the "
            "capture of graph {}, which has ended; that record runs only when the graph "
            "replays, so there is nothing to wait for. Record the event again outside a "
            "capture (after replay()){}",
            s->id, ev.id, event_graph,
            mine ? fmt::format(". Stream {} was capturing graph {}: that capture has ended and "
                               "is discarded",
                               s->id, mine->id)
                 : "");
      } else if (mine && mine != theirs) {
        refusal = fmt::format(
            "wait_event on stream {}, which is capturing graph {}, for event {} recorded in "
            "the capture of graph {}: captures are isolated from one another (CUDA refuses "
            "this too). The capture of graph {} has ended and is discarded",
            s->id, mine->id, ev.id, theirs->id, mine->id);
      } else {
        if (!mine) {
          // The fork: the stream joins the capture, as a branch of its own.
          s->capture = theirs;
          s->capture_branch = static_cast<uint32_t>(theirs->branches.size());
          theirs->branches.push_back(GraphBranch{s, {}, 0});
        }
        // On the same stream the order is already kept.
        if (s->capture_branch != event_branch) {
          theirs->branches[s->capture_branch].packets.push_back(
              graph_wait(event_branch, event_value));
        }
        return true;
      }
    }
    if (mine) blocks = discard_capture_locked(mine);
  }
  for (uint64_t block : blocks) give_arg_block(block);
  throw Error(ErrorKind::kInvalidArgument, refusal);
}

void Device::Impl::refuse_captured_event(EventState& ev, const char* what) {
  uint32_t graph = 0;
  {
    std::lock_guard lock(ev.mu);
    graph = ev.capture_graph;
  }
  if (graph == 0) return;
  throw Error(ErrorKind::kInvalidArgument,
              fmt::format("{}: event {} was last recorded during the capture of graph {}; that "
                          "record runs only when the graph replays. Record the event outside a "
                          "capture (e.g. after replay()) and {} that",
                          what, ev.id, graph, what));
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
  g->branches.push_back(GraphBranch{s, {}, 0});
  d.graphs[g->id] = g;
  s->capture = std::move(g);
  s->capture_branch = 0;
}

namespace {

// The branch and position of each relative Signal, by (branch, value).
using SignalAt = std::map<std::pair<uint32_t, uint64_t>, size_t>;

SignalAt signal_positions(const GraphState& g) {
  SignalAt at;
  for (uint32_t b = 0; b < g.branches.size(); ++b) {
    const auto& packets = g.branches[b].packets;
    for (size_t i = 0; i < packets.size(); ++i) {
      if (const auto* sig = std::get_if<isa::SignalPacket>(&packets[i]);
          sig != nullptr && is_fence_relative(packets[i])) {
        at[{b, sig->value}] = i;
      }
    }
  }
  return at;
}

// How many leading packets of each branch the origin's last packet depends on, through the
// waits between branches. What lies beyond is not joined.
std::vector<size_t> joined_prefixes(const GraphState& g) {
  const SignalAt at = signal_positions(g);
  std::vector<size_t> need(g.branches.size(), 0);
  std::vector<size_t> scanned(g.branches.size(), 0);
  need[0] = g.branches[0].packets.size();
  for (bool grew = true; grew;) {
    grew = false;
    for (uint32_t b = 0; b < g.branches.size(); ++b) {
      const auto& packets = g.branches[b].packets;
      for (; scanned[b] < need[b]; ++scanned[b]) {
        const isa::Packet& p = packets[scanned[b]];
        const auto* w = std::get_if<isa::WaitPacket>(&p);
        if (w == nullptr || !is_fence_relative(p)) continue;
        const auto from = static_cast<uint32_t>(w->addr);
        const size_t upto = at.at({from, w->value}) + 1;
        if (upto > need[from]) {
          need[from] = upto;
          grew = true;
        }
      }
    }
  }
  return need;
}

}  // namespace

Graph Device::end_capture(Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "end_capture");
  auto s = d.stream_state(stream);
  const size_t queues = replay_queues(d).size();
  std::string refusal;
  std::vector<uint64_t> blocks;
  {
    std::lock_guard lock(d.mu);
    if (!s->capture) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("end_capture: stream {} is not capturing (begin_capture() was not "
                              "called, or an error ended the capture)",
                              s->id));
    }
    const std::shared_ptr<GraphState> g = s->capture;
    if (s->capture_branch != 0) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("end_capture: stream {} joined the capture of graph {}, which "
                              "stream {} began; call end_capture() on stream {}",
                              s->id, g->id, g->stream_id, g->stream_id));
    }
    const std::vector<size_t> need = joined_prefixes(*g);
    for (uint32_t b = 1; b < g->branches.size() && refusal.empty(); ++b) {
      auto& packets = g->branches[b].packets;
      // Trailing waits and records are not work: a stream that only waited, or recorded an
      // event nothing in the graph waits for, has nothing to join.
      const bool work_after =
          std::any_of(packets.begin() + static_cast<ptrdiff_t>(need[b]), packets.end(),
                      [](const isa::Packet& p) {
                        return !std::holds_alternative<isa::WaitPacket>(p) && !is_fence_relative(p);
                      });
      if (work_after) {
        refusal = fmt::format(
            "end_capture: graph {} has unjoined work: stream {} joined the capture and queued "
            "work that stream {} (which began the capture) does not wait for. Before "
            "end_capture(), record an event on stream {} after its last work and make stream "
            "{} wait for it. The capture has ended and is discarded",
            g->id, g->branches[b].stream->id, g->stream_id, g->branches[b].stream->id,
            g->stream_id);
      } else {
        packets.resize(need[b]);
      }
    }
    size_t busy = 0;
    for (const auto& b : g->branches) busy += b.packets.empty() ? 0 : 1;
    if (refusal.empty() && busy > queues) {
      refusal = fmt::format(
          "end_capture: graph {} has work on {} streams, but the device has {} hardware queues "
          "for a replay to run them on; capture it with fewer streams. The capture has ended "
          "and is discarded",
          g->id, busy, queues);
    }
    if (!refusal.empty()) {
      blocks = d.discard_capture_locked(g);
    } else {
      // Records nothing in the graph waits for need no packet.
      std::set<std::pair<uint32_t, uint64_t>> waited;
      for (const auto& b : g->branches) {
        for (const isa::Packet& p : b.packets) {
          if (const auto* w = std::get_if<isa::WaitPacket>(&p); w && is_fence_relative(p)) {
            waited.insert({static_cast<uint32_t>(w->addr), w->value});
          }
        }
      }
      for (uint32_t b = 0; b < g->branches.size(); ++b) {
        auto& packets = g->branches[b].packets;
        std::erase_if(packets, [&](const isa::Packet& p) {
          const auto* sig = std::get_if<isa::SignalPacket>(&p);
          return sig && is_fence_relative(p) && !waited.contains({b, sig->value});
        });
      }
      for (GraphBranch& b : g->branches) {
        b.stream->capture.reset();
        b.stream->capture_branch = 0;
      }
      g->capturing = false;
      call.set_detail(fmt::format("stream {}: graph {} of {} packets on {} streams", s->id, g->id,
                                  g->packet_count(), busy));
      return Graph{g->id};
    }
  }
  for (uint64_t block : blocks) d.give_arg_block(block);
  throw Error(ErrorKind::kInvalidArgument, refusal);
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
  // Captured packets are not changed after end_capture: read without the lock.
  bool fenced = false;
  uint64_t stride = 1;
  for (const GraphBranch& b : g->branches) {
    for (const isa::Packet& p : b.packets) fenced = fenced || is_fence_relative(p);
    stride = std::max(stride, b.records + 1);
  }
  call.set_detail(fmt::format("graph {}: {} packets", g->id, g->packet_count()));
  if (g->packet_count() == 0) return;  // nothing to run: replay queues nothing

  // Each branch's packets; a graph with fences gets the origin's wait for the previous replay
  // and its signal of this one's end (value `stride`, above any record's).
  std::vector<std::vector<isa::Packet>> parts;
  for (const GraphBranch& b : g->branches) parts.push_back(b.packets);
  if (fenced) {
    parts[0].insert(parts[0].begin(), graph_wait(0, 0));
    parts[0].push_back(graph_signal(0, stride));
  }
  for (size_t b = 0; b < parts.size(); ++b) {
    if (parts[b].size() > isa::kMaxExecBufferPackets) {
      throw Error(ErrorKind::kInvalidArgument,
                  fmt::format("instantiate: graph {} has {} packets on stream {}; a command "
                              "buffer holds at most {}",
                              g->id, parts[b].size(), g->branches[b].stream->id,
                              isa::kMaxExecBufferPackets));
    }
  }

  // The graph's fences: taken from the events' pool, set to a base above every value they held.
  std::vector<FenceSlot> fences;
  uint64_t base = 0;
  auto give_fences = [&] {
    for (FenceSlot& f : fences) {
      f.value = std::max(f.value, base);
      d.fence_slots.give(f);
    }
  };
  if (fenced) {
    for (size_t b = 0; b < g->branches.size(); ++b) {
      try {
        fences.push_back(d.take_fence_slot());
      } catch (...) {
        give_fences();
        throw;
      }
      base = std::max(base, fences.back().value);
    }
    // The slots are idle (an event's slot goes back once its last write landed).
    for (const FenceSlot& f : fences) {
      if (isa::Status set = d.dev->write_memory(f.addr, &base, sizeof base); !set) {
        give_fences();
        raise(set.error(), fmt::format("instantiate: setting graph {}'s fences: ", g->id));
      }
    }
  }

  // The packets as the driver would have written them into a ring (its submit sets these).
  uint64_t slots = 0;
  for (const auto& p : parts) slots += p.size();
  std::vector<uint8_t> bytes(slots * isa::kPacketSlotBytes);
  std::vector<std::pair<uint32_t, uint32_t>> layout;
  size_t at = 0;
  for (const auto& part : parts) {
    layout.emplace_back(static_cast<uint32_t>(at), static_cast<uint32_t>(part.size()));
    for (isa::Packet p : part) {
      const auto opcode = static_cast<uint8_t>(p.index() + 1);
      std::visit(
          [&](auto& pk) {
            using P = std::decay_t<decltype(pk)>;
            const uint16_t relative = pk.header.flags & isa::kPacketFenceRelative;
            if constexpr (std::is_same_v<P, isa::SignalPacket> ||
                          std::is_same_v<P, isa::WaitPacket>) {
              if (relative) pk.addr = fences.at(pk.addr).addr;
            }
            pk.header.opcode = opcode;
            pk.header.version = isa::kPacketVersion;
            pk.header.flags = relative;
            pk.header.seq = 0;
          },
          p);
      uint8_t slot[isa::kPacketSlotBytes];
      isa::encode_packet(p, slot);
      std::memcpy(bytes.data() + at * isa::kPacketSlotBytes, slot, sizeof slot);
      ++at;
    }
  }
  isa::Result<uint64_t> allocated = d.memory->allocator().allocate(bytes.size());
  if (!allocated) {
    give_fences();
    throw Error(ErrorKind::kOutOfMemory,
                fmt::format("instantiate: no device memory for graph {}'s command buffer of {} "
                            "bytes: {}",
                            g->id, bytes.size(), allocated.error().reason));
  }
  const uint64_t buffer = allocated.value();
  if (isa::Status written = d.dev->write_memory(buffer, bytes.data(), bytes.size()); !written) {
    (void)d.memory->allocator().free(buffer);
    give_fences();
    raise(written.error(), fmt::format("instantiate: writing graph {}'s command buffer: ", g->id));
  }
  d.memory->add_runtime_block(buffer, bytes.size());
  std::lock_guard lock(d.mu);
  g->buffer = buffer;
  g->buffer_bytes = bytes.size();
  g->parts = std::move(layout);
  g->fences = std::move(fences);
  g->fence_base = base;
  g->fence_stride = fenced ? stride : 0;
}

void Device::Impl::repair_graph_fences(std::vector<FenceSlot> fences, uint64_t value,
                                       std::shared_ptr<std::atomic<int>> pending) {
  // A part of a replay failed: the other parts may wait forever for its fences. Write them all
  // to the replay's end value (below every value of the next replay) from the repair queue.
  auto left = std::make_shared<std::atomic<size_t>>(fences.size());
  auto one_done = [this, left, pending](const driver::Completion& c) {
    if (!c.ok && !c.lost) log->error("repairing a graph's fence failed: {}", c.message);
    if (left->fetch_sub(1) == 1) pending->fetch_sub(1);
  };
  for (const FenceSlot& f : fences) {
    isa::SignalPacket sig{};
    sig.addr = f.addr;
    sig.space = static_cast<uint8_t>(isa::AddressSpace::kDevice);
    sig.value = value;
    if (isa::Result<uint64_t> submitted = dev->submit(repair_queue, sig, one_done); !submitted) {
      driver::Completion failed;
      failed.ok = false;
      failed.lost = true;  // only a lost device refuses
      one_done(failed);
    }
  }
}

void Device::replay(Graph graph, Stream stream) {
  Impl& d = *impl_;
  ApiCall call(*d.trace, "replay");
  auto s = d.stream_state(stream);
  d.refuse_in_capture(*s, "replay", "command buffers do not nest");
  std::shared_ptr<GraphState> g;
  struct Part {
    uint32_t branch;
    uint32_t queue;
    isa::ExecBufferPacket packet;
  };
  std::vector<Part> parts;
  uint64_t base = 0, stride = 0;
  std::vector<FenceSlot> fences;
  {
    std::lock_guard lock(d.mu);
    g = graph_state(d, graph);
    if (g->capturing || (g->buffer == 0 && g->packet_count() != 0)) {
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
    // The origin's part on the stream's queue; every other branch on a queue of its own,
    // preferably the one of the stream it was captured from.
    std::vector<uint32_t> used;
    const std::vector<uint32_t> all = replay_queues(d);
    for (uint32_t b = 0; b < g->parts.size(); ++b) {
      const auto [first, count] = g->parts[b];
      if (count == 0) continue;
      uint32_t q = s->queue;
      if (b != 0) {
        q = g->branches[b].stream->queue;
        if (std::find(used.begin(), used.end(), q) != used.end()) {
          auto free = std::find_if(all.begin(), all.end(), [&](uint32_t c) {
            return std::find(used.begin(), used.end(), c) == used.end();
          });
          // end_capture checked there are enough queues.
          if (free == all.end()) {
            throw Error(ErrorKind::kInvalidArgument,
                        fmt::format("replay: graph {} needs more hardware queues than the "
                                    "device has",
                                    g->id));
          }
          q = *free;
        }
      }
      used.push_back(q);
      Part part{b, q, {}};
      part.packet.buffer_addr = g->buffer + uint64_t{first} * isa::kPacketSlotBytes;
      part.packet.packet_count = count;
      part.packet.fence_base = g->fence_base;
      parts.push_back(part);
    }
    base = g->fence_base;
    stride = g->fence_stride;
    fences = g->fences;
    g->fence_base += stride;
  }
  call.set_detail(fmt::format("graph {} ({} packets, {} queues) on stream {}", g->id,
                              g->packet_count(), parts.size(), s->id));
  if (parts.empty()) return;
  if (fences.empty()) {
    // One branch, no fences: one packet on the stream.
    const uint64_t seq = d.submit(s, parts[0].packet);
    std::lock_guard lock(d.mu);
    g->replay_stream = s;
    g->replay_parts = {{s->queue, seq}};
    return;
  }
  // A failed part: the stream reports it, and the graph's fences are repaired once per replay
  // so no part of this replay or the next waits forever.
  auto repaired = std::make_shared<std::atomic<bool>>(false);
  auto on_failure = [&d, s, repaired, fences, value = base + stride,
                     pending = g->repairs](const driver::Completion& c) {
    if (c.ok) return;
    s->note_failure(c.message);
    if (repaired->exchange(true)) return;
    pending->fetch_add(1);
    d.defer([&d, fences, value, pending] { d.repair_graph_fences(fences, value, pending); });
  };
  std::vector<std::pair<uint32_t, uint64_t>> submitted(1);  // the origin's part first
  {
    std::lock_guard order(d.order_mu);
    // The other branches first, each on its queue: each begins by waiting for a fence that its
    // fork writes, so it waits until the origin's part runs. The origin's part last, on the
    // stream. Then every branch is already on the device when the origin starts, and their
    // simulated start times do not depend on when the host's doorbells arrive (a served
    // device runs while they are on their way).
    for (size_t i = 1; i < parts.size(); ++i) {
      isa::Result<uint64_t> seq = d.dev->submit(parts[i].queue, parts[i].packet, on_failure);
      if (!seq) {
        // Only a lost device refuses (before the origin's part is queued).
        d.check_lost();
        throw Error(ErrorKind::kDeviceUnavailable,
                    fmt::format("replay: cannot submit graph {}'s part to hardware queue {}: {}",
                                g->id, parts[i].queue, seq.error().reason));
      }
      ApiCall::submitted(*d.trace, parts[i].queue, seq.value());
      submitted.emplace_back(parts[i].queue, seq.value());
    }
    submitted[0] = {s->queue, d.submit(s, parts[0].packet, on_failure)};
  }
  std::lock_guard lock(d.mu);
  g->replay_stream = s;
  g->replay_parts = std::move(submitted);
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
  // Its buffers may be freed only once no replay can still read them. Replays of a graph with
  // fences run one after the other, so the latest one's parts are the last.
  for (size_t i = 0; i < g->replay_parts.size(); ++i) {
    const auto [queue, seq] = g->replay_parts[i];
    if (i == 0) {
      d.wait_seq(*g->replay_stream, seq);
    } else if (isa::Result<driver::Completion> c = d.dev->wait(queue, seq); !c) {
      d.log->error("destroy_graph: waiting for graph {}'s part on queue {}: {}", g->id, queue,
                   c.error().reason);
    }
  }
  // A repair still writing its fences: they go back to the pool after it.
  while (g->repairs->load() > 0 && d.dev->lost_reason().empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (FenceSlot f : g->fences) {
    f.value = g->fence_base;  // above every value a replay wrote
    d.fence_slots.give(f);
  }
  for (uint64_t block : g->arg_blocks) d.give_arg_block(block);
  if (g->buffer != 0) {
    if (isa::Status freed = d.memory->allocator().free(g->buffer); !freed) {
      d.log->error("freeing graph {}'s command buffer: {}", g->id, freed.error().reason);
    }
    d.memory->remove_runtime_block(g->buffer, g->buffer_bytes);
  }
}

}  // namespace mtia
