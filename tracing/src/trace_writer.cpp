#include "mtia/trace/trace_writer.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "json_out.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/error_code.h"
#include "mtia/isa/packets.h"
#include "packet_index.h"

namespace mtia::trace {
namespace {

using detail::JsonOut;
using detail::PacketIndex;

// Processes and tracks (pid, tid). Host thread n is tid n.
constexpr uint32_t kHostPid = 1;
constexpr uint32_t kDevicePid = 2;
constexpr uint32_t kCompletionTrack = 1'000'000;  // host: completions as the driver gets them
constexpr uint32_t kCpTrack = 1;
constexpr uint32_t kQueueTrack0 = 100;
constexpr uint32_t kDmaTrack0 = 200;
constexpr uint32_t kLinkTrack0 = 260;  // link l's send track is + 2l, its receive track + 2l + 1
constexpr uint32_t kLaunchTrack = 299;
constexpr uint32_t kPeTrack0 = 300;  // the core of chip PE p: its kernel spans
// Unit tracks of chip PE p: kUnitTrack0 + p * kUnitStride + unit (DPE, SE, RE, MLU), and its
// local-DMA lanes from + kDmaLane0.
constexpr uint32_t kUnitTrack0 = 1000;
constexpr uint32_t kUnitStride = 64;
constexpr uint32_t kDmaLane0 = 8;
static_assert(kDmaLane0 + Recording::kMaxDmaLanes == kUnitStride);

// A unit operation's slot among its PE's unit tracks, and the track.
uint32_t unit_slot(const Recording::PeUnitOp& op) {
  return op.unit == Unit::kDma ? kDmaLane0 + op.lane : static_cast<uint32_t>(op.unit);
}
uint32_t unit_track(const Recording::PeUnitOp& op) {
  return kUnitTrack0 + op.pe * kUnitStride + unit_slot(op);
}

const char* opcode_label(uint8_t op) {
  return op < static_cast<uint8_t>(isa::Opcode::kCount)
             ? isa::opcode_name(static_cast<isa::Opcode>(op))
             : "unknown";
}

const char* error_label(uint16_t e) {
  return e < static_cast<uint16_t>(isa::ErrorCode::kCount)
             ? isa::error_code_name(static_cast<isa::ErrorCode>(e))
             : "unknown";
}

bool is_host(uint8_t space) {
  return space == static_cast<uint8_t>(isa::AddressSpace::kHost);
}

// Which memory an address of a DMA side is in.
const char* memory_label(uint8_t space, uint64_t addr) {
  if (is_host(space)) return "host";
  if (addr >= isa::kLocalStoreBase) return "local store";
  if (addr >= isa::kSramBase) return "sram";
  return "dram";
}

// What goes into traceEvents, in the order of the sort key.
enum class ItemType : uint8_t {
  kCpStep,
  kPacket,
  kDma,
  kLaunch,
  kPeKernel,
  kPeUnit,
  kFinding,
  kHostCall,
  kHostSubmit,
  kCompletion
};
struct Item {
  uint64_t ts;
  uint8_t rank;    // at equal times: causes before effects, parents before children
  uint64_t order;  // then: host calls in the order they started, device events as recorded
  uint64_t dur;
  ItemType type;
  uint32_t index;  // into the recording's list of that type
  uint32_t sub;    // a host call's packet
};

std::vector<Item> sorted_items(const Recording& rec, const PacketIndex& index) {
  std::vector<Item> items;
  items.reserve(rec.device_events() * 5 / 4 + rec.host_events());
  for (uint32_t i = 0; i < rec.cp_steps.size(); ++i) {
    const auto& e = rec.cp_steps[i];
    items.push_back({e.start_ps, 2, e.ordinal, e.dur_ps, ItemType::kCpStep, i, 0});
  }
  for (uint32_t i = 0; i < rec.packets.size(); ++i) {
    const auto& p = rec.packets[i];
    const PacketEvent& e = p.event;
    const uint64_t dur = e.end_ps >= e.start_ps ? e.end_ps - e.start_ps : 0;
    items.push_back({e.start_ps, 3, p.ordinal, dur, ItemType::kPacket, i, 0});
    if (index.linked(e.queue, e.seq)) {
      items.push_back({e.start_ps + dur, 7, p.ordinal, 0, ItemType::kCompletion, i, 0});
    }
  }
  for (uint32_t i = 0; i < rec.dmas.size(); ++i) {
    const auto& d = rec.dmas[i];
    const DmaEvent& e = d.event;
    if (e.link) {
      // On its link direction's track while it occupies it (bytes / bandwidth); the latency
      // follows, overlapping the next transfer's turn, so it is in the args.
      items.push_back({e.link_start_ps, 4, d.ordinal, e.link_busy_ps, ItemType::kDma, i, 0});
      continue;
    }
    const uint64_t dur = e.end_ps >= e.start_ps ? e.end_ps - e.start_ps : 0;
    items.push_back({e.start_ps, 4, d.ordinal, dur, ItemType::kDma, i, 0});
  }
  for (uint32_t i = 0; i < rec.launches.size(); ++i) {
    const auto& l = rec.launches[i];
    if (!l.ended) continue;  // still running when the trace was written
    items.push_back(
        {l.info.start_ps, 4, l.ordinal, l.end_ps - l.info.start_ps, ItemType::kLaunch, i, 0});
  }
  for (uint32_t i = 0; i < rec.pe_kernels.size(); ++i) {
    const auto& k = rec.pe_kernels[i];
    items.push_back({k.start_ps, 5, k.ordinal, k.end_ps - k.start_ps, ItemType::kPeKernel, i, 0});
  }
  for (uint32_t i = 0; i < rec.pe_units.size(); ++i) {
    const auto& u = rec.pe_units[i];
    items.push_back({u.start_ps, 6, u.ordinal, u.end_ps - u.start_ps, ItemType::kPeUnit, i, 0});
  }
  for (uint32_t i = 0; i < rec.findings.size(); ++i) {
    const auto& f = rec.findings[i];
    items.push_back({f.ts_ps, 8, f.ordinal, 0, ItemType::kFinding, i, 0});
  }
  for (uint32_t c = 0; c < rec.host_calls.size(); ++c) {
    const HostCall& call = rec.host_calls[c];
    const uint64_t end = std::max(call.end_ps, call.start_ps);
    items.push_back({call.start_ps, 0, call.order, end - call.start_ps, ItemType::kHostCall, c, 0});
    for (uint32_t p = 0; p < call.packets.size(); ++p) {
      // Inside the call: its submit times lie between the call's start and end.
      const uint64_t ts = std::clamp(call.packets[p].submit_ps, call.start_ps, end);
      items.push_back({ts, 1, call.order, 0, ItemType::kHostSubmit, c, p});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.order < b.order;
  });
  return items;
}

class Writer {
 public:
  Writer(const Recording& rec, std::ostream& out) : rec_(rec), index_(rec), j_(out) {}

