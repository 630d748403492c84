// One DMA engine as a SystemC module. Private to sim/.
#pragma once

#include <systemc>

#include <cstdint>
#include <optional>

#include "mtia/firmware/platform.h"
#include "sim_shared.h"

namespace mtia::sim::detail {

// Where an engine reports the end of its job (the command processor), through
// DmaEngine::done_port: called on the simulator thread at the job's end time.
class DmaDoneIf : public virtual sc_core::sc_interface {
 public:
  virtual void dma_done(unsigned engine, const isa::Status& outcome) = 0;
};

// One DMA engine: takes a job from the firmware, validates and times it through the
// MemorySystem, waits once until its end, moves the data and reports back.
class DmaEngine : public sc_core::sc_module {
 public:
  DmaEngine(sc_core::sc_module_name name, unsigned index, SimShared& shared);
  // Called from the firmware's dma_start; the job starts in a later delta cycle, so the
  // completion never re-enters the firmware from inside dma_start. `queue` is the queue of
  // the packet it runs, for the trace (Tracer::kNoQueue when unknown).
  void submit(const firmware::DmaJob& job, uint32_t queue);
  bool busy() const { return job_.has_value(); }
  Json stats_json() const;

  sc_core::sc_port<DmaDoneIf> done_port;

 private:
  void run();

  unsigned index_;
  SimShared& shared_;
  std::optional<firmware::DmaJob> job_;
  uint32_t job_queue_ = Tracer::kNoQueue;
  sc_core::sc_event start_;
  uint64_t jobs_ = 0;
  uint64_t bytes_ = 0;
  uint64_t effective_bytes_ = 0;
  uint64_t busy_ps_ = 0;
  uint64_t faults_ = 0;
};

}  // namespace mtia::sim::detail
