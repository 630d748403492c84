// The PE grid: runs kernel launches on RV64IM interpreter cores (sim/pe) inside the SystemC
// model. Private to sim/.
//
// One SC_THREAD serves every PE of a launch. It runs each core with RiscvCore::run up to a
// common cycle horizon, round-robin, then advances SystemC time by one quantum (one wait()
// per quantum, however many PEs), so a 64-PE launch costs a handful of context switches.
//
// Unit instructions never wait in SystemC. Each operation takes effect in the PE's local store
// (or device memory) at issue, in program order, and is given a completion cycle:
//   DPE/SE/RE/MLU  done = max(issue cycle, unit free) + busy cycles of FunctionalUnits
//   DMA            the MemorySystem's schedule (setup, bandwidth shared with the other PEs and
//                  the host DMA engines, latency), converted to this PE's cycles
// pe.wait / pe.waitall advance the core's cycle count to the tag's completion cycle; pe.poll
// compares it with the core's cycle; pe.barrier stalls the core until every PE of the launch
// still running is at a barrier, then resumes them all at the latest arrival.
//
// Known approximation: the PEs run one after the other in slices of slice_cycles, so their
// DMA requests reach the memory timelines up to one slice out of time order (a later request
// of PE 0 may reserve bandwidth before an earlier one of PE 1). Bandwidth is conserved.
//
// The sequential order. Everything shared between PEs happens in one order: slice by slice,
// and within a slice PE 0, PE 1, ... A PE that faults or exits with an error stops; the others
// still run to the end of the quantum, and the launch fails with the first failure in this
// order. The unit math and the local DMA copies may run on helper threads (unit_threads,
// deferred_work.h), but every decision that shares state or time is taken on the simulator
// thread in this order, so simulated times, traces and results do not depend on the helper
// count.
#pragma once

#include <systemc>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deferred_work.h"
#include "mtia/firmware/platform.h"
#include "mtia/isa/access_scope.h"
#include "mtia/isa/packets.h"
#include "mtia/sim/chip_config.h"
#include "mtia/sim/grid_options.h"
#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/line_table.h"
#include "mtia/sim/pe/program.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_workers.h"
#include "mtia/sim/pe/units.h"
#include "pe_clock.h"

namespace mtia::sim::detail {

struct SimShared;
class ProcessingElement;
struct PeEnvironment;

// Where the grid reports the end of a launch (the command processor), through
// PeGrid::launch_done_port: called on the simulator thread at the launch's end time.
class LaunchDoneIf : public virtual sc_core::sc_interface {
 public:
  virtual void launch_done(const isa::Status& outcome) = 0;
};

// Parameters of the grid: the preset's scheduler fields (ChipConfig::pe_*) and how it uses the
// host (PeGridHostSettings, grid_options.h).
struct PeGridParams {
  uint64_t quantum_cycles = 10'000;  // cycles each core runs between SystemC syncs
  // Inside a quantum the cores advance in lockstep slices of this many cycles, so their DMA
  // requests reach the shared memory timelines at most one slice out of time order.
  uint64_t slice_cycles = 256;
  uint64_t default_watchdog_cycles = 1'000'000'000;  // when LaunchPacket::watchdog_cycles is 0
  uint64_t max_image_bytes = 16ull << 20;            // a larger ELF is rejected
  size_t max_cached_programs = 16;                   // decoded images kept (cleared when full)
  // Host threads that run the units' math and the local DMA copies beside
  // the simulator thread (pe::UnitWorkers); 0 runs it all on that thread.
  unsigned unit_threads = 0;
  // An operation estimated to take the host less than this (nanoseconds) runs on the
  // simulator thread when its PE has nothing queued: handing it over (and its bytes to another
  // core's cache) would cost more. 0 hands every operation to the helpers.
  uint64_t inline_work_ns = 5'000;
  // Leave a DMA's load from DRAM or SRAM into a local store in device memory until its bytes
  // are needed, and let the DPE read its operands there (deferred_work.h, "Loads left in device
  // memory"): the copy of a tile that is only multiplied is never made.
  bool lazy_loads = true;

  static PeGridParams from(const ChipConfig& config, const PeGridHostSettings& host);
};

class PeGrid : public sc_core::sc_module {
 public:
  // Its parameters are PeGridParams::from(shared.config, shared.grid_host).
  PeGrid(sc_core::sc_module_name name, SimShared& shared);
  ~PeGrid() override;