  void write(TraceLevel level, uint64_t now_ps) {
    j_.begin_object(",\n");  // otherData, then traceEvents on lines of their own
    metadata(level, now_ps);
    j_.key("traceEvents").begin_array(",\n").raw("\n");
    tracks();
    for (const Item& it : sorted_items(rec_, index_)) item(it);
    queue_depths();
    bandwidth();
    j_.raw("\n").end_array().end_object().raw("\n");
  }

 private:
  // What the trace holds, what it dropped, and the effective configuration. First, so that
  // readers meet it before the events (Perfetto reads the file in chunks).
  void metadata(TraceLevel level, uint64_t now_ps) {
    j_.key("otherData").begin_object();
    j_.field("format", "mtia-emu trace").field("version", 2);
    j_.field("process", rec_.device.process_name);
    j_.field("time_unit", "ts and dur are microseconds of simulated time");
    j_.field("host_clock",
             "a host call is stamped with the latest simulated time its thread has observed "
             "(end times of the packets it waited for); wall_* fields are host wall-clock time");
    j_.field("trace_level", trace_level_name(level));
    j_.field("max_events", rec_.max_events);
    j_.field("events", uint64_t{rec_.device_events() + rec_.host_events()});
    j_.field("dropped_events", rec_.dropped_all());
    j_.field("dropped_detail_events", rec_.dropped_detail);
    j_.field("dropped_host_calls", rec_.dropped_host_calls);
    j_.field("complete", rec_.complete());
    j_.field("simulated_time_ps", now_ps);
    j_.key("bandwidth_bin_ps").begin_object();
    for (size_t m = 0; m < kNumMemories; ++m) {
      j_.field(memory_name(static_cast<Memory>(m)), rec_.bandwidth[m].width_ps());
    }
    j_.end_object();
    j_.key("memory").begin_object();
    for (size_t m = 0; m < kNumMemories; ++m) {
      j_.key(memory_name(static_cast<Memory>(m))).begin_object();
      j_.field("payload_bytes", rec_.bandwidth[m].total_bytes());
      j_.field("reserved_ps", rec_.bandwidth[m].busy_ps());
      j_.end_object();
    }
    j_.end_object();
    j_.key("config").json(compact_config());
    j_.end_object();
  }

