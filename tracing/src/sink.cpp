#include "mtia/trace/sink.h"

#include <algorithm>

namespace mtia::trace {

const char* unit_name(Unit unit) {
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

const char* memory_name(Memory memory) {
  switch (memory) {
    case Memory::kPcieH2D:
      return "pcie_h2d";
    case Memory::kPcieD2H:
      return "pcie_d2h";
    case Memory::kDram:
      return "dram";
    case Memory::kSram:
      return "sram";
    case Memory::kCount:
      break;
  }
  return "?";
}

size_t Recording::host_events() const {
  size_t n = 0;
  for (const HostCall& c : host_calls) n += 1 + c.packets.size();
  return n;
}

Sink::Sink(DeviceInfo device, TraceOptions options, DropReport on_drop)
    : level_(static_cast<uint8_t>(options.level)), on_drop_(std::move(on_drop)) {
  rec_.device = std::move(device);
  rec_.max_events = std::max<uint64_t>(options.max_events, 4);
  dma_covered_until_.assign(rec_.device.pes, 0);
  dma_lane_end_.resize(rec_.device.pes);
}

void Sink::set_level(TraceLevel level) {
  level_.store(static_cast<uint8_t>(level), std::memory_order_relaxed);
}

void Sink::note_drop(bool detail) {
  (detail ? rec_.dropped_detail : rec_.dropped) += 1;
  bool& warned = detail ? warned_detail_ : warned_;
  if (warned) return;
  warned = true;
  if (!on_drop_) return;
  on_drop_("trace: " + std::to_string(events()) + " events recorded, the limit of " +
           std::to_string(rec_.max_events) + " is reached; " +
           (detail ? "unit operations are dropped from here on, the summary stays complete"
                   : "every further event is dropped: the trace and its summary are incomplete") +
           " (raise the limit with MTIA_EMU_TRACE_MAX_EVENTS or the device's trace options, or "
           "trace at level 'kernels'). The trace's metadata counts what was dropped");
}

bool Sink::room(bool detail) {
  const uint64_t limit = detail ? rec_.max_events / 4 * 3 : rec_.max_events;
  if (events() < limit) return true;
  note_drop(detail);
  return false;
}

void Sink::cp_step(uint64_t start_ps, uint64_t dur_ps) {
  if (!on() || !room(false)) return;
  rec_.cp_steps.push_back({next_ordinal(), start_ps, dur_ps});
  kept();
}

void Sink::packet(const PacketEvent& event) {
  if (!on() || !room(false)) return;
  rec_.packets.push_back({next_ordinal(), event});
  kept();
}

void Sink::dma(uint32_t engine, const DmaEvent& event) {
  if (!on() || !room(false)) return;
  rec_.dmas.push_back({next_ordinal(), engine, event});
  kept();
}

void Sink::reservation(const Reservation& r, bool pe_dma) {
  if (!on()) return;
  const auto m = static_cast<size_t>(r.memory);
  if (Recording::Launch* l = running(); pe_dma && l != nullptr) {
    l->stats.memory_bytes[m] += r.payload_bytes;
  }
  rec_.bandwidth[m].add(r.start_ps, r.start_ps + r.busy_ps, r.payload_bytes);
}

void Sink::launch_begin(const LaunchInfo& info) {
  launch_open_ = false;
  if (!on() || !room(false)) return;
  Recording::Launch l;
  l.ordinal = next_ordinal();
  l.info = info;
  rec_.launches.push_back(l);
  launch_open_ = true;
  kept();
}

void Sink::launch_end(uint64_t end_ps, uint16_t error) {
  Recording::Launch* l = running();
  if (l == nullptr) return;
  launch_open_ = false;
  l->end_ps = std::max(end_ps, l->info.start_ps);
  l->error = error;
  l->ended = true;
}

void Sink::pe_kernel(uint32_t pe, uint64_t start_ps, uint64_t end_ps) {
  if (!on()) return;
  if (Recording::Launch* l = running())
    l->stats.core_ps += end_ps > start_ps ? end_ps - start_ps : 0;
  if (!room(false)) return;
  rec_.pe_kernels.push_back({next_ordinal(), pe, start_ps, std::max(start_ps, end_ps)});
  kept();
}

uint32_t Sink::dma_lane(uint32_t pe, uint64_t start_ps, uint64_t end_ps) {
  if (pe >= dma_lane_end_.size()) dma_lane_end_.resize(pe + 1);
  std::vector<uint64_t>& lanes = dma_lane_end_[pe];
  for (uint32_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i] <= start_ps) {
      lanes[i] = end_ps;
      return i;
    }
  }
  if (lanes.size() >= Recording::kMaxDmaLanes) return Recording::kMaxDmaLanes;
  lanes.push_back(end_ps);
  return static_cast<uint32_t>(lanes.size() - 1);
}

void Sink::pe_unit(uint32_t pe, Unit unit, uint64_t start_ps, uint64_t end_ps, uint64_t work,
                   DpeClass dpe_class) {
  if (!on()) return;
  if (end_ps < start_ps) end_ps = start_ps;
  const auto u = static_cast<size_t>(unit);
  if (Recording::Launch* l = running()) {
    LaunchStats& s = l->stats;
    s.ops[u] += 1;
    s.work[u] += work;
    if (unit == Unit::kDpe) s.macs[static_cast<size_t>(dpe_class)] += work;
    if (unit == Unit::kDma) {
      // Time with at least one DMA in flight: a PE issues its DMAs in time order.
      if (pe >= dma_covered_until_.size()) dma_covered_until_.resize(pe + 1, 0);
      uint64_t& covered = dma_covered_until_[pe];
      if (end_ps > covered) {
        s.busy_ps[u] += end_ps - std::max(start_ps, covered);
        covered = end_ps;
      }
    } else {
      s.busy_ps[u] += end_ps - start_ps;
    }
  }
  if (!units() || !room(/*detail=*/true)) return;
  uint32_t lane = 0;
  if (unit == Unit::kDma) {
    lane = dma_lane(pe, start_ps, end_ps);
    if (lane >= Recording::kMaxDmaLanes) {
      note_drop(true);
      return;
    }
  }
  rec_.pe_units.push_back(
      {next_ordinal(), pe, unit, static_cast<uint8_t>(lane), start_ps, end_ps, work});
  kept();
}

void Sink::sanitizer_finding(uint32_t pe, uint64_t ts_ps, std::string check, std::string report) {
  if (!on()) return;
  rec_.findings.push_back({next_ordinal(), pe, ts_ps, std::move(check), std::move(report)});
  kept();
}

void Sink::host_call(HostCall call) {
  if (!on()) return;
  const size_t n = 1 + call.packets.size();
  std::lock_guard<std::mutex> lock(host_mu_);
  if (count_.load(std::memory_order_relaxed) + n > rec_.max_events) {
    ++rec_.dropped_host_calls;
    return;
  }
  count_.fetch_add(n, std::memory_order_relaxed);
  rec_.host_calls.push_back(std::move(call));
}

uint64_t Sink::dropped() const {
  std::lock_guard<std::mutex> lock(host_mu_);
  return rec_.dropped_all();
}

}  // namespace mtia::trace