  // Bound to the command processor: told the outcome of every launch when it ends.
  sc_core::sc_port<LaunchDoneIf> launch_done_port;

  // From the firmware's launch_start: the launch starts in a later delta cycle, so its
  // completion never re-enters the firmware from inside launch_start.
  // Its image, arguments and PE DMA reach only `scope` (and the local stores).
  void submit(const isa::LaunchPacket& launch, const isa::AccessScope& scope);
  bool busy() const { return job_.has_value(); }

  struct Stats {
    uint64_t launches = 0;
    uint64_t failed_launches = 0;
    uint64_t sanitizer_errors = 0;  // launches failed by a sanitizer finding
    // Per check (memcheck, racecheck, initcheck, synccheck): launches its finding failed, and
    // the first such report.
    uint64_t sanitizer_by_check[4] = {};
    std::string first_sanitizer_report[4];
    uint64_t busy_ps = 0;
    uint64_t pe_cycles = 0;     // sum over PEs of their final cycle counts
    uint64_t instructions = 0;  // retired, all PEs
    uint64_t unit_ops = 0;      // DPE/SE/RE/MLU operations
    uint64_t dma_ops = 0;       // local DMA operations
    uint64_t dma_bytes = 0;     // payload bytes of local DMA
    LazyLoadStats lazy;         // local DMA loads left in device memory
    uint64_t barriers = 0;      // barrier releases
    uint64_t syncs = 0;         // SystemC waits taken by the scheduler
    uint64_t program_cache_hits = 0;
    uint64_t program_loads = 0;
  };
  const Stats& stats() const { return stats_; }
  nlohmann::ordered_json stats_json() const;

 private:
  struct CachedProgram {
    std::vector<uint8_t> bytes;
    // The image decoded once, entered at each kernel's entry that has launched (they share
    // its decoded code: Program::with_entry).
    std::map<uint64_t, std::shared_ptr<const sim::pe::Program>> entries;
    // An image in DRAM with counted writes: DeviceMemory::watched_writes() when its bytes were
    // last read; while the count stays there, they are unchanged.
    bool counted = false;
    uint64_t writes = 0;
    // The image's source lines (its DWARF line table), read when a report first needs them.
    std::shared_ptr<const sim::pe::LineTable> lines;
  };

  void run();
  // Runs the launch to completion; returns its failure, if any.
  isa::Status execute(const isa::LaunchPacket& launch);
  // Reads, parses and decodes the image (cached), or explains why it cannot be run.
  isa::Status load_program(const isa::LaunchPacket& launch,
                           std::shared_ptr<const sim::pe::Program>& out);
  // `report` with the source line of each pc it names, where the launch's image carries a
  // line table (kernels built with -g or -gline-tables-only).
  // The pcs of `frames` (where a PE failed, the earlier operations a finding names, each with
  // the ra it ran with) also name the line that called their function.
  std::string with_source_lines(const isa::LaunchPacket& launch, const std::string& report,
                                std::span<const sim::pe::LineTable::Frame> frames = {});
  // Runs the PEs that are ready through the slices of the quantum that ends at `horizon`, in
  // the sequential order (above).
  void run_slices(const std::vector<ProcessingElement*>& pes, uint64_t horizon);
  // Runs `pe` up to `horizon_cycles`; `order` is its place in the sequential order.
  void run_pe(ProcessingElement& pe, uint64_t order, uint64_t horizon_cycles);
  // Advances SystemC time to `ps` (no-op if already there).
  void sync_to(uint64_t ps);
  // Finishes every PE's deferred unit work (see pe::UnitWorkers).
  void join_units();
  // Before device bytes `span` are read or written other than by the PE that owns them: a PE
  // whose local store they are in, or (for a write) whose loads may still read them, copies
  // its loads and finishes its queued work.
  void before_device_access(isa::ByteSpan span, bool write);
  // What a PE reaches outside itself: these, its parameters and its clock.
  PeEnvironment pe_environment();

  SimShared& shared_;
  PeGridParams params_;
  PeClock clock_;
  std::optional<isa::LaunchPacket> job_;
  isa::AccessScope scope_;  // of the launch in job_
  sc_core::sc_event start_;
  std::vector<std::unique_ptr<ProcessingElement>> pes_;  // one per chip PE, created on first use
  std::unique_ptr<sim::pe::UnitWorkers> workers_;
  std::map<uint64_t, CachedProgram> cache_;  // by image address
  Stats stats_;
};

}  // namespace mtia::sim::detail