  std::string compact_config() const;

  void meta(uint32_t pid, const char* what, uint32_t tid, const std::string& name) {
    j_.begin_object().field("ph", "M").field("pid", pid).field("tid", tid).field("name", what);
    j_.key("args").begin_object().field("name", name).end_object().end_object();
  }
  void process_sort_index(uint32_t pid) {
    j_.begin_object().field("ph", "M").field("pid", pid).field("name", "process_sort_index");
    j_.key("args").begin_object().field("sort_index", pid).end_object().end_object();
  }
  void track(uint32_t pid, uint32_t tid, const std::string& name, uint32_t sort_index) {
    meta(pid, "thread_name", tid, name);
    j_.begin_object().field("ph", "M").field("pid", pid).field("tid", tid);
    j_.field("name", "thread_sort_index");
    j_.key("args").begin_object().field("sort_index", sort_index).end_object().end_object();
  }

  // Process and track names, and the order of the tracks.
  void tracks() {
    // Host process: one track per host thread that made a call, and the completions.
    if (!rec_.host_calls.empty()) {
      uint32_t host_threads = 0;
      for (const HostCall& c : rec_.host_calls) host_threads = std::max(host_threads, c.thread);
      meta(kHostPid, "process_name", 0, "host (mtia-emu host API)");
      process_sort_index(kHostPid);
      std::vector<bool> seen(host_threads + 1, false);
      for (const HostCall& c : rec_.host_calls) seen[c.thread] = true;
      for (uint32_t t = 1; t <= host_threads; ++t) {
        if (seen[t]) track(kHostPid, t, "host thread " + std::to_string(t), t);
      }
      track(kHostPid, kCompletionTrack, "completions (driver interrupt handler)", kCompletionTrack);
    }

    meta(kDevicePid, "process_name", 0, rec_.device.process_name);
    process_sort_index(kDevicePid);
    track(kDevicePid, kCpTrack, "command processor", kCpTrack);
    for (uint32_t q = 0; q < rec_.device.num_queues; ++q) {
      track(kDevicePid, kQueueTrack0 + q, "queue " + std::to_string(q), kQueueTrack0 + q);
    }
    for (uint32_t e = 0; e < rec_.device.dma_engines; ++e) {
      track(kDevicePid, kDmaTrack0 + e, "dma " + std::to_string(e), kDmaTrack0 + e);
    }
    std::vector<bool> link_tracks;  // the link directions that carried something
    for (const auto& d : rec_.dmas) {
      if (!d.event.link) continue;
      const uint32_t t = 2 * d.event.link_index + (d.event.link_receive ? 1 : 0);
      if (t >= link_tracks.size()) link_tracks.resize(t + 1, false);
      link_tracks[t] = true;
    }
    for (uint32_t t = 0; t < link_tracks.size(); ++t) {
      if (!link_tracks[t]) continue;
      track(kDevicePid, kLinkTrack0 + t,
            "link " + std::to_string(t / 2) + (t % 2 ? " receive" : " send"), kLinkTrack0 + t);
    }
    if (!rec_.launches.empty()) track(kDevicePid, kLaunchTrack, "pe grid (launches)", kLaunchTrack);
    pe_tracks();
    if (rec_.dropped_all() > 0) {
      // A visible note in the process label, so a truncated trace is not mistaken for the run.
      j_.begin_object().field("ph", "M").field("pid", kDevicePid).field("tid", 0);
      j_.field("name", "process_labels").key("args").begin_object();
      j_.field("labels", "trace truncated at " + std::to_string(rec_.max_events) + " events: " +
                             std::to_string(rec_.dropped_all()) + " events dropped (" +
                             std::to_string(rec_.dropped_detail) + " unit operations)");
      j_.end_object().end_object();
    }
  }

