#include "trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "log.h"
#include "mtia/isa/address_map.h"
#include "mtia/isa/decode.h"
#include "mtia/isa/error_code.h"
#include "mtia/isa/packets.h"

namespace mtia::sim::detail {
namespace {

// Processes and tracks (pid, tid). Host thread n is tid n.
constexpr uint32_t kHostPid = 1;
constexpr uint32_t kDevicePid = 2;
constexpr uint32_t kCompletionTrack = 1'000'000;  // host: completions as the driver gets them
constexpr uint32_t kCpTrack = 1;
constexpr uint32_t kQueueTrack0 = 100;
constexpr uint32_t kDmaTrack0 = 200;
constexpr uint32_t kLaunchTrack = 299;
constexpr uint32_t kPeTrack0 = 300;  // the core of chip PE p: its kernel spans
// Unit tracks of chip PE p: kUnitTrack0 + p * kUnitStride + unit (DPE, SE, RE, MLU), and its
// local-DMA lanes from + kDmaLane0. DMAs overlap (several may be in flight), so each lane holds
// DMAs that follow one another and a DMA takes the first lane that is free.
constexpr uint32_t kUnitTrack0 = 1000;
constexpr uint32_t kUnitStride = 64;
constexpr uint32_t kDmaLane0 = 8;
constexpr uint32_t kMaxDmaLanes = kUnitStride - kDmaLane0;
constexpr size_t kMaxBins = 4096;

// Flow ids: one per packet, from its queue and the driver's sequence number.
uint64_t flow_key(uint32_t queue, uint64_t seq) {
  return (uint64_t{queue + 1} << 40) | (seq & ((uint64_t{1} << 40) - 1));
}

// Simulated picoseconds as trace microseconds, exactly (6 decimals).
void append_us(std::string& out, uint64_t ps) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%" PRIu64 ".%06" PRIu64, ps / 1'000'000, ps % 1'000'000);
  out += buf;
}

void append_u64(std::string& out, uint64_t v) {
  out += std::to_string(v);
}

void append_double(std::string& out, double v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  out += buf;
}

void append_hex(std::string& out, uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "\"0x%" PRIx64 "\"", v);
  out += buf;
}

void append_str(std::string& out, const std::string& s) {
  out += nlohmann::json(s).dump();
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

// Which memory an address of a DMA side is in.
const char* memory_label(uint8_t space, uint64_t addr) {
  if (space == static_cast<uint8_t>(isa::AddressSpace::kHost)) return "host";
  if (addr >= isa::kLocalStoreBase) return "local store";
  if (addr >= isa::kSramBase) return "sram";
  return "dram";
}

int resource_of(const SideInfo& side, bool is_source) {
  if (side.host) {
    return static_cast<int>(is_source ? Resource::kPcieH2D : Resource::kPcieD2H);
  }
  if (side.memory == MemoryKind::kDram) return static_cast<int>(Resource::kDram);
  if (side.memory == MemoryKind::kSram) return static_cast<int>(Resource::kSram);
  return -1;  // a local store: private, on no shared timeline
}

}  // namespace

const char* Tracer::unit_name(Unit unit) {
  switch (unit) {
    case Unit::kDpe:
      return "dpe";
    case Unit::kSe:
      return "se";
    case Unit::kRe:
      return "re";
    case Unit::kMlu:
      return "mlu";
    case Unit::kDma:
      return "dma";
    case Unit::kCount:
      break;
  }
  return "?";
}

Tracer::Tracer(std::string process_name, const ChipConfig& config, TraceOptions options)
    : process_name_(std::move(process_name)),
      config_(config),
      config_json_(to_json(config)),
      level_(static_cast<uint8_t>(options.level)),
      max_events_(std::max<uint64_t>(options.max_events, 4)) {
  const size_t pes = size_t{config.pe_rows} * config.pe_cols;
  dma_covered_until_.assign(pes, 0);
  dma_lane_end_.resize(pes);
}

void Tracer::set_level(TraceLevel level) {
  level_.store(static_cast<uint8_t>(level), std::memory_order_relaxed);
}

size_t Tracer::events() const {
  return count_.load(std::memory_order_relaxed);
}

