// What a trace sink has kept: the device's events, the host calls, the bandwidth bins and what
// was dropped. The trace writer and the run summary read it.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mtia/trace/bandwidth.h"
#include "mtia/trace/events.h"
#include "mtia/trace/host_call.h"

namespace mtia::trace {

// The traced device.
struct DeviceInfo {
  std::string process_name;  // the device process's name in the trace
  // The effective configuration as JSON text ({"key": {"value": ...}, ...}): written into the
  // trace's metadata; the summary takes the preset's name and peaks from it.
  std::string config_json;
  uint32_t num_queues = 0;
  uint32_t dma_engines = 0;
  uint32_t pes = 0;  // PEs on the chip
};

struct Recording {
  // Device events. Each carries its place in the order of recording (`ordinal`), which orders
  // events of one kind at equal times in the trace.
  struct CpStep {
    uint64_t ordinal = 0;
    uint64_t start_ps = 0;
    uint64_t dur_ps = 0;
  };
  struct Packet {
    uint64_t ordinal = 0;
    PacketEvent event;
  };
  struct Dma {
    uint64_t ordinal = 0;
    uint32_t engine = 0;
    DmaEvent event;
  };
  struct Launch {
    uint64_t ordinal = 0;
    LaunchInfo info;
    bool ended = false;  // false: still running when the recording was read
    uint64_t end_ps = 0;
    uint16_t error = 0;  // isa::ErrorCode
    LaunchStats stats;
  };
  struct PeKernel {  // chip PE `pe` ran a launch's kernel
    uint64_t ordinal = 0;
    uint32_t pe = 0;
    uint64_t start_ps = 0;
    uint64_t end_ps = 0;
  };
  struct PeUnitOp {  // one unit operation (level units)
    uint64_t ordinal = 0;
    uint32_t pe = 0;
    Unit unit = Unit::kDpe;
    uint8_t lane = 0;  // local DMA: the first lane free at its start (DMAs overlap)
    uint64_t start_ps = 0;
    uint64_t end_ps = 0;
    uint64_t work = 0;  // MACs (DPE), elements (SE, RE), bytes (MLU, DMA)
  };
  static constexpr uint32_t kMaxDmaLanes = 56;
  // A sanitizer finding that failed a launch: an instant event on the PE's track.
  struct Finding {
    uint64_t ordinal = 0;
    uint32_t pe = 0;  // chip PE
    uint64_t ts_ps = 0;
    std::string check;   // "memcheck", "racecheck", "initcheck" or "synccheck"
    std::string report;  // the launch's error message
  };

  DeviceInfo device;
  uint64_t max_events = 0;
  std::vector<CpStep> cp_steps;
  std::vector<Packet> packets;
  std::vector<Dma> dmas;
  std::vector<Launch> launches;
  std::vector<PeKernel> pe_kernels;
  std::vector<PeUnitOp> pe_units;
  std::vector<Finding> findings;
  std::array<BandwidthBins, kNumMemories> bandwidth;
  std::vector<HostCall> host_calls;

  uint64_t dropped = 0;             // device events of every kind dropped at the limit
  uint64_t dropped_detail = 0;      // unit operations dropped (at three quarters of it)
  uint64_t dropped_host_calls = 0;  // host calls dropped at the limit

  uint64_t dropped_all() const { return dropped + dropped_detail + dropped_host_calls; }
  // Whether everything but unit operations was kept.
  bool complete() const { return dropped + dropped_host_calls == 0; }
  size_t device_events() const {
    return cp_steps.size() + packets.size() + dmas.size() + launches.size() + pe_kernels.size() +
           pe_units.size() + findings.size();
  }
  size_t host_events() const;  // host calls and the packets they submitted
};

}  // namespace mtia::trace