  // PE tracks that hold events, named; each PE's unit tracks sort after its core.
  void pe_tracks() {
    uint32_t pes = 0;
    for (const auto& k : rec_.pe_kernels) pes = std::max(pes, k.pe + 1);
    for (const auto& u : rec_.pe_units) pes = std::max(pes, u.pe + 1);
    for (const auto& f : rec_.findings) pes = std::max(pes, f.pe + 1);
    // Per PE: which unit slots hold slices; the last entry is the core.
    std::vector<std::vector<bool>> used(pes, std::vector<bool>(kUnitStride + 1, false));
    for (const auto& k : rec_.pe_kernels) used[k.pe][kUnitStride] = true;
    for (const auto& u : rec_.pe_units) used[u.pe][unit_slot(u)] = true;
    for (const auto& f : rec_.findings) used[f.pe][kUnitStride] = true;
    for (uint32_t p = 0; p < pes; ++p) {
      const std::string pe = "pe " + std::to_string(p);
      const uint32_t base = 10'000 + p * 100;
      if (used[p][kUnitStride]) track(kDevicePid, kPeTrack0 + p, pe, base);
      for (uint32_t u = 0; u < kUnitStride; ++u) {
        if (!used[p][u]) continue;
        const std::string name = u < kDmaLane0 ? pe + " " + unit_name(static_cast<Unit>(u))
                                               : pe + " dma " + std::to_string(u - kDmaLane0);
        track(kDevicePid, kUnitTrack0 + p * kUnitStride + u, name, base + 1 + u);
      }
    }
  }

  // The opening of a complete ("X") slice; the caller adds name, flow and args and closes it.
  void slice(uint32_t pid, uint32_t tid, const char* cat, uint64_t ts, uint64_t dur) {
    j_.begin_object().field("ph", "X").field("cat", cat).field("pid", pid).field("tid", tid);
    j_.key("ts").us(ts).key("dur").us(dur);
  }
  // Flow fields on a slice: one flow per slice (Perfetto's bind_id form).
  void flow(uint32_t queue, uint64_t seq, bool in, bool out) {
    j_.field("bind_id", PacketIndex::flow_key(queue, seq));
    if (in) j_.field("flow_in", true);
    if (out) j_.field("flow_out", true);
  }
  void flow_if_linked(uint32_t queue, uint64_t seq) {
    if (index_.linked(queue, seq)) flow(queue, seq, true, true);
  }

  void item(const Item& it) {
    switch (it.type) {
      case ItemType::kHostCall:
        return host_call(it);
      case ItemType::kHostSubmit:
        return host_submit(it);
      case ItemType::kCompletion:
        return completion(rec_.packets[it.index].event, it.ts);
      case ItemType::kCpStep: {
        const auto& s = rec_.cp_steps[it.index];
        slice(kDevicePid, kCpTrack, "cp", s.start_ps, s.dur_ps);
        j_.field("name", "dispatch").end_object();
        return;
      }
      case ItemType::kPacket:
        return packet(rec_.packets[it.index].event, it.dur);
      case ItemType::kDma:
        return dma(rec_.dmas[it.index], it.dur);
      case ItemType::kLaunch:
        return launch(rec_.launches[it.index], it.dur);
      case ItemType::kPeKernel: {
        const auto& k = rec_.pe_kernels[it.index];
        slice(kDevicePid, kPeTrack0 + k.pe, "kernel", k.start_ps, it.dur);
        j_.field("name", "kernel").end_object();
        return;
      }
      case ItemType::kPeUnit:
        return pe_unit(rec_.pe_units[it.index], it.dur);
      case ItemType::kFinding:
        return finding(rec_.findings[it.index]);
    }
  }