void Tracer::note_drop(bool detail) {
  (detail ? dropped_detail_ : dropped_) += 1;
  bool& warned = detail ? warned_detail_ : warned_;
  if (warned) return;
  warned = true;
  logger("sim.trace")
      ->warn(
          "trace: {} events recorded, the limit of {} is reached; {} (raise the limit with "
          "MTIA_EMU_TRACE_MAX_EVENTS or the device's trace options, or trace at level "
          "'kernels'). The trace's metadata counts what was dropped",
          events(), max_events_,
          detail ? "unit operations are dropped from here on, the "
                   "summary stays complete"
                 : "every further event is dropped: the trace and its summary are incomplete");
}

bool Tracer::room(bool detail) {
  const uint64_t limit = detail ? max_events_ / 4 * 3 : max_events_;
  if (events() < limit) return true;
  note_drop(detail);
  return false;
}

void Tracer::push(const Event& e, bool detail) {
  if (!room(detail)) return;
  events_.push_back(e);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Tracer::cp_step(uint64_t start_ps, uint64_t dur_ps) {
  if (!on()) return;
  push({start_ps, dur_ps, kCpTrack, Kind::kCpStep, 0, 0, 0, 0, 0, 0, 0, {}});
}

void Tracer::packet(uint32_t queue, uint64_t start_ps, uint64_t end_ps, uint64_t seq,
                    uint64_t index, uint8_t opcode, uint16_t status, uint16_t error) {
  if (!on()) return;
  const uint64_t dur = end_ps >= start_ps ? end_ps - start_ps : 0;
  push({start_ps,
        dur,
        kQueueTrack0 + queue,
        Kind::kPacket,
        opcode,
        0,
        0,
        status,
        error,
        queue,
        seq,
        {index, 0, 0, 0}});
}

void Tracer::dma(uint32_t engine, const DmaEvent& d) {
  if (!on()) return;
  const uint64_t dur = d.end_ps >= d.start_ps ? d.end_ps - d.start_ps : 0;
  push({d.start_ps,
        dur,
        kDmaTrack0 + engine,
        Kind::kDma,
        static_cast<uint8_t>(d.fill ? 1 : 0),
        d.src_space,
        d.dst_space,
        d.error,
        0,
        d.queue,
        d.seq,
        {d.bytes, d.src, d.dst, d.effective_bytes}});
}

void Tracer::Bins::add(uint64_t start_ps, uint64_t end_ps, uint64_t payload) {
  if (payload == 0) return;
  total_bytes += payload;
  busy_ps += end_ps - start_ps;
  const uint64_t last = std::max(start_ps, end_ps == start_ps ? end_ps : end_ps - 1);
  while (last / width_ps >= kMaxBins) {
    // Too many bins: halve their number (pairs merge), so long runs stay bounded.
    std::vector<double> merged((bytes.size() + 1) / 2, 0.0);
    for (size_t i = 0; i < bytes.size(); ++i) merged[i / 2] += bytes[i];
    bytes.swap(merged);
    width_ps *= 2;
  }
  if (bytes.size() <= last / width_ps) bytes.resize(last / width_ps + 1, 0.0);
  if (end_ps <= start_ps) {
    bytes[start_ps / width_ps] += static_cast<double>(payload);
    return;
  }
  const double per_ps = static_cast<double>(payload) / static_cast<double>(end_ps - start_ps);
  for (uint64_t b = start_ps / width_ps; b * width_ps < end_ps; ++b) {
    const uint64_t lo = std::max(start_ps, b * width_ps);
    const uint64_t hi = std::min(end_ps, (b + 1) * width_ps);
    bytes[b] += per_ps * static_cast<double>(hi - lo);
  }
}

void Tracer::reservations(const DmaPlan& plan, bool pe_dma) {
  if (!on() || plan.error != isa::ErrorCode::kNone) return;
  // Payload through each resource: once per side that uses it (a copy within one memory
  // reads and writes it).
  std::array<uint64_t, kNumResources> sides{};
  if (!plan.is_fill) {
    if (int r = resource_of(plan.src, true); r >= 0) ++sides[r];
  }
  if (int r = resource_of(plan.dst, false); r >= 0) ++sides[r];
  for (int r = 0; r < kNumResources; ++r) {
    if (sides[r] == 0 || plan.effective_bytes[r] == 0) continue;
    if (pe_dma && launch_open_) launches_.back().memory_bytes[r] += plan.payload_bytes * sides[r];
    const uint64_t start = plan.resource_start_ps[r];
    bandwidth_[r].add(start, start + plan.busy_ps[r], plan.payload_bytes * sides[r]);
  }
}

void Tracer::launch_begin(const LaunchInfo& info) {
  launch_open_ = false;
  if (!on()) return;
  if (!room(false)) return;
  Launch l;
  l.info = info;
  launches_.push_back(l);
  launch_open_ = true;
  push({info.start_ps,
        0,
        kLaunchTrack,
        Kind::kLaunch,
        0,
        0,
        0,
        0,
        0,
        info.queue,
        info.seq,
        {launches_.size() - 1, 0, 0, 0}});
}

void Tracer::launch_end(uint64_t end_ps, uint16_t error) {
  if (!launch_open_) return;
  launch_open_ = false;
  Launch& l = launches_.back();
  l.end_ps = std::max(end_ps, l.info.start_ps);
  l.error = error;
  l.ended = true;
}

void Tracer::pe_kernel(uint32_t pe, uint64_t start_ps, uint64_t end_ps) {
  if (!on()) return;
  if (launch_open_) launches_.back().core_ps += end_ps > start_ps ? end_ps - start_ps : 0;
  pe_tracks_ = std::max(pe_tracks_, pe + 1);
  push({start_ps,
        end_ps >= start_ps ? end_ps - start_ps : 0,
        kPeTrack0 + pe,
        Kind::kPeKernel,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        {}});
}

uint32_t Tracer::dma_lane(uint32_t pe, uint64_t start_ps, uint64_t end_ps) {
  if (pe >= dma_lane_end_.size()) dma_lane_end_.resize(pe + 1);
  std::vector<uint64_t>& lanes = dma_lane_end_[pe];
  for (uint32_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i] <= start_ps) {
      lanes[i] = end_ps;
      return i;
    }
  }
  if (lanes.size() >= kMaxDmaLanes) return kMaxDmaLanes;
  lanes.push_back(end_ps);
  return static_cast<uint32_t>(lanes.size() - 1);
}

