// Where a device's trace events go. The sink keeps a bounded recording: at most
// TraceOptions::max_events events; unit operations stop at three quarters of it, so the
// packets, DMA jobs, launches and host calls the summary needs keep the rest. What is dropped
// is counted, and reported once per kind through the owner's DropReport. Launch statistics
// are counted at every level but off, whether or not their unit slices fit; each memory's
// bandwidth is binned (BandwidthBins).
//
// Threads: the simulator thread records device events without locking; host calls arrive from
// any thread through host_call() (under a mutex); read() runs on the simulator thread and holds
// the host calls still meanwhile. With the level off every recording call returns at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "mtia/trace/events.h"
#include "mtia/trace/host_call.h"
#include "mtia/trace/level.h"
#include "mtia/trace/recording.h"

namespace mtia::trace {

class Sink {
 public:
  // Told, once per kind, when the limit first drops an event; `message` says what and why.
  using DropReport = std::function<void(const std::string& message)>;

  Sink(DeviceInfo device, TraceOptions options, DropReport on_drop = {});

  TraceLevel level() const {
    return static_cast<TraceLevel>(level_.load(std::memory_order_relaxed));
  }
  bool on() const { return level() != TraceLevel::kOff; }
  bool units() const { return level() == TraceLevel::kUnits; }
  void set_level(TraceLevel level);
  uint64_t max_events() const { return rec_.max_events; }

  // ---- simulator thread -------------------------------------------------------------------
  // The command processor spent [start, start + dur) fetching and dispatching.
  void cp_step(uint64_t start_ps, uint64_t dur_ps);
  void packet(const PacketEvent& event);
  void dma(uint32_t engine, const DmaEvent& event);
  // A DMA's payload on one memory (host DMA engines and PE local DMA alike), for the bandwidth
  // counters; a PE's DMA (`pe_dma`) also counts into the running launch's memory traffic.
  void reservation(const Reservation& r, bool pe_dma);
  // A kernel launch from dispatch to completion. PE events in between belong to it.
  void launch_begin(const LaunchInfo& info);
  void launch_end(uint64_t end_ps, uint16_t error);
  // Chip PE `pe` ran the launch's kernel over [start, end).
  void pe_kernel(uint32_t pe, uint64_t start_ps, uint64_t end_ps);
  // Chip PE `pe`'s `unit` was busy over [start, end) with `work` (MACs of `dpe_class` for the
  // DPE, elements for SE and RE, bytes for MLU and DMA). Counted into the launch's statistics;
  // a slice at TraceLevel::kUnits.
  void pe_unit(uint32_t pe, Unit unit, uint64_t start_ps, uint64_t end_ps, uint64_t work,
               DpeClass dpe_class);
  // A sanitizer finding of `check` on chip PE `pe` at `ts_ps` that failed the launch with
  // `report`. Kept past the event limit: there is at most one a launch, and it is what the
  // reader of a failed run looks for.
  void sanitizer_finding(uint32_t pe, uint64_t ts_ps, std::string check, std::string report);

  // ---- any thread -------------------------------------------------------------------------
  void host_call(HostCall call);
  size_t events() const { return count_.load(std::memory_order_relaxed); }  // kept
  uint64_t dropped() const;                                                 // all kinds
  uint64_t dropped_detail() const { return rec_.dropped_detail; }

  // ---- simulator thread -------------------------------------------------------------------
  // Calls `f(const Recording&)` with host calls held still; returns what it returns.
  template <class F>
  decltype(auto) read(F&& f) const {
    std::lock_guard<std::mutex> lock(host_mu_);
    return f(static_cast<const Recording&>(rec_));
  }

 private:
  // Whether one more event fits (`detail`: a unit operation); counts and reports a drop.
  bool room(bool detail);
  void note_drop(bool detail);
  void kept() { count_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t next_ordinal() { return ordinal_++; }
  Recording::Launch* running() { return launch_open_ ? &rec_.launches.back() : nullptr; }
  // The first local-DMA lane of `pe` free at `start`; Recording::kMaxDmaLanes if none is.
  uint32_t dma_lane(uint32_t pe, uint64_t start_ps, uint64_t end_ps);

  std::atomic<uint8_t> level_;
  DropReport on_drop_;
  Recording rec_;
  uint64_t ordinal_ = 0;
  bool launch_open_ = false;                         // rec_.launches.back() is running
  std::vector<uint64_t> dma_covered_until_;          // per chip PE: DMA union bookkeeping
  std::vector<std::vector<uint64_t>> dma_lane_end_;  // per chip PE: end of each lane's last DMA
  bool warned_ = false;
  bool warned_detail_ = false;
  mutable std::mutex host_mu_;    // guards rec_.host_calls and rec_.dropped_host_calls
  std::atomic<size_t> count_{0};  // device events + host calls and their packets
};

}  // namespace mtia::trace