  void host_call(const Item& it) {
    const HostCall& c = rec_.host_calls[it.index];
    slice(kHostPid, c.thread, "host", it.ts, it.dur);
    j_.field("name", c.name).key("args").begin_object();
    j_.field("detail", c.detail).field("packets", uint64_t{c.packets.size()});
    if (!c.error.empty()) j_.field("error", c.error);
    j_.field("wall_start_us", c.wall_start_us).field("wall_us", c.wall_us);
    j_.end_object().end_object();
  }

  void host_submit(const Item& it) {
    const HostCall& c = rec_.host_calls[it.index];
    const HostPacket& p = c.packets[it.sub];
    slice(kHostPid, c.thread, "submit", it.ts, 0);
    j_.field("name", "submit");
    if (index_.linked(p.queue, p.seq)) flow(p.queue, p.seq, false, true);
    j_.key("args").begin_object().field("queue", p.queue).field("seq", p.seq);
    j_.field("label", p.label).end_object().end_object();
  }

  void completion(const PacketEvent& e, uint64_t ts) {
    const std::string* label = index_.label(e.queue, e.seq);
    slice(kHostPid, kCompletionTrack, "completion", ts, 0);
    j_.field("name", "done: " + (label ? *label : std::string(opcode_label(e.opcode))));
    flow(e.queue, e.seq, true, false);
    j_.key("args").begin_object().field("queue", e.queue).field("seq", e.seq);
    j_.field("status", e.status == 0 ? "ok" : "error").end_object().end_object();
  }

  void packet(const PacketEvent& e, uint64_t dur) {
    const std::string* label = index_.label(e.queue, e.seq);
    const bool launch = e.opcode == static_cast<uint8_t>(isa::Opcode::kLaunch);
    slice(kDevicePid, kQueueTrack0 + e.queue, "packet", e.start_ps, dur);
    j_.field("name", launch && label ? "launch " + *label : std::string(opcode_label(e.opcode)));
    flow_if_linked(e.queue, e.seq);
    j_.key("args").begin_object().field("queue", e.queue).field("seq", e.seq);
    j_.field("index", e.index).field("opcode", opcode_label(e.opcode));
    j_.field("status", e.status == 0 ? "ok" : "error").field("error", error_label(e.error));
    if (label) j_.field("label", *label);
    j_.end_object().end_object();
  }

  void dma(const Recording::Dma& d, uint64_t dur) {
    const DmaEvent& e = d.event;
    if (e.link) return link_transfer(d, dur);
    slice(kDevicePid, kDmaTrack0 + d.engine, "dma", e.start_ps, dur);
    j_.field("name", e.fill ? "fill" : "copy");
    flow_if_linked(e.queue, e.seq);
    j_.key("args").begin_object().field("bytes", e.bytes);
    // Host bus addresses are host pointers, which change from run to run: left out.
    if (!e.fill) {
      if (!is_host(e.src_space)) j_.key("src").hex(e.src);
      j_.field("src_space", is_host(e.src_space) ? "host" : "device");
      j_.field("src_memory", memory_label(e.src_space, e.src));
    }
    if (!is_host(e.dst_space)) j_.key("dst").hex(e.dst);
    j_.field("dst_space", is_host(e.dst_space) ? "host" : "device");
    j_.field("dst_memory", memory_label(e.dst_space, e.dst));
    j_.field("effective_bytes", e.effective_bytes).field("error", error_label(e.error));
    if (e.queue != kNoQueue) j_.field("queue", e.queue).field("seq", e.seq);
    j_.end_object().end_object();
  }

