// Writes a recording as Chrome trace-event JSON (trace.json; ui.perfetto.dev and
// chrome://tracing open it). docs/architecture.md, "Traces", describes what it holds.
//
// Two processes: the host (pid 1: one track per host thread with its API calls, and a track
// of completions) and the device (pid 2: the command processor, each queue, each DMA engine,
// the PE grid's launches, each PE's core and, at TraceLevel::kUnits, each PE's DPE, SE, RE,
// MLU and local-DMA lanes; counters for memory bandwidth and queue depth). Slices are
// complete ("X") events in simulated time; flow arrows (bind_id, flow_out / flow_in) lead from
// the host call that submitted a packet to the packet on its queue, to the DMA job or launch
// that ran it, and to its completion.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "mtia/trace/level.h"
#include "mtia/trace/recording.h"

namespace mtia::trace {

// `level` is the trace's level as it is written and `now_ps` the simulated time reached
// (both go into the metadata).
void write_trace_json(const Recording& rec, TraceLevel level, uint64_t now_ps, std::ostream& out);
// The same as text.
std::string trace_json(const Recording& rec, TraceLevel level, uint64_t now_ps);

}  // namespace mtia::trace
