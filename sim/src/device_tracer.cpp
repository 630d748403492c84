#include "device_tracer.h"

#include <array>
#include <utility>

#include "mtia/trace/trace_writer.h"
#include "sim_loggers.h"

namespace mtia::sim::detail {
namespace {

static_assert(static_cast<int>(trace::Memory::kPcieH2D) == static_cast<int>(Resource::kPcieH2D) &&
                  static_cast<int>(trace::Memory::kPcieD2H) ==
                      static_cast<int>(Resource::kPcieD2H) &&
                  static_cast<int>(trace::Memory::kDram) == static_cast<int>(Resource::kDram) &&
                  static_cast<int>(trace::Memory::kSram) == static_cast<int>(Resource::kSram) &&
                  trace::kNumMemories == kNumResources,
              "the trace numbers memories as the memory system numbers its resources");

trace::DeviceInfo device_info(std::string process_name, const ChipConfig& config) {
  trace::DeviceInfo d;
  d.process_name = std::move(process_name);
  d.config_json = to_json(config);
  d.num_queues = config.num_queues;
  d.dma_engines = config.dma_engines;
  d.pes = config.pe_rows * config.pe_cols;
  return d;
}

// The shared resource a side of a DMA uses, or -1 for a local store (private to its PE).
int resource_of(const SideInfo& side, bool is_source) {
  if (side.host) {
    return static_cast<int>(is_source ? Resource::kPcieH2D : Resource::kPcieD2H);
  }
  if (side.memory == MemoryKind::kDram) return static_cast<int>(Resource::kDram);
  if (side.memory == MemoryKind::kSram) return static_cast<int>(Resource::kSram);
  return -1;
}

}  // namespace

Tracer::Tracer(std::string process_name, const ChipConfig& config, TraceOptions options)
    : sink_(device_info(std::move(process_name), config), options,
            [](const std::string& message) { logger("sim.trace")->warn("{}", message); }) {}

void Tracer::reservations(const DmaPlan& plan, bool pe_dma) {
  if (!on() || !plan.status.ok()) return;
  // Payload through each resource: once per side that uses it (a copy within one memory
  // reads and writes it).
  std::array<uint64_t, kNumResources> sides{};
  if (!plan.is_fill) {
    if (int r = resource_of(plan.src, true); r >= 0) ++sides[r];
  }
  if (int r = resource_of(plan.dst, false); r >= 0) ++sides[r];
  for (int r = 0; r < kNumResources; ++r) {
    if (sides[r] == 0 || plan.effective_bytes[r] == 0) continue;
    sink_.reservation({static_cast<trace::Memory>(r), plan.resource_start_ps[r], plan.busy_ps[r],
                       plan.payload_bytes * sides[r]},
                      pe_dma);
  }
}

std::string Tracer::json(uint64_t now_ps) const {
  return sink_.read(
      [&](const trace::Recording& rec) { return trace::trace_json(rec, level(), now_ps); });
}

void Tracer::write_json(std::ostream& out, uint64_t now_ps) const {
  sink_.read(
      [&](const trace::Recording& rec) { trace::write_trace_json(rec, level(), now_ps, out); });
}

isa::Result<trace::TraceSummary> Tracer::summary(uint64_t now_ps) const {
  return sink_.read(
      [&](const trace::Recording& rec) { return trace::summarize(rec, level(), now_ps); });
}

}  // namespace mtia::sim::detail
