// One PE of the grid: its RISC-V core, its units, its tags and its local DMA, and the work its
// local store still owes (DeferredWork). Private to sim/; see pe_grid.h for the timing model
// it implements. What it reaches outside itself is its PeEnvironment, which the grid fills in.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "deferred_work.h"
#include "initcheck.h"
#include "local_dma.h"
#include "mtia/isa/access_scope.h"
#include "mtia/sim/memory_system.h"
#include "mtia/sim/pe/line_table.h"
#include "mtia/sim/pe/riscv_core.h"
#include "mtia/sim/pe/unit_port.h"
#include "mtia/sim/pe/unit_task.h"
#include "mtia/sim/pe/units.h"
#include "pe_clock.h"
#include "racecheck.h"
#include "synccheck.h"

namespace mtia::sim::detail {

namespace pe = mtia::sim::pe;

struct SimShared;

// What a PE reaches outside itself. Everything referenced outlives the PE.
struct PeEnvironment {
  SimShared& shared;          // device memory, the sanitizer's state, the tracer
  pe::UnitWorkers& workers;   // the helper threads its deferred work runs on
  DeferredWork::Params work;  // how it hands work over and leaves loads in device memory
  PeClock clock;
  const isa::AccessScope& scope;  // the running launch's: what its DMA may reach
  // Another PE's local store is reached through its device window: chip PE `chip` finishes
  // its work on it first.
  std::function<void(uint32_t chip)> settle_pe;
  // Before this PE's DMA writes device bytes `span`: the PEs whose local store they are in, or
  // whose loads read them, finish their work first.
  std::function<void(isa::ByteSpan span)> before_device_write;
};

class ProcessingElement : public pe::UnitPort {
  using UnitOp = pe::UnitOp;
  using UnitResponse = pe::UnitResponse;
  using Extent = pe::FunctionalUnits::Extent;
  using Touched = pe::FunctionalUnits::Touched;

 public:
  ProcessingElement(PeEnvironment env, uint32_t chip_index, std::span<uint8_t> local_store,
                    const pe::UnitTiming& timing);

  // The PE's deferred work (DeferredWork): finish all of it; finish what reaches device
  // memory (at a barrier); copy the loads and finish all (before another reader of the local
  // store); queue the copies of the loads; whether a load may still read device bytes [lo, hi).
  void join() { work_.join(); }
  void join_device() { work_.join_device(); }
  void flush() { work_.flush(); }
  void copy_loads() { work_.copy_loads(); }
  bool reads_device(uint64_t lo, uint64_t hi) const { return work_.reads_device(lo, hi); }

  // The core touched bytes that unit work still owes: finish it first. With initcheck or
  // synccheck, every local-store access comes here: a store marks its bytes written, a load of
  // bytes nothing wrote is stopped, and so is an access to bytes an operation in flight writes
  // (or a store to bytes one reads).
  bool guarded_access(pe::RiscvCore& core, uint64_t pc, uint64_t offset, uint64_t bytes,
                      bool write) override;

  // initcheck: at the launch's start (after the core's start, which copies the program's
  // local-store data), only that data is written in the local store.
  void poison_local_store(const pe::Program& program);

  uint32_t chip_index() const { return chip_index_; }

  // Forgets the previous launch's tags; `t0_ps` is the launch's start (its cycle 0).
  void begin(uint64_t t0_ps);

  pe::RiscvCore& core() { return core_; }
  bool at_barrier = false;
  uint64_t barrier_arrival = 0;  // core cycle at which it reached the barrier
  // The sanitizer finding its fault reports (kSanitizerError): which check found it (one
  // isa::kSanitize* bit; 0 for a kernel fault), the report, and the frames of the earlier
  // operations it names (the grid adds where the PE stopped).
  struct Finding {
    uint32_t check = 0;
    std::string text;
    std::vector<pe::LineTable::Frame> frames;
  };
  Finding sanitizer_finding;
  // racecheck: the device bytes its DMAs touched since its last barrier.
  RaceLog race_log;
  // initcheck: the DRAM bytes its DMAs wrote since its last barrier (the grid adds them to
  // the device's record at each barrier and at the launch's end).
  ByteSet dram_written;
  uint64_t barrier_pc = 0;  // of the pe.barrier it waits at (or waited at last)

  UnitResponse issue(pe::RiscvCore& core, const pe::UnitRequest& r) override;

