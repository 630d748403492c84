// The figures a run summary is computed from. Both sources fill it - a recording in memory
// and a trace.json read back - and one computation turns it into the summary, so the two
// agree exactly.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mtia/trace/events.h"
#include "mtia/trace/summary.h"

namespace mtia::trace::detail {

struct SummaryInput {
  std::string preset;
  std::string trace_level;
  bool complete = true;
  uint64_t dropped_events = 0;
  uint64_t simulated_time_ps = 0;
  TracePeaks peaks;
  // Ended launches in order of dispatch.
  struct Launch {
    std::string name;
    uint64_t dur_ps = 0;
    uint64_t pes = 0;
    bool ok = true;
    uint64_t flops = 0;
    uint64_t dma_bytes = 0;
    uint64_t dram_bytes = 0;
    uint64_t sram_bytes = 0;
    uint64_t dpe_macs[3] = {0, 0, 0};
    uint64_t se_elements = 0;
    std::array<uint64_t, kNumUnits> busy_ps{};
  };
  std::vector<Launch> launches;
  // Host DMA jobs that succeeded.
  struct Copy {
    std::string kind;  // "host to device", "device to host", "device to device", "fill"
    uint64_t bytes = 0;
    uint64_t dur_ps = 0;
  };
  std::vector<Copy> copies;
  std::map<std::string, uint64_t> memory_bytes;  // payload per memory name
};

// The preset's name and peaks from a configuration ({"key": {"value": ...}}); an error
// status names a missing key.
isa::Status read_config(const nlohmann::json& config, SummaryInput& in);
// The kind of copy a successful host DMA job was.
const char* copy_kind(bool fill, bool from_host, bool to_host);
TraceSummary compute_summary(const SummaryInput& in);

}  // namespace mtia::trace::detail