void Tracer::pe_unit(uint32_t pe, Unit unit, uint64_t start_ps, uint64_t end_ps, uint64_t work,
                     DpeClass dpe_class) {
  if (!on()) return;
  if (end_ps < start_ps) end_ps = start_ps;
  const auto u = static_cast<size_t>(unit);
  if (launch_open_) {
    Launch& l = launches_.back();
    l.ops[u] += 1;
    l.work[u] += work;
    if (unit == Unit::kDpe) l.macs[static_cast<size_t>(dpe_class)] += work;
    if (unit == Unit::kDma) {
      // Time with at least one DMA in flight: a PE issues its DMAs in time order.
      if (pe >= dma_covered_until_.size()) dma_covered_until_.resize(pe + 1, 0);
      uint64_t& covered = dma_covered_until_[pe];
      if (end_ps > covered) {
        l.busy_ps[u] += end_ps - std::max(start_ps, covered);
        covered = end_ps;
      }
    } else {
      l.busy_ps[u] += end_ps - start_ps;
    }
  }
  if (!units()) return;
  uint32_t track = 0;
  if (unit == Unit::kDma) {
    if (!room(true)) return;
    const uint32_t lane = dma_lane(pe, start_ps, end_ps);
    if (lane >= kMaxDmaLanes) {
      note_drop(true);
      return;
    }
    track = kUnitTrack0 + pe * kUnitStride + kDmaLane0 + lane;
  } else {
    track = kUnitTrack0 + pe * kUnitStride + static_cast<uint32_t>(u);
  }
  pe_tracks_ = std::max(pe_tracks_, pe + 1);
  push({start_ps,
        end_ps - start_ps,
        track,
        Kind::kPeUnit,
        static_cast<uint8_t>(u),
        0,
        0,
        0,
        0,
        0,
        0,
        {work, 0, 0, 0}},
       /*detail=*/true);
}

void Tracer::host_call(HostCall call) {
  if (!on()) return;
  const size_t n = 1 + call.packets.size();
  std::lock_guard<std::mutex> lock(host_mu_);
  if (count_.load(std::memory_order_relaxed) + n > max_events_) {
    ++host_dropped_;
    return;
  }
  count_.fetch_add(n, std::memory_order_relaxed);
  host_calls_.push_back(std::move(call));
}

uint64_t Tracer::dropped() const {
  std::lock_guard<std::mutex> lock(host_mu_);
  return dropped_ + dropped_detail_ + host_dropped_;
}

namespace {

// What goes into the JSON, in the order of the sort key.
struct Item {
  uint64_t ts;
  uint8_t rank;    // at equal times: causes before effects, parents before children
  uint64_t order;  // then: host calls in the order they started, device events as recorded
  uint64_t dur;
  uint8_t type;
  uint32_t index;
  uint32_t sub;
};
enum ItemType : uint8_t { kDeviceEvent, kHostCallItem, kHostSubmit, kCompletion };

}  // namespace

