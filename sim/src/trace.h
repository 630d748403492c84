// Chrome trace-event recorder (ui.perfetto.dev and chrome://tracing open the output).
// docs/architecture.md, "Traces", describes what the trace holds and how to read it.
//
// Two processes: the host (pid 1: one track per host thread with its API calls, and a track
// of completions) and the device (pid 2: the command processor, each queue, each DMA engine,
// the PE grid's launches, each PE's core and, at TraceLevel::kUnits, each PE's DPE, SE, RE,
// MLU and local-DMA lanes; counters for memory bandwidth and queue depth). Slices are
// complete ("X") events in simulated time; flow arrows (bind_id, flow_out / flow_in) lead from
// the host call that submitted a packet to the packet on its queue, to the DMA job or launch
// that ran it, and to its completion.
//
// Threads: the simulator thread records device events without locking; host calls arrive from
// any thread through host_call() (under a mutex); json() runs on the simulator thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "mtia/sim/chip_config.h"
#include "mtia/sim/memory_system.h"
#include "mtia/trace/host_call.h"
#include "mtia/trace/level.h"

namespace mtia::sim::detail {

using trace::HostCall;
using trace::HostPacket;
using trace::TraceLevel;
using trace::TraceOptions;

class Tracer {
 public:
  static constexpr uint32_t kNoQueue = ~0u;  // a device event whose packet is not known

  // `config` is the effective configuration (written into the trace's metadata).
  Tracer(std::string process_name, const ChipConfig& config, TraceOptions options = {});

  TraceLevel level() const {
    return static_cast<TraceLevel>(level_.load(std::memory_order_relaxed));
  }
  bool on() const { return level() != TraceLevel::kOff; }
  bool units() const { return level() == TraceLevel::kUnits; }
  void set_level(TraceLevel level);
  uint64_t max_events() const { return max_events_; }

  // ---- simulator thread -----------------------------------------------------------------
  // The command processor spent [start, start + dur) fetching and dispatching.
  void cp_step(uint64_t start_ps, uint64_t dur_ps);
  // A packet of `queue` from dispatch to completion (from its completion record).
  void packet(uint32_t queue, uint64_t start_ps, uint64_t end_ps, uint64_t seq, uint64_t index,
              uint8_t opcode, uint16_t status, uint16_t error);
  // A DMA job on `engine`.
  struct DmaEvent {
    uint64_t start_ps = 0;  // when the engine took the job
    uint64_t end_ps = 0;    // when it reported completion
    bool fill = false;
    uint64_t bytes = 0;  // payload bytes
    uint64_t src = 0;    // source span start (copies)
    uint8_t src_space = 0;
    uint64_t dst = 0;  // destination span start
    uint8_t dst_space = 0;
    uint64_t effective_bytes = 0;  // bytes charged on the busiest resource, burst waste included
    uint16_t error = 0;
    uint32_t queue = kNoQueue;  // the packet it runs: its queue and seq
    uint64_t seq = 0;
  };
  void dma(uint32_t engine, const DmaEvent& event);
  // The bandwidth a DMA job reserved on each memory and link (host DMA engines and PE local
  // DMA alike): its payload bytes spread over each reservation, for the bandwidth counters.
  // A PE's DMA (`pe_dma`) also counts into the running launch's memory traffic.
  void reservations(const DmaPlan& plan, bool pe_dma = false);

  // A kernel launch from dispatch to completion. PE events between begin and end belong to it.
  struct LaunchInfo {
    uint32_t queue = kNoQueue;
    uint64_t seq = 0;
    uint64_t image_addr = 0;
    uint64_t entry_offset = 0;
    uint16_t grid_rows = 0;
    uint16_t grid_cols = 0;
    uint64_t start_ps = 0;
  };
  void launch_begin(const LaunchInfo& info);
  void launch_end(uint64_t end_ps, uint16_t error);