  // What the PE counted during a launch (PeGrid's statistics add it up at the launch's end).
  struct Counters {
    uint64_t unit_ops = 0;
    uint64_t dma_ops = 0;
    uint64_t dma_bytes = 0;
    LazyLoadStats lazy;
  };
  Counters counters;

  // Its place in the sequential order (pe_grid.h) when it faulted or exited with an error.
  static constexpr uint64_t kNotFailed = ~0ull;
  uint64_t failed_at = kNotFailed;

 private:
  // Takes a checked DMA's turn on the memory timelines and traces it; its completion cycle.
  uint64_t take_turn(DmaPlan& plan, uint64_t issue_ps);
  uint64_t add_tag(uint64_t done_cycle);

  // The trace (sim/src/device_tracer.h): whether it records, and a unit operation (`work` and the
  // matmul's input dtype as the tracer counts them) or local DMA of this PE.
  bool tracing() const;
  static uint8_t matmul_dtype(const pe::RiscvCore& core, uint64_t desc_addr);
  void trace_unit(pe::UnitKind kind, uint64_t start_ps, uint64_t end_ps, uint64_t work,
                  uint8_t matmul_dtype);
  void trace_dma(const DmaPlan& plan, uint64_t issue_ps);

  // The bytes of this PE's local store that one side of a DMA touches (empty if none). A side
  // in another PE's local store (through its device window) first finishes that PE's queued
  // work: its queue is not ordered with this one.
  Extent dma_side(uint8_t space, uint64_t addr, const uint64_t* strides, const mtia_pe_dma_desc& d);

  UnitResponse dma(pe::RiscvCore& core, const pe::UnitRequest& r);
  // memcheck (docs/sanitizer.md): what is wrong with the DMA's DRAM sides, or "" if nothing.
  std::string memcheck(const pe::UnitRequest& r, const DmaPlan& plan) const;
  // initcheck (docs/sanitizer.md): what DRAM bytes of a live allocation the DMA reads that
  // nothing has written, or "" if none (then its DRAM writes are recorded).
  std::string initcheck(const pe::UnitRequest& r, const mtia_pe_dma_desc& d, const DmaPlan& plan);
  // initcheck on the local store: a unit operation's operand rows (local-store offsets) that
  // it reads and writes; the finding for a read of bytes nothing wrote in this launch ("" if
  // none); the unit's writes marked.
  void unit_rows(const pe::RiscvCore& core, const pe::UnitRequest& r, std::vector<Extent>& reads,
                 std::vector<Extent>& writes);
  // synccheck: the local-store rows a DMA reads and writes (its LOCAL sides).
  static InFlight::Bytes dma_rows(const mtia_pe_dma_desc& d);
  std::string ls_unwritten(const char* what, uint64_t pc, Extent bytes) const;
  // synccheck: the finding for a pe.wait or pe.poll on a tag this PE never issued.
  std::string synccheck_tag(const pe::UnitRequest& r) const;
  // Records the finding of `check` (an isa::kSanitize* bit) and faults the unit instruction
  // with it; `earlier`: the frames of the earlier operations the report names.
  UnitResponse sanitizer_fault(uint32_t check, std::string text,
                               std::vector<pe::LineTable::Frame> earlier = {});
  // racecheck: logs the DMA's device-memory sides (DRAM and SRAM).
  void log_race_access(const pe::UnitRequest& r, const mtia_pe_dma_desc& d, const DmaPlan& plan);

  const PeEnvironment env_;
  uint32_t chip_index_;
  uint64_t ls_device_base_;
  pe::FunctionalUnits units_;  // DPE, SE, RE, MLU
  LocalDma dma_;
  pe::RiscvCore core_;
  uint64_t t0_ps_ = 0;
  std::vector<uint64_t> tag_done_;  // completion cycle of tag i + 1
  uint64_t all_done_ = 0;
  uint64_t unit_free_[static_cast<size_t>(pe::UnitKind::kCount)] = {};
  DeferredWork work_;          // after core_, which it guards
  bool ls_initcheck_ = false;  // initcheck watches the local store
  bool synccheck_ = false;     // synccheck watches the operations in flight
  bool ls_sanitize_ = false;   // either: the core guards the whole local store
  WrittenBits ls_written_;     // its bytes written in this launch
  InFlight in_flight_;         // synccheck: its operations not waited for
};

}  // namespace mtia::sim::detail
