// Performance traces and run summaries (docs/architecture.md, "Traces").
//
// A device records a Chrome trace (open trace.json in https://ui.perfetto.dev) when its trace
// level is not kOff; Device::write_artifacts writes it with the effective configuration
// (config.json), the device statistics (stats.json) and the run summary (summary.json),
// computed from the recorded events; summarize_trace() computes the same summary from the
// trace file alone.
//
// Turning it on, first match wins: Device::set_trace_level(); DeviceOptions::trace; the
// environment variable MTIA_EMU_TRACE=off|kernels|units; otherwise off. The trace keeps at
// most DeviceOptions::trace_max_events events (else $MTIA_EMU_TRACE_MAX_EVENTS, else
// 1,000,000); past that it counts what it dropped, says so in the log and in its metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "mtia/trace/level.h"
#include "mtia/trace/summary.h"

namespace mtia {

// The trace level (off, kernels, units) and its names, as the device's trace layer defines
// them (mtia/trace/level.h). mtia::TraceLevel::kOff is the default.
using trace::parse_trace_level;
using trace::trace_level_name;
using trace::TraceLevel;

inline constexpr uint64_t kDefaultTraceMaxEvents = trace::kDefaultTraceMaxEvents;

// ---- run summary ----------------------------------------------------------------------------

// The run summary and its parts, as the trace layer defines them (mtia/trace/summary.h):
// TracePeaks, KernelSummary (per kernel name), CopySummary (per kind of host copy) and
// TraceSummary with to_json() (summary.json) and to_text().
using trace::CopySummary;
using trace::KernelSummary;
using trace::TracePeaks;
using trace::TraceSummary;

// Computes the summary of a trace written by Device::write_artifacts from its text alone.
// Throws mtia::Error(kInvalidArgument) naming what is wrong when it is not such a trace.
TraceSummary summarize_trace(std::string_view trace_json);
// The same for a file; also throws kInvalidArgument when it cannot be read.
TraceSummary summarize_trace_file(const std::string& path);

// ---- several devices -------------------------------------------------------------------------

// Each device writes its own trace (Device::write_artifacts). This merges the trace.json files
// of several devices, device k being the k-th file, into one file `out` that ui.perfetto.dev
// shows with one process track per device ("mtia:k ..."), each on its own simulated clock
// (mtia/trace/merge.h). Throws kInvalidArgument naming a file that cannot be read or is not a
// device's trace, or an `out` that cannot be written.
void merge_trace_files(const std::vector<std::string>& files, const std::string& out);

}  // namespace mtia
