// The run summary of a trace (docs/architecture.md, "Traces"): unit utilization, FLOP/s and
// bytes/s against the preset's peaks, host copies, and a per-kernel roofline table.
//
// Computed in memory from a recording (summary.json is written from it), or from a trace.json
// alone (`mtia-emu trace summarize`); both give the same figures, byte for byte.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/isa/result.h"
#include "mtia/trace/level.h"
#include "mtia/trace/recording.h"

namespace mtia::trace {

// The preset's peaks, from the configuration of the run.
struct TracePeaks {
  uint32_t pes = 0;
  double clock_hz = 0;
  double dpe_int8_ops = 0;     // 2 x int8 MACs per cycle x PEs x clock, operations per second
  double dpe_16bit_flops = 0;  // fp16 and bf16
  double dpe_fp32_flops = 0;
  double se_fp32_flops = 0;                  // SE: fp32 lanes per cycle x PEs x clock
  std::map<std::string, double> memory_Bps;  // "dram", "sram", "pcie_h2d", "pcie_d2h"
};

// Kernel launches of one name.
struct KernelSummary {
  std::string name;
  uint64_t launches = 0;
  uint64_t failed = 0;
  uint64_t time_ps = 0;              // sum of launch durations (dispatch to completion)
  uint64_t flops = 0;                // 2 per DPE multiply-accumulate + 1 per SE element
  uint64_t bytes = 0;                // payload of the PEs' local DMA
  uint64_t dram_bytes = 0;           // of it, to or from DRAM (what the roofline counts)
  uint64_t sram_bytes = 0;           // of it, to or from the SRAM
  uint64_t dpe_macs[3] = {0, 0, 0};  // int8, fp16/bf16, fp32 inputs
  uint64_t se_elements = 0;
  // FLOPs per byte of DRAM traffic; 0 when no DRAM byte moved (data staged in SRAM or local
  // stores counts only when it crosses DRAM).
  double intensity = 0;
  // What bounds it on the roofline: the compute roof of its work ("dpe fp32", "dpe 16-bit",
  // "dpe int8" by its most frequent DPE input type, else "se fp32"), against the DRAM
  // bandwidth. ridge = peak / DRAM bandwidth; "compute" when intensity >= ridge or when it
  // moved no DRAM byte, "none" when it did no FLOP and moved no byte.
  std::string roof;
  double peak_flops = 0;
  double ridge = 0;
  std::string bound;                          // "compute" or "memory"
  double achieved_flops = 0;                  // flops / time
  double roof_flops = 0;                      // min(peak, intensity x DRAM bandwidth)
  std::map<std::string, double> utilization;  // unit -> busy / (time x PEs)
};

// Host-initiated DMA jobs of one kind ("host to device", "device to host", "device to
// device", "fill").
struct CopySummary {
  std::string kind;
  uint64_t jobs = 0;
  uint64_t bytes = 0;
  uint64_t time_ps = 0;  // sum of job durations on the DMA engines
};

struct TraceSummary {
  std::string preset;
  std::string trace_level;
  bool complete = true;  // no kernel-level event was dropped
  uint64_t dropped_events = 0;
  uint64_t simulated_time_ps = 0;  // the device's time when the trace was written
  TracePeaks peaks;
  uint64_t launches = 0;
  uint64_t failed_launches = 0;
  uint64_t launch_time_ps = 0;  // PE grid busy time
  uint64_t flops = 0;
  uint64_t launch_bytes = 0;                  // local DMA payload
  uint64_t launch_dram_bytes = 0;             // of it, to or from DRAM
  double achieved_flops = 0;                  // flops / launch_time
  std::map<std::string, double> utilization;  // unit -> busy / (launch time x PEs)
  struct Memory {
    uint64_t bytes = 0;       // payload through it, host and PE DMA
    double achieved_Bps = 0;  // bytes / simulated time
    double peak_Bps = 0;
  };
  std::map<std::string, Memory> memory;
  std::vector<CopySummary> copies;
  std::vector<KernelSummary> kernels;  // in order of first launch

  std::string to_json() const;  // summary.json
  std::string to_text() const;  // tables for people
};

// The summary of a recording, as the trace written from it would give (`level` and `now_ps`
// as for write_trace_json). Fails (kInvalidArgument) if the device's configuration lacks a
// peak.
isa::Result<TraceSummary> summarize(const Recording& rec, TraceLevel level, uint64_t now_ps);
// The summary of a trace.json from its text alone. Fails (kInvalidArgument, "not an mtia-emu
// trace: ...") naming what is wrong when it is not such a trace.
isa::Result<TraceSummary> summarize_trace_json(std::string_view trace_json);

}  // namespace mtia::trace