std::string Tracer::json(uint64_t now_ps) const {
  std::lock_guard<std::mutex> lock(host_mu_);

  // Packets known on both sides get a flow: host submit -> queue -> DMA job or launch ->
  // completion.
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> host_packets;  // key -> call, pkt
  for (uint32_t c = 0; c < host_calls_.size(); ++c) {
    for (uint32_t p = 0; p < host_calls_[c].packets.size(); ++p) {
      const HostPacket& hp = host_calls_[c].packets[p];
      host_packets[flow_key(hp.queue, hp.seq)] = {c, p};
    }
  }
  std::unordered_map<uint64_t, uint32_t> device_packets;  // key -> packet event
  for (uint32_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    if (e.kind == Kind::kPacket) device_packets[flow_key(e.w0, e.seq)] = i;
  }
  auto linked = [&](uint32_t queue, uint64_t seq) {
    if (queue == kNoQueue) return false;
    const uint64_t key = flow_key(queue, seq);
    return host_packets.count(key) != 0 && device_packets.count(key) != 0;
  };
  auto label_of = [&](uint32_t queue, uint64_t seq) -> const std::string* {
    if (queue == kNoQueue) return nullptr;
    auto it = host_packets.find(flow_key(queue, seq));
    if (it == host_packets.end()) return nullptr;
    return &host_calls_[it->second.first].packets[it->second.second].label;
  };

  size_t host_events = 0;
  for (const HostCall& c : host_calls_) host_events += 1 + c.packets.size();
  std::vector<Item> items;
  items.reserve(events_.size() * 5 / 4 + host_events);
  for (uint32_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    uint8_t rank = 0;
    uint64_t dur = e.dur_ps;
    switch (e.kind) {
      case Kind::kCpStep:
        rank = 2;
        break;
      case Kind::kPacket:
        rank = 3;
        if (linked(e.w0, e.seq)) items.push_back({e.ts_ps + e.dur_ps, 7, i, 0, kCompletion, i, 0});
        break;
      case Kind::kDma:
        rank = 4;
        break;
      case Kind::kLaunch: {
        const Launch& l = launches_[e.a[0]];
        if (!l.ended) continue;  // still running when the trace was written
        rank = 4;
        dur = l.end_ps - l.info.start_ps;
        break;
      }
      case Kind::kPeKernel:
        rank = 5;
        break;
      case Kind::kPeUnit:
        rank = 6;
        break;
    }
    items.push_back({e.ts_ps, rank, i, dur, kDeviceEvent, i, 0});
  }
  for (uint32_t c = 0; c < host_calls_.size(); ++c) {
    const HostCall& call = host_calls_[c];
    const uint64_t end = std::max(call.end_ps, call.start_ps);
    items.push_back({call.start_ps, 0, call.order, end - call.start_ps, kHostCallItem, c, 0});
    for (uint32_t p = 0; p < call.packets.size(); ++p) {
      // Inside the call: its submit times lie between the call's start and end.
      const uint64_t ts = std::clamp(call.packets[p].submit_ps, call.start_ps, end);
      items.push_back({ts, 1, call.order, 0, kHostSubmit, c, p});
    }
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    if (a.ts != b.ts) return a.ts < b.ts;
    if (a.rank != b.rank) return a.rank < b.rank;
    return a.order < b.order;
  });

  std::string out;
  out.reserve(8192 + items.size() * 160);
  const uint64_t dropped_all = dropped_ + dropped_detail_ + host_dropped_;
  // Metadata: what the trace holds, what it dropped, and the effective configuration.
  // First, so that readers meet it before the events (Perfetto reads the file in chunks).
  out += "{\"otherData\":{\"format\":\"mtia-emu trace\",\"version\":2,\"process\":";
  append_str(out, process_name_);
  out += ",\"time_unit\":\"ts and dur are microseconds of simulated time\"";
  out +=
      ",\"host_clock\":\"a host call is stamped with the latest simulated time its thread has "
      "observed (end times of the packets it waited for); wall_* fields are host wall-clock "
      "time\"";
  out += ",\"trace_level\":\"";
  out += trace::trace_level_name(level());
  out += "\",\"max_events\":";
  append_u64(out, max_events_);
  out += ",\"events\":";
  append_u64(out, events_.size() + host_events);
  out += ",\"dropped_events\":";
  append_u64(out, dropped_all);
  out += ",\"dropped_detail_events\":";
  append_u64(out, dropped_detail_);
  out += ",\"dropped_host_calls\":";
  append_u64(out, host_dropped_);
  out += ",\"complete\":";
  out += dropped_ + host_dropped_ == 0 ? "true" : "false";
  out += ",\"simulated_time_ps\":";
  append_u64(out, now_ps);
  out += ",\"bandwidth_bin_ps\":{";
  for (int r = 0; r < kNumResources; ++r) {
    if (r) out += ",";
    out += "\"";
    out += resource_name(static_cast<Resource>(r));
    out += "\":";
    append_u64(out, bandwidth_[r].width_ps);
  }
  out += "},\"memory\":{";
  for (int r = 0; r < kNumResources; ++r) {
    if (r) out += ",";
    out += "\"";
    out += resource_name(static_cast<Resource>(r));
    out += "\":{\"payload_bytes\":";
    append_u64(out, bandwidth_[r].total_bytes);
    out += ",\"reserved_ps\":";
    append_u64(out, bandwidth_[r].busy_ps);
    out += "}";
  }
  out += "},\"config\":";
  out += nlohmann::json::parse(config_json_).dump();
  out += "},\n\"traceEvents\":[\n";
  bool first = true;
  auto next = [&] {  // separates the elements of traceEvents
    if (!first) out += ",\n";
    first = false;
  };
  auto meta = [&](uint32_t pid, const char* what, uint32_t tid, const std::string& name) {
    next();
    out += "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
           ",\"name\":\"" + what + "\",\"args\":{\"name\":";
    append_str(out, name);
    out += "}}";
  };
  auto sort_index = [&](uint32_t pid, uint32_t tid, uint32_t index) {
    next();
    out += "{\"ph\":\"M\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(tid) +
           ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":" + std::to_string(index) +
           "}}";
  };
  auto track = [&](uint32_t pid, uint32_t tid, const std::string& name, uint32_t index) {
    meta(pid, "thread_name", tid, name);
    sort_index(pid, tid, index);
  };

  // Host process: one track per host thread that made a call, and the completions.
  uint32_t host_threads = 0;
  for (const HostCall& c : host_calls_) host_threads = std::max(host_threads, c.thread);
  if (!host_calls_.empty()) {
    meta(kHostPid, "process_name", 0, "host (mtia-emu host API)");
    next();
    out += "{\"ph\":\"M\",\"pid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":1}}";
    std::vector<bool> seen(host_threads + 1, false);
    for (const HostCall& c : host_calls_) seen[c.thread] = true;
    for (uint32_t t = 1; t <= host_threads; ++t) {
      if (seen[t]) track(kHostPid, t, "host thread " + std::to_string(t), t);
    }
    track(kHostPid, kCompletionTrack, "completions (driver interrupt handler)", kCompletionTrack);
  }

  // Device process.
  meta(kDevicePid, "process_name", 0, process_name_);
  next();
  out += "{\"ph\":\"M\",\"pid\":2,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":2}}";
  track(kDevicePid, kCpTrack, "command processor", kCpTrack);
  for (uint32_t q = 0; q < config_.num_queues; ++q) {
    track(kDevicePid, kQueueTrack0 + q, "queue " + std::to_string(q), kQueueTrack0 + q);
  }
  for (uint32_t e = 0; e < config_.dma_engines; ++e) {
    track(kDevicePid, kDmaTrack0 + e, "dma " + std::to_string(e), kDmaTrack0 + e);
  }
  if (!launches_.empty()) track(kDevicePid, kLaunchTrack, "pe grid (launches)", kLaunchTrack);
  {
    // PE tracks that hold events, named; each PE's unit tracks sort after its core.
    std::vector<std::vector<bool>> pe_used(pe_tracks_, std::vector<bool>(kUnitStride + 1, false));
    for (const Event& e : events_) {
      if (e.kind == Kind::kPeKernel) {
        pe_used[e.track - kPeTrack0][kUnitStride] = true;
      } else if (e.kind == Kind::kPeUnit) {
        const uint32_t off = e.track - kUnitTrack0;
        pe_used[off / kUnitStride][off % kUnitStride] = true;
      }
    }
    for (uint32_t p = 0; p < pe_tracks_; ++p) {
      const std::string pe = "pe " + std::to_string(p);
      const uint32_t base = 10'000 + p * 100;
      if (pe_used[p][kUnitStride]) track(kDevicePid, kPeTrack0 + p, pe, base);
      for (uint32_t u = 0; u < kUnitStride; ++u) {
        if (!pe_used[p][u]) continue;
        const std::string name = u < kDmaLane0 ? pe + " " + unit_name(static_cast<Unit>(u))
                                               : pe + " dma " + std::to_string(u - kDmaLane0);
        track(kDevicePid, kUnitTrack0 + p * kUnitStride + u, name, base + 1 + u);
      }
    }
  }
  if (dropped_all > 0) {
    // A visible note in the process label, so a truncated trace is not mistaken for the run.
    next();
    out += "{\"ph\":\"M\",\"pid\":2,\"tid\":0,\"name\":\"process_labels\",\"args\":{\"labels\":";
    append_str(out, "trace truncated at " + std::to_string(max_events_) +
                        " events: " + std::to_string(dropped_all) + " events dropped (" +
                        std::to_string(dropped_detail_) + " unit operations)");
    out += "}}";
  }

  // Flow fields on a slice: one flow per slice (Perfetto's bind_id form).
  auto flow = [&](uint32_t queue, uint64_t seq, bool in, bool out_) {
    out += ",\"bind_id\":";
    append_u64(out, flow_key(queue, seq));
    if (in) out += ",\"flow_in\":true";
    if (out_) out += ",\"flow_out\":true";
  };
  auto slice_head = [&](uint32_t pid, uint32_t tid, const char* cat, uint64_t ts, uint64_t dur) {
    out += "{\"ph\":\"X\",\"cat\":\"";
    out += cat;
    out += "\",\"pid\":";
    append_u64(out, pid);
    out += ",\"tid\":";
    append_u64(out, tid);
    out += ",\"ts\":";
    append_us(out, ts);
    out += ",\"dur\":";
    append_us(out, dur);
  };

  for (const Item& it : items) {
    next();
    if (it.type == kHostCallItem) {
      const HostCall& c = host_calls_[it.index];
      slice_head(kHostPid, c.thread, "host", it.ts, it.dur);
      out += ",\"name\":";
      append_str(out, c.name);
      out += ",\"args\":{\"detail\":";
      append_str(out, c.detail);
      out += ",\"packets\":";
      append_u64(out, c.packets.size());
      if (!c.error.empty()) {
        out += ",\"error\":";
        append_str(out, c.error);
      }
      out += ",\"wall_start_us\":";
      append_double(out, c.wall_start_us);
      out += ",\"wall_us\":";
      append_double(out, c.wall_us);
      out += "}}";
      continue;
    }
    if (it.type == kHostSubmit) {
      const HostCall& c = host_calls_[it.index];
      const HostPacket& p = c.packets[it.sub];
      slice_head(kHostPid, c.thread, "submit", it.ts, 0);
      out += ",\"name\":\"submit\"";
      if (linked(p.queue, p.seq)) flow(p.queue, p.seq, false, true);
      out += ",\"args\":{\"queue\":";
      append_u64(out, p.queue);
      out += ",\"seq\":";
      append_u64(out, p.seq);
      out += ",\"label\":";
      append_str(out, p.label);
      out += "}}";
      continue;
    }
    const Event& e = events_[it.index];
    if (it.type == kCompletion) {
      const std::string* label = label_of(e.w0, e.seq);
      slice_head(kHostPid, kCompletionTrack, "completion", it.ts, 0);
      out += ",\"name\":";
      append_str(out, "done: " + (label ? *label : std::string(opcode_label(e.b0))));
      flow(e.w0, e.seq, true, false);
      out += ",\"args\":{\"queue\":";
      append_u64(out, e.w0);
      out += ",\"seq\":";
      append_u64(out, e.seq);
      out += ",\"status\":\"";
      out += e.h0 == 0 ? "ok" : "error";
      out += "\"}}";
      continue;
    }
    switch (e.kind) {
      case Kind::kCpStep:
        slice_head(kDevicePid, e.track, "cp", e.ts_ps, e.dur_ps);
        out += ",\"name\":\"dispatch\"}";
        break;
      case Kind::kPacket: {
        const std::string* label = label_of(e.w0, e.seq);
        const bool launch = e.b0 == static_cast<uint8_t>(isa::Opcode::kLaunch);
        slice_head(kDevicePid, e.track, "packet", e.ts_ps, e.dur_ps);
        out += ",\"name\":";
        append_str(out, launch && label ? "launch " + *label : std::string(opcode_label(e.b0)));
        if (linked(e.w0, e.seq)) flow(e.w0, e.seq, true, true);
        out += ",\"args\":{\"queue\":";
        append_u64(out, e.w0);
        out += ",\"seq\":";
        append_u64(out, e.seq);
        out += ",\"index\":";
        append_u64(out, e.a[0]);
        out += ",\"opcode\":\"";
        out += opcode_label(e.b0);
        out += "\",\"status\":\"";
        out += e.h0 == 0 ? "ok" : "error";
        out += "\",\"error\":\"";
        out += error_label(e.h1);
        out += "\"";
        if (label) {
          out += ",\"label\":";
          append_str(out, *label);
        }
        out += "}}";
        break;
      }
      case Kind::kDma:
        slice_head(kDevicePid, e.track, "dma", e.ts_ps, e.dur_ps);
        out += e.b0 ? ",\"name\":\"fill\"" : ",\"name\":\"copy\"";
        if (linked(e.w0, e.seq)) flow(e.w0, e.seq, true, true);
        out += ",\"args\":{\"bytes\":";
        append_u64(out, e.a[0]);
        // Host bus addresses are host pointers, which change from run to run: left out.
        if (!e.b0) {
          if (e.b1 != static_cast<uint8_t>(isa::AddressSpace::kHost)) {
            out += ",\"src\":";
            append_hex(out, e.a[1]);
          }
          out += ",\"src_space\":\"";
          out += e.b1 == static_cast<uint8_t>(isa::AddressSpace::kHost) ? "host" : "device";
          out += "\",\"src_memory\":\"";
          out += memory_label(e.b1, e.a[1]);
          out += "\"";
        }
        if (e.b2 != static_cast<uint8_t>(isa::AddressSpace::kHost)) {
          out += ",\"dst\":";
          append_hex(out, e.a[2]);
        }
        out += ",\"dst_space\":\"";
        out += e.b2 == static_cast<uint8_t>(isa::AddressSpace::kHost) ? "host" : "device";
        out += "\",\"dst_memory\":\"";
        out += memory_label(e.b2, e.a[2]);
        out += "\",\"effective_bytes\":";
        append_u64(out, e.a[3]);
        out += ",\"error\":\"";
        out += error_label(e.h0);
        out += "\"";
        if (e.w0 != kNoQueue) {
          out += ",\"queue\":";
          append_u64(out, e.w0);
          out += ",\"seq\":";
          append_u64(out, e.seq);
        }
        out += "}}";
        break;
      case Kind::kLaunch: {
        const Launch& l = launches_[e.a[0]];
        const std::string* label = label_of(e.w0, e.seq);
        char fallback[64];
        std::snprintf(fallback, sizeof fallback, "kernel@0x%" PRIx64 "+0x%" PRIx64,
                      l.info.image_addr, l.info.entry_offset);
        slice_head(kDevicePid, kLaunchTrack, "launch", e.ts_ps, it.dur);
        out += ",\"name\":";
        append_str(out, label ? *label : std::string(fallback));
        if (linked(e.w0, e.seq)) flow(e.w0, e.seq, true, true);
        auto field = [&](const char* key, uint64_t v) {
          out += ",\"";
          out += key;
          out += "\":";
          append_u64(out, v);
        };
        out += ",\"args\":{\"kernel\":";
        append_str(out, label ? *label : std::string(fallback));
        if (e.w0 != kNoQueue) {
          field("queue", e.w0);
          field("seq", e.seq);
        }
        out += ",\"grid\":\"" + std::to_string(l.info.grid_rows) + "x" +
               std::to_string(l.info.grid_cols) + "\"";
        field("pes", uint64_t{l.info.grid_rows} * l.info.grid_cols);
        out += ",\"status\":\"";
        out += l.error == 0 ? "ok" : error_label(l.error);
        out += "\"";
        field("dur_ps", it.dur);
        field("dpe_macs_int8", l.macs[0]);
        field("dpe_macs_16bit", l.macs[1]);
        field("dpe_macs_fp32", l.macs[2]);
        field("se_elements", l.work[static_cast<size_t>(Unit::kSe)]);
        field("re_elements", l.work[static_cast<size_t>(Unit::kRe)]);
        field("mlu_bytes", l.work[static_cast<size_t>(Unit::kMlu)]);
        field("dma_bytes", l.work[static_cast<size_t>(Unit::kDma)]);
        // Of it, what went to or from DRAM and the SRAM (a copy within one counts twice).
        field("dram_bytes", l.memory_bytes[static_cast<size_t>(Resource::kDram)]);
        field("sram_bytes", l.memory_bytes[static_cast<size_t>(Resource::kSram)]);
        // FLOPs as the summary counts them: 2 per DPE MAC, 1 per SE element.
        field("flops",
              2 * l.work[static_cast<size_t>(Unit::kDpe)] + l.work[static_cast<size_t>(Unit::kSe)]);
        field("core_ps", l.core_ps);
        out += ",\"busy_ps\":{";
        for (size_t u = 0; u < l.busy_ps.size(); ++u) {
          if (u) out += ",";
          out += "\"";
          out += unit_name(static_cast<Unit>(u));
          out += "\":";
          append_u64(out, l.busy_ps[u]);
        }
        out += "},\"ops\":{";
        for (size_t u = 0; u < l.ops.size(); ++u) {
          if (u) out += ",";
          out += "\"";
          out += unit_name(static_cast<Unit>(u));
          out += "\":";
          append_u64(out, l.ops[u]);
        }
        out += "}}}";
        break;
      }
      case Kind::kPeKernel:
        slice_head(kDevicePid, e.track, "kernel", e.ts_ps, e.dur_ps);
        out += ",\"name\":\"kernel\"}";
        break;
      case Kind::kPeUnit: {
        const auto unit = static_cast<Unit>(e.b0);
        slice_head(kDevicePid, e.track, "unit", e.ts_ps, e.dur_ps);
        out += ",\"name\":\"";
        out += unit_name(unit);
        out += "\",\"args\":{\"";
        out += unit == Unit::kDpe                       ? "macs"
               : unit == Unit::kSe || unit == Unit::kRe ? "elements"
                                                        : "bytes";
        out += "\":";
        append_u64(out, e.a[0]);
        out += "}}";
        break;
      }
    }
  }

  // Queue depth: packets submitted and not yet completed. A packet counts from its host
  // submit (host clock) - or from its dispatch when no API call submitted it - to its end.
  // Doorbells reach the device at times that vary with host scheduling; these do not.
  {
    std::vector<std::vector<std::pair<uint64_t, int>>> edges(config_.num_queues);
    for (const Event& e : events_) {
      if (e.kind != Kind::kPacket || e.w0 >= edges.size()) continue;
      uint64_t from = e.ts_ps;
      if (linked(e.w0, e.seq)) {
        const auto [c, p] = host_packets.at(flow_key(e.w0, e.seq));
        from = std::min(from, host_calls_[c].packets[p].submit_ps);
      }
      edges[e.w0].push_back({from, +1});
      edges[e.w0].push_back({e.ts_ps + e.dur_ps, -1});
    }
    for (uint32_t q = 0; q < edges.size(); ++q) {
      std::sort(edges[q].begin(), edges[q].end());  // at equal times completions go first
      int64_t depth = 0;
      for (size_t i = 0; i < edges[q].size(); ++i) {
        depth += edges[q][i].second;
        if (i + 1 < edges[q].size() && edges[q][i + 1].first == edges[q][i].first) continue;
        next();
        out += "{\"ph\":\"C\",\"cat\":\"queue\",\"pid\":2,\"tid\":";
        append_u64(out, kQueueTrack0 + q);
        out += ",\"ts\":";
        append_us(out, edges[q][i].first);
        out += ",\"name\":\"queue " + std::to_string(q) + " depth\",\"args\":{\"packets\":";
        append_u64(out, static_cast<uint64_t>(depth));
        out += "}}";
      }
    }
  }

  // Bandwidth counters: payload bytes per bin of each memory and link, as GB/s.
  for (int r = 0; r < kNumResources; ++r) {
    const Bins& b = bandwidth_[r];
    if (b.total_bytes == 0) continue;
    const std::string name =
        std::string("\"name\":\"") + resource_name(static_cast<Resource>(r)) + " bandwidth\"";
    double last = -1;
    for (size_t i = 0; i <= b.bytes.size(); ++i) {
      const double gbps =
          i < b.bytes.size() ? b.bytes[i] / static_cast<double>(b.width_ps) * 1000.0 : 0.0;
      if (gbps == last) continue;
      last = gbps;
      next();
      out += "{\"ph\":\"C\",\"cat\":\"bandwidth\",\"pid\":2,\"tid\":0,\"ts\":";
      append_us(out, i * b.width_ps);
      out += "," + name + ",\"args\":{\"GB/s\":";
      append_double(out, gbps);
      out += "}}";
    }
  }

  out += "\n]}\n";
  return out;
}

}  // namespace mtia::sim::detail