  // A link transfer on its link direction's track, while its bytes occupy the direction
  // (bytes / bandwidth); they have all arrived a latency later (arrival_ps).
  void link_transfer(const Recording::Dma& d, uint64_t dur) {
    const DmaEvent& e = d.event;
    const uint32_t track = kLinkTrack0 + 2 * e.link_index + (e.link_receive ? 1 : 0);
    slice(kDevicePid, track, "link", e.link_start_ps, dur);
    j_.field("name", e.link_receive ? "link receive" : "link send");
    // A receive's bytes may have started to cross before its packet was dispatched (they left
    // the peer then): such a slice lies before the packet and joins no flow.
    if (e.link_start_ps >= e.start_ps) flow_if_linked(e.queue, e.seq);
    j_.key("args").begin_object().field("bytes", e.bytes).field("link", e.link_index);
    j_.field("peer", e.peer).field("direction", e.link_receive ? "receive" : "send");
    j_.field("busy_ps", e.link_busy_ps).field("arrival_ps", e.link_end_ps);
    j_.field("latency_ps", e.link_end_ps - e.link_start_ps - e.link_busy_ps);
    j_.field("dma_engine", d.engine);
    j_.field("packet_start_ps", e.start_ps).field("packet_end_ps", e.end_ps);
    j_.field("error", error_label(e.error));
    if (e.queue != kNoQueue) j_.field("queue", e.queue).field("seq", e.seq);
    j_.end_object().end_object();
  }

  void launch(const Recording::Launch& l, uint64_t dur) {
    const LaunchInfo& info = l.info;
    const LaunchStats& s = l.stats;
    const std::string name = index_.launch_name(info);
    slice(kDevicePid, kLaunchTrack, "launch", info.start_ps, dur);
    j_.field("name", name);
    flow_if_linked(info.queue, info.seq);
    j_.key("args").begin_object().field("kernel", name);
    if (info.queue != kNoQueue) j_.field("queue", info.queue).field("seq", info.seq);
    j_.field("grid", std::to_string(info.grid_rows) + "x" + std::to_string(info.grid_cols));
    j_.field("pes", uint64_t{info.grid_rows} * info.grid_cols);
    j_.field("status", l.error == 0 ? "ok" : error_label(l.error));
    j_.field("dur_ps", dur);
    j_.field("dpe_macs_int8", s.macs[0]).field("dpe_macs_16bit", s.macs[1]);
    j_.field("dpe_macs_fp32", s.macs[2]);
    j_.field("se_elements", s.work[static_cast<size_t>(Unit::kSe)]);
    j_.field("re_elements", s.work[static_cast<size_t>(Unit::kRe)]);
    j_.field("mlu_bytes", s.work[static_cast<size_t>(Unit::kMlu)]);
    j_.field("dma_bytes", s.work[static_cast<size_t>(Unit::kDma)]);
    // Of it, what went to or from DRAM and the SRAM (a copy within one counts twice).
    j_.field("dram_bytes", s.memory_bytes[static_cast<size_t>(Memory::kDram)]);
    j_.field("sram_bytes", s.memory_bytes[static_cast<size_t>(Memory::kSram)]);
    j_.field("flops", s.flops());
    j_.field("core_ps", s.core_ps);
    j_.key("busy_ps").begin_object();
    for (size_t u = 0; u < kNumUnits; ++u) j_.field(unit_name(static_cast<Unit>(u)), s.busy_ps[u]);
    j_.end_object().key("ops").begin_object();
    for (size_t u = 0; u < kNumUnits; ++u) j_.field(unit_name(static_cast<Unit>(u)), s.ops[u]);
    j_.end_object().end_object().end_object();
  }

  void pe_unit(const Recording::PeUnitOp& op, uint64_t dur) {
    slice(kDevicePid, unit_track(op), "unit", op.start_ps, dur);
    j_.field("name", unit_name(op.unit)).key("args").begin_object();
    j_.field(op.unit == Unit::kDpe                          ? "macs"
             : op.unit == Unit::kSe || op.unit == Unit::kRe ? "elements"
                                                            : "bytes",
             op.work);
    j_.end_object().end_object();
  }

