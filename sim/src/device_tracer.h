// The simulator's side of the device trace: a trace::Sink (mtia/trace/sink.h) that takes the
// simulator's own types - its configuration, the memory system's DMA plans - and writes the
// recording as trace.json and its run summary (mtia/trace/trace_writer.h, summary.h).
//
// Threads: as trace::Sink. The simulator thread records device events; host calls arrive from
// any thread; json(), write_json() and summary() run on the simulator thread.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "mtia/sim/chip_config.h"
#include "mtia/sim/memory_system.h"
#include "mtia/trace/events.h"
#include "mtia/trace/host_call.h"
#include "mtia/trace/level.h"
#include "mtia/trace/sink.h"
#include "mtia/trace/summary.h"

namespace mtia::sim::detail {

using trace::HostCall;
using trace::HostPacket;
using trace::TraceLevel;
using trace::TraceOptions;

class Tracer {
 public:
  static constexpr uint32_t kNoQueue = trace::kNoQueue;
  using DmaEvent = trace::DmaEvent;
  using LaunchInfo = trace::LaunchInfo;
  using Unit = trace::Unit;
  using DpeClass = trace::DpeClass;

  // `config` is the effective configuration (written into the trace's metadata).
  Tracer(std::string process_name, const ChipConfig& config, TraceOptions options = {});

  TraceLevel level() const { return sink_.level(); }
  bool on() const { return sink_.on(); }
  bool units() const { return sink_.units(); }
  void set_level(TraceLevel level) { sink_.set_level(level); }
  uint64_t max_events() const { return sink_.max_events(); }

  // ---- simulator thread -----------------------------------------------------------------
  void cp_step(uint64_t start_ps, uint64_t dur_ps) { sink_.cp_step(start_ps, dur_ps); }
  // A packet of `queue` from dispatch to completion (from its completion record).
  void packet(uint32_t queue, uint64_t start_ps, uint64_t end_ps, uint64_t seq, uint64_t index,
              uint8_t opcode, uint16_t status, uint16_t error) {
    sink_.packet({queue, start_ps, end_ps, seq, index, opcode, status, error});
  }
  void dma(uint32_t engine, const DmaEvent& event) { sink_.dma(engine, event); }
  // The bandwidth a DMA job reserved on each memory and link (host DMA engines and PE local
  // DMA alike): its payload bytes spread over each reservation, for the bandwidth counters.
  // A PE's DMA (`pe_dma`) also counts into the running launch's memory traffic.
  void reservations(const DmaPlan& plan, bool pe_dma = false);
  void launch_begin(const LaunchInfo& info) { sink_.launch_begin(info); }
  void launch_end(uint64_t end_ps, uint16_t error) { sink_.launch_end(end_ps, error); }
  void pe_kernel(uint32_t pe, uint64_t start_ps, uint64_t end_ps) {
    sink_.pe_kernel(pe, start_ps, end_ps);
  }
  void pe_unit(uint32_t pe, Unit unit, uint64_t start_ps, uint64_t end_ps, uint64_t work,
               DpeClass dpe_class = DpeClass::kFp32) {
    sink_.pe_unit(pe, unit, start_ps, end_ps, work, dpe_class);
  }
  void sanitizer_finding(uint32_t pe, uint64_t ts_ps, std::string check, std::string report) {
    sink_.sanitizer_finding(pe, ts_ps, std::move(check), std::move(report));
  }

  // ---- any thread -------------------------------------------------------------------------
  void host_call(HostCall call) { sink_.host_call(std::move(call)); }
  size_t events() const { return sink_.events(); }
  uint64_t dropped() const { return sink_.dropped(); }
  uint64_t dropped_detail() const { return sink_.dropped_detail(); }

  // ---- simulator thread -------------------------------------------------------------------
  // The whole trace as JSON (`now_ps`: the simulated time reached, for the metadata).
  std::string json(uint64_t now_ps = 0) const;
  void write_json(std::ostream& out, uint64_t now_ps) const;
  // The run summary of the recording, computed in memory (as from the trace written now).
  isa::Result<trace::TraceSummary> summary(uint64_t now_ps) const;

 private:
  trace::Sink sink_;
};

}  // namespace mtia::sim::detail