  // The units of a PE, as pe::UnitKind numbers them, and its local DMA.
  enum class Unit : uint8_t { kDpe = 0, kSe = 1, kRe = 2, kMlu = 3, kDma = 4, kCount };
  static const char* unit_name(Unit unit);  // "dpe", "se", "re", "mlu", "dma"
  // DPE input classes, for the peak a launch is held against.
  enum class DpeClass : uint8_t { kInt8 = 0, k16Bit = 1, kFp32 = 2, kCount };
  // Chip PE `pe` ran the launch's kernel over [start, end).
  void pe_kernel(uint32_t pe, uint64_t start_ps, uint64_t end_ps);
  // Chip PE `pe`'s `unit` was busy over [start, end) with `work`: MACs (DPE, of `dpe_class`),
  // elements (SE: outputs, RE: inputs), bytes (MLU, DMA payload). Counted into the launch's
  // statistics at every level; a slice at TraceLevel::kUnits.
  void pe_unit(uint32_t pe, Unit unit, uint64_t start_ps, uint64_t end_ps, uint64_t work,
               DpeClass dpe_class = DpeClass::kFp32);

  // ---- any thread -------------------------------------------------------------------------
  void host_call(HostCall call);

  // Events kept, and dropped at the limit (all of them / unit operations and samples only).
  size_t events() const;
  uint64_t dropped() const;
  uint64_t dropped_detail() const { return dropped_detail_; }
  // The whole trace as JSON text. `now_ps` is the simulated time reached (metadata).
  std::string json(uint64_t now_ps = 0) const;

 private:
  enum class Kind : uint8_t { kCpStep, kPacket, kDma, kLaunch, kPeKernel, kPeUnit };
  struct Event {
    uint64_t ts_ps;
    uint64_t dur_ps;
    uint32_t track;
    Kind kind;
    uint8_t b0;    // packet: opcode; dma: fill flag; pe unit: unit
    uint8_t b1;    // dma: src space
    uint8_t b2;    // dma: dst space
    uint16_t h0;   // packet: status; dma: error
    uint16_t h1;   // packet: error
    uint32_t w0;   // packet, dma, launch: queue
    uint64_t seq;  // packet, dma, launch: the packet's seq
    uint64_t a[4];
  };
  // Statistics of one launch, at every trace level.
  struct Launch {
    LaunchInfo info;
    uint64_t end_ps = 0;
    bool ended = false;
    uint16_t error = 0;
    std::array<uint64_t, static_cast<size_t>(DpeClass::kCount)> macs{};
    std::array<uint64_t, static_cast<size_t>(Unit::kCount)> work{};  // DPE entry: all MACs
    std::array<uint64_t, static_cast<size_t>(Unit::kCount)> ops{};
    // Busy time summed over the launch's PEs; for DMA the time with at least one in flight.
    std::array<uint64_t, static_cast<size_t>(Unit::kCount)> busy_ps{};
    uint64_t core_ps = 0;                                // kernel spans summed over PEs
    std::array<uint64_t, kNumResources> memory_bytes{};  // local DMA payload per memory
  };
  // Payload bytes over time on one memory or link, in bins that double in width when there are
  // too many of them (so a long run stays bounded).
  struct Bins {
    uint64_t width_ps = 100'000;  // 100 ns to start with
    std::vector<double> bytes;
    uint64_t total_bytes = 0;
    uint64_t busy_ps = 0;  // reserved time
    void add(uint64_t start_ps, uint64_t end_ps, uint64_t payload);
  };

  // Whether one more event fits: `detail` events (unit slices) stop at three
  // quarters of the limit. Counts and reports what is dropped.
  bool room(bool detail);
  void push(const Event& e, bool detail = false);
  void note_drop(bool detail);
  uint32_t dma_lane(uint32_t pe, uint64_t start_ps, uint64_t end_ps);

  std::string process_name_;
  ChipConfig config_;
  std::string config_json_;
  std::atomic<uint8_t> level_;
  uint64_t max_events_;
  std::vector<Event> events_;
  std::vector<Launch> launches_;
  bool launch_open_ = false;                         // launches_.back() is running
  std::vector<uint64_t> dma_covered_until_;          // per chip PE: DMA union bookkeeping
  std::vector<std::vector<uint64_t>> dma_lane_end_;  // per chip PE: end of each lane's last DMA
  std::array<Bins, kNumResources> bandwidth_;
  uint64_t dropped_ = 0;
  uint64_t dropped_detail_ = 0;
  bool warned_ = false;
  bool warned_detail_ = false;
  uint32_t pe_tracks_ = 0;  // chip PEs seen (their tracks are named in json())

  mutable std::mutex host_mu_;
  std::vector<HostCall> host_calls_;
  uint64_t host_dropped_ = 0;     // host calls dropped at the limit (under host_mu_)
  std::atomic<size_t> count_{0};  // device events + host calls and their packets
};

}  // namespace mtia::sim::detail