  // A thread-scoped instant event on the PE's core track, where its kernel slice ends.
  void finding(const Recording::Finding& f) {
    j_.begin_object().field("ph", "i").field("s", "t").field("cat", "sanitizer");
    j_.field("pid", kDevicePid).field("tid", kPeTrack0 + f.pe).key("ts").us(f.ts_ps);
    j_.field("name", "sanitizer: " + f.check).key("args").begin_object();
    j_.field("check", f.check).field("pe", f.pe).field("report", f.report);
    j_.end_object().end_object();
  }

  // Queue depth: packets submitted and not yet completed. A packet counts from its host
  // submit (host clock) - or from its dispatch when no API call submitted it - to its end.
  // Doorbells reach the device at times that vary with host scheduling; these do not.
  void queue_depths() {
    std::vector<std::vector<std::pair<uint64_t, int>>> edges(rec_.device.num_queues);
    for (const auto& p : rec_.packets) {
      const PacketEvent& e = p.event;
      if (e.queue >= edges.size()) continue;
      uint64_t from = e.start_ps;
      if (index_.linked(e.queue, e.seq)) {
        from = std::min(from, index_.host_packet(e.queue, e.seq)->submit_ps);
      }
      const uint64_t dur = e.end_ps >= e.start_ps ? e.end_ps - e.start_ps : 0;
      edges[e.queue].push_back({from, +1});
      edges[e.queue].push_back({e.start_ps + dur, -1});
    }
    for (uint32_t q = 0; q < edges.size(); ++q) {
      std::sort(edges[q].begin(), edges[q].end());  // at equal times completions go first
      int64_t depth = 0;
      for (size_t i = 0; i < edges[q].size(); ++i) {
        depth += edges[q][i].second;
        if (i + 1 < edges[q].size() && edges[q][i + 1].first == edges[q][i].first) continue;
        j_.begin_object().field("ph", "C").field("cat", "queue").field("pid", kDevicePid);
        j_.field("tid", kQueueTrack0 + q).key("ts").us(edges[q][i].first);
        j_.field("name", "queue " + std::to_string(q) + " depth");
        j_.key("args").begin_object().field("packets", static_cast<uint64_t>(depth));
        j_.end_object().end_object();
      }
    }
  }

  // Bandwidth counters: payload bytes per bin of each memory and link, as GB/s.
  void bandwidth() {
    for (size_t m = 0; m < kNumMemories; ++m) {
      const BandwidthBins& b = rec_.bandwidth[m];
      if (b.total_bytes() == 0) continue;
      const std::string name = std::string(memory_name(static_cast<Memory>(m))) + " bandwidth";
      double last = -1;
      for (size_t i = 0; i <= b.bytes().size(); ++i) {
        const double gbps =
            i < b.bytes().size() ? b.bytes()[i] / static_cast<double>(b.width_ps()) * 1000.0 : 0.0;
        if (gbps == last) continue;
        last = gbps;
        j_.begin_object().field("ph", "C").field("cat", "bandwidth").field("pid", kDevicePid);
        j_.field("tid", 0).key("ts").us(i * b.width_ps()).field("name", name);
        j_.key("args").begin_object().field("GB/s", gbps).end_object().end_object();
      }
    }
  }

  const Recording& rec_;
  PacketIndex index_;
  JsonOut j_;
};

std::string Writer::compact_config() const {
  const nlohmann::json config = nlohmann::json::parse(rec_.device.config_json, nullptr, false);
  return config.is_discarded() ? std::string("{}") : config.dump();
}

}  // namespace

void write_trace_json(const Recording& rec, TraceLevel level, uint64_t now_ps, std::ostream& out) {
  Writer(rec, out).write(level, now_ps);
}

std::string trace_json(const Recording& rec, TraceLevel level, uint64_t now_ps) {
  std::ostringstream out;
  write_trace_json(rec, level, now_ps, out);
  return out.str();
}

}  // namespace mtia::trace
