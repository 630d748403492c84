#include "dma_engine.h"

#include <cassert>

#include "command_processor_module.h"
#include "mtia/isa/decode.h"
#include "sim_loggers.h"

namespace mtia::sim::detail {

DmaEngine::DmaEngine(sc_core::sc_module_name name, unsigned index, SimShared& shared)
    : sc_core::sc_module(name), index_(index), shared_(shared) {
  SC_HAS_PROCESS(DmaEngine);
  SC_THREAD(run);
  set_stack_size(kThreadStackBytes);
}

void DmaEngine::submit(const firmware::DmaJob& job, uint32_t queue) {
  assert(!job_);
  job_ = job;
  job_queue_ = queue;
  start_.notify(sc_core::SC_ZERO_TIME);
}

void DmaEngine::run() {
  MemorySystem& memory = *shared_.memory;
  for (;;) {
    while (!job_) wait(start_);
    shared_.sync_time();
    const uint64_t begin = sc_core::sc_time_stamp().value();
    const bool fill = job_->kind == firmware::DmaJob::Kind::kFill;
    const bool link = job_->kind == firmware::DmaJob::Kind::kLink;
    const DmaReach reach{job_->scope, /*launch_scratch=*/false};
    const DmaPlan plan = fill   ? memory.schedule_fill(job_->fill, begin, reach)
                         : link ? memory.schedule_link(job_->link, begin, reach)
                                : memory.schedule_copy(job_->copy, begin, reach);
    // One wait per job: the data moves at the end, when the transfer is complete.
    wait(ps(plan.end_ps - begin));
    shared_.sync_time();
    const isa::Status result = plan.status.ok() ? memory.perform(plan) : plan.status;

    // The trace shows the bytes charged on the path's bottleneck (the busiest resource).
    int busiest = -1;
    for (int r = 0; r < kNumResources; ++r) {
      effective_bytes_ += plan.effective_bytes[r];
      if (plan.effective_bytes[r] == 0) continue;
      if (busiest < 0 || plan.busy_ps[r] > plan.busy_ps[busiest] ||
          (plan.busy_ps[r] == plan.busy_ps[busiest] &&
           plan.effective_bytes[r] > plan.effective_bytes[busiest])) {
        busiest = r;
      }
    }
    const uint64_t eff = busiest < 0 ? 0 : plan.effective_bytes[busiest];
    ++jobs_;
    busy_ps_ += plan.end_ps - begin;
    if (result.ok()) {
      bytes_ += plan.payload_bytes;
    } else {
      ++faults_;
    }
    Tracer::DmaEvent ev;
    ev.start_ps = begin;
    ev.end_ps = plan.end_ps;
    ev.fill = fill;
    ev.bytes = plan.payload_bytes;
    ev.src = fill ? 0 : plan.copy.src.addr;
    ev.src_space = fill ? 0 : plan.copy.src.space;
    ev.dst = fill ? plan.fill.dst.addr : plan.copy.dst.addr;
    ev.dst_space = fill ? plan.fill.dst.space : plan.copy.dst.space;
    ev.effective_bytes = eff;
    ev.error = static_cast<uint16_t>(isa::error_code(result));
    ev.queue = job_queue_;
    ev.seq = fill ? plan.fill.header.seq : plan.copy.header.seq;
    if (link) {
      ev.link = true;
      ev.link_receive = plan.link.direction == static_cast<uint8_t>(isa::LinkDirection::kReceive);
      ev.link_index = plan.link.link;
      ev.peer = plan.link.peer;
      ev.link_start_ps = plan.status.ok() ? plan.link_start_ps : begin;
      ev.link_end_ps = plan.status.ok() ? plan.link_end_ps : begin;
      ev.link_busy_ps = plan.link_busy_ps;
    }
    shared_.tracer->dma(index_, ev);
    shared_.tracer->reservations(plan);
    if (!result.ok()) {
      const isa::Failure& f = result.error();
      logger("sim.dma")->info("dma {}: {} failed: {} (arg0 0x{:x}, arg1 {})", index_,
                              fill   ? "fill"
                              : link ? "link transfer"
                                     : "copy",
                              isa::error_code_name(f.code), f.arg0, f.arg1);
    } else {
      logger("sim.dma")->debug("dma {}: {} of {} bytes, {} ps -> {} ps", index_,
                               fill   ? "fill"
                               : link ? "link transfer"
                                      : "copy",
                               plan.payload_bytes, begin, plan.end_ps);
    }
    job_.reset();
    done_port->dma_done(index_, result);
  }
}

Json DmaEngine::stats_json() const {
  Json m = Json::object();
  add_stat(m, "jobs", jobs_, "jobs", "copy and fill jobs executed, faulted ones included");
  add_stat(m, "bytes", bytes_, "bytes", "payload bytes moved by successful jobs");
  add_stat(m, "effective_bytes", effective_bytes_, "bytes",
           "bytes charged to memories and links, burst waste included");
  add_stat(m, "busy_ps", busy_ps_, "ps", "time from taking a job to reporting it done");
  add_stat(m, "faults", faults_, "jobs", "jobs that ended in an address fault");
  return m;
}

}  // namespace mtia::sim::detail
